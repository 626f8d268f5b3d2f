//! The catalogue's id buckets as bytes: which sled key holds an id, and a bucket's entries.
//!
//! Owns the `i` values of [`super::keys`]: an event is stored exactly while its id is in the
//! bucket its id's first [`BUCKET_BITS`] bits name, beside the stored place of its record. A
//! bucket's value is its entries, sorted by id, each the 32-byte id and the 8-byte big-endian
//! stored place: the serial, with the generation's parity in its top bit (the catalogue's
//! `Places` reads it). A bucket with no entries is no key at all.
//!
//! Why buckets and not one sled key per id: sled 0.34 keeps, for every page of its tree, an entry
//! in a page table that lives in memory and that it reads back from its log when it opens, and it
//! splits a leaf past 16 keys. One key per id made that table, and with it the relay's memory and
//! start-up, grow with the number of events (≈ 40 bytes and ≈ 1 µs of start-up per event; 440 MB
//! at 10M events). A fixed number of buckets bounds the keys, and with them the table, whatever
//! the store holds: a lookup reads one bucket of a few entries instead of one entry.

use super::keys;
use super::{FormatError, Serial};
use crate::protocol::EventId;

/// Bits of an event id that name its bucket: 2^20 buckets, about ten ids each at 10M events.
pub const BUCKET_BITS: u32 = 20;
/// How many buckets the catalogue has.
pub const BUCKETS: u32 = 1 << BUCKET_BITS;
/// Bytes of one entry: the id, then the serial.
pub const ENTRY: usize = 40;

/// The sled key of the bucket that holds `id`: `i` and the id's first [`BUCKET_BITS`] bits (the
/// rest of the third byte zero).
pub fn key(id: &EventId) -> [u8; 4] {
    let [a, b, c] = [id.0[0], id.0[1], id.0[2]].map(u32::from);
    bucket_key(((a << 16) | (b << 8) | c) >> (24 - BUCKET_BITS))
}

/// The sled key of bucket number `n` (below 2^[`BUCKET_BITS`]): buckets in number order are
/// in key order, so a range of numbers is a range of keys.
pub fn bucket_key(n: u32) -> [u8; 4] {
    let bits = n << (24 - BUCKET_BITS);
    [keys::ID, (bits >> 16) as u8, (bits >> 8) as u8, bits as u8]
}

fn corrupt(bucket: &[u8]) -> FormatError {
    FormatError::Damaged(format!("catalogue bucket of {} bytes", bucket.len()))
}

/// Where `id` is among a bucket's entries: `Ok(entry)` when it is there, `Err(entry)` where it
/// would go.
fn position(bucket: &[u8], id: &EventId) -> Result<Result<usize, usize>, FormatError> {
    if !bucket.len().is_multiple_of(ENTRY) {
        return Err(corrupt(bucket));
    }
    let (mut low, mut high) = (0, bucket.len() / ENTRY);
    while low < high {
        let mid = low + (high - low) / 2;
        match bucket[mid * ENTRY..mid * ENTRY + 32].cmp(&id.0[..]) {
            std::cmp::Ordering::Less => low = mid + 1,
            std::cmp::Ordering::Equal => return Ok(Ok(mid)),
            std::cmp::Ordering::Greater => high = mid,
        }
    }
    Ok(Err(low))
}

fn place_at(bucket: &[u8], entry: usize) -> Result<u64, FormatError> {
    let bytes = bucket.get(entry * ENTRY + 32..(entry + 1) * ENTRY).ok_or_else(|| corrupt(bucket))?;
    bytes.try_into().map(u64::from_be_bytes).map_err(|_| corrupt(bucket))
}

/// The stored place of `id` in `bucket` (the catalogue's `Places` reads it), if it is there.
pub fn find(bucket: &[u8], id: &EventId) -> Result<Option<u64>, FormatError> {
    match position(bucket, id)? {
        Ok(entry) => Ok(Some(place_at(bucket, entry)?)),
        Err(_) => Ok(None),
    }
}

/// `bucket` (none: an empty one) with `id` at the stored place `place` (as the catalogue's `Places` encodes it), in
/// its place or replacing its entry. The other entries are kept as they are.
pub fn with(bucket: Option<&[u8]>, id: &EventId, place: u64) -> Result<Vec<u8>, FormatError> {
    let bucket = bucket.unwrap_or_default();
    let mut out = Vec::with_capacity(bucket.len() + ENTRY);
    let (at, replace) = match position(bucket, id)? {
        Ok(entry) => (entry * ENTRY, ENTRY),
        Err(entry) => (entry * ENTRY, 0),
    };
    out.extend_from_slice(&bucket[..at]);
    out.extend_from_slice(&id.0);
    out.extend_from_slice(&place.to_be_bytes());
    out.extend_from_slice(&bucket[at + replace..]);
    Ok(out)
}

