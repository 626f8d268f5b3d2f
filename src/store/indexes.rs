//! The secondary indexes as a whole: index segments on disk for most events, the in-memory
//! index for the newest.
//!
//! Owns which segments are the index, where they end, and what has been removed from them.
//! The events before `covered` (a serial) are in the segments ([`super::segment`]), the rest in
//! memory ([`Index`]); once [`MEM_EVENTS`] events are in memory the writer writes them out as one
//! more segment, and a merge thread merges the two newest segments whenever the newer has grown
//! to half the older's size, so a store of N events has about log2(N / [`MEM_EVENTS`])
//! segments, each read with one binary search of its fences and one `pread` per list. Segments
//! never change: a removed event (deleted, replaced, expired) that a segment lists is kept in
//! `removed` and in the catalogue's `z` entries until a compaction rewrites the segments without
//! it. Which segments, `covered` and the segments' totals are the catalogue's `m` `index` entry
//! ([`Meta`]), written whenever the list changes.
//!
//! Memory is therefore the in-memory index of at most [`MEM_EVENTS`] events, the segments'
//! fences (24 bytes per 170 postings), and the removed set (16 bytes a removed event, until the
//! next compaction); start-up opens the segments and reads the log after `covered` back into
//! memory. The removal of an in-memory event is a `z` entry too, until the segment that would
//! have listed it is written (`written_out`), so that read needs no catalogue lookup per record
//! (each a random read of sled's file on a cold start).
//!
//! After a compaction's swap the segments of the previous generation stay the index's oldest
//! ones (`old` of them, their sequence numbers marked with [`OLD_SEQ`] in the recorded list),
//! read through the compaction's moves ([`super::remap`]), until the merge thread has written
//! them out again at the new serials ([`Indexes::old_inputs`], [`Indexes::replace_old`]).
//!
//! A data directory without an `index` entry (a store of an earlier version, or one whose
//! segments are unreadable) has its segments built from the log as it opens.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::index::{Index, IndexOp, Key, Serial, SerialMap};
use super::log::{FRAME_HEADER, Log};
use super::record::{self, Header};
use super::remap::{Moves, Places};
use super::segment::{self, Posting, Segment, pack, unpack};
use super::{PROGRESS_EVERY, StoreError, decode_serial, keys, meta_u64};
use crate::protocol::Timestamp;

/// The mark of a recorded segment of the previous log generation (read through the moves).
pub(super) const OLD_SEQ: u64 = 1 << 63;

/// What [`Indexes::old_inputs`] gives the merge thread: the previous generation's segments,
/// their moves, the new segment's sequence number, this generation.
pub(super) type OldInputs = (Vec<Arc<Segment>>, Arc<Moves>, u64, u64);

/// Events the in-memory index holds before they are written out as a segment: bounds the memory
/// it takes (a few hundred bytes an event) and the log a start-up reads back (its records).
pub const MEM_EVENTS: usize = 65_536;

/// The segments' state as the catalogue records it.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct Meta {
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
    pub(super) fn encode(&self) -> Vec<u8> {
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
    pub(super) fn load(tree: &sled::Tree) -> Result<Option<Meta>, StoreError> {
        tree.get(keys::meta(keys::INDEX))?.map(|v| Meta::decode(&v)).transpose()
    }

    /// Records it (made durable by the next flush of sled; until then a crash finds the previous
    /// state, whose files are all still there).
    pub(super) fn save(&self, tree: &sled::Tree) -> Result<(), StoreError> {
        tree.insert(keys::meta(keys::INDEX), self.encode())?;
        Ok(())
    }
}

/// The file of segment `seq` of the log generation `generation`.
pub(super) fn file_name(generation: u64, seq: u64) -> String {
    format!("index.{generation}.{seq}.seg")
}

/// The file of the recorded segment `seq` of an index of `generation` (an [`OLD_SEQ`] one is
/// the previous generation's).
fn recorded_name(generation: u64, seq: u64) -> String {
    match seq & OLD_SEQ {
        0 => file_name(generation, seq),
        _ => file_name(generation.saturating_sub(1), seq & !OLD_SEQ),
    }
}

