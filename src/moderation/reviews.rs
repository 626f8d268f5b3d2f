//! Reviews and holds: an admin's decisions on reported targets, and the events held for review
//! (`moderation.hold_after_reports`).
//!
//! Owns these methods of [`Moderation`]: [`Moderation::review`] (a decision recorded: the
//! target's reports made before it leave the queue), [`Moderation::hold`] and
//! [`Moderation::release`] (every read path learns of them through the held ids), and
//! [`Moderation::is_held`].

use crate::protocol::EventId;
use crate::store::Store;

use super::live::{Moderation, ModerationError};
use super::state::Reviewed;

impl Moderation {
    /// Records the decision `reviewed` on `target` (an event id or a pubkey, hex); the one
    /// before, if any.
    pub async fn review(
        &self,
        store: &Store,
        target: String,
        reviewed: Reviewed,
    ) -> Result<Option<Reviewed>, ModerationError> {
        self.update(store, |s| s.reviewed.insert(target, reviewed)).await
    }

    /// Holds the event `id` for review from `at` (Unix seconds): served only to its author and
    /// the admins until an admin decides.
    pub async fn hold(&self, store: &Store, id: EventId, at: u64) -> Result<(), ModerationError> {
        self.update(store, |s| {
            s.held.insert(id, at);
        })
        .await
    }

    /// Releases the held event `id`; when it was held, if it was.
    pub async fn release(&self, store: &Store, id: EventId) -> Result<Option<u64>, ModerationError> {
        self.update(store, |s| s.held.remove(&id)).await
    }

    /// True when the event `id` is held for review.
    pub fn is_held(&self, id: &EventId) -> bool {
        self.read(|s| s.held.contains_key(id))
    }
}
