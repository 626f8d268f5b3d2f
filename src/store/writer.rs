//! The single writer thread: atomic per-event batches and group commit.
//!
//! Owns every mutation of the event tree. One thread applies writes in arrival order, so the
//! read-check-write of deduplication, replacement and deletion needs no transaction; each event
//! with all its index entries is one `apply_batch` (atomic in sled). Every write that arrived
//! while the previous flush ran shares the next flush; replies are sent only after it, so an
//! `OK true` always means "on disk".

use std::collections::BTreeSet;

use sled::{Batch, IVec, Tree};
use tokio::sync::{mpsc, oneshot};

use super::keys::{self, IndexPrefix};
use super::{PutOutcome, StoreError, parse_stored, raw_json, split_value};
use crate::protocol::{Event, EventId, Kind, KindClass, PubKey, Timestamp, VerifiedEvent};

/// Writes handled between two flushes at most.
const MAX_GROUP: usize = 4096;

/// A request to the writer.
pub(super) enum WriteOp {
    Put { event: std::sync::Arc<VerifiedEvent>, reply: oneshot::Sender<Result<PutOutcome, StoreError>> },
    Sweep { now: Timestamp, reply: oneshot::Sender<Result<usize, StoreError>> },
    Remove { id: EventId, reply: oneshot::Sender<Result<bool, StoreError>> },
    Shutdown { reply: oneshot::Sender<()> },
}

enum Reply {
    Put(oneshot::Sender<Result<PutOutcome, StoreError>>, Result<PutOutcome, StoreError>),
    Sweep(oneshot::Sender<Result<usize, StoreError>>, Result<usize, StoreError>),
    Remove(oneshot::Sender<Result<bool, StoreError>>, Result<bool, StoreError>),
}

impl Reply {
    /// Sends the outcome, or the flush error when the group did not reach the disk.
    fn send(self, flushed: &Result<usize, sled::Error>) {
        fn pick<T>(outcome: Result<T, StoreError>, flushed: &Result<usize, sled::Error>) -> Result<T, StoreError> {
            match flushed {
                Ok(_) => outcome,
                Err(e) => Err(StoreError::Sled(e.clone())),
            }
        }
        // A dropped receiver means the requester gave up; the write stands either way.
        let _ = match self {
            Reply::Put(tx, outcome) => tx.send(pick(outcome, flushed)).map_err(drop),
            Reply::Sweep(tx, outcome) => tx.send(pick(outcome, flushed)).map_err(drop),
            Reply::Remove(tx, outcome) => tx.send(pick(outcome, flushed)).map_err(drop),
        };
    }
}

pub(super) fn spawn(db: sled::Db, tree: Tree, rx: mpsc::Receiver<WriteOp>) -> Result<(), StoreError> {
    std::thread::Builder::new()
        .name("hearth-writer".into())
        .spawn(move || run(db, tree, rx))
        .map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
    Ok(())
}

fn run(db: sled::Db, tree: Tree, mut rx: mpsc::Receiver<WriteOp>) {
    let mut shutdown: Option<oneshot::Sender<()>> = None;
    while shutdown.is_none() {
        let Some(first) = rx.blocking_recv() else { break };
        let mut replies = Vec::new();
        let mut next = Some(first);
        while let Some(op) = next.take() {
            match op {
                WriteOp::Put { event, reply } => replies.push(Reply::Put(reply, put(&tree, &event))),
                WriteOp::Sweep { now, reply } => replies.push(Reply::Sweep(reply, sweep(&tree, now))),
                WriteOp::Remove { id, reply } => replies.push(Reply::Remove(reply, remove(&tree, &id))),
                WriteOp::Shutdown { reply } => {
                    shutdown = Some(reply);
                    break;
                }
            }
            if replies.len() < MAX_GROUP {
                next = rx.try_recv().ok();
            }
        }
        // One flush for the whole group; nothing is acknowledged before it.
        let flushed = db.flush();
        for reply in replies {
            reply.send(&flushed);
        }
        if let Err(e) = flushed {
            tracing::error!(error = %e, "flush failed; writes of this group were not acknowledged");
        }
    }
    if let Err(e) = db.flush() {
        tracing::error!(error = %e, "final flush failed");
    }
    if let Some(reply) = shutdown {
        let _ = reply.send(());
    }
}

