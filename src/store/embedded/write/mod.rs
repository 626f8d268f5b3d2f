//! The write side: the only code that changes what is on disk, in one direction.
//!
//! ```text
//! Writes (this file: the handle the Store API holds)
//!   └─► writer (the thread: groups, commit, replay at open) ─► compact (copy, swap)
//!         ├─► remapping ─► remap (the catalogue's rewrite after a swap)
//!         ├─► merger (the merge thread: segments merged and rewritten)
//!         └─► apply (the NIP-01/09/40 rules) ─► pending (a group's overlay)
//!   all of them over shared (the handles they share) and control (a compaction's flags)
//! ```
//!
//! Owns [`Writes`]: the queue to the writer thread (a put, a removal, a sweep, a compaction's
//! last step, the stop), the settings documents and their durable saves, and running a
//! compaction (the copy off the reactor, then the writer's swap). A part lower in the drawing
//! never imports one above it: what it needs of its caller comes as a value ([`shared::Shared`])
//! or a channel (the merge thread's wake-ups).

pub(crate) mod apply;
pub(crate) mod compact;
pub(crate) mod control;
mod merger;
mod pending;
pub(crate) mod remap;
mod remapping;
pub(crate) mod replay;
pub(crate) mod shared;
mod writer;

use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::protocol::{EventId, Timestamp, VerifiedEvent};
use crate::store::contract::{CompactPolicy, Compacted, PutOutcome};
use crate::store::error::StoreError;
use compact::{LAST_COMPACTION, files_bytes};
use control::Control;
use remap::Remap;
use shared::Shared;
use writer::WriteOp;

pub(crate) use replay::replay;

/// Pending writes queued for the writer before `put` waits.
const WRITE_QUEUE: usize = 4096;
/// After a compaction that failed (a full disk, say), no automatic one for this long.
const RETRY_AFTER: Duration = Duration::from_secs(60);

/// The handle to the write side of one open store; cheap to clone.
#[derive(Clone)]
pub(crate) struct Writes {
    tx: mpsc::Sender<WriteOp>,
    pub(crate) shared: Shared,
    /// Small named JSON documents (admin overrides, moderation state, the last compaction).
    settings: sled::Tree,
}

impl Writes {
    /// Starts the writer thread over `shared`; `remap` is an unfinished remap found at open.
    pub(crate) fn start(shared: Shared, settings: sled::Tree, remap: Option<Remap>) -> Result<Writes, StoreError> {
        let (tx, rx) = mpsc::channel(WRITE_QUEUE);
        if remap.is_some() {
            // The compaction that left it is still running, as far as anyone asking is concerned.
            shared.compaction.resume();
        }
        writer::spawn(shared.clone(), rx, remap)?;
        Ok(Writes { tx, shared, settings })
    }

    /// Asks the writer and waits for its answer.
    async fn ask<T>(
        &self,
        op: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> WriteOp,
    ) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx.send(op(reply)).await.map_err(|_| StoreError::Closed)?;
        rx.await.map_err(|_| StoreError::Closed)?
    }

    /// See `Store::put`.
    pub(crate) async fn put(&self, event: Arc<VerifiedEvent>) -> Result<PutOutcome, StoreError> {
        self.ask(|reply| WriteOp::Put { event, reply }).await
    }

    /// See `Store::sweep_expired`.
    pub(crate) async fn sweep_expired(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.ask(|reply| WriteOp::Sweep { now, reply }).await
    }

    /// See `Store::remove`.
    pub(crate) async fn remove(&self, id: EventId) -> Result<bool, StoreError> {
        self.ask(|reply| WriteOp::Remove { id, reply }).await
    }

    /// A named settings document, if saved.
    pub(crate) fn load_setting(&self, name: &str) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(self.settings.get(name)?.map(|v| v.to_vec()))
    }

    /// Every settings document, by name.
    pub(crate) fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, StoreError> {
        let mut out = Vec::new();
        for item in self.settings.iter() {
            let (name, value) = item?;
            out.push((String::from_utf8_lossy(&name).into_owned(), value.to_vec()));
        }
        Ok(out)
    }

    /// Saves a named settings document durably.
    pub(crate) async fn save_setting(&self, name: &str, value: Vec<u8>) -> Result<(), StoreError> {
        self.settings.insert(name, value)?;
        self.flush_off_reactor().await
    }

    /// A durable flush of sled, off the async reactor.
    pub(crate) async fn flush_off_reactor(&self) -> Result<(), StoreError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.flush()).await.map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// Finishes queued writes, flushes and stops the writer. Later `put`s fail with `Closed`.
    pub(crate) async fn shutdown(&self) -> Result<(), StoreError> {
        self.shared.compaction.stopping.store(true, Ordering::Release);
        let (reply, rx) = oneshot::channel();
        if self.tx.send(WriteOp::Shutdown { reply }).await.is_err() {
            return Ok(());
        }
        rx.await.map_err(|_| StoreError::Closed)?;
        self.flush_off_reactor().await
    }
}

