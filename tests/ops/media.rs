//! The media server through the `hearth` binary: a `kill -9` in the middle of an upload leaves
//! nothing served and nothing half-written after the restart, and a disk that fills mid-upload
//! is answered 507 with nothing lost.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use hearth::protocol::Timestamp;
use hearth::protocol::blossom::{self, BlobHash, Verb};
use reqwest::StatusCode;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use crate::binary::{GENEROUS, Lossy};
use crate::common::*;

fn auth(verb: Verb, n: u64) -> String {
    blossom::header(&keys(1), verb, &[], Timestamp(now()), now() + 3600 + n)
}

async fn put(addr: &str, bytes: Vec<u8>, n: u64) -> reqwest::Response {
    let req = web()
        .put(format!("http://{addr}/upload"))
        .header("authorization", auth(Verb::Upload, n))
        .header("content-type", "application/octet-stream")
        .body(bytes);
    tokio::time::timeout(Duration::from_secs(60), req.send()).await.unwrap().unwrap()
}

async fn get(addr: &str, hash: &BlobHash) -> reqwest::Response {
    tokio::time::timeout(STEP, web_get(format!("http://{addr}/{hash}"))).await.unwrap().unwrap()
}

/// Files under `dir`, recursively (none when it is missing).
fn files(dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    entries.flatten().flat_map(|e| if e.path().is_dir() { files(&e.path()) } else { vec![e.path()] }).collect()
}

/// Waits (with a deadline) until `ready` holds.
async fn until(what: &str, mut ready: impl FnMut() -> bool) {
    poll(what, STEP, async || if ready() { Ok(()) } else { Err("not yet".into()) }).await
}

#[tokio::test]
async fn a_kill_9_mid_upload_leaves_nothing_served_and_nothing_half_written() {
    let dir = tempfile::tempdir().unwrap();
    let media = dir.path().join("data").join("media");
    let (mut relay, addr) = start_with(dir.path(), &GENEROUS);
    let whole: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    let hash = BlobHash(Sha256::digest(&whole).into());
    // Half the body sent, then the process killed while it waits for the rest.
    let mut tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "PUT /upload HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {}\r\nContent-Type: application/octet-stream\r\nContent-Length: {}\r\n\r\n",
        auth(Verb::Upload, 0),
        whole.len()
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&whole[..whole.len() / 2]).await.unwrap();
    tcp.flush().await.unwrap();
    let tmp = media.join("tmp");
    until("half the upload in its temporary file", || {
        files(&tmp).iter().any(|f| f.metadata().map(|m| m.len() > 0).unwrap_or(false))
    })
    .await;
    relay.0.kill().unwrap();
    relay.0.wait().unwrap();
    drop(tcp);
    let (_relay, addr) = start_with(dir.path(), &GENEROUS);
    assert_eq!(get(&addr, &hash).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(files(&media), Vec::<std::path::PathBuf>::new(), "nothing half-written is left");
    let list = web_get(format!("http://{addr}/list/{}", keys(1).public_key().to_hex())).await.unwrap();
    assert_eq!(list.text().await.unwrap(), "[]");
    // The same upload, whole, is taken and served.
    assert_eq!(put(&addr, whole.clone(), 1).await.status(), StatusCode::CREATED);
    assert_eq!(get(&addr, &hash).await.bytes().await.unwrap().as_ref(), whole.as_slice());
}

