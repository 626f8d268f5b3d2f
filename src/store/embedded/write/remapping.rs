//! An unfinished remap as the writer carries it on between its groups.
//!
//! Owns [`Remapping`]: the remap's state, the compaction waiting for it (answered once it is
//! done), the pause after a failed step, and the nudges of the merge thread while its part (the
//! old segments) is not done; and ending a remap once both parts are (its record, then its
//! files).

use std::sync::PoisonError;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::compact::Swapped;
use super::remap::{self, Remap};
use super::shared::Shared;
use crate::store::contract::Compacted;
use crate::store::embedded::index::meta::remove_other_generations;
use crate::store::error::StoreError;
use crate::store::format::moves;

/// How long the writer waits before another remap step after one failed.
const REMAP_RETRY: Duration = Duration::from_secs(1);
/// How often the merge thread is woken while the writer waits for its part of a remap.
const MERGE_NUDGE: Duration = Duration::from_secs(5);

/// An unfinished remap as the writer carries it on, and the compaction waiting for it (none when
/// it was found at open).
pub(crate) struct Remapping {
    state: Remap,
    waiting: Option<(oneshot::Sender<Result<Compacted, StoreError>>, Swapped)>,
    /// No step before this (set after one failed).
    quiet_until: Option<Instant>,
    /// When the merge thread was last woken for its part.
    woke: Instant,
}

/// What a turn of a remap's work came to.
#[derive(PartialEq)]
pub(crate) enum Turn {
    /// The remap is done.
    Done,
    /// A step was taken: more to do.
    Stepped,
    /// Nothing to do now: the merge thread's part is not done, a failed step waits, or a test
    /// holds it.
    Waiting,
}

impl Remapping {
    /// An unfinished remap, with the compaction waiting for it if any.
    pub(crate) fn new(
        state: Remap,
        waiting: Option<(oneshot::Sender<Result<Compacted, StoreError>>, Swapped)>,
    ) -> Remapping {
        Remapping { state, waiting, quiet_until: None, woke: Instant::now() }
    }

    /// Takes the next step of the catalogue's rewrite, or finishes the remap once the merge
    /// thread has rewritten the old segments too (woken again now and then while it has not: a
    /// rewrite that failed, on a full disk say, is tried again).
    fn work(&mut self, w: &Shared, merges: &std::sync::mpsc::Sender<()>) -> Turn {
        if self.quiet_until.is_some_and(|until| Instant::now() < until) || w.compaction.remap_held() {
            return Turn::Waiting;
        }
        let (places, old_segments) = {
            let view = w.view.read().unwrap_or_else(PoisonError::into_inner);
            (view.places.clone(), view.index.old_segments())
        };
        let turn = match (self.state.catalogue_done(), old_segments) {
            (false, _) => w
                .compaction
                .remap_step_failure()
                .and_then(|()| remap::step(&w.tree, &places, &mut self.state))
                .map(|()| Turn::Stepped),
            (true, 0) => w.finish_remap().map(|()| Turn::Done),
            (true, _) => {
                if self.woke.elapsed() >= MERGE_NUDGE {
                    let _ = merges.send(());
                    self.woke = Instant::now();
                }
                Ok(Turn::Waiting)
            }
        };
        w.compaction.remap_stepped(turn.as_ref().err().map(ToString::to_string));
        turn.unwrap_or_else(|e| {
            tracing::error!(error = %e, "a step of the compaction's remap failed; trying again shortly");
            self.quiet_until = Some(Instant::now() + REMAP_RETRY);
            Turn::Waiting
        })
    }

    /// Answers the compaction waiting for it, if any, and wakes the merge thread, which merges
    /// no segments while a compaction runs.
    fn answer(self, w: &Shared, merges: &std::sync::mpsc::Sender<()>) {
        if let Some((reply, swapped)) = self.waiting {
            let _ = reply.send(swapped.done(w));
        }
        let _ = merges.send(());
    }
}

impl Shared {
    /// Ends a remap whose catalogue and segments are rewritten: its record goes, durably, then
    /// the moves file and the previous generation's segment files.
    pub(crate) fn finish_remap(&self) -> Result<(), StoreError> {
        remap::finish(&self.tree)?;
        let generation = {
            let mut view = self.view_mut();
            view.places = view.places.settled();
            view.generation
        };
        self.flush()?;
        if let Some(dir) = &self.dir {
            moves::remove_stale(dir, None)?;
            remove_other_generations(dir, &[generation])?;
        }
        self.compaction.remapped();
        tracing::info!("the compaction's rewrite of the catalogue and the index is done");
        Ok(())
    }
}

/// A turn of the unfinished remap, if there is one; once it is done, the compaction waiting for
/// it is answered and the remap let go.
pub(crate) fn remap_turn(
    w: &Shared,
    remapping: &mut Option<Remapping>,
    merges: &std::sync::mpsc::Sender<()>,
) -> Option<Turn> {
    let turn = remapping.as_mut()?.work(w, merges);
    if turn == Turn::Done
        && let Some(done) = remapping.take()
    {
        done.answer(w, merges);
    }
    Some(turn)
}
