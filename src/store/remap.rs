//! What a compaction leaves to finish after its swap: the catalogue's entries and the index
//! segments still name the previous generation's serials, and are read through the compaction's
//! moves until they are rewritten in the background.
//!
//! Owns [`Moves`] (old serial → new serial, in log order; the file `moves.<generation>` in the
//! data directory, its length and CRC recorded in sled), [`Places`] (how a catalogue entry's
//! stored place reads: which parity bit marks the current generation, and the moves of the
//! previous one while they are needed), the persisted [`Remap`] state (the `m` `remap` entry:
//! the moves file, and how far the catalogue's rewrite has come), and the rewrite's steps.
//!
//! Why: a compaction gives every live record a new place. Rewriting every `i` bucket and every
//! index segment at its swap stopped writes for as long as that took, which grew with the store
//! (README, Store size, has the figures). Now the swap flips the catalogue's parity (an entry
//! whose top bit is not the current parity names a place in the previous generation, to be
//! looked up in the moves) and keeps the old segments, read through the same moves; the writer
//! rewrites the buckets a step at a time between its groups, and the merge thread writes the
//! old segments out again at their new serials. When both are done the `remap` entry goes, then
//! the file.
//! A crash meanwhile leaves the `remap` entry, and the next start goes on where it was.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::index::Serial;
use super::{StoreError, catalogue, keys};

/// The bit of a catalogue entry's stored place that tells the generation it points into (its
/// parity); serials are below 2^48, so the bit is free.
pub const PARITY: u64 = 1 << 63;
/// Buckets the writer rewrites in one step: small enough that a group waiting behind a step is
/// not held up long, large enough that the 2^20 buckets take a few hundred steps.
pub const STEP_BUCKETS: u32 = 4096;
/// How many buckets the catalogue has.
pub const BUCKETS: u32 = 1 << catalogue::BUCKET_BITS;
/// The `m` name of the parity of the current generation's entries (one byte; absent = 0).
pub const PARITY_META: &str = "parity";
/// The `m` name of an unfinished remap ([`Remap`]).
pub const REMAP_META: &str = "remap";
/// Bytes of one move in the moves file: the old serial, then the new, big-endian.
const MOVE: usize = 16;

/// Where a compaction moved each record: old serial → new serial, sorted by the old (and so by
/// the new: a compaction keeps the log's order).
#[derive(Debug, Default)]
pub struct Moves {
    pairs: Vec<(Serial, Serial)>,
}

impl Moves {
    /// The moves, which must be sorted by old serial.
    pub fn new(pairs: Vec<(Serial, Serial)>) -> Moves {
        Moves { pairs }
    }

    /// Where the record at `old` went; None when the compaction did not keep it (it had been
    /// removed).
    pub fn get(&self, old: Serial) -> Option<Serial> {
        self.pairs.binary_search_by_key(&old, |&(o, _)| o).ok().map(|at| self.pairs[at].1)
    }

    /// Every move, in log order.
    pub fn pairs(&self) -> &[(Serial, Serial)] {
        &self.pairs
    }
}

/// How the catalogue's stored places read (see the module doc).
#[derive(Clone, Debug, Default)]
pub struct Places {
    /// [`PARITY`] or 0: the bit of the entries that point into the current generation's log.
    parity: u64,
    /// While a remap is unfinished: where the previous generation's records went.
    moved: Option<Arc<Moves>>,
}

impl Places {
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

    /// The parity byte recorded under [`PARITY_META`].
    pub fn parity_byte(&self) -> u8 {
        u8::from(self.parity != 0)
    }
}

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

/// The moves file of `generation` in `dir`.
pub fn file_path(dir: &Path, generation: u64) -> PathBuf {
    dir.join(format!("moves.{generation}"))
}

/// A moves file being written: by the compaction's copy (most moves) and its last step (the
/// moves of the events stored meanwhile).
pub struct MovesFile {
    out: std::io::BufWriter<std::fs::File>,
    crc: crc32fast::Hasher,
    pairs: u64,
}

impl MovesFile {
    /// Creates (or empties) the moves file of `generation` in `dir`.
    pub fn create(dir: &Path, generation: u64) -> Result<MovesFile, StoreError> {
        let file = std::fs::File::create(file_path(dir, generation))?;
        Ok(MovesFile { out: std::io::BufWriter::with_capacity(1 << 16, file), crc: crc32fast::Hasher::new(), pairs: 0 })
    }

    /// Appends moves.
    pub fn append(&mut self, moves: &[(Serial, Serial)]) -> Result<(), StoreError> {
        for &(old, new) in moves {
            let mut bytes = [0u8; MOVE];
            bytes[..8].copy_from_slice(&old.to_be_bytes());
            bytes[8..].copy_from_slice(&new.to_be_bytes());
            self.out.write_all(&bytes)?;
            self.crc.update(&bytes);
        }
        self.pairs += moves.len() as u64;
        Ok(())
    }

