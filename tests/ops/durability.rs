//! Storage through the real server: restarts, concurrent duplicates, large query sets, slow
//! consumers.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::*;
use hearth::protocol::{Event, Filter};
use serde_json::{Value, json};

#[tokio::test]
async fn events_survive_a_restart() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(1);
    let events: Vec<_> = (0..20).map(|i| sign(&k, 1000 + i, 1, &[], &format!("n{i}"))).collect();
    for e in &events {
        assert_eq!(c.publish(e).await[2], true);
    }
    let replaceable = sign(&k, 5000, 0, &[], "profile");
    assert_ok(&c.publish(&replaceable).await, &replaceable.id.to_hex(), true, "");
    drop(c);
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, generous).await;
    let mut c = relay.connect().await;
    let mut expected: Vec<String> = events.iter().rev().map(|e| e.id.to_hex()).collect();
    expected.insert(0, replaceable.id.to_hex());
    assert_eq!(c.req_ids("s", vec![json!({})]).await, expected);
    // A re-sent event is still a duplicate after the restart.
    assert_eq!(c.publish(&events[0]).await[3], "duplicate: already have this event");
}

#[tokio::test]
async fn concurrent_duplicates_are_stored_once() {
    let relay = TestRelay::start(generous).await;
    let k = keys(2);
    let events: Vec<_> = (0..100).map(|i| sign(&k, 1000 + i, 1, &[], &format!("d{i}"))).collect();
    let mut senders = Vec::new();
    for _ in 0..3 {
        let mut c = relay.connect().await;
        let events = events.clone();
        senders.push(tokio::spawn(async move {
            for e in &events {
                c.send(json!(["EVENT", e])).await;
            }
            let mut oks = Vec::new();
            for _ in 0..events.len() {
                oks.push(c.recv().await);
            }
            oks
        }));
    }
    let mut messages: HashMap<String, Vec<String>> = HashMap::new();
    for s in senders {
        for ok in s.await.unwrap() {
            assert_eq!(ok[0], "OK");
            assert_eq!(ok[2], true, "{ok}");
            messages.entry(ok[1].as_str().unwrap().to_string()).or_default().push(ok[3].as_str().unwrap().to_string());
        }
    }
    assert_eq!(messages.len(), 100);
    for (id, msgs) in &messages {
        let fresh = msgs.iter().filter(|m| m.is_empty()).count();
        let dups = msgs.iter().filter(|m| *m == "duplicate: already have this event").count();
        assert_eq!((fresh, dups), (1, 2), "{id}: {msgs:?}");
    }
    let mut c = relay.connect().await;
    assert_eq!(c.req("all", vec![json!({"limit": 500})]).await.len(), 100);
}

/// The expected answer of a filter, computed from the list of events by brute force.
fn model(events: &[Event], filter: &Value) -> Vec<String> {
    let f: Filter = serde_json::from_value(filter.clone()).unwrap();
    let mut hits: Vec<&Event> = events.iter().filter(|e| f.matches(e)).collect();
    hits.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(a.id.cmp(&b.id)));
    hits.truncate(f.limit.unwrap_or(u64::MAX) as usize);
    hits.iter().map(|e| e.id.to_hex()).collect()
}

