//! The differential fuzz entry point: the same filter asked of both store backends, the
//! embedded one and PostgreSQL, holding the same events.
//!
//! Owns the pair, built once per process: a PostgreSQL server of its own on a free port
//! ([`crate::testing::postgres`], stopped when the process ends, however it ends) and an
//! embedded store in a temporary directory, both given the same few hundred seeded writes
//! (profiles, notes with tags, addressable posts and their replacements, direct messages,
//! deletions by id and by address).

use std::sync::OnceLock;

use crate::protocol::{EventId, Filter, Keys, Kind, Timestamp, VerifiedEvent, verify::verify};
use crate::store::{INDEX_MEMORY_EVENTS, PgTuning, Store, Tuning};
use crate::testing::postgres::Postgres;

use super::input::text;

/// When the stores are asked (after every write's `created_at`).
const NOW: Timestamp = Timestamp(2_000_000_000);

struct Pair {
    embedded: Store,
    postgres: Store,
    _runtime: tokio::runtime::Runtime,
    _server: Postgres,
    _dirs: (tempfile::TempDir, tempfile::TempDir),
}

/// A tiny seeded generator (xorshift), so every run holds the same events.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

fn write(rng: &mut Rng, authors: &[Keys], stored: &[EventId]) -> Option<VerifiedEvent> {
    let k = &authors[rng.below(authors.len() as u64) as usize];
    let at = Timestamp(1000 + rng.below(400));
    let t = ["a", "b", "c"][rng.below(3) as usize].to_string();
    let d = ["x", "y"][rng.below(2) as usize].to_string();
    let other = authors[rng.below(authors.len() as u64) as usize].public_key().to_hex();
    let (kind, tags): (u16, Vec<Vec<String>>) = match rng.below(9) {
        0 => (0, vec![]),
        1 => (30023, vec![vec!["d".into(), d], vec!["t".into(), t]]),
        2 if !stored.is_empty() => {
            (5, vec![vec!["e".into(), stored[rng.below(stored.len() as u64) as usize].to_hex()]])
        }
        3 => (5, vec![vec!["a".into(), format!("30023:{}:{d}", k.public_key().to_hex())]]),
        4 => (4, vec![vec!["p".into(), other]]),
        5 => (1, vec![vec!["t".into(), t], vec!["p".into(), other]]),
        6 => (7, vec![vec!["e".into(), stored.first().map(EventId::to_hex).unwrap_or_default()]]),
        _ => (1, vec![vec!["t".into(), t]]),
    };
    verify(k.sign(at, Kind(kind), tags.into_iter().filter(|t| !t[1].is_empty()).collect(), "fuzz")).ok()
}

fn pair() -> Result<Pair, String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let server = runtime.block_on(Postgres::start(false))?;
    let url = runtime.block_on(server.database("fuzz"))?;
    let dirs = (tempfile::tempdir().map_err(|e| e.to_string())?, tempfile::tempdir().map_err(|e| e.to_string())?);
    let tuning =
        |postgres| Tuning { cache_capacity_mb: 8, index_memory_events: INDEX_MEMORY_EVENTS, search: None, postgres };
    let embedded = Store::open_tuned(dirs.0.path(), tuning(None)).map_err(|e| e.to_string())?;
    let pg = Some(PgTuning { url, pool: 4 });
    let postgres =
        runtime.block_on(async { Store::open_tuned(dirs.1.path(), tuning(pg)) }).map_err(|e| e.to_string())?;
    let authors: Vec<Keys> = (1..=4u8).filter_map(|s| Keys::from_bytes([s; 32]).ok()).collect();
    let mut rng = Rng(0x5eed_f022);
    let mut stored = Vec::new();
    for _ in 0..300 {
        let Some(event) = write(&mut rng, &authors, &stored) else { continue };
        stored.push(event.id);
        let (a, b) = runtime.block_on(async { (embedded.put(event.clone()).await, postgres.put(event).await) });
        match (a, b) {
            (Ok(a), Ok(b)) if std::mem::discriminant(&a) == std::mem::discriminant(&b) => {}
            (a, b) => return Err(format!("the stores disagree on a write: {a:?} / {b:?}")),
        }
    }
    Ok(Pair { embedded, postgres, _runtime: runtime, _server: server, _dirs: dirs })
}

/// A filter (JSON) asked of both stores: the same events in the same order, the same count.
/// Needs PostgreSQL's programs (`tests/postgres/install.sh`); without them it says so and stops.
pub fn store_differential(data: &[u8]) {
    static PAIR: OnceLock<Result<Pair, String>> = OnceLock::new();
    let Some(text) = text(data) else { return };
    let Ok(filter) = serde_json::from_str::<Filter>(text) else { return };
    if filter.search.is_some() {
        return;
    }
    let pair = match PAIR.get_or_init(pair) {
        Ok(pair) => pair,
        Err(e) => panic!("the differential target needs PostgreSQL (tests/postgres/install.sh): {e}"),
    };
    let filters = std::slice::from_ref(&filter);
    let ids = |store: &Store| {
        store.query(filters, NOW).map(|events| events.iter().map(|e| e.as_str().to_string()).collect::<Vec<_>>())
    };
    let (a, b) = (ids(&pair.embedded), ids(&pair.postgres));
    match (&a, &b) {
        (Ok(a), Ok(b)) => assert_eq!(a, b, "{text}"),
        (Err(_), Err(_)) => {}
        _ => panic!("one store answered and the other refused {text}: {a:?} / {b:?}"),
    }
    let count = |store: &Store| store.count(filters, NOW).ok();
    assert_eq!(count(&pair.embedded), count(&pair.postgres), "count {text}");
}
