//! NIP-01 events with typed fields, and their canonical serialization.
//!
//! Owns the strict wire format of an event: lowercase hex of exact length for `id`, `pubkey` and
//! `sig`, integer `created_at` and `kind` in range, `tags` as arrays of strings, `content` as a
//! string. It computes the id from the re-serialized parsed fields (never the received bytes).
//! It does not check signatures: that is [`super::verify`].

use std::fmt;
use std::sync::Arc;

use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

/// Why an event could not be parsed from JSON.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    /// The JSON did not have the shape or the types of a NIP-01 event.
    #[error("{0}")]
    Malformed(String),
    /// A tag with no elements; hearth refuses them (docs/src/protocol-decisions.md, "ambiguous events").
    #[error("tag {0} is empty")]
    EmptyTag(usize),
}

/// Parses exactly `2 * N` lowercase hex characters.
fn parse_lower_hex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != 2 * N || !s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return None;
    }
    let mut out = [0u8; N];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

macro_rules! hex_newtype {
    ($(#[$doc:meta])* $name:ident, $len:expr, $what:expr) => {
        $(#[$doc])*
        #[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub [u8; $len]);

        impl $name {
            /// Parses exactly the lowercase hex form; anything else is `None`.
            pub fn from_hex(s: &str) -> Option<Self> {
                parse_lower_hex::<$len>(s).map(Self)
            }

            /// The lowercase hex form.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// The raw bytes.
            pub fn as_bytes(&self) -> &[u8; $len] {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl Serialize for $name {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.to_hex())
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct V;
                impl Visitor<'_> for V {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str(concat!($what, " as ", stringify!($len), "-byte lowercase hex"))
                    }
                    fn visit_str<E: de::Error>(self, v: &str) -> Result<$name, E> {
                        $name::from_hex(v).ok_or_else(|| {
                            E::custom(format_args!(
                                "{} must be {} lowercase hex characters",
                                $what,
                                2 * $len
                            ))
                        })
                    }
                }
                d.deserialize_str(V)
            }
        }
    };
}

hex_newtype!(
    /// The sha256 of an event's canonical serialization.
    EventId,
    32,
    "id"
);
hex_newtype!(
    /// An x-only secp256k1 public key (BIP-340).
    PubKey,
    32,
    "pubkey"
);
hex_newtype!(
    /// A BIP-340 schnorr signature.
    Sig,
    64,
    "sig"
);

/// Seconds since the Unix epoch, as NIP-01's `created_at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        Timestamp(secs)
    }
}

/// An event kind, 0..=65535.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Kind(pub u16);

/// How the relay keeps events of a kind (NIP-01).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindClass {
    /// Stored as they come.
    Regular,
    /// Only the newest per (pubkey, kind) is kept.
    Replaceable,
    /// Delivered live, never stored.
    Ephemeral,
    /// Only the newest per (pubkey, kind, `d` tag) is kept.
    Addressable,
}

impl Kind {
    /// Kind 5, a NIP-09 deletion request.
    pub const DELETION: Kind = Kind(5);
    /// NIP-59 gift wrap.
    pub const GIFT_WRAP: Kind = Kind(1059);
    /// Kind 22242, a NIP-42 authentication event.
    pub const AUTH: Kind = Kind(22242);

    /// The storage class of this kind.
    pub fn class(self) -> KindClass {
        match self.0 {
            0 | 3 | 10000..=19999 => KindClass::Replaceable,
            20000..=29999 => KindClass::Ephemeral,
            30000..=39999 => KindClass::Addressable,
            _ => KindClass::Regular,
        }
    }

    /// True for 20000..=29999: never stored, and never billed to the durable `messages` quota.
    pub fn is_ephemeral(self) -> bool {
        self.class() == KindClass::Ephemeral
    }
}