    /// Writes out and syncs what was appended; returns the count and CRC to record.
    pub fn sync(&mut self) -> Result<(u64, u32), StoreError> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        Ok((self.pairs, self.crc.clone().finalize()))
    }
}

/// Reads the moves file `remap` names, checking its length and CRC.
///
/// It is decoded as it is read, a piece at a time: the file is as large as the moves themselves
/// (16 bytes a live event), and holding both at once would double what a start after a crash
/// mid-remap needs.
fn read_moves(dir: &Path, remap: &Remap) -> Result<Moves, StoreError> {
    use std::io::Read;
    let path = file_path(dir, remap.generation);
    let mut file = std::fs::File::open(&path)?;
    let damaged = |what: &str| StoreError::Corrupt(format!("{}: {what}", path.display()));
    if file.metadata()?.len() != remap.pairs.saturating_mul(MOVE as u64) {
        return Err(damaged("its length does not match the moves recorded"));
    }
    let mut pairs = Vec::with_capacity(usize::try_from(remap.pairs).map_err(|_| damaged("too many moves"))?);
    let mut crc = crc32fast::Hasher::new();
    // Moves read at a time.
    const PIECE: usize = 4096;
    let mut piece = vec![0u8; MOVE * PIECE];
    let mut left = remap.pairs;
    while left > 0 {
        let n = usize::try_from(left).map_or(PIECE, |left| left.min(PIECE)) * MOVE;
        file.read_exact(&mut piece[..n])?;
        crc.update(&piece[..n]);
        pairs.extend(piece[..n].chunks_exact(MOVE).map(|m| {
            let word = |at: usize| m[at..at + 8].try_into().map(u64::from_be_bytes).unwrap_or(0);
            (word(0), word(8))
        }));
        left -= (n / MOVE) as u64;
    }
    if crc.finalize() != remap.crc {
        return Err(damaged("it fails its checksum"));
    }
    Ok(Moves::new(pairs))
}

/// The places of the catalogue in `tree` and its unfinished remap, if any (its moves read from
/// `dir`; a temporary store, without a directory, never has one at open). Changes nothing.
pub fn load(tree: &sled::Tree, dir: Option<&Path>) -> Result<(Places, Option<Remap>), StoreError> {
    let parity = match tree.get(keys::meta(PARITY_META))? {
        Some(v) if v.as_ref() == [1] => PARITY,
        Some(v) if v.as_ref() == [0] => 0,
        Some(_) => return Err(StoreError::Corrupt("parity entry".into())),
        None => 0,
    };
    let remap = tree.get(keys::meta(REMAP_META))?.map(|v| Remap::decode(&v)).transpose()?;
    let Some(dir) = dir else { return Ok((Places { parity, moved: None }, None)) };
    let moved = match &remap {
        Some(remap) => Some(Arc::new(read_moves(dir, remap)?)),
        None => None,
    };
    Ok((Places { parity, moved }, remap))
}

/// Removes the moves files of `dir` but `keep`'s.
pub fn remove_stale(dir: &Path, keep: Option<u64>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(generation) = name.to_str().and_then(|n| n.strip_prefix("moves.")) else { continue };
        if generation.parse::<u64>().is_ok_and(|g| Some(g) != keep) {
            super::indexes::remove_if_there(&dir.join(&name))?;
        }
    }
    Ok(())
}

/// One step of the catalogue's rewrite: the next [`STEP_BUCKETS`] buckets from `remap`'s
/// cursor with every entry of the previous generation at its new place, and the cursor past
/// them, in one batch (a crash redoes the steps sled had not made durable; a rewritten entry is
/// current and is left alone the second time). Run by the writer between groups, the
/// only thread that changes buckets.
pub fn step(tree: &sled::Tree, places: &Places, remap: &mut Remap) -> Result<(), StoreError> {
    let end = remap.cursor.saturating_add(STEP_BUCKETS).min(BUCKETS);
    let from = catalogue::bucket_key(remap.cursor).to_vec();
    let to = if end >= BUCKETS { vec![keys::ID + 1] } else { catalogue::bucket_key(end).to_vec() };
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
/// flushes, then removes the file with [`remove_stale`]).
pub fn finish(tree: &sled::Tree) -> Result<(), StoreError> {
    tree.remove(keys::meta(REMAP_META))?;
    Ok(())
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

    #[test]
    fn bucket_keys_follow_the_catalogues_and_cover_it_in_order() {
        let id = catalogue::test_id([0xab, 0xcd, 0xef], 1);
        let n = (0xab << 12) | (0xcd << 4) | 0xe;
        assert_eq!(catalogue::bucket_key(n), catalogue::key(&id));
        let key = catalogue::bucket_key;
        assert!(key(0) < key(1) && key(BUCKETS - 1) < [keys::ID + 1, 0, 0, 0]);
    }

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
