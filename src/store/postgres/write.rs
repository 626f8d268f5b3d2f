//! The PostgreSQL backend's writes: the NIP-01, NIP-09 and NIP-40 rules as transactions.
//!
//! Owns [`put`], [`remove`] and [`sweep`], each one transaction that commits before it returns
//! (the connection runs with `synchronous_commit = on`, so a commit is on the server's disk). The
//! same rules as the embedded backend's `write::apply`, decided the same way whatever node
//! writes: every transaction first takes the advisory locks of the event ids and addresses it
//! reads or changes (its own id and address; a deletion's targets), in ascending order, so two
//! nodes that write the same address, or an event and its deletion, at once are serialised, and
//! the newest version wins everywhere. A lock wait that ends in a deadlock or a serialisation
//! failure is retried.

use deadpool_postgres::Object;
use tokio_postgres::Transaction;

use super::error::PgError;
use super::sql::{address_key, lock_key, seconds, tag_key};
use crate::protocol::private::wrap_recipient;
use crate::protocol::{Event, EventId, Kind, KindClass, PubKey, Timestamp};
use crate::search::Change;

/// What a put decided (the caller gives a stored event its mark).
#[derive(Debug)]
pub(super) enum Put {
    Stored,
    Duplicate,
    Superseded,
    Deleted,
}

/// How often a transaction that lost a deadlock or a serialisation is run again.
const ATTEMPTS: usize = 5;

/// The address of a replaceable or addressable event.
fn address_of(event: &Event) -> Option<Vec<u8>> {
    match event.kind.class() {
        KindClass::Replaceable => Some(address_key(&event.pubkey, event.kind, "")),
        KindClass::Addressable => Some(address_key(&event.pubkey, event.kind, event.d_tag())),
        _ => None,
    }
}

/// `<kind>:<pubkey hex>:<d>`
fn parse_address(value: &str) -> Option<(Kind, PubKey, &str)> {
    let mut parts = value.splitn(3, ':');
    let kind = parts.next()?.parse::<u16>().ok()?;
    let pubkey = PubKey::from_hex(parts.next()?)?;
    Some((Kind(kind), pubkey, parts.next().unwrap_or("")))
}

/// Runs `work` in a transaction, again when it lost a deadlock or a serialisation.
macro_rules! retried {
    ($client:expr, |$tx:ident| $work:expr) => {{
        let mut attempt = 0;
        loop {
            attempt += 1;
            let $tx = $client.transaction().await?;
            let result = $work;
            let result = match result {
                Ok(value) => $tx.commit().await.map(|()| value).map_err(PgError::from),
                Err(e) => Err(e),
            };
            match result {
                Err(e) if e.is_retryable() && attempt < ATTEMPTS => continue,
                other => break other,
            }
        }
    }};
}

/// Stores `event` unless it is a duplicate, superseded or deleted; a deletion removes its
/// targets. The search index's changes come back with the outcome.
pub(super) async fn put(client: &mut Object, event: &Event) -> Result<(Put, Vec<Change>), PgError> {
    let address = address_of(event);
    let mut locks = vec![lock_key(&event.id.0)];
    locks.extend(address.as_deref().map(lock_key));
    if event.kind == Kind::DELETION {
        locks.extend(event.tag_values("e").filter_map(EventId::from_hex).map(|id| lock_key(&id.0)));
        locks.extend(event.tag_values("a").filter_map(parse_address).map(|(k, p, d)| lock_key(&address_key(&p, k, d))));
    }
    locks.sort_unstable();
    locks.dedup();
    let json = event.to_json().map_err(|e| PgError::Encode(e.to_string()))?;
    retried!(client, |tx| put_in(&tx, event, address.as_deref(), &locks, &json).await)
}

