//! Offline operations on a data directory, as an operator runs them: `hearth import` and
//! `hearth export` through the real binary, and their refusal while a relay holds the directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

pub(crate) fn hearth(data: &Path) -> Command {
    let mut cmd = crate::common::hearth();
    cmd.env("HEARTH_STORAGE__DATA_DIR", data).env("HEARTH_SERVER__BIND", "127.0.0.1:0");
    cmd
}

pub(crate) fn import(data: &Path, input: &[u8]) -> Output {
    let mut child =
        hearth(data).arg("import").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

pub(crate) fn export(data: &Path, filter: Option<&str>) -> Output {
    let mut cmd = hearth(data);
    cmd.arg("export");
    if let Some(f) = filter {
        cmd.arg("--filter").arg(f);
    }
    cmd.output().unwrap()
}

fn summary(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

fn line(e: &hearth::protocol::Event) -> String {
    serde_json::to_string(e).unwrap()
}

#[test]
fn import_reports_every_outcome_and_export_gives_back_what_is_stored_oldest_first() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (alice, bob) = (keys(1), keys(2));
    let now = now();
    let first = sign(&alice, now - 500, 1, &[], "first");
    let second = sign(&bob, now - 400, 1, &[], "second \"quoted\" \u{1F525}");
    let profile_new = sign(&alice, now - 300, 0, &[], r#"{"name":"new"}"#);
    let profile_old = sign(&alice, now - 350, 0, &[], r#"{"name":"old"}"#);
    let doomed = sign(&bob, now - 200, 1, &[], "deleted before it arrives");
    let deletion = sign(&bob, now - 100, 5, &[&["e", &doomed.id.to_hex()]], "");
    let expired = sign(&alice, now - 50, 1, &[&["expiration", &(now - 10).to_string()]], "gone");
    let ephemeral = sign(&alice, now - 40, 20001, &[], "live only");
    let mut forged: Value = serde_json::to_value(sign(&alice, now - 30, 1, &[], "signed")).unwrap();
    forged["content"] = json!("changed after signing");
    // An export of another relay lists keys in its own order, with spaces: the same event.
    let reordered: Value = serde_json::to_value(&second).unwrap();
    let reordered = format!(
        "{{ \"sig\": {}, \"tags\": [], \"content\": {}, \"kind\": 1, \"created_at\": {}, \"pubkey\": {}, \"id\": {} }}",
        reordered["sig"], reordered["content"], reordered["created_at"], reordered["pubkey"], reordered["id"]
    );
    let input = [
        line(&second),
        line(&first),
        String::new(),
        reordered,
        line(&profile_new),
        line(&profile_old),
        line(&deletion),
        line(&doomed),
        line(&expired),
        "{\"not\": \"an event\"".to_string(),
        line(&ephemeral),
        forged.to_string(),
    ]
    .join("\n");
    let out = import(&data, input.as_bytes());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert_eq!(
        summary(&out),
        json!({"read": 11, "stored": 4, "duplicate": 1, "superseded": 1, "deleted": 1, "expired": 1, "invalid": 3})
    );
    // Each bad line by its number (the empty line 3 counts as a line, not as read).
    assert!(stderr.contains("line 10: invalid: "), "{stderr}");
    assert!(stderr.contains("line 11: invalid: kind 20001 is never stored"), "{stderr}");
    assert!(stderr.contains("line 12: invalid: "), "{stderr}");
    assert_eq!(stderr.lines().filter(|l| l.starts_with("line ")).count(), 3, "{stderr}");

    let out = export(&data, None);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let exported = String::from_utf8(out.stdout).unwrap();
    let want: Vec<String> = [&first, &second, &profile_new, &deletion].iter().map(|e| line(e)).collect();
    let got: Vec<&str> = exported.lines().collect();
    assert_eq!(got, want.iter().map(String::as_str).collect::<Vec<_>>());

    let out = export(&data, Some(r#"{"kinds":[0]}"#));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), format!("{}\n", line(&profile_new)));
    let out = export(&data, Some("{\"kinds\":"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("hearth: --filter: "), "{out:?}");
}

#[test]
fn the_vectors_survive_export_import_export_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let vectors = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/vectors/valid.jsonl")).unwrap();
    let out = import(&a, &vectors);
    // The ephemeral kinds among them are never stored; everything else is.
    let ephemeral = String::from_utf8_lossy(&vectors)
        .lines()
        .filter(|l| (20000..30000).contains(&serde_json::from_str::<Value>(l).unwrap()["kind"].as_u64().unwrap()))
        .count() as u64;
    let first = summary(&out);
    assert_eq!(first["invalid"], ephemeral, "{first} {}", String::from_utf8_lossy(&out.stderr));
    // Stored as they came; a later version or deletion among them replaced some since.
    let exported = export(&a, None).stdout;
    let lines = exported.iter().filter(|&&b| b == b'\n').count() as u64;
    assert!(lines > 100 && lines <= first["stored"].as_u64().unwrap(), "{lines} {first}");
    let out = import(&b, &exported);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        summary(&out),
        json!({"read": lines, "stored": lines, "duplicate": 0, "superseded": 0,
        "deleted": 0, "expired": 0, "invalid": 0})
    );
    assert_eq!(String::from_utf8(export(&b, None).stdout).unwrap(), String::from_utf8(exported).unwrap());
}

#[test]
fn offline_commands_refuse_a_data_directory_a_relay_holds_and_say_what_to_do_instead() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut relay = crate::common::Running(hearth(&data).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap());
    listening_addr(&mut relay.0);
    let held = format!("hearth: data directory {} is in use by a running hearth", data.display());
    let out = export(&data, None);
    let want = format!(
        "{held}: read it through the running relay instead, `GET /admin/v1/export` (admin.token), or stop it first\n"
    );
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want));
    let out = import(&data, line(&sign(&keys(1), now(), 1, &[], "x")).as_bytes());
    let want = format!(
        "{held}: publish through the running relay instead (`hearth publish --relay ws://… < FILE`), or stop it first\n"
    );
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want));
    let out = hearth(&data).arg("compact").output().unwrap();
    let want = format!(
        "{held}: ask the running relay instead, `POST /admin/v1/store/compact` (it compacts while serving), or stop it first\n"
    );
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want));
    let out = hearth(&data).arg("check").output().unwrap();
    let want = format!("{held}: stop the relay first (systemctl stop hearth, or SIGTERM)\n");
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want));
    drop(relay);
    // Once the relay is gone the directory opens.
    assert_eq!(export(&data, None).status.code(), Some(0));
}

