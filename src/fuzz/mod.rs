//! The entry points of hearth's fuzz targets (`fuzz/`, run with `cargo fuzz`) and of the test
//! that replays their committed corpora on stable (`tests/ops/fuzz_corpus.rs`): one function per
//! target, taking the fuzzer's bytes. The protocol's and the store's targets are here; the media
//! server's (`media.rs`), NIP-29's (`groups.rs`), a backup folder's (`backup.rs`) and the two
//! stores side by side (`stores.rs`) beside.
//!
//! Owns no parsing of its own: each function feeds the bytes to the code the relay runs on
//! untrusted input (a client's frame, a filter, an event and its signature, a NIP-98 header, a
//! record or frame read back from disk, a configuration file) and asserts what must hold for any
//! input, besides not panicking: what parses serializes back to itself, a refusal is a frame a
//! client can read, a decoded record re-encodes to the same bytes.

mod backup;
mod groups;
mod input;
mod media;
mod stores;

pub use backup::backup_restore;
pub use groups::nip29_action;
pub use media::{blossom_auth, range, strip};
pub use stores::store_differential;

use std::collections::HashMap;

use input::{Scratch, text};
use std::sync::OnceLock;

use crate::config::Config;
use crate::protocol::message::{ClientMessage, RelayMessage};
use crate::protocol::{Event, Filter, Keys, Kind, Timestamp, nip98, verify};
use crate::store::format::{log, record, segment};

/// A few signed events for filters to be matched against (signed once).
fn events() -> &'static [Event] {
    static EVENTS: OnceLock<Vec<Event>> = OnceLock::new();
    EVENTS.get_or_init(|| {
        let mut out = Vec::new();
        for (i, seed) in [1u8, 2, 3].into_iter().enumerate() {
            let Ok(keys) = Keys::from_bytes([seed; 32]) else { continue };
            let tags = vec![
                vec!["e".to_string(), "0".repeat(64)],
                vec!["t".to_string(), format!("tag{i}")],
                vec!["d".to_string(), String::new()],
            ];
            out.push(keys.sign(Timestamp(1_700_000_000 + i as u64), Kind(i as u16), tags, "fuzz"));
        }
        out
    })
}

/// A client → relay frame: parsed, and answered. A parsed EVENT serializes back to an event
/// that parses the same; a refusal is a JSON array a client can read.
pub fn client_message(data: &[u8]) {
    let Some(text) = text(data) else { return };
    match ClientMessage::parse(text) {
        Ok(ClientMessage::Event(event) | ClientMessage::Auth(event)) => round_trip(&event),
        Ok(ClientMessage::Req { filters, .. } | ClientMessage::Count { filters, .. }) => {
            filters.iter().for_each(filter_round_trip)
        }
        Ok(ClientMessage::NegOpen { filter, .. }) => filter_round_trip(&filter),
        Ok(ClientMessage::Close(_) | ClientMessage::NegMsg { .. } | ClientMessage::NegClose(_)) => {}
        Err(e) => readable(&e.reply()),
    }
}

/// A relay frame must be one JSON array.
fn readable(frame: &RelayMessage) {
    let Ok(json) = frame.to_json() else { panic!("a refusal does not serialize: {frame:?}") };
    match serde_json::from_str::<serde_json::Value>(&json) {
        Ok(serde_json::Value::Array(_)) => {}
        other => panic!("a refusal is not a JSON array: {json} ({other:?})"),
    }
}

/// An event serializes to JSON that parses back to the same event, and its canonical form (the
/// text its id is the hash of) is JSON of the same fields.
fn round_trip(event: &Event) {
    let Ok(json) = event.to_json() else { panic!("a parsed event does not serialize") };
    match Event::from_json(&json) {
        Ok(again) => assert_eq!(&again, event, "{json}"),
        Err(e) => panic!("a parsed event does not parse again: {e}: {json}"),
    }
    let canonical: serde_json::Value = match serde_json::from_str(&event.canonical_json()) {
        Ok(v) => v,
        Err(e) => panic!("the canonical form is not JSON: {e}"),
    };
    assert_eq!(canonical[5].as_str(), Some(event.content.as_str()));
    assert_eq!(canonical[2].as_u64(), Some(event.created_at.0));
}

