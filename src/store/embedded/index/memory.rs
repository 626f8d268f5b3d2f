//! The secondary indexes of the newest events, in memory: which of them (by serial) have an
//! author, a kind, an author and kind, a tag value, newest first.
//!
//! Owns the lists and the per-event header they are checked against, for the events stored since
//! the last index segment was written (`super::indexes` writes them out as a segment once there
//! are enough, and names each list by [`Key::hash64`] there). It is derived data: rebuilt from
//! the log's tail when the store opens and changed by the writer only after the batch that
//! changed the records was applied, so it can never disagree with the disk for longer than that.
//! Keeping it out of sled is what makes ingest fast: every index entry in sled is a random insert
//! that costs a leaf rewrite per flush.

use std::collections::{BTreeSet, HashMap};

use crate::protocol::{Kind, PubKey, Timestamp};
use crate::store::format::Serial;
use crate::store::format::log::FRAME_HEADER;
use crate::store::format::record::Header;
use crate::store::format::segment::{Posting as SegmentPosting, pack};

/// Hashes serials with one multiplication. Serials are places in the log, never chosen by a
/// client, so SipHash's defence against chosen keys buys nothing for them, and the maps keyed by
/// serial are on the hot paths: every segment posting a scan meets is looked up in the removed
/// set, and a compaction looks up every posting's new place.
#[derive(Clone, Copy, Default)]
pub struct SerialHasher(u64);

impl std::hash::Hasher for SerialHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        // Fibonacci hashing; the high half folded down, since the table takes its bucket from the
        // low bits.
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 32);
    }
}

/// A map keyed by serial.
pub type SerialMap<V> = HashMap<Serial, V, std::hash::BuildHasherDefault<SerialHasher>>;

/// One index list entry: `u64::MAX - created_at` (ascending = newest first), then the serial.
type Posting = (u64, Serial);

/// One index list.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub enum Key {
    /// Every event.
    All,
    /// One author.
    Author(PubKey),
    /// One kind.
    Kind(Kind),
    /// One author and kind.
    AuthorKind(PubKey, Kind),
    /// One single-letter tag name and value (NIP-01 `#<letter>` filters).
    Tag(u8, Box<str>),
}

impl Key {
    /// The list's name in an index segment: the first 8 bytes of the SHA-256 of the key. Stable
    /// across versions (it is on disk), and no one can make their tag value's list collide with
    /// another list on purpose; a chance collision only adds candidates, which every read checks
    /// against the event.
    pub fn hash64(&self) -> u64 {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        match self {
            Key::All => h.update([0]),
            Key::Author(pubkey) => {
                h.update([1]);
                h.update(pubkey.0);
            }
            Key::Kind(kind) => {
                h.update([2]);
                h.update(kind.0.to_be_bytes());
            }
            Key::AuthorKind(pubkey, kind) => {
                h.update([3]);
                h.update(pubkey.0);
                h.update(kind.0.to_be_bytes());
            }
            Key::Tag(letter, value) => {
                h.update([4, *letter]);
                h.update(value.as_bytes());
            }
        }
        let digest = h.finalize();
        let mut first = [0u8; 8];
        first.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(first)
    }
}

/// The index lists an event belongs to.
pub fn keys_of(header: &Header, tags: &[Vec<String>]) -> Vec<Key> {
    let mut out =
        vec![Key::All, Key::Author(header.pubkey), Key::Kind(header.kind), Key::AuthorKind(header.pubkey, header.kind)];
    for tag in tags {
        if let (Some([letter]), Some(value)) = (tag.first().map(String::as_bytes), tag.get(1))
            && letter.is_ascii_alphabetic()
        {
            let key = Key::Tag(*letter, value.as_str().into());
            if !out.contains(&key) {
                out.push(key);
            }
        }
    }
    out
}

/// A change to the index, applied once the group that made it is in sled.
pub enum IndexOp {
    /// A stored event.
    Insert(Serial, Header, Vec<Key>),
    /// A removed one, with its record's length.
    Remove(Serial, u32, Vec<Key>),
}

/// The indexes of every stored event.
#[derive(Default)]
pub struct Index {
    headers: HashMap<Serial, Header>,
    lists: HashMap<Key, BTreeSet<Posting>>,
    /// Bytes of the indexed events' frames in the log.
    live_bytes: u64,
}

impl Index {
    /// Adds a stored event to its lists.
    pub fn insert(&mut self, serial: Serial, header: Header, keys: Vec<Key>) {
        let posting = (u64::MAX - header.created_at.0, serial);
        for key in keys {
            self.lists.entry(key).or_default().insert(posting);
        }
        if self.headers.insert(serial, header).is_none() {
            self.live_bytes += FRAME_HEADER + u64::from(header.len);
        }
    }

    /// Removes a stored event from its lists.
    pub fn remove(&mut self, serial: Serial, keys: &[Key]) {
        let Some(header) = self.headers.remove(&serial) else { return };
        self.live_bytes = self.live_bytes.saturating_sub(FRAME_HEADER + u64::from(header.len));
        let posting = (u64::MAX - header.created_at.0, serial);
        for key in keys {
            if let Some(list) = self.lists.get_mut(key) {
                list.remove(&posting);
                if list.is_empty() {
                    self.lists.remove(key);
                }
            }
        }
    }