/// A relay on `data` (admin token `t`, `env` besides) and the address it listens on.
fn spawn_relay(data: &Path, env: &[(&str, &str)]) -> (crate::common::Running, String) {
    let mut cmd = hearth(data);
    cmd.env("HEARTH_ADMIN__TOKEN", "t").stderr(Stdio::piped());
    for (key, value) in env {
        cmd.env(key, value);
    }
    let mut relay = crate::common::Running(cmd.spawn().unwrap());
    let addr = listening_addr(&mut relay.0);
    (relay, addr)
}

async fn store_stats(addr: &str) -> Value {
    let (status, body) =
        http_at(&format!("http://{addr}/admin/v1/store"), reqwest::Method::GET, None, Some("t"), None).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// A kill in a compaction's last step leaves its remap to finish after the restart: until it has,
/// the relay rightly reports a compaction running (and a new one is 409).
async fn until_no_compaction_runs(addr: &str) {
    poll("the compaction to end", 3 * STEP, async || {
        let stats = store_stats(addr).await;
        if stats["compacting"] == true { Err(stats.to_string()) } else { Ok(()) }
    })
    .await
}

async fn start_compaction(addr: &str) -> (u16, Value) {
    let url = format!("http://{addr}/admin/v1/store/compact");
    let (status, body) = http_at(&url, reqwest::Method::POST, None, Some("t"), None).await;
    (status.as_u16(), body)
}

fn compact(data: &Path) -> Output {
    hearth(data).arg("compact").output().unwrap()
}

fn log_files(data: &Path) -> Vec<(String, u64)> {
    let mut files: Vec<(String, u64)> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_name().to_string_lossy().starts_with("events."))
        .map(|e| (e.file_name().to_string_lossy().to_string(), e.metadata().unwrap().len()))
        .collect();
    files.sort();
    files
}

