//! NIP-42 read restrictions: events of `auth.private_kinds` (4 and 1059 by default) served only
//! to a connection authenticated as their author or a `p` recipient, on every read path: a REQ's
//! stored answer and its live events, COUNT, and the REST API (NIP-98 names the caller).

use crate::common::*;
use hearth::protocol::{Event, Keys};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// A private relay of three people: alice writes to bob, carol is a stranger to both.
struct Parties {
    alice: Keys,
    bob: Keys,
    carol: Keys,
}

fn parties() -> Parties {
    Parties { alice: keys(1), bob: keys(2), carol: keys(3) }
}

fn to(recipient: &Keys) -> String {
    recipient.public_key().to_hex()
}

/// A gift wrap for `recipient`, signed by `wrapper` at `at` (NIP-59: randomised into the past).
fn wrap(wrapper: &Keys, recipient: &Keys, at: u64, content: &str) -> Event {
    sign(wrapper, at, 1059, &[&["p", &to(recipient)]], content)
}

/// Stores `events` over a connection authenticated as their author each.
async fn store(relay: &TestRelay, events: &[(&Keys, &Event)]) {
    for (author, event) in events {
        let mut c = relay.connect().await;
        assert_eq!(c.auth(author, &relay.ws_url()).await[2], true);
        assert_ok(&c.publish(event).await, &event.id.to_hex(), true, "");
    }
}

#[tokio::test]
async fn a_stranger_asking_for_someones_private_messages_is_asked_to_authenticate_and_then_gets_only_its_own() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let now = now();
    let for_bob = wrap(&p.alice, &p.bob, now - 3 * 86_400, "for bob");
    let for_carol = wrap(&p.alice, &p.carol, now - 100, "for carol");
    let dm = sign(&p.alice, now - 50, 4, &[&["p", &to(&p.bob)]], "a kind 4 to bob");
    let note = sign(&p.alice, now - 10, 1, &[&["p", &to(&p.bob)]], "a public note mentioning bob");
    store(&relay, &[(&p.alice, &for_bob), (&p.alice, &for_carol), (&p.alice, &dm), (&p.alice, &note)]).await;

    // Before AUTH: a filter for private kinds alone is refused auth-required, with a challenge.
    let mut stranger = relay.connect().await;
    stranger.send(json!(["REQ", "wraps", {"kinds": [1059], "#p": [to(&p.bob)]}])).await;
    let closed = stranger.recv().await;
    assert_eq!(closed[0], "CLOSED", "{closed}");
    assert_eq!(closed[1], "wraps");
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(stranger.recv().await, json!(["AUTH", stranger.challenge]));
    stranger.send(json!(["COUNT", "n", {"kinds": [4, 1059]}])).await;
    let closed = stranger.recv().await;
    assert_eq!((closed[0].as_str(), closed[1].as_str()), (Some("CLOSED"), Some("n")), "{closed}");
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(stranger.recv().await[0], "AUTH");
    // A filter that can match public kinds too is answered, without what it may not read.
    assert_eq!(ids(&stranger.req("mixed", vec![json!({"#p": [to(&p.bob)]})]).await), vec![note.id.to_hex()]);
    assert_eq!(ids(&stranger.req("all", vec![json!({})]).await), vec![note.id.to_hex()]);
    stranger.send(json!(["COUNT", "c", {}])).await;
    assert_eq!(stranger.recv().await, json!(["COUNT", "c", {"count": 1}]));

    // Authenticated as carol, a third party to bob's messages: none of them, her own wrap.
    assert_eq!(stranger.auth(&p.carol, &relay.ws_url()).await[2], true);
    assert_eq!(stranger.req("bobs", vec![json!({"kinds": [1059], "#p": [to(&p.bob)]})]).await, Vec::<Value>::new());
    assert_eq!(ids(&stranger.req("mine", vec![json!({"kinds": [4, 1059]})]).await), vec![for_carol.id.to_hex()]);
    stranger.send(json!(["COUNT", "c", {"kinds": [4, 1059]}])).await;
    assert_eq!(stranger.recv().await, json!(["COUNT", "c", {"count": 1}]));

    // Bob, authenticated: exactly what is addressed to him, the wrap stored days in the past too.
    let mut bob = relay.connect().await;
    assert_eq!(bob.auth(&p.bob, &relay.ws_url()).await[2], true);
    let got = bob.req("wraps", vec![json!({"kinds": [1059], "#p": [to(&p.bob)]})]).await;
    assert_eq!(got, vec![serde_json::to_value(&for_bob).unwrap()]);
    assert_eq!(
        ids(&bob.req("dms", vec![json!({"kinds": [4, 1059]})]).await),
        vec![dm.id.to_hex(), for_bob.id.to_hex()]
    );
    bob.send(json!(["COUNT", "c", {"kinds": [4, 1059]}])).await;
    assert_eq!(bob.recv().await, json!(["COUNT", "c", {"count": 2}]));
    // Its author reads what it wrote, to anyone.
    let mut alice = relay.connect().await;
    assert_eq!(alice.auth(&p.alice, &relay.ws_url()).await[2], true);
    assert_eq!(alice.req("sent", vec![json!({"kinds": [1059], "authors": [to(&p.alice)]})]).await.len(), 2);
}

