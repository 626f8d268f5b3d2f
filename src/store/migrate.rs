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
//! | 2      | `events_v2` | `e` + serial → an event record ([`super::record`], format 1) |
//! | 3      | `events_v3` | records in `events.log` (today's)                        |

use std::io::Write;
use std::path::Path;

use super::{OLD_TREES, StoreError, flush_durably, open_db, record};

/// The file a migration leaves the carried-over events in until they are imported. While it
/// exists the store refuses to open: a relay on a half-migrated directory would serve too little.
pub const PENDING: &str = "migration.jsonl";

/// The tree and version of the older layout `db` holds.
pub(super) fn found(db: &sled::Db) -> Option<(&'static str, u8)> {
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
    flush_durably(&db, Some(&super::durable::Durable::open(dir)?))?;
    Ok(Some((layout, events)))
}
