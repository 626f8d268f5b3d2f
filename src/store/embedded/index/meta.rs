//! The catalogue's record of the index segments, and their files.
//!
//! Owns the `m` `index` entry ([`Meta`]: where the segments end, their totals, their sequence
//! numbers), the segment files' names (`index.<generation>.<seq>.seg`, an [`OLD_SEQ`] one being
//! the previous generation's), opening the recorded ones, and removing the files that are not
//! the index.

use std::path::Path;
use std::sync::Arc;

use crate::store::error::StoreError;
use crate::store::format::keys;
use crate::store::format::segment::Segment;
use crate::store::format::{Serial, decode_serial, remove_if_there};

/// The mark of a recorded segment of the previous log generation (read through the moves).
pub(crate) const OLD_SEQ: u64 = 1 << 63;

/// The segments' state as the catalogue records it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Meta {
    /// The segments hold the events before this serial.
    pub covered: Serial,
    /// Events the segments were written with (removed ones included).
    pub events: u64,
    /// Their frames' bytes in the log.
    pub live: u64,
    /// The segments' sequence numbers, oldest first ([`OLD_SEQ`] marks the previous
    /// generation's).
    pub seqs: Vec<u64>,
}

impl Meta {
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24 + 8 * self.seqs.len());
        for n in [self.covered, self.events, self.live].iter().chain(&self.seqs) {
            out.extend_from_slice(&n.to_be_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<Meta, StoreError> {
        if bytes.len() < 24 || !bytes.len().is_multiple_of(8) {
            return Err(StoreError::Corrupt("index entry".into()));
        }
        let mut words = bytes.chunks_exact(8).map(decode_serial);
        let mut next = || words.next().unwrap_or(Ok(0));
        let (covered, events, live) = (next()?, next()?, next()?);
        let seqs = words.collect::<Result<_, _>>()?;
        Ok(Meta { covered, events, live, seqs })
    }

    /// The recorded state, if any.
    pub(crate) fn load(tree: &sled::Tree) -> Result<Option<Meta>, StoreError> {
        tree.get(keys::meta(keys::INDEX))?.map(|v| Meta::decode(&v)).transpose()
    }

    /// Records it (made durable by the next flush of sled; until then a crash finds the previous
    /// state, whose files are all still there).
    pub(crate) fn save(&self, tree: &sled::Tree) -> Result<(), StoreError> {
        tree.insert(keys::meta(keys::INDEX), self.encode())?;
        Ok(())
    }
}

/// The file of segment `seq` of the log generation `generation`.
pub(crate) fn file_name(generation: u64, seq: u64) -> String {
    format!("index.{generation}.{seq}.seg")
}

/// The file of the recorded segment `seq` of an index of `generation` (an [`OLD_SEQ`] one is
/// the previous generation's).
pub(crate) fn recorded_name(generation: u64, seq: u64) -> String {
    match seq & OLD_SEQ {
        0 => file_name(generation, seq),
        _ => file_name(generation.saturating_sub(1), seq & !OLD_SEQ),
    }
}

/// Removes the segment files of other log generations than those of `keep` from `dir` (a
/// finished compaction's old ones once they are written out again, or a failed one's new ones).
pub(crate) fn remove_other_generations(dir: &Path, keep: &[u64]) -> std::io::Result<()> {
    let prefixes: Vec<String> = keep.iter().map(|g| format!("index.{g}.")).collect();
    remove_segments_but(dir, |name| prefixes.iter().any(|p| name.starts_with(p.as_str())))
}

/// Removes the segment files of `dir` that `keep` (given the file name) does not keep.
pub(crate) fn remove_segments_but(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("index.") && name.ends_with(".seg") && !keep(name) {
            remove_if_there(&dir.join(name))?;
        }
    }
    Ok(())
}

pub(crate) fn open_segments(dir: &Path, generation: u64, seqs: &[u64]) -> Result<Vec<Arc<Segment>>, StoreError> {
    seqs.iter().map(|&seq| Ok(Arc::new(Segment::open(&dir.join(recorded_name(generation, seq)))?))).collect()
}

/// The sled batch that records a segment written out of the in-memory index, which held the
/// events from `from` to `to`: the index's new state (`meta`), and without the `z` entries of
/// the events removed meanwhile (the segment does not list them, and a start no longer reads
/// them back). One batch, so a crash finds either both or neither.
pub(crate) fn written_out(tree: &sled::Tree, meta: &Meta, from: Serial, to: Serial) -> Result<sled::Batch, StoreError> {
    let mut batch = sled::Batch::default();
    batch.insert(keys::meta(keys::INDEX), meta.encode());
    for item in tree.range(keys::removed(from)..keys::removed(to)) {
        batch.remove(item?.0);
    }
    Ok(batch)
}