#[tokio::test]
async fn query_over_ten_thousand_events_returns_exactly_the_right_events_in_order() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_limit = 10_000;
        // What is tested is the answer, not admission: under the suite's load (the crash loop
        // runs beside it) a publish may wait for a handler longer than the default 500 ms.
        c.limits.handler_wait_ms = 30_000;
    })
    .await;
    let authors: Vec<_> = (1..=20).map(keys).collect();
    let topics = ["rust", "nostr", "sled", "tokio", "warp"];
    let events: Vec<Event> = (0..10_000u64)
        .map(|i| {
            let author = &authors[(i % 20) as usize];
            let kind = [1, 7, 30023][(i % 3) as usize];
            let d = format!("d{i}");
            let topic = topics[(i % 5) as usize];
            let at = 1_700_000_000 + (i * 7919) % 5000; // many equal timestamps
            sign(author, at, kind, &[&["t", topic], &["d", &d]], &format!("event {i}"))
        })
        .collect();
    // Publish over 4 connections, pipelined.
    let mut tasks = Vec::new();
    for chunk in events.chunks(2500) {
        let mut c = relay.connect().await;
        let chunk = chunk.to_vec();
        tasks.push(tokio::spawn(async move {
            for e in &chunk {
                c.send(json!(["EVENT", e])).await;
            }
            for _ in 0..chunk.len() {
                let ok = c.recv().await;
                assert_eq!(ok[2], true, "{ok}");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let a0 = authors[0].public_key().to_hex();
    let a1 = authors[1].public_key().to_hex();
    let some_ids: Vec<String> = events.iter().step_by(500).map(|e| e.id.to_hex()).collect();
    // Of every topic, author and kind, so that tag and author conditions on ids keep some.
    let mixed_ids: Vec<String> = events.iter().step_by(333).map(|e| e.id.to_hex()).collect();
    let filters = vec![
        json!({"limit": 10_000}),
        json!({"limit": 50}),
        json!({"ids": some_ids}),
        json!({"ids": some_ids, "kinds": [7]}),
        json!({"ids": mixed_ids, "#t": ["sled", "warp"]}),
        json!({"ids": mixed_ids, "authors": [a0, a1], "until": 1_700_003_000}),
        json!({"authors": [a0], "limit": 10_000}),
        json!({"authors": [a0, a1], "limit": 37}),
        json!({"kinds": [7], "limit": 10_000}),
        json!({"authors": [a1], "kinds": [1, 30023], "limit": 10_000}),
        json!({"#t": ["sled"], "limit": 10_000}),
        json!({"#t": ["sled", "warp"], "kinds": [1], "limit": 100}),
        json!({"#d": ["d42", "d4242"], "limit": 10}),
        json!({"since": 1_700_001_000, "until": 1_700_001_100, "limit": 10_000}),
        json!({"authors": [a0], "since": 1_700_002_000, "until": 1_700_003_000, "limit": 10_000}),
        json!({"kinds": [30023], "#t": ["rust"], "since": 1_700_004_000, "limit": 10_000}),
    ];
    let mut c = relay.connect().await;
    for (i, f) in filters.iter().enumerate() {
        let want = model(&events, f);
        let got = c.req_ids(&format!("q{i}"), vec![f.clone()]).await;
        assert!(!want.is_empty(), "filter {f} matches nothing: a weak check");
        assert_eq!(got, want, "filter {f}");
    }
}

#[tokio::test]
async fn a_client_that_does_not_read_is_disconnected_and_others_are_unaffected() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.server.max_outbound_queue = 4;
    })
    .await;
    let mut slow = relay.connect().await;
    slow.req("all", vec![json!({"kinds": [1]})]).await;
    let mut publisher = relay.connect().await;
    let mut bystander = relay.connect().await;
    let k = keys(3);
    let big = "x".repeat(30_000);
    // ~12 MB of live events: more than the socket buffers hold for a client that never reads.
    let events: Vec<_> = (0..400).map(|i| sign(&k, 1000 + i, 1, &[], &format!("{i}{big}"))).collect();
    for e in &events {
        publisher.send(json!(["EVENT", e])).await;
    }
    for _ in &events {
        assert_eq!(publisher.recv().await[2], true);
    }
    // The slow client finds a NOTICE saying why, then the connection ends.
    let mut got_notice = false;
    loop {
        match tokio::time::timeout(STEP, futures_util::StreamExt::next(&mut slow.ws)).await.unwrap() {
            Some(Ok(tokio_tungstenite::tungstenite::Message::Text(t))) => {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v[0] == "NOTICE" {
                    assert_eq!(v[1], "error: disconnected: the client is not reading its events fast enough");
                    got_notice = true;
                }
            }
            Some(Ok(tokio_tungstenite::tungstenite::Message::Close(_))) | None | Some(Err(_)) => break,
            Some(Ok(_)) => {}
        }
    }
    assert!(got_notice);
    // Everyone else is fine.
    let e = sign(&k, 9999, 1, &[], "after");
    assert_eq!(publisher.publish(&e).await[2], true);
    bystander.send(json!(["COUNT", "n", {"kinds": [1]}])).await;
    assert_eq!(bystander.recv_within(Duration::from_secs(5)).await, Some(json!(["COUNT", "n", {"count": 401}])));
}

#[tokio::test]
async fn a_write_that_cannot_reach_the_event_log_is_refused_and_the_relay_recovers() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(3);
    let first = sign(&k, 1000, 1, &[], "logged");
    assert_ok(&c.publish(&first).await, &first.id.to_hex(), true, "");
    // The event log moved away under the running relay: writing to the file it has open would be
    // acknowledged and then lost, so nothing may be acknowledged.
    let log = relay.data_dir().join("events.log");
    let moved = relay.data_dir().join("events.log.moved");
    std::fs::rename(&log, &moved).unwrap();
    let second = sign(&k, 1001, 1, &[], "not logged");
    assert_eq!(c.publish(&second).await, json!(["OK", second.id.to_hex(), false, "error: could not store the event"]));
    // Reads and other connections are unaffected.
    let mut other = relay.connect().await;
    assert_eq!(other.req_ids("s", vec![json!({"ids": [first.id.to_hex()]})]).await, vec![first.id.to_hex()]);
    assert_eq!(other.req_ids("s1", vec![json!({"ids": [second.id.to_hex()]})]).await, Vec::<String>::new());
    other.send(json!(["CLOSE", "s1"])).await;
    // Once the file is back, the same event is accepted and served.
    std::fs::rename(&moved, &log).unwrap();
    assert_ok(&c.publish(&second).await, &second.id.to_hex(), true, "");
    assert_eq!(other.req_ids("s2", vec![json!({"ids": [second.id.to_hex()]})]).await, vec![second.id.to_hex()]);
}