/// Every index key of a stored event (not the `e` record, the address or the expiry entry).
fn index_keys(event: &Event) -> Vec<Vec<u8>> {
    let (at, id) = (event.created_at, &event.id);
    let mut out = vec![
        IndexPrefix::Created.entry(at, id),
        IndexPrefix::Author(event.pubkey).entry(at, id),
        IndexPrefix::Kind(event.kind).entry(at, id),
        IndexPrefix::AuthorKind(event.pubkey, event.kind).entry(at, id),
    ];
    let tags: BTreeSet<(u8, &str)> = event
        .tags
        .iter()
        .filter_map(|t| match (t.first().map(String::as_bytes), t.get(1)) {
            (Some([letter]), Some(value)) if letter.is_ascii_alphabetic() => Some((*letter, value.as_str())),
            _ => None,
        })
        .collect();
    out.extend(tags.into_iter().map(|(letter, value)| IndexPrefix::Tag(letter, value.to_string()).entry(at, id)));
    out
}

fn address_of(event: &Event) -> Option<Vec<u8>> {
    match event.kind.class() {
        KindClass::Replaceable => Some(keys::address(&event.pubkey, event.kind, "")),
        KindClass::Addressable => Some(keys::address(&event.pubkey, event.kind, event.d_tag())),
        _ => None,
    }
}

fn address_tombstone_of(event: &Event) -> Option<Vec<u8>> {
    match event.kind.class() {
        KindClass::Replaceable => Some(keys::address_tombstone(&event.pubkey, event.kind, "")),
        KindClass::Addressable => Some(keys::address_tombstone(&event.pubkey, event.kind, event.d_tag())),
        _ => None,
    }
}

/// The current version at an address: (id, created_at).
fn decode_address(value: &[u8]) -> Result<(EventId, Timestamp), StoreError> {
    let corrupt = || StoreError::Corrupt("address record".into());
    let id: [u8; 32] = value.get(..32).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
    let at: [u8; 8] = value.get(32..40).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
    Ok((EventId(id), Timestamp(u64::from_be_bytes(at))))
}

fn encode_address(id: &EventId, at: Timestamp) -> Vec<u8> {
    let mut v = id.0.to_vec();
    v.extend_from_slice(&at.0.to_be_bytes());
    v
}

fn read_u64(value: &IVec) -> u64 {
    value.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0)
}

/// Removes a stored event and everything that points at it into `batch`. Returns the event.
fn remove_into(tree: &Tree, batch: &mut Batch, id: &EventId) -> Result<Option<Event>, StoreError> {
    let Some(value) = tree.get(keys::event(id))? else { return Ok(None) };
    let (expiration, json) = split_value(&value)?;
    let event = parse_stored(json)?;
    batch.remove(keys::event(id));
    for key in index_keys(&event) {
        batch.remove(key);
    }
    if expiration != 0 {
        batch.remove(keys::expiry(Timestamp(expiration), id));
    }
    if let Some(address) = address_of(&event)
        && let Some(current) = tree.get(&address)?
        && decode_address(&current)?.0 == *id
    {
        batch.remove(address);
    }
    Ok(Some(event))
}