/// A parsed NIP-01 event. Its id and signature are not yet checked: see [`super::verify`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The claimed id.
    pub id: EventId,
    /// The author.
    pub pubkey: PubKey,
    /// Creation time claimed by the author.
    pub created_at: Timestamp,
    /// The kind.
    pub kind: Kind,
    /// Tags: arrays of strings, never empty.
    pub tags: Vec<Vec<String>>,
    /// Content, kept byte for byte.
    pub content: String,
    /// The claimed signature.
    pub sig: Sig,
}

impl Event {
    /// Parses one event object from JSON text, strictly.
    pub fn from_json(json: &str) -> Result<Event, EventError> {
        let event: Event = serde_json::from_str(json).map_err(|e| EventError::Malformed(strip_position(&e)))?;
        event.check_tags()?;
        Ok(event)
    }

    /// Parses one event from an already-parsed JSON value, strictly.
    pub fn from_raw(raw: &serde_json::value::RawValue) -> Result<Event, EventError> {
        Event::from_json(raw.get())
    }

    fn check_tags(&self) -> Result<(), EventError> {
        match self.tags.iter().position(|t| t.is_empty()) {
            Some(i) => Err(EventError::EmptyTag(i)),
            None => Ok(()),
        }
    }

    /// The exact string whose sha256 is the id: compact JSON of
    /// `[0,pubkey,created_at,kind,tags,content]`, escaped as `JSON.stringify` does.
    pub fn canonical_json(&self) -> String {
        serde_json::to_string(&(0u8, &self.pubkey, self.created_at.0, self.kind.0, &self.tags, &self.content))
            .unwrap_or_default()
    }

    /// The id computed from the fields, whatever `id` claims.
    pub fn compute_id(&self) -> EventId {
        let digest = Sha256::digest(self.canonical_json().as_bytes());
        EventId(digest.into())
    }

    /// The compact JSON of the whole event, as the relay sends it.
    pub fn to_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_string(self)
    }

    /// [`Event::to_json`], ready to be shared between frames.
    pub fn to_shared_json(&self) -> Result<EventJson, serde_json::Error> {
        Ok(EventJson(self.to_json()?.into()))
    }

    /// Values at index 1 of every tag named `name` (tags with a value only).
    pub fn tag_values<'a>(&'a self, name: &str) -> impl Iterator<Item = &'a str> {
        tag_values(&self.tags, name)
    }

    /// The first value of the first `d` tag, `""` when absent (NIP-01 addressable events).
    pub fn d_tag(&self) -> &str {
        self.tag_values("d").next().unwrap_or("")
    }

    /// The NIP-40 expiration time, when a well-formed `expiration` tag is present.
    pub fn expiration(&self) -> Option<Timestamp> {
        self.tag_values("expiration").next().and_then(|v| v.parse::<u64>().ok()).map(Timestamp)
    }

    /// True when the event carries the NIP-70 `["-"]` tag.
    pub fn is_protected(&self) -> bool {
        self.tags.iter().any(|t| t.len() == 1 && t[0] == "-")
    }
}

/// serde_json appends " at line L column C"; a client gets the reason without our offsets.
fn strip_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(i) => text[..i].to_string(),
        None => text,
    }
}

/// An event's compact JSON text, serialized once and shared: between every subscriber a new
/// event goes to, and from the store's reader to the socket.
///
/// Only code that writes the JSON itself makes one: [`Event::to_shared_json`] (serde), and the
/// store's renderer, which writes the same bytes from a stored record (through the crate-private
/// `EventJson::written_by_hearth`). So a relay frame splices it in as it is, without parsing it
/// again (that check was an eighth of the relay's CPU in a query).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct EventJson(Arc<str>);

