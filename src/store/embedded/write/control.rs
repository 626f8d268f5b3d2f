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

use crate::store::contract::CompactPolicy;
use crate::store::embedded::view::View;
use crate::store::error::StoreError;

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