/// `bucket` without `id` (`None` when it was not there).
pub fn without(bucket: &[u8], id: &EventId) -> Result<Option<Vec<u8>>, FormatError> {
    match position(bucket, id)? {
        Ok(entry) => Ok(Some([&bucket[..entry * ENTRY], &bucket[(entry + 1) * ENTRY..]].concat())),
        Err(_) => Ok(None),
    }
}

/// A bucket's entries (each id and its stored place), in id order.
pub fn entries(bucket: &[u8]) -> Result<impl Iterator<Item = (EventId, Serial)> + '_, FormatError> {
    if !bucket.len().is_multiple_of(ENTRY) {
        return Err(corrupt(bucket));
    }
    Ok(bucket.chunks_exact(ENTRY).map(|entry| {
        let mut id = [0; 32];
        id.copy_from_slice(&entry[..32]);
        let mut serial = [0; 8];
        serial.copy_from_slice(&entry[32..]);
        (EventId(id), u64::from_be_bytes(serial))
    }))
}

/// An id beginning with `first` and ending with `last` (zeros between), for tests of buckets.
#[cfg(test)]
pub(in crate::store) fn test_id(first: [u8; 3], last: u8) -> EventId {
    let mut id = [0u8; 32];
    id[..3].copy_from_slice(&first);
    id[31] = last;
    EventId(id)
}

#[cfg(test)]
mod tests {
    use super::test_id as id;
    use super::*;

    #[test]
    fn ids_share_a_bucket_exactly_when_their_first_20_bits_agree() {
        assert_eq!(key(&id([1, 2, 0x30], 0)), key(&id([1, 2, 0x3f], 9)));
        assert_ne!(key(&id([1, 2, 0x30], 0)), key(&id([1, 2, 0x40], 0)));
        assert_ne!(key(&id([1, 2, 0x30], 0)), key(&id([1, 3, 0x30], 0)));
        assert_eq!(key(&id([0xab, 0xcd, 0xef], 0)), [b'i', 0xab, 0xcd, 0xe0]);
    }

    #[test]
    fn a_bucket_keeps_its_entries_sorted_and_finds_each() {
        let ids: Vec<EventId> = [7u8, 3, 9, 1, 5].iter().map(|&b| id([0, 0, 0], b)).collect();
        let mut bucket: Option<Vec<u8>> = None;
        for (serial, id) in ids.iter().enumerate() {
            bucket = Some(with(bucket.as_deref(), id, serial as u64 * 100).unwrap());
        }
        let bucket = bucket.unwrap();
        let listed: Vec<(EventId, Serial)> = entries(&bucket).unwrap().collect();
        let mut want: Vec<(EventId, Serial)> = ids.iter().enumerate().map(|(s, &id)| (id, s as u64 * 100)).collect();
        want.sort();
        assert_eq!(listed, want);
        for (serial, id) in ids.iter().enumerate() {
            assert_eq!(find(&bucket, id).unwrap(), Some(serial as u64 * 100));
        }
        assert_eq!(find(&bucket, &id([0, 0, 0], 4)).unwrap(), None);
        // Replacing keeps one entry.
        let moved = with(Some(&bucket), &ids[2], 42).unwrap();
        assert_eq!(moved.len(), bucket.len());
        assert_eq!(find(&moved, &ids[2]).unwrap(), Some(42));
        // Removing.
        let rest = without(&moved, &ids[0]).unwrap().unwrap();
        assert_eq!(rest.len(), 4 * ENTRY);
        assert_eq!(find(&rest, &ids[0]).unwrap(), None);
        assert_eq!(find(&rest, &ids[1]).unwrap(), Some(100));
        assert_eq!(without(&rest, &ids[0]).unwrap(), None);
    }

    #[test]
    fn a_bucket_of_a_wrong_length_is_an_error_not_a_guess() {
        let damaged = vec![0u8; ENTRY + 3];
        assert!(matches!(find(&damaged, &id([0, 0, 0], 0)), Err(FormatError::Damaged(_))));
        assert!(entries(&damaged).is_err());
        assert!(with(Some(&damaged), &id([0, 0, 0], 0), 1).is_err());
    }

    #[test]
    fn bucket_keys_follow_the_catalogues_and_cover_it_in_order() {
        let id = test_id([0xab, 0xcd, 0xef], 1);
        let n = (0xab << 12) | (0xcd << 4) | 0xe;
        assert_eq!(bucket_key(n), key(&id));
        let key = bucket_key;
        assert!(key(0) < key(1) && key(BUCKETS - 1) < [keys::ID + 1, 0, 0, 0]);
    }
}
