//! The event log: one append-only file of event records, read in place.
//!
//! Owns `events.log` in the data directory. Each record is a frame: the payload's length (u32
//! big-endian), its CRC-32 (u32 big-endian), then the payload, a [`super::record`]. A record's
//! serial is the offset of its frame, so serials only grow, and reading a record is one `pread`
//! served by the OS page cache: no sled leaf is paged in and decoded for it, and the records take
//! no room in sled's cache.
//!
//! Durability: the log is the store's journal. The writer writes a group's frames after the end
//! and syncs the file (`fdatasync`, which also persists its new size); that is the commit point
//! of every write in the group. Then it applies the sled batch that makes them reachable: their
//! `i` entries and the new end (`m` `log_end`). sled is flushed later, so after a crash the file
//! can hold complete frames after the end sled recorded: [`Log::recover_tail`] finds them (and
//! cuts off a torn last frame, which was never acknowledged) and the writer replays them. Frames
//! before the end are never written again; a removed event's frame stays where it is,
//! unreachable, until the file is compacted.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock};

use super::Serial;

/// The log's file name in the data directory before its first compaction (generation 0).
pub const FILE: &str = "events.log";

/// The log's file name in generation `generation`: each compaction writes the live records to
/// the next generation's file, and sled's `log_gen` says which file is the log.
pub fn file_name(generation: u64) -> String {
    match generation {
        0 => FILE.to_string(),
        n => format!("events.{n}.log"),
    }
}

/// Removes the files of other generations than `current` from `dir`: the new file of a
/// compaction that did not finish, or the old one of a compaction that did.
pub fn remove_other_generations(dir: &Path, current: &str) -> io::Result<()> {
    let mut removed = false;
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        let generation = name.strip_prefix("events.").and_then(|n| n.strip_suffix(".log"));
        let is_log = name == FILE || generation.is_some_and(|g| g.parse::<u64>().is_ok());
        if is_log && name != current {
            tracing::info!(file = name, "removing an event log of another generation");
            std::fs::remove_file(dir.join(name))?;
            removed = true;
        }
    }
    if removed {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}
/// Length and CRC before each payload.
pub const FRAME_HEADER: u64 = 8;
/// Bytes a read takes at once: most records fit, so most reads are one `pread`.
const READ_AHEAD: u64 = 2048;

