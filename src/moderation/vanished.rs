//! Vanished keys (NIP-62): the keys that asked this relay to forget them, and up to when.
//!
//! Owns [`Moderation::vanish_key`]; `Moderation::judge` refuses a vanished key's events (and gift
//! wraps to it) dated up to its request.

use crate::protocol::PubKey;
use crate::store::Store;

use super::live::{Moderation, ModerationError};

impl Moderation {
    /// Records that `pubkey` asked to vanish at `at` (its request's `created_at`); a later request
    /// moves the mark on, an earlier one leaves it.
    pub async fn vanish_key(&self, store: &Store, pubkey: PubKey, at: u64) -> Result<(), ModerationError> {
        self.update(store, |s| {
            let previous = s.vanished.get(&pubkey).copied().unwrap_or(0);
            s.vanished.insert(pubkey, previous.max(at));
        })
        .await
    }
}