#[tokio::test]
async fn a_limit_counts_only_what_the_reader_may_read() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let now = now();
    let old_for_bob = sign(&p.alice, now - 1000, 4, &[&["p", &to(&p.bob)]], "old");
    let mut newer = vec![];
    for n in 0..5 {
        newer.push(sign(&p.alice, now - 100 + n, 4, &[&["p", &to(&p.carol)]], "to carol"));
    }
    let mut all = vec![(&p.alice, &old_for_bob)];
    all.extend(newer.iter().map(|e| (&p.alice, e)));
    store(&relay, &all).await;
    let mut bob = relay.connect().await;
    assert_eq!(bob.auth(&p.bob, &relay.ws_url()).await[2], true);
    // The five newer messages are carol's: bob's newest one is still his answer.
    assert_eq!(ids(&bob.req("one", vec![json!({"kinds": [4], "limit": 1})]).await), vec![old_for_bob.id.to_hex()]);
}

#[tokio::test]
async fn live_private_events_reach_their_parties_only() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let mut anyone = relay.connect().await;
    anyone.req("all", vec![json!({})]).await;
    let mut carol = relay.connect().await;
    assert_eq!(carol.auth(&p.carol, &relay.ws_url()).await[2], true);
    carol.req("all", vec![json!({"kinds": [1, 1059]})]).await;
    // Bob subscribes before he authenticates: the live event finds him authenticated.
    let mut bob = relay.connect().await;
    bob.req("all", vec![json!({"kinds": [1, 1059]})]).await;
    assert_eq!(bob.auth(&p.bob, &relay.ws_url()).await[2], true);

    let for_bob = wrap(&p.alice, &p.bob, now() - 7200, "live, for bob");
    let note = sign(&p.alice, now(), 1, &[], "live, for all");
    store(&relay, &[(&p.alice, &for_bob), (&p.alice, &note)]).await;

    assert_eq!(bob.recv().await, json!(["EVENT", "all", for_bob]));
    assert_eq!(bob.recv().await, json!(["EVENT", "all", note]));
    // The others get the note, and nothing before it.
    assert_eq!(anyone.recv().await, json!(["EVENT", "all", note]));
    assert_eq!(carol.recv().await, json!(["EVENT", "all", note]));
    anyone.assert_nothing_before_barrier("a stranger got a live private event").await;
    carol.assert_nothing_before_barrier("a third party got a live private event").await;
}

/// A REST call: a POST with `body`, else a GET; signed NIP-98 by `signer`.
async fn call(relay: &TestRelay, path: &str, body: Option<Value>, signer: Option<&Keys>) -> (StatusCode, Value) {
    let method = if body.is_some() { Method::POST } else { Method::GET };
    http(relay, method, path, body, None, signer).await
}

