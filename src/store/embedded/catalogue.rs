//! The catalogue read: which events are stored, and where each one's record is.
//!
//! Owns reading the `i` entries of [`keys`] through sled (their bytes are [`bucket`]'s) and how a
//! stored place reads ([`Places`]): an entry's serial carries its log generation's parity in its
//! top bit, and while a compaction's remap is unfinished the previous generation's places are
//! looked up in its moves ([`Moves`]). Deduplication, `ids` filters, removals and compaction all
//! find an event here. It reads and rebuilds values; writing them is the writer's.

use std::sync::Arc;

use sled::{IVec, Tree};

use crate::protocol::EventId;
use crate::store::error::StoreError;
use crate::store::format::bucket::{entries, find, key};
use crate::store::format::keys;
use crate::store::format::moves::Moves;
use crate::store::format::{Serial, decode_serial};

/// The bit of a catalogue entry's stored place that tells the generation it points into (its
/// parity); serials are below 2^48, so the bit is free.
pub const PARITY: u64 = 1 << 63;

/// How the catalogue's stored places read (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Places {
    /// [`PARITY`] or 0: the bit of the entries that point into the current generation's log.
    parity: u64,
    /// While a remap is unfinished: where the previous generation's records went.
    moved: Option<Arc<Moves>>,
}

impl Places {
    /// The places a catalogue records: `parity` set when the current generation's entries have
    /// the top bit, and the moves of an unfinished remap.
    pub fn new(parity: bool, moved: Option<Arc<Moves>>) -> Places {
        Places { parity: if parity { PARITY } else { 0 }, moved }
    }

    /// The serial a stored place names in the current generation's log.
    pub fn resolve(&self, raw: u64) -> Result<Serial, StoreError> {
        let serial = raw & !PARITY;
        if raw & PARITY == self.parity {
            return Ok(serial);
        }
        match &self.moved {
            Some(moved) => moved.get(serial).ok_or_else(|| {
                StoreError::Corrupt(format!("a catalogue entry names {serial} of the previous log, which was not kept"))
            }),
            None => Err(StoreError::Corrupt(format!("a catalogue entry names {serial} of another log generation"))),
        }
    }

    /// The stored place of `serial` in the current generation's log.
    pub fn encode(&self, serial: Serial) -> u64 {
        serial | self.parity
    }

    /// True when `raw` points into the current generation (it needs no rewriting).
    pub fn is_current(&self, raw: u64) -> bool {
        raw & PARITY == self.parity
    }

    /// The moves of an unfinished remap.
    pub fn moved(&self) -> Option<&Arc<Moves>> {
        self.moved.as_ref()
    }

    /// The places after a compaction's swap: the other parity is current, and the entries of the
    /// one that was are read through `moved`.
    pub fn flipped(&self, moved: Arc<Moves>) -> Places {
        Places { parity: self.parity ^ PARITY, moved: Some(moved) }
    }

    /// The places once every entry has been rewritten.
    pub fn settled(&self) -> Places {
        Places { parity: self.parity, moved: None }
    }

    /// The parity byte the catalogue records (`m` `parity`).
    pub fn parity_byte(&self) -> u8 {
        u8::from(self.parity != 0)
    }
}

/// `bucket` rebuilt entry by entry: `keep` gives each id's serial (as `places` read it) in the new
/// bucket, or `None` to drop it (a repair); the kept ones are stored as current places.
pub fn rebuilt(
    bucket: &[u8],
    places: &Places,
    mut keep: impl FnMut(EventId, Serial) -> Result<Option<Serial>, StoreError>,
) -> Result<Vec<u8>, StoreError> {
    let mut out = Vec::with_capacity(bucket.len());
    for (id, place) in entries(bucket)? {
        if let Some(serial) = keep(id, places.resolve(place)?)? {
            out.extend_from_slice(&id.0);
            out.extend_from_slice(&places.encode(serial).to_be_bytes());
        }
    }
    Ok(out)
}

/// `bucket` with every entry of the previous generation at its new place (the remap's step);
/// `None` when every entry is current already.
pub fn current(bucket: &[u8], places: &Places) -> Result<Option<Vec<u8>>, StoreError> {
    if entries(bucket)?.all(|(_, place)| places.is_current(place)) {
        return Ok(None);
    }
    rebuilt(bucket, places, |_, serial| Ok(Some(serial))).map(Some)
}

/// The serial of a stored event.
pub fn get(tree: &Tree, places: &Places, id: &EventId) -> Result<Option<Serial>, StoreError> {
    match tree.get(key(id))? {
        Some(bucket) => find(&bucket, id)?.map(|place| places.resolve(place)).transpose(),
        None => Ok(None),
    }
}

/// True when an event with this id is stored (wherever its record is).
pub fn contains(tree: &Tree, id: &EventId) -> Result<bool, StoreError> {
    match tree.get(key(id))? {
        Some(bucket) => Ok(find(&bucket, id)?.is_some()),
        None => Ok(false),
    }
}

/// Every bucket of the catalogue, in key order: its key and value.
pub fn buckets(tree: &Tree) -> impl Iterator<Item = Result<(IVec, IVec), StoreError>> {
    // The layout before buckets had 33-byte `i` keys; none is left once the store has opened.
    tree.scan_prefix([keys::ID]).map(|item| item.map_err(StoreError::from))
}

/// Every stored event's id and serial, bucket by bucket.
pub fn all(tree: &Tree, places: &Places) -> impl Iterator<Item = Result<(EventId, Serial), StoreError>> {
    buckets(tree).flat_map(move |bucket| {
        let found: Vec<Result<(EventId, Serial), StoreError>> = match bucket {
            Ok((_, value)) => match entries(&value) {
                Ok(entries) => entries.map(|(id, place)| Ok((id, places.resolve(place)?))).collect(),
                Err(e) => vec![Err(e.into())],
            },
            Err(e) => vec![Err(e)],
        };
        found
    })
}

/// The serial of every stored event before `below`, in log order (from the catalogue's `i`
/// entries, read with `places`): 8 bytes an event, what a compaction's copy holds while it runs.
pub fn live_serials(tree: &Tree, places: &Places, below: Serial) -> Result<Vec<Serial>, StoreError> {
    let mut out = Vec::new();
    for entry in all(tree, places) {
        let (_, serial) = entry?;
        if serial < below {
            out.push(serial);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// A u64 of the `m` entries (0 when absent).
pub fn meta_u64(tree: &Tree, name: &str) -> Result<u64, StoreError> {
    match tree.get(keys::meta(name))? {
        Some(v) => Ok(decode_serial(&v)?),
        None => Ok(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_place_of_the_previous_generation_reads_through_the_moves_and_the_current_one_directly() {
        let before = Places::default();
        assert_eq!(before.resolve(before.encode(40)).unwrap(), 40);
        let after = before.flipped(Arc::new(Moves::new(vec![(10, 0), (40, 25), (90, 60)])));
        // An entry written before the swap keeps its bits and is read through the moves.
        assert_eq!(after.resolve(before.encode(40)).unwrap(), 25);
        assert!(!after.is_current(before.encode(40)));
        // One written after it names the new log.
        assert_eq!(after.resolve(after.encode(40)).unwrap(), 40);
        assert!(after.is_current(after.encode(7)));
        // A place the compaction did not keep is an error, not a guess.
        assert!(matches!(after.resolve(before.encode(11)), Err(StoreError::Corrupt(_))));
        // Settled: the old parity names nothing any more.
        assert!(after.settled().resolve(before.encode(40)).is_err());
        assert_eq!(after.settled().resolve(after.encode(40)).unwrap(), 40);
    }
}
