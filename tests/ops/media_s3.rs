//! Media on object storage (`media.store = "s3"`), through the `hearth` binary against a real
//! Garage (`hearth::testing::garage`, built once per machine by `tests/garage/install.sh`) and,
//! for two nodes, a real PostgreSQL: every node serves, lists, bills and deletes the same blobs;
//! a bucket that goes away is answered 503 with nothing recorded; `hearth check` reads every
//! object back and `--repair` sets a damaged one aside; a backup carries the blobs out of the
//! bucket and a restore puts them back in; `hearth migrate --to postgres` moves their records
//! into the table every node reads. The access key's secret shows in no log and no answer.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use futures_util::TryStreamExt;
use hearth::protocol::blossom::{self, BlobHash, Verb};
use hearth::protocol::{Keys, Timestamp};
use hearth::testing::garage::Garage;
use object_store::ObjectStore;
use reqwest::StatusCode;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::common::*;

/// A relay's environment for the bucket of `garage`: the `HEARTH_MEDIA__…` forms.
fn bucket_env(garage: &Garage) -> Vec<(String, String)> {
    let mut media = hearth::config::MediaConfig::default();
    garage.configure(&mut media);
    vec![
        ("HEARTH_MEDIA__STORE".into(), "s3".into()),
        ("HEARTH_MEDIA__S3_ENDPOINT".into(), media.s3_endpoint),
        ("HEARTH_MEDIA__S3_BUCKET".into(), media.s3_bucket),
        ("HEARTH_MEDIA__S3_REGION".into(), media.s3_region),
        ("HEARTH_MEDIA__S3_ACCESS_KEY_ID".into(), media.s3_access_key_id),
        ("HEARTH_MEDIA__S3_SECRET_ACCESS_KEY".into(), media.s3_secret_access_key.expose().to_string()),
        ("HEARTH_ADMIN__TOKEN".into(), "t".into()),
        // Every line the relay logs, so that a secret in any of them is seen.
        ("RUST_LOG".into(), "debug".into()),
    ]
}

/// The bucket as the test sees it, through the same S3 client crate the relay uses.
fn s3(garage: &Garage) -> object_store::aws::AmazonS3 {
    let mut media = hearth::config::MediaConfig::default();
    garage.configure(&mut media);
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(media.s3_endpoint)
        .with_bucket_name(media.s3_bucket)
        .with_region(media.s3_region)
        .with_access_key_id(media.s3_access_key_id)
        .with_secret_access_key(media.s3_secret_access_key.expose())
        .with_allow_http(true)
        .build()
        .unwrap()
}

/// The names of the bucket's objects, sorted.
async fn objects(s3: &object_store::aws::AmazonS3) -> Vec<String> {
    let listed: Vec<_> = s3.list(None).try_collect().await.unwrap();
    let mut names: Vec<String> = listed.into_iter().map(|m| m.location.to_string()).collect();
    names.sort();
    names
}

/// One `hearth` process with its log in a file, killed when dropped.
struct Node {
    running: Running,
    addr: String,
    log: PathBuf,
}

/// Starts `hearth` on `dir/data` with `env`, its log in `dir/log`.
async fn node(dir: &Path, env: &[(String, String)]) -> Node {
    let log = dir.join("log");
    let file = std::fs::File::create(&log).unwrap();
    let child = hearth()
        .current_dir(dir)
        .env("HEARTH_SERVER__BIND", "127.0.0.1:0")
        .env("HEARTH_STORAGE__DATA_DIR", dir.join("data"))
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .unwrap();
    let running = Running(child);
    let addr = poll("the node to listen", Duration::from_secs(30), async || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        match text.lines().find_map(|l| l.split_once("listening on ").map(|(_, a)| a.trim().to_string())) {
            Some(addr) => Ok(addr),
            None => Err(text.lines().last().unwrap_or("").to_string()),
        }
    })
    .await;
    Node { running, addr, log }
}

impl Node {
    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    async fn put(&self, keys: &Keys, bytes: &[u8]) -> reqwest::Response {
        self.put_as(&upload_auth(keys, bytes), bytes).await
    }

