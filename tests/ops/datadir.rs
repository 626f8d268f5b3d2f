//! Offline operations on a data directory, as an operator runs them: `hearth import` and
//! `hearth export` through the real binary, and their refusal while a relay holds the directory.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::common::*;
use serde_json::{Value, json};

fn hearth(data: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.env_remove("RUST_LOG").env("HEARTH_STORAGE__DATA_DIR", data).env("HEARTH_SERVER__BIND", "127.0.0.1:0");
    cmd
}

fn import(data: &Path, input: &[u8]) -> Output {
    let mut child =
        hearth(data).arg("import").stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(input).unwrap();
    child.wait_with_output().unwrap()
}

fn export(data: &Path, filter: Option<&str>) -> Output {
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
fn offline_commands_refuse_a_data_directory_a_relay_holds() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut relay = hearth(&data).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let mut log = std::io::BufRead::lines(std::io::BufReader::new(relay.stderr.take().unwrap()));
    while !log.next().unwrap().unwrap().contains("listening on ") {}
    std::thread::spawn(move || for _ in log {});
    let started = Instant::now();
    let out = export(&data, None);
    let want = format!("hearth: data directory {} is in use by a running hearth\n", data.display());
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want.clone()));
    let out = import(&data, line(&sign(&keys(1), now(), 1, &[], "x")).as_bytes());
    assert_eq!((out.status.code(), String::from_utf8_lossy(&out.stderr).to_string()), (Some(2), want));
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let _ = relay.kill();
    let _ = relay.wait();
    // Once the relay is gone the directory opens.
    assert_eq!(export(&data, None).status.code(), Some(0));
}
