//! `hearth check`: a read-only audit of a data directory no relay holds.
//!
//! Owns finding what is inconsistent on disk: every frame of the event log up to its committed
//! end against its CRC; every catalogue (`i`) entry against the record it points to; every
//! replaceable or addressable address holding exactly its newest version; and every tombstone
//! honoured. The in-memory indexes are rebuilt from the catalogue and the records at every start,
//! so they have no copy on disk that could disagree.
//!
//! `hearth check --repair` mends what it found: catalogue entries of unreadable or wrong records,
//! older versions beside the newest and deleted events are dropped, every address is pointed at
//! its newest stored version, and a compaction then rewrites the log without the damaged frames.
//!
//! `hearth compact` ([`compact`]) is here too: the other offline command over a directory.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use serde::Serialize;

use super::db::{EVENTS_TREE, flush_durably, open_db};
use super::embedded::catalogue;
use super::embedded::open::open_log;
use super::embedded::write::apply::{address_of, address_tombstone_of, decode_address, encode_address, read_u64};
use super::embedded::write::remap;
use super::error::StoreError;
use super::format::durable::Durable;
use super::format::log::FRAME_HEADER;
use super::format::{Serial, keys, record};
use crate::protocol::{EventId, Timestamp};
use crate::store::contract::Compacted;

/// Compacts the store in `dir`, which no relay may hold (`hearth compact`): opened as a relay
/// would open it (a crashed tail replayed, a stale generation removed), compacted, closed.
pub async fn compact(dir: &Path, cache_capacity_mb: u64) -> Result<Compacted, StoreError> {
    let store = super::Store::open(dir, cache_capacity_mb)?;
    // A compaction cut off after its swap left its remap to this open, which finishes it first
    // (`compact` would refuse while it runs).
    if let Err(e) = store.until_compaction_ends().await {
        store.close(cache_capacity_mb).await?;
        return Err(e);
    }
    let done = store.compact().await;
    store.close(cache_capacity_mb).await?;
    done
}

/// One inconsistency.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "problem", rename_all = "snake_case")]
pub enum Problem {
    /// A frame of the log does not match its CRC (or is not a frame at all).
    CorruptFrame {
        /// Its offset.
        serial: Serial,
        /// What is wrong.
        reason: String,
    },
    /// The log cannot be walked past this offset (a frame header claims a length past the end).
    UnreadableLog {
        /// Where walking stopped.
        serial: Serial,
    },
    /// A catalogue entry points to no readable record.
    UnreadableRecord {
        /// The event id of the entry.
        id: String,
        /// Where it points.
        serial: Serial,
    },
    /// A catalogue entry points to the record of another event.
    WrongRecord {
        /// The event id of the entry.
        id: String,
        /// The id the record holds.
        found: String,
    },
    /// More than one version of a replaceable or addressable event is stored.
    SeveralVersions {
        /// The ids stored at the address.
        ids: Vec<String>,
    },
    /// The address entry names another version than the newest stored one.
    AddressNotNewest {
        /// The version the address names.
        names: String,
        /// The newest stored version.
        newest: String,
    },
    /// An event deleted by its author (NIP-09) is stored.
    DeletedEventStored {
        /// Its id.
        id: String,
    },
}

/// What `check` found.
#[derive(Clone, Debug, Serialize)]
pub struct Checked {
    /// Events in the catalogue.
    pub events: u64,
    /// Frames of the log up to its committed end.
    pub frames: u64,
    /// Everything inconsistent, in the order found.
    pub problems: Vec<Problem>,
}

/// Checks a PostgreSQL store without changing it: every event's JSON decoded and verified
/// against its row, every tombstone honoured (`Store::check_database`). None for the embedded
/// store ([`check`] reads its files).
pub async fn check_database(store: &super::Store) -> Result<Option<Checked>, StoreError> {
    use super::contract::Flaw;
    let Some((events, flaws)) = store.check_database().await? else { return Ok(None) };
    let problems = flaws
        .into_iter()
        .map(|flaw| match flaw {
            Flaw::Unreadable { id, seq, .. } => {
                Problem::UnreadableRecord { id, serial: u64::try_from(seq).unwrap_or(0) }
            }
            Flaw::WrongId { id, found, .. } => Problem::WrongRecord { id, found },
            Flaw::Deleted { id } => Problem::DeletedEventStored { id },
        })
        .collect();
    Ok(Some(Checked { events, frames: events, problems }))
}