    /// `PUT /upload` of `bytes` with the authorization header `auth`.
    async fn put_as(&self, auth: &str, bytes: &[u8]) -> reqwest::Response {
        let req = web()
            .put(self.url("/upload"))
            .header("authorization", auth)
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec());
        tokio::time::timeout(Duration::from_secs(120), req.send()).await.unwrap().unwrap()
    }

    async fn delete(&self, keys: &Keys, hash: &BlobHash) -> StatusCode {
        let auth = blossom::header(keys, Verb::Delete, &[*hash], Timestamp::now(), now() + 3600);
        let req = web().delete(self.url(&format!("/{hash}"))).header("authorization", auth);
        tokio::time::timeout(STEP, req.send()).await.unwrap().unwrap().status()
    }

    async fn get(&self, hash: &BlobHash, range: Option<&str>) -> (StatusCode, Vec<u8>) {
        let mut req = web().get(self.url(&format!("/{hash}")));
        if let Some(range) = range {
            req = req.header("range", range);
        }
        let response = tokio::time::timeout(Duration::from_secs(60), req.send()).await.unwrap().unwrap();
        (response.status(), response.bytes().await.unwrap().to_vec())
    }

    /// `GET /admin/v1/media`, and its body as text (to look for the secret in).
    async fn media(&self) -> (Value, String) {
        let (status, _, bytes) =
            request(&self.url("/admin/v1/media"), reqwest::Method::GET, &[("authorization", "Bearer t")], None).await;
        assert_eq!(status, StatusCode::OK);
        let text = String::from_utf8(bytes.to_vec()).unwrap();
        (serde_json::from_str(&text).unwrap(), text)
    }

    async fn listed(&self, keys: &Keys) -> Value {
        let url = self.url(&format!("/list/{}", keys.public_key().to_hex()));
        tokio::time::timeout(STEP, web_get(url)).await.unwrap().unwrap().json().await.unwrap()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap()
    }
}

/// An upload authorization of `bytes` by `keys`.
fn upload_auth(keys: &Keys, bytes: &[u8]) -> String {
    let hash = BlobHash(Sha256::digest(bytes).into());
    blossom::header(keys, Verb::Upload, &[hash], Timestamp::now(), now() + 3600)
}

/// The blob list of `GET /admin/v1/media`: each blob's hash and its owners.
fn blobs(media: &Value) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = media["blobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| {
            let mut owners: Vec<String> =
                b["owners"].as_array().unwrap().iter().map(|o| o["pubkey"].as_str().unwrap().to_string()).collect();
            owners.sort();
            (b["sha256"].as_str().unwrap().to_string(), owners)
        })
        .collect();
    out.sort();
    out
}

fn bytes_of(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 24) as u8 ^ seed).collect()
}

