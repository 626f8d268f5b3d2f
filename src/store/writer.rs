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
//! shutdown. After a crash, [`replay`] runs the frames after the end sled last made durable
//! through the same code the writes took the first time, in the same order, so sled and the index
//! come back exactly as they were acknowledged. One sled batch per group and one sync per ack
//! (not one batch per event, nor three syncs per ack) are what the ingest figures in README rest
//! on.
//!
//! Between groups it also takes the steps of an unfinished compaction's remap (`super::remap`):
//! it is the only thread that changes the catalogue's buckets, so a step needs no transaction
//! either.

use std::path::PathBuf;
use std::sync::{Arc, PoisonError, RwLock, RwLockWriteGuard};
use std::time::{Duration, Instant};

use sled::Tree;
use tokio::sync::{mpsc, oneshot};

use super::apply::{put, remove_into, sweep};
use super::compact::{self, Compacted, Control, Prepared, Swapped};
use super::index::Serial;
use super::log::{self, Log};
use super::pending::Pending;
use super::record;
use super::remap::{self, Places, Remap};
use super::{Mark, PutOutcome, StoreError, View};
use crate::protocol::{EventId, Timestamp, VerifiedEvent};

/// Writes handled in one group at most.
const MAX_GROUP: usize = 4096;
/// How often sled's state is flushed and synced behind the acknowledged writes; this bounds what
/// [`replay`] has to redo after a crash.
const SLED_FLUSH_EVERY: Duration = Duration::from_secs(1);
/// How long the writer waits to write an index segment again after it failed.
const INDEX_RETRY: Duration = Duration::from_secs(60);
/// How long the writer waits before another remap step after one failed.
const REMAP_RETRY: Duration = Duration::from_secs(1);
/// How often an idle writer looks whether the merge thread has finished its part of a remap.
const REMAP_POLL: Duration = Duration::from_millis(10);
/// How often the merge thread is woken while the writer waits for its part of a remap.
const MERGE_NUDGE: Duration = Duration::from_secs(5);
/// First byte of the log frame of a moderation removal (then the id); records start with
/// [`record::FORMAT`].
const REMOVE_FRAME: u8 = 0x80;
/// First byte of the log frame of an expiry sweep that removed events (then `now`, u64).
const SWEEP_FRAME: u8 = 0x81;

/// A request to the writer.
pub(super) enum WriteOp {
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

/// What the writer thread owns.
pub(super) struct Writer {
    pub db: sled::Db,
    pub tree: Tree,
    /// The index and the log the records go to.
    pub view: Arc<RwLock<View>>,
    /// Syncs what sled flushed (`None` for a temporary store).
    pub durable: Option<Arc<super::durable::Durable>>,
    /// The data directory (`None` for a temporary store).
    pub dir: Option<PathBuf>,
    /// When a compaction is due.
    pub compaction: Arc<Control>,
}

impl Writer {
    /// sled's flush, then the data sync that makes it durable.
    pub(super) fn flush(&self) -> Result<(), StoreError> {
        super::flush_durably(&self.db, self.durable.as_deref())
    }

    /// The log the next group's frames go to.
    pub(super) fn log(&self) -> Arc<Log> {
        self.view.read().unwrap_or_else(PoisonError::into_inner).log.clone()
    }

    /// The view, for the writer's changes; readers wait meanwhile.
    pub(super) fn view_mut(&self) -> RwLockWriteGuard<'_, View> {
        self.view.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Commits a group: its frames and sled batch, then its changes to the index, which makes
    /// them visible at the mark returned.
    fn commit(&self, pending: &mut Pending) -> Result<Mark, StoreError> {
        let ops = pending.apply()?;
        let mut view = self.view_mut();
        view.index.apply(ops, pending.start);
        view.mark = view.mark.next();
        Ok(view.mark)
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
        self.tree.apply_batch(super::indexes::written_out(&self.tree, &view.index.meta(), from, end)?)?;
        drop(view);
        if let Some(merges) = merges {
            let _ = merges.send(());
        }
        Ok(())
    }
}

/// Starts the writer thread; `remap` is an unfinished remap found at open.
pub(super) fn spawn(writer: Writer, rx: mpsc::Receiver<WriteOp>, remap: Option<Remap>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("hearth-writer".into())
        .spawn(move || run(writer, rx, remap))
        .map_err(StoreError::Io)?;
    Ok(())
}

/// An unfinished remap as the writer carries it on, and the compaction waiting for it (none when
/// it was found at open).
struct Remapping {
    state: Remap,
    waiting: Option<(oneshot::Sender<Result<Compacted, StoreError>>, Swapped)>,
    /// No step before this (set after one failed).
    quiet_until: Option<Instant>,
    /// When the merge thread was last woken for its part.
    woke: Instant,
}

/// What a turn of a remap's work came to.
#[derive(PartialEq)]
enum Turn {
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
    fn new(state: Remap, waiting: Option<(oneshot::Sender<Result<Compacted, StoreError>>, Swapped)>) -> Remapping {
        Remapping { state, waiting, quiet_until: None, woke: Instant::now() }
    }

