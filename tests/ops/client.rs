//! The client library and CLI against a real hearth with tight limits and the real clock.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::common::*;
use hearth::client::Session;
use hearth::client::session::Options;
use hearth::config::Config;
use hearth::limiter::{Principal, Tier};
use hearth::protocol::{Filter, Keys};
use serde_json::{Value, json};
use std::time::Duration;

/// Runs `hearth publish` with `stdin` lines; returns (exit code, stdout JSON lines).
fn cli_publish(relay: &TestRelay, secret: &str, extra: &[&str], stdin: &str) -> (i32, Vec<Value>) {
    let mut child = crate::common::hearth()
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

/// Runs `hearth <verb> --rest` (`req` or `count`) with `filter`; returns (exit code, stdout lines).
fn cli_read_rest(relay: &TestRelay, verb: &str, secret: &str, filter: &str) -> (i32, Vec<Value>) {
    let out = crate::common::hearth()
        .args([verb, "--rest", "--relay", &relay.ws_url(), filter])
        .env("HEARTH_KEY", secret)
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let lines = String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    (out.status.code().unwrap_or(-1), lines)
}

/// Quotas for a REST run: `tier`'s `api_calls_per_min` and `messages_per_min`, the IP ceiling out
/// of the way, and reads of up to 1000 events.
fn rest_quotas(c: &mut Config, tier: Tier, api_calls: u64, messages: u64) {
    let t = if tier == Tier::Agent { &mut c.limits.agent } else { &mut c.limits.human };
    t.api_calls_per_min = api_calls;
    t.messages_per_min = messages;
    c.limits.ip.api_calls_per_min = 100_000;
    c.limits.ip.messages_per_min = 100_000;
    c.limitation.max_limit = 1000;
}

/// Publishes 72 events over REST as `keys` at `tier`, whose `messages_per_min` is 60: the first
/// 60 are the burst, and each of the other 12 meets a 429 (Retry-After 1), waits for the gate and
/// is resent once, unless the seconds the burst took refilled its cell (a loaded machine). Checks that every event is stored exactly once and that no gate window saw a
/// second 429.
async fn rest_publish_through_the_gate(tier: Tier, keys: Keys) {
    let pk = keys.public_key();
    let relay = TestRelay::start_real_clock(|c| {
        rest_quotas(c, tier, 600, 60);
        if tier == Tier::Agent {
            c.limits.agent_pubkeys = vec![pk];
            // Paced at the human tier this run would take ten minutes.
            c.limits.human.api_calls_per_min = 6;
        }
    })
    .await;
    let started = std::time::Instant::now();
    let (code, lines) =
        tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &["--rest"], &drafts(72)));
    let took = started.elapsed();
    assert_eq!(code, 0, "{lines:?}");
    assert_eq!(lines.len(), 72);
    assert!(lines.iter().all(|l| l["accepted"] == true && l["message"] == ""), "{lines:?}");
    let mut stored = stored_by(&relay, &pk.to_hex()).await;
    stored.sort();
    stored.dedup();
    assert_eq!(stored.len(), 72);
    let usage = relay.limiter.usage(&Principal::Pubkey(pk)).await;
    assert_eq!(usage.tier, tier);
    // How many of the 12 met the gate depends on how long the burst took (each second refills a
    // cell): at least one did, at most all 12.
    let refused = usage.refusals["messages"];
    assert!((1..=12).contains(&refused), "{refused} refusals: the run should have waited for the gate 1-12 times");
    assert_eq!(usage.refusals["api_calls"], 0, "the pace kept every call within api_calls");
    // Each 429 said "Retry-After: 1" and the next call left only after it: had two 429s shared a
    // window, the run would have taken less than a second per refusal.
    assert!(took >= Duration::from_secs(refused), "{refused} gate windows in {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_publish_waits_for_the_gate_and_stores_every_event_once() {
    rest_publish_through_the_gate(Tier::Human, keys(41)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_publish_of_an_agent_is_paced_and_gated_at_the_agent_tier() {
    rest_publish_through_the_gate(Tier::Agent, keys(44)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rest_calls_are_paced_at_api_calls_and_reads_wait_for_the_gate_too() {
    let relay = TestRelay::start_real_clock(|c| rest_quotas(c, Tier::Human, 60, 100_000)).await;
    let keys = keys(45);
    let pk = keys.public_key();
    // A burst of 59 calls, then 0.9 a second: 66 events take about 8 s without one refusal.
    let (code, lines) =
        tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &["--rest"], &drafts(66)));
    assert_eq!(code, 0, "{lines:?}");
    assert!(lines.iter().all(|l| l["accepted"] == true), "{lines:?}");
    let usage = relay.limiter.usage(&Principal::Pubkey(pk)).await;
    assert_eq!(usage.refusals["api_calls"], 0);
    // A new process starts with a full burst of its own but the relay's bucket is nearly empty:
    // a read may meet a 429, waits for the gate, and is asked once more.
    let filter = json!({"authors": [pk.to_hex()], "limit": 1000}).to_string();
    let (code, events) = tokio::task::block_in_place(|| cli_read_rest(&relay, "req", &keys.secret_hex(), &filter));
    assert_eq!(code, 0);
    let mut ids: Vec<&str> = events.iter().map(|e| e["id"].as_str().unwrap()).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 66);
    let (code, count) = tokio::task::block_in_place(|| cli_read_rest(&relay, "count", &keys.secret_hex(), &filter));
    assert_eq!((code, count), (0, vec![json!({"count": 66})]));
    let refused = relay.limiter.usage(&Principal::Pubkey(pk)).await.refusals["api_calls"];
    assert!(refused <= 2, "at most one 429 for each read, got {refused}");
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
    let out = crate::common::hearth().args(["count", "--relay", "ws://127.0.0.1:1/", "{}"]).output().unwrap();
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
    let usage = relay.limiter.usage(&hearth::limiter::Principal::Ip(std::net::IpAddr::from([127, 0, 0, 1]))).await;
    assert_eq!(usage.refusals["ws_reqs"], 0, "pacing should have kept every REQ within budget");
    assert_eq!(usage.refusals["ws_events"], 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_paces_reads_at_the_advertised_ws_reqs_and_writes_at_their_own() {
    // Reads: a burst of 3 then 1 a second; writes: plenty. Paced at ws_events, the reads would
    // go out at once and the fourth be refused.
    let relay = TestRelay::start_real_clock(|c| {
        c.limits.human.ws_reqs_per_sec = 1;
        c.limits.human.ws_reqs_burst_window_secs = 3;
    })
    .await;
    let session = Session::connect(&relay.ws_url(), None, Options::default()).await.unwrap();
    let mut subs = Vec::new();
    for i in 0..4 {
        let f: Filter = serde_json::from_value(json!({"kinds": [9], "#h": [format!("g{i}")]})).unwrap();
        subs.push(session.subscribe(vec![f]).await.unwrap());
    }
    let e = sign(&keys(41), now(), 1, &[], "written while the reads wait");
    assert_eq!(session.publish(e).await, Ok(String::new()));
    for (sub, mut rx) in subs {
        let update = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.unwrap().unwrap();
        assert_eq!(update, hearth::client::Update::Eose(sub));
    }
    let progress = session.progress();
    assert_eq!((progress.sent, progress.limited, progress.refused), (5, 0, 0), "{progress:?}");
    let usage = relay.limiter.usage(&Principal::Ip(std::net::IpAddr::from([127, 0, 0, 1]))).await;
    assert_eq!((usage.refusals["ws_reqs"], usage.refusals["ws_events"]), (0, 0));
}

#[tokio::test]
async fn keygen_prints_a_usable_key_pair() {
    let out = crate::common::hearth().arg("keygen").output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let keys = hearth::protocol::Keys::parse(v["nsec"].as_str().unwrap()).unwrap();
    assert_eq!(keys.public_key().to_hex(), v["pubkey"].as_str().unwrap());
    assert_eq!(keys.secret_hex(), v["secret"].as_str().unwrap());
    assert!(v["npub"].as_str().unwrap().starts_with("npub1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_shows_sent_accepted_refused_and_the_gate_it_waits_for() {
    let relay = TestRelay::start_real_clock(|c| rest_quotas(c, Tier::Human, 600, 60)).await;
    let keys = keys(46);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("drafts.jsonl");
    std::fs::write(&input, drafts(70)).unwrap();
    // script(1) gives the CLI a terminal for its stdout and stderr; the drafts come from a file.
    let command =
        format!("{} publish --rest --relay {} < {}", env!("CARGO_BIN_EXE_hearth"), relay.ws_url(), input.display());
    let script = Command::new("script").arg("--version").output();
    assert!(
        script.is_ok_and(|o| o.status.success()),
        "this test needs util-linux's `script` (apt-get install util-linux) to give the CLI a terminal"
    );
    let out = tokio::task::block_in_place(|| {
        Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .env("HEARTH_KEY", keys.secret_hex())
            .env_remove("RUST_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    });
    assert!(out.status.success(), "{out:?}");
    let screen = String::from_utf8_lossy(&out.stdout);
    assert!(screen.contains("waiting for the gate 1s"), "{screen}");
    let refused = relay.limiter.usage(&Principal::Pubkey(keys.public_key())).await.refusals["messages"];
    assert!(refused >= 1);
    let last = format!("published 70/70: sent {}, accepted 70, refused 0, rate-limited {refused}", 70 + refused);
    assert!(screen.contains(&last), "{last:?} not in {screen}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cli_with_a_key_is_billed_to_the_key_from_its_first_frame() {
    let relay = TestRelay::start_real_clock(|c| {
        generous(c);
        // A minute's refill of 10: three events stay visible in the bucket for seconds.
        c.limits.human.messages_per_min = 10;
    })
    .await;
    let keys = keys(47);
    let (code, lines) = tokio::task::block_in_place(|| cli_publish(&relay, &keys.secret_hex(), &[], &drafts(3)));
    assert_eq!(code, 0, "{lines:?}");
    // The EVENTs waited for the AUTH handshake: the key paid for them, the address for none.
    let by_key = relay.limiter.usage(&Principal::Pubkey(keys.public_key())).await;
    assert!(by_key.limits["messages"].used >= 2, "{by_key:?}");
    let by_ip = relay.limiter.usage(&Principal::Ip(std::net::IpAddr::from([127, 0, 0, 1]))).await;
    assert_eq!(by_ip.limits["messages"].used, 0, "{by_ip:?}");
}