impl Writes {
    /// Compacts the event log now, while reads and writes go on; returns when it is done.
    /// [`StoreError::Compacting`] while another runs.
    pub async fn compact(&self) -> Result<Compacted, StoreError> {
        let running = Running::claim(&self.shared.compaction)?;
        self.compact_claimed(running).await
    }

    /// A compaction claimed with [`Writes::claim`]; it lets go of the claim when it ends.
    pub(crate) async fn compact_claimed(&self, running: Running) -> Result<Compacted, StoreError> {
        let result = self.copy_and_swap().await;
        if result.is_err() {
            let until = Instant::now() + RETRY_AFTER;
            *self.shared.compaction.quiet_until.lock().unwrap_or_else(PoisonError::into_inner) = Some(until);
        }
        drop(running);
        result
    }

    async fn copy_and_swap(&self) -> Result<Compacted, StoreError> {
        let started = Instant::now();
        let before_bytes = files_bytes(self.shared.dir.as_deref(), &self.shared.db, &self.shared.log())?;
        let shared = self.shared.clone();
        let prepared = tokio::task::spawn_blocking(move || compact::copy_live(&shared, started, before_bytes))
            .await
            .map_err(|e| StoreError::Task(e.to_string()))??;
        #[cfg(test)]
        {
            self.shared.compaction.copied.store(true, Ordering::Release);
            while self.shared.compaction.hold_swap.load(Ordering::Acquire) {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        let (reply, rx) = oneshot::channel();
        let op = WriteOp::Compact { prepared: Box::new(prepared), reply };
        self.tx.send(op).await.map_err(|_| StoreError::Closed)?;
        // Answered once the remap is done too (a stop before then leaves it to the next start).
        let done = rx.await.map_err(|_| StoreError::Closed)??;
        tracing::info!(
            before_bytes = done.before_bytes,
            after_bytes = done.after_bytes,
            seconds = done.seconds,
            writes_paused_ms = done.writes_paused_ms,
            reads_paused_ms = done.reads_paused_ms,
            "event log compacted"
        );
        // For `GET /admin/v1/store`; the compaction itself is complete without it.
        let record = serde_json::to_vec(&done).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        self.save_setting(LAST_COMPACTION, record).await?;
        Ok(done)
    }

    /// Claims the right to compact, for a compaction the caller runs (in the background);
    /// none while one runs.
    pub(crate) fn claim(&self) -> Option<Running> {
        Running::claim(&self.shared.compaction).ok()
    }

    /// True once the store is stopping.
    pub(crate) fn stopping(&self) -> bool {
        self.shared.compaction.stopping.load(Ordering::Acquire)
    }

    /// True while a compaction runs (its background remap included).
    pub fn is_compacting(&self) -> bool {
        self.shared.compaction.is_running()
    }

    /// Resolves once no compaction runs, a remap resumed at open included (the writer finishes
    /// one while idle); [`StoreError::Remap`] once a step of that remap fails (the writer would
    /// retry it for ever: a full disk).
    pub(crate) async fn until_compaction_ends(&self) -> Result<(), StoreError> {
        while self.is_compacting() {
            let failing = self.shared.compaction.remap_failing.lock().unwrap_or_else(PoisonError::into_inner).clone();
            if let Some(error) = failing {
                return Err(StoreError::Remap(error));
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        Ok(())
    }

    /// Sets when the store compacts on its own, and how fast.
    pub fn set_compaction_policy(&self, policy: CompactPolicy) {
        *self.shared.compaction.policy.lock().unwrap_or_else(PoisonError::into_inner) = policy;
        self.shared.compaction.check_due(&self.shared.view.read().unwrap_or_else(PoisonError::into_inner));
    }

    /// Resolves when the log is due for a compaction under the policy (checked after each write).
    pub async fn compaction_due(&self) {
        self.shared.compaction.due.notified().await;
    }
}

/// Held while a compaction runs; lets go when it ends, however it ends.
pub(crate) struct Running(Arc<Control>);

impl Running {
    fn claim(control: &Arc<Control>) -> Result<Running, StoreError> {
        if control.remapping.load(Ordering::Acquire) {
            return Err(StoreError::Compacting);
        }
        match control.running.compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Ok(Running(control.clone())),
            Err(_) => Err(StoreError::Compacting),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.store(false, Ordering::Release);
    }
}