/// [`check_database`], then every event it named removed, then a check again.
pub async fn repair_database(store: &super::Store) -> Result<Option<Repaired>, StoreError> {
    let Some(found) = check_database(store).await? else { return Ok(None) };
    for problem in &found.problems {
        let id = match problem {
            Problem::UnreadableRecord { id, .. }
            | Problem::WrongRecord { id, .. }
            | Problem::DeletedEventStored { id } => id,
            _ => continue,
        };
        if let Some(id) = EventId::from_hex(id) {
            store.remove(id).await?;
        }
    }
    let after = check_database(store).await?.unwrap_or_else(|| found.clone());
    Ok(Some(Repaired { found, after }))
}

/// Checks the store in `dir` (which no relay may hold) without changing it.
pub fn check(dir: &Path, cache_capacity_mb: u64) -> Result<Checked, StoreError> {
    let db = open_db(dir, cache_capacity_mb)?;
    let tree = db.open_tree(EVENTS_TREE)?;
    let (log, _) = open_log(dir, &tree)?;
    // A compaction's unfinished remap: old places are read through its moves, as a relay would.
    let (places, _) = remap::load(&tree, Some(dir))?;
    let mut problems = Vec::new();
    let (mut frames, mut intact) = (0u64, HashSet::new());
    let mut at = 0;
    while at < log.end() {
        let Some(len) = log.claimed_len(at).filter(|len| at + FRAME_HEADER + len <= log.end()) else {
            problems.push(Problem::UnreadableLog { serial: at });
            break;
        };
        frames += 1;
        match log.read(at) {
            Ok(_) => {
                intact.insert(at);
            }
            Err(e) => problems.push(Problem::CorruptFrame { serial: at, reason: e.to_string() }),
        }
        at += FRAME_HEADER + len;
    }
    // Stored events by id, and the versions at each address.
    let (mut events, mut stored) = (0u64, HashMap::new());
    let mut versions: HashMap<Vec<u8>, Vec<(Timestamp, EventId)>> = HashMap::new();
    let mut address_tombstones: Vec<(Vec<u8>, Timestamp, EventId)> = Vec::new();
    for entry in catalogue::all(&tree, &places) {
        let (id, serial) = entry?;
        events += 1;
        // Read where the catalogue says, even past a point the walk could not get beyond.
        let readable = if intact.contains(&serial) || at <= serial { log.read(serial).ok() } else { None };
        let Some(bytes) = readable else {
            problems.push(Problem::UnreadableRecord { id: id.to_hex(), serial });
            continue;
        };
        let Ok(event) = record::decode(&bytes) else {
            problems.push(Problem::UnreadableRecord { id: id.to_hex(), serial });
            continue;
        };
        if event.id != id {
            problems.push(Problem::WrongRecord { id: id.to_hex(), found: event.id.to_hex() });
            continue;
        }
        stored.insert(id, event.pubkey);
        if let Some(address) = address_of(&event) {
            versions.entry(address).or_default().push((event.created_at, id));
        }
        if let Some(tombstone) = address_tombstone_of(&event) {
            address_tombstones.push((tombstone, event.created_at, id));
        }
    }
    for (address, mut at_address) in versions {
        // Newest first; ties: the lowest id wins (NIP-01).
        at_address.sort_by_key(|(created_at, id)| (std::cmp::Reverse(*created_at), *id));
        if at_address.len() > 1 {
            problems.push(Problem::SeveralVersions { ids: at_address.iter().map(|(_, id)| id.to_hex()).collect() });
        }
        if let (Some((_, newest)), Some(named)) = (at_address.first(), tree.get(&address)?) {
            let (names, _) = decode_address(&named)?;
            if names != *newest {
                problems.push(Problem::AddressNotNewest { names: names.to_hex(), newest: newest.to_hex() });
            }
        }
    }
    for item in tree.scan_prefix([keys::TOMBSTONE]) {
        let (key, deleter) = item?;
        let id = id_of(&key);
        // A deletion request keeps out its own author's event only: another author's event of
        // that id, stored after the request, is not deleted (NIP-09).
        if stored.get(&id).is_some_and(|author| deleter.chunks(32).any(|d| d == author.0)) {
            problems.push(Problem::DeletedEventStored { id: id.to_hex() });
        }
    }
    // An address deleted up to a time keeps out every version of it up to then.
    for (tombstone, created_at, id) in address_tombstones {
        if let Some(value) = tree.get(&tombstone)?
            && created_at.0 <= read_u64(&value)
        {
            problems.push(Problem::DeletedEventStored { id: id.to_hex() });
        }
    }
    Ok(Checked { events, frames, problems })
}

