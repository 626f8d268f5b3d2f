//! What a write changes: the NIP-01 (duplicates, replaceable and addressable versions), NIP-09
//! (deletions and tombstones) and NIP-40 (expiry sweeps) rules.
//!
//! Owns deciding, over a group's [`Pending`] overlay, what one put, removal or sweep does to the
//! catalogue, the log and the index. Pure over the overlay (no I/O of its own beyond reading
//! through it), so the writer and the crash replay decide the same way, and unit-tested below.

use sled::IVec;

use super::pending::{Pending, pending_get, pending_insert, pending_remove};
use crate::protocol::private::wrap_recipient;
use crate::protocol::{Event, EventId, Kind, KindClass, PubKey, Timestamp};
use crate::search::Change;
use crate::store::contract::{Mark, PutOutcome};
use crate::store::embedded::index::{self, IndexOp};
use crate::store::error::StoreError;
use crate::store::format::log::FRAME_HEADER;
use crate::store::format::{Serial, keys, record};

pub(crate) fn address_of(event: &Event) -> Option<Vec<u8>> {
    match event.kind.class() {
        KindClass::Replaceable => Some(keys::address(&event.pubkey, event.kind, "")),
        KindClass::Addressable => Some(keys::address(&event.pubkey, event.kind, event.d_tag())),
        _ => None,
    }
}

pub(crate) fn address_tombstone_of(event: &Event) -> Option<Vec<u8>> {
    match event.kind.class() {
        KindClass::Replaceable => Some(keys::address_tombstone(&event.pubkey, event.kind, "")),
        KindClass::Addressable => Some(keys::address_tombstone(&event.pubkey, event.kind, event.d_tag())),
        _ => None,
    }
}

/// The current version at an address: (id, created_at).
pub(crate) fn decode_address(value: &[u8]) -> Result<(EventId, Timestamp), StoreError> {
    let corrupt = || StoreError::Corrupt("address record".into());
    let id: [u8; 32] = value.get(..32).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
    let at: [u8; 8] = value.get(32..40).ok_or_else(corrupt)?.try_into().map_err(|_| corrupt())?;
    Ok((EventId(id), Timestamp(u64::from_be_bytes(at))))
}

pub(crate) fn encode_address(id: &EventId, at: Timestamp) -> Vec<u8> {
    let mut v = id.0.to_vec();
    v.extend_from_slice(&at.0.to_be_bytes());
    v
}

pub(crate) fn read_u64(value: &IVec) -> u64 {
    value.as_ref().try_into().map(u64::from_be_bytes).unwrap_or(0)
}

/// Removes a stored event and everything that points at it. Returns the event.
pub(crate) fn remove_into(p: &mut Pending, id: &EventId) -> Result<Option<Event>, StoreError> {
    let Some(serial) = pending_get(p, id)? else { return Ok(None) };
    pending_remove(p, id)?;
    // The record stays in the log, unreachable.
    let stored = p.record(serial)?;
    let event = record::decode(&stored)?;
    if let Some(expiration) = event.expiration() {
        p.remove(keys::expiry(expiration, id));
    }
    if let Some(address) = address_of(&event)
        && let Some(current) = p.get(&address)?
        && decode_address(&current)?.0 == *id
    {
        p.remove(address);
    }
    p.search_change(event.kind, || Change::Remove(*id));
    let header = record::header(&stored)?;
    // An index segment lists it (segments never change, so the removal is kept beside them), or
    // its record is in the log's tail, which a start after a crash reads back: either way the
    // removal is recorded, so neither needs the catalogue to tell.
    let frame = FRAME_HEADER as u32 + header.len;
    p.insert(keys::removed(serial), frame.to_be_bytes());
    p.op_index.push(IndexOp::Remove(serial, header.len, index::keys_of(&header, &event.tags)));
    Ok(Some(event))
}

