//! Planning a filter onto the index list that serves it: the ids' catalogue lookups, or the
//! lists of one author × kind pair, one author, one tag value, one kind, or every event; and
//! whether the lists alone answer it (a count without reading a record).

use super::index::Key;
use crate::protocol::{EventId, Filter};

/// More author × kind pairs than this are scanned by author only.
const MAX_PAIRS: usize = 256;

/// True when every event that `keys` (a plan of `filter`) list matches `filter` within its
/// `since` and `until`: the filter has no condition besides what names the lists (expiry aside).
pub(crate) fn lists_are_exact(filter: &Filter, keys: &[Key]) -> bool {
    let (authors, kinds, tags) = (filter.authors.is_some(), filter.kinds.is_some(), filter.tags.len());
    let exact = |key: &Key| match key {
        Key::All => !authors && !kinds && tags == 0,
        Key::Author(_) => authors && !kinds && tags == 0,
        Key::Kind(_) => !authors && kinds && tags == 0,
        Key::AuthorKind(..) => authors && kinds && tags == 0,
        Key::Tag(..) => !authors && !kinds && tags == 1,
    };
    filter.ids.is_none() && keys.iter().all(exact)
}

/// Which index list serves a filter, and whether the filter's tag conditions must be checked
/// against the record (authors, kinds, times and expiry are checked from the index).
pub(crate) enum Plan {
    Ids(Vec<EventId>),
    Scan { keys: Vec<Key>, check_tags: bool },
}

impl Plan {
    pub(crate) fn of(f: &Filter) -> Plan {
        if let Some(ids) = &f.ids {
            return Plan::Ids(ids.clone());
        }
        let has_tags = !f.tags.is_empty();
        if let (Some(authors), Some(kinds)) = (&f.authors, &f.kinds)
            && authors.len() * kinds.len() <= MAX_PAIRS
        {
            let keys = authors.iter().flat_map(|a| kinds.iter().map(move |k| Key::AuthorKind(*a, *k))).collect();
            return Plan::Scan { keys, check_tags: has_tags };
        }
        if let Some(authors) = &f.authors {
            return Plan::Scan { keys: authors.iter().map(|a| Key::Author(*a)).collect(), check_tags: has_tags };
        }
        if let Some((letter, values)) = f.tags.iter().min_by_key(|(_, v)| v.len())
            && letter.is_ascii()
        {
            let letter = *letter as u8;
            let keys = values.iter().map(|v| Key::Tag(letter, v.as_str().into())).collect();
            return Plan::Scan { keys, check_tags: f.tags.len() > 1 };
        }
        if let Some(kinds) = &f.kinds {
            return Plan::Scan { keys: kinds.iter().map(|k| Key::Kind(*k)).collect(), check_tags: has_tags };
        }
        Plan::Scan { keys: vec![Key::All], check_tags: has_tags }
    }
}