async fn put_in(
    tx: &Transaction<'_>,
    event: &Event,
    address: Option<&[u8]>,
    locks: &[i64],
    json: &str,
) -> Result<(Put, Vec<Change>), PgError> {
    for lock in locks {
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[lock]).await?;
    }
    let id = event.id.0.to_vec();
    if tx.query_opt("SELECT 1 FROM events WHERE id = $1", &[&id]).await?.is_some() {
        return Ok((Put::Duplicate, Vec::new()));
    }
    let mut deleters = vec![event.pubkey.0.to_vec()];
    deleters.extend(wrap_recipient(&event.tags, event.kind).map(|r| r.0.to_vec()));
    let tombstoned = "SELECT 1 FROM tombstones WHERE id = $1 AND deleter = ANY($2)";
    if tx.query_opt(tombstoned, &[&id, &deleters]).await?.is_some() {
        return Ok((Put::Deleted, Vec::new()));
    }
    let created_at = seconds(event.created_at);
    let mut changes = Vec::new();
    if let Some(address) = address {
        let deleted = tx.query_opt("SELECT deleted_at FROM address_tombstones WHERE address = $1", &[&address]).await?;
        if deleted.is_some_and(|row| created_at <= row.get::<_, i64>(0)) {
            return Ok((Put::Deleted, Vec::new()));
        }
        let current = tx.query_opt("SELECT id, created_at FROM events WHERE address = $1", &[&address]).await?;
        if let Some(row) = current {
            let (old_id, old_at): (Vec<u8>, i64) = (row.get(0), row.get(1));
            // Newest wins; at equal created_at the lowest id wins.
            if (std::cmp::Reverse(old_at), old_id.as_slice()) < (std::cmp::Reverse(created_at), id.as_slice()) {
                return Ok((Put::Superseded, Vec::new()));
            }
            tx.execute("DELETE FROM events WHERE id = $1", &[&old_id]).await?;
            changes.extend(event_id(&old_id).map(Change::Remove));
        }
    }
    let expiration = event.expiration().map(seconds);
    let row = tx
        .query_one(
            "INSERT INTO events (id, pubkey, kind, created_at, expiration, address, json) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING seq",
            &[&id, &event.pubkey.0.to_vec(), &i32::from(event.kind.0), &created_at, &expiration, &address, &json],
        )
        .await?;
    let seq: i64 = row.get(0);
    let (mut names, mut values) = (Vec::new(), Vec::new());
    for tag in &event.tags {
        if let (Some(name), Some(value)) = (tag.first(), tag.get(1))
            && name.chars().count() == 1
        {
            names.push(name.clone());
            values.push(tag_key(value));
        }
    }
    if !names.is_empty() {
        tx.execute(
            "INSERT INTO tags (seq, name, value, created_at, id) \
             SELECT $1, n, v, $4, $5 FROM unnest($2::text[], $3::bytea[]) AS x(n, v) ON CONFLICT DO NOTHING",
            &[&seq, &names, &values, &created_at, &id],
        )
        .await?;
    }
    changes.push(Change::Add(event.clone()));
    if event.kind == Kind::DELETION {
        delete_targets(tx, event, &mut changes).await?;
    }
    Ok((Put::Stored, changes))
}

/// NIP-09: removes the `e` and `a` targets of a deletion by the same author (a gift wrap's, by
/// its one recipient) and records tombstones so that they cannot come back.
async fn delete_targets(tx: &Transaction<'_>, deletion: &Event, changes: &mut Vec<Change>) -> Result<(), PgError> {
    let author = deletion.pubkey.0.to_vec();
    for id in deletion.tag_values("e").filter_map(EventId::from_hex) {
        let target = id.0.to_vec();
        if let Some(row) = tx.query_opt("SELECT kind, pubkey, json FROM events WHERE id = $1", &[&target]).await? {
            let (kind, pubkey, json): (i32, Vec<u8>, String) = (row.get(0), row.get(1), row.get(2));
            let kind = Kind(u16::try_from(kind).unwrap_or(0));
            let recipient = match kind == Kind::GIFT_WRAP {
                true => Event::from_json(&json).ok().and_then(|e| wrap_recipient(&e.tags, e.kind)),
                false => None,
            };
            // Only the author's own events (a wrap's recipient's); a deletion cannot delete a
            // deletion.
            if (pubkey == author || recipient.is_some_and(|r| r.0.as_slice() == author.as_slice()))
                && kind != Kind::DELETION
            {
                tx.execute("DELETE FROM events WHERE id = $1", &[&target]).await?;
                changes.push(Change::Remove(id));
            }
        }
        tx.execute("INSERT INTO tombstones (id, deleter) VALUES ($1, $2) ON CONFLICT DO NOTHING", &[&target, &author])
            .await?;
    }
    let at = seconds(deletion.created_at);
    for (kind, pubkey, d) in deletion.tag_values("a").filter_map(parse_address) {
        if pubkey != deletion.pubkey {
            continue;
        }
        let address = address_key(&pubkey, kind, d);
        tx.execute(
            "INSERT INTO address_tombstones (address, deleted_at) VALUES ($1, $2) \
             ON CONFLICT (address) DO UPDATE SET deleted_at = GREATEST(address_tombstones.deleted_at, EXCLUDED.deleted_at)",
            &[&address, &at],
        )
        .await?;
        let delete = "DELETE FROM events WHERE address = $1 AND created_at <= $2 RETURNING id";
        for row in tx.query(delete, &[&address, &at]).await? {
            changes.extend(event_id(&row.get::<_, Vec<u8>>(0)).map(Change::Remove));
        }
    }
    Ok(())
}

/// Removes one stored event (moderation); true when it was stored.
pub(super) async fn remove(client: &mut Object, id: &EventId) -> Result<bool, PgError> {
    let removed = client.execute("DELETE FROM events WHERE id = $1", &[&id.0.to_vec()]).await?;
    Ok(removed > 0)
}

/// Removes every event whose NIP-40 expiration is at or before `now`; their ids.
pub(super) async fn sweep(client: &mut Object, now: Timestamp) -> Result<Vec<EventId>, PgError> {
    let rows = client.query("DELETE FROM events WHERE expiration <= $1 RETURNING id", &[&seconds(now)]).await?;
    Ok(rows.iter().filter_map(|row| event_id(&row.get::<_, Vec<u8>>(0))).collect())
}

/// An id column as an [`EventId`].
pub(super) fn event_id(bytes: &[u8]) -> Option<EventId> {
    <[u8; 32]>::try_from(bytes).ok().map(EventId)
}
