//! Whether a compaction runs, when one is due, and how it may go: what the writer, a
//! compaction's steps, the merge thread and the store's API all look at.
//!
//! Owns [`Control`] (the running and remapping flags, the policy, the wake-up of
//! `Store::compaction_due`, the stop flag, the test hooks), [`CompactPolicy`] and the
//! [`Compacted`] figures a compaction reports.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use tokio::sync::Notify;

use crate::store::error::StoreError;
use crate::store::view::View;

/// What a compaction did.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Compacted {
    /// When it finished (Unix seconds).
    pub at: u64,
    /// The data directory's bytes before (the store's files, for a temporary store).
    pub before_bytes: u64,
    /// And after.
    pub after_bytes: u64,
    /// How long it took, start to end.
    pub seconds: f64,
    /// How long writes waited for its swap (milliseconds).
    #[serde(default)]
    pub writes_paused_ms: f64,
    /// How long reads waited for its swap (milliseconds): the moment the view changes.
    #[serde(default)]
    pub reads_paused_ms: f64,
}

/// How the store compacts: on its own once the log's dead bytes are at least `dead_ratio` of it
/// and it is at least `min_bytes` long (`storage.compact_dead_ratio`, `storage.compact_min_mb`),
/// and how fast the background copy may read and write (`storage.compact_max_mb_per_sec`). The
/// default never compacts on its own and copies at full speed.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CompactPolicy {
    /// Dead share of the log that makes a compaction due; 0: never on its own.
    pub dead_ratio: f64,
    /// Shorter logs are left alone.
    pub min_bytes: u64,
    /// Bytes per second the copy step writes at most, so that a compaction does not take the
    /// disk from the relay's own reads and writes; 0: no limit. The writer's short last step is
    /// never slowed.
    pub max_bytes_per_sec: u64,
}

impl CompactPolicy {
    /// True when a log of `log_bytes` with `dead_bytes` of them dead is due.
    fn is_due(&self, log_bytes: u64, dead_bytes: u64) -> bool {
        self.dead_ratio > 0.0
            && dead_bytes > 0
            && log_bytes >= self.min_bytes
            && dead_bytes as f64 >= self.dead_ratio * log_bytes as f64
    }
}

/// Whether a compaction runs, and when one is due.
#[derive(Default)]
pub(crate) struct Control {
    pub(crate) running: AtomicBool,
    /// Set while a compaction's remap is unfinished (after its swap, or found at open): no other
    /// compaction starts until it is done.
    pub(crate) remapping: AtomicBool,
    /// Why the remap's last step failed, until a step succeeds.
    pub(crate) remap_failing: Mutex<Option<String>>,
    pub(crate) due: Notify,
    pub(crate) policy: Mutex<CompactPolicy>,
    /// No automatic compaction before this (set when one failed).
    pub(crate) quiet_until: Mutex<Option<Instant>>,
    /// Set when the store shuts down: a copy in progress stops, so that a stop does not wait for
    /// a throttled compaction of a large log.
    pub(crate) stopping: AtomicBool,
    /// Tests hold the writer's part of a remap, to look at a store in the middle of one.
    #[cfg(test)]
    pub(crate) hold_remap: AtomicBool,
    /// Tests make the steps of a remap fail, as a full disk would.
    #[cfg(test)]
    pub(crate) fail_remap: AtomicBool,
    /// Tests hold a compaction between its copy (`copied` is set then) and its swap.
    #[cfg(test)]
    pub(crate) hold_swap: AtomicBool,
    #[cfg(test)]
    pub(crate) copied: AtomicBool,
}

impl Control {
    /// True while a compaction runs, its remap included.
    pub(crate) fn is_running(&self) -> bool {
        self.running.load(Ordering::Acquire) || self.remapping.load(Ordering::Acquire)
    }

    /// A remap is unfinished (found at open, or after a swap).
    pub(crate) fn resume(&self) {
        self.remapping.store(true, Ordering::Release);
    }

    /// True while a test holds the writer's part of a remap.
    pub(crate) fn remap_held(&self) -> bool {
        #[cfg(test)]
        return self.hold_remap.load(Ordering::Acquire);
        #[cfg(not(test))]
        false
    }

    /// An error while a test makes the remap's steps fail.
    pub(crate) fn remap_step_failure(&self) -> Result<(), StoreError> {
        #[cfg(test)]
        if self.fail_remap.load(Ordering::Acquire) {
            return Err(std::io::Error::new(std::io::ErrorKind::StorageFull, "no space left on device").into());
        }
        Ok(())
    }

    /// How the remap's last step went.
    pub(crate) fn remap_stepped(&self, failed: Option<String>) {
        *self.remap_failing.lock().unwrap_or_else(PoisonError::into_inner) = failed;
    }

    /// The remap is done.
    pub(crate) fn remapped(&self) {
        self.remapping.store(false, Ordering::Release);
    }

    /// Called by the writer after each group: wakes `Store::compaction_due` when the view's log
    /// is due under the policy.
    pub(crate) fn check_due(&self, view: &View) {
        if self.is_running() {
            return;
        }
        let policy = *self.policy.lock().unwrap_or_else(PoisonError::into_inner);
        let log_bytes = view.log.end();
        if !policy.is_due(log_bytes, log_bytes.saturating_sub(view.index.live_bytes())) {
            return;
        }
        let quiet = self.quiet_until.lock().unwrap_or_else(PoisonError::into_inner);
        if quiet.is_none_or(|until| Instant::now() >= until) {
            self.due.notify_one();
        }
    }
}
