//! `hearth dev` as a developer runs it: a child process, its ready line, its frame log, its
//! temporary directory.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};

use crate::common::*;
use serde_json::{Value, json};

/// A running `hearth dev` and what it printed; killed when dropped (a test that fails before it
/// stops it leaves no process behind).
struct Dev {
    running: Running,
    ready: Value,
}

impl Dev {
    fn start(args: &[&str]) -> Dev {
        let mut child = crate::common::hearth()
            .args(["dev", "--port", "0"])
            .args(args)
            .env_remove("RUST_LOG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
        let ready: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        Dev { running: Running(child), ready }
    }

    fn url(&self, key: &str) -> String {
        self.ready[key].as_str().unwrap().to_string()
    }

    fn data_dir(&self) -> std::path::PathBuf {
        self.url("data_dir").into()
    }

    /// SIGTERM; the exit code and everything it wrote on stderr.
    fn stop(mut self) -> (Option<i32>, String) {
        let status = Command::new("kill").arg("-TERM").arg(self.running.0.id().to_string()).status().unwrap();
        assert!(status.success());
        let mut log = String::new();
        self.running.0.stderr.take().unwrap().read_to_string(&mut log).unwrap();
        (self.running.0.wait().unwrap().code(), log)
    }
}

fn seed_file(dir: &std::path::Path, events: &[hearth::protocol::Event]) -> std::path::PathBuf {
    let path = dir.join("seed.jsonl");
    std::fs::write(&path, events.iter().map(|e| format!("{}\n", json!(e))).collect::<String>()).unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_is_ready_at_once_serves_its_seed_logs_every_frame_and_leaves_nothing_behind() {
    let k = keys(70);
    let seeded: Vec<_> = (0..3).map(|i| sign(&k, now() - 10 + i, 1, &[], &format!("seed {i}"))).collect();
    let scratch = tempfile::tempdir().unwrap();
    let seed = seed_file(scratch.path(), &seeded);
    let dev = Dev::start(&["--seed", seed.to_str().unwrap()]);
    assert_eq!(dev.url("ws"), dev.url("http").replace("http://", "ws://"));
    assert!(dev.data_dir().is_dir());
    assert_eq!(dev.url("admin_token").len(), 64);

    // The seed is served, and a new event is taken.
    let mut c = Client::connect(&dev.url("ws")).await;
    let mut want: Vec<String> = seeded.iter().map(|e| e.id.to_hex()).collect();
    want.reverse();
    assert_eq!(c.req_ids("sub1", vec![json!({"kinds": [1]})]).await, want);
    let fresh = sign(&k, now(), 1, &[], "fresh");
    assert_ok(&c.publish(&fresh).await, &fresh.id.to_hex(), true, "");
    // NIP-11 and the admin API with the printed token answer on the http URL.
    let http = web();
    let info = nip11_at(&dev.url("http")).await;
    assert_eq!(info["software"], "hearth");
    assert!(info.get("hearth_limits").is_none(), "quotas are off: {info}");
    let relay = http
        .get(format!("{}/admin/v1/relay", dev.url("http")))
        .bearer_auth(dev.url("admin_token"))
        .send()
        .await
        .unwrap();
    assert_eq!(relay.status(), 200);
    let count = http
        .post(format!("{}/api/v1/count", dev.url("http")))
        .header("content-type", "application/json")
        .body(json!({"filters": [{"kinds": [1]}]}).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(count.json::<Value>().await.unwrap(), json!({"count": 4}));
    // Groups are on: a private group's message is logged without its words.
    let owner = keys(71);
    drop(c);
    let mut c = Client::connect(&dev.url("ws")).await;
    assert_eq!(c.auth(&owner, &dev.url("ws")).await[2], true);
    for (kind, tags, content) in [(9007, vec![], ""), (9002, vec!["private"], ""), (9, vec![], "swordfish")] {
        let mut all: Vec<&[&str]> = vec![&["h", "den"]];
        let flag = [tags.first().copied().unwrap_or_default()];
        if !tags.is_empty() {
            all.push(&flag);
        }
        let e = sign(&owner, now(), kind, &all, content);
        assert_ok(&c.publish(&e).await, &e.id.to_hex(), true, "");
    }
    // A report is its author's and the admins' only: logged without its words.
    let report = sign(&owner, now(), 1984, &[&["p", &keys(72).public_key().to_hex(), "spam"]], "marmalade");
    assert_ok(&c.publish(&report).await, &report.id.to_hex(), true, "");
    // A direct message and a gift wrap: their parties' only, logged without their words.
    let to = keys(73).public_key().to_hex();
    let dm = sign(&owner, now(), 4, &[&["p", &to]], "quince");
    let wrap = sign(&keys(74), now(), 1059, &[&["p", &to]], "persimmon");
    for e in [&dm, &wrap] {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
    drop(c);

    let dir = dev.data_dir();
    let (code, log) = dev.stop();
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("hearth dev: seeded 3 of 3 events from"), "{log}");
    assert!(log.contains(r#" <- REQ sub1 {"kinds":[1]}"#), "{log}");
    let short = &fresh.id.to_hex()[..4];
    assert!(
        log.contains(&format!(" <- EVENT {short}… kind 1 by {}… \"fresh\"", &k.public_key().to_hex()[..4])),
        "{log}"
    );
    assert!(log.contains(&format!(" -> OK {short}… true \"\"")), "{log}");
    assert!(log.contains(" -> EOSE sub1"), "{log}");
    assert!(log.contains("http POST /api/v1/count -> 200"), "{log}");
    assert!(log.contains("kind 9 by") && log.contains("(private group: content withheld)"), "{log}");
    assert!(!log.contains("swordfish"), "{log}");
    assert!(log.contains("kind 1984 by") && log.contains("(private kind: content withheld)"), "{log}");
    assert!(!log.contains("marmalade"), "{log}");
    for (e, words) in [(&dm, "quince"), (&wrap, "persimmon")] {
        let line = format!(
            " <- EVENT {}… kind {} by {}… (private kind: content withheld)",
            &e.id.to_hex()[..4],
            e.kind.0,
            &e.pubkey.to_hex()[..4]
        );
        assert!(log.contains(&line), "{line} in {log}");
        assert!(!log.contains(words), "{log}");
    }
    assert!(!dir.exists(), "{} is still there", dir.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_with_data_keeps_it_and_with_limits_shows_each_refusal_and_its_limit() {
    let scratch = tempfile::tempdir().unwrap();
    let data = scratch.path().join("devdata");
    let k = keys(71);
    let dev = Dev::start(&["--data", data.to_str().unwrap(), "--limits"]);
    assert_eq!(dev.data_dir(), data);
    let mut c = Client::connect(&dev.url("ws")).await;
    // The default human quota: bursts of 50 frames. Sent at once, 60 events meet it.
    let mut refusals = 0;
    for i in 0..60 {
        let ok = c.publish(&sign(&k, now() - 200 + i, 1, &[], &format!("n{i}"))).await;
        if ok[2] == false {
            assert!(ok[3].as_str().unwrap().starts_with("rate-limited: quota exceeded (ws_events); retry in "), "{ok}");
            refusals += 1;
        }
    }
    assert!(refusals > 0);
    drop(c);
    let (code, log) = dev.stop();
    assert_eq!(code, Some(0));
    let refused = log.lines().filter(|l| l.contains("!! refused")).collect::<Vec<_>>();
    assert_eq!(refused.len(), refusals, "{log}");
    for line in &refused {
        assert!(line.contains(" -> OK ") && line.ends_with("  !! refused: rate-limited (ws_events)"), "{line}");
    }
    assert!(data.join("events.log").is_file(), "--data is kept");

    // The same directory again: the events are still there, and --quiet logs no frame.
    let dev = Dev::start(&["--data", data.to_str().unwrap(), "--quiet"]);
    let mut c = Client::connect(&dev.url("ws")).await;
    let stored = c.req_ids("all", vec![json!({"authors": [k.public_key().to_hex()], "limit": 500})]).await;
    assert_eq!(stored.len(), 60 - refusals);
    drop(c);
    let (code, log) = dev.stop();
    assert_eq!(code, Some(0));
    assert!(!log.contains(" <- ") && !log.contains(" -> "), "{log}");
}