/// The indexes of every stored event.
pub(super) struct Indexes {
    mem: Index,
    segments: Vec<Arc<Segment>>,
    /// How many of the oldest segments are the previous generation's, read through `moved`.
    old: usize,
    /// The moves of the compaction that made this generation, while `old` segments need them.
    moved: Option<Arc<Moves>>,
    /// Serial → frame bytes of the removed events that segments list.
    removed: SerialMap<u32>,
    removed_bytes: u64,
    /// The segments' state (their sequence numbers are `seqs` of [`Indexes::meta`]).
    covered: Serial,
    seg_events: u64,
    seg_live: u64,
    seqs: Vec<u64>,
    next_seq: AtomicU64,
    /// Where segments go (`None`: a temporary store, whose index stays in memory).
    dir: Option<PathBuf>,
    /// Events in memory that make it due to be written out.
    mem_events: usize,
    generation: u64,
    /// The log's end when the last group was applied: every event before it is indexed.
    indexed: Serial,
}

impl Indexes {
    fn empty(dir: Option<(&Path, usize)>, generation: u64) -> Indexes {
        Indexes {
            mem: Index::default(),
            segments: Vec::new(),
            old: 0,
            moved: None,
            removed: SerialMap::default(),
            removed_bytes: 0,
            covered: 0,
            seg_events: 0,
            seg_live: 0,
            seqs: Vec::new(),
            next_seq: AtomicU64::new(0),
            dir: dir.map(|(dir, _)| dir.to_path_buf()),
            mem_events: dir.map_or(usize::MAX, |(_, n)| n.max(1)),
            generation,
            indexed: 0,
        }
    }

    /// The indexes of the store whose catalogue is `tree` (read with `places`) and whose log (of
    /// `generation`) is `log`: the recorded segments opened, the log after them read into
    /// memory. `dir` is where the segments are and how many events memory holds (none: a
    /// temporary store, all in memory). Returns true as well when the recorded state changed
    /// (segments were built), for the caller to flush.
    pub(super) fn open(
        tree: &sled::Tree,
        log: &Log,
        dir: Option<(&Path, usize)>,
        generation: u64,
        places: &Places,
    ) -> Result<(Indexes, bool), StoreError> {
        let started = std::time::Instant::now();
        let mut ix = Indexes::empty(dir, generation);
        let dir = dir.map(|(dir, _)| dir);
        let recorded_meta = Meta::load(tree)?;
        // The tail's removals are recorded from here on (a segment that cannot be read is built
        // again from the log, looking up the events it listed: their removals went with it).
        let recorded = meta_u64(tree, keys::TAIL_RECORDED)?.max(recorded_meta.as_ref().map_or(0, |m| m.covered));
        if let (Some(dir), Some(meta)) = (dir, recorded_meta) {
            let old = meta.seqs.iter().take_while(|&&s| s & OLD_SEQ != 0).count();
            let opened = match (old, places.moved()) {
                (0, _) | (_, Some(_)) => open_segments(dir, generation, &meta.seqs),
                (_, None) => Err(StoreError::Corrupt("segments of the previous generation without its moves".into())),
            };
            match opened {
                Ok(segments) => {
                    ix.segments = segments;
                    ix.old = old;
                    ix.moved = places.moved().filter(|_| old > 0).cloned();
                    let new_seqs = meta.seqs.iter().filter(|&&s| s & OLD_SEQ == 0);
                    ix.next_seq = AtomicU64::new(new_seqs.max().map_or(0, |&s| s + 1));
                    (ix.covered, ix.seg_events, ix.seg_live, ix.seqs) =
                        (meta.covered, meta.events, meta.live, meta.seqs);
                    ix.load_removed(tree)?;
                }
                Err(e) => tracing::warn!(error = %e, "the index segments cannot be read; building them again"),
            }
        }
        if let Some(dir) = dir {
            ix.remove_unlisted(dir)?;
        }
        let before = ix.meta();
        ix.read_tail(tree, log, places, recorded)?;
        ix.indexed = log.end();
        tracing::info!(
            events = ix.events(),
            segments = ix.segments.len(),
            in_memory = ix.mem.events(),
            ms = started.elapsed().as_millis() as u64,
            "index opened"
        );
        let changed = ix.meta() != before;
        if changed {
            ix.meta().save(tree)?;
        }
        Ok((ix, changed))
    }