/// Stores an event (verified by the caller) unless it is a duplicate, superseded or deleted.
/// Its record goes into a new log frame, or, when replaying, is the frame at `replayed`.
pub(crate) fn put(p: &mut Pending, event: &Event, replayed: Option<Serial>) -> Result<PutOutcome, StoreError> {
    if pending_get(p, &event.id)?.is_some() {
        return Ok(PutOutcome::Duplicate);
    }
    if let Some(deleters) = p.get(&keys::tombstone(&event.id))? {
        let recipient = wrap_recipient(&event.tags, event.kind);
        if deleters.chunks(32).any(|d| d == event.pubkey.0 || recipient.is_some_and(|r| d == r.0)) {
            return Ok(PutOutcome::Deleted);
        }
    }
    if let Some(address) = address_of(event) {
        if let Some(tombstone_key) = address_tombstone_of(event)
            && let Some(deleted_at) = p.get(&tombstone_key)?
            && event.created_at.0 <= read_u64(&deleted_at)
        {
            return Ok(PutOutcome::Deleted);
        }
        if let Some(current) = p.get(&address)? {
            let (old_id, old_at) = decode_address(&current)?;
            // Newest wins; at equal created_at the lowest id wins.
            if (std::cmp::Reverse(old_at), old_id) < (std::cmp::Reverse(event.created_at), event.id) {
                return Ok(PutOutcome::Superseded);
            }
            remove_into(p, &old_id)?;
        }
        p.insert(address, encode_address(&event.id, event.created_at));
    }
    let stored = record::encode(event);
    let header = record::header(&stored)?;
    if header.expiration != 0 {
        p.insert(keys::expiry(Timestamp(header.expiration), &event.id), []);
    }
    let serial = match replayed {
        Some(serial) => serial,
        None => p.push_frame(&stored),
    };
    pending_insert(p, &event.id, serial)?;
    p.op_index.push(IndexOp::Insert(serial, header, index::keys_of(&header, &event.tags)));
    p.search_change(event.kind, || Change::Add(event.clone()));
    if event.kind == Kind::DELETION {
        delete_targets(p, event)?;
    }
    // The writer gives it the mark of the group that makes it visible.
    Ok(PutOutcome::Stored(Mark::default()))
}

