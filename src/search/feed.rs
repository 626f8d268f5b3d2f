//! The thread that keeps the search index in step with the store: it alone writes the index.
//!
//! Owns [`Feed`]: the queue of the store writer's changes (each write group's added and removed
//! events, and the store's [`Position`] after the group), applying them in order, a commit at
//! most [`COMMIT_EVERY`] after the first change it holds (so an acknowledged event is searchable
//! within one interval), the index's [`SearchState`], and a rebuild or a catch-up before the
//! queue is read: changes that arrive meanwhile wait in the queue and are applied after it, in
//! the order they were made, so nothing the rebuild read twice or missed stays wrong.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::index::{Position, SearchIndex};
use crate::protocol::{Event, EventId, Kind};

/// How long a change waits at most before it is committed (made searchable and durable).
pub const COMMIT_EVERY: Duration = Duration::from_secs(1);
/// How often the store's position alone (writes of kinds not indexed) is committed: it only
/// shortens the catch-up after a crash.
const POSITION_EVERY: Duration = Duration::from_secs(30);
/// Changes queued at most while the index is in step: past it the store's writer waits for the
/// feed (memory stays bounded when indexing is slower than storing). Not while a rebuild runs:
/// the relay goes on storing, and the queue is the rebuild's to catch up.
const MAX_BACKLOG: usize = 8_000;
/// After a commit failed (a full disk), how long before its error is logged again.
const QUIET_FOR: Duration = Duration::from_secs(60);

/// One change to the index.
#[derive(Clone, Debug)]
pub enum Change {
    /// An event stored (or, in a rebuild, found stored).
    Add(Event),
    /// An event removed: replaced, deleted, expired or taken down.
    Remove(EventId),
}

/// Reads what the index must hold from the store: each change to `apply` (which answers false
/// when the feed is stopping: the source then ends, with an error), then the position the index
/// is complete up to once they are in. Run by the feed's thread before the queue.
pub type Source = Box<dyn FnOnce(&mut dyn FnMut(Change) -> bool) -> Result<Position, String> + Send>;

/// A rebuild (from an empty index) or a catch-up (over what the index holds) to run first.
pub struct CatchUp {
    /// True to empty the index first.
    pub from_scratch: bool,
    /// The store's events to add and remove.
    pub source: Source,
}

/// Whether the index can answer.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case", tag = "state")]
pub enum SearchState {
    /// In step with the store (within one commit interval).
    Ready,
    /// Being rebuilt or caught up: `events` added so far.
    Building {
        /// Events added so far.
        events: u64,
    },
    /// The rebuild failed; the text says why.
    Failed {
        /// Why.
        reason: String,
    },
}

/// How many changes wait in the queue, and the wake-up of a writer waiting for it to shrink.
#[derive(Default)]
struct Backlog {
    /// Changes queued, and whether the feed's thread has ended (then no one waits).
    queued: Mutex<(usize, bool)>,
    drained: Condvar,
}

impl Backlog {
    fn lock(&self) -> std::sync::MutexGuard<'_, (usize, bool)> {
        self.queued.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, n: usize) {
        self.lock().0 += n;
    }

    fn applied(&self, n: usize) {
        let mut queued = self.lock();
        queued.0 = queued.0.saturating_sub(n);
        if queued.0 <= MAX_BACKLOG {
            self.drained.notify_all();
        }
    }

    /// The feed's thread ended (stopped, or a panic in the index): waiters go on.
    fn closed(&self) {
        self.lock().1 = true;
        self.drained.notify_all();
    }

    /// Waits while more than [`MAX_BACKLOG`] changes are queued and the thread runs.
    fn wait(&self) {
        let queued = self.lock();
        let _held = self
            .drained
            .wait_while(queued, |(q, closed)| *q > MAX_BACKLOG && !*closed)
            .unwrap_or_else(PoisonError::into_inner);
    }
}

/// Closes the backlog when the feed's thread ends, however it ends.
struct Closing<'a>(&'a Backlog);

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.0.closed();
    }
}