    fn load_removed(&mut self, tree: &sled::Tree) -> Result<(), StoreError> {
        for item in tree.scan_prefix([keys::REMOVED]) {
            let (key, value) = item?;
            let serial = key.get(1..).map(decode_serial).transpose()?.unwrap_or(u64::MAX);
            let bytes = value.as_ref().try_into().map(u32::from_be_bytes).unwrap_or(0);
            if serial < self.covered && self.removed.insert(serial, bytes).is_none() {
                self.removed_bytes += u64::from(bytes);
            }
        }
        Ok(())
    }

    /// Removes segment files that are not the index (another generation's, or a merge's or a
    /// write's that a crash left unrecorded).
    fn remove_unlisted(&self, dir: &Path) -> Result<(), StoreError> {
        let listed: Vec<String> = self.seqs.iter().map(|&s| recorded_name(self.generation, s)).collect();
        remove_segments_but(dir, |name| {
            let keep = listed.iter().any(|l| l == name);
            if !keep {
                tracing::info!(file = name, "removing an index segment that is not the index");
            }
            keep
        })?;
        Ok(())
    }

    /// Reads the stored events after `covered` into memory, writing segments as it fills (a
    /// store without segments is indexed this way from its start).
    fn read_tail(&mut self, tree: &sled::Tree, log: &Log, places: &Places, recorded: Serial) -> Result<(), StoreError> {
        let end = log.end();
        let (from, mut at) = (self.covered, self.covered);
        // Removed since they were stored: with these, a record after `recorded` needs no lookup
        // (on a cold start each lookup is a random read of sled's file).
        let mut removed = std::collections::HashSet::new();
        for item in tree.range(keys::removed(from.max(recorded))..=keys::removed(u64::MAX)) {
            removed.insert(item?.0.get(1..).map(decode_serial).transpose()?.unwrap_or(u64::MAX));
        }
        let mut said = std::time::Instant::now();
        let mut batch: Vec<(Serial, Header, Vec<Key>)> = Vec::new();
        while at < end {
            if said.elapsed() >= PROGRESS_EVERY {
                // Start-up says how far it is: nothing is served until the index is open.
                let percent = (at - from) * 100 / (end - from).max(1);
                tracing::info!(
                    percent,
                    events = self.events() + batch.len() as u64,
                    "reading the event log into the index"
                );
                said = std::time::Instant::now();
            }
            let frame = match log.read(at) {
                Ok(frame) => frame,
                Err(e) => {
                    // A damaged record is left out of the index, so it is never served.
                    tracing::error!(serial = at, error = %e, "a damaged record is skipped; run hearth check");
                    let Some(len) = log.claimed_len(at) else { break };
                    at += FRAME_HEADER + len;
                    continue;
                }
            };
            let serial = at;
            at += FRAME_HEADER + frame.len() as u64;
            if frame.first() != Some(&record::FORMAT) {
                continue;
            }
            let indexed = record::header(&frame).and_then(|h| Ok((h, record::tags(&frame)?)));
            let (header, tags) = match indexed {
                Ok(found) => found,
                Err(e) => {
                    tracing::error!(serial, error = %e, "a damaged record is skipped; run hearth check");
                    continue;
                }
            };
            // Stored unless its removal is recorded; before `recorded`, while its `i` entry points
            // at this frame (else replaced, deleted, expired).
            let live = match serial >= recorded {
                true => !removed.contains(&serial),
                false => super::catalogue::get(tree, places, &header.id)? == Some(serial),
            };
            if live {
                batch.push((serial, header, super::index::keys_of(&header, &tags)));
            }
            if batch.len() >= self.mem_events {
                self.mem = Index::build(batch.drain(..));
                let written_from = self.covered;
                self.write_out(at)?;
                tree.apply_batch(written_out(tree, &self.meta(), written_from, at)?)?;
                while let Some((inputs, seq, _)) = self.merge_due().and_then(|at| self.merge_inputs(at)) {
                    let merged = self.merge_pair(&inputs, seq, &AtomicBool::new(false))?;
                    self.replace_pair(&inputs, merged, seq);
                    // Named by no durable record yet, and read by no one.
                    for input in &inputs {
                        remove_if_there(input.path())?;
                    }
                }
            }
        }
        self.mem = Index::build(batch.into_iter());
        Ok(())
    }