#[test]
fn compaction_gives_back_dead_space_keeps_every_live_event_and_survives_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (alice, bob) = (keys(1), keys(2));
    let start = now() - 100_000;
    let mut input = Vec::new();
    // 400 versions of one profile: 399 of them dead once the next arrives.
    for i in 0..400 {
        input.push(line(&sign(&alice, start + i, 0, &[], &format!("{{\"about\":\"{i} {}\"}}", "p".repeat(1500)))));
    }
    let notes: Vec<_> = (0..200).map(|i| sign(&bob, start + 1000 + i, 1, &[], &format!("note {i}"))).collect();
    input.extend(notes.iter().map(line));
    for note in &notes[..20] {
        input.push(line(&sign(&bob, start + 2000, 5, &[&["e", &note.id.to_hex()]], "")));
    }
    let out = import(&data, input.join("\n").as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let live = export(&data, None).stdout;
    assert_eq!(live.iter().filter(|&&b| b == b'\n').count(), 1 + 180 + 20);
    let before = log_files(&data);
    assert_eq!(before.len(), 1, "{before:?}");
    let dir_bytes = || -> u64 { std::fs::read_dir(&data).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum() };
    let original_bytes = dir_bytes();

    // kill -9 at moments through a compaction (the later ones may let one finish): each time
    // every live event is still there.
    for delay_ms in [0, 3, 10, 25, 40, 60, 90, 130, 180] {
        let mut child = hearth(&data).arg("compact").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        std::thread::sleep(Duration::from_millis(delay_ms));
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(export(&data, None).stdout, live, "after a kill at {delay_ms} ms");
        assert_eq!(log_files(&data).len(), 1, "a stale generation is removed at open: {:?}", log_files(&data));
    }
    // And one kill that is sure to land in the compaction: the moment its new file appears.
    let current = log_files(&data)[0].0.clone();
    let generation: u64 =
        current.strip_prefix("events.").and_then(|n| n.strip_suffix(".log")).and_then(|n| n.parse().ok()).unwrap_or(0);
    let next = data.join(format!("events.{}.log", generation + 1));
    let mut child = crate::common::Running(
        hearth(&data).arg("compact").stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap(),
    );
    let deadline = std::time::Instant::now() + STEP;
    while !next.exists() {
        assert!(std::time::Instant::now() < deadline, "the compaction never began writing {}", next.display());
        assert!(child.0.try_wait().unwrap().is_none(), "the compaction ended before its new file was seen");
        std::thread::sleep(Duration::from_micros(100));
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    drop(child);
    assert_eq!(export(&data, None).stdout, live, "after a kill as the new generation was written");
    assert_eq!(log_files(&data).len(), 1, "a stale generation is removed at open: {:?}", log_files(&data));

    let out = compact(&data);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let done = summary(&out);
    assert!(done["after_bytes"].as_u64().unwrap() <= done["before_bytes"].as_u64().unwrap(), "{done}");
    assert!(done["after_bytes"].as_u64().unwrap() * 2 < original_bytes, "{done} {original_bytes}");
    assert!(done["at"].as_u64().unwrap() >= now() - 60, "{done}");
    let after = log_files(&data);
    assert_eq!(after.len(), 1, "{after:?}");
    assert_ne!(after[0].0, before[0].0, "the log moved to its next generation");
    assert!(after[0].1 * 10 < before[0].1, "{before:?} -> {after:?}");
    assert_eq!(export(&data, None).stdout, live);
    // A relay on the compacted directory reports it.
    let (mut relay, addr) = spawn_relay(&data, &[]);
    let stats: Value = tokio::runtime::Runtime::new().unwrap().block_on(store_stats(&addr));
    let _ = relay.0.kill();
    let _ = relay.0.wait();
    let generation = after[0].0.trim_start_matches("events.").trim_end_matches(".log").parse::<u64>().unwrap();
    assert_eq!((&stats["events"], &stats["log_generation"]), (&json!(201), &json!(generation)), "{stats}");
    assert_eq!(stats["dead_bytes"], 0, "{stats}");
    assert_eq!(stats["last_compaction"], done, "{stats}");

    // The compacted store takes new writes after its new end.
    let later = sign(&bob, start + 3000, 1, &[], "after the compaction");
    assert_eq!(summary(&import(&data, line(&later).as_bytes()))["stored"], 1);
    let mut want = live.clone();
    want.extend_from_slice(format!("{}\n", line(&later)).as_bytes());
    assert_eq!(export(&data, None).stdout, want);
    // A stray file of another generation (a compaction cut off while writing) is removed.
    std::fs::write(data.join("events.99.log"), b"partial").unwrap();
    assert_eq!(export(&data, None).stdout, want);
    assert_eq!(log_files(&data).len(), 1, "{:?}", log_files(&data));
}

#[test]
fn check_finds_a_flipped_byte_and_the_store_still_serves_every_other_event() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let author = keys(3);
    let notes: Vec<_> = (0..50).map(|i| sign(&author, now() - 1000 + i, 1, &[], &format!("note {i:03}"))).collect();
    let input: Vec<String> = notes.iter().map(line).collect();
    assert_eq!(import(&data, input.join("\n").as_bytes()).status.code(), Some(0));
    let check = || hearth(&data).arg("check").output().unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"blobs\":0,\"events\":50,\"frames\":50,\"problems\":0}\n");

    // One byte in the middle of the log, inside one event's content.
    let log = data.join("events.log");
    let mut bytes = std::fs::read(&log).unwrap();
    let victim = &notes[25];
    let at = bytes.windows(victim.content.len()).position(|w| w == victim.content.as_bytes()).unwrap();
    bytes[at + 2] ^= 0x20;
    std::fs::write(&log, &bytes).unwrap();
    let out = check();
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<Value> =
        String::from_utf8(out.stdout).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(lines[0]["problem"], "corrupt_frame");
    assert!(lines[0]["reason"].as_str().unwrap().contains("checksum mismatch"), "{lines:?}");
    assert_eq!(lines[1]["problem"], "unreadable_record");
    assert_eq!(lines[1]["serial"], lines[0]["serial"]);
    assert_eq!(lines[2], json!({"events": 50, "frames": 50, "problems": 2, "blobs": 0}));
    // The damaged event is left out; every other one is served.
    let exported = String::from_utf8(export(&data, None).stdout).unwrap();
    let damaged_id = lines[1]["id"].as_str().unwrap();
    assert_eq!(damaged_id, victim.id.to_hex());
    let want: Vec<String> = notes.iter().filter(|n| n.id.to_hex() != damaged_id).map(line).collect();
    assert_eq!(exported.lines().collect::<Vec<_>>(), want.iter().map(String::as_str).collect::<Vec<_>>());

    // --repair drops the damaged record and compacts: the store is consistent again, with every
    // other event, and takes the lost event anew.
    let out = hearth(&data).arg("check").arg("--repair").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let last = String::from_utf8(out.stdout).unwrap().lines().last().unwrap().to_string();
    assert_eq!(
        serde_json::from_str::<Value>(&last).unwrap(),
        json!({"events": 50, "frames": 50, "problems": 2, "blobs": 0, "remaining": 0})
    );
    let out = check();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), "{\"blobs\":0,\"events\":49,\"frames\":49,\"problems\":0}\n");
    assert_eq!(String::from_utf8(export(&data, None).stdout).unwrap(), exported);
    assert_eq!(summary(&import(&data, line(victim).as_bytes()))["stored"], 1);
}

