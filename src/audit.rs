//! The audit log: every change to what the relay allows, by whom, before and after.
//!
//! Owns the entry's form (`at`, `who`, `action`, `target`, `old`, `new`; JSON in the store's
//! audit tree, newest last) and writing it durably with a tracing event beside it. Admin calls
//! record as `token` or the admin's pubkey; a member's own NIP-43 request as `nip43:<pubkey>`.

use serde::Serialize;
use serde_json::Value;

use crate::protocol::Timestamp;
use crate::store::{Store, StoreError};

/// One audit log entry.
#[derive(Debug, Serialize)]
struct AuditEntry<'a> {
    at: u64,
    who: &'a str,
    action: &'a str,
    target: &'a str,
    old: Value,
    new: Value,
}

/// Records a change in the audit log, durably, and as a tracing event.
pub async fn record(
    store: &Store,
    who: &str,
    action: &str,
    target: &str,
    old: Value,
    new: Value,
) -> Result<(), StoreError> {
    tracing::info!(target: "hearth::audit", who, action, target, %old, %new, "admin change");
    let entry = AuditEntry { at: Timestamp::now().0, who, action, target, old, new };
    let bytes = serde_json::to_vec(&entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    store.append_audit(bytes).await
}