/// Runs `hearth-bench crash` (the crash loop has one implementation, the bench's) with `args`
/// and returns its report, failing with its error (which names the lost event and the relay's
/// last log lines) when it finds anything acknowledged missing.
fn crash_run(args: &[&str]) -> serde_json::Value {
    let out = std::process::Command::new(crate::common::bench_exe())
        .arg("crash")
        .args(args)
        // The start deadline only tells a hung start from a slow one; starts are timed by the bench.
        .args(["--start-deadline-secs", "300"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "hearth-bench crash failed:\n{stderr}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The crash loop, every kill a power cut: 50 SIGKILLs at seeded random moments while three
/// clients publish notes, expiring notes, profile versions and deletions, a third of them a
/// moment after a SIGTERM (into the stop, some the moment sled writes its snapshot). The relay's
/// data directory is on the lossy filesystem (`hearth-bench lossy`, FUSE), which after each kill
/// loses everything written and not synced — the event log's tail, sled's pages, the search
/// index — as a power cut does, where a SIGKILL alone keeps the page cache. After every restart
/// everything acknowledged is served as acknowledged, nothing twice. Without the sync before the
/// acknowledgement (`Log::write` not calling `sync`) this fails at the first restart: an
/// acknowledged note is not served.
#[test]
fn fifty_power_cuts_while_publishing_lose_nothing_acknowledged() {
    let report = crash_run(&["--kills", "50", "--seed", "20261201", "--power-cut"]);
    assert_eq!(
        (&report["kills"], &report["power_cut"]),
        (&serde_json::json!(50), &serde_json::json!(true)),
        "{report}"
    );
    // The loop did publish: every kind of write was acknowledged along the way.
    assert!(report["acked"].as_u64().unwrap() > 500, "{report}");
    assert!(report["deletions"].as_u64().unwrap() > 10, "{report}");
    assert!(report["stops_cut"].as_u64().unwrap() >= 10, "{report}");
    // The cuts did throw unsynced bytes away.
    assert!(report["power_cuts_that_lost_bytes"].as_u64().unwrap() >= 25, "{report}");
}

/// The same loop on the PostgreSQL store: 20 power cuts, each taking down the relay and the
/// server (an immediate shutdown) and then the disk under the server's data directory (a lossy
/// filesystem of its own), so PostgreSQL restarts on only what it had synced and runs its crash
/// recovery. Everything acknowledged is served after every restart. With the store's
/// connections at `synchronous_commit = off` instead of `on` this fails at the first restart.
#[test]
fn twenty_power_cuts_under_postgresql_lose_nothing_acknowledged() {
    crate::common::install_postgres();
    let report = crash_run(&["--kills", "20", "--seed", "20261205", "--power-cut", "--postgres"]);
    assert_eq!(
        (&report["kills"], &report["power_cut"], &report["postgres"]),
        (&serde_json::json!(20), &serde_json::json!(true), &serde_json::json!(true)),
        "{report}"
    );
    assert!(report["acked"].as_u64().unwrap() > 200, "{report}");
    assert!(report["deletions"].as_u64().unwrap() > 5, "{report}");
    // Both disks (the relay's and the server's) lost unsynced bytes at cuts.
    assert!(report["power_cuts_that_lost_bytes"].as_u64().unwrap() >= 20, "{report}");
}

/// A tmpfs of `size` on a fresh directory, lazily unmounted when dropped. Mounting needs root,
/// which the test machines and CI have; without it the test fails saying so.
struct Tmpfs(tempfile::TempDir);

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(status.success(), "mounting a tmpfs needs root (or CAP_SYS_ADMIN)");
        Tmpfs(dir)
    }

    /// Fills what space is left with a file; returns it (remove it to give the space back).
    fn fill(&self) -> std::path::PathBuf {
        use std::io::Write;
        let path = self.0.path().join("filler");
        let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).unwrap();
        let chunk = vec![0u8; 4096];
        while file.write_all(&chunk).and_then(|()| file.sync_data()).is_ok() {}
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg("-l").arg(self.0.path()).status();
    }
}