#[tokio::test]
async fn a_disk_that_fills_mid_upload_is_507_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    // The relay may write files of at most 8 MiB (`ulimit -f`, KiB): past it a write fails as
    // on a full disk (EFBIG; SIGXFSZ ignored so the write fails rather than the process).
    let mut shell = std::process::Command::new("bash");
    shell
        .arg("-c")
        .arg(format!("trap '' XFSZ; ulimit -f 8192; exec {}", env!("CARGO_BIN_EXE_hearth")))
        .env_remove("RUST_LOG");
    let (_relay, addr) = start_as(shell, dir.path(), &GENEROUS);
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let note = sign(&keys(2), now(), 1, &[], "stored before the disk fills");
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");
    let small = b"a small picture".to_vec();
    let small_hash = BlobHash(Sha256::digest(&small).into());
    assert_eq!(put(&addr, small.clone(), 0).await.status(), StatusCode::CREATED);
    let big = vec![9u8; 16 << 20];
    let full = put(&addr, big.clone(), 1).await;
    assert_eq!(full.status(), StatusCode::INSUFFICIENT_STORAGE);
    assert_eq!(full.headers()["x-reason"], "error: the relay's media storage is full; ask its operator for room");
    // Nothing lost, nothing half-written, and the relay goes on.
    assert_eq!(get(&addr, &BlobHash(Sha256::digest(&big).into())).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(files(&data.join("media").join("tmp")), Vec::<std::path::PathBuf>::new());
    assert_eq!(get(&addr, &small_hash).await.bytes().await.unwrap().as_ref(), small.as_slice());
    assert_eq!(c.req_ids("s", vec![serde_json::json!({"ids": [note.id.to_hex()]})]).await, vec![note.id.to_hex()]);
    assert_eq!(put(&addr, b"after".to_vec(), 2).await.status(), StatusCode::CREATED);
}

/// Runs `hearth <args>` on the data directory `data`.
fn offline(data: &Path, args: &[&str], stdin: Option<&[u8]>) -> std::process::Output {
    let mut cmd = crate::datadir::hearth(data);
    cmd.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    if let Some(input) = stdin {
        std::io::Write::write_all(&mut child.stdin.take().unwrap(), input).unwrap();
    }
    drop(child.stdin.take());
    child.wait_with_output().unwrap()
}

