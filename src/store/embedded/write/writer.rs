//! The single writer thread: atomic groups, group commit, and the event log as its journal.
//!
//! Owns every mutation of the event tree, of the event log and of the in-memory index (a
//! compaction's last step, `compact::finish`, runs here too, between two groups). One thread
//! applies writes in arrival order, so the read-check-write of deduplication, replacement and
//! deletion needs no transaction. Every write that arrived while the previous group was written
//! joins one group: its changes collect in an overlay (`pending`) that later writes of the same
//! group read through; what each write changes is decided by `apply`.
//!
//! A group commits with one `fdatasync`: its frames (stored records, and a frame for each
//! moderation removal and each expiry sweep that removed something) are written to the event log
//! and synced; only then is its sled batch applied, with the log's new end, and only then are
//! its writes acknowledged. sled is flushed in the background ([`SLED_FLUSH_EVERY`]) and at
//! shutdown. After a crash, `replay` runs the frames after the end sled last made durable
//! through the same code the writes took the first time, in the same order, so sled and the index
//! come back exactly as they were acknowledged. One sled batch per group and one sync per ack
//! (not one batch per event, nor three syncs per ack) are what the ingest figures in docs/src/performance.md rest
//! on.
//!
//! Between groups it also takes the steps of an unfinished compaction's remap (`remap`, `remapping`):
//! it is the only thread that changes the catalogue's buckets, so a step needs no transaction
//! either.

use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::apply::{put, remove_into, sweep};
use super::compact::{self, Prepared};
use super::merger;
use super::pending::Pending;
use super::remap::Remap;
use super::remapping::{Remapping, Turn, remap_turn};
use super::replay::{remove_frame, sweep_frame};
use super::shared::Shared;
use crate::protocol::{EventId, Timestamp, VerifiedEvent};
use crate::search::Position;
use crate::store::contract::{Compacted, Mark, PutOutcome};
use crate::store::embedded::index::meta::written_out;
use crate::store::error::StoreError;

/// Writes handled in one group at most.
const MAX_GROUP: usize = 4096;
/// How often sled's state is flushed and synced behind the acknowledged writes; this bounds what
/// `replay` has to redo after a crash.
const SLED_FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long the writer waits to write an index segment again after it failed.
const INDEX_RETRY: Duration = Duration::from_secs(60);
/// How often an idle writer looks whether the merge thread has finished its part of a remap.
const REMAP_POLL: Duration = Duration::from_millis(10);

/// A request to the writer.
pub(crate) enum WriteOp {
    Put {
        event: Arc<VerifiedEvent>,
        reply: oneshot::Sender<Result<PutOutcome, StoreError>>,
    },
    Sweep {
        now: Timestamp,
        reply: oneshot::Sender<Result<usize, StoreError>>,
    },
    Remove {
        id: EventId,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    /// The last step of a compaction, whose copy of the log is `prepared`.
    Compact {
        prepared: Box<Prepared>,
        reply: oneshot::Sender<Result<Compacted, StoreError>>,
    },
    Shutdown {
        reply: oneshot::Sender<()>,
    },
}

enum Reply {
    Put(oneshot::Sender<Result<PutOutcome, StoreError>>, Result<PutOutcome, StoreError>),
    Sweep(oneshot::Sender<Result<usize, StoreError>>, Result<usize, StoreError>),
    Remove(oneshot::Sender<Result<bool, StoreError>>, Result<bool, StoreError>),
}

impl Reply {
    /// Gives the puts stored since the last commit (`since`, the replies after it) the mark of
    /// the commit that made them visible (a sweep commits in the middle of a group).
    fn mark(since: &mut [Reply], mark: Mark) {
        for reply in since {
            if let Reply::Put(_, Ok(PutOutcome::Stored(unmarked))) = reply {
                *unmarked = mark;
            }
        }
    }