    /// The events of one list with `since <= created_at <= until`, newest first (ties in log
    /// order), with their records' lengths where a segment has them (else 0). A segment's list
    /// may hold another list's events besides (their keys' hashes collide): the reader checks
    /// every event against its filter.
    pub(super) fn scan(
        &self,
        key: &Key,
        since: Option<Timestamp>,
        until: Option<Timestamp>,
    ) -> impl Iterator<Item = Result<(Timestamp, Serial, u32), StoreError>> + '_ {
        let hash = key.hash64();
        let from = (hash, u64::MAX - until.map_or(u64::MAX, |t| t.0), 0);
        let to = (hash, u64::MAX - since.map_or(0, |t| t.0), u64::MAX);
        let mut sources: Vec<Source<'_>> = Vec::with_capacity(self.segments.len() + 1);
        for (i, seg) in self.segments.iter().enumerate() {
            let (removed, moved) = (&self.removed, self.moved_for(i));
            let postings = seg.range(from, to).filter_map(move |p| match p {
                Ok((_, rev, word)) => {
                    let (serial, len) = unpack(word);
                    // A previous generation's event that the compaction did not keep is gone.
                    let serial = match moved {
                        Some(moved) => moved.get(serial)?,
                        None => serial,
                    };
                    (!removed.contains_key(&serial)).then_some(Ok((rev, serial, len)))
                }
                Err(e) => Some(Err(StoreError::from(e))),
            });
            sources.push(Box::new(postings));
        }
        let mem = self.mem.scan(key, since, until).map(|(at, serial)| Ok((u64::MAX - at.0, serial, 0)));
        sources.push(Box::new(mem));
        Merged::new(sources).map(|p| p.map(|(rev, serial, len)| (Timestamp(u64::MAX - rev), serial, len)))
    }

    /// The header of an event in memory; the others' are in their records.
    pub(super) fn header(&self, serial: Serial) -> Option<&Header> {
        self.mem.header(serial)
    }

    /// How many events a list holds (a segment's chance hash collision counts too).
    pub(super) fn len(&self, key: &Key) -> Result<usize, StoreError> {
        let mut n = self.mem.len(key);
        let hash = key.hash64();
        for (i, seg) in self.segments.iter().enumerate() {
            let moved = self.moved_for(i);
            for posting in seg.range((hash, 0, 0), (hash, u64::MAX, u64::MAX)) {
                let serial = unpack(posting?.2).0;
                let serial = match moved {
                    Some(moved) => moved.get(serial),
                    None => Some(serial),
                };
                n += usize::from(serial.is_some_and(|s| !self.removed.contains_key(&s)));
            }
        }
        Ok(n)
    }

    /// The moves segment `i` is read through: an old segment's.
    fn moved_for(&self, i: usize) -> Option<&Moves> {
        self.moved.as_deref().filter(|_| i < self.old)
    }

    /// How many segments are the previous generation's, still read through a compaction's moves.
    pub(super) fn old_segments(&self) -> usize {
        self.old
    }

    /// How many events are indexed.
    pub(super) fn events(&self) -> u64 {
        (self.seg_events + self.mem.events() as u64).saturating_sub(self.removed.len() as u64)
    }

    /// Bytes of the indexed events' frames in the event log: what a compaction keeps.
    pub(super) fn live_bytes(&self) -> u64 {
        (self.seg_live + self.mem.live_bytes()).saturating_sub(self.removed_bytes)
    }

    /// How many segments there are.
    pub(super) fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Bytes of the segment files.
    pub(super) fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.file_bytes()).sum()
    }

    /// Where the segments end.
    pub(super) fn covered(&self) -> Serial {
        self.covered
    }

    /// The log's end when the last group was applied: the events before it are all indexed (or
    /// removed), and their `i` entries all in sled.
    pub(super) fn indexed(&self) -> Serial {
        self.indexed
    }

    /// Applies the changes of a committed group, after which the log ends at `end`.
    pub(super) fn apply(&mut self, ops: Vec<IndexOp>, end: Serial) {
        self.indexed = end;
        for op in ops {
            match op {
                IndexOp::Remove(serial, len, _) if serial < self.covered => {
                    let bytes = FRAME_HEADER as u32 + len;
                    if self.removed.insert(serial, bytes).is_none() {
                        self.removed_bytes += u64::from(bytes);
                    }
                }
                op => self.mem.apply(op),
            }
        }
    }

    /// The recorded state.
    pub(super) fn meta(&self) -> Meta {
        Meta { covered: self.covered, events: self.seg_events, live: self.seg_live, seqs: self.seqs.clone() }
    }

    /// True when the in-memory events are due to be written out: when they are as many as a
    /// segment holds, or at a clean stop whenever there are any, so that the next start reads no
    /// tail (each tail record costs a catalogue lookup, a random read on a cold start).
    pub(super) fn mem_due(&self, stopping: bool) -> bool {
        let events = self.mem.events();
        self.dir.is_some() && (events >= self.mem_events || (stopping && events > 0))
    }

    /// Writes the in-memory events out as a new segment; the index is unchanged until
    /// [`Indexes::wrote`] installs it.
    pub(super) fn write_mem(&self) -> Result<(u64, Segment), StoreError> {
        let dir = self.dir.as_deref().ok_or(StoreError::Closed)?;
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let path = dir.join(file_name(self.generation, seq));
        let written = segment::write(&path, self.mem.postings().into_iter().map(Ok));
        if written.is_err() {
            let _ = std::fs::remove_file(&path);
        }
        let seg = written?;
        std::fs::File::open(dir)?.sync_all()?;
        Ok((seq, seg))
    }

    /// Installs the segment [`Indexes::write_mem`] wrote: the in-memory events, all before
    /// `end`, are in it now.
    pub(super) fn wrote(&mut self, seq: u64, seg: Segment, end: Serial) {
        self.segments.push(Arc::new(seg));
        self.seqs.push(seq);
        self.seg_events += self.mem.events() as u64;
        self.seg_live += self.mem.live_bytes();
        self.covered = end;
        self.mem = Index::default();
    }

    fn write_out(&mut self, end: Serial) -> Result<(), StoreError> {
        let (seq, seg) = self.write_mem()?;
        self.wrote(seq, seg, end);
        Ok(())
    }

    /// The two segments due to be merged: where the older of them is. The previous
    /// generation's are written out again by [`Indexes::old_inputs`] first, never merged.
    pub(super) fn merge_due(&self) -> Option<usize> {
        let n = self.segments.len();
        let at = n.checked_sub(2).filter(|&at| at >= self.old)?;
        let (older, newer) = (self.segments.get(at)?, self.segments.get(n - 1)?);
        (older.postings() <= 2 * newer.postings()).then_some(at)
    }

    /// The previous generation's segments, their moves, a sequence number for the one segment
    /// that they are written out again as, and this generation; None when there are none.
    pub(super) fn old_inputs(&self) -> Option<OldInputs> {
        let moved = self.moved.clone().filter(|_| self.old > 0)?;
        let inputs = self.segments.get(..self.old)?.to_vec();
        Some((inputs, moved, self.next_seq.fetch_add(1, Ordering::Relaxed), self.generation))
    }

    /// Puts `rewritten` in the place of the previous generation's segments `inputs` when they
    /// are still that; false (and nothing changed) otherwise.
    pub(super) fn replace_old(&mut self, inputs: &[Arc<Segment>], rewritten: Segment, seq: u64) -> bool {
        let same = self.old == inputs.len() && self.segments.iter().zip(inputs).all(|(a, b)| Arc::ptr_eq(a, b));
        if !same {
            return false;
        }
        self.segments.splice(..self.old, [Arc::new(rewritten)]);
        self.seqs.splice(..self.old, [seq]);
        self.old = 0;
        self.moved = None;
        true
    }

    /// The segments at `at` and after it, and a sequence number for their merge.
    pub(super) fn merge_inputs(&self, at: usize) -> Option<([Arc<Segment>; 2], u64, u64)> {
        let inputs = [self.segments.get(at)?.clone(), self.segments.get(at + 1)?.clone()];
        Some((inputs, self.next_seq.fetch_add(1, Ordering::Relaxed), self.generation))
    }

    /// Merges two segments into segment `seq` (not installed).
    pub(super) fn merge_pair(
        &self,
        inputs: &[Arc<Segment>; 2],
        seq: u64,
        stopping: &AtomicBool,
    ) -> Result<Segment, StoreError> {
        let dir = self.dir.as_deref().ok_or(StoreError::Closed)?;
        merge_into(dir, self.generation, inputs, seq, stopping)
    }

    /// Puts `merged` in the place of `inputs` when they are still adjacent segments of this index;
    /// false (and nothing changed) otherwise.
    pub(super) fn replace_pair(&mut self, inputs: &[Arc<Segment>; 2], merged: Segment, seq: u64) -> bool {
        let Some(at) = self.segments.iter().position(|s| Arc::ptr_eq(s, &inputs[0])) else { return false };
        if !self.segments.get(at + 1).is_some_and(|s| Arc::ptr_eq(s, &inputs[1])) {
            return false;
        }
        self.segments.splice(at..at + 2, [Arc::new(merged)]);
        self.seqs.splice(at..at + 2, [seq]);
        true
    }

    /// This index after a compaction to `generation` (`moved`: where each record went, the new
    /// log ending at `end`): the segments kept as they are and read through the moves (the
    /// merge thread writes them out again later), the removed set at the new serials without the
    /// events the compaction dropped, the in-memory events moved. Built beside this one, in time
    /// proportional to the in-memory part and the removed set, not to the store.
    pub(super) fn compacted(&self, moved: &Arc<Moves>, end: Serial, generation: u64) -> Indexes {
        let mut out = Indexes::empty(self.dir.as_deref().map(|d| (d, self.mem_events)), generation);
        out.indexed = end;
        out.mem = self.mem.remapped(moved.pairs());
        // The segments' events are the first of the new log: it keeps the order of the old.
        let pairs = moved.pairs();
        let first_mem = pairs.partition_point(|&(old, _)| old < self.covered);
        out.covered = pairs.get(first_mem).map_or(end, |&(_, new)| new);
        out.segments = self.segments.clone();
        out.old = self.segments.len();
        out.moved = Some(moved.clone()).filter(|_| out.old > 0);
        out.seqs = self.seqs.iter().map(|&s| s | OLD_SEQ).collect();
        (out.seg_events, out.seg_live) = (self.seg_events, self.seg_live);
        for (&serial, &bytes) in &self.removed {
            match moved.get(serial) {
                // Copied, then removed before the swap: still listed, still removed.
                Some(new) => {
                    out.removed.insert(new, bytes);
                    out.removed_bytes += u64::from(bytes);
                }
                // Not copied: the segments, read through the moves, no longer list it.
                None => {
                    out.seg_events = out.seg_events.saturating_sub(1);
                    out.seg_live = out.seg_live.saturating_sub(u64::from(bytes));
                }
            }
        }
        out
    }

    /// The events of the in-memory part that a compaction copied and that were removed before
    /// its swap, at their new serials (`moved`, the new log ending at `end`) with their frames'
    /// bytes: their records are in the new log's tail, so their removals are recorded.
    pub(super) fn tail_removed(&self, moved: &Moves, end: Serial) -> Vec<(Serial, u32)> {
        let pairs = moved.pairs();
        let first = pairs.partition_point(|&(old, _)| old < self.covered);
        let mut out = Vec::new();
        for (i, &(old, new)) in pairs.iter().enumerate().skip(first) {
            if self.mem.header(old).is_none() {
                let next = pairs.get(i + 1).map_or(end, |&(_, next)| next);
                out.push((new, u32::try_from(next - new).unwrap_or(u32::MAX)));
            }
        }
        out
    }

    /// The removed set, as `z` entries would record it: serial → frame bytes.
    pub(super) fn removed_entries(&self) -> impl Iterator<Item = (Serial, u32)> + '_ {
        self.removed.iter().map(|(&serial, &bytes)| (serial, bytes))
    }
}

