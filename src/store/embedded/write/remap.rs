//! What a compaction leaves to finish after its swap: the catalogue's entries and the index
//! segments still name the previous generation's serials, and are read through the compaction's
//! moves until they are rewritten in the background.
//!
//! Owns the persisted [`Remap`] state (the `m` `remap` entry: the moves file's count and CRC, and
//! how far the catalogue's rewrite has come), loading it with the catalogue's [`Places`] at open,
//! and the rewrite's steps. The moves file itself is [`moves`]'s format.
//!
//! Why: a compaction gives every live record a new place. Rewriting every `i` bucket and every
//! index segment at its swap stopped writes for as long as that took, which grew with the store
//! (docs/src/performance.md, Store size, has the figures). Now the swap flips the catalogue's parity (an entry
//! whose top bit is not the current parity names a place in the previous generation, to be
//! looked up in the moves) and keeps the old segments, read through the same moves; the writer
//! rewrites the buckets a step at a time between its groups, and the merge thread writes the
//! old segments out again at their new serials. When both are done the `remap` entry goes, then
//! the file.
//! A crash meanwhile leaves the `remap` entry, and the next start goes on where it was.

use std::path::Path;
use std::sync::Arc;

use crate::store::embedded::catalogue::{self, Places};
use crate::store::error::StoreError;
use crate::store::format::bucket::{self, BUCKETS};
use crate::store::format::keys;
use crate::store::format::moves::{self, Moves};

/// Buckets the writer rewrites in one step: small enough that a group waiting behind a step is
/// not held up long, large enough that the 2^20 buckets take a few hundred steps.
pub const STEP_BUCKETS: u32 = 4096;
/// The `m` name of the parity of the current generation's entries (one byte; absent = 0).
pub const PARITY_META: &str = "parity";
/// The `m` name of an unfinished remap ([`Remap`]).
pub const REMAP_META: &str = "remap";

/// An unfinished remap as sled records it: the moves file of `generation`, with `pairs` moves
/// and their CRC-32, and the first bucket the catalogue's rewrite has not reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remap {
    /// The generation the compaction made (its moves file is `moves.<generation>`).
    pub generation: u64,
    /// Moves in the file.
    pub pairs: u64,
    /// CRC-32 of the file.
    pub crc: u32,
    /// Buckets before this one are rewritten.
    pub cursor: u32,
}

impl Remap {
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(24);
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.pairs.to_be_bytes());
        out.extend_from_slice(&self.crc.to_be_bytes());
        out.extend_from_slice(&self.cursor.to_be_bytes());
        out
    }

    fn decode(bytes: &[u8]) -> Result<Remap, StoreError> {
        let corrupt = || StoreError::Corrupt("remap entry".into());
        let word = |at: usize| -> Result<u64, StoreError> {
            Ok(u64::from_be_bytes(bytes.get(at..at + 8).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?))
        };
        let half = |at: usize| -> Result<u32, StoreError> {
            Ok(u32::from_be_bytes(bytes.get(at..at + 4).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?))
        };
        if bytes.len() != 24 {
            return Err(corrupt());
        }
        Ok(Remap { generation: word(0)?, pairs: word(8)?, crc: half(16)?, cursor: half(20)? })
    }

    /// Records it in a batch.
    pub fn put_into(&self, batch: &mut sled::Batch) {
        batch.insert(keys::meta(REMAP_META), self.encode());
    }

    /// True when the catalogue's rewrite is done.
    pub fn catalogue_done(&self) -> bool {
        self.cursor >= BUCKETS
    }
}

/// Reads the moves file `remap` names, checking its length and CRC.
fn read_moves(dir: &Path, remap: &Remap) -> Result<Moves, StoreError> {
    Ok(moves::read(dir, remap.generation, remap.pairs, remap.crc)?)
}

/// The places of the catalogue in `tree` and its unfinished remap, if any (its moves read from
/// `dir`; a temporary store, without a directory, never has one at open). Changes nothing.
pub fn load(tree: &sled::Tree, dir: Option<&Path>) -> Result<(Places, Option<Remap>), StoreError> {
    let parity = match tree.get(keys::meta(PARITY_META))? {
        Some(v) if v.as_ref() == [1] => true,
        Some(v) if v.as_ref() == [0] => false,
        Some(_) => return Err(StoreError::Corrupt("parity entry".into())),
        None => false,
    };
    let remap = tree.get(keys::meta(REMAP_META))?.map(|v| Remap::decode(&v)).transpose()?;
    let Some(dir) = dir else { return Ok((Places::new(parity, None), None)) };
    let moved = match &remap {
        Some(remap) => Some(Arc::new(read_moves(dir, remap)?)),
        None => None,
    };
    Ok((Places::new(parity, moved), remap))
}

/// One step of the catalogue's rewrite: the next [`STEP_BUCKETS`] buckets from `remap`'s
/// cursor with every entry of the previous generation at its new place, and the cursor past
/// them, in one batch (a crash redoes the steps sled had not made durable; a rewritten entry is
/// current and is left alone the second time). Run by the writer between groups, the
/// only thread that changes buckets.
pub fn step(tree: &sled::Tree, places: &Places, remap: &mut Remap) -> Result<(), StoreError> {
    let end = remap.cursor.saturating_add(STEP_BUCKETS).min(BUCKETS);
    let from = bucket::bucket_key(remap.cursor).to_vec();
    let to = if end >= BUCKETS { vec![keys::ID + 1] } else { bucket::bucket_key(end).to_vec() };
    let mut batch = sled::Batch::default();
    let mut rewritten = 0;
    for item in tree.range(from..to) {
        let (key, value) = item?;
        if let Some(current) = catalogue::current(&value, places)? {
            batch.insert(key, current);
            rewritten += 1;
        }
    }
    let next = Remap { cursor: end, ..*remap };
    // A step that rewrote nothing writes nothing (a small store's buckets are mostly empty):
    // its cursor is recorded with the next one that does, and redoing it after a crash is a read.
    if rewritten > 0 {
        next.put_into(&mut batch);
        tree.apply_batch(batch)?;
    }
    *remap = next;
    Ok(())
}

/// Ends a remap whose catalogue and segments are rewritten: its `remap` entry goes (the caller
/// flushes, then removes the file with [`moves::remove_stale`]).
pub fn finish(tree: &sled::Tree) -> Result<(), StoreError> {
    tree.remove(keys::meta(REMAP_META))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::format::moves::{MovesFile, file_path, remove_stale};

    #[test]
    fn a_remap_entry_round_trips_and_a_moves_file_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let mut file = MovesFile::create(dir.path(), 3).unwrap();
        file.append(&[(8, 0), (100, 50)]).unwrap();
        file.append(&[(300, 90)]).unwrap();
        let (pairs, crc) = file.sync().unwrap();
        let remap = Remap { generation: 3, pairs, crc, cursor: 17 };
        assert_eq!(Remap::decode(&remap.encode()).unwrap(), remap);
        assert_eq!(read_moves(dir.path(), &remap).unwrap().pairs(), &[(8, 0), (100, 50), (300, 90)]);
        let mut bytes = std::fs::read(file_path(dir.path(), 3)).unwrap();
        bytes[20] ^= 1;
        std::fs::write(file_path(dir.path(), 3), &bytes).unwrap();
        assert!(matches!(read_moves(dir.path(), &remap), Err(StoreError::Corrupt(_))));
        remove_stale(dir.path(), None).unwrap();
        assert!(!file_path(dir.path(), 3).exists());
    }
}
