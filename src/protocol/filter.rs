//! NIP-01 subscription filters: parsing and matching.
//!
//! Owns the filter shape (`ids`, `authors`, `kinds`, `#<letter>`, `since`, `until`, `limit`, and
//! NIP-50's `search` as its text), its strict parsing (exact hex, no prefixes, unknown fields
//! refused) and `matches`. Which index a filter is served from is the store's business; clamping
//! `limit` and parsing `search` (`search::parse`, with the relay's length limit) the caller's.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use super::event::{Event, EventId, Kind, PubKey, Timestamp, tag_values};

/// One NIP-01 filter. Conditions AND; absent ones match everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Exact event ids.
    pub ids: Option<Vec<EventId>>,
    /// Exact authors.
    pub authors: Option<Vec<PubKey>>,
    /// Kinds.
    pub kinds: Option<Vec<Kind>>,
    /// `#<letter>` conditions: the first value of a tag with that name must be in the list.
    pub tags: BTreeMap<char, Vec<String>>,
    /// Inclusive lower bound on `created_at`.
    pub since: Option<Timestamp>,
    /// Inclusive upper bound on `created_at`.
    pub until: Option<Timestamp>,
    /// How many stored events at most (the newest; with `search`, the most relevant).
    pub limit: Option<u64>,
    /// NIP-50: the search text, as sent. [`Filter::matches`] does not look at it: whoever serves
    /// a filter with a search asks the search index, or matches the text itself.
    pub search: Option<String>,
}

impl Filter {
    /// True when `event` satisfies every condition but `search`.
    pub fn matches(&self, event: &Event) -> bool {
        self.matches_fields(&event.id, &event.pubkey, event.kind, event.created_at) && self.matches_tags(&event.tags)
    }

    /// True when an event with these tags satisfies every tag condition (the store checks these
    /// from a record's tags alone, without decoding the rest of the event).
    pub fn matches_tags(&self, tags: &[Vec<String>]) -> bool {
        self.tags.iter().all(|(letter, values)| {
            let mut buf = [0u8; 4];
            let name: &str = letter.encode_utf8(&mut buf);
            tag_values(tags, name).any(|v| values.iter().any(|want| want == v))
        })
    }

    /// True when an event with these fields satisfies every condition but the tag conditions
    /// (the store checks these from its index, without reading the event).
    pub fn matches_fields(&self, id: &EventId, pubkey: &PubKey, kind: Kind, created_at: Timestamp) -> bool {
        self.ids.as_ref().is_none_or(|ids| ids.contains(id))
            && self.authors.as_ref().is_none_or(|authors| authors.contains(pubkey))
            && self.kinds.as_ref().is_none_or(|kinds| kinds.contains(&kind))
            && self.since.is_none_or(|s| created_at >= s)
            && self.until.is_none_or(|u| created_at <= u)
    }

    /// Why this filter cannot select a set of events (an export, a NIP-77 item set, a sync
    /// round): those take every event a filter matches, and a `search` ranks some of them. None
    /// when it has no `search`.
    pub fn search_refusal(&self) -> Option<&'static str> {
        self.search
            .is_some()
            .then_some("a filter that selects every event it matches cannot have \"search\"; leave it out")
    }

    /// True when the filter can match nothing at all (an empty list somewhere, or since > until).
    pub fn is_empty_set(&self) -> bool {
        self.ids.as_ref().is_some_and(Vec::is_empty)
            || self.authors.as_ref().is_some_and(Vec::is_empty)
            || self.kinds.as_ref().is_some_and(Vec::is_empty)
            || self.tags.values().any(Vec::is_empty)
            || matches!((self.since, self.until), (Some(s), Some(u)) if s > u)
    }
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Filter;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a filter object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Filter, A::Error> {
                let mut filter = Filter::default();
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "ids" => set_once(&mut filter.ids, map.next_value()?, "ids")?,
                        "authors" => set_once(&mut filter.authors, map.next_value()?, "authors")?,
                        "kinds" => set_once(&mut filter.kinds, map.next_value()?, "kinds")?,
                        "since" => set_once(&mut filter.since, map.next_value()?, "since")?,
                        "until" => set_once(&mut filter.until, map.next_value()?, "until")?,
                        "limit" => set_once(&mut filter.limit, map.next_value()?, "limit")?,
                        "search" => set_once(&mut filter.search, map.next_value()?, "search")?,
                        _ => {
                            let letter = tag_letter(&key)
                                .ok_or_else(|| de::Error::custom(format_args!("unsupported filter field `{key}`")))?;
                            let values: Vec<String> = map.next_value()?;
                            if filter.tags.insert(letter, values).is_some() {
                                return Err(de::Error::custom(format_args!("duplicate filter field `{key}`")));
                            }
                        }
                    }
                }
                Ok(filter)
            }
        }
        d.deserialize_map(V)
    }
}