    /// Sends the outcome, or the error when the group did not reach the disk.
    fn send(self, written: &Result<(), Arc<StoreError>>) {
        fn pick<T>(outcome: Result<T, StoreError>, written: &Result<(), Arc<StoreError>>) -> Result<T, StoreError> {
            match written {
                Ok(()) => outcome,
                Err(e) => Err(StoreError::Group(e.clone())),
            }
        }
        // A dropped receiver means the requester gave up; the write stands either way.
        let _ = match self {
            Reply::Put(tx, outcome) => tx.send(pick(outcome, written)).map_err(drop),
            Reply::Sweep(tx, outcome) => tx.send(pick(outcome, written)).map_err(drop),
            Reply::Remove(tx, outcome) => tx.send(pick(outcome, written)).map_err(drop),
        };
    }
}

impl Shared {
    /// Commits a group: its frames and sled batch, then its changes to the index, which makes
    /// them visible at the mark returned.
    fn commit(&self, pending: &mut Pending) -> Result<Mark, StoreError> {
        let ops = pending.apply()?;
        let mut view = self.view_mut();
        view.index.apply(ops, pending.start);
        view.mark = view.mark.next();
        let (mark, position) = (view.mark, Position { generation: view.generation, end: view.log.end() });
        drop(view);
        // After the commit, so that the search index never holds an event the store does not.
        if let Some(feed) = &self.search {
            feed.send(std::mem::take(&mut pending.applied_search), Some(position));
        }
        Ok(mark)
    }

