//! A compaction's moves file: where each record of the previous generation went.
//!
//! Owns [`Moves`] (old serial → new serial, in log order) and its file, `moves.<generation>` in
//! the data directory: 16 bytes a move (the old serial, then the new, big-endian), written by a
//! compaction's copy and its swap ([`MovesFile`]) and read back, checked against the count and
//! CRC-32 that sled records with the unfinished remap, when a start finds one ([`read`]).

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{FormatError, Serial, remove_if_there};

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
    pub fn create(dir: &Path, generation: u64) -> Result<MovesFile, FormatError> {
        let file = std::fs::File::create(file_path(dir, generation))?;
        Ok(MovesFile { out: std::io::BufWriter::with_capacity(1 << 16, file), crc: crc32fast::Hasher::new(), pairs: 0 })
    }

    /// Appends moves.
    pub fn append(&mut self, moves: &[(Serial, Serial)]) -> Result<(), FormatError> {
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
    pub fn sync(&mut self) -> Result<(u64, u32), FormatError> {
        self.out.flush()?;
        self.out.get_ref().sync_data()?;
        Ok((self.pairs, self.crc.clone().finalize()))
    }
}

/// Reads the moves file of `generation`, checking that it holds `count` moves with the CRC-32
/// `crc32`.
///
/// It is decoded as it is read, a piece at a time: the file is as large as the moves themselves
/// (16 bytes a live event), and holding both at once would double what a start after a crash
/// mid-remap needs.
pub fn read(dir: &Path, generation: u64, count: u64, crc32: u32) -> Result<Moves, FormatError> {
    use std::io::Read;
    let path = file_path(dir, generation);
    let mut file = std::fs::File::open(&path)?;
    let damaged = |what: &str| FormatError::Damaged(format!("{}: {what}", path.display()));
    if file.metadata()?.len() != count.saturating_mul(MOVE as u64) {
        return Err(damaged("its length does not match the moves recorded"));
    }
    let mut pairs = Vec::with_capacity(usize::try_from(count).map_err(|_| damaged("too many moves"))?);
    let mut crc = crc32fast::Hasher::new();
    // Moves read at a time.
    const PIECE: usize = 4096;
    let mut piece = vec![0u8; MOVE * PIECE];
    let mut left = count;
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
    if crc.finalize() != crc32 {
        return Err(damaged("it fails its checksum"));
    }
    Ok(Moves::new(pairs))
}

/// Removes the moves files of `dir` but `keep`'s.
pub fn remove_stale(dir: &Path, keep: Option<u64>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(generation) = name.to_str().and_then(|n| n.strip_prefix("moves.")) else { continue };
        if generation.parse::<u64>().is_ok_and(|g| Some(g) != keep) {
            remove_if_there(&dir.join(&name))?;
        }
    }
    Ok(())
}