#[tokio::test]
async fn over_rest_private_kinds_need_a_nip98_caller_and_serve_only_its_own() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let for_bob = wrap(&p.alice, &p.bob, now() - 60, "rest, for bob");
    store(&relay, &[(&p.alice, &for_bob)]).await;
    let wraps = json!({"filters": [{"kinds": [1059]}]});
    let (status, body) = call(&relay, "/api/v1/query", Some(wraps.clone()), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{body}");
    assert!(body["error"].as_str().unwrap().starts_with("auth-required: "), "{body}");
    let (status, body) = call(&relay, "/api/v1/count", Some(wraps.clone()), None).await;
    assert_eq!(
        (status, body["error"].as_str().map(|e| e.starts_with("auth-required: "))),
        (StatusCode::UNAUTHORIZED, Some(true))
    );
    let (status, body) = call(&relay, "/api/v1/query", Some(wraps.clone()), Some(&p.bob)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"events": [for_bob]})));
    let (status, body) = call(&relay, "/api/v1/query", Some(wraps.clone()), Some(&p.carol)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"events": []})));
    let (status, body) = call(&relay, "/api/v1/count", Some(wraps), Some(&p.carol)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"count": 0})));
    // By id: not found for anyone but its parties, as if it were not stored.
    let path = format!("/api/v1/events/{}", for_bob.id.to_hex());
    assert_eq!(call(&relay, &path, None, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(call(&relay, &path, None, Some(&p.carol)).await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        call(&relay, &path, None, Some(&p.bob)).await,
        (StatusCode::OK, serde_json::to_value(&for_bob).unwrap())
    );
    // A mixed query without a caller is answered without them.
    let (status, body) = call(&relay, "/api/v1/query", Some(json!({"filters": [{}]})), None).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"events": []})));
}

#[tokio::test]
async fn with_no_private_kinds_every_event_is_served_to_anyone() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.auth.private_kinds = vec![];
    })
    .await;
    let p = parties();
    let for_bob = wrap(&p.alice, &p.bob, now() - 60, "open relay");
    store(&relay, &[(&p.alice, &for_bob)]).await;
    let mut anyone = relay.connect().await;
    assert_eq!(ids(&anyone.req("w", vec![json!({"kinds": [1059]})]).await), vec![for_bob.id.to_hex()]);
}

/// A connection authenticated as `who`.
async fn as_(relay: &TestRelay, who: &Keys) -> Client {
    let mut c = relay.connect().await;
    assert_eq!(c.auth(who, &relay.ws_url()).await[2], true);
    c
}

#[tokio::test]
async fn the_recipient_of_a_gift_wrap_deletes_it_and_it_never_comes_back() {
    let relay = TestRelay::start(generous).await;
    let (p, one_time) = (parties(), keys(9));
    let at = now() - 2 * 86_400;
    let wrapped = wrap(&one_time, &p.bob, at, "sealed for bob");
    let mut w = relay.connect().await;
    assert_ok(&w.publish(&wrapped).await, &wrapped.id.to_hex(), true, "");
    let mut bob = as_(&relay, &p.bob).await;
    let inbox = json!({"kinds": [1059], "#p": [to(&p.bob)]});
    assert_eq!(bob.req_ids("in", vec![inbox.clone()]).await, vec![wrapped.id.to_hex()]);
    // A stranger's deletion does nothing; the recipient's removes it.
    let mut carol = as_(&relay, &p.carol).await;
    let theirs = sign(&p.carol, now(), 5, &[&["e", &wrapped.id.to_hex()]], "");
    assert_ok(&carol.publish(&theirs).await, &theirs.id.to_hex(), true, "");
    assert_eq!(bob.req_ids("in2", vec![inbox.clone()]).await, vec![wrapped.id.to_hex()]);
    let mine = sign(&p.bob, now(), 5, &[&["e", &wrapped.id.to_hex()]], "read it, thanks");
    assert_ok(&bob.publish(&mine).await, &mine.id.to_hex(), true, "");
    assert_eq!(bob.req_ids("in3", vec![inbox.clone()]).await, Vec::<String>::new());
    // Sent again, it stays deleted.
    assert_eq!(
        w.publish(&wrapped).await,
        json!(["OK", wrapped.id.to_hex(), false, "blocked: deleted by its recipient"])
    );
    // A deletion that arrives first keeps the wrap out when it comes.
    let later = wrap(&keys(10), &p.bob, at, "another");
    let first = sign(&p.bob, now(), 5, &[&["e", &later.id.to_hex()]], "");
    assert_ok(&bob.publish(&first).await, &first.id.to_hex(), true, "");
    assert_eq!(w.publish(&later).await, json!(["OK", later.id.to_hex(), false, "blocked: deleted by its recipient"]));
    // And after a restart.
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, generous).await;
    let mut bob = as_(&relay, &p.bob).await;
    assert_eq!(bob.req_ids("in4", vec![inbox]).await, Vec::<String>::new());
    let mut w = relay.connect().await;
    assert_eq!(w.publish(&wrapped).await[3], "blocked: deleted by its recipient");
}

