//! The hostile matrix on the newer surfaces, each with its exact answer and the relay still
//! serving a bystander: `Range` edge cases, uploads whose body is longer or shorter than their
//! `Content-Length`, a body that trickles, relay-signed group state forged by another key, `previous` references to unknown ids, and a moderator's 9000
//! against an admin.

use hearth::protocol::blossom::Verb;
use reqwest::{Method, StatusCode};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::{STEP, TestRelay, generous, keys, now, sign};
use crate::groups::{as_, hex, ok, to_group};
use crate::media::{auth, call, hash_of, start, upload};

/// A bystander's read still answers.
async fn still_serving(relay: &TestRelay, sha: &str, blob: &[u8]) {
    let got = call(relay, Method::GET, &format!("/{sha}"), &[], None).await;
    assert_eq!((got.status, got.body.as_slice()), (StatusCode::OK, blob));
}

/// The body of a 416 on a blob of 100 bytes.
const OUTSIDE: &[u8] = br#"{"message":"invalid: the range asked for is outside the blob's 100 bytes"}"#;

#[tokio::test]
async fn every_range_edge_gets_its_exact_answer() {
    let relay = start(|_| {}).await;
    let blob: Vec<u8> = (0..100u8).collect();
    let sha = hash_of(&blob).to_hex();
    assert_eq!(
        upload(&relay, &auth(&keys(1), Verb::Upload, &[]), &blob, "image/png").await.status,
        StatusCode::CREATED
    );
    let many = (0..1000).map(|i| format!("{i}-{i}")).collect::<Vec<_>>().join(",");
    let cases: Vec<(String, StatusCode, &str, &[u8])> = vec![
        ("bytes=-0".into(), StatusCode::RANGE_NOT_SATISFIABLE, "bytes */100", OUTSIDE),
        ("bytes=100-".into(), StatusCode::RANGE_NOT_SATISFIABLE, "bytes */100", OUTSIDE),
        ("bytes=100-200".into(), StatusCode::RANGE_NOT_SATISFIABLE, "bytes */100", OUTSIDE),
        ("bytes=18446744073709551615-".into(), StatusCode::RANGE_NOT_SATISFIABLE, "bytes */100", OUTSIDE),
        ("bytes=50-500".into(), StatusCode::PARTIAL_CONTENT, "bytes 50-99/100", &blob[50..]),
        ("bytes=-500".into(), StatusCode::PARTIAL_CONTENT, "bytes 0-99/100", &blob[..]),
        ("bytes=-1".into(), StatusCode::PARTIAL_CONTENT, "bytes 99-99/100", &blob[99..]),
        ("bytes=0-0".into(), StatusCode::PARTIAL_CONTENT, "bytes 0-0/100", &blob[..1]),
        // Several ranges, overlapping or not, a backwards one, another unit: the whole blob
        // (RFC 9110 lets a server ignore what it does not serve).
        ("bytes=0-5,3-8".into(), StatusCode::OK, "", &blob[..]),
        (format!("bytes={many}"), StatusCode::OK, "", &blob[..]),
        ("bytes=9-3".into(), StatusCode::OK, "", &blob[..]),
        ("items=0-1".into(), StatusCode::OK, "", &blob[..]),
        ("bytes=-18446744073709551616".into(), StatusCode::OK, "", &blob[..]),
    ];
    for (range, status, content_range, body) in cases {
        let got = call(&relay, Method::GET, &format!("/{sha}"), &[("range", &range)], None).await;
        let shown: String = range.chars().take(40).collect();
        assert_eq!(got.status, status, "{shown}");
        assert_eq!(got.header("content-range"), content_range, "{shown}");
        assert_eq!(got.body, body, "{shown}");
        assert_eq!(got.header("x-content-type-options"), "nosniff", "{shown}");
    }
    still_serving(&relay, &sha, &blob).await;
}

/// Sends `head` and `body` on a connection of its own, then (when `close`) ends the sending half;
/// returns the status line of the first answer.
async fn raw(relay: &TestRelay, head: &str, body: &[u8], close: bool) -> String {
    let addr = relay.http_url("").trim_start_matches("http://").to_string();
    let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
    socket.write_all(head.as_bytes()).await.unwrap();
    socket.write_all(body).await.unwrap();
    if close {
        socket.shutdown().await.unwrap();
    }
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = tokio::time::timeout(STEP, socket.read(&mut chunk)).await.unwrap().unwrap();
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    String::from_utf8_lossy(&answer).lines().next().unwrap_or("").to_string()
}