/// Merges two segments into segment `seq` of `generation` in `dir`, durably.
pub(super) fn merge_into(
    dir: &Path,
    generation: u64,
    inputs: &[Arc<Segment>; 2],
    seq: u64,
    stopping: &AtomicBool,
) -> Result<Segment, StoreError> {
    let path = dir.join(file_name(generation, seq));
    let seg = segment::merge(&[&inputs[0], &inputs[1]], &path, Some, stopping)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(seg)
}

/// The sled batch that records a segment written out of the in-memory index, which held the
/// events from `from` to `to`: the index's new state (`meta`), and without the `z` entries of
/// the events removed meanwhile (the segment does not list them, and a start no longer reads
/// them back). One batch, so a crash finds either both or neither.
pub(super) fn written_out(tree: &sled::Tree, meta: &Meta, from: Serial, to: Serial) -> Result<sled::Batch, StoreError> {
    let mut batch = sled::Batch::default();
    batch.insert(keys::meta(keys::INDEX), meta.encode());
    for item in tree.range(keys::removed(from)..keys::removed(to)) {
        batch.remove(item?.0);
    }
    Ok(batch)
}

/// Writes the previous generation's segments `inputs` out again at the serials `moved` gives
/// their events, as segment `seq` of `generation` in `dir`, durably (not installed). Their
/// removals stay in the removed set, so the counts do not change.
pub(super) fn rewrite_old(
    dir: &Path,
    generation: u64,
    inputs: &[Arc<Segment>],
    moved: &Moves,
    seq: u64,
    stopping: &AtomicBool,
) -> Result<Segment, StoreError> {
    let keep = |(hash, rev, word): Posting| {
        let (serial, len) = unpack(word);
        Some((hash, rev, pack(moved.get(serial)?, len)))
    };
    let inputs: Vec<&Segment> = inputs.iter().map(|s| s.as_ref()).collect();
    let seg = segment::merge(&inputs, &dir.join(file_name(generation, seq)), keep, stopping)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(seg)
}

