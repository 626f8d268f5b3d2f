//! The audit log: every change to what the relay allows, by whom, before and after.
//!
//! Owns the entry's form (`at`, `node`, `who`, `action`, `target`, `old`, `new`; JSON in the
//! store's audit tree, newest last; `node` is `node.name`, so the entries of several nodes can be
//! read side by side) and writing it durably with a tracing event beside it. Admin calls
//! record as `token` or the admin's pubkey; a member's own NIP-43 request as `nip43:<pubkey>`.

use serde::Serialize;
use serde_json::Value;

use crate::protocol::Timestamp;
use crate::store::{Store, StoreError};

/// One audit log entry.
#[derive(Debug, Serialize)]
struct AuditEntry<'a> {
    at: u64,
    node: &'a str,
    who: &'a str,
    action: &'a str,
    target: &'a str,
    old: Value,
    new: Value,
}

/// Records a change made on node `node` in the audit log, durably, and as a tracing event.
pub async fn record(
    store: &Store,
    node: &str,
    who: &str,
    action: &str,
    target: &str,
    old: Value,
    new: Value,
) -> Result<(), StoreError> {
    tracing::info!(target: "hearth::audit", node, who, action, target, %old, %new, "admin change");
    let entry = AuditEntry { at: Timestamp::now().0, node, who, action, target, old, new };
    let bytes = serde_json::to_vec(&entry).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    store.append_audit(bytes).await
}
