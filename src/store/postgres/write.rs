//! The PostgreSQL backend's writes: the NIP-01, NIP-09 and NIP-40 rules as transactions.
//!
//! Owns [`put`], [`remove`] and [`sweep`], each one transaction that commits before it returns
//! (the connection runs with `synchronous_commit = on`, so a commit is on the server's disk). The
//! same rules as the embedded backend's `write::apply`, decided the same way whatever node
//! writes: a put is one call of the schema's `hearth_put`, which first takes the advisory locks
//! of the event ids and addresses it reads or changes (its own id and address; a deletion's
//! targets), in ascending order, so two nodes that write the same address, or an event and its
//! deletion, at once are serialised, and the newest version wins everywhere. Rust decides what
//! needs the event's tags (its address, its tag keys, a gift wrap's recipient, a deletion's
//! targets); the function decides against what is stored. A deadlock is retried. And the
//! statements a batch is made of (`batch`): [`PUT`] with [`PutArgs`] for one put, and
//! [`PUT_PLAIN`] with [`PlainArgs`] for a run of plain events ([`is_plain`]: a regular kind, not a
//! deletion), which take only their own ids' locks.

use deadpool_postgres::Object;

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

/// The statement of one put: `hearth_put` (`schema`), the NIP-01/09 rules against what is stored.
pub(super) const PUT: &str =
    "SELECT outcome, removed FROM hearth_put($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)";

/// The arguments of [`PUT`] for one event: what needs its tags is decided here (its address, its
/// tag keys, a gift wrap's recipient, a deletion's targets and the locks they take).
pub(super) struct PutArgs {
    id: Vec<u8>,
    pubkey: Vec<u8>,
    kind: i32,
    created_at: i64,
    expiration: Option<i64>,
    address: Option<Vec<u8>>,
    json: String,
    recipient: Option<Vec<u8>>,
    names: Vec<String>,
    values: Vec<Vec<u8>>,
    locks: Vec<i64>,
    e_targets: Vec<Vec<u8>>,
    a_targets: Vec<Vec<u8>>,
}

impl PutArgs {
    /// The arguments for `event`.
    pub(super) fn of(event: &Event) -> Result<PutArgs, PgError> {
        let address = address_of(event);
        let mut locks = vec![lock_key(&event.id.0)];
        locks.extend(address.as_deref().map(lock_key));
        let (mut e_targets, mut a_targets) = (Vec::new(), Vec::new());
        if event.kind == Kind::DELETION {
            for id in event.tag_values("e").filter_map(EventId::from_hex) {
                locks.push(lock_key(&id.0));
                e_targets.push(id.0.to_vec());
            }
            // Only the author's own addresses.
            for (kind, pubkey, d) in event.tag_values("a").filter_map(parse_address) {
                let key = address_key(&pubkey, kind, d);
                locks.push(lock_key(&key));
                if pubkey == event.pubkey {
                    a_targets.push(key);
                }
            }
        }
        locks.sort_unstable();
        locks.dedup();
        let (mut names, mut values) = (Vec::new(), Vec::new());
        for tag in &event.tags {
            if let (Some(name), Some(value)) = (tag.first(), tag.get(1))
                && name.chars().count() == 1
            {
                names.push(name.clone());
                values.push(tag_key(value));
            }
        }
        Ok(PutArgs {
            json: event.to_json().map_err(|e| PgError::Encode(e.to_string()))?,
            recipient: wrap_recipient(&event.tags, event.kind).map(|r| r.0.to_vec()),
            id: event.id.0.to_vec(),
            pubkey: event.pubkey.0.to_vec(),
            kind: i32::from(event.kind.0),
            created_at: seconds(event.created_at),
            expiration: event.expiration().map(seconds),
            address,
            names,
            values,
            locks,
            e_targets,
            a_targets,
        })
    }

    /// The statement's parameters, in order.
    pub(super) fn params(&self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 13] {
        [
            &self.id,
            &self.pubkey,
            &self.kind,
            &self.created_at,
            &self.expiration,
            &self.address,
            &self.json,
            &self.recipient,
            &self.names,
            &self.values,
            &self.locks,
            &self.e_targets,
            &self.a_targets,
        ]
    }
}

/// True for an event whose put touches nothing but itself: a regular kind that is not a
/// deletion (no address to supersede, no target to remove). A run of them is stored by one
/// [`PUT_PLAIN`].
pub(super) fn is_plain(event: &Event) -> bool {
    event.kind.class() == KindClass::Regular && event.kind != Kind::DELETION
}