/// Removes the segment files of other log generations than those of `keep` from `dir` (a
/// finished compaction's old ones once they are written out again, or a failed one's new ones).
pub(super) fn remove_other_generations(dir: &Path, keep: &[u64]) -> std::io::Result<()> {
    let prefixes: Vec<String> = keep.iter().map(|g| format!("index.{g}.")).collect();
    remove_segments_but(dir, |name| prefixes.iter().any(|p| name.starts_with(p.as_str())))
}

/// Removes the segment files of `dir` that `keep` (given the file name) does not keep.
fn remove_segments_but(dir: &Path, keep: impl Fn(&str) -> bool) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with("index.") && name.ends_with(".seg") && !keep(name) {
            remove_if_there(&dir.join(name))?;
        }
    }
    Ok(())
}

/// Removes a segment file unless it is gone already (the merge thread and a compaction may both
/// remove one of the files they replaced).
pub(super) fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

/// The serial of every stored event before `below`, in log order (from the catalogue's `i`
/// entries, read with `places`): 8 bytes an event, what a compaction's copy holds while it runs.
pub(super) fn live_serials(tree: &sled::Tree, places: &Places, below: Serial) -> Result<Vec<Serial>, StoreError> {
    let mut out = Vec::new();
    for entry in super::catalogue::all(tree, places) {
        let (_, serial) = entry?;
        if serial < below {
            out.push(serial);
        }
    }
    out.sort_unstable();
    Ok(out)
}

