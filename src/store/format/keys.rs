//! Key encoding for the one sled tree that holds the event catalogue.
//!
//! Owns the byte layout of every key. Pure functions, unit-tested. Numbers are big-endian so that
//! byte order is numeric order.
//!
//! | prefix | key                                   | value                          |
//! |--------|---------------------------------------|--------------------------------|
//! | `i`    | the id's first 20 bits (3 bytes)      | (id + stored place: the serial, its generation's parity in the top bit) × the ids of that bucket: `catalogue` |
//! | `r`    | pubkey + kind + d                     | id + created_at                |
//! | `x`    | expiration + id                       | —                              |
//! | `d`    | id (tombstone)                        | deleting pubkeys (32 bytes each)|
//! | `D`    | pubkey + kind + d (address tombstone) | deletion created_at            |
//! | `z`    | serial (in the current generation)    | frame bytes (u32): a removed event that an index segment still lists, or whose record is in the log's tail (after the segments) |
//! | `m`    | name                                  | metadata: `schema` version, `log_end`, `log_gen`, `index`, `parity`, `remap` (the writer's `remap`) |
//!
//! The `i` entry (an id and the serial of its record, its place in [`super::log`]) is the event's identity: deduplication and `ids` filters go through it, and an
//! event is stored exactly while its `i` entry exists. The records themselves are in the event
//! log, and the secondary indexes (author, kind, tags, time) in index segments and memory
//! (`super::indexes`).

use crate::protocol::{EventId, Kind, PubKey, Timestamp};

/// Current on-disk layout version (the `m` `schema` entry).
pub const SCHEMA_VERSION: u8 = 5;

/// Id bucket → (id, serial) entries.
pub const ID: u8 = b'i';
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
/// Removed events still in an index segment.
pub const REMOVED: u8 = b'z';
/// The `m` name of the index segments' state (`indexes::Meta`: which segments, where they end).
pub const INDEX: &str = "index";
/// The `m` name of the event log's committed end (u64).
pub const LOG_END: &str = "log_end";
/// The `m` name of the serial from which every removal of a tail event is recorded as a `z`
/// entry (u64; absent = 0): a start reads the tail after it without catalogue lookups.
pub const TAIL_RECORDED: &str = "tail_recorded";
/// The `m` name of the event log's generation (u64; absent = 0, `events.log`).
pub const LOG_GEN: &str = "log_gen";

fn key(parts: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.extend_from_slice(p);
    }
    out
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

/// `z` + serial.
pub fn removed(serial: u64) -> Vec<u8> {
    key(&[&[REMOVED], &serial.to_be_bytes()])
}

/// `m` + name.
pub fn meta(name: &str) -> Vec<u8> {
    key(&[&[META], name.as_bytes()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_keys_sort_by_time() {
        let early = expiry(Timestamp(9), &EventId([0xff; 32]));
        let late = expiry(Timestamp(10), &EventId([0; 32]));
        assert!(early < late);
    }

    #[test]
    fn an_address_is_not_a_prefix_of_another() {
        // Addresses are looked up exactly, never scanned by prefix; distinct d tags differ.
        let p = PubKey([3; 32]);
        assert_ne!(address(&p, Kind(30023), "a"), address(&p, Kind(30023), "ab"));
        assert_ne!(address(&p, Kind(0), ""), address_tombstone(&p, Kind(0), ""));
    }
}
