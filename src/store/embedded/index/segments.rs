//! The index's segments changed: the in-memory part written out, two segments merged, the
//! previous generation's rewritten at a compaction's new serials, and the index after a
//! compaction's swap. Each new file is written and synced first; the callers (the writer, the
//! merge thread) install it under the view's lock and record it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use super::memory::Index;
use super::meta::{OLD_SEQ, file_name};
use super::{Indexes, OldInputs};
use crate::store::error::StoreError;
use crate::store::format::Serial;
use crate::store::format::moves::Moves;
use crate::store::format::segment::{self, Posting, Segment, pack, unpack};

impl Indexes {
    /// Writes the in-memory events out as a new segment; the index is unchanged until
    /// [`Indexes::wrote`] installs it.
    pub(crate) fn write_mem(&self) -> Result<(u64, Segment), StoreError> {
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
    pub(crate) fn wrote(&mut self, seq: u64, seg: Segment, end: Serial) {
        self.segments.push(Arc::new(seg));
        self.seqs.push(seq);
        self.seg_events += self.mem.events() as u64;
        self.seg_live += self.mem.live_bytes();
        self.covered = end;
        self.mem = Index::default();
    }

    pub(crate) fn write_out(&mut self, end: Serial) -> Result<(), StoreError> {
        let (seq, seg) = self.write_mem()?;
        self.wrote(seq, seg, end);
        Ok(())
    }

    /// The two segments due to be merged: where the older of them is. The previous
    /// generation's are written out again by [`Indexes::old_inputs`] first, never merged.
    pub(crate) fn merge_due(&self) -> Option<usize> {
        let n = self.segments.len();
        let at = n.checked_sub(2).filter(|&at| at >= self.old)?;
        let (older, newer) = (self.segments.get(at)?, self.segments.get(n - 1)?);
        (older.postings() <= 2 * newer.postings()).then_some(at)
    }

    /// The previous generation's segments, their moves, a sequence number for the one segment
    /// that they are written out again as, and this generation; None when there are none.
    pub(crate) fn old_inputs(&self) -> Option<OldInputs> {
        let moved = self.moved.clone().filter(|_| self.old > 0)?;
        let inputs = self.segments.get(..self.old)?.to_vec();
        Some((inputs, moved, self.next_seq.fetch_add(1, Ordering::Relaxed), self.generation))
    }

    /// Puts `rewritten` in the place of the previous generation's segments `inputs` when they
    /// are still that; false (and nothing changed) otherwise.
    pub(crate) fn replace_old(&mut self, inputs: &[Arc<Segment>], rewritten: Segment, seq: u64) -> bool {
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
    pub(crate) fn merge_inputs(&self, at: usize) -> Option<([Arc<Segment>; 2], u64, u64)> {
        let inputs = [self.segments.get(at)?.clone(), self.segments.get(at + 1)?.clone()];
        Some((inputs, self.next_seq.fetch_add(1, Ordering::Relaxed), self.generation))
    }

    /// Merges two segments into segment `seq` (not installed).
    pub(crate) fn merge_pair(
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
    pub(crate) fn replace_pair(&mut self, inputs: &[Arc<Segment>; 2], merged: Segment, seq: u64) -> bool {
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
    pub(crate) fn compacted(&self, moved: &Arc<Moves>, end: Serial, generation: u64) -> Indexes {
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
    pub(crate) fn tail_removed(&self, moved: &Moves, end: Serial) -> Vec<(Serial, u32)> {
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
}

/// Merges two segments into segment `seq` of `generation` in `dir`, durably.
pub(crate) fn merge_into(
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

/// Writes the previous generation's segments `inputs` out again at the serials `moved` gives
/// their events, as segment `seq` of `generation` in `dir`, durably (not installed). Their
/// removals stay in the removed set, so the counts do not change.
pub(crate) fn rewrite_old(
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