/// A filter serializes to JSON that parses back to the same filter.
fn filter_round_trip(filter: &Filter) {
    let json = match serde_json::to_string(filter) {
        Ok(json) => json,
        Err(e) => panic!("a parsed filter does not serialize: {e}"),
    };
    match serde_json::from_str::<Filter>(&json) {
        Ok(again) => assert_eq!(&again, filter, "{json}"),
        Err(e) => panic!("a parsed filter does not parse again: {e}: {json}"),
    }
}

/// A filter: parsed, round-tripped, and matched against a few events (matching agrees with the
/// field test the store uses before it reads tags).
pub fn filter(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(filter) = serde_json::from_str::<Filter>(text) else { return };
    filter_round_trip(&filter);
    for event in events() {
        if filter.matches(event) {
            assert!(filter.matches_fields(&event.id, &event.pubkey, event.kind, event.created_at));
            assert!(!filter.is_empty_set(), "an empty-set filter matched");
        }
    }
}

/// An event: parsed, round-tripped, its id recomputed and its signature checked; one that
/// verifies has the id its content hashes to.
pub fn event(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok(event) = Event::from_json(text) else { return };
    round_trip(&event);
    let computed = event.compute_id();
    if let Ok(verified) = verify::verify(event) {
        assert_eq!(verified.event().id, computed, "an event verified with an id that is not its hash");
    }
}

/// A NIP-98 `Authorization` header against a fixed request: checked, never trusted.
pub fn nip98_header(data: &[u8]) {
    let Some(header) = text(data) else { return };
    let req = nip98::Request { url: "http://127.0.0.1:7777/api/v1/events", method: "POST", body: b"{}" };
    if let Ok(event) = nip98::check(header, &req, Timestamp(1_700_000_000)) {
        assert_eq!(event.event().kind, nip98::KIND);
    }
}

/// A record read back from `events.log`: its header, tags, event and JSON decoded without a
/// panic. The JSON served from a record that decodes (spliced from its bytes, not re-serialized)
/// is the decoded event, and exactly its JSON when the record is one the store wrote.
pub fn record(data: &[u8]) {
    let _ = record::header(data);
    let _ = record::tags(data);
    let rendered = record::render(data);
    let Ok(event) = record::decode(data) else { return };
    let rendered = match rendered {
        Ok(json) => json,
        Err(e) => panic!("a record decodes but does not render: {e}"),
    };
    match Event::from_json(&rendered) {
        Ok(served) => assert_eq!(served, event, "{rendered}"),
        Err(e) => panic!("a record renders to JSON that is not its event: {e}: {rendered}"),
    }
    if record::encode(&event) == data {
        assert_eq!(event.to_json().ok().as_deref(), Some(rendered.as_str()));
    }
}

/// Bytes on disk where the store expects its files: as the tail of an event log after a crash
/// (its intact frames replayed, the rest cut off, every replayed frame readable) and as an index
/// segment (opened only when intact, its postings read without a panic).
pub fn store_files(data: &[u8]) {
    let Some(dir) = Scratch::new() else { return };
    let name = log::file_name(1);
    if std::fs::write(dir.0.join(&name), data).is_ok()
        && let Ok(log) = log::Log::open(&dir.0, &name, 0)
        && let Ok(serials) = log.recover_tail()
    {
        for serial in serials {
            if let Err(e) = log.read(serial) {
                panic!("a recovered frame at {serial} does not read: {e}");
            }
        }
        assert!(log.end() <= data.len() as u64, "the log's end is past its bytes");
    }
    for at in 0..data.len().min(64) {
        let _ = log::frame_in(data, at);
    }
    let path = dir.0.join("index.1.0.seg");
    if std::fs::write(&path, data).is_ok()
        && let Ok(seg) = segment::Segment::open(&path)
    {
        for (_, _, word) in seg.range((0, 0, 0), (u64::MAX, u64::MAX, u64::MAX)).take(100_000).flatten() {
            let _ = segment::unpack(word);
        }
    }
}

/// A configuration file, and `HEARTH_…` variables after a NUL: loaded or refused, never a panic;
/// what loads validates.
pub fn config(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let (file, vars) = text.split_once('\0').unwrap_or((text, ""));
    let env: HashMap<String, String> =
        vars.split('\0').filter_map(|kv| kv.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let Some(dir) = Scratch::new() else { return };
    let path = dir.0.join("relay.toml");
    if std::fs::write(&path, file).is_err() {
        return;
    }
    if let Ok(config) = Config::load(Some(&path), &env) {
        assert!(config.validate().is_ok(), "a loaded configuration does not validate");
    }
}