#[tokio::test]
async fn a_gift_wrap_names_exactly_one_recipient() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let mut c = relay.connect().await;
    let words = "invalid: a gift wrap is addressed to exactly one recipient: one p tag (wrap a copy for each)";
    for kind in [1059, 21059] {
        let two = sign(&keys(9), now(), kind, &[&["p", &to(&p.bob)], &["p", &to(&p.carol)]], "x");
        assert_eq!(c.publish(&two).await, json!(["OK", two.id.to_hex(), false, words]));
        let none = sign(&keys(9), now(), kind, &[], "x");
        assert_eq!(c.publish(&none).await, json!(["OK", none.id.to_hex(), false, words]));
    }
}

#[tokio::test]
async fn an_ephemeral_wrap_reaches_its_recipient_live_only_and_inbox_relays_are_public() {
    let relay = TestRelay::start(generous).await;
    let p = parties();
    let mut bob = as_(&relay, &p.bob).await;
    let mut carol = as_(&relay, &p.carol).await;
    let live = json!({"kinds": [21059]});
    assert_eq!(bob.req("b", vec![live.clone()]).await, Vec::<Value>::new());
    assert_eq!(carol.req("c", vec![live.clone()]).await, Vec::<Value>::new());
    let ping = sign(&keys(9), now(), 21059, &[&["p", &to(&p.bob)]], "typing… sealed");
    let mut w = relay.connect().await;
    assert_ok(&w.publish(&ping).await, &ping.id.to_hex(), true, "");
    assert_eq!(bob.recv().await, json!(["EVENT", "b", ping]));
    carol.assert_nothing_before_barrier("an ephemeral wrap is its recipient's only").await;
    // Never stored.
    assert_eq!(bob.req_ids("again", vec![live]).await, Vec::<String>::new());
    // Kind 10050 (where to send bob DMs) is for anyone to read, without AUTH.
    let relays = sign(&p.bob, now(), 10050, &[&["relay", "wss://inbox.example"]], "");
    assert_ok(&bob.publish(&relays).await, &relays.id.to_hex(), true, "");
    let mut anyone = relay.connect().await;
    assert_eq!(
        anyone.req_ids("r", vec![json!({"kinds": [10050], "authors": [to(&p.bob)]})]).await,
        vec![relays.id.to_hex()]
    );
}

#[tokio::test]
async fn in_members_write_a_member_receives_gift_wraps_from_outside() {
    let (p, one_time) = (parties(), keys(9));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.access.mode = hearth::config::AccessMode::MembersWrite;
        c.auth.members = vec![p.bob.public_key()];
    })
    .await;
    let for_bob = wrap(&one_time, &p.bob, now() - 3600, "from outside");
    // Not authenticated: asked to.
    let mut anon = relay.connect().await;
    assert_eq!(
        anon.publish(&for_bob).await,
        json!([
            "OK",
            for_bob.id.to_hex(),
            false,
            "auth-required: authenticate (NIP-42) to send a gift wrap to a member of this relay"
        ])
    );
    // Authenticated as anyone (carol is no member): taken, and bob reads it.
    let mut carol = as_(&relay, &p.carol).await;
    assert_ok(&carol.publish(&for_bob).await, &for_bob.id.to_hex(), true, "");
    let mut bob = as_(&relay, &p.bob).await;
    assert_eq!(bob.req_ids("in", vec![json!({"kinds": [1059], "#p": [to(&p.bob)]})]).await, vec![for_bob.id.to_hex()]);
    // A wrap to a non-member is a non-member's write.
    let for_alice = wrap(&one_time, &p.alice, now() - 3600, "not a member");
    assert_eq!(
        carol.publish(&for_alice).await,
        json!(["OK", for_alice.id.to_hex(), false, "restricted: only members of this relay may publish here"])
    );
    // Carol's own note is a non-member's write too.
    let note = sign(&p.carol, now(), 1, &[], "hello");
    assert_eq!(carol.publish(&note).await[3], "restricted: only members of this relay may publish here");
}
