//! Key encoding for the one sled tree that holds events and their indexes.
//!
//! Owns the byte layout of every key. Pure functions, unit-tested. Numbers are big-endian so that
//! byte order is numeric order; `created_at` is stored inverted (`u64::MAX - t`) so an ascending
//! scan yields newest first and, within one second, lowest id first — exactly NIP-01's order.
//!
//! | prefix | key                                   | value                      |
//! |--------|---------------------------------------|----------------------------|
//! | `e`    | id                                    | expiration (8) + JSON      |
//! | `c`    | rev_ts + id                           | —                          |
//! | `a`    | pubkey + rev_ts + id                  | —                          |
//! | `k`    | kind + rev_ts + id                    | —                          |
//! | `p`    | pubkey + kind + rev_ts + id           | —                          |
//! | `t`    | letter + tagval + rev_ts + id         | —                          |
//! | `r`    | pubkey + kind + d                     | id + created_at            |
//! | `x`    | expiration + id                       | —                          |
//! | `d`    | id (tombstone)                        | deleting pubkey            |
//! | `D`    | pubkey + kind + d (address tombstone) | deletion created_at        |
//! | `m`    | name                                  | metadata (schema version)  |
//!
//! `tagval` is `0x00, len, bytes` for values up to 64 bytes and `0x01, sha256(value)` above, so
//! keys stay small; a scan re-checks the full filter where a hash could collide.

use sha2::{Digest, Sha256};

use crate::protocol::{EventId, Kind, PubKey, Timestamp};

/// Event body.
pub const EVENT: u8 = b'e';
/// By created_at.
pub const CREATED: u8 = b'c';
/// By author.
pub const AUTHOR: u8 = b'a';
/// By kind.
pub const KIND: u8 = b'k';
/// By author and kind.
pub const AUTHOR_KIND: u8 = b'p';
/// By single-letter tag value.
pub const TAG: u8 = b't';
/// Replaceable / addressable address → current version.
pub const ADDRESS: u8 = b'r';
/// By expiration time.
pub const EXPIRY: u8 = b'x';
/// Deleted id tombstone.
pub const TOMBSTONE: u8 = b'd';
/// Deleted address tombstone.
pub const ADDRESS_TOMBSTONE: u8 = b'D';
/// Metadata.
pub const META: u8 = b'm';

/// `u64::MAX - t`, big-endian: ascending order is newest first.
pub fn rev_ts(t: Timestamp) -> [u8; 8] {
    (u64::MAX - t.0).to_be_bytes()
}

/// Inverse of [`rev_ts`].
pub fn from_rev_ts(bytes: [u8; 8]) -> Timestamp {
    Timestamp(u64::MAX - u64::from_be_bytes(bytes))
}

fn key(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
    out
}

/// `e` + id.
pub fn event(id: &EventId) -> Vec<u8> {
    key(&[&[EVENT], &id.0])
}

/// The encoded tag value part of a `t` key.
pub fn tag_value(value: &str) -> Vec<u8> {
    let bytes = value.as_bytes();
    if bytes.len() <= 64 {
        let mut out = Vec::with_capacity(bytes.len() + 2);
        out.push(0);
        out.push(bytes.len() as u8);
        out.extend_from_slice(bytes);
        out
    } else {
        let mut out = Vec::with_capacity(33);
        out.push(1);
        out.extend_from_slice(&Sha256::digest(bytes));
        out
    }
}

/// The prefix of an index scan, to which `rev_ts + id` is appended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexPrefix {
    /// All events by time.
    Created,
    /// One author.
    Author(PubKey),
    /// One kind.
    Kind(Kind),
    /// One author and kind.
    AuthorKind(PubKey, Kind),
    /// One tag letter and value.
    Tag(u8, String),
}

impl IndexPrefix {
    /// The prefix bytes.
    pub fn bytes(&self) -> Vec<u8> {
        match self {
            IndexPrefix::Created => vec![CREATED],
            IndexPrefix::Author(p) => key(&[&[AUTHOR], &p.0]),
            IndexPrefix::Kind(k) => key(&[&[KIND], &k.0.to_be_bytes()]),
            IndexPrefix::AuthorKind(p, k) => key(&[&[AUTHOR_KIND], &p.0, &k.0.to_be_bytes()]),
            IndexPrefix::Tag(letter, value) => key(&[&[TAG, *letter], &tag_value(value)]),
        }
    }