    /// Writes the in-memory index out as a segment when it is due (between groups, so that it
    /// holds exactly the events before the log's end), and wakes the merge thread; at a clean
    /// stop (`merges` none) whatever is in memory, without waking it.
    fn write_index(&self, merges: Option<&std::sync::mpsc::Sender<()>>) -> Result<(), StoreError> {
        let (seq, seg, end) = {
            let view = self.view.read().unwrap_or_else(PoisonError::into_inner);
            if !view.index.mem_due(merges.is_none()) {
                return Ok(());
            }
            // Readers go on meanwhile; only this thread changes the in-memory index.
            let (seq, seg) = view.index.write_mem()?;
            (seq, seg, view.log.end())
        };
        let mut view = self.view_mut();
        let from = view.index.covered();
        view.index.wrote(seq, seg, end);
        self.tree.apply_batch(written_out(&self.tree, &view.index.meta(), from, end)?)?;
        drop(view);
        if let Some(merges) = merges {
            let _ = merges.send(());
        }
        Ok(())
    }
}

/// Starts the writer thread; `remap` is an unfinished remap found at open.
pub(crate) fn spawn(writer: Shared, rx: mpsc::Receiver<WriteOp>, remap: Option<Remap>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("hearth-writer".into())
        .spawn(move || run(writer, rx, remap))
        .map_err(StoreError::Io)?;
    Ok(())
}

/// The next request: waited for, or, while a remap has work to do, taken only if one is there
/// (None then, after a step of the remap). `Err` when every sender is gone.
fn next_op(
    w: &Shared,
    rx: &mut mpsc::Receiver<WriteOp>,
    remapping: &mut Option<Remapping>,
    merges: &std::sync::mpsc::Sender<()>,
) -> Result<Option<WriteOp>, ()> {
    if remapping.is_none() {
        return rx.blocking_recv().map(Some).ok_or(());
    }
    match rx.try_recv() {
        Ok(op) => Ok(Some(op)),
        Err(mpsc::error::TryRecvError::Disconnected) => Err(()),
        Err(mpsc::error::TryRecvError::Empty) => {
            if remap_turn(w, remapping, merges) == Some(Turn::Waiting) {
                std::thread::sleep(REMAP_POLL);
            }
            Ok(None)
        }
    }
}

fn run(w: Shared, mut rx: mpsc::Receiver<WriteOp>, remap: Option<Remap>) {
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    let mut flushed = Instant::now();
    let (merges, merger) = merger::spawn(&w);
    // After a segment could not be written (a full disk), the in-memory index grows until then.
    let mut index_quiet_until: Option<Instant> = None;
    let mut remapping = remap.map(|state| Remapping::new(state, None));
    if remapping.is_some() {
        // The old segments found at open are the merge thread's to rewrite.
        let _ = merges.send(());
    }
    while shutdown.is_none() {
        let first = match next_op(&w, &mut rx, &mut remapping, &merges) {
            Ok(Some(op)) => op,
            Ok(None) => {
                flush_if_due(&w, &mut flushed);
                continue;
            }
            Err(()) => break,
        };
        let mut replies = Vec::new();
        // The replies before this index have their commit's mark.
        let mut marked = 0;
        let log = w.log();
        let places = w.view.read().unwrap_or_else(PoisonError::into_inner).places.clone();
        let mut pending = Pending::new(&w.tree, &log, places);
        pending.search = w.search.clone();
        let mut compaction = None;
        let mut applied: Result<(), Arc<StoreError>> = Ok(());
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                WriteOp::Put { event, reply } => {
                    let outcome = put(&mut pending, event.event(), None);
                    replies.push(Reply::Put(reply, pending.finish(outcome)));
                }
                WriteOp::Sweep { now, reply } => {
                    // The sweep scans the tree, so the group so far goes in first.
                    if !pending.is_empty() && applied.is_ok() {
                        let committed = w.commit(&mut pending);
                        applied = committed.map(|mark| Reply::mark(&mut replies[marked..], mark)).map_err(Arc::new);
                        marked = replies.len();
                    }
                    let outcome = sweep(&mut pending, now).inspect(|&removed| {
                        if removed > 0 {
                            pending.push_frame(&sweep_frame(now));
                        }
                    });
                    replies.push(Reply::Sweep(reply, pending.finish(outcome)));
                }
                WriteOp::Remove { id, reply } => {
                    let outcome = remove_into(&mut pending, &id).map(|removed| removed.is_some()).inspect(|&removed| {
                        if removed {
                            pending.push_frame(&remove_frame(&id));
                        }
                    });
                    replies.push(Reply::Remove(reply, pending.finish(outcome)));
                }
                WriteOp::Compact { prepared, reply } => {
                    // Finished after this group, on the log it leaves.
                    compaction = Some((prepared, reply));
                    break;
                }
                WriteOp::Shutdown { reply } => {
                    shutdown = Some(reply);
                    break;
                }
            }
            if replies.len() < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        if applied.is_ok() && !pending.is_empty() {
            applied = w.commit(&mut pending).map(|mark| Reply::mark(&mut replies[marked..], mark)).map_err(Arc::new);
        }
        // The group's frames are synced (or it failed): nothing is acknowledged before that.
        if let Err(e) = &applied {
            tracing::error!(error = %e, "writing a group failed; its writes were not acknowledged");
        }
        for reply in replies {
            reply.send(&applied);
        }
        drop(pending);
        if index_quiet_until.is_none_or(|until| Instant::now() >= until) {
            index_quiet_until = None;
            if let Err(e) = w.write_index(Some(&merges)) {
                tracing::error!(error = %e, "writing an index segment failed; the index stays in memory for now");
                index_quiet_until = Some(Instant::now() + INDEX_RETRY);
            }
        }
        if let Some((prepared, reply)) = compaction {
            let (remap, outcome) = compact::finish(&w, *prepared);
            if let Some(state) = remap {
                w.compaction.resume();
                let waiting = match outcome {
                    Ok(swapped) => Some((reply, swapped)),
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        None
                    }
                };
                remapping = Some(Remapping::new(state, waiting));
                // The old segments are the merge thread's to rewrite.
                let _ = merges.send(());
            } else {
                let _ = reply.send(outcome.map(|swapped| swapped.compacted));
            }
            flushed = Instant::now();
            // The log's generation and end changed: the search index records the new ones.
            if let Some(feed) = &w.search {
                feed.send(Vec::new(), Some(w.position()));
            }
        } else {
            // A step after each group, so that a busy relay finishes its remap too.
            remap_turn(&w, &mut remapping, &merges);
        }
        w.compaction.check_due(&w.view.read().unwrap_or_else(PoisonError::into_inner));
        flush_if_due(&w, &mut flushed);
    }
    // A clean stop leaves no tail for the next start to read (unless segments cannot be written).
    if shutdown.is_some()
        && index_quiet_until.is_none()
        && let Err(e) = w.write_index(None)
    {
        tracing::error!(error = %e, "writing the index segment at the stop failed; the next start reads the tail");
    }
    // The merge thread stops (it notices the store stopping, or the closed channel) and lets go
    // of its handles on the database before this one does.
    drop(merges);
    if let Some(merger) = merger
        && merger.join().is_err()
    {
        tracing::error!("the index merge thread panicked");
    }
    if let Err(e) = w.flush() {
        tracing::error!(error = %e, "final flush failed");
    }
    // The search index commits what the last groups changed (a rebuild in progress is left for
    // the next start).
    if let Some(feed) = &w.search {
        feed.stop();
    }
    // This thread's handle on the database goes before shutdown is acknowledged, so that once
    // the store's own handles are dropped the directory can be opened again at once.
    drop(w);
    if let Some(reply) = shutdown {
        let _ = reply.send(());
    }
}

/// Flushes sled behind the acknowledgements when the last flush is [`SLED_FLUSH_EVERY`] ago: a
/// failure here only means a longer replay.
fn flush_if_due(w: &Shared, flushed: &mut Instant) {
    if flushed.elapsed() >= SLED_FLUSH_EVERY {
        if let Err(e) = w.flush() {
            tracing::error!(error = %e, "flushing sled behind the event log failed");
        }
        *flushed = Instant::now();
    }
}
