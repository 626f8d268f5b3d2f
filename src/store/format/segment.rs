//! Index segments: immutable files of sorted postings, read with `pread`.
//!
//! Owns the on-disk form of the secondary indexes. A segment holds the postings of the events
//! of one stretch of the event log: fixed 24-byte entries (the list's key hash, `u64::MAX -
//! created_at`, the record's place and length ([`pack`]); big-endian, so byte order is the order
//! of the lists), sorted, in
//! blocks of [`BLOCK`] entries; then the first entry of every block (the fences, which are all of
//! a segment kept in memory: 24 bytes per 4 KB of postings); then a trailer (the counts, a CRC-32
//! of the fences, a magic). A scan finds its first block by binary search of the fences and reads
//! blocks in order from there, so a list costs one `pread` per 4 KB of it, served by the page
//! cache, and none of it lives on the heap.
//!
//! Segments are never changed: new ones are written from the in-memory index ([`write()`]),
//! merged into larger ones ([`merge`]), or rewritten at a compaction's new serials (the same
//! function with a mapping). Which segments are the index is the catalogue's business
//! (`super::indexes`).

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// One entry: key hash, `u64::MAX - created_at`, the record's serial and length ([`pack`]).
pub type Posting = (u64, u64, u64);

/// Bits of a posting's third word that hold the record's length: a scan knows how much to read
/// (one `pread` of exactly the frame) without reading its header first.
const LEN_BITS: u32 = 16;
/// Serials must be below this (a log of 256 TiB): the writer refuses to grow the log past it.
pub const MAX_SERIAL: u64 = 1 << (64 - LEN_BITS);

/// The third word of a posting: the serial in the high 48 bits, the record's length in the low
/// 16. A longer record (a contact list of a thousand follows, say) is stored with length 0, which
/// readers take as "unknown" (they read the frame's header first); the order of the words is the
/// order of the serials either way.
pub fn pack(serial: u64, len: u32) -> u64 {
    debug_assert!(serial < MAX_SERIAL, "serial past the log's limit");
    let len = if len >> LEN_BITS == 0 { u64::from(len) } else { 0 };
    (serial << LEN_BITS) | len
}

/// A posting's serial and record length (0: unknown), as [`pack`] stored them.
pub fn unpack(word: u64) -> (u64, u32) {
    (word >> LEN_BITS, (word & ((1 << LEN_BITS) - 1)) as u32)
}

/// Postings per block: a block is one 4 KB page (4,080 bytes).
pub const BLOCK: usize = 170;
/// Bytes of one posting.
const POSTING: usize = 24;
/// Blocks a full read (a merge) takes at once.
const BULK: usize = 64;
/// Last bytes of every segment file.
const MAGIC: &[u8; 8] = b"hearthS2";
/// Fence count, posting count, fence CRC, magic.
const TRAILER: usize = 8 + 8 + 4 + 8;

/// Segment failures: only ever met opening one (a scan's read failure is an `io::Error`).
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    /// The file could not be read or written.
    #[error("index segment {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file is not a whole segment.
    #[error("index segment {}: {reason}", path.display())]
    Damaged {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: &'static str,
    },
}

/// One open segment.
pub struct Segment {
    file: File,
    path: PathBuf,
    fences: Vec<Posting>,
    postings: u64,
}

fn encode(p: &Posting, out: &mut Vec<u8>) {
    out.extend_from_slice(&p.0.to_be_bytes());
    out.extend_from_slice(&p.1.to_be_bytes());
    out.extend_from_slice(&p.2.to_be_bytes());
}

fn decode(b: &[u8]) -> Posting {
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_be_bytes(w)
    };
    (word(0), word(1), word(2))
}

