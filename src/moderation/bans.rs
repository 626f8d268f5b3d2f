//! Bans and blocks: banned keys and events, blocked addresses, and the kinds a relay takes.
//!
//! Owns these methods of [`Moderation`]: the questions the transports ask ([`Moderation::is_banned`],
//! [`Moderation::ip_blocked`]) and the named changes the admin API (NIP-86, reports) makes.

use std::net::IpAddr;

use crate::protocol::{EventId, PubKey};
use crate::store::Store;

use super::live::{Moderation, ModerationError};

impl Moderation {
    /// True when `pubkey` is banned.
    pub fn is_banned(&self, pubkey: &PubKey) -> bool {
        self.read(|s| s.banned_pubkeys.contains_key(pubkey))
    }

    /// True when `ip` is blocked.
    pub fn ip_blocked(&self, ip: &IpAddr) -> bool {
        self.read(|s| s.blocked_ips.contains_key(ip))
    }

    /// Bans `pubkey` with `reason`; the reason it was banned with before, if it was.
    pub async fn ban_key(
        &self,
        store: &Store,
        pubkey: PubKey,
        reason: String,
    ) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.banned_pubkeys.insert(pubkey, reason)).await
    }

    /// Lifts the ban on `pubkey`; its reason, if it was banned.
    pub async fn unban_key(&self, store: &Store, pubkey: PubKey) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.banned_pubkeys.remove(&pubkey)).await
    }

    /// Bans the event `id` with `reason` (it is never taken again); the reason before, if any.
    pub async fn ban_event(
        &self,
        store: &Store,
        id: EventId,
        reason: String,
    ) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.banned_events.insert(id, reason)).await
    }

    /// Lifts the ban on the event `id`; its reason, if it was banned.
    pub async fn unban_event(&self, store: &Store, id: EventId) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.banned_events.remove(&id)).await
    }

    /// Blocks the address `ip` with `reason`; the reason before, if it was blocked.
    pub async fn block_ip(&self, store: &Store, ip: IpAddr, reason: String) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.blocked_ips.insert(ip, reason)).await
    }

    /// Unblocks the address `ip`; its reason, if it was blocked.
    pub async fn unblock_ip(&self, store: &Store, ip: IpAddr) -> Result<Option<String>, ModerationError> {
        self.update(store, |s| s.blocked_ips.remove(&ip)).await
    }

    /// Puts kind `kind` on the list of kinds taken (`allow`), or off it; true when that changed
    /// the list. An empty list takes every kind.
    pub async fn allow_kind(&self, store: &Store, kind: u16, allow: bool) -> Result<bool, ModerationError> {
        self.update(store, |s| if allow { s.allowed_kinds.insert(kind) } else { s.allowed_kinds.remove(&kind) }).await
    }
}