impl EventJson {
    /// JSON that hearth's own code has just written for an event; it is not checked again.
    pub(crate) fn written_by_hearth(json: String) -> EventJson {
        EventJson(json.into())
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for EventJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// As the JSON value it is (for bodies serialized with serde, such as the REST API's).
impl Serialize for EventJson {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let raw: &serde_json::value::RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

/// Values at index 1 of every tag in `tags` named `name` (tags with a value only).
pub fn tag_values<'a>(tags: &'a [Vec<String>], name: &str) -> impl Iterator<Item = &'a str> {
    tags.iter()
        .filter(move |t| t.first().map(String::as_str) == Some(name))
        .filter_map(|t| t.get(1).map(String::as_str))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_classes_follow_nip01_ranges() {
        assert_eq!(Kind(0).class(), KindClass::Replaceable);
        assert_eq!(Kind(1).class(), KindClass::Regular);
        assert_eq!(Kind(3).class(), KindClass::Replaceable);
        assert_eq!(Kind(9999).class(), KindClass::Regular);
        assert_eq!(Kind(10000).class(), KindClass::Replaceable);
        assert_eq!(Kind(19999).class(), KindClass::Replaceable);
        assert_eq!(Kind(20000).class(), KindClass::Ephemeral);
        assert_eq!(Kind(29999).class(), KindClass::Ephemeral);
        assert_eq!(Kind(30000).class(), KindClass::Addressable);
        assert_eq!(Kind(39999).class(), KindClass::Addressable);
        assert_eq!(Kind(40000).class(), KindClass::Regular);
        assert!(Kind(25000).is_ephemeral());
        assert!(!Kind(30000).is_ephemeral());
    }

    #[test]
    fn hex_must_be_lowercase_and_exact_length() {
        let lower = "a".repeat(64);
        assert!(EventId::from_hex(&lower).is_some());
        assert!(EventId::from_hex(&"A".repeat(64)).is_none());
        assert!(EventId::from_hex(&"a".repeat(66)).is_none());
        assert!(EventId::from_hex(&"a".repeat(62)).is_none());
        assert!(EventId::from_hex(&"g".repeat(64)).is_none());
        assert!(Sig::from_hex(&"0".repeat(128)).is_some());
    }

    #[test]
    fn serializer_matches_every_vector_in_ids_jsonl() {
        let valid = include_str!("../../tests/vectors/valid.jsonl");
        let ids = include_str!("../../tests/vectors/ids.jsonl");
        let mut by_id = std::collections::HashMap::new();
        for line in valid.lines().filter(|l| !l.trim().is_empty()) {
            let event = Event::from_json(line).unwrap();
            by_id.insert(event.id, event);
        }
        let mut checked = 0;
        for line in ids.lines().filter(|l| !l.trim().is_empty()) {
            let v: serde_json::Value = serde_json::from_str(line).unwrap();
            let id = EventId::from_hex(v["id"].as_str().unwrap()).unwrap();
            let event = &by_id[&id];
            assert_eq!(event.canonical_json(), v["serialization"].as_str().unwrap());
            assert_eq!(event.compute_id(), id);
            checked += 1;
        }
        assert_eq!(checked, 55);
    }

    #[test]
    fn wrong_types_are_malformed() {
        let base = r#"{"id":"ID","pubkey":"PK","created_at":CA,"kind":K,"tags":[],"content":"","sig":"SIG"}"#
            .replace("ID", &"a".repeat(64))
            .replace("PK", &"b".repeat(64))
            .replace("SIG", &"c".repeat(128));
        assert!(Event::from_json(&base.replace("CA", "1").replace("K", "1")).is_ok());
        for (ca, k) in [("1.5", "1"), ("\"1\"", "1"), ("-1", "1"), ("1", "65536"), ("1", "-1")] {
            let json = base.replace("CA", ca).replace("K", k);
            assert!(matches!(Event::from_json(&json), Err(EventError::Malformed(_))), "{json}");
        }
    }

    #[test]
    fn empty_tag_is_refused() {
        let json = r#"{"id":"ID","pubkey":"PK","created_at":1,"kind":1,"tags":[["a"],[]],"content":"","sig":"SIG"}"#
            .replace("ID", &"a".repeat(64))
            .replace("PK", &"b".repeat(64))
            .replace("SIG", &"c".repeat(128));
        assert_eq!(Event::from_json(&json), Err(EventError::EmptyTag(1)));
    }
}
