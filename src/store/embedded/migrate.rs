//! Older layouts of the data directory, read once so that their events can be carried over.
//!
//! Owns knowing where each older layout kept its events, writing them out as JSON lines (the
//! same lines `hearth export` writes), and removing the old trees once those lines are safe on
//! disk. What happens to the lines next (verified and stored under today's rules) is the import's
//! ([`crate::offline`]): a migration is an export by the old layout's rules and an import by
//! today's.
//!
//! | layout | tree        | events                                                   |
//! |--------|-------------|----------------------------------------------------------|
//! | 1      | `events_v1` | `e` + id → NIP-40 expiration (u64) + the event's JSON     |
//! | 2      | `events_v2` | `e` + serial → an event record (`format::record`, format 1) |
//! | 3      | `events_v3` | records in `events.log`; one `i` key per id                |
//! | 4      | `events_v3` | records in `events.log`; `i` keys in buckets (`format::bucket`) |
//! | 5      | `events_v3` | as 4; a stored place's top bit is its generation's parity (`catalogue::Places`; today's) |
//!
//! Layouts 3 and 4 differ from today's only in their `i` entries, so they are converted in place
//! when the store opens (as [`convert_in_place`] does for `hearth migrate`): layout 3's ids move
//! into buckets; layout 4's entries are read as they are (all at parity 0).

use std::io::Write;
use std::path::Path;

use sled::Tree;

use crate::protocol::EventId;
use crate::store::db::{EVENTS_TREE, OLD_TREES, flush_durably, open_db};
use crate::store::error::StoreError;
use crate::store::format::bucket;
use crate::store::format::durable::Durable;
use crate::store::format::keys::{self, SCHEMA_VERSION};
use crate::store::format::{decode_serial, record};
use crate::store::progress::Progress;

/// Ids a layout-3 conversion moves into buckets per sled batch.
const CONVERT_BATCH: usize = 65_536;

/// The file a migration leaves the carried-over events in until they are imported. While it
/// exists the store refuses to open: a relay on a half-migrated directory would serve too little.
pub const PENDING: &str = "migration.jsonl";

/// The tree and version of the older layout `db` holds.
pub(crate) fn found(db: &sled::Db) -> Option<(&'static str, u8)> {
    let names = db.tree_names();
    OLD_TREES.iter().find(|(tree, _)| names.iter().any(|n| n.as_ref() == tree.as_bytes())).copied()
}