    /// An index of the stored events `events` yields (serial, header, lists), built at once:
    /// each list is collected, sorted and built in one pass. Events come in log order and the
    /// lists are in time order, so inserting them one by one walked each list's tree at random.
    pub fn build(events: impl Iterator<Item = (Serial, Header, Vec<Key>)>) -> Index {
        let mut index = Index::default();
        let mut lists: HashMap<Key, Vec<Posting>> = HashMap::new();
        for (serial, header, keys) in events {
            let posting = (u64::MAX - header.created_at.0, serial);
            for key in keys {
                lists.entry(key).or_default().push(posting);
            }
            if index.headers.insert(serial, header).is_none() {
                index.live_bytes += FRAME_HEADER + u64::from(header.len);
            }
        }
        index.lists.reserve(lists.len());
        for (key, mut list) in lists {
            list.sort_unstable();
            index.lists.insert(key, list.into_iter().collect());
        }
        index
    }

    /// Applies one change of a committed group.
    pub fn apply(&mut self, op: IndexOp) {
        match op {
            IndexOp::Insert(serial, header, keys) => self.insert(serial, header, keys),
            IndexOp::Remove(serial, _, keys) => self.remove(serial, &keys),
        }
    }

    /// Every posting, named by its list's [`Key::hash64`], sorted: an index segment's content.
    pub fn postings(&self) -> Vec<SegmentPosting> {
        let mut out = Vec::with_capacity(self.lists.values().map(BTreeSet::len).sum());
        for (key, list) in &self.lists {
            let hash = key.hash64();
            let len = |serial| self.headers.get(&serial).map_or(0, |h| h.len);
            out.extend(list.iter().map(|&(rev, serial)| (hash, rev, pack(serial, len(serial)))));
        }
        out.sort_unstable();
        out
    }

    /// This index with every event at the serial a compaction gave it (`moved`: old → new,
    /// sorted by old serial; the order of the events is kept, so each list stays in order). Built
    /// beside this one, so that readers go on using this one meanwhile. An event `moved` does not
    /// name is left out rather than left pointing at another record.
    pub fn remapped(&self, moved: &[(Serial, Serial)]) -> Index {
        if self.headers.is_empty() {
            return Index::default();
        }
        let first = moved.partition_point(|&(old, _)| old < self.headers.keys().min().copied().unwrap_or(0));
        let map: SerialMap<Serial> = moved[first..].iter().copied().collect();
        let to = |serial: Serial| map.get(&serial).copied();
        let mut out = Index { headers: HashMap::with_capacity(self.headers.len()), ..Index::default() };
        for (&serial, header) in &self.headers {
            if let Some(new) = to(serial) {
                out.headers.insert(new, *header);
                out.live_bytes += FRAME_HEADER + u64::from(header.len);
            }
        }
        for (key, list) in &self.lists {
            let list: BTreeSet<Posting> = list.iter().filter_map(|&(rev, serial)| Some((rev, to(serial)?))).collect();
            if !list.is_empty() {
                out.lists.insert(key.clone(), list);
            }
        }
        out
    }

    /// The header of a stored event.
    pub fn header(&self, serial: Serial) -> Option<&Header> {
        self.headers.get(&serial)
    }

    /// The events of one list with `since <= created_at <= until`, newest first.
    pub fn scan(
        &self,
        key: &Key,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
    ) -> impl Iterator<Item = (Timestamp, Serial)> + '_ {
        let from = (u64::MAX - until.map_or(u64::MAX, |t| t.0), 0);
        let to = (u64::MAX - since.map_or(0, |t| t.0), Serial::MAX);
        self.lists
            .get(key)
            .into_iter()
            .flat_map(move |list| list.range(from..=to))
            .map(|&(rev, serial)| (Timestamp(u64::MAX - rev), serial))
    }

    /// How many events a list holds.
    pub fn len(&self, key: &Key) -> usize {
        self.lists.get(key).map_or(0, BTreeSet::len)
    }

    /// How many events are indexed.
    pub fn events(&self) -> usize {
        self.headers.len()
    }

    /// Bytes of the indexed events' frames in the event log: what a compaction keeps.
    pub fn live_bytes(&self) -> u64 {
        self.live_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventId;

    fn header(at: u64, n: u8) -> Header {
        Header {
            id: EventId([n; 32]),
            pubkey: PubKey([1; 32]),
            created_at: Timestamp(at),
            kind: Kind(1),
            expiration: 0,
            len: 200,
        }
    }

    #[test]
    fn scans_newest_first_within_inclusive_bounds() {
        let mut index = Index::default();
        for (serial, at) in [(1, 10), (2, 30), (3, 20), (4, 20)] {
            let h = header(at, serial as u8);
            index.insert(serial, h, keys_of(&h, &[]));
        }
        let all: Vec<_> = index.scan(&Key::All, None, None).map(|(t, s)| (t.0, s)).collect();
        assert_eq!(all, vec![(30, 2), (20, 3), (20, 4), (10, 1)]);
        let window: Vec<_> = index.scan(&Key::Kind(Kind(1)), Some(Timestamp(20)), Some(Timestamp(20))).collect();
        assert_eq!(window.len(), 2);
        assert_eq!(index.scan(&Key::Kind(Kind(2)), None, None).count(), 0);
    }

    #[test]
    fn remove_empties_every_list_and_tags_are_indexed_once() {
        let mut index = Index::default();
        let h = header(5, 9);
        let tags = vec![vec!["t".to_string(), "x".into()], vec!["t".into(), "x".into()], vec!["tt".into(), "y".into()]];
        let keys = keys_of(&h, &tags);
        assert_eq!(keys.iter().filter(|k| matches!(k, Key::Tag(..))).count(), 1);
        index.insert(7, h, keys.clone());
        assert_eq!(index.len(&Key::Tag(b't', "x".into())), 1);
        index.remove(7, &keys);
        assert_eq!(index.events(), 0);
        assert!(index.lists.is_empty());
    }
}
