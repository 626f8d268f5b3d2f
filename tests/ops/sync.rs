//! `hearth sync` between two real `hearth` processes: two stores of 10,000 events with 1,000
//! different on each side converge both ways, and a peer killed mid-sync leaves only whole,
//! verified events behind and the next round finishes the job.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use crate::binary::GENEROUS;
use crate::common::*;
use hearth::protocol::Event;
use serde_json::{Value, json};

/// `hearth` on the data directory `dir/data` (where `start_with` puts a relay's).
fn on(dir: &Path) -> Command {
    let mut cmd = hearth();
    cmd.current_dir(dir).env("HEARTH_STORAGE__DATA_DIR", dir.join("data")).env("HEARTH_SERVER__BIND", "127.0.0.1:0");
    cmd
}

fn import(dir: &Path, events: &[Event]) {
    let mut child = on(dir).arg("import").stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    let mut input = String::new();
    for event in events {
        input.push_str(&serde_json::to_string(event).unwrap());
        input.push('\n');
    }
    child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stdout));
}

/// The ids `hearth export` gives for the data directory, sorted; every line verified.
fn exported_ids(dir: &Path) -> Vec<String> {
    let out = on(dir).arg("export").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut ids: Vec<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let event = Event::from_json(line).unwrap();
            let id = event.id.to_hex();
            hearth::protocol::verify::verify(event).unwrap_or_else(|e| panic!("{e}: {line}"));
            id
        })
        .collect();
    ids.sort();
    ids
}