impl Segment {
    /// Opens the segment at `path`, checking its trailer and fences.
    pub fn open(path: &Path) -> Result<Segment, SegmentError> {
        let io = |source| SegmentError::Io { path: path.to_path_buf(), source };
        let damaged = |reason| SegmentError::Damaged { path: path.to_path_buf(), reason };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < TRAILER as u64 {
            return Err(damaged("shorter than its trailer"));
        }
        let mut trailer = [0u8; TRAILER];
        file.read_exact_at(&mut trailer, len - TRAILER as u64).map_err(io)?;
        if &trailer[20..] != MAGIC {
            return Err(damaged("no segment trailer"));
        }
        let fences = u64::from_be_bytes(trailer[..8].try_into().map_err(|_| damaged("trailer"))?);
        let postings = u64::from_be_bytes(trailer[8..16].try_into().map_err(|_| damaged("trailer"))?);
        let crc = u32::from_be_bytes(trailer[16..20].try_into().map_err(|_| damaged("trailer"))?);
        let expected_len = postings
            .checked_add(fences)
            .and_then(|n| n.checked_mul(POSTING as u64))
            .and_then(|n| n.checked_add(TRAILER as u64));
        if expected_len != Some(len) || fences != postings.div_ceil(BLOCK as u64) {
            return Err(damaged("its length does not match its counts"));
        }
        let mut bytes = vec![0u8; usize::try_from(fences).map_err(|_| damaged("too many fences"))? * POSTING];
        file.read_exact_at(&mut bytes, postings * POSTING as u64).map_err(io)?;
        if crc32fast::hash(&bytes) != crc {
            return Err(damaged("its fences fail their checksum"));
        }
        let fences = bytes.chunks_exact(POSTING).map(decode).collect();
        Ok(Segment { file, path: path.to_path_buf(), fences, postings })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How many postings it holds.
    pub fn postings(&self) -> u64 {
        self.postings
    }

    /// Bytes of its file.
    pub fn file_bytes(&self) -> u64 {
        (self.postings + self.fences.len() as u64) * POSTING as u64 + TRAILER as u64
    }

    /// The postings from `from` to `to` (inclusive), in order.
    pub fn range(&self, from: Posting, to: Posting) -> Scan<'_> {
        let block = self.fences.partition_point(|f| *f <= from).saturating_sub(1);
        Scan { seg: self, block, blocks_per_read: 1, buf: Vec::new(), pos: 0, from, to, done: false }
    }

    /// Every posting, in order, read in large pieces.
    fn all(&self) -> Scan<'_> {
        let mut scan = self.range((0, 0, 0), (u64::MAX, u64::MAX, u64::MAX));
        scan.blocks_per_read = BULK;
        scan
    }
}

/// The postings of a range of one segment.
pub struct Scan<'a> {
    seg: &'a Segment,
    /// The next block to read.
    block: usize,
    blocks_per_read: usize,
    buf: Vec<u8>,
    pos: usize,
    from: Posting,
    to: Posting,
    done: bool,
}

impl Iterator for Scan<'_> {
    type Item = io::Result<Posting>;

    fn next(&mut self) -> Option<io::Result<Posting>> {
        loop {
            if self.done {
                return None;
            }
            if self.pos >= self.buf.len() {
                if self.block >= self.seg.fences.len() || self.seg.fences[self.block] > self.to {
                    self.done = true;
                    return None;
                }
                let first = (self.block * BLOCK) as u64;
                let count = ((self.blocks_per_read * BLOCK) as u64).min(self.seg.postings - first);
                self.buf.resize(count as usize * POSTING, 0);
                if let Err(e) = self.seg.file.read_exact_at(&mut self.buf, first * POSTING as u64) {
                    self.done = true;
                    return Some(Err(e));
                }
                self.block += self.blocks_per_read;
                self.pos = 0;
            }
            let posting = decode(&self.buf[self.pos..self.pos + POSTING]);
            self.pos += POSTING;
            if posting < self.from {
                continue;
            }
            if posting > self.to {
                self.done = true;
                return None;
            }
            return Some(Ok(posting));
        }
    }
}

/// Writes a segment of `postings` (sorted) to `path`, durably (the file; the caller syncs the
/// directory once its name is recorded).
pub fn write(path: &Path, postings: impl Iterator<Item = io::Result<Posting>>) -> Result<Segment, SegmentError> {
    let io = |source| SegmentError::Io { path: path.to_path_buf(), source };
    let file = OpenOptions::new().write(true).create(true).truncate(true).open(path).map_err(io)?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    let mut fences = Vec::new();
    let mut count: u64 = 0;
    let mut buf = Vec::with_capacity(POSTING);
    let mut last = None;
    for posting in postings {
        let posting = posting.map_err(io)?;
        debug_assert!(last.is_none_or(|l| l < posting), "segment postings out of order");
        last = Some(posting);
        if count.is_multiple_of(BLOCK as u64) {
            fences.push(posting);
        }
        buf.clear();
        encode(&posting, &mut buf);
        out.write_all(&buf).map_err(io)?;
        count += 1;
    }
    let mut tail = Vec::with_capacity(fences.len() * POSTING + TRAILER);
    for fence in &fences {
        encode(fence, &mut tail);
    }
    let crc = crc32fast::hash(&tail);
    tail.extend_from_slice(&(fences.len() as u64).to_be_bytes());
    tail.extend_from_slice(&count.to_be_bytes());
    tail.extend_from_slice(&crc.to_be_bytes());
    tail.extend_from_slice(MAGIC);
    out.write_all(&tail).map_err(io)?;
    let file = out.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    drop(file);
    Segment::open(path)
}