fn put(tree: &Tree, verified: &VerifiedEvent) -> Result<PutOutcome, StoreError> {
    let event = verified.event();
    if tree.contains_key(keys::event(&event.id))? {
        return Ok(PutOutcome::Duplicate);
    }
    if let Some(deleter) = tree.get(keys::tombstone(&event.id))?
        && deleter.as_ref() == event.pubkey.0
    {
        return Ok(PutOutcome::Deleted);
    }
    let mut batch = Batch::default();
    if let Some(address) = address_of(event) {
        if let Some(tombstone_key) = address_tombstone_of(event)
            && let Some(deleted_at) = tree.get(tombstone_key)?
            && event.created_at.0 <= read_u64(&deleted_at)
        {
            return Ok(PutOutcome::Deleted);
        }
        if let Some(current) = tree.get(&address)? {
            let (old_id, old_at) = decode_address(&current)?;
            // Newest wins; at equal created_at the lowest id wins.
            if (std::cmp::Reverse(old_at), old_id) < (std::cmp::Reverse(event.created_at), event.id) {
                return Ok(PutOutcome::Superseded);
            }
            remove_into(tree, &mut batch, &old_id)?;
        }
        batch.insert(address, encode_address(&event.id, event.created_at));
    }
    let json = event.to_json();
    let expiration = event.expiration().map_or(0, |t| t.0);
    let mut value = Vec::with_capacity(8 + json.len());
    value.extend_from_slice(&expiration.to_be_bytes());
    value.extend_from_slice(json.as_bytes());
    batch.insert(keys::event(&event.id), value);
    for key in index_keys(event) {
        batch.insert(key, &[]);
    }
    if expiration != 0 {
        batch.insert(keys::expiry(Timestamp(expiration), &event.id), &[]);
    }
    if event.kind == Kind::DELETION {
        delete_targets(tree, &mut batch, event)?;
    }
    tree.apply_batch(batch)?;
    Ok(PutOutcome::Stored(raw_json(json.as_bytes())?))
}

/// NIP-09: removes the `e` and `a` targets of a deletion request by the same author and records
/// tombstones so they cannot come back.
fn delete_targets(tree: &Tree, batch: &mut Batch, deletion: &Event) -> Result<(), StoreError> {
    let author = deletion.pubkey;
    for value in deletion.tag_values("e") {
        let Some(id) = EventId::from_hex(value) else { continue };
        if let Some(stored) = tree.get(keys::event(&id))? {
            let target = parse_stored(split_value(&stored)?.1)?;
            // Only the author's own events; a deletion cannot delete a deletion.
            if target.pubkey != author || target.kind == Kind::DELETION {
                continue;
            }
            remove_into(tree, batch, &id)?;
        }
        batch.insert(keys::tombstone(&id), &author.0);
    }
    for value in deletion.tag_values("a") {
        let Some((kind, pubkey, d)) = parse_address(value) else { continue };
        if pubkey != author {
            continue;
        }
        let tombstone_key = keys::address_tombstone(&pubkey, kind, d);
        let previous = tree.get(&tombstone_key)?.map_or(0, |v| read_u64(&v));
        batch.insert(tombstone_key, &previous.max(deletion.created_at.0).to_be_bytes());
        let address = keys::address(&pubkey, kind, d);
        if let Some(current) = tree.get(&address)? {
            let (id, at) = decode_address(&current)?;
            if at <= deletion.created_at {
                remove_into(tree, batch, &id)?;
            }
        }
    }
    Ok(())
}

/// `<kind>:<pubkey hex>:<d>`
fn parse_address(value: &str) -> Option<(Kind, PubKey, &str)> {
    let mut parts = value.splitn(3, ':');
    let kind = parts.next()?.parse::<u16>().ok()?;
    let pubkey = PubKey::from_hex(parts.next()?)?;
    let d = parts.next().unwrap_or("");
    Some((Kind(kind), pubkey, d))
}

fn remove(tree: &Tree, id: &EventId) -> Result<bool, StoreError> {
    let mut batch = Batch::default();
    let removed = remove_into(tree, &mut batch, id)?.is_some();
    tree.apply_batch(batch)?;
    Ok(removed)
}

fn sweep(tree: &Tree, now: Timestamp) -> Result<usize, StoreError> {
    let start = vec![keys::EXPIRY];
    let end = keys::expiry(now, &EventId([0xff; 32]));
    let mut batch = Batch::default();
    let mut removed = 0;
    for item in tree.range(start..=end) {
        let (key, _) = item?;
        let id: [u8; 32] =
            key[key.len().saturating_sub(32)..].try_into().map_err(|_| StoreError::Corrupt("expiry key".into()))?;
        batch.remove(key);
        if remove_into(tree, &mut batch, &EventId(id))?.is_some() {
            removed += 1;
        }
    }
    tree.apply_batch(batch)?;
    Ok(removed)
}