fn open_segments(dir: &Path, generation: u64, seqs: &[u64]) -> Result<Vec<Arc<Segment>>, StoreError> {
    seqs.iter().map(|&seq| Ok(Arc::new(Segment::open(&dir.join(recorded_name(generation, seq)))?))).collect()
}

/// One ordered source of postings (`u64::MAX - created_at`, serial, record length or 0).
type Source<'a> = Box<dyn Iterator<Item = Result<(u64, Serial, u32), StoreError>> + 'a>;

/// Several ordered sources as one (sources hold disjoint serials).
struct Merged<'a> {
    sources: Vec<Source<'a>>,
    heads: Vec<Option<(u64, Serial, u32)>>,
    started: bool,
}

impl<'a> Merged<'a> {
    fn new(sources: Vec<Source<'a>>) -> Merged<'a> {
        let heads = vec![None; sources.len()];
        Merged { sources, heads, started: false }
    }

    fn advance(&mut self, i: usize) -> Result<(), StoreError> {
        self.heads[i] = self.sources[i].next().transpose()?;
        Ok(())
    }
}

impl Iterator for Merged<'_> {
    type Item = Result<(u64, Serial, u32), StoreError>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for i in 0..self.sources.len() {
                if let Err(e) = self.advance(i) {
                    return Some(Err(e));
                }
            }
        }
        let (at, head) =
            self.heads.iter().enumerate().filter_map(|(i, h)| h.map(|h| (i, h))).min_by_key(|&(_, h)| h)?;
        if let Err(e) = self.advance(at) {
            return Some(Err(e));
        }
        Some(Ok(head))
    }
}