fn lines(out: &std::process::Output) -> Vec<serde_json::Value> {
    String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[tokio::test]
async fn check_finds_a_damaged_blob_repair_sets_it_aside_and_export_import_carry_media() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let (mut relay, addr) = start_with(dir.path(), &GENEROUS);
    let good = b"a good blob".to_vec();
    let bad = b"a blob the disk will damage".to_vec();
    let (good_hash, bad_hash) = (BlobHash(Sha256::digest(&good).into()), BlobHash(Sha256::digest(&bad).into()));
    assert_eq!(put(&addr, good.clone(), 0).await.status(), StatusCode::CREATED);
    assert_eq!(put(&addr, bad.clone(), 1).await.status(), StatusCode::CREATED);
    let listed: serde_json::Value =
        web_get(format!("http://{addr}/list/{}", keys(1).public_key().to_hex())).await.unwrap().json().await.unwrap();
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let note = sign(&keys(1), now(), 1, &[&["imeta", &format!("url http://{addr}/{good_hash}")]], "look");
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");
    assert_eq!(crate::common::sigterm(&mut relay).code(), Some(0));

    // Moved first, whole: events and blobs out, into an empty directory, served there.
    let carried = dir.path().join("carried");
    let exported = offline(&data, &["export", "--media", carried.to_str().unwrap()], None);
    assert_eq!(exported.status.code(), Some(0), "{}", String::from_utf8_lossy(&exported.stderr));
    assert!(String::from_utf8_lossy(&exported.stderr).contains("2 blobs and their records written to"));
    let restored = dir.path().join("restored");
    std::fs::create_dir_all(&restored).unwrap();
    let fresh = restored.join("data");
    let imported = offline(&fresh, &["import", "--media", carried.to_str().unwrap()], Some(&exported.stdout));
    assert_eq!(imported.status.code(), Some(0), "{}", String::from_utf8_lossy(&imported.stderr));
    assert_eq!(lines(&imported)[0]["media"], serde_json::json!({"uploads": 2, "invalid": 0}));
    {
        let (_relay, addr) = start_with(&restored, &GENEROUS);
        assert_eq!(get(&addr, &good_hash).await.bytes().await.unwrap().as_ref(), good.as_slice());
        let again: serde_json::Value = web_get(format!("http://{addr}/list/{}", keys(1).public_key().to_hex()))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        // Same owners, sizes, types and dates; only the URL's address is the new relay's.
        let strip = |v: &serde_json::Value| {
            v.as_array()
                .unwrap()
                .iter()
                .map(|d| (d["sha256"].clone(), d["size"].clone(), d["uploaded"].clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(strip(&again), strip(&listed));
    }
    // A file whose bytes are not its blob's is refused by the import, by name.
    std::fs::write(carried.join(good_hash.to_hex()), b"tampered").unwrap();
    let other = dir.path().join("other").join("data");
    let refused = offline(&other, &["import", "--media", carried.to_str().unwrap()], Some(b""));
    assert_eq!(refused.status.code(), Some(4));
    assert_eq!(lines(&refused)[0]["media"], serde_json::json!({"uploads": 1, "invalid": 1}));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains(&format!(": {good_hash}: ")),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );

    // Damage on disk: check names the blob, repair sets it aside.
    let path = data.join("media").join(&bad_hash.to_hex()[..2]).join(bad_hash.to_hex());
    std::fs::write(&path, b"bit rot").unwrap();
    let checked = offline(&data, &["check"], None);
    assert_eq!(checked.status.code(), Some(1));
    let out = lines(&checked);
    assert_eq!(out[0]["blob"], serde_json::json!(bad_hash.to_hex()));
    assert!(out[0]["problem"].as_str().unwrap().starts_with("hash mismatch (the file hashes to "));
    assert_eq!(out[1], serde_json::json!({"events": 1, "frames": 1, "problems": 1, "blobs": 2}));
    let repaired = offline(&data, &["check", "--repair"], None);
    assert_eq!(repaired.status.code(), Some(0), "{}", String::from_utf8_lossy(&repaired.stdout));
    assert_eq!(lines(&repaired).last().unwrap()["remaining"], 0);
    assert_eq!(std::fs::read(data.join("media-damaged").join(bad_hash.to_hex())).unwrap(), b"bit rot");
    assert_eq!(offline(&data, &["check"], None).status.code(), Some(0));
    let (_relay, addr) = start_with(dir.path(), &GENEROUS);
    assert_eq!(get(&addr, &bad_hash).await.status(), StatusCode::NOT_FOUND);
    assert_eq!(get(&addr, &good_hash).await.bytes().await.unwrap().as_ref(), good.as_slice());
}

/// The uploads answered 201, with their bytes.
type Acked = std::sync::Arc<std::sync::Mutex<Vec<(BlobHash, Vec<u8>)>>>;

/// Power cuts under uploads: three clients upload blobs of 1 KiB to 1 MiB to a relay whose data
/// directory is on the lossy filesystem ([`Lossy`]); at seeded moments the relay is killed and
/// the disk loses whatever it had not synced (the blobs' bytes, sled's pages, the event log's
/// tail alike). After every restart each upload answered 201 is served whole. Without the sync
/// before the blob is placed and acknowledged, blobs answered 201 come back short and this fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn power_cuts_under_uploads_lose_no_acknowledged_blob() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = Lossy::mount(dir.path());
    // Quotas off: every GET of the checks and every upload is judged on durability alone.
    let env = [("HEARTH_LIMITS__ENABLED", "false")];
    let acked: Acked = Default::default();
    let mut seed: u64 = 20261205;
    let mut next = move || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        seed >> 33
    };
    static SENT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1000);
    for round in 0..10u64 {
        let (relay, addr) = start_with(dir.path(), &env);
        all_served(&addr, &acked, &format!("round {round}")).await;
        let uploads: Vec<_> = (0..3u64)
            .map(|client| {
                let (addr, acked, start) = (addr.clone(), acked.clone(), next());
                tokio::spawn(async move {
                    for i in 0.. {
                        let len = 1024 + ((start + i * 7919) % (1 << 20)) as usize;
                        let bytes: Vec<u8> =
                            (0..len).map(|b| (b as u64 ^ (round << 16) ^ (client << 8) ^ i) as u8).collect();
                        let n = SENT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let request = web()
                            .put(format!("http://{addr}/upload"))
                            .header("authorization", auth(Verb::Upload, n))
                            .header("content-type", "application/octet-stream")
                            .body(bytes.clone())
                            .timeout(STEP);
                        match request.send().await {
                            Ok(r) if r.status() == StatusCode::CREATED => {
                                acked.lock().unwrap().push((BlobHash(Sha256::digest(&bytes).into()), bytes));
                            }
                            // The relay is gone: this client is done for the round.
                            _ => return,
                        }
                    }
                })
            })
            .collect();
        // A seeded moment into the uploads (50 to 400 ms), then the cut.
        tokio::time::sleep(Duration::from_millis(50 + next() % 350)).await;
        drop(relay);
        for upload in uploads {
            upload.await.unwrap();
        }
        disk.cut();
    }
    let (_relay, addr) = start_with(dir.path(), &env);
    let uploaded = acked.lock().unwrap().len();
    assert!(uploaded >= 10, "the rounds uploaded: {uploaded}");
    all_served(&addr, &acked, "after the last cut").await;
}