/// Writes the postings of `inputs` merged, each passed through `keep` (which may drop it or
/// give it another serial, keeping the order), to a new segment at `path`. Stops with
/// `Interrupted` once `stopping` is set.
pub fn merge(
    inputs: &[&Segment],
    path: &Path,
    keep: impl Fn(Posting) -> Option<Posting>,
    stopping: &AtomicBool,
) -> Result<Segment, SegmentError> {
    let mut heads: Vec<(Scan<'_>, Option<Posting>)> = Vec::with_capacity(inputs.len());
    let mut first_error = None;
    for seg in inputs {
        let mut scan = seg.all();
        let head = match scan.next().transpose() {
            Ok(head) => head,
            Err(e) => {
                first_error.get_or_insert(e);
                None
            }
        };
        heads.push((scan, head));
    }
    if let Some(e) = first_error {
        return Err(SegmentError::Io { path: path.to_path_buf(), source: e });
    }
    let mut seen: u64 = 0;
    let merged = std::iter::from_fn(|| {
        loop {
            seen += 1;
            if seen.is_multiple_of(1 << 16) && stopping.load(Ordering::Acquire) {
                return Some(Err(io::Error::new(io::ErrorKind::Interrupted, "the store is stopping")));
            }
            let (at, _) =
                heads.iter().enumerate().filter_map(|(i, (_, h))| h.map(|h| (i, h))).min_by_key(|&(_, h)| h)?;
            let (scan, head) = &mut heads[at];
            let taken = head.take();
            match scan.next().transpose() {
                Ok(next) => *head = next,
                Err(e) => return Some(Err(e)),
            }
            if let Some(posting) = taken.and_then(&keep) {
                return Some(Ok(posting));
            }
        }
    });
    let written = write(path, merged);
    if written.is_err() {
        let _ = std::fs::remove_file(path);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    fn postings(n: u64, hash: impl Fn(u64) -> u64) -> Vec<Posting> {
        let mut out: Vec<Posting> = (0..n).map(|i| (hash(i), u64::MAX - (1000 + i % 97), i * 10)).collect();
        out.sort_unstable();
        out
    }

    #[test]
    fn a_range_is_exactly_the_postings_between_its_bounds_across_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let all = postings(2000, |i| i % 3);
        let seg = write(&dir.path().join("a.seg"), all.iter().copied().map(Ok)).unwrap();
        assert_eq!(seg.postings(), 2000);
        for (from, to) in [((1, 0, 0), (1, u64::MAX, u64::MAX)), ((0, u64::MAX - 1050, 0), (2, u64::MAX - 1010, 5))] {
            let got: Vec<_> = seg.range(from, to).map(Result::unwrap).collect();
            let want: Vec<_> = all.iter().copied().filter(|p| *p >= from && *p <= to).collect();
            assert_eq!(got, want);
        }
        assert_eq!(seg.range((9, 0, 0), (9, u64::MAX, u64::MAX)).count(), 0);
    }

    #[test]
    fn merge_keeps_order_and_applies_the_mapping() {
        let dir = tempfile::tempdir().unwrap();
        let a = postings(500, |i| i % 5);
        let b: Vec<Posting> = postings(700, |i| i % 7).into_iter().map(|(h, r, s)| (h, r, s + 1)).collect();
        let sa = write(&dir.path().join("a.seg"), a.iter().copied().map(Ok)).unwrap();
        let sb = write(&dir.path().join("b.seg"), b.iter().copied().map(Ok)).unwrap();
        let stop = AtomicBool::new(false);
        let keep = |(h, r, s): Posting| (s % 20 != 0).then_some((h, r, s * 2));
        let merged = merge(&[&sa, &sb], &dir.path().join("m.seg"), keep, &stop).unwrap();
        let mut want: Vec<Posting> = a.iter().chain(&b).copied().filter_map(keep).collect();
        want.sort_unstable();
        let got: Vec<_> = merged.all().map(Result::unwrap).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_packed_place_keeps_the_serial_and_its_order_and_a_long_record_reads_as_unknown() {
        assert_eq!(unpack(pack(123_456_789, 640)), (123_456_789, 640));
        assert_eq!(unpack(pack(MAX_SERIAL - 1, 65_535)), (MAX_SERIAL - 1, 65_535));
        assert_eq!(unpack(pack(42, 70_000)), (42, 0));
        assert!(pack(10, 65_535) < pack(11, 1));
    }

    #[test]
    fn a_truncated_or_altered_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.seg");
        write(&path, postings(400, |i| i).into_iter().map(Ok)).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..bytes.len() - 1]).unwrap();
        assert!(matches!(Segment::open(&path), Err(SegmentError::Damaged { .. })));
        let mut altered = bytes.clone();
        let fences_at = 400 * POSTING;
        altered[fences_at] ^= 1;
        std::fs::write(&path, &altered).unwrap();
        assert!(matches!(
            Segment::open(&path),
            Err(SegmentError::Damaged { reason: "its fences fail their checksum", .. })
        ));
    }
}
