//! The secondary indexes as a whole: index segments on disk for most events, the in-memory
//! index for the newest.
//!
//! Owns which segments are the index, where they end, and what has been removed from them.
//! The events before `covered` (a serial) are in the segments (`segment`), the rest in
//! memory (`Index`); once `MEM_EVENTS` events are in memory the writer writes them out as one
//! more segment, and a merge thread merges the two newest segments whenever the newer has grown
//! to half the older's size, so a store of N events has about log2(N / `MEM_EVENTS`)
//! segments, each read with one binary search of its fences and one `pread` per list. Segments
//! never change: a removed event (deleted, replaced, expired) that a segment lists is kept in
//! `removed` and in the catalogue's `z` entries until a compaction rewrites the segments without
//! it. Which segments, `covered` and the segments' totals are the catalogue's `m` `index` entry
//! (`Meta`), written whenever the list changes.
//!
//! Memory is therefore the in-memory index of at most `MEM_EVENTS` events, the segments'
//! fences (24 bytes per 170 postings), and the removed set (16 bytes a removed event, until the
//! next compaction); start-up opens the segments and reads the log after `covered` back into
//! memory. The removal of an in-memory event is a `z` entry too, until the segment that would
//! have listed it is written (`written_out`), so that read needs no catalogue lookup per record
//! (each a random read of sled's file on a cold start).
//!
//! After a compaction's swap the segments of the previous generation stay the index's oldest
//! ones (`old` of them, their sequence numbers marked with `OLD_SEQ` in the recorded list),
//! read through the compaction's moves (`Moves`), until the merge thread has written
//! them out again at the new serials (`Indexes::old_inputs`, `Indexes::replace_old`).
//!
//! A data directory without an `index` entry (a store of an earlier version, or one whose
//! segments are unreadable) has its segments built from the log as it opens.

//!
//! This file holds the `Indexes` type and its reads; its children add the parts that change
//! it, for the writer and the merge thread to call: `open` (a start: the recorded segments and
//! the log's tail), `segments` (writing, merging and rewriting segments, and the index after a
//! compaction's swap). Below them, `memory` (the in-memory part), `meta` (the catalogue's
//! record of the segments and their files) and `merged` (several ordered lists as one).

mod memory;
mod merged;
pub(crate) mod meta;
mod open;
pub(crate) mod segments;

pub use memory::{Index, IndexOp, Key, SerialMap, keys_of};

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use crate::protocol::Timestamp;
use crate::store::error::StoreError;
use crate::store::format::Serial;
use crate::store::format::log::FRAME_HEADER;
use crate::store::format::moves::Moves;
use crate::store::format::record::Header;
use crate::store::format::segment::{Segment, unpack};
use merged::{Merged, Source};
use meta::Meta;

/// What [`Indexes::old_inputs`] gives the merge thread: the previous generation's segments,
/// their moves, the new segment's sequence number, this generation.
pub(crate) type OldInputs = (Vec<Arc<Segment>>, Arc<Moves>, u64, u64);

/// Events the in-memory index holds before they are written out as a segment: bounds the memory
/// it takes (a few hundred bytes an event: about 15 MB at this size, docs/src/performance.md) and
/// the log a start-up reads back (its records).
pub const MEM_EVENTS: usize = 32_768;

/// The indexes of every stored event.
pub(crate) struct Indexes {
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

    /// The events of one list with `since <= created_at <= until`, newest first (ties in log
    /// order), with their records' lengths where a segment has them (else 0). A segment's list
    /// may hold another list's events besides (their keys' hashes collide): the reader checks
    /// every event against its filter.
    pub(crate) fn scan(
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
    pub(crate) fn header(&self, serial: Serial) -> Option<&Header> {
        self.mem.header(serial)
    }

    /// How many events a list holds (a segment's chance hash collision counts too).
    pub(crate) fn len(&self, key: &Key) -> Result<usize, StoreError> {
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
    pub(crate) fn old_segments(&self) -> usize {
        self.old
    }

    /// How many events are indexed.
    pub(crate) fn events(&self) -> u64 {
        (self.seg_events + self.mem.events() as u64).saturating_sub(self.removed.len() as u64)
    }

    /// Bytes of the indexed events' frames in the event log: what a compaction keeps.
    pub(crate) fn live_bytes(&self) -> u64 {
        (self.seg_live + self.mem.live_bytes()).saturating_sub(self.removed_bytes)
    }

    /// How many segments there are.
    pub(crate) fn segments(&self) -> usize {
        self.segments.len()
    }

    /// Bytes of the segment files.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.segments.iter().map(|s| s.file_bytes()).sum()
    }

    /// Where the segments end.
    pub(crate) fn covered(&self) -> Serial {
        self.covered
    }

    /// The log's end when the last group was applied: the events before it are all indexed (or
    /// removed), and their `i` entries all in sled.
    pub(crate) fn indexed(&self) -> Serial {
        self.indexed
    }

    /// Applies the changes of a committed group, after which the log ends at `end`.
    pub(crate) fn apply(&mut self, ops: Vec<IndexOp>, end: Serial) {
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
    pub(crate) fn meta(&self) -> Meta {
        Meta { covered: self.covered, events: self.seg_events, live: self.seg_live, seqs: self.seqs.clone() }
    }

    /// True when the in-memory events are due to be written out: when they are as many as a
    /// segment holds, or at a clean stop whenever there are any, so that the next start reads no
    /// tail (each tail record costs a catalogue lookup, a random read on a cold start).
    pub(crate) fn mem_due(&self, stopping: bool) -> bool {
        let events = self.mem.events();
        self.dir.is_some() && (events >= self.mem_events || (stopping && events > 0))
    }

    /// The removed set, as `z` entries would record it: serial → frame bytes.
    pub(crate) fn removed_entries(&self) -> impl Iterator<Item = (Serial, u32)> + '_ {
        self.removed.iter().map(|(&serial, &bytes)| (serial, bytes))
    }
}
