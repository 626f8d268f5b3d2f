//! NIP-50 search and the relay's other rules: a search finds private events (when an operator
//! indexes their kinds) only for their parties, on WebSocket REQ/COUNT and REST alike, and every
//! search bills the limiter as the REQ or REST call that carries it.

use crate::common::*;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// Until a search for `word` by `c` answers `want` events (the index commits within a second).
pub(crate) async fn until_found(c: &mut Client, word: &str, want: usize) {
    poll(&format!("a search for {word} to find {want}"), 3 * STEP, async || {
        let got = c.req("wait", vec![json!({"search": word})]).await;
        if got.len() == want { Ok(()) } else { Err(format!("{got:?}")) }
    })
    .await
}

#[tokio::test]
async fn a_search_finds_private_messages_only_for_their_parties_on_every_read_path() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.storage.search_kinds = vec![hearth::protocol::Kind(1), hearth::protocol::Kind(4)];
    })
    .await;
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let now = now();
    let dm = sign(&alice, now - 20, 4, &[&["p", &bob.public_key().to_hex()]], "the secret picnic place");
    let note = sign(&alice, now - 10, 1, &[], "the picnic is on Sunday");
    let mut author = relay.connect().await;
    assert_eq!(author.auth(&alice, &relay.ws_url()).await[2], true);
    for e in [&dm, &note] {
        assert_ok(&author.publish(e).await, &e.id.to_hex(), true, "");
    }
    until_found(&mut author, "picnic", 2).await;

    // Unauthenticated: the public note only; a search for the private kind alone asks for AUTH.
    let mut stranger = relay.connect().await;
    assert_eq!(ids(&stranger.req("s", vec![json!({"search": "picnic"})]).await), vec![note.id.to_hex()]);
    assert_eq!(stranger.req("s", vec![json!({"search": "secret"})]).await, Vec::<Value>::new());
    stranger.send(json!(["REQ", "dm", {"search": "picnic", "kinds": [4]}])).await;
    let closed = stranger.recv().await;
    assert_eq!((closed[0].as_str(), closed[1].as_str()), (Some("CLOSED"), Some("dm")), "{closed}");
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(stranger.recv().await[0], "AUTH");
    stranger.send(json!(["COUNT", "n", {"search": "picnic"}])).await;
    assert_eq!(stranger.recv().await, json!(["COUNT", "n", {"count": 1}]));

    // Carol, authenticated, is a third party: still the note only.
    assert_eq!(stranger.auth(&carol, &relay.ws_url()).await[2], true);
    assert_eq!(ids(&stranger.req("s", vec![json!({"search": "picnic"})]).await), vec![note.id.to_hex()]);
    stranger.send(json!(["COUNT", "n", {"search": "secret"}])).await;
    assert_eq!(stranger.recv().await, json!(["COUNT", "n", {"count": 0}]));

    // Bob, the recipient: both, in rank order (the shorter text first on one occurrence each).
    let mut recipient = relay.connect().await;
    assert_eq!(recipient.auth(&bob, &relay.ws_url()).await[2], true);
    let found = ids(&recipient.req("s", vec![json!({"search": "picnic"})]).await);
    assert_eq!(found, vec![dm.id.to_hex(), note.id.to_hex()]);

    // REST: anonymous sees the note; NIP-98 as carol the note; as bob both.
    let body = json!({"filters": [{"search": "picnic"}]});
    for (signer, want) in [
        (None, vec![note.id.to_hex()]),
        (Some(&carol), vec![note.id.to_hex()]),
        (Some(&bob), vec![dm.id.to_hex(), note.id.to_hex()]),
    ] {
        let (status, answer) = http(&relay, Method::POST, "/api/v1/query", Some(body.clone()), None, signer).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        assert_eq!(ids(answer["events"].as_array().unwrap()), want, "signed by {:?}", signer.map(|k| k.public_key()));
    }
    let count = json!({"filters": [{"search": "secret"}]});
    let (status, answer) = http(&relay, Method::POST, "/api/v1/count", Some(count.clone()), None, None).await;
    assert_eq!((status, &answer["count"]), (StatusCode::OK, &json!(0)), "{answer}");
    let (status, answer) = http(&relay, Method::POST, "/api/v1/count", Some(count), None, Some(&bob)).await;
    assert_eq!((status, &answer["count"]), (StatusCode::OK, &json!(1)), "{answer}");
}

#[tokio::test]
async fn every_search_bills_the_limiter_like_a_req_and_is_refused_on_its_own_frame() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limits.human.ws_reqs_per_sec = 2;
        c.limits.human.ws_reqs_burst_window_secs = 1;
        c.limits.human.api_calls_per_min = 2;
    })
    .await;
    let mut c = relay.connect().await;
    // Two reads a second: the third search of the second is refused, tied to its subscription.
    for sub in ["a", "b"] {
        c.send(json!(["REQ", sub, {"search": "anything"}])).await;
        assert_eq!(c.recv().await, json!(["EOSE", sub]));
    }
    c.send(json!(["REQ", "c", {"search": "anything"}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "c", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));
    c.send(json!(["COUNT", "d", {"search": "anything"}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "d", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));

    // REST: two calls a minute, the third a 429 naming the api_calls quota.
    let body = json!({"filters": [{"search": "anything"}]});
    for _ in 0..2 {
        let (status, answer) = http(&relay, Method::POST, "/api/v1/query", Some(body.clone()), None, None).await;
        assert_eq!(status, StatusCode::OK, "{answer}");
    }
    let (status, answer) = http(&relay, Method::POST, "/api/v1/count", Some(body), None, None).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{answer}");
    assert_eq!(answer["limit_type"], "api_calls", "{answer}");
}