    /// The full index key of one event under this prefix.
    pub fn entry(&self, at: Timestamp, id: &EventId) -> Vec<u8> {
        key(&[&self.bytes(), &rev_ts(at), &id.0])
    }

    /// Inclusive key range for `since <= created_at <= until` under this prefix.
    pub fn range(&self, since: Option<Timestamp>, until: Option<Timestamp>) -> (Vec<u8>, Vec<u8>) {
        let prefix = self.bytes();
        let start = key(&[&prefix, &rev_ts(until.unwrap_or(Timestamp(u64::MAX)))]);
        let end = key(&[&prefix, &rev_ts(since.unwrap_or(Timestamp(0))), &[0xff; 32]]);
        (start, end)
    }
}

/// Splits the trailing `rev_ts + id` off an index key.
pub fn split_entry(index_key: &[u8]) -> Option<(Timestamp, EventId)> {
    let n = index_key.len();
    if n < 40 {
        return None;
    }
    let ts: [u8; 8] = index_key[n - 40..n - 32].try_into().ok()?;
    let id: [u8; 32] = index_key[n - 32..].try_into().ok()?;
    Some((from_rev_ts(ts), EventId(id)))
}

/// `r` + pubkey + kind + d: the address of a replaceable (`d` = "") or addressable event.
pub fn address(pubkey: &PubKey, kind: Kind, d: &str) -> Vec<u8> {
    key(&[&[ADDRESS], &pubkey.0, &kind.0.to_be_bytes(), d.as_bytes()])
}

/// `D` + pubkey + kind + d.
pub fn address_tombstone(pubkey: &PubKey, kind: Kind, d: &str) -> Vec<u8> {
    key(&[&[ADDRESS_TOMBSTONE], &pubkey.0, &kind.0.to_be_bytes(), d.as_bytes()])
}

/// `d` + id.
pub fn tombstone(id: &EventId) -> Vec<u8> {
    key(&[&[TOMBSTONE], &id.0])
}

/// `x` + expiration + id.
pub fn expiry(at: Timestamp, id: &EventId) -> Vec<u8> {
    key(&[&[EXPIRY], &at.0.to_be_bytes(), &id.0])
}

/// `m` + name.
pub fn meta(name: &str) -> Vec<u8> {
    key(&[&[META], name.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newer_sorts_first_and_ties_by_lowest_id() {
        let p = IndexPrefix::Kind(Kind(1));
        let old = p.entry(Timestamp(10), &EventId([0; 32]));
        let new = p.entry(Timestamp(20), &EventId([9; 32]));
        let new_low = p.entry(Timestamp(20), &EventId([1; 32]));
        let mut keys = vec![old.clone(), new.clone(), new_low.clone()];
        keys.sort();
        assert_eq!(keys, vec![new_low, new, old]);
    }

    #[test]
    fn range_bounds_are_inclusive() {
        let p = IndexPrefix::Author(PubKey([3; 32]));
        let (start, end) = p.range(Some(Timestamp(10)), Some(Timestamp(20)));
        for (t, inside) in [(9, false), (10, true), (15, true), (20, true), (21, false)] {
            let k = p.entry(Timestamp(t), &EventId([0xff; 32]));
            let k0 = p.entry(Timestamp(t), &EventId([0; 32]));
            assert_eq!(k >= start && k <= end, inside, "t={t}");
            assert_eq!(k0 >= start && k0 <= end, inside, "t={t}");
        }
    }

    #[test]
    fn split_entry_inverts_entry() {
        let id = EventId([7; 32]);
        let k = IndexPrefix::Tag(b't', "x".repeat(100)).entry(Timestamp(42), &id);
        assert_eq!(split_entry(&k), Some((Timestamp(42), id)));
    }

    #[test]
    fn long_tag_values_are_hashed_short_ones_kept() {
        assert_eq!(tag_value("ab"), vec![0, 2, b'a', b'b']);
        assert_eq!(tag_value(&"z".repeat(65)).len(), 33);
        // A short value can never collide with a hashed one: the first byte differs.
        assert_ne!(tag_value("")[0], tag_value(&"z".repeat(65))[0]);
    }

    #[test]
    fn prefixes_of_distinct_values_do_not_nest() {
        // "a" must not be a byte prefix of "ab" in the tag index.
        let a = IndexPrefix::Tag(b't', "a".into()).bytes();
        let ab = IndexPrefix::Tag(b't', "ab".into()).bytes();
        assert!(!ab.starts_with(&a));
    }
}
