//! Opening the index at a start: the recorded segments, then the log after them read into
//! memory (segments written as it fills, for a store whose segments must be built again).

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64};

use super::Indexes;
use super::memory::{Index, Key, keys_of};
use super::meta::{Meta, OLD_SEQ, open_segments, recorded_name, remove_segments_but, written_out};
use crate::store::embedded::catalogue::meta_u64;
use crate::store::embedded::catalogue::{self, Places};
use crate::store::error::StoreError;
use crate::store::format::log::{FRAME_HEADER, Log};
use crate::store::format::record::{self, Header};
use crate::store::format::{Serial, decode_serial, keys, remove_if_there};
use crate::store::progress::PROGRESS_EVERY;

impl Indexes {
    /// The indexes of the store whose catalogue is `tree` (read with `places`) and whose log (of
    /// `generation`) is `log`: the recorded segments opened, the log after them read into
    /// memory. `dir` is where the segments are and how many events memory holds (none: a
    /// temporary store, all in memory). Returns true as well when the recorded state changed
    /// (segments were built), for the caller to flush.
    pub(crate) fn open(
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
                false => catalogue::get(tree, places, &header.id)? == Some(serial),
            };
            if live {
                batch.push((serial, header, keys_of(&header, &tags)));
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
}