/// Every upload in `acked` served whole by the relay at `addr` (`when` names the moment).
async fn all_served(addr: &str, acked: &Acked, when: &str) {
    let served = acked.lock().unwrap().clone();
    for (hash, bytes) in &served {
        let got = get(addr, hash).await;
        assert_eq!(got.status(), StatusCode::OK, "{when}: {hash} answered 201, now gone");
        let body = got.bytes().await.map(|b| b.to_vec()).map_err(|e| e.to_string());
        assert_eq!(body.as_ref().map(Vec::len), Ok(bytes.len()), "{when}: {hash} not whole");
        assert!(body.is_ok_and(|b| b == *bytes), "{when}: {hash} changed");
    }
}

/// 10,000 `HEAD /upload` at once from one address, against the binary (its sockets its own, so
/// the test's 10,000 fit in the process's open-file limit): each is refused for what it lacks (an
/// authorization), or is one of the connections past what one address may hold at once
/// (`server.max_connections_per_ip`), told to come back in a second (503, `Retry-After: 1`) or,
/// when its request was not read within a second, closed; exactly as many as the relay counts
/// refused. A blob is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_concurrent_head_uploads_are_each_answered() {
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HEARTH_LIMITS__IP__API_CALLS_PER_MIN", "100000000"),
        ("HEARTH_LIMITS__HUMAN__API_CALLS_PER_MIN", "100000000"),
    ];
    let (mut relay, addr) = start_with(dir.path(), &env);
    let kept = b"still here".to_vec();
    let sha = hex::encode(Sha256::digest(&kept));
    assert_eq!(put(&addr, kept.clone(), 0).await.status(), StatusCode::CREATED);
    let url = format!("http://{addr}/upload");
    let client = reqwest::Client::builder().pool_max_idle_per_host(0).build().unwrap();
    let mut calls = tokio::task::JoinSet::new();
    for _ in 0..10_000 {
        let (client, url) = (client.clone(), url.clone());
        calls.spawn(async move {
            let sent = client.head(&url).header("x-content-length", "10").timeout(Duration::from_secs(120)).send();
            match sent.await {
                Ok(answer) => {
                    let header = |name: &str| answer.headers().get(name).map(|v| v.to_str().unwrap_or("").to_string());
                    Ok((answer.status(), header("x-reason"), header("retry-after")))
                }
                Err(e) => Err(format!("{e:?}")),
            }
        });
    }
    let auth_required = "auth-required: sign a kind 24242 authorization event (t = upload) and send it as `Authorization: Nostr <base64>`";
    let (mut refused, mut busy, mut closed) = (0u64, 0u64, 0u64);
    while let Some(answer) = calls.join_next().await {
        match answer.unwrap() {
            Ok((StatusCode::UNAUTHORIZED, Some(reason), None)) if reason == auth_required => refused += 1,
            Ok((StatusCode::SERVICE_UNAVAILABLE, None, Some(retry))) if retry == "1" => busy += 1,
            // Closed unanswered: cleanly, or reset when its request was still unread.
            Err(e) if e.contains("IncompleteMessage") || e.contains("ConnectionReset") => closed += 1,
            other => panic!("an answer neither exact refusal: {other:?}"),
        }
    }
    assert_eq!(refused + busy + closed, 10_000);
    assert!(refused > 0, "every call was turned away");
    let metrics = web_get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    let counted: u64 = metrics
        .lines()
        .filter(|l| l.starts_with("hearth_connections_refused_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|n| n as u64)
        .sum();
    assert_eq!(
        counted,
        busy + closed,
        "refused connections counted by the relay: {busy} answered 503, {closed} closed"
    );
    let got = web().get(format!("http://{addr}/{sha}")).send().await.unwrap();
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(got.bytes().await.unwrap().to_vec(), kept);
    assert!(crate::common::sigterm(&mut relay).success());
}
