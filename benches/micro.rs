//! criterion micro-benchmarks of the hot paths the relay-level figures are made of: validation,
//! filter matching, the stored-record and index-key encoding, and `limiter.admit`.
//! Run: `cargo bench --bench micro`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // benchmarks: a failed unwrap is a failed run

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use hearth::config::LimitsConfig;
use hearth::limiter::{LimitType, Limiter, Principal, SystemClock};
use hearth::protocol::verify::verify;
use hearth::protocol::{Event, Filter, Keys, Kind, Timestamp};
use hearth::store::{index, keys, record};

/// A kind-1 event shaped like the bench's: a few `t` and `p` tags, 200 bytes of content.
fn sample() -> String {
    let keys = Keys::from_bytes([7; 32]).unwrap();
    let tags =
        vec![vec!["t".to_string(), "nostr".into()], vec!["t".into(), "rust".into()], vec!["p".into(), "ab".repeat(32)]];
    keys.sign(Timestamp(1_700_000_000), Kind(1), tags, &"hearth ".repeat(28)).to_json()
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
            (keys::id(&event.id), keys::event(42), index::keys_of(&header, &event.tags))
        })
    });
    c.bench_function("store: record render (stored → JSON)", |b| b.iter(|| record::render(black_box(&stored))));
}

fn admit(c: &mut Criterion) {
    let mut config = LimitsConfig::default();
    config.human.messages_per_min = 1_000_000_000;
    let limiter = Limiter::new(&config, Arc::new(SystemClock::default()));
    let mut n = 0u32;
    c.bench_function("limiter.admit (10,000 principals, never refused)", |b| {
        b.iter(|| {
            n = (n + 1) % 10_000;
            let principal = Principal::Ip(IpAddr::V4(Ipv4Addr::from(n)));
            limiter.admit(black_box(&principal), LimitType::Messages).unwrap()
        })
    });
}

criterion_group!(benches, validation, filter_matching, encoding, admit);
criterion_main!(benches);