/// The relay binary on `data` (killed when dropped) and its address.
struct Relay {
    /// Held for its drop, which kills the relay.
    _running: Running,
    addr: String,
}

impl Relay {
    fn start(data: &std::path::Path) -> Relay {
        let dir = data.parent().expect("the data directory is in a folder");
        let (running, addr) = start_with(dir, &[("HEARTH_LIMITS__ENABLED", "false")]);
        Relay { _running: running, addr }
    }

    fn url(&self) -> String {
        format!("ws://{}", self.addr)
    }
}

#[tokio::test]
async fn a_full_disk_refuses_writes_keeps_reads_recovers_by_itself_and_survives_a_kill() {
    let disk = Tmpfs::mount("24m");
    let data = disk.0.path().join("data");
    let relay = Relay::start(&data);
    let mut c = Client::connect(&relay.url()).await;
    let k = keys(50);
    let mut acked: Vec<Event> = Vec::new();
    let mut refused: Vec<Event> = Vec::new();
    let t0 = now() - 10_000;
    for i in 0..5 {
        let e = sign(&k, t0 + i, 1, &[], &format!("before the disk fills {i}"));
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
        acked.push(e);
    }
    // The disk fills up: every write from now on is refused with an `error:` OK, never
    // acknowledged (a group already under way may still land: it is then acknowledged).
    let filler = disk.fill();
    let big = "x".repeat(8_000);
    for i in 0..20 {
        let e = sign(&k, t0 + 100 + i, 1, &[], &format!("{big} {i}"));
        let ok = c.publish(&e).await;
        match ok[2].as_bool() {
            Some(true) => acked.push(e),
            _ => {
                assert_eq!(ok, json!(["OK", e.id.to_hex(), false, "error: could not store the event"]));
                refused.push(e);
            }
        }
    }
    assert!(refused.len() >= 15, "{} of 20 refused on a full disk", refused.len());
    // Over REST: 503 with a Retry-After, in the publish shape.
    let e = sign(&k, t0 + 200, 1, &[], &big);
    let resp = web()
        .post(format!("http://{}/api/v1/events", relay.addr))
        .header("content-type", "application/json")
        .body(json!(e).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "5");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["message"], "error: could not store the event");
    refused.push(e);
    // Reads go on, from another connection too.
    let ids: Vec<String> = acked.iter().map(|e| e.id.to_hex()).collect();
    let mut reader = Client::connect(&relay.url()).await;
    let mut served = reader.req_ids("r", vec![json!({"ids": ids})]).await;
    served.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(served, want);
    // Space returns: writes resume without a restart (the refused event is taken now).
    std::fs::remove_file(&filler).unwrap();
    let again = refused.remove(0);
    assert_eq!(c.publish(&again).await, json!(["OK", again.id.to_hex(), true, ""]));
    acked.push(again);
    for i in 0..3 {
        let e = sign(&k, t0 + 300 + i, 1, &[], "after the space came back");
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
        acked.push(e);
    }
    // Full again, a refusal, and a kill -9 in that state; then space, and a restart.
    let filler = disk.fill();
    let e = sign(&k, t0 + 400, 1, &[], &big);
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), false, "error: could not store the event"]));
    refused.push(e);
    drop(c);
    drop(reader);
    drop(relay);
    std::fs::remove_file(&filler).unwrap();
    let relay = Relay::start(&data);
    let mut c = Client::connect(&relay.url()).await;
    let mut by_author = c.req_ids("a", vec![json!({"authors": [k.public_key().to_hex()], "limit": 500})]).await;
    by_author.sort();
    let mut want: Vec<String> = acked.iter().map(|e| e.id.to_hex()).collect();
    want.sort();
    assert_eq!(by_author, want, "every acknowledged event, and only those, after the kill");
    for e in &acked {
        assert_eq!(c.req_ids("i", vec![json!({"ids": [e.id.to_hex()]})]).await, vec![e.id.to_hex()]);
        c.send(json!(["CLOSE", "i"])).await;
    }
}