/// NIP-09: removes the `e` and `a` targets of a deletion request by the same author (or, for a
/// gift wrap, its one recipient) and records tombstones so they cannot come back.
fn delete_targets(p: &mut Pending, deletion: &Event) -> Result<(), StoreError> {
    let author = deletion.pubkey;
    for value in deletion.tag_values("e") {
        let Some(id) = EventId::from_hex(value) else { continue };
        if let Some(serial) = pending_get(p, &id)? {
            let stored = p.record(serial)?;
            let target = record::header(&stored)?;
            // Only the author's own events (a wrap's recipient's); a deletion cannot delete a
            // deletion.
            let recipient = if target.kind == Kind::GIFT_WRAP {
                wrap_recipient(&record::tags(&stored)?, target.kind)
            } else {
                None
            };
            if (target.pubkey != author && recipient != Some(author)) || target.kind == Kind::DELETION {
                continue;
            }
            remove_into(p, &id)?;
        }
        // Every key that asked is kept (32 bytes each): another key's request for the same id
        // must not lift its author's.
        let key = keys::tombstone(&id);
        let mut deleters = p.get(&key)?.map(|v| v.to_vec()).unwrap_or_default();
        if !deleters.chunks(32).any(|d| d == author.0) {
            deleters.extend_from_slice(&author.0);
            p.insert(key, deleters);
        }
    }
    for value in deletion.tag_values("a") {
        let Some((kind, pubkey, d)) = parse_address(value) else { continue };
        if pubkey != author {
            continue;
        }
        let tombstone_key = keys::address_tombstone(&pubkey, kind, d);
        let previous = p.get(&tombstone_key)?.map_or(0, |v| read_u64(&v));
        p.insert(tombstone_key, previous.max(deletion.created_at.0).to_be_bytes());
        let address = keys::address(&pubkey, kind, d);
        if let Some(current) = p.get(&address)? {
            let (id, at) = decode_address(&current)?;
            if at <= deletion.created_at {
                remove_into(p, &id)?;
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

/// Deletes every event whose expiration is at or before `now`. Reads the tree directly: the
/// caller applies the group first.
pub(crate) fn sweep(p: &mut Pending, now: Timestamp) -> Result<usize, StoreError> {
    let start = vec![keys::EXPIRY];
    let end = keys::expiry(now, &EventId([0xff; 32]));
    let mut removed = 0;
    let tree = p.tree;
    for item in tree.range(start..=end) {
        let (key, _) = item?;
        let id: [u8; 32] =
            key[key.len().saturating_sub(32)..].try_into().map_err(|_| StoreError::Corrupt("expiry key".into()))?;
        p.remove(key.to_vec());
        if remove_into(p, &EventId(id))?.is_some() {
            removed += 1;
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Keys;
    use crate::store::format::log::Log;

    fn tag(name: &str, value: &str) -> Vec<String> {
        vec![name.to_string(), value.to_string()]
    }

    /// A group over an empty catalogue; `with` runs the writes, then the group is applied.
    fn group<T>(tree: &sled::Tree, log: &Log, with: impl FnOnce(&mut Pending) -> T) -> T {
        let mut p = Pending::new(tree, log, crate::store::embedded::catalogue::Places::default());
        let out = with(&mut p);
        if !p.is_empty() {
            p.apply().unwrap();
        }
        out
    }

    fn store() -> (sled::Db, sled::Tree, Log) {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        (db, tree, Log::memory())
    }

    fn put_one(p: &mut Pending, e: &Event) -> PutOutcome {
        let outcome = put(p, e, None);
        p.finish(outcome).unwrap()
    }

    fn stored(tree: &sled::Tree, e: &Event) -> bool {
        crate::store::embedded::catalogue::contains(tree, &e.id).unwrap()
    }

    #[test]
    fn a_second_put_of_an_id_is_a_duplicate_within_a_group_and_after_it() {
        let (_db, tree, log) = store();
        let e = Keys::test(1).sign(Timestamp(10), Kind(1), vec![], "hi");
        let outcomes = group(&tree, &log, |p| [put_one(p, &e), put_one(p, &e)]);
        assert!(matches!(outcomes, [PutOutcome::Stored(_), PutOutcome::Duplicate]));
        assert!(matches!(group(&tree, &log, |p| put_one(p, &e)), PutOutcome::Duplicate));
        assert!(stored(&tree, &e));
    }

    #[test]
    fn the_newest_replaceable_version_wins_and_ties_go_to_the_lowest_id() {
        let (_db, tree, log) = store();
        let k = Keys::test(2);
        let old = k.sign(Timestamp(10), Kind(0), vec![], "old");
        let new = k.sign(Timestamp(20), Kind(0), vec![], "new");
        group(&tree, &log, |p| put_one(p, &old));
        assert!(matches!(group(&tree, &log, |p| put_one(p, &new)), PutOutcome::Stored(_)));
        assert!(!stored(&tree, &old), "the replaced version is gone");
        let older = k.sign(Timestamp(15), Kind(0), vec![], "older");
        assert!(matches!(group(&tree, &log, |p| put_one(p, &older)), PutOutcome::Superseded));
        let (a, b) = (k.sign(Timestamp(20), Kind(0), vec![], "a"), k.sign(Timestamp(20), Kind(0), vec![], "b"));
        group(&tree, &log, |p| [put_one(p, &a), put_one(p, &b)]);
        // Of the three at created_at 20, exactly the lowest id is stored.
        let mut all = [&new, &a, &b];
        all.sort_by_key(|e| e.id);
        assert!(stored(&tree, all[0]));
        assert!(!stored(&tree, all[1]) && !stored(&tree, all[2]));
    }

    #[test]
    fn a_deletion_removes_its_authors_targets_and_keeps_them_out() {
        let (_db, tree, log) = store();
        let (alice, bob) = (Keys::test(3), Keys::test(4));
        let mine = alice.sign(Timestamp(10), Kind(1), vec![], "mine");
        let theirs = bob.sign(Timestamp(10), Kind(1), vec![], "theirs");
        group(&tree, &log, |p| [put_one(p, &mine), put_one(p, &theirs)]);
        let tags = vec![tag("e", &mine.id.to_hex()), tag("e", &theirs.id.to_hex())];
        let deletion = alice.sign(Timestamp(11), Kind::DELETION, tags, "");
        group(&tree, &log, |p| put_one(p, &deletion));
        assert!(!stored(&tree, &mine));
        assert!(stored(&tree, &theirs), "another author's event is not deleted");
        assert!(stored(&tree, &deletion), "the deletion itself is stored");
        assert!(matches!(group(&tree, &log, |p| put_one(p, &mine)), PutOutcome::Deleted));
    }

    #[test]
    fn another_keys_deletion_of_a_deleted_id_does_not_lift_its_authors_tombstone() {
        let (_db, tree, log) = store();
        let (alice, mallory) = (Keys::test(3), Keys::test(4));
        let mine = alice.sign(Timestamp(10), Kind(1), vec![], "mine");
        group(&tree, &log, |p| put_one(p, &mine));
        let target = || vec![tag("e", &mine.id.to_hex())];
        group(&tree, &log, |p| put_one(p, &alice.sign(Timestamp(11), Kind::DELETION, target(), "")));
        group(&tree, &log, |p| put_one(p, &mallory.sign(Timestamp(12), Kind::DELETION, target(), "")));
        assert!(matches!(group(&tree, &log, |p| put_one(p, &mine)), PutOutcome::Deleted));
    }

    #[test]
    fn an_address_deletion_removes_versions_up_to_its_time_and_accepts_newer_ones() {
        let (_db, tree, log) = store();
        let k = Keys::test(5);
        let d = || vec![tag("d", "x")];
        let v1 = k.sign(Timestamp(10), Kind(30000), d(), "v1");
        group(&tree, &log, |p| put_one(p, &v1));
        let address = format!("30000:{}:x", k.public_key().to_hex());
        let deletion = k.sign(Timestamp(20), Kind::DELETION, vec![tag("a", &address)], "");
        group(&tree, &log, |p| put_one(p, &deletion));
        assert!(!stored(&tree, &v1));
        let v_old = k.sign(Timestamp(15), Kind(30000), d(), "before the deletion");
        assert!(matches!(group(&tree, &log, |p| put_one(p, &v_old)), PutOutcome::Deleted));
        let v_new = k.sign(Timestamp(25), Kind(30000), d(), "after it");
        assert!(matches!(group(&tree, &log, |p| put_one(p, &v_new)), PutOutcome::Stored(_)));
    }

    #[test]
    fn a_sweep_removes_what_expired_and_only_that() {
        let (_db, tree, log) = store();
        let k = Keys::test(6);
        let soon = k.sign(Timestamp(10), Kind(1), vec![tag("expiration", "100")], "soon");
        let later = k.sign(Timestamp(10), Kind(1), vec![tag("expiration", "300")], "later");
        group(&tree, &log, |p| [put_one(p, &soon), put_one(p, &later)]);
        let removed = group(&tree, &log, |p| {
            let outcome = sweep(p, Timestamp(200));
            p.finish(outcome).unwrap()
        });
        assert_eq!(removed, 1);
        assert!(!stored(&tree, &soon));
        assert!(stored(&tree, &later));
    }

    #[test]
    fn a_failed_write_leaves_nothing_in_its_group() {
        let (_db, tree, log) = store();
        let e = Keys::test(7).sign(Timestamp(10), Kind(1), vec![], "x");
        group(&tree, &log, |p| {
            let outcome = put(p, &e, None).and_then(|_| Err::<PutOutcome, _>(StoreError::Corrupt("injected".into())));
            assert!(p.finish(outcome).is_err());
            assert!(p.is_empty());
        });
        assert!(!stored(&tree, &e));
    }
}