fn put_head(authorization: &str, length: usize, sha: &str) -> String {
    format!(
        "PUT /upload HTTP/1.1\r\nHost: relay\r\nAuthorization: {authorization}\r\nContent-Type: image/png\r\n\
         Content-Length: {length}\r\nX-SHA-256: {sha}\r\n\r\n"
    )
}

#[tokio::test]
async fn a_body_longer_or_shorter_than_announced_or_trickling_stores_nothing() {
    let relay = start(|c| c.server.body_timeout_secs = 1).await;
    let alice = keys(1);
    let kept: Vec<u8> = b"a blob a bystander reads".to_vec();
    let kept_sha = hash_of(&kept).to_hex();
    assert_eq!(upload(&relay, &auth(&alice, Verb::Upload, &[]), &kept, "image/png").await.status, StatusCode::CREATED);
    let body = [7u8; 20];
    let sha = hash_of(&body).to_hex();
    // Longer: the relay reads the 10 bytes announced, and they are not the blob named.
    let line = raw(&relay, &put_head(&auth(&alice, Verb::Upload, &[]), 10, &sha), &body, false).await;
    assert_eq!(line, "HTTP/1.1 409 Conflict");
    // Shorter: the client stops after 10 of 20 bytes.
    let line = raw(&relay, &put_head(&auth(&alice, Verb::Upload, &[]), 20, &sha), &body[..10], true).await;
    assert_eq!(line, "HTTP/1.1 400 Bad Request");
    // Trickling: 5 bytes, then nothing for longer than server.body_timeout_secs.
    let line = raw(&relay, &put_head(&auth(&alice, Verb::Upload, &[]), 20, &sha), &body[..5], false).await;
    assert_eq!(line, "HTTP/1.1 400 Bad Request");
    for short in [sha.clone(), hash_of(&body[..10]).to_hex(), hash_of(&body[..5]).to_hex()] {
        assert_eq!(call(&relay, Method::HEAD, &format!("/{short}"), &[], None).await.status, StatusCode::NOT_FOUND);
    }
    let temporary = std::fs::read_dir(relay.data_dir().join("media/tmp")).map(|d| d.count()).unwrap_or(0);
    assert_eq!(temporary, 0, "a refused upload leaves no temporary file");
    still_serving(&relay, &kept_sha, &kept).await;
}

#[tokio::test]
async fn forged_group_state_unknown_previous_ids_and_a_moderator_against_an_admin_are_refused() {
    let relay = TestRelay::start(generous).await;
    let (alice, mo, mallory) = (keys(1), keys(2), keys(3));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "g", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "g", &[&["p", &hex(&mo), "moderator"]], ""), true, "").await;
    let mut m = as_(&relay, &mallory).await;
    for kind in 39000..=39005u16 {
        let forged = sign(
            &mallory,
            now(),
            kind,
            &[&["d", "g"], &["name", "Mallory's now"], &["p", &hex(&mallory), "admin"]],
            "",
        );
        ok(
            &mut m,
            &forged,
            false,
            "restricted: kinds 39000-39009 are signed by this relay's own key (NIP-11 self) only",
        )
        .await;
    }
    let mut o = as_(&relay, &mo).await;
    let unknown = ["deadbeef", "00000000", "ffffffff"];
    for id in unknown {
        ok(
            &mut o,
            &to_group(&mo, 9, "g", &[&["previous", id]], "after what?"),
            false,
            &format!("invalid: previous `{id}` names none of this group's last 50 events on this relay"),
        )
        .await;
    }
    let demote = to_group(&mo, 9000, "g", &[&["p", &hex(&alice)]], "");
    ok(&mut o, &demote, false, "restricted: only the group's admins may add members or change their roles").await;
    let remove = to_group(&mo, 9001, "g", &[&["p", &hex(&alice)]], "");
    ok(
        &mut o,
        &remove,
        false,
        "restricted: only the group's admins may remove a member with a role; its moderators, plain members",
    )
    .await;
    // The group is as alice left it: her the admin, the moderator a moderator.
    let mut c = relay.connect().await;
    let admins = c.req("a", vec![json!({"kinds": [39001], "#d": ["g"]})]).await;
    let tags = admins[0]["tags"].clone();
    assert!(tags.as_array().unwrap().contains(&json!(["p", hex(&alice), "admin"])), "{tags}");
    assert!(tags.as_array().unwrap().contains(&json!(["p", hex(&mo), "moderator"])), "{tags}");
    ok(&mut a, &to_group(&alice, 9, "g", &[], "still talking"), true, "").await;
}
