//! The client library and CLI against a real hearth with tight limits and the real clock.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::*;
use hearth::client::Session;
use hearth::client::session::Options;
use hearth::protocol::Filter;
use serde_json::{Value, json};

/// Runs `hearth publish` with `stdin` lines; returns (exit code, stdout JSON lines).
fn cli_publish(relay: &TestRelay, secret: &str, extra: &[&str], stdin: &str) -> (i32, Vec<Value>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["publish", "--relay", &relay.ws_url()])
        .args(extra)
        .env("HEARTH_KEY", secret)
        .env_remove("RUST_LOG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let lines = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (out.status.code().unwrap_or(-1), lines)
}

fn drafts(n: usize) -> String {
    (0..n)
        .map(|i| format!("{}\n", json!({"kind": 1, "content": format!("note {i}"), "tags": [["t", "cli"]]})))
        .collect()
}

async fn stored_by(relay: &TestRelay, pubkey: &str) -> Vec<String> {
    let mut c = relay.connect().await;
    c.req_ids("check", vec![json!({"authors": [pubkey], "limit": 1000})]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_publishes_300_events_through_tight_limits_exactly_once() {
    let relay = TestRelay::start_real_clock(|c| {
        c.limits.human.ws_events_per_sec = 50;
        c.limits.human.ws_burst_window_secs = 2;
        c.limits.human.messages_per_min = 100_000;
        c.limitation.max_limit = 1000;
    })
    .await;
    let keys = keys(40);
    let (code, lines) = tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &[], &drafts(300)));
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.len(), 300);
    assert!(lines.iter().all(|l| l["accepted"] == true && l["message"] == ""), "{lines:?}");
    let stored = stored_by(&relay, &keys.public_key().to_hex()).await;
    assert_eq!(stored.len(), 300);
    let mut unique = stored.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 300);
    // Publishing the same signed events again: every one a duplicate, nothing stored twice.
    let again: String = {
        let mut c = relay.connect().await;
        let events = c.req("all", vec![json!({"authors": [keys.public_key().to_hex()], "limit": 5})]).await;
        events.iter().map(|e| format!("{e}\n")).collect()
    };
    let (code, lines) = tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &[], &again));
    assert_eq!(code, 0);
    assert!(lines.iter().all(|l| l["message"] == "duplicate: already have this event"), "{lines:?}");
    assert_eq!(stored_by(&relay, &keys.public_key().to_hex()).await.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_publishes_300_events_over_rest_exactly_once() {
    let relay = TestRelay::start_real_clock(|c| {
        c.limits.human.api_calls_per_min = 1000;
        c.limits.human.messages_per_min = 100_000;
        // The client's pacing follows the human tier only (issue 18); the IP ceiling is raised
        // out of its way here.
        c.limits.ip.api_calls_per_min = 1000;
        c.limits.ip.messages_per_min = 100_000;
        c.limitation.max_limit = 1000;
    })
    .await;
    let keys = keys(41);
    let (code, lines) =
        tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &["--rest"], &drafts(300)));
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.len(), 300);
    assert!(lines.iter().all(|l| l["accepted"] == true));
    assert_eq!(stored_by(&relay, &keys.public_key().to_hex()).await.len(), 300);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_exit_codes_tell_refused_from_invalid() {
    let relay = TestRelay::start_real_clock(|c| {
        generous(c);
        c.auth.members = vec![keys(42).public_key()];
    })
    .await;
    let outsider = keys(43);
    let (code, lines) = tokio::task::block_in_place(|| cli_publish(&relay, &outsider.secret_hex(), &[], &drafts(1)));
    assert_eq!(code, 3);
    assert_eq!(lines[0]["message"], "restricted: only members of this relay may publish here");
    let mut forged = sign(&outsider, now(), 1, &[], "x");
    forged.sig.0[0] ^= 1;
    let (code, lines) = tokio::task::block_in_place(|| {
        cli_publish(&relay, &outsider.secret_hex(), &[], &format!("{}\n", json!(forged)))
    });
    assert_eq!(code, 4);
    assert_eq!(lines[0]["message"], "invalid: signature does not verify");
    let out = Command::new(env!("CARGO_BIN_EXE_hearth"))
        .args(["count", "--relay", "ws://127.0.0.1:1/", "{}"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_of_100_reqs_at_start_up_is_paced_and_every_one_gets_eose() {
    let relay = TestRelay::start_real_clock(|c| c.limitation.max_subscriptions = 100).await;
    let session = Session::connect(&relay.ws_url(), None, Options::default()).await.unwrap();
    let mut subs = Vec::new();
    for _ in 0..100 {
        let f: Filter = serde_json::from_str(r#"{"kinds":[1],"limit":1}"#).unwrap();
        subs.push(session.subscribe(vec![f]).await.unwrap());
    }
    for (sub, mut rx) in subs {
        let update = tokio::time::timeout(std::time::Duration::from_secs(60), rx.recv()).await.unwrap().unwrap();
        assert_eq!(update, hearth::client::Update::Eose(sub));
    }
    let usage = relay.limiter.usage(&hearth::limiter::Principal::Ip(std::net::IpAddr::from([127, 0, 0, 1])));
    assert_eq!(usage.refusals["ws_events"], 0, "pacing should have kept every REQ within budget");
}

#[tokio::test]
async fn keygen_prints_a_usable_key_pair() {
    let out = Command::new(env!("CARGO_BIN_EXE_hearth")).arg("keygen").output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = hearth::protocol::Keys::parse(v["nsec"].as_str().unwrap()).unwrap();
    assert_eq!(keys.public_key().to_hex(), v["pubkey"].as_str().unwrap());
    assert_eq!(keys.secret_hex(), v["secret"].as_str().unwrap());
    assert!(v["npub"].as_str().unwrap().starts_with("npub1"));
}
