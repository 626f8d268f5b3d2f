//! The shared test vectors, sent byte for byte to a real relay (see tests/vectors/README.md).

use std::collections::{HashMap, HashSet};

use crate::common::*;
use serde_json::value::RawValue;
use serde_json::{Value, json};

const VALID: &str = include_str!("../vectors/valid.jsonl");
const INVALID: &str = include_str!("../vectors/invalid.jsonl");
const AMBIGUOUS: &str = include_str!("../vectors/ambiguous.jsonl");
const MANIFEST: &str = include_str!("../vectors/manifest.json");

fn lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.trim().is_empty())
}

fn group(manifest: &Value, name: &str) -> HashSet<String> {
    manifest["groups"][name].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect()
}

/// The raw text of the `event` member, exactly as in the file. The member is last on every
/// line; a lone-surrogate case cannot even be parsed by serde_json, so it is cut out as text.
fn event_text(line: &str) -> String {
    if let Ok(members) = serde_json::from_str::<HashMap<String, Box<RawValue>>>(line) {
        return members["event"].get().to_string();
    }
    let start = line.find("\"event\":").unwrap() + "\"event\":".len();
    let end = line.trim_end().len() - 1;
    assert!(line[end..].starts_with('}'));
    line[start..end].to_string()
}

async fn vector_relay() -> TestRelay {
    TestRelay::start(|c| {
        generous(c);
        // Vectors are dated from 1970 to 2^53-1: no created_at window for this test.
        c.limitation.created_at_upper_limit = 0;
        c.limitation.max_limit = 1000;
        // Reports (kind 1984) are their author's and the admins': the reader is an admin.
        c.admin.pubkeys = vec![keys(99).public_key()];
    })
    .await
}

#[tokio::test]
async fn valid_vectors_are_accepted_and_exactly_the_survivors_are_served() {
    let manifest: Value = serde_json::from_str(MANIFEST).unwrap();
    let expired = group(&manifest, "expired");
    let relay = vector_relay().await;
    let mut c = relay.connect().await;
    let mut all_ids = Vec::new();
    for line in lines(VALID) {
        let id = serde_json::from_str::<Value>(line).unwrap()["id"].as_str().unwrap().to_string();
        let ok = c.publish_raw(line).await;
        if expired.contains(&id) {
            // NIP-40: hearth refuses an event that has already expired.
            assert_eq!(ok, json!(["OK", id, false, "invalid: event has expired"]));
        } else {
            assert_eq!(ok, json!(["OK", id, true, ""]), "line {line:.200}");
        }
        all_ids.push(id);
    }
    assert_eq!(all_ids.len(), 163);
    let mut gone = HashSet::new();
    for name in ["ephemeral", "replaceable_superseded", "deleted_by_request", "expired"] {
        gone.extend(group(&manifest, name));
    }
    let expected: HashSet<String> = all_ids.iter().filter(|id| !gone.contains(*id)).cloned().collect();
    let mut admin = relay.connect().await;
    assert_eq!(admin.auth(&keys(99), &relay.ws_url()).await[2], true);
    let served = admin.req_ids("all", vec![json!({"limit": 1000})]).await;
    let served_set: HashSet<String> = served.iter().cloned().collect();
    assert_eq!(served.len(), served_set.len(), "an event was served twice");
    assert_eq!(served_set, expected);
    // A reader who is not an admin is served everything but the reports.
    let reports: HashSet<String> = lines(VALID)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["kind"] == 1984)
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(reports.len(), 2);
    let anyone: HashSet<String> = c.req_ids("all", vec![json!({"limit": 1000})]).await.into_iter().collect();
    assert_eq!(anyone, expected.difference(&reports).cloned().collect::<HashSet<_>>());
    // The tie-break winner is the lower id; the non-author deletion did not delete.
    let winner = manifest["tie_break"]["expected_winner"].as_str().unwrap();
    assert!(served_set.contains(winner));
    for id in manifest["deletion"]["must_survive"].as_array().unwrap() {
        assert!(served_set.contains(id.as_str().unwrap()));
    }
}

#[tokio::test]
async fn stored_content_round_trips_byte_for_byte() {
    let relay = vector_relay().await;
    let mut c = relay.connect().await;
    let mut sent = HashMap::new();
    for line in lines(VALID) {
        let v: Value = serde_json::from_str(line).unwrap();
        c.publish_raw(line).await;
        sent.insert(v["id"].as_str().unwrap().to_string(), v);
    }
    for event in c.req("all", vec![json!({"limit": 1000})]).await {
        let original = &sent[event["id"].as_str().unwrap()];
        assert_eq!(event["content"], original["content"]);
        assert_eq!(event["tags"], original["tags"]);
        assert_eq!(event, *original);
    }
}

#[tokio::test]
async fn invalid_vectors_are_rejected_invalid_and_nothing_is_stored() {
    let relay = vector_relay().await;
    let mut c = relay.connect().await;
    let mut n = 0;
    for line in lines(INVALID) {
        let defect: Value = serde_json::from_str(line).unwrap();
        let ok = c.publish_raw(&event_text(line)).await;
        assert_eq!(ok[0], "OK", "{}", defect["defect"]);
        assert_eq!(ok[2], false, "{} was accepted", defect["defect"]);
        assert!(ok[3].as_str().unwrap().starts_with("invalid: "), "{}: {ok}", defect["defect"]);
        n += 1;
    }
    assert_eq!(n, 48);
    assert!(c.req("all", vec![json!({"limit": 1000})]).await.is_empty());
}

#[tokio::test]
async fn ambiguous_vectors_are_rejected_invalid() {
    // hearth's documented choice: an empty tag, a lone surrogate and a negative created_at are
    // all refused (docs/src/protocol-decisions.md, "ambiguous events").
    let relay = vector_relay().await;
    let mut c = relay.connect().await;
    for line in lines(AMBIGUOUS) {
        let case = &line[..line.find(",").unwrap()];
        let ok = c.publish_raw(&event_text(line)).await;
        assert_eq!(ok[0], "OK", "{case}");
        assert_eq!(ok[2], false, "{case}");
        assert!(ok[3].as_str().unwrap().starts_with("invalid: "), "{case}: {ok}");
    }
    assert!(c.req("all", vec![json!({})]).await.is_empty());
}