/// What `check --repair` found, and what a check finds afterwards.
#[derive(Clone, Debug)]
pub struct Repaired {
    /// Before the repair.
    pub found: Checked,
    /// After it (clean when the repair mended everything).
    pub after: Checked,
}

/// Checks the store in `dir`, mends what it finds (see the module doc), and checks again.
pub async fn repair(dir: &Path, cache_capacity_mb: u64) -> Result<Repaired, StoreError> {
    let blocking = |work: fn(&Path, u64) -> Result<Checked, StoreError>| {
        let dir = dir.to_path_buf();
        async move {
            tokio::task::spawn_blocking(move || work(&dir, cache_capacity_mb))
                .await
                .map_err(|e| StoreError::Task(e.to_string()))?
        }
    };
    let found = blocking(check).await?;
    if found.problems.is_empty() {
        return Ok(Repaired { after: found.clone(), found });
    }
    let (owned, problems) = (dir.to_path_buf(), found.problems.clone());
    tokio::task::spawn_blocking(move || drop_inconsistent(&owned, cache_capacity_mb, &problems))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    compact(dir, cache_capacity_mb).await?;
    let after = blocking(check).await?;
    Ok(Repaired { found, after })
}

/// Drops the catalogue entries of the events `problems` name and points every address at its
/// newest stored version.
fn drop_inconsistent(dir: &Path, cache_capacity_mb: u64, problems: &[Problem]) -> Result<(), StoreError> {
    let db = open_db(dir, cache_capacity_mb)?;
    let tree = db.open_tree(EVENTS_TREE)?;
    let mut dropped = HashSet::new();
    for problem in problems {
        match problem {
            Problem::UnreadableRecord { id, .. }
            | Problem::WrongRecord { id, .. }
            | Problem::DeletedEventStored { id } => {
                dropped.insert(id.clone());
            }
            // Newest first: every other version goes.
            Problem::SeveralVersions { ids } => dropped.extend(ids.iter().skip(1).cloned()),
            Problem::CorruptFrame { .. } | Problem::UnreadableLog { .. } | Problem::AddressNotNewest { .. } => {}
        }
    }
    let mut batch = sled::Batch::default();
    let mut newest: HashMap<Vec<u8>, (Timestamp, EventId)> = HashMap::new();
    let (log, _) = open_log(dir, &tree)?;
    let (places, _) = remap::load(&tree, Some(dir))?;
    for bucket in catalogue::buckets(&tree) {
        let (key, value) = bucket?;
        let kept = catalogue::rebuilt(&value, &places, |id, serial| {
            if dropped.contains(&id.to_hex()) {
                tracing::warn!(id = %id.to_hex(), "repair: dropping an inconsistent event");
                return Ok(None);
            }
            if let Ok(event) = log.read(serial).map_err(StoreError::from).and_then(|r| Ok(record::decode(&r)?))
                && let Some(address) = address_of(&event)
            {
                let candidate = (event.created_at, id);
                let entry = newest.entry(address).or_insert(candidate);
                // Newest wins; ties: the lowest id (NIP-01).
                if (std::cmp::Reverse(candidate.0), candidate.1) < (std::cmp::Reverse(entry.0), entry.1) {
                    *entry = candidate;
                }
            }
            Ok(Some(serial))
        })?;
        match kept.len() {
            n if n == value.len() => {}
            0 => batch.remove(key),
            _ => batch.insert(key, kept),
        }
    }
    for (address, (created_at, id)) in newest {
        batch.insert(address, encode_address(&id, created_at));
    }
    // The index segments still list the dropped events: the next open builds them again from the
    // log and the catalogue as it now is.
    batch.remove(keys::meta(keys::INDEX));
    // Nor were these drops recorded as removals: the next start looks every record up.
    if let Some(end) = tree.get(keys::meta(keys::LOG_END))? {
        batch.insert(keys::meta(keys::TAIL_RECORDED), end);
    }
    tree.apply_batch(batch)?;
    flush_durably(&db, Some(&Durable::open(dir)?))?;
    Ok(())
}

/// The event id of an `i` or `d` key (its prefix byte, then the id).
fn id_of(key: &[u8]) -> EventId {
    EventId(key.get(1..).and_then(|k| k.try_into().ok()).unwrap_or([0; 32]))
}