/// Writes every event of the older layout in `dir` to [`PENDING`] in `dir` as JSON lines,
/// synced, then removes the old tree. Returns the layout and how many events were written;
/// `None` when the directory holds no older layout.
pub fn carry_out(dir: &Path, cache_capacity_mb: u64) -> Result<Option<(u8, u64)>, StoreError> {
    let db = open_db(dir, cache_capacity_mb)?;
    let Some((name, layout)) = found(&db) else { return Ok(None) };
    let tree = db.open_tree(name)?;
    let partial = dir.join(format!("{PENDING}.partial"));
    let mut out = std::io::BufWriter::new(std::fs::File::create(&partial)?);
    let mut events = 0u64;
    for item in tree.scan_prefix(b"e") {
        let (key, value) = item?;
        let json = match layout {
            1 => std::str::from_utf8(value.get(8..).unwrap_or_default()).map(str::to_string).map_err(|_| ()),
            _ => record::render(&value).map_err(|_| ()),
        };
        match json {
            Ok(json) => {
                out.write_all(json.as_bytes())?;
                out.write_all(b"\n")?;
                events += 1;
            }
            // What cannot be read cannot be carried over; the rest is.
            Err(()) => tracing::error!(key = %hex::encode(&key), "an unreadable event of the old layout is left out"),
        }
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    // Only once the lines are durable under their final name does the old tree go.
    std::fs::rename(&partial, dir.join(PENDING))?;
    std::fs::File::open(dir)?.sync_all()?;
    drop(tree);
    db.drop_tree(name)?;
    flush_durably(&db, Some(&Durable::open(dir)?))?;
    Ok(Some((layout, events)))
}

/// Converts a layout-3 directory in place (`hearth migrate`; a relay's start does the same):
/// returns 3 and how many ids moved, or `None` when `dir` has another layout.
pub fn convert_in_place(dir: &Path, cache_capacity_mb: u64) -> Result<Option<(u8, u64)>, StoreError> {
    let db = open_db(dir, cache_capacity_mb)?;
    if !db.tree_names().iter().any(|n| n.as_ref() == EVENTS_TREE.as_bytes()) {
        return Ok(None);
    }
    let tree = db.open_tree(EVENTS_TREE)?;
    let layout = match tree.get(keys::meta("schema"))?.as_deref() {
        Some([layout @ (3 | 4)]) => *layout,
        _ => return Ok(None),
    };
    let ids = convert(&tree, layout)?;
    flush_durably(&db, Some(&Durable::open(dir)?))?;
    Ok(Some((layout, ids)))
}

/// Converts a layout-3 or layout-4 catalogue to today's, in place; returns how many ids it moved
/// into buckets (layout 3's).
pub(crate) fn convert(tree: &Tree, layout: u8) -> Result<u64, StoreError> {
    let ids = if layout == 3 { bucket_catalogue(tree)? } else { 0 };
    // Layout 5 reads layout 4 as it is: every stored place is at parity 0, the current one. Its
    // tail's removals were not recorded: a start looks the records written so far up.
    let end = tree.get(keys::meta(keys::LOG_END))?.map(|v| decode_serial(&v)).transpose()?.unwrap_or(0);
    let mut batch = sled::Batch::default();
    batch.insert(keys::meta(keys::TAIL_RECORDED), &end.to_be_bytes());
    batch.insert(keys::meta("schema"), &[SCHEMA_VERSION]);
    tree.apply_batch(batch)?;
    Ok(ids)
}

/// Moves layout 3's `i` entries (one key per id: `i` + id → serial) into today's buckets, in
/// place; the last batch records layout 4 as `schema`. Each batch is atomic: the entries it adds
/// to buckets and the keys it removes go together, so a conversion cut off by a crash goes on
/// where it stopped at the next open, and an id is in exactly one of the two forms throughout.
/// Returns how many ids it moved.
pub(crate) fn bucket_catalogue(tree: &Tree) -> Result<u64, StoreError> {
    let _progress = Progress::every_few_seconds("moving the catalogue's ids into buckets (layout 3 to 4)");
    let mut moved = 0u64;
    let mut buckets: std::collections::BTreeMap<[u8; 4], Vec<u8>> = std::collections::BTreeMap::new();
    let mut batch = sled::Batch::default();
    let mut in_batch = 0;
    let apply = |buckets: &mut std::collections::BTreeMap<[u8; 4], Vec<u8>>, mut batch: sled::Batch, last: bool| {
        for (key, value) in std::mem::take(buckets) {
            batch.insert(&key[..], value);
        }
        if last {
            batch.insert(keys::meta("schema"), &[4u8]);
        }
        tree.apply_batch(batch)
    };
    for item in tree.scan_prefix([keys::ID]) {
        let (key, value) = item?;
        // A bucket: made by this conversion, or by one that was cut off.
        let Some(id) = key.get(1..).and_then(|id| <[u8; 32]>::try_from(id).ok()).map(EventId) else { continue };
        let serial = decode_serial(&value)?;
        let bucket_key = bucket::key(&id);
        let bucket = match buckets.entry(bucket_key) {
            std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(tree.get(bucket_key)?.map(|v| v.to_vec()).unwrap_or_default())
            }
        };
        *bucket = bucket::with(Some(bucket), &id, serial)?;
        batch.remove(key);
        moved += 1;
        in_batch += 1;
        if in_batch == CONVERT_BATCH {
            apply(&mut buckets, std::mem::take(&mut batch), false)?;
            in_batch = 0;
        }
    }
    apply(&mut buckets, batch, true)?;
    Ok(moved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::embedded::catalogue;
    use crate::store::format::bucket::test_id as id;

    #[test]
    fn a_conversion_cut_off_inside_a_bucket_goes_on_where_it_stopped() {
        let db = sled::Config::new().temporary(true).open().unwrap();
        let tree = db.open_tree("t").unwrap();
        // Three ids of one bucket and one of another; one of the three already moved (the
        // batch that moved it was the last to land before the crash).
        let ids = [id([1, 2, 0x30], 1), id([1, 2, 0x31], 2), id([1, 2, 0x3f], 3), id([9, 9, 9], 4)];
        tree.insert(
            crate::store::format::bucket::key(&ids[1]),
            crate::store::format::bucket::with(None, &ids[1], 100).unwrap(),
        )
        .unwrap();
        for (n, id) in ids.iter().enumerate().filter(|&(n, _)| n != 1) {
            tree.insert([&[keys::ID][..], &id.0].concat(), &(n as u64 * 100).to_be_bytes()).unwrap();
        }
        tree.insert(keys::meta("schema"), &[3u8]).unwrap();
        assert_eq!(bucket_catalogue(&tree).unwrap(), 3);
        for (n, id) in ids.iter().enumerate() {
            assert_eq!(catalogue::get(&tree, &Default::default(), id).unwrap(), Some(n as u64 * 100), "id {n}");
        }
        let keys_left: Vec<usize> = tree.scan_prefix([keys::ID]).map(|item| item.unwrap().0.len()).collect();
        assert_eq!(keys_left, vec![4, 4], "two buckets and no key of the old form");
        assert_eq!(tree.get(keys::meta("schema")).unwrap().unwrap().as_ref(), [4]);
        // Again: nothing to move, nothing changed.
        assert_eq!(bucket_catalogue(&tree).unwrap(), 0);
        assert_eq!(catalogue::all(&tree, &Default::default()).count(), 4);
    }
}