enum Msg {
    Changes(Vec<Change>, Option<Position>),
    Flush(Sender<()>),
    Stop,
}

/// The queue to the feed's thread and the index's state; the store writer holds it.
pub struct Feed {
    tx: Sender<Msg>,
    state: Arc<Mutex<SearchState>>,
    /// Set by [`Feed::stop`]: a rebuild in progress ends without a commit.
    stopping: Arc<AtomicBool>,
    /// Changes queued and not yet applied.
    backlog: Arc<Backlog>,
    kinds: Vec<Kind>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").field("kinds", &self.kinds).finish_non_exhaustive()
    }
}

impl Feed {
    /// Starts the thread that writes `index` (complete up to `at`), indexing the events of
    /// `kinds`; `catch_up` runs first.
    pub fn start(
        index: Arc<SearchIndex>,
        at: Position,
        kinds: Vec<Kind>,
        catch_up: Option<CatchUp>,
    ) -> std::io::Result<Feed> {
        let (tx, rx) = mpsc::channel();
        let first = match &catch_up {
            Some(_) => SearchState::Building { events: 0 },
            None => SearchState::Ready,
        };
        let state = Arc::new(Mutex::new(first));
        let stopping = Arc::new(AtomicBool::new(false));
        let backlog = Arc::new(Backlog::default());
        let shared = Running { state: state.clone(), stopping: stopping.clone(), backlog: backlog.clone() };
        let thread = std::thread::Builder::new()
            .name("hearth-search".into())
            .spawn(move || run(&index, at, catch_up, &rx, &shared))?;
        Ok(Feed { tx, state, stopping, backlog, kinds, thread: Mutex::new(Some(thread)) })
    }

    /// Whether events of `kind` are indexed.
    pub fn wants(&self, kind: Kind) -> bool {
        self.kinds.contains(&kind)
    }

    /// Queues a write group's changes, and the store's position after it; waits first while
    /// the index is in step and more than 8,000 changes are queued (the store's writer, whose
    /// memory this bounds).
    pub fn send(&self, changes: Vec<Change>, at: Option<Position>) {
        if changes.is_empty() && at.is_none() {
            return;
        }
        if self.state() == SearchState::Ready {
            self.backlog.wait();
        }
        self.forget(changes, at);
    }

    /// [`Feed::send`] without waiting (a reader's removal of an id the store no longer holds).
    pub fn forget(&self, changes: Vec<Change>, at: Option<Position>) {
        self.backlog.add(changes.len());
        // A stopped thread has nothing left to keep in step.
        let _ = self.tx.send(Msg::Changes(changes, at));
    }

    /// Commits what is queued now, and waits for it (a stop, a test, `hearth search-reindex`).
    pub fn flush(&self) {
        let (reply, done) = mpsc::channel();
        if self.tx.send(Msg::Flush(reply)).is_ok() {
            let _ = done.recv();
        }
    }

    /// Whether the index can answer.
    pub fn state(&self) -> SearchState {
        self.state.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Commits what is queued and stops the thread (the store's stop).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
        let _ = self.tx.send(Msg::Stop);
        let thread = self.thread.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(thread) = thread
            && thread.join().is_err()
        {
            tracing::error!("the search index's thread panicked");
        }
    }
}

/// The index's writer: what it holds uncommitted, and since when.
struct Writing<'a> {
    index: &'a SearchIndex,
    at: Position,
    /// The position committed last.
    committed: Position,
    committed_when: Instant,
    dirty_since: Option<Instant>,
    quiet_until: Option<Instant>,
}

