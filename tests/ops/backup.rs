//! `hearth backup` and `hearth restore` through the real binary: a members-only community backed
//! up from the running relay, restored into an empty data directory, and found whole: the same
//! relay key (NIP-11 `self`), name, members, invites, bans, tiers, audit log, events and media.

use std::path::Path;
use std::process::Output;

use hearth::protocol::Timestamp;
use hearth::protocol::blossom::{self, BlobHash, Verb};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::binary::{GENEROUS, Lossy};
use crate::common::*;
use crate::datadir::hearth;

const TOKEN: &str = "backup-test-token";

/// The community's configuration: members only, media on, the admin API by token.
fn community() -> Vec<(&'static str, &'static str)> {
    let mut env = GENEROUS.to_vec();
    env.extend([
        ("HEARTH_ACCESS__MODE", "members-only"),
        ("HEARTH_MEDIA__ENABLED", "true"),
        ("HEARTH_ADMIN__TOKEN", TOKEN),
    ]);
    env
}

/// `hearth <args>` on the data directory `data` under the community's configuration.
fn run(data: &Path, args: &[&str]) -> Output {
    let out = hearth(data).envs(community()).args(args).output().unwrap();
    eprintln!("hearth {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    out
}

fn json_out(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

async fn admin(addr: &str, method: Method, path: &str, body: Option<Value>) -> Value {
    let (status, body) = http_at(&format!("http://{addr}{path}"), method, body, Some(TOKEN), None).await;
    assert!(status.is_success(), "{path}: {status} {body}");
    body
}

async fn rpc(addr: &str, method: &str, params: Value) -> Value {
    admin(addr, Method::POST, "/admin/v1/rpc", Some(json!({"method": method, "params": params}))).await["result"]
        .clone()
}

/// What the community is, as its admin and its members see it.
async fn what_it_is(addr: &str, alice: &hearth::protocol::Keys, blob: &BlobHash) -> Value {
    let nip11 = nip11_at(&format!("http://{addr}")).await;
    let mut audit = admin(addr, Method::GET, "/admin/v1/audit?limit=1000", None).await;
    // Only the entries before the backup: the backup itself is audited after it.
    let entries = audit["entries"].as_array_mut().unwrap();
    entries.retain(|e| e["action"] != "backup");
    let mut client = Client::connect(&format!("ws://{addr}")).await;
    assert_eq!(client.auth(alice, &format!("ws://{addr}")).await[2], json!(true));
    let notes = client.req("notes", vec![json!({"authors": [alice.public_key().to_hex()]})]).await;
    let get = blossom::header(alice, Verb::Get, &[*blob], Timestamp(now()), now() + 3600);
    let response =
        web().get(format!("http://{addr}/{blob}")).header("authorization", get).timeout(STEP).send().await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let bytes = response.bytes().await.unwrap().to_vec();
    json!({
        "self": nip11["self"], "name": nip11["name"], "description": nip11["description"],
        "members": admin(addr, Method::GET, "/admin/v1/members", None).await,
        "invites": admin(addr, Method::GET, "/admin/v1/invites", None).await,
        "banned": rpc(addr, "listbannedpubkeys", json!([])).await,
        "bob": admin(addr, Method::GET, &format!("/admin/v1/usage/{}", keys(2).public_key().to_hex()), None).await["tier"],
        "audit": audit,
        "notes": notes,
        "blob": String::from_utf8(bytes).unwrap(),
    })
}

fn stop(mut relay: Running) {
    assert!(sigterm(&mut relay).success());
}

/// The community the tests take through a backup or a power cut: two members (one with a
/// note, one on the agent tier), alice's note, profile and picture, an open invite, a ban, a new
/// name and description; returns the picture's hash.
async fn set_up(addr: &str) -> BlobHash {
    let (alice, bob, mallory) = (keys(1), keys(2), keys(3));
    let url = format!("ws://{addr}");
    admin(
        addr,
        Method::PUT,
        &format!("/admin/v1/members/{}", alice.public_key().to_hex()),
        Some(json!({"note": "founder"})),
    )
    .await;
    let mut client = Client::connect(&url).await;
    assert_eq!(client.auth(&alice, &url).await[2], json!(true));
    for event in
        [sign(&alice, now() - 10, 1, &[], "hello, members"), sign(&alice, now() - 5, 0, &[], r#"{"name":"alice"}"#)]
    {
        assert_ok(&client.publish(&event).await, &event.id.to_hex(), true, "");
    }
    let picture = b"a picture of the hearth".to_vec();
    let upload = web()
        .put(format!("http://{addr}/upload"))
        .header("authorization", blossom::header(&alice, Verb::Upload, &[], Timestamp(now()), now() + 3600))
        .header("content-type", "text/plain")
        .body(picture)
        .timeout(STEP)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), StatusCode::CREATED);
    let blob = BlobHash::from_hex(upload.json::<Value>().await.unwrap()["sha256"].as_str().unwrap()).unwrap();
    // The settings last: nothing written after them makes them durable in passing.
    admin(addr, Method::PUT, &format!("/admin/v1/members/{}", bob.public_key().to_hex()), Some(json!({}))).await;
    admin(
        addr,
        Method::PUT,
        &format!("/admin/v1/pubkeys/{}/tier", bob.public_key().to_hex()),
        Some(json!({"tier": "agent"})),
    )
    .await;
    let invite = admin(addr, Method::POST, "/admin/v1/invites", Some(json!({"uses": 2, "note": "for carol"}))).await;
    assert!(invite["code"].is_string(), "{invite}");
    assert_eq!(rpc(addr, "banpubkey", json!([mallory.public_key().to_hex(), "spam"])).await, json!(true));
    assert_eq!(rpc(addr, "changerelayname", json!(["The Hearth"])).await, json!(true));
    assert_eq!(rpc(addr, "changerelaydescription", json!(["our corner"])).await, json!(true));
    blob
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_members_only_community_backed_up_online_comes_back_whole_in_an_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    let alice = keys(1);
    let (relay, addr) = start_with(dir.path(), &community());
    let blob = set_up(&addr).await;
    let before = what_it_is(&addr, &alice, &blob).await;
    assert_eq!(before["members"]["members"].as_array().map(Vec::len), Some(2), "{before}");
    assert_eq!(before["notes"].as_array().map(Vec::len), Some(2), "alice's note and profile: {before}");

    // While the relay runs: offline is refused (naming --relay), online is taken.
    let offline = run(&dir.path().join("data"), &["backup", dir.path().join("refused").to_str().unwrap()]);
    assert_eq!(offline.status.code(), Some(2));
    assert!(!dir.path().join("refused").exists(), "a refused backup leaves no folder behind");
    assert!(
        String::from_utf8_lossy(&offline.stderr)
            .contains("is in use by a running hearth: back it up through it with `hearth backup")
    );
    let online = dir.path().join("backup-online");
    let out =
        run(&dir.path().join("data"), &["backup", online.to_str().unwrap(), "--relay", &format!("http://{addr}")]);
    assert_eq!(out.status.code(), Some(0));
    let manifest = json_out(&out);
    assert_eq!(
        (&manifest["events"], &manifest["blobs"], &manifest["relay_pubkey"], &manifest["access_mode"]),
        // Alice's note, and the relay's own kind 19004 naming who may create rooms (its members).
        (&json!(3), &json!(1), &before["self"], &json!("members-only")),
        "{manifest}"
    );
    let key = std::fs::metadata(online.join("relay.key")).unwrap();
    assert_eq!(std::os::unix::fs::PermissionsExt::mode(&key.permissions()) & 0o777, 0o600);
    // A backup never goes over another.
    let again =
        run(&dir.path().join("data"), &["backup", online.to_str().unwrap(), "--relay", &format!("http://{addr}")]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("is not empty: give a new folder for each backup"));
    stop(relay);

    // Offline, the same events and settings.
    let offline = dir.path().join("backup-offline");
    let out = run(&dir.path().join("data"), &["backup", offline.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    for file in ["events.jsonl", "settings.jsonl", "relay.key", "media/records.jsonl"] {
        assert_eq!(std::fs::read(online.join(file)).unwrap(), std::fs::read(offline.join(file)).unwrap(), "{file}");
    }

    // Restored into an empty directory under the same members-only configuration.
    let restored_dir = tempfile::tempdir().unwrap();
    let data = restored_dir.path().join("data");
    let out = run(&data, &["restore", online.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0));
    let summary = json_out(&out);
    assert_eq!(
        (&summary["relay_pubkey"], &summary["events"], &summary["stored"], &summary["uploads"]),
        (&before["self"], &json!(3), &json!(3), &json!(1)),
        "{summary}"
    );
    let (relay, addr) = start_with(restored_dir.path(), &community());
    let after = what_it_is(&addr, &alice, &blob).await;
    assert_eq!(after, before);
    // A stranger still reads nothing.
    let mut stranger = Client::connect(&format!("ws://{addr}")).await;
    stranger.send(json!(["REQ", "peek", {}])).await;
    assert_eq!(
        stranger.recv().await,
        json!(["CLOSED", "peek", "auth-required: this relay is for its members; answer the AUTH challenge"])
    );
    stop(relay);

    // Refused: a directory that is not empty, a folder that is not a complete backup.
    let out = run(&data, &["restore", online.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("is not empty: restore into an empty one"));
    std::fs::remove_file(offline.join("manifest.json")).unwrap();
    let out = run(&restored_dir.path().join("other"), &["restore", offline.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a complete hearth backup"));
    // A restore that fails half-way leaves the data directory empty, so it can be run again.
    let mut events = std::fs::OpenOptions::new().append(true).open(online.join("events.jsonl")).unwrap();
    std::io::Write::write_all(&mut events, b"{\"not\": \"an event\"}\n").unwrap();
    let again = restored_dir.path().join("again");
    let out = run(&again, &["restore", online.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("events.jsonl: line 4: "), "{out:?}");
    assert_eq!(std::fs::read_dir(&again).unwrap().count(), 0, "the failed restore left files behind");
}

/// Everything the community is, once answered, is on disk: set up on a relay whose data
/// directory is the lossy filesystem ([`Lossy`]), then a power cut (the relay killed, the disk
/// losing whatever was not synced), and the community seen again is the same — the relay's key,
/// name and description, members, invites, the ban, the tier, the audit log, the events and the
/// picture.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_community_set_up_through_the_admin_api_survives_a_power_cut() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = Lossy::mount(dir.path());
    let (relay, addr) = start_with(dir.path(), &community());
    let blob = set_up(&addr).await;
    let before = what_it_is(&addr, &keys(1), &blob).await;
    assert_eq!(
        (before["members"]["total"].as_u64(), before["notes"].as_array().map(Vec::len)),
        (Some(2), Some(2)),
        "{before}"
    );
    drop(relay);
    disk.cut();
    let (_relay, addr) = start_with(dir.path(), &community());
    assert_eq!(what_it_is(&addr, &keys(1), &blob).await, before);
}

/// Copies the backup folder `from` to `to` (its modes kept: `relay.key` stays 0600).
fn copy_folder(from: &Path, to: &Path) {
    let out = std::process::Command::new("cp").arg("-a").arg(from).arg(to).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// A backup folder changed after `hearth backup` wrote it is refused whole, with what is wrong,
/// the data directory left empty and nothing written beside it: a blob whose bytes are not its
/// name, a record naming `../` as its blob, a manifest that lies about a count, a relay key of
/// the wrong size, one others could read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_backup_folder_is_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let (relay, addr) = start_with(dir.path(), &community());
    let blob = set_up(&addr).await;
    stop(relay);
    let intact = dir.path().join("intact");
    assert_eq!(run(&dir.path().join("data"), &["backup", intact.to_str().unwrap()]).status.code(), Some(0));
    type Tamper = fn(&Path, &BlobHash);
    let cases: [(&str, Tamper, &str); 6] = [
        (
            "a blob's bytes changed",
            |f, blob| std::fs::write(f.join("media").join(blob.to_hex()), b"something else entirely").unwrap(),
            "1 of the backup's blobs were refused",
        ),
        (
            "a record naming ../ as its blob",
            |f, _| {
                let records = f.join("media/records.jsonl");
                let text = std::fs::read_to_string(&records).unwrap();
                let line = text.lines().next().unwrap().to_string();
                let mut record: Value = serde_json::from_str(&line).unwrap();
                record["sha256"] = json!("../../escaped");
                std::fs::write(&records, format!("{text}{record}\n")).unwrap();
            },
            "1 of the backup's blobs were refused",
        ),
        (
            "a manifest that counts more events",
            |f, _| {
                let path = f.join("manifest.json");
                let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                manifest["events"] = json!(manifest["events"].as_u64().unwrap() + 1);
                std::fs::write(&path, manifest.to_string()).unwrap();
            },
            "the manifest says 4 events, the folder holds 3: the backup is incomplete or was changed",
        ),
        (
            "a manifest that counts fewer blobs",
            |f, _| {
                let path = f.join("manifest.json");
                let mut manifest: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
                manifest["blobs"] = json!(2);
                std::fs::write(&path, manifest.to_string()).unwrap();
            },
            "the manifest says 2 blobs, the folder holds 1",
        ),
        ("a relay key of the wrong size", |f, _| std::fs::write(f.join("relay.key"), "abcdef").unwrap(), "relay.key: "),
        (
            "a relay key others could read",
            |f, _| {
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(f.join("relay.key"), std::fs::Permissions::from_mode(0o644)).unwrap();
            },
            "the relay's secret key is readable by others (mode 644)",
        ),
    ];
    for (n, (what, tamper, says)) in cases.into_iter().enumerate() {
        let place = dir.path().join(format!("case-{n}"));
        std::fs::create_dir(&place).unwrap();
        let folder = place.join("backup");
        copy_folder(&intact, &folder);
        tamper(&folder, &blob);
        let data = place.join("data");
        let out = run(&data, &["restore", folder.to_str().unwrap()]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {stderr}");
        assert!(stderr.contains(says), "{what}: {stderr}");
        let left = std::fs::read_dir(&data).map(|d| d.count()).unwrap_or(0);
        assert_eq!(left, 0, "{what}: the refused restore left files in the data directory");
        let mut beside: Vec<String> =
            std::fs::read_dir(&place).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        beside.retain(|name| name != "backup" && name != "data");
        assert!(beside.is_empty(), "{what}: {beside:?} written beside the data directory");
        assert!(!dir.path().join("escaped").exists() && !place.join("escaped").exists(), "{what}");
    }
    // The intact folder restores.
    let out = run(&dir.path().join("whole"), &["restore", intact.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}
