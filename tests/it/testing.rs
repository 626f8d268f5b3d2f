//! `hearth::testing::TestRelay` as another crate's tests use it: its options, and that dropping
//! it stops the relay and removes its directory.

use std::time::Duration;

use crate::common::*;
use hearth::config::LimitsConfig;
use hearth::testing::{Options, TestRelay};
use serde_json::json;

#[tokio::test]
async fn the_options_set_up_auth_the_admin_api_and_the_seed() {
    let k = keys(80);
    let seed = vec![sign(&k, now() - 2, 1, &[], "one"), sign(&k, now() - 1, 1, &[], "two")];
    let options =
        Options { auth_required: true, admin_token: Some("s3cret".into()), seed: seed.clone(), ..Default::default() };
    let relay = TestRelay::start(options).await.unwrap();
    assert_eq!(relay.seeded().map(|s| (s.read, s.stored)), Some((2, 2)));
    assert_eq!(relay.admin_token(), Some("s3cret"));
    // Quotas are off unless asked for; the relay says so in NIP-11.
    let info = nip11_at(&relay.http_url()).await;
    assert!(info.get("hearth_limits").is_none(), "{info}");
    assert_eq!(info["limitation"]["auth_required"], true);
    let admin = web().get(format!("{}/admin/v1/relay", relay.http_url())).bearer_auth("s3cret").send().await.unwrap();
    assert_eq!(admin.status(), 200);

    let mut c = Client::connect(&relay.ws_url()).await;
    c.send(json!(["REQ", "s", {"kinds": [1]}])).await;
    let closed = c.recv().await;
    assert_eq!(closed[0], "CLOSED");
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(c.auth(&k, &relay.ws_url()).await[2], true);
    let ids = c.req_ids("s", vec![json!({"kinds": [1]})]).await;
    assert_eq!(ids, vec![seed[1].id.to_hex(), seed[0].id.to_hex()]);
}

#[tokio::test]
async fn a_manual_clock_moves_only_when_the_test_moves_it() {
    let mut limits = LimitsConfig::default();
    limits.human.messages_per_min = 1;
    let relay =
        TestRelay::start(Options { limits: Some(limits), manual_clock: true, ..Default::default() }).await.unwrap();
    let k = keys(81);
    let mut c = Client::connect(&relay.ws_url()).await;
    let first = sign(&k, now(), 1, &[], "first");
    assert_ok(&c.publish(&first).await, &first.id.to_hex(), true, "");
    let second = sign(&k, now(), 1, &[], "second");
    let refused = c.publish(&second).await;
    assert_eq!(refused[3], "rate-limited: quota exceeded (messages); retry in 60s");
    relay.advance(Duration::from_secs(59));
    assert_eq!(c.publish(&second).await[3], "rate-limited: quota exceeded (messages); retry in 1s");
    relay.advance(Duration::from_secs(1));
    assert_ok(&c.publish(&second).await, &second.id.to_hex(), true, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_it_stops_the_relay_and_removes_the_directory() {
    let relay = TestRelay::start(Options::default()).await.unwrap();
    let (addr, dir) = (relay.addr(), relay.data_dir());
    assert!(dir.is_dir());
    drop(relay);
    let gone = tokio::time::timeout(STEP, async {
        while dir.exists() || tokio::net::TcpStream::connect(addr).await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(gone.is_ok(), "{} or {addr} is still there", dir.display());
}

#[tokio::test]
async fn stop_keeps_the_directory_for_a_second_relay() {
    let k = keys(82);
    let note = sign(&k, now(), 1, &[], "kept");
    let relay = TestRelay::start(Options { seed: vec![note.clone()], ..Default::default() }).await.unwrap();
    let dir = relay.stop().await.unwrap();
    let again = TestRelay::start(Options { dir: Some(dir), ..Default::default() }).await.unwrap();
    let mut c = Client::connect(&again.ws_url()).await;
    assert_eq!(c.req_ids("s", vec![json!({"ids": [note.id.to_hex()]})]).await, vec![note.id.to_hex()]);
}