#[tokio::test]
async fn two_nodes_on_one_bucket_serve_list_bill_and_delete_the_same_blobs() {
    let garage = Garage::start(&install_garage()).await.unwrap();
    let mut garage = garage;
    install_postgres();
    let pg = hearth::testing::postgres::Postgres::start(false).await.unwrap();
    let db = pg.database("relay").await.unwrap();
    let mut env = bucket_env(&garage);
    env.push(("HEARTH_STORAGE__BACKEND".into(), "postgres".into()));
    env.push(("HEARTH_STORAGE__POSTGRES_URL".into(), db));
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = node(dir_a.path(), &env).await;
    let b = node(dir_b.path(), &env).await;
    let s3 = s3(&garage);
    let (alice, bob) = (keys(1), keys(2));

    // 9 MiB through A (put in parts), served whole, by HEAD and by range through B.
    let big = bytes_of(9 << 20, 7);
    let hash = BlobHash(Sha256::digest(&big).into());
    let put = a.put(&alice, &big).await;
    assert_eq!(put.status(), StatusCode::CREATED, "{:?}", put.text().await);
    let (status, got) = b.get(&hash, None).await;
    assert_eq!(status, StatusCode::OK);
    assert!(got == big, "node B served {} bytes that are not the blob", got.len());
    let head = tokio::time::timeout(STEP, web().head(b.url(&format!("/{hash}"))).send()).await.unwrap().unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    assert_eq!(head.headers()["content-length"], (9u64 << 20).to_string().as_str());
    let (status, part) = b.get(&hash, Some("bytes=5000000-5000099")).await;
    assert_eq!(status, StatusCode::PARTIAL_CONTENT);
    assert_eq!(part, &big[5_000_000..5_000_100]);
    assert_eq!(objects(&s3).await, vec![hash.to_hex()], "one object per blob");

    // The same blob through B by another key: already held, billed once, owned by both.
    let again = b.put(&bob, &big).await;
    assert_eq!(again.status(), StatusCode::OK);
    let (on_a, text_a) = a.media().await;
    let (on_b, text_b) = b.media().await;
    assert_eq!(on_a["store"], "s3");
    assert_eq!(on_a["used_bytes"], 9u64 << 20);
    assert_eq!((&on_a["used_bytes"], &on_a["by_pubkey"]), (&on_b["used_bytes"], &on_b["by_pubkey"]));
    let want = vec![(hash.to_hex(), {
        let mut o = vec![alice.public_key().to_hex(), bob.public_key().to_hex()];
        o.sort();
        o
    })];
    assert_eq!((blobs(&on_a), blobs(&on_b)), (want.clone(), want));
    // The same list on both nodes, each naming its own address in the URLs.
    let (mut list_a, mut list_b) = (a.listed(&bob).await, b.listed(&bob).await);
    for list in [&mut list_a, &mut list_b] {
        list[0].as_object_mut().unwrap().remove("url");
    }
    assert_eq!(list_a, list_b);
    assert_eq!(list_a[0]["sha256"], hash.to_hex());

    // A second blob through B, listed by A.
    let small = bytes_of(70_000, 3);
    let small_hash = BlobHash(Sha256::digest(&small).into());
    assert_eq!(b.put(&alice, &small).await.status(), StatusCode::CREATED);
    assert_eq!(a.get(&small_hash, None).await, (StatusCode::OK, small.clone()));
    assert_eq!(a.listed(&alice).await.as_array().map(Vec::len), Some(2));

    // Deleted through B by one owner: the other's keeps it served on A; by the last owner: gone
    // from A and from the bucket.
    assert_eq!(b.delete(&alice, &hash).await, StatusCode::OK);
    assert_eq!(a.get(&hash, Some("bytes=0-9")).await, (StatusCode::PARTIAL_CONTENT, big[..10].to_vec()));
    assert_eq!(b.delete(&bob, &hash).await, StatusCode::OK);
    assert_eq!(a.get(&hash, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(objects(&s3).await, vec![small_hash.to_hex()]);
    assert_eq!(a.media().await.0["used_bytes"], 70_000);

    // The bucket away: an upload is answered 503 with a Retry-After, nothing recorded on either
    // node; a delete meanwhile takes the record (the blob is gone for everyone) and leaves the
    // object for `hearth check --repair`.
    garage.kill();
    let third = bytes_of(1000, 9);
    let third_hash = BlobHash(Sha256::digest(&third).into());
    let auth = upload_auth(&alice, &third);
    let refused = a.put_as(&auth, &third).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(refused.headers().contains_key("retry-after"));
    assert_eq!(refused.headers()["x-reason"], "error: the relay's media storage cannot be reached; try again shortly");
    assert_eq!(b.get(&third_hash, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(a.listed(&alice).await.as_array().map(Vec::len), Some(1));
    assert_eq!(b.delete(&alice, &small_hash).await, StatusCode::OK);
    assert_eq!(a.get(&small_hash, None).await.0, StatusCode::NOT_FOUND);
    garage.restart().await.unwrap();
    assert_eq!(objects(&s3).await, vec![small_hash.to_hex()], "the object is left for hearth check");
    // The same request again, as a client told to try again sends it: its authorization was
    // given back, as the refused call changed nothing.
    assert_eq!(a.put_as(&auth, &third).await.status(), StatusCode::CREATED);
    assert_eq!(a.put_as(&auth, &third).await.status(), StatusCode::UNAUTHORIZED, "good for one change");
    assert_eq!(b.get(&third_hash, None).await, (StatusCode::OK, third));
    assert_eq!(b.media().await.0["used_bytes"], 1000);

    // A stranger's page uploaded through one node and opened through the other is data, never a
    // page of the relay's origin: saved, not shown, and nothing in it may run.
    let page = b"<html><script>fetch('/admin/v1/relay')</script></html>".to_vec();
    let page_hash = BlobHash(Sha256::digest(&page).into());
    let req = web()
        .put(a.url("/upload"))
        .header("authorization", upload_auth(&bob, &page))
        .header("content-type", "text/html")
        .body(page.clone());
    assert_eq!(tokio::time::timeout(STEP, req.send()).await.unwrap().unwrap().status(), StatusCode::CREATED);
    let opened = tokio::time::timeout(STEP, web_get(b.url(&format!("/{page_hash}")))).await.unwrap().unwrap();
    assert_eq!(opened.status(), StatusCode::OK);
    let headers = opened.headers();
    assert!(headers["content-disposition"].to_str().unwrap().starts_with("attachment"), "{headers:?}");
    assert_eq!(headers["x-content-type-options"], "nosniff");
    assert!(headers["content-security-policy"].to_str().unwrap().contains("sandbox"), "{headers:?}");

    // The secret: in neither node's log, nor in the admin API's answers.
    for text in [a.log(), b.log(), text_a, text_b] {
        assert!(!text.contains(garage.secret()), "the access key's secret was shown");
    }
    assert!(a.log().contains("media storage cannot be reached"), "the outage was logged");
    drop((a, b));
}

#[tokio::test]
async fn check_reads_every_object_and_a_backup_carries_the_bucket_out_and_back() {
    let garage = Garage::start(&install_garage()).await.unwrap();
    let env = bucket_env(&garage);
    let s3 = s3(&garage);
    let dir = tempfile::tempdir().unwrap();
    let alice = keys(1);
    let (good, bad) = (bytes_of(300_000, 1), bytes_of(200_000, 2));
    let (good_hash, bad_hash) = (BlobHash(Sha256::digest(&good).into()), BlobHash(Sha256::digest(&bad).into()));
    let relay = node(dir.path(), &env).await;
    assert_eq!(relay.put(&alice, &good).await.status(), StatusCode::CREATED);
    assert_eq!(relay.put(&alice, &bad).await.status(), StatusCode::CREATED);

    // A backup through the running relay: the bytes come out of the bucket.
    let backup = dir.path().join("backup");
    let out = cli(dir.path(), &env, &["backup", backup.to_str().unwrap(), "--relay", &relay.url("")]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let manifest: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&manifest["blobs"], &manifest["blob_bytes"]), (&Value::from(2), &Value::from(500_000)));
    let mut stopped = relay.running;
    assert!(sigterm(&mut stopped).success());

    // An object damaged in the bucket: named by `hearth check`, set aside by `--repair`.
    s3.put(&object_store::path::Path::from(bad_hash.to_hex()), bytes_of(200_000, 5).into()).await.unwrap();
    let out = cli(dir.path(), &env, &["check"]);
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains(&format!("\"blob\":\"{bad_hash}\"")) && stdout.contains("hash mismatch"), "{stdout}");
    assert!(!stdout.contains(&good_hash.to_hex()), "{stdout}");
    let out = cli(dir.path(), &env, &["check", "--repair"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(objects(&s3).await, {
        let mut want = vec![good_hash.to_hex(), format!("damaged/{bad_hash}")];
        want.sort();
        want
    });
    let relay = node(dir.path(), &env).await;
    assert_eq!(relay.get(&bad_hash, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(relay.get(&good_hash, None).await, (StatusCode::OK, good.clone()));
    drop(relay);

    // The backup restored onto a disk, and into the (emptied) bucket: each serves both blobs.
    for name in [good_hash.to_hex(), format!("damaged/{bad_hash}")] {
        s3.delete(&object_store::path::Path::from(name)).await.unwrap();
    }
    let on_disk = tempfile::tempdir().unwrap();
    let disk_env = vec![("HEARTH_ADMIN__TOKEN".to_string(), "t".to_string())];
    let again = dir.path().join("again");
    for (place, env) in [(on_disk.path(), disk_env), (&again, env.clone())] {
        std::fs::create_dir_all(place).unwrap();
        let out = cli(place, &env, &["restore", backup.to_str().unwrap()]);
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let relay = node(place, &env).await;
        assert_eq!(relay.get(&good_hash, None).await, (StatusCode::OK, good.clone()));
        assert_eq!(relay.get(&bad_hash, None).await, (StatusCode::OK, bad.clone()));
    }
    assert_eq!(objects(&s3).await.len(), 2, "the restore put both objects back");

    // `hearth migrate --to postgres` moves the records into the shared table: a node on the
    // database serves the bucket's blobs and lists them, as every node of it would.
    install_postgres();
    let pg = hearth::testing::postgres::Postgres::start(false).await.unwrap();
    let mut on_pg = env.clone();
    on_pg.push(("HEARTH_STORAGE__POSTGRES_URL".into(), pg.database("relay").await.unwrap()));
    let out = cli(&again, &on_pg, &["migrate", "--to", "postgres"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let moved: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(moved["media"], 2, "{moved}");
    on_pg.push(("HEARTH_STORAGE__BACKEND".into(), "postgres".into()));
    let elsewhere = tempfile::tempdir().unwrap();
    let relay = node(elsewhere.path(), &on_pg).await;
    assert_eq!(relay.get(&good_hash, None).await, (StatusCode::OK, good));
    assert_eq!(relay.media().await.0["used_bytes"], 500_000);
    assert_eq!(relay.listed(&alice).await.as_array().map(Vec::len), Some(2));
}

/// Runs `hearth <args>` on `dir/data` with `env`.
fn cli(dir: &Path, env: &[(String, String)], args: &[&str]) -> std::process::Output {
    let mut command = crate::datadir::hearth(&dir.join("data"));
    command.current_dir(dir).envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str()))).args(args);
    command.output().unwrap()
}
