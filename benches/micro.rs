//! criterion micro-benchmarks of the hot paths the relay-level figures are made of: validation,
//! filter matching, the stored-record and index-key encoding, reads of a warm store, and
//! `limiter.admit`.
//! Run: `cargo bench --bench micro`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmarks: a failed unwrap is a failed run

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use hearth::config::LimitsConfig;
use hearth::limiter::{Billed, LimitType, Limiter, SystemClock};
use hearth::protocol::verify::verify;
use hearth::protocol::{Event, Filter, Keys, Kind, Timestamp};
use hearth::store::format::{bucket, record};
use hearth::store::{Store, index};

/// A kind-1 event shaped like the bench's: a few `t` and `p` tags, 200 bytes of content.
fn sample() -> String {
    let keys = Keys::from_bytes([7; 32]).unwrap();
    let tags =
        vec![vec!["t".to_string(), "nostr".into()], vec!["t".into(), "rust".into()], vec!["p".into(), "ab".repeat(32)]];
    keys.sign(Timestamp(1_700_000_000), Kind(1), tags, &"hearth ".repeat(28)).to_json().unwrap()
}

fn validation(c: &mut Criterion) {
    let json = sample();
    c.bench_function("validate: parse + id + schnorr", |b| {
        b.iter(|| verify(Event::from_json(black_box(&json)).unwrap()).unwrap())
    });
}

fn filter_matching(c: &mut Criterion) {
    let event = Event::from_json(&sample()).unwrap();
    let hit: Filter = serde_json::from_str(r##"{"kinds":[1],"#t":["bitcoin","rust"],"since":1600000000}"##).unwrap();
    let miss: Filter = serde_json::from_str(&format!(r#"{{"authors":["{}"]}}"#, "cd".repeat(32))).unwrap();
    c.bench_function("filter: kinds + #t + since, matching", |b| b.iter(|| black_box(&hit).matches(&event)));
    c.bench_function("filter: authors, not matching", |b| b.iter(|| black_box(&miss).matches(&event)));
}

fn encoding(c: &mut Criterion) {
    let event = Event::from_json(&sample()).unwrap();
    let stored = record::encode(&event);
    c.bench_function("store: record encode + id key + index keys", |b| {
        b.iter(|| {
            let stored = record::encode(black_box(&event));
            let header = record::header(&stored).unwrap();
            (bucket::key(&event.id), index::keys_of(&header, &event.tags))
        })
    });
    c.bench_function("store: record render (stored → JSON)", |b| b.iter(|| record::render(black_box(&stored))));
}

/// Reads of a store on disk whose files all sit in the OS page cache: the floor under the query
/// figures.
fn warm_reads(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 64).unwrap();
    let authors: Vec<Keys> = (1..=10u8).map(|n| Keys::from_bytes([n; 32]).unwrap()).collect();
    let mut ids = Vec::new();
    for i in 0..10_000u64 {
        let keys = &authors[(i % 10) as usize];
        let event = verify(keys.sign(Timestamp(1_700_000_000 + i), Kind(1), vec![], &"hearth ".repeat(28))).unwrap();
        ids.push(event.id);
        runtime.block_on(store.put(event)).unwrap();
    }
    let now = Timestamp(2_000_000_000);
    let mut n = 0;
    c.bench_function("store: get by id, warm (10,000 events)", |b| {
        b.iter(|| {
            n = (n + 7919) % ids.len();
            store.get(black_box(&ids[n]), now).unwrap().unwrap()
        })
    });
    let filter: Filter =
        serde_json::from_str(&format!(r#"{{"authors":["{}"],"limit":50}}"#, authors[3].public_key().to_hex())).unwrap();
    let filters = [filter];
    c.bench_function("store: query authors + limit 50, warm", |b| {
        b.iter(|| assert_eq!(store.query(black_box(&filters), now).unwrap().len(), 50))
    });
}

fn admit(c: &mut Criterion) {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 1_000_000_000;
    config.ip.messages_per_min = 1_000_000_000;
    let limiter = Limiter::new(&config, Arc::new(SystemClock::default()));
    let mut n = 0u32;
    c.bench_function("limiter.admit (10,000 addresses and their IP ceilings, never refused)", |b| {
        b.iter(|| {
            n = (n + 1) % 10_000;
            let billed = Billed::ip(IpAddr::V4(Ipv4Addr::from(n)));
            // The memory backend's admission never waits: one poll finishes it.
            let admitted =
                futures_util::FutureExt::now_or_never(limiter.admit(black_box(&billed), LimitType::Messages));
            assert_eq!(admitted, Some(Ok(())));
        })
    });
}

criterion_group!(benches, validation, filter_matching, encoding, warm_reads, admit);
criterion_main!(benches);