    /// Takes the next step of the catalogue's rewrite, or finishes the remap once the merge
    /// thread has rewritten the old segments too (woken again now and then while it has not: a
    /// rewrite that failed, on a full disk say, is tried again).
    fn work(&mut self, w: &Writer, merges: &std::sync::mpsc::Sender<()>) -> Turn {
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
    fn answer(self, w: &Writer, merges: &std::sync::mpsc::Sender<()>) {
        if let Some((reply, swapped)) = self.waiting {
            let _ = reply.send(swapped.done(w));
        }
        let _ = merges.send(());
    }
}

impl Writer {
    /// Ends a remap whose catalogue and segments are rewritten: its record goes, durably, then
    /// the moves file and the previous generation's segment files.
    fn finish_remap(&self) -> Result<(), StoreError> {
        remap::finish(&self.tree)?;
        let generation = {
            let mut view = self.view_mut();
            view.places = view.places.settled();
            view.generation
        };
        self.flush()?;
        if let Some(dir) = &self.dir {
            remap::remove_stale(dir, None)?;
            super::indexes::remove_other_generations(dir, &[generation])?;
        }
        self.compaction.remapped();
        tracing::info!("the compaction's rewrite of the catalogue and the index is done");
        Ok(())
    }
}

/// A turn of the unfinished remap, if there is one; once it is done, the compaction waiting for
/// it is answered and the remap let go.
fn remap_turn(w: &Writer, remapping: &mut Option<Remapping>, merges: &std::sync::mpsc::Sender<()>) -> Option<Turn> {
    let turn = remapping.as_mut()?.work(w, merges);
    if turn == Turn::Done
        && let Some(done) = remapping.take()
    {
        done.answer(w, merges);
    }
    Some(turn)
}

/// The next request: waited for, or, while a remap has work to do, taken only if one is there
/// (None then, after a step of the remap). `Err` when every sender is gone.
fn next_op(
    w: &Writer,
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

fn run(w: Writer, mut rx: mpsc::Receiver<WriteOp>, remap: Option<Remap>) {
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    let mut flushed = Instant::now();
    let (merges, merger) = super::merger::spawn(&w);
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
    // This thread's handle on the database goes before shutdown is acknowledged, so that once
    // the store's own handles are dropped the directory can be opened again at once.
    drop(w);
    if let Some(reply) = shutdown {
        let _ = reply.send(());
    }
}

/// Flushes sled behind the acknowledgements when the last flush is [`SLED_FLUSH_EVERY`] ago: a
/// failure here only means a longer replay.
fn flush_if_due(w: &Writer, flushed: &mut Instant) {
    if flushed.elapsed() >= SLED_FLUSH_EVERY {
        if let Err(e) = w.flush() {
            tracing::error!(error = %e, "flushing sled behind the event log failed");
        }
        *flushed = Instant::now();
    }
}

/// The log frame of a moderation removal.
pub(super) fn remove_frame(id: &EventId) -> Vec<u8> {
    let mut frame = vec![REMOVE_FRAME];
    frame.extend_from_slice(&id.0);
    frame
}

/// The log frame of an expiry sweep that removed events.
pub(super) fn sweep_frame(now: Timestamp) -> Vec<u8> {
    let mut frame = vec![SWEEP_FRAME];
    frame.extend_from_slice(&now.0.to_be_bytes());
    frame
}

/// Redoes, in order, the writes whose frames are in the event log after the end sled made
/// durable (`serials`, from [`Log::recover_tail`]): puts, removals and sweeps take the same code
/// as the first time against the same state, so they decide the same way. Returns how many frames
/// were replayed; the caller flushes.
pub(super) fn replay(tree: &Tree, log: &Log, serials: &[Serial], places: &Places) -> Result<usize, StoreError> {
    // The index is rebuilt from sled afterwards: the replayed changes to it are not needed.
    let mut p = Pending::new(tree, log, places.clone());
    for &serial in serials {
        let frame = log.read(serial)?;
        // What is applied to sled records as done exactly the frames before this one (a sweep
        // applies the group so far), so a crash during the replay redoes the rest.
        p.start = serial;
        let outcome = match frame.split_first() {
            Some((&REMOVE_FRAME, id)) => {
                let id = EventId(id.try_into().map_err(|_| StoreError::Corrupt(format!("removal frame at {serial}")))?);
                remove_into(&mut p, &id).map(drop)
            }
            Some((&SWEEP_FRAME, now)) => {
                let now = now.try_into().map_err(|_| StoreError::Corrupt(format!("sweep frame at {serial}")))?;
                if !p.is_empty() {
                    p.apply()?;
                }
                sweep(&mut p, Timestamp(u64::from_be_bytes(now))).map(drop)
            }
            _ => match put(&mut p, &record::decode(&frame)?, Some(serial))? {
                PutOutcome::Stored(_) => Ok(()),
                other => {
                    tracing::warn!(serial, outcome = ?other, "a replayed record was not stored again");
                    // Its frame is dead: recorded as a removal, so the tail's reader skips it.
                    p.insert(
                        super::keys::removed(serial),
                        (log::FRAME_HEADER as u32 + frame.len() as u32).to_be_bytes(),
                    );
                    Ok(())
                }
            },
        };
        p.finish(outcome)?;
        p.start = serial + log::FRAME_HEADER + frame.len() as u64;
    }
    if !p.is_empty() {
        p.apply()?;
    }
    Ok(serials.len())
}