impl Writing<'_> {
    fn apply(&mut self, change: Change) {
        match change {
            Change::Add(event) => {
                if let Err(e) = self.index.add(&event) {
                    tracing::error!(error = %e, id = %event.id, "an event could not be added to the search index");
                }
            }
            Change::Remove(id) => self.index.remove(&id),
        }
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    /// Whether a commit is due: a change held for an interval, or the position moved long ago.
    fn due(&self) -> bool {
        self.dirty_since.is_some_and(|since| since.elapsed() >= COMMIT_EVERY)
            || (self.at != self.committed && self.committed_when.elapsed() >= POSITION_EVERY)
    }

    fn commit(&mut self) {
        if self.dirty_since.is_none() && self.at == self.committed {
            return;
        }
        match self.index.commit(self.at) {
            Ok(()) => {
                self.dirty_since = None;
                self.committed = self.at;
                self.committed_when = Instant::now();
            }
            Err(e) => {
                // Kept for the next interval: the store's writes go on, the index is behind.
                if self.quiet_until.is_none_or(|until| Instant::now() >= until) {
                    tracing::error!(error = %e, "committing the search index failed; it is tried again");
                    self.quiet_until = Some(Instant::now() + QUIET_FOR);
                }
                self.dirty_since = Some(Instant::now());
            }
        }
    }
}

/// What the feed's thread shares with its [`Feed`].
struct Running {
    state: Arc<Mutex<SearchState>>,
    stopping: Arc<AtomicBool>,
    backlog: Arc<Backlog>,
}

fn run(index: &SearchIndex, at: Position, catch_up: Option<CatchUp>, rx: &Receiver<Msg>, shared: &Running) {
    let Running { state, stopping, backlog } = shared;
    let _closing = Closing(backlog);
    let set = |s: SearchState| *state.lock().unwrap_or_else(PoisonError::into_inner) = s;
    let now = Instant::now();
    let mut w = Writing { index, at, committed: at, committed_when: now, dirty_since: None, quiet_until: None };
    if let Some(catch_up) = catch_up {
        let started = Instant::now();
        if catch_up.from_scratch
            && let Err(e) = index.clear()
        {
            tracing::error!(error = %e, "emptying the search index failed");
        }
        let mut events = 0u64;
        let read = (catch_up.source)(&mut |change| {
            if stopping.load(Ordering::Acquire) {
                return false;
            }
            if matches!(change, Change::Add(_)) {
                events += 1;
                if events.is_multiple_of(10_000) {
                    set(SearchState::Building { events });
                }
            }
            w.apply(change);
            true
        });
        match read {
            Ok(position) => {
                w.at = position;
                w.committed = Position { generation: u64::MAX, end: u64::MAX };
                w.commit();
                let ms = started.elapsed().as_millis() as u64;
                tracing::info!(
                    events,
                    ms,
                    rebuilt = catch_up.from_scratch,
                    "the search index is in step with the store"
                );
                set(SearchState::Ready);
            }
            // Nothing is committed: the next start reads from where the index was.
            Err(_) if stopping.load(Ordering::Acquire) => {
                tracing::info!(events, "the store stopped before the search index was in step; the next start goes on");
                return;
            }
            Err(reason) => {
                tracing::error!(%reason, "rebuilding the search index failed; run hearth search-reindex");
                set(SearchState::Failed { reason });
            }
        }
    }
    loop {
        let wait = match w.dirty_since {
            Some(since) => COMMIT_EVERY.saturating_sub(since.elapsed()),
            None if w.at != w.committed => POSITION_EVERY.saturating_sub(w.committed_when.elapsed()),
            None => Duration::from_secs(3600),
        };
        match rx.recv_timeout(wait) {
            Ok(Msg::Changes(changes, position)) => {
                let n = changes.len();
                for change in changes {
                    w.apply(change);
                }
                backlog.applied(n);
                if let Some(position) = position {
                    w.at = position;
                }
            }
            Ok(Msg::Flush(reply)) => {
                w.commit();
                let _ = reply.send(());
            }
            Ok(Msg::Stop) | Err(RecvTimeoutError::Disconnected) => {
                w.commit();
                return;
            }
            Err(RecvTimeoutError::Timeout) => {}
        }
        if w.due() {
            w.commit();
        }
    }
}