/// Event log failures.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// Reading, writing or syncing the file failed.
    #[error("event log: {0}")]
    Io(#[from] io::Error),
    /// A frame is not what was written.
    #[error("event log: corrupt frame at {serial}: {reason}")]
    Corrupt {
        /// The frame's offset.
        serial: Serial,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The file holds less than sled says was committed to it.
    #[error("event log: {name} has {len} bytes but {committed} were committed")]
    Short {
        /// The log's file name.
        name: String,
        /// The file's length.
        len: u64,
        /// The committed end recorded in sled.
        committed: u64,
    },
}

/// Where the frames live: the file, or memory for a temporary store.
enum Backing {
    File {
        file: File,
        /// Where it was opened, and the (device, inode) it had there: to notice the file being
        /// removed or replaced under the store.
        path: PathBuf,
        identity: (u64, u64),
    },
    Memory(RwLock<Vec<u8>>),
}

/// The event log of one store.
pub struct Log {
    backing: Backing,
    /// The committed end: frames before it are reachable and never change.
    end: AtomicU64,
}

impl Log {
    /// Opens (or creates) the log `name` in `dir`, whose end sled recorded as `committed`.
    /// Frames after it are left for [`Log::recover_tail`].
    pub fn open(dir: &Path, name: &str, committed: u64) -> Result<Log, LogError> {
        let path = dir.join(name);
        let created = !path.exists();
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&path)?;
        if created {
            // The new name must survive a power cut as well as the data written under it.
            File::open(dir)?.sync_all()?;
        }
        let meta = file.metadata()?;
        if meta.len() < committed {
            return Err(LogError::Short { name: name.to_string(), len: meta.len(), committed });
        }
        let identity = (meta.dev(), meta.ino());
        Ok(Log { backing: Backing::File { file, path, identity }, end: AtomicU64::new(committed) })
    }

    /// The complete, intact frames after the end, in order, made readable by moving the end past
    /// them; whatever follows the last of them (a frame torn by a crash, never acknowledged) is
    /// cut off. Returns their serials, for the writer to replay.
    pub fn recover_tail(&self) -> Result<Vec<Serial>, LogError> {
        let Backing::File { file, .. } = &self.backing else { return Ok(Vec::new()) };
        let len = file.metadata()?.len();
        let mut at = self.end();
        let mut serials = Vec::new();
        let mut reader = io::BufReader::with_capacity(1 << 16, file);
        io::Seek::seek(&mut reader, io::SeekFrom::Start(at))?;
        let mut payload = Vec::new();
        while at + FRAME_HEADER <= len {
            let mut header = [0u8; FRAME_HEADER as usize];
            io::Read::read_exact(&mut reader, &mut header)?;
            let (size, crc) = split_header(header);
            // An empty payload is never written: all zeros is what a torn write leaves.
            if size == 0 || at + FRAME_HEADER + size > len {
                break;
            }
            payload.resize(usize::try_from(size).map_err(io::Error::other)?, 0);
            io::Read::read_exact(&mut reader, &mut payload)?;
            if crc32fast::hash(&payload) != crc {
                break;
            }
            serials.push(at);
            at += FRAME_HEADER + size;
        }
        if at < len {
            tracing::warn!(bytes = len - at, "cutting a torn frame, never acknowledged, off the event log");
            self.truncate(at)?;
        }
        self.commit(at);
        Ok(serials)
    }

    /// Cuts the file back to `at` (the end), dropping the frames of a group that failed.
    pub fn truncate(&self, at: u64) -> io::Result<()> {
        match &self.backing {
            Backing::File { file, .. } => {
                file.set_len(at)?;
                file.sync_data()
            }
            Backing::Memory(bytes) => {
                let at = usize::try_from(at).map_err(io::Error::other)?;
                bytes.write().unwrap_or_else(PoisonError::into_inner).truncate(at);
                Ok(())
            }
        }
    }

    /// A log in memory (temporary stores).
    pub fn memory() -> Log {
        Log { backing: Backing::Memory(RwLock::new(Vec::new())), end: AtomicU64::new(0) }
    }

    /// The committed end: where the next group's frames go.
    pub fn end(&self) -> u64 {
        self.end.load(Ordering::Acquire)
    }

    /// Writes `frames` at `at` (the committed end) and syncs them to disk. They are not
    /// reachable until [`Log::commit`].
    /// Fails when the file at the log's path is no longer the one open (removed or replaced under
    /// the running store): writes to it would be acknowledged and then lost.
    pub fn write(&self, at: u64, frames: &[u8]) -> io::Result<()> {
        self.put(at, frames)?;
        self.sync()
    }

    /// [`Log::write`] without the sync: a compaction writes a whole new file, then syncs it once.
    pub fn put(&self, at: u64, frames: &[u8]) -> io::Result<()> {
        match &self.backing {
            Backing::File { file, path, identity } => {
                let named = std::fs::metadata(path);
                if !named.is_ok_and(|named| (named.dev(), named.ino()) == *identity) {
                    return Err(io::Error::other(format!("{} was removed or replaced", path.display())));
                }
                file.write_all_at(frames, at)
            }
            Backing::Memory(bytes) => {
                let mut bytes = bytes.write().unwrap_or_else(PoisonError::into_inner);
                let at = usize::try_from(at).map_err(io::Error::other)?;
                bytes.truncate(at);
                bytes.extend_from_slice(frames);
                Ok(())
            }
        }
    }

    /// Makes what was written durable (`fdatasync`, which also persists the file's new size).
    pub fn sync(&self) -> io::Result<()> {
        match &self.backing {
            Backing::File { file, .. } => file.sync_data(),
            Backing::Memory(_) => Ok(()),
        }
    }

    /// Sets the end: the frames before it are synced and may be read. The writer moves it past a
    /// group's frames once they are synced, and back if the group then fails.
    pub fn commit(&self, end: u64) {
        self.end.store(end, Ordering::Release);
    }

    /// The payload length the header of the frame at `serial` claims (not checked against the
    /// payload: [`Log::read`] does that), or None when the header does not fit before the end.
    pub fn claimed_len(&self, serial: Serial) -> Option<u64> {
        if serial.saturating_add(FRAME_HEADER) > self.end() {
            return None;
        }
        let mut header = [0u8; FRAME_HEADER as usize];
        self.read_at(&mut header, serial).ok()?;
        Some(split_header(header).0)
    }

    /// The payload of the frame at `serial`, checked against its CRC. One `pread` for most
    /// records: the frame is read together with its header when it fits in `READ_AHEAD`.
    pub fn read(&self, serial: Serial) -> Result<Vec<u8>, LogError> {
        self.read_hinted(serial, READ_AHEAD)
    }

    /// [`Log::read`] of a payload known to be `len` bytes long (the index keeps each record's
    /// length): exactly one `pread` of exactly the frame.
    pub fn read_sized(&self, serial: Serial, len: u32) -> Result<Vec<u8>, LogError> {
        self.read_hinted(serial, FRAME_HEADER + u64::from(len))
    }

    /// The first `buf.len()` bytes of the payload of the frame at `serial`, not checked against
    /// its CRC (that needs the whole payload): for a reader of a record's fixed first fields
    /// that checks what it reads (see `record::prefix`).
    pub fn read_start(&self, serial: Serial, buf: &mut [u8]) -> Result<(), LogError> {
        let at = serial.saturating_add(FRAME_HEADER);
        if at.saturating_add(buf.len() as u64) > self.end() {
            return Err(LogError::Corrupt { serial, reason: "ends past the committed end" });
        }
        Ok(self.read_at(buf, at)?)
    }

    /// Reads `hint` bytes at `serial` first, then the rest of the frame if it is longer.
    fn read_hinted(&self, serial: Serial, hint: u64) -> Result<Vec<u8>, LogError> {
        let corrupt = |reason| LogError::Corrupt { serial, reason };
        let end = self.end();
        if serial.saturating_add(FRAME_HEADER) > end {
            return Err(corrupt("starts past the committed end"));
        }
        let first = usize::try_from((end - serial).min(hint.max(FRAME_HEADER))).map_err(|_| corrupt("too long"))?;
        let mut buf = vec![0u8; first];
        self.read_at(&mut buf, serial)?;
        let header: [u8; FRAME_HEADER as usize] =
            buf.get(..FRAME_HEADER as usize).and_then(|h| h.try_into().ok()).ok_or(corrupt("short header"))?;
        let (len, crc) = split_header(header);
        if serial + FRAME_HEADER + len > end {
            return Err(corrupt("ends past the committed end"));
        }
        let total = usize::try_from(FRAME_HEADER + len).map_err(|_| corrupt("too long"))?;
        if total > buf.len() {
            let have = buf.len();
            buf.resize(total, 0);
            self.read_at(&mut buf[have..], serial + have as u64)?;
        }
        buf.truncate(total);
        buf.drain(..FRAME_HEADER as usize);
        if crc32fast::hash(&buf) != crc {
            return Err(corrupt("checksum mismatch"));
        }
        Ok(buf)
    }

    fn read_at(&self, buf: &mut [u8], at: u64) -> io::Result<()> {
        match &self.backing {
            Backing::File { file, .. } => file.read_exact_at(buf, at),
            Backing::Memory(bytes) => {
                let bytes = bytes.read().unwrap_or_else(PoisonError::into_inner);
                let from = usize::try_from(at).map_err(io::Error::other)?;
                let src = bytes.get(from..from + buf.len()).ok_or(io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }

    /// Bytes the file occupies.
    pub fn size(&self) -> io::Result<u64> {
        match &self.backing {
            Backing::File { file, .. } => Ok(file.metadata()?.len()),
            Backing::Memory(bytes) => Ok(bytes.read().unwrap_or_else(PoisonError::into_inner).len() as u64),
        }
    }
}

/// Appends one frame holding `payload` to `frames`; returns the frame's length.
pub fn push_frame(frames: &mut Vec<u8>, payload: &[u8]) -> u64 {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    frames.extend_from_slice(&len.to_be_bytes());
    frames.extend_from_slice(&crc32fast::hash(payload).to_be_bytes());
    frames.extend_from_slice(payload);
    FRAME_HEADER + payload.len() as u64
}

/// The payload of the frame at `at` in a buffer of frames not yet written.
pub fn frame_in(frames: &[u8], at: usize) -> Option<&[u8]> {
    let header: [u8; FRAME_HEADER as usize] = frames.get(at..at + FRAME_HEADER as usize)?.try_into().ok()?;
    let (len, _) = split_header(header);
    let start = at + FRAME_HEADER as usize;
    frames.get(start..start + usize::try_from(len).ok()?)
}

fn split_header(header: [u8; FRAME_HEADER as usize]) -> (u64, u32) {
    let [a, b, c, d, e, f, g, h] = header;
    (u64::from(u32::from_be_bytes([a, b, c, d])), u32::from_be_bytes([e, f, g, h]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(payloads: &[&[u8]]) -> (Vec<u8>, Vec<u64>) {
        let (mut out, mut at) = (Vec::new(), Vec::new());
        for p in payloads {
            at.push(out.len() as u64);
            push_frame(&mut out, p);
        }
        (out, at)
    }

    #[test]
    fn committed_frames_read_back_and_a_torn_tail_is_cut_at_recovery() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), FILE, 0).unwrap();
        let (first, at) = frames(&[b"one", b"2", b"three"]);
        log.write(0, &first).unwrap();
        // Written but not committed: not readable yet.
        assert!(matches!(log.read(at[0]), Err(LogError::Corrupt { .. })));
        log.commit(first.len() as u64);
        assert_eq!(log.read(at[2]).unwrap(), b"three");
        assert_eq!(log.read(at[1]).unwrap(), b"2");
        // A later group is synced but sled never recorded it; the one after that was torn.
        let (second, _) = frames(&[b"synced", b"also synced"]);
        log.write(log.end(), &second).unwrap();
        let (third, _) = frames(&[b"torn by the crash"]);
        log.write(log.end() + second.len() as u64, &third[..third.len() - 3]).unwrap();
        drop(log);
        let log = Log::open(dir.path(), FILE, first.len() as u64).unwrap();
        let tail = log.recover_tail().unwrap();
        let synced_end = (first.len() + second.len()) as u64;
        assert_eq!(tail, vec![first.len() as u64, first.len() as u64 + 14]);
        assert_eq!(log.end(), synced_end);
        assert_eq!(log.size().unwrap(), synced_end);
        assert_eq!(log.read(tail[1]).unwrap(), b"also synced");
        // Nothing more to recover the next time.
        drop(log);
        let log = Log::open(dir.path(), FILE, synced_end).unwrap();
        assert_eq!(log.recover_tail().unwrap(), Vec::<u64>::new());
        // The next group goes where the torn frame was.
        let (fourth, _) = frames(&[b"four"]);
        log.write(log.end(), &fourth).unwrap();
        log.commit(log.end() + fourth.len() as u64);
        assert_eq!(log.read(synced_end).unwrap(), b"four");
    }

    #[test]
    fn zeros_after_the_end_are_not_frames() {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), FILE, 0).unwrap();
        log.write(0, &[0u8; 100]).unwrap();
        assert_eq!(log.recover_tail().unwrap(), Vec::<u64>::new());
        assert_eq!(log.size().unwrap(), 0);
    }

    #[test]
    fn a_log_shorter_than_committed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        drop(Log::open(dir.path(), FILE, 0).unwrap());
        match Log::open(dir.path(), FILE, 100) {
            Err(e) => assert_eq!(e.to_string(), "event log: events.log has 0 bytes but 100 were committed"),
            Ok(_) => panic!("opened"),
        }
    }

    #[test]
    fn damaged_frames_are_errors_not_panics() {
        let log = Log::memory();
        let (bytes, at) = frames(&[b"payload", b"next"]);
        let mut damaged = bytes.clone();
        damaged[FRAME_HEADER as usize + 2] ^= 1;
        log.write(0, &damaged).unwrap();
        log.commit(bytes.len() as u64);
        match log.read(at[0]) {
            Err(e) => assert_eq!(e.to_string(), "event log: corrupt frame at 0: checksum mismatch"),
            Ok(_) => panic!("read a damaged frame"),
        }
        assert_eq!(log.read(at[1]).unwrap(), b"next");
        // A wrong length hint only costs a second read.
        assert_eq!(log.read_sized(at[1], 1).unwrap(), b"next");
        assert_eq!(log.read_sized(at[1], 4000).unwrap(), b"next");
        // Offsets that are not frame starts, or run past the end, fail cleanly.
        for serial in [1, 3, bytes.len() as u64 - 2, bytes.len() as u64, u64::MAX] {
            assert!(log.read(serial).is_err(), "{serial}");
        }
        assert_eq!(frame_in(&bytes, at[1] as usize), Some(&b"next"[..]));
        assert_eq!(frame_in(&bytes, bytes.len() - 3), None);
    }
}