/// The statement of a run of plain events (`is_plain`, distinct ids): `hearth_put_plain`
/// (`schema`), one outcome per event, in order.
pub(super) const PUT_PLAIN: &str = "SELECT hearth_put_plain($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)";

/// The arguments of [`PUT_PLAIN`]: each column of the run as an array, the tags flattened with
/// the (1-based) position of their event beside them.
#[derive(Default)]
pub(super) struct PlainArgs {
    ids: Vec<Vec<u8>>,
    pubkeys: Vec<Vec<u8>>,
    kinds: Vec<i32>,
    created: Vec<i64>,
    expirations: Vec<Option<i64>>,
    jsons: Vec<String>,
    recipients: Vec<Option<Vec<u8>>>,
    locks: Vec<i64>,
    tag_of: Vec<i64>,
    tag_names: Vec<String>,
    tag_values: Vec<Vec<u8>>,
}

impl PlainArgs {
    /// Adds one event's arguments (a plain one's: no address, no targets) to the run.
    pub(super) fn push(&mut self, args: PutArgs) {
        let n = i64::try_from(self.ids.len() + 1).unwrap_or(i64::MAX);
        self.tag_of.extend(std::iter::repeat_n(n, args.names.len()));
        self.tag_names.extend(args.names);
        self.tag_values.extend(args.values);
        self.locks.extend(args.locks);
        self.ids.push(args.id);
        self.pubkeys.push(args.pubkey);
        self.kinds.push(args.kind);
        self.created.push(args.created_at);
        self.expirations.push(args.expiration);
        self.jsons.push(args.json);
        self.recipients.push(args.recipient);
    }

    /// How many events the run holds.
    pub(super) fn len(&self) -> usize {
        self.ids.len()
    }

    /// The statement's parameters, in order; the locks sorted, as every put takes them.
    pub(super) fn params(&mut self) -> [&(dyn tokio_postgres::types::ToSql + Sync); 11] {
        self.locks.sort_unstable();
        self.locks.dedup();
        [
            &self.ids,
            &self.pubkeys,
            &self.kinds,
            &self.created,
            &self.expirations,
            &self.jsons,
            &self.recipients,
            &self.locks,
            &self.tag_of,
            &self.tag_names,
            &self.tag_values,
        ]
    }
}

/// What `hearth_put_plain` answered for one event of its run, and the search index's changes.
pub(super) fn plain_outcome(answer: &str, event: &Event) -> Result<(Put, Vec<Change>), PgError> {
    match answer {
        "stored" => Ok((Put::Stored, vec![Change::Add(event.clone())])),
        "duplicate" => Ok((Put::Duplicate, Vec::new())),
        "deleted" => Ok((Put::Deleted, Vec::new())),
        other => Err(PgError::Encode(format!("hearth_put_plain answered {other:?}"))),
    }
}

/// Stores `event` unless it is a duplicate, superseded or deleted; a deletion removes its
/// targets. The search index's changes come back with the outcome. One statement, [`PUT`], in
/// its own transaction (a lost deadlock is run again): what a batch falls back to (`batch`).
pub(super) async fn put(client: &mut Object, event: &Event) -> Result<(Put, Vec<Change>), PgError> {
    let args = PutArgs::of(event)?;
    let mut attempt = 0;
    let row = loop {
        attempt += 1;
        match client.query_one(PUT, &args.params()).await.map_err(PgError::from) {
            Err(e) if e.is_retryable() && attempt < ATTEMPTS => continue,
            other => break other?,
        }
    };
    outcome(&row, event)
}

/// What `hearth_put` answered for `event`, and the search index's changes.
pub(super) fn outcome(row: &tokio_postgres::Row, event: &Event) -> Result<(Put, Vec<Change>), PgError> {
    let (outcome, removed): (String, Vec<Vec<u8>>) = (row.try_get(0)?, row.try_get(1)?);
    let mut changes: Vec<Change> = removed.iter().filter_map(|id| event_id(id)).map(Change::Remove).collect();
    let put = match outcome.as_str() {
        "stored" => {
            changes.push(Change::Add(event.clone()));
            Put::Stored
        }
        "duplicate" => Put::Duplicate,
        "superseded" => Put::Superseded,
        "deleted" => Put::Deleted,
        other => return Err(PgError::Encode(format!("hearth_put answered {other:?}"))),
    };
    Ok((put, changes))
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