fn set_once<T, E: de::Error>(slot: &mut Option<T>, value: T, name: &str) -> Result<(), E> {
    if slot.replace(value).is_some() {
        return Err(E::custom(format_args!("duplicate filter field `{name}`")));
    }
    Ok(())
}

/// `#x` with x one ASCII letter.
fn tag_letter(key: &str) -> Option<char> {
    let mut chars = key.chars();
    match (chars.next(), chars.next(), chars.next()) {
        (Some('#'), Some(c), None) if c.is_ascii_alphabetic() => Some(c),
        _ => None,
    }
}

impl Serialize for Filter {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        if let Some(v) = &self.ids {
            map.serialize_entry("ids", v)?;
        }
        if let Some(v) = &self.authors {
            map.serialize_entry("authors", v)?;
        }
        if let Some(v) = &self.kinds {
            map.serialize_entry("kinds", v)?;
        }
        for (letter, values) in &self.tags {
            map.serialize_entry(&format!("#{letter}"), values)?;
        }
        if let Some(v) = &self.since {
            map.serialize_entry("since", v)?;
        }
        if let Some(v) = &self.until {
            map.serialize_entry("until", v)?;
        }
        if let Some(v) = &self.limit {
            map.serialize_entry("limit", v)?;
        }
        if let Some(v) = &self.search {
            map.serialize_entry("search", v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Keys;

    fn event(kind: u16, at: u64, tags: &[(&str, &str)]) -> Event {
        let keys = Keys::parse(&"02".repeat(32)).unwrap();
        let tags = tags.iter().map(|(n, v)| vec![n.to_string(), v.to_string()]).collect();
        keys.sign(Timestamp(at), Kind(kind), tags, "x")
    }

    fn filter(json: &str) -> Filter {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn since_and_until_are_inclusive() {
        let e = event(1, 100, &[]);
        assert!(filter(r#"{"since":100,"until":100}"#).matches(&e));
        assert!(!filter(r#"{"since":101}"#).matches(&e));
        assert!(!filter(r#"{"until":99}"#).matches(&e));
    }

    #[test]
    fn tag_filters_match_first_value_only() {
        let e = event(1, 1, &[("t", "rust"), ("p", "x")]);
        assert!(filter(r##"{"#t":["go","rust"]}"##).matches(&e));
        assert!(!filter(r##"{"#t":["go"]}"##).matches(&e));
        let multi = Keys::parse(&"02".repeat(32)).unwrap().sign(
            Timestamp(1),
            Kind(1),
            vec![vec!["t".into(), "a".into(), "rust".into()]],
            "",
        );
        assert!(!filter(r##"{"#t":["rust"]}"##).matches(&multi));
    }

    #[test]
    fn conditions_and_together() {
        let e = event(7, 5, &[("e", "abc")]);
        assert!(filter(r##"{"kinds":[7],"#e":["abc"]}"##).matches(&e));
        assert!(!filter(r##"{"kinds":[1],"#e":["abc"]}"##).matches(&e));
    }

    #[test]
    fn prefixes_and_unknown_fields_are_refused() {
        assert!(serde_json::from_str::<Filter>(r#"{"ids":["abcd"]}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"search":1}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"search":"a","search":"b"}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"searches":"x"}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r##"{"#tt":["x"]}"##).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"limit":-1}"#).is_err());
        assert!(serde_json::from_str::<Filter>(r#"{"kinds":[1],"kinds":[2]}"#).is_err());
    }

    #[test]
    fn empty_lists_match_nothing() {
        assert!(filter(r#"{"ids":[]}"#).is_empty_set());
        assert!(filter(r#"{"since":5,"until":4}"#).is_empty_set());
        assert!(!filter(r#"{}"#).is_empty_set());
    }

    #[test]
    fn serialization_round_trips() {
        let f = filter(r##"{"kinds":[1,2],"#t":["a"],"since":3,"limit":4,"search":"caf\u00e9 \"a b\""}"##);
        assert_eq!(f.search.as_deref(), Some("café \"a b\""));
        let back: Filter = serde_json::from_str(&serde_json::to_string(&f).unwrap()).unwrap();
        assert_eq!(f, back);
    }
}