#[test]
fn a_relay_killed_at_any_moment_of_an_online_compaction_keeps_every_acknowledged_event() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let start = now() - 100_000;
    let pad = "p".repeat(1100);
    // 300 dead versions of a profile and 2,000 live notes of about 1.3 KB: at 1 MiB/s the copy
    // takes a couple of seconds, so the kills below land in it, in its last step and after it.
    let mut input: Vec<String> =
        (0..300).map(|i| line(&sign(&alice, start + i, 0, &[], &format!("{{\"v\":\"{i} {pad}\"}}")))).collect();
    input.extend((0..2000).map(|i| line(&sign(&bob, start + 1000 + i, 1, &[], &format!("{i} {pad}")))));
    let out = import(&data, input.join("\n").as_bytes());
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut want: Vec<String> =
        String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(want.len(), 2001);
    let throttle = [("HEARTH_STORAGE__COMPACT_MAX_MB_PER_SEC", "1")];
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut n = 0;
    for delay_ms in [0, 400, 1200, 2000, 2400, 2800, 3500] {
        let (mut relay, addr) = spawn_relay(&data, &throttle);
        rt.block_on(async {
            until_no_compaction_runs(&addr).await;
            assert_eq!(start_compaction(&addr).await, (202, json!({"compacting": true})));
            let (status, body) = start_compaction(&addr).await;
            assert_eq!((status, &body["error"]), (409, &json!("a compaction is already running")), "{body}");
            // Events acknowledged while it runs.
            let mut client = Client::connect(&format!("ws://{addr}")).await;
            let begin = Instant::now();
            loop {
                n += 1;
                let e = sign(&carol, start + 10_000 + n, 1, &[], &format!("during {n}"));
                assert_ok(&client.publish(&e).await, &e.id.to_hex(), true, "");
                want.push(line(&e));
                if begin.elapsed() >= Duration::from_millis(delay_ms) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        });
        relay.0.kill().unwrap();
        relay.0.wait().unwrap();
        let got: Vec<String> =
            String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
        assert!(got == want, "after a kill {delay_ms} ms into a compaction: {} events, want {}", got.len(), want.len());
        assert_eq!(log_files(&data).len(), 1, "{:?}", log_files(&data));
    }

    // One left to finish: the log holds the live events only, and the relay says so.
    let (mut relay, addr) = spawn_relay(&data, &[]);
    let stats = rt.block_on(async {
        until_no_compaction_runs(&addr).await;
        let generation = store_stats(&addr).await["log_generation"].as_u64().unwrap();
        assert_eq!(start_compaction(&addr).await.0, 202);
        loop {
            let stats = store_stats(&addr).await;
            if stats["compacting"] == false && stats["log_generation"] == generation + 1 {
                break stats;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();
    assert_eq!((&stats["events"], &stats["dead_bytes"]), (&json!(want.len()), &json!(0)), "{stats}");
    let done = &stats["last_compaction"];
    assert!(done["after_bytes"].as_u64() <= done["before_bytes"].as_u64(), "{stats}");
    // What is left on disk: the live records (with room to spare) and the catalogue.
    let (live, index) = (stats["live_bytes"].as_u64().unwrap(), stats["index_bytes"].as_u64().unwrap());
    assert!(done["after_bytes"].as_u64().unwrap() as f64 <= 1.5 * live as f64 + index as f64, "{stats}");
    assert!(done["writes_paused_ms"].as_f64().unwrap() >= done["reads_paused_ms"].as_f64().unwrap(), "{stats}");
    let got: Vec<String> = String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
    assert!(got == want);
}

/// A data directory of layout `layout` (1 or 2) holding `events`, written the way those layouts
/// stored them (`src/store/migrate.rs` names them; the record is today's format 1, unchanged).
fn old_layout_dir(data: &Path, layout: u8, events: &[hearth::protocol::Event]) {
    let db = sled::open(data).unwrap();
    let tree = db.open_tree(format!("events_v{layout}")).unwrap();
    tree.insert(b"mschema", &[layout]).unwrap();
    for (serial, e) in events.iter().enumerate() {
        match layout {
            1 => {
                let mut value = 0u64.to_be_bytes().to_vec();
                value.extend_from_slice(line(e).as_bytes());
                tree.insert([&b"e"[..], &e.id.0].concat(), value).unwrap();
            }
            _ => {
                let key = [&b"e"[..], &(serial as u64).to_be_bytes()].concat();
                tree.insert(key, hearth::store::format::record::encode(e)).unwrap();
                tree.insert([&b"i"[..], &e.id.0].concat(), &(serial as u64).to_be_bytes()).unwrap();
            }
        }
    }
    db.flush().unwrap();
}

/// Turns today's data directory into layout 3, which kept one `i` key per id (`i` + id →
/// serial) where today's keeps buckets (`i` + the id's first 20 bits → (id, serial) entries).
fn layout_3_dir(data: &Path) {
    let db = sled::open(data).unwrap();
    let tree = db.open_tree("events_v3").unwrap();
    let buckets: Vec<_> = tree.scan_prefix(b"i").map(Result::unwrap).collect();
    for (key, value) in buckets {
        assert_eq!((key.len(), value.len() % 40), (4, 0));
        for entry in value.chunks_exact(40) {
            tree.insert([&b"i"[..], &entry[..32]].concat(), &entry[32..]).unwrap();
        }
        tree.remove(key).unwrap();
    }
    tree.insert(b"mschema", &[3]).unwrap();
    db.flush().unwrap();
}

/// Turns today's data directory into layout 4, which differs only in its version: no compaction
/// had run, so every stored place is at parity 0.
fn layout_4_dir(data: &Path) {
    let db = sled::open(data).unwrap();
    let tree = db.open_tree("events_v3").unwrap();
    assert_eq!(tree.get(b"mparity").unwrap(), None, "no compaction flipped the parity");
    tree.insert(b"mschema", &[4]).unwrap();
    db.flush().unwrap();
}

#[test]
fn migrate_carries_older_layouts_over_and_finishes_one_that_was_cut_off() {
    let (alice, bob) = (keys(1), keys(2));
    let start = now() - 10_000;
    let mut events: Vec<_> =
        (0..5).map(|i| sign(&alice, start + i, 1, &[&["t", "x"]], &format!("note {i} \"quoted\""))).collect();
    events.push(sign(&bob, start + 10, 0, &[], "{\"name\":\"bob\"}"));
    events.push(sign(&bob, start + 20, 30023, &[&["d", "post"]], "long form"));
    let want: Vec<String> = events.iter().map(line).collect();
    for layout in [1u8, 2] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        old_layout_dir(&data, layout, &events);
        // Refused, by name of the command that carries it over.
        let refused = export(&data, None);
        assert_eq!(refused.status.code(), Some(1));
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(
            stderr.contains(&format!(
                "data directory has schema version {layout}, this hearth reads 5: run `hearth migrate`"
            )),
            "{stderr}"
        );
        let out = hearth(&data).arg("migrate").output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let done = summary(&out);
        assert_eq!((&done["from"], &done["to"], &done["carried"]), (&json!(layout), &json!(5), &json!(7)), "{done}");
        assert_eq!((&done["import"]["stored"], &done["import"]["invalid"]), (&json!(7), &json!(0)), "{done}");
        let got: Vec<String> =
            String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
        assert_eq!(got, want, "layout {layout}: every event, oldest first, its JSON unchanged");
        assert!(!data.join("migration.jsonl").exists());
        // Today's layout: nothing to do.
        let again = summary(&hearth(&data).arg("migrate").output().unwrap());
        assert_eq!(again, json!({"from": null, "to": 5, "carried": null, "import": null}));
    }

    // Layout 3, made from today's by the test: one `i` key per id; layout 4, today's but for its
    // version (its places all at parity 0). A relay's start (here the export's open) converts it
    // in place, and so does `hearth migrate`.
    for (layout, by_migrate) in [(3u8, false), (3, true), (4, false), (4, true)] {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        assert_eq!(summary(&import(&data, want.join("\n").as_bytes()))["stored"], 7);
        match layout {
            3 => layout_3_dir(&data),
            _ => layout_4_dir(&data),
        }
        if by_migrate {
            let done = summary(&hearth(&data).arg("migrate").output().unwrap());
            let moved = if layout == 3 { 7 } else { 0 };
            assert_eq!(done, json!({"from": layout, "to": 5, "carried": moved, "import": null}));
        }
        let got: Vec<String> =
            String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
        assert_eq!(got, want, "layout {layout}: every event, oldest first");
        let checked = hearth(&data).arg("check").output().unwrap();
        assert_eq!(checked.status.code(), Some(0), "{}", String::from_utf8_lossy(&checked.stdout));
        let again = summary(&hearth(&data).arg("migrate").output().unwrap());
        assert_eq!(again, json!({"from": null, "to": 5, "carried": null, "import": null}));
    }

    // Cut off after the old events were written out: the directory is refused until a second
    // run imports them.
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    assert_eq!(summary(&import(&data, want[0].as_bytes()))["stored"], 1);
    std::fs::write(data.join("migration.jsonl"), want[1..].join("\n")).unwrap();
    let refused = export(&data, None);
    assert_eq!(refused.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&refused.stderr).contains("is unfinished: run `hearth migrate` again"));
    let done = summary(&hearth(&data).arg("migrate").output().unwrap());
    assert_eq!((&done["from"], &done["import"]["stored"]), (&Value::Null, &json!(6)), "{done}");
    let got: Vec<String> = String::from_utf8(export(&data, None).stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(got, want);
}