fn sync(dir: &Path, peer: &str, direction: &str) -> (Option<i32>, Value) {
    let out: Output = on(dir).args(["sync", peer, "--direction", direction]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let summary = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: {stdout} / {}", String::from_utf8_lossy(&out.stderr)));
    (out.status.code(), summary)
}

/// `n` text notes by `author`, one second apart from `start`.
fn notes(author: u8, start: u64, n: u64, tag: &str) -> Vec<Event> {
    let k = keys(author);
    (0..n).map(|i| sign(&k, start + i, 1, &[], &format!("{tag} {i}"))).collect()
}

async fn count(url: &str) -> Value {
    let mut client = Client::connect(url).await;
    client.send(json!(["COUNT", "c", {}])).await;
    client.recv().await
}

#[tokio::test(flavor = "multi_thread")]
async fn two_relays_of_10000_events_with_1000_different_converge_both_ways() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let start = now() - 50_000;
    let shared = notes(1, start, 9_000, "shared");
    let only_a = notes(2, start, 1_000, "a");
    let only_b = notes(3, start, 1_000, "b");
    import(a.path(), &[shared.clone(), only_a.clone()].concat());
    import(b.path(), &[shared, only_b].concat());

    // The round honours the peer's advertised pace (its NIP-11), so the peer admits plenty.
    let env = [GENEROUS.as_slice(), &[("HEARTH_LIMITATION__MAX_LIMIT", "20000")]].concat();
    let (mut peer, addr) = start_with(b.path(), &env);
    let url = format!("ws://{addr}");
    // A is offline: the round runs on its data directory.
    let (code, summary) = sync(a.path(), &url, "both");
    assert_eq!(code, Some(0), "{summary}");
    for (field, want) in [("have", 1000), ("need", 1000), ("fetched", 1000), ("stored", 1000), ("published", 1000)] {
        assert_eq!(summary[field], want, "{field}: {summary}");
    }
    assert_eq!(summary["refused"], 0, "{summary}");
    assert!(summary["error"].is_null(), "{summary}");

    // A second round finds nothing to move.
    let (code, again) = sync(a.path(), &url, "both");
    assert_eq!(code, Some(0), "{again}");
    assert_eq!((again["have"].clone(), again["need"].clone()), (json!(0), json!(0)), "{again}");

    // Both answer the same COUNT, then hold the same ids.
    let (mut local, local_addr) = start_with(a.path(), &env);
    assert_eq!(count(&url).await, json!(["COUNT", "c", {"count": 11000}]));
    assert_eq!(count(&format!("ws://{local_addr}")).await, json!(["COUNT", "c", {"count": 11000}]));
    assert!(sigterm(&mut local).success());
    assert!(sigterm(&mut peer).success());
    let ids = exported_ids(a.path());
    assert_eq!(ids.len(), 11000);
    assert_eq!(ids, exported_ids(b.path()));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peer_killed_mid_sync_leaves_only_whole_events_and_the_next_round_finishes() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let theirs = notes(4, now() - 10_000, 1_000, "b");
    import(b.path(), &theirs);

    // The peer hands out 20 events a REQ at 4 REQs a second: the fetch takes seconds.
    let slow = [
        ("HEARTH_LIMITATION__MAX_LIMIT", "20"),
        ("HEARTH_LIMITATION__DEFAULT_LIMIT", "20"),
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "4"),
        ("HEARTH_LIMITS__HUMAN__WS_BURST_WINDOW_SECS", "1"),
    ];
    let (mut peer, addr) = start_with(b.path(), &slow);
    let url = format!("ws://{addr}");
    // Our relay runs, so `hearth sync` asks it (admin API) to run the round, and we can watch.
    let token = [("HEARTH_ADMIN__TOKEN", "sync-test-token")];
    let (mut local, local_addr) = start_with(a.path(), &[GENEROUS.as_slice(), &token].concat());
    let mut cmd = on(a.path());
    cmd.envs(token).args(["sync", &url, "--local", &format!("ws://{local_addr}")]);
    let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();

    // Kill the peer once the first events are stored, well before the last.
    poll("the first events to be fetched", 6 * STEP, async || {
        let counted = count(&format!("ws://{local_addr}")).await;
        if counted[2]["count"].as_u64().unwrap() > 0 { Ok(()) } else { Err(counted.to_string()) }
    })
    .await;
    peer.0.kill().unwrap();
    peer.0.wait().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(summary["error"].as_str().is_some_and(|e| !e.is_empty()), "{summary}");
    let stored = summary["stored"].as_u64().unwrap();
    assert!(stored > 0 && stored < 1000, "{summary}");
    assert!(sigterm(&mut local).success());

    // Nothing half stored: the store checks clean, and what it holds is whole and verified.
    let check = on(a.path()).arg("check").output().unwrap();
    assert_eq!(check.status.code(), Some(0), "{}", String::from_utf8_lossy(&check.stdout));
    let held = exported_ids(a.path());
    assert_eq!(held.len() as u64, stored);

    // The peer is back: the next round moves exactly what is left.
    let (_peer, addr) = start_with(b.path(), &GENEROUS);
    let (code, summary) = sync(a.path(), &format!("ws://{addr}"), "down");
    assert_eq!(code, Some(0), "{summary}");
    assert_eq!(summary["need"], 1000 - stored, "{summary}");
    assert_eq!(summary["stored"], 1000 - stored, "{summary}");
    let mut want: Vec<String> = theirs.iter().map(|e| e.id.to_hex()).collect();
    want.sort();
    assert_eq!(exported_ids(a.path()), want);
}

#[test]
fn unusable_arguments_exit_2_naming_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    for (args, want) in [
        (&["sync", "https://relay.example"][..], "the peer https://relay.example must start with ws:// or wss://"),
        (&["sync", "ws://"][..], "the peer ws:// is not a URL: empty host"),
        (&["sync", "ws://127.0.0.1:1", "--local", "ftp://x"][..], "--local ftp://x must start with ws:// or wss://"),
        (&["sync", "ws://127.0.0.1:1", "--filter", "[1]"][..], "--filter: "),
    ] {
        let out = on(dir.path()).args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_running_relay_without_an_admin_token_cannot_be_asked_to_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, addr) = start_with(dir.path(), &[]);
    let out = on(dir.path()).args(["sync", "ws://127.0.0.1:1", "--local", &format!("ws://{addr}")]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("asking it to sync needs admin.token (HEARTH_ADMIN__TOKEN)"), "{err}");
}
