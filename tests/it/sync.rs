//! NIP-77 on the relay (NEG-OPEN / NEG-MSG / NEG-CLOSE / NEG-ERR, driven by the `negentropy`
//! crate as a client would, with exact frames), and sync rounds through the admin API between two
//! relays: `POST /admin/v1/sync/rounds`, `GET /admin/v1/sync`, starting a configured peer.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::*;
use hearth::config::{AccessMode, Config, Direction, SyncPeer};
use hearth::protocol::Event;
use negentropy::{Id, Negentropy, NegentropyStorageVector};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "sync-admin-token";
const FRAME_LIMIT: u64 = 60_000;

fn storage(events: &[&Event]) -> NegentropyStorageVector {
    let mut storage = NegentropyStorageVector::new();
    for e in events {
        storage.insert(e.created_at.0, Id::from_byte_array(e.id.0)).unwrap();
    }
    storage.seal().unwrap();
    storage
}

/// Reconciles `ours` with the relay over `client` as subscription `sub`: the ids we have and the
/// relay lacks, and those it has and we lack, as hex, sorted.
pub(crate) async fn reconcile(
    client: &mut Client,
    sub: &str,
    filter: Value,
    ours: &[&Event],
) -> (Vec<String>, Vec<String>) {
    let storage = storage(ours);
    let mut neg = Negentropy::borrowed(&storage, FRAME_LIMIT).unwrap();
    let first = neg.initiate().unwrap();
    client.send(json!(["NEG-OPEN", sub, filter, hex::encode(first)])).await;
    let (mut have, mut need) = (BTreeSet::new(), BTreeSet::new());
    loop {
        let answer = client.recv().await;
        assert_eq!((answer[0].as_str(), answer[1].as_str()), (Some("NEG-MSG"), Some(sub)), "{answer}");
        let bytes = hex::decode(answer[2].as_str().unwrap()).unwrap();
        let (mut h, mut n) = (Vec::new(), Vec::new());
        let next = neg.reconcile_with_ids(&bytes, &mut h, &mut n).unwrap();
        have.extend(h.into_iter().map(|id| hex::encode(id.to_bytes())));
        need.extend(n.into_iter().map(|id| hex::encode(id.to_bytes())));
        match next {
            Some(message) => client.send(json!(["NEG-MSG", sub, hex::encode(message)])).await,
            None => break,
        }
    }
    client.send(json!(["NEG-CLOSE", sub])).await;
    (have.into_iter().collect(), need.into_iter().collect())
}

/// Asserts a NEG-ERR for `sub` whose reason starts with `prefix` (as `assert_ok` does for OK).
fn assert_neg_err(frame: &Value, sub: &str, prefix: &str) {
    assert_eq!((frame[0].as_str(), frame[1].as_str()), (Some("NEG-ERR"), Some(sub)), "{frame}");
    assert!(frame[2].as_str().is_some_and(|r| r.starts_with(prefix)), "expected {prefix:?}, got {frame}");
}

fn sorted(events: &[&Event]) -> Vec<String> {
    let mut ids: Vec<String> = events.iter().map(|e| e.id.to_hex()).collect();
    ids.sort();
    ids
}

/// A valid first message for an empty set.
fn empty_open() -> String {
    let storage = storage(&[]);
    hex::encode(Negentropy::borrowed(&storage, FRAME_LIMIT).unwrap().initiate().unwrap())
}

#[tokio::test]
async fn neg_finds_exactly_the_difference_and_private_messages_only_for_their_parties() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob, stranger) = (keys(1), keys(2), keys(3));
    let t = now() - 100;
    let notes: Vec<Event> = (0..5).map(|i| sign(&alice, t + i, 1, &[], &format!("note {i}"))).collect();
    let dm = sign(&alice, t + 10, 4, &[&["p", &bob.public_key().to_hex()]], "c2VjcmV0?iv=AAAAAAAAAAAAAAAAAAAAAA==");
    // A gift wrap (NIP-59) to bob, signed by a throwaway key as NIP-59 has it.
    let wrap = sign(&keys(9), t + 11, 1059, &[&["p", &bob.public_key().to_hex()]], "sealed");
    let mut c = relay.connect().await;
    for e in notes.iter().chain([&dm, &wrap]) {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
    // We hold notes 0 and 1 and one event the relay lacks.
    let only_ours = sign(&alice, t + 20, 1, &[], "only ours");
    let ours = [&notes[0], &notes[1], &only_ours];

    // A stranger's set has the notes, never the DM or the wrap (nor their ids), before AUTH and
    // after it.
    let mut s = relay.connect().await;
    let (have, need) = reconcile(&mut s, "n1", json!({}), &ours).await;
    assert_eq!(have, vec![only_ours.id.to_hex()]);
    assert_eq!(need, sorted(&[&notes[2], &notes[3], &notes[4]]));
    let answer = s.auth(&stranger, &relay.ws_url()).await;
    assert_eq!((&answer[0], &answer[2]), (&json!("OK"), &json!(true)), "{answer}");
    let (_, need) = reconcile(&mut s, "n2", json!({"kinds": [1, 4, 1059]}), &ours).await;
    assert_eq!(need, sorted(&[&notes[2], &notes[3], &notes[4]]));
    let (have, need) = reconcile(&mut s, "n2w", json!({"kinds": [1059]}), &[]).await;
    assert_eq!((have, need), (Vec::<String>::new(), Vec::<String>::new()));

    // The recipient, authenticated, is told of it; a filter narrows the set.
    let mut b = relay.connect().await;
    b.auth(&bob, &relay.ws_url()).await;
    let (_, need) = reconcile(&mut b, "n3", json!({}), &ours).await;
    assert_eq!(need, sorted(&[&notes[2], &notes[3], &notes[4], &dm, &wrap]));
    let (have, need) = reconcile(&mut b, "n4", json!({"kinds": [4]}), &[]).await;
    assert_eq!((have, need), (vec![], vec![dm.id.to_hex()]));
    let (have, need) = reconcile(&mut b, "n5", json!({"kinds": [1059]}), &[]).await;
    assert_eq!((have, need), (vec![], vec![wrap.id.to_hex()]));

    // Before AUTH, a filter for private kinds alone is refused auth-required, with a challenge.
    let mut fresh = relay.connect().await;
    fresh.send(json!(["NEG-OPEN", "p", {"kinds": [4]}, empty_open()])).await;
    assert_neg_err(&fresh.recv().await, "p", "auth-required: ");
    assert_eq!(fresh.recv().await[0], "AUTH");
}

#[tokio::test]
async fn bad_neg_frames_get_a_neg_err_tied_to_their_id() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.sync.max_items = 3;
        c.sync.max_sessions = 2;
    })
    .await;
    let mut c = relay.connect().await;
    c.send(json!(["NEG-MSG", "x", "zz"])).await;
    assert_eq!(
        c.recv().await,
        json!(["NEG-ERR", "x", "invalid: the negentropy message is not hex: Invalid character 'z' at position 0"])
    );
    c.send(json!(["NEG-MSG", "none", "61"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "none", "closed: no negentropy session is open with this id"]));
    // A protocol version we do not speak is answered with the one we do (NIP-77).
    c.send(json!(["NEG-OPEN", "v", {}, "62"])).await;
    assert_eq!(c.recv().await, json!(["NEG-MSG", "v", "61"]));
    c.send(json!(["NEG-OPEN", "v", {}, "61000005"])).await;
    assert_neg_err(&c.recv().await, "v", "invalid: the negentropy message could not be read: ");
    c.send(json!(["NEG-OPEN", "f", {"kinds": "one"}, empty_open()])).await;
    assert_neg_err(&c.recv().await, "f", "invalid: filter: ");

    // Two sessions at most; a NEG-OPEN with a live id replaces that session.
    for sub in ["a", "b", "a"] {
        c.send(json!(["NEG-OPEN", sub, {}, empty_open()])).await;
        assert_eq!(c.recv().await[0], "NEG-MSG");
    }
    c.send(json!(["NEG-OPEN", "c", {}, empty_open()])).await;
    assert_eq!(
        c.recv().await,
        json!(["NEG-ERR", "c", "blocked: too many open negentropy sessions: at most 2 per connection"])
    );
    // A closed session is gone.
    c.send(json!(["NEG-CLOSE", "a"])).await;
    c.send(json!(["NEG-MSG", "a", "61"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "a", "closed: no negentropy session is open with this id"]));

    // More items than sync.max_items.
    let k = keys(4);
    // Four distinct events: `now()` may pass a second between two of them, so the content differs
    // too (two of the same second and content would be one event, stored once).
    let t = now();
    for i in 0..4 {
        let e = sign(&k, t - i, 1, &[], &format!("x{i}"));
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    }
    c.send(json!(["NEG-OPEN", "big", {}, empty_open()])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "big", "blocked: too many records"]));
    // The connection still serves.
    assert_eq!(c.req("r", vec![json!({"limit": 1})]).await.len(), 1);
}

#[tokio::test]
async fn neg_open_bills_ws_reqs_neg_msg_ws_events_and_members_only_asks_for_auth() {
    let relay = TestRelay::start(|c| {
        c.limits.human.ws_reqs_per_sec = 1;
        c.limits.human.ws_reqs_burst_window_secs = 2;
        c.limits.human.ws_events_per_sec = 1;
        c.limits.human.ws_burst_window_secs = 1;
    })
    .await;
    let mut c = relay.connect().await;
    for sub in ["a", "b"] {
        c.send(json!(["NEG-OPEN", sub, {}, empty_open()])).await;
        assert_eq!(c.recv().await[0], "NEG-MSG");
    }
    // A NEG-OPEN is a read: the reads' budget is spent, the writes' is not.
    c.send(json!(["NEG-OPEN", "c", {}, empty_open()])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "c", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));
    let e = sign(&keys(4), now(), 1, &[], "a write");
    assert_eq!(c.publish(&e).await[2], true);
    // A NEG-MSG bills the writes' budget, now spent.
    c.send(json!(["NEG-MSG", "a", "61"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "a", "rate-limited: quota exceeded (ws_events); retry in 1s"]));
    // A NEG-ERR ends its session: once the gate clears, "a" is gone.
    relay.clock.advance(Duration::from_secs(2));
    c.send(json!(["NEG-MSG", "a", "61"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "a", "closed: no negentropy session is open with this id"]));

    let member = keys(5);
    let closed = TestRelay::start(|c: &mut Config| {
        generous(c);
        c.access.mode = AccessMode::MembersOnly;
        c.auth.members = vec![member.public_key()];
    })
    .await;
    let mut m = closed.connect().await;
    m.send(json!(["NEG-OPEN", "m", {}, empty_open()])).await;
    assert_eq!(
        m.recv().await,
        json!(["NEG-ERR", "m", "auth-required: this relay is for its members; answer the AUTH challenge"])
    );
    assert_eq!(m.recv().await[0], "AUTH");
    m.auth(&member, &closed.ws_url()).await;
    m.send(json!(["NEG-OPEN", "m", {}, empty_open()])).await;
    assert_eq!(m.recv().await[0], "NEG-MSG");
    let mut outsider = closed.connect().await;
    outsider.auth(&keys(6), &closed.ws_url()).await;
    outsider.send(json!(["NEG-OPEN", "o", {}, empty_open()])).await;
    assert_eq!(outsider.recv().await, json!(["NEG-ERR", "o", "restricted: this relay is for its members only"]));
}

fn admin(c: &mut Config) {
    generous(c);
    c.admin.token = TOKEN.into();
}

async fn call(relay: &TestRelay, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    http(relay, method, path, body, Some(TOKEN), None).await
}

async fn publish_all(relay: &TestRelay, events: &[Event]) {
    let mut c = relay.connect().await;
    for e in events {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
}

#[tokio::test]
async fn a_round_through_the_admin_api_moves_both_ways_within_the_peers_quota() {
    let local = TestRelay::start(admin).await;
    // The peer admits 60 events at once, then one a second: the round waits out its gate.
    let peer = TestRelay::start_real_clock(|c| {
        generous(c);
        c.limits.human.messages_per_min = 60;
    })
    .await;
    let t = now() - 1000;
    let ours: Vec<Event> = (0..63).map(|i| sign(&keys(7), t + i, 1, &[], &format!("ours {i}"))).collect();
    let theirs: Vec<Event> = (0..5).map(|i| sign(&keys(8), t + i, 1, &[], &format!("theirs {i}"))).collect();
    publish_all(&local, &ours).await;
    publish_all(&peer, &theirs).await;

    let round = json!({"url": peer.ws_url(), "direction": "both"});
    let (status, summary) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(round.clone())).await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    for (field, want) in [("have", 63), ("need", 5), ("fetched", 5), ("stored", 5), ("published", 63), ("refused", 0)] {
        assert_eq!(summary[field], want, "{field}: {summary}");
    }
    let mut c = peer.connect().await;
    assert_eq!(c.req_ids("all", vec![json!({"authors": [keys(7).public_key().to_hex()]})]).await.len(), 63);
    let mut c = local.connect().await;
    assert_eq!(c.req_ids("all", vec![json!({"authors": [keys(8).public_key().to_hex()]})]).await.len(), 5);

    // Nothing is left to move; a dry run only counts.
    let fresh = sign(&keys(8), now(), 1, &[], "fresh");
    publish_all(&peer, std::slice::from_ref(&fresh)).await;
    let dry = json!({"url": peer.ws_url(), "direction": "down", "dry_run": true});
    let (status, summary) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(dry)).await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!(
        (summary["have"].clone(), summary["need"].clone(), summary["stored"].clone()),
        (json!(0), json!(1), json!(0))
    );
    assert!(audit_actions(&local, TOKEN).await.contains(&"sync.round".to_string()));

    // Not a WebSocket URL: 400. No relay there: 502 with the summary and why.
    let (status, body) =
        call(&local, Method::POST, "/admin/v1/sync/rounds", Some(json!({"url": "http://example.org"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let gone = json!({"url": format!("ws://{closed}/")});
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(gone)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(body["error"].as_str().unwrap().contains("cannot connect"), "{body}");
    assert_eq!(body["stored"], 0);
    // wss:// speaks TLS: a plain relay's port refuses the handshake, and the round says so.
    let tls = json!({"url": peer.ws_url().replace("ws://", "wss://")});
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(tls)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(error.starts_with("cannot connect to wss://") && error.contains("corrupt message"), "{body}");
}

#[tokio::test]
async fn a_configured_peer_is_kept_in_step_reported_and_started_from_the_admin_api() {
    let peer = TestRelay::start(generous).await;
    let theirs: Vec<Event> = (0..3).map(|i| sign(&keys(9), now() - 10 + i, 1, &[], &format!("p {i}"))).collect();
    publish_all(&peer, &theirs).await;
    let url = peer.ws_url();
    let local = TestRelay::start(|c| {
        admin(c);
        c.sync.peers = vec![SyncPeer {
            url: url.clone(),
            filter: r#"{"kinds":[1]}"#.into(),
            direction: Direction::Down,
            interval_secs: 3600,
            allow_public: false,
        }];
    })
    .await;

    // The first round runs soon after start; the relay reports it.
    let first = last_round(&local, 1).await;
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!((first["need"].clone(), first["stored"].clone()), (json!(3), json!(3)), "{first}");
    let (_, view) = call(&local, Method::GET, "/admin/v1/sync", None).await;
    let p = &view["peers"][0];
    assert_eq!((p["index"].clone(), p["url"].clone(), p["direction"].clone()), (json!(0), json!(url), json!("down")));
    assert_eq!(p["interval_secs"], 3600);

    // Started by hand: the next round picks up what is new.
    let more = sign(&keys(9), now(), 1, &[], "more");
    publish_all(&peer, std::slice::from_ref(&more)).await;
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/peers/0/start", None).await;
    assert_eq!((status, body), (StatusCode::ACCEPTED, json!({"index": 0, "started": true})));
    let second = last_round(&local, 2).await;
    assert_eq!((second["need"].clone(), second["stored"].clone()), (json!(1), json!(1)), "{second}");
    let mut c = local.connect().await;
    assert_eq!(c.req_ids("x", vec![json!({"ids": [more.id.to_hex()]})]).await, vec![more.id.to_hex()]);
    let (status, _) = call(&local, Method::POST, "/admin/v1/sync/peers/5/start", None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(audit_actions(&local, TOKEN).await.contains(&"sync.start".to_string()));
}

/// Peer 0's last round once it has run `rounds` rounds.
async fn last_round(relay: &TestRelay, rounds: u64) -> Value {
    poll(&format!("round {rounds}"), 3 * STEP, async || {
        let (status, view) = call(relay, Method::GET, "/admin/v1/sync", None).await;
        assert_eq!(status, StatusCode::OK, "{view}");
        let peer = &view["peers"][0];
        if peer["rounds"].as_u64().unwrap_or(0) >= rounds && !peer["running"].as_bool().unwrap_or(true) {
            Ok(peer["last_round"].clone())
        } else {
            Err(view.to_string())
        }
    })
    .await
}

#[tokio::test]
async fn messages_cut_to_a_small_frame_size_still_find_exactly_the_difference() {
    // The newest events differ (a backup that missed the last days), and every message is cut to
    // 4096 bytes, so ranges are answered across several messages.
    let small = |c: &mut Config| {
        admin(c);
        c.sync.frame_size_limit = 4096;
    };
    let (local, peer) = (TestRelay::start(small).await, TestRelay::start(small).await);
    let t = now() - 100_000;
    let all: Vec<Event> =
        (0..1500).map(|i| sign(&keys(10 + (i % 7) as u8), t + i, 1, &[], &format!("n {i}"))).collect();
    let (shared, newest) = all.split_at(1100);
    let (ours, theirs) = newest.split_at(150);
    publish_all(&local, &[shared, ours].concat()).await;
    publish_all(&peer, &[shared, theirs].concat()).await;
    let dry = json!({"url": peer.ws_url(), "dry_run": true});
    let (status, summary) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(dry)).await;
    assert_eq!(status, StatusCode::OK, "{summary}");
    assert_eq!((summary["have"].clone(), summary["need"].clone()), (json!(150), json!(250)), "{summary}");
}

#[tokio::test]
async fn a_peer_that_is_down_is_reported_and_retried_and_the_relay_serves_on() {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let url = format!("ws://{closed}/");
    let local = TestRelay::start(|c| {
        admin(c);
        c.sync.peers = vec![SyncPeer {
            url: url.clone(),
            filter: "{}".into(),
            direction: Direction::Both,
            interval_secs: 3600,
            allow_public: false,
        }];
    })
    .await;
    let first = last_round(&local, 1).await;
    assert_eq!(first["ok"], false, "{first}");
    assert!(first["error"].as_str().unwrap().starts_with(&format!("cannot connect to {url}")), "{first}");
    let (_, view) = call(&local, Method::GET, "/admin/v1/sync", None).await;
    let peer = &view["peers"][0];
    assert_eq!(peer["failures"], 1, "{view}");
    // Retried after the first back-off (5 s), not the hour-long interval.
    let next = peer["next_round_at"].as_u64().unwrap();
    assert!(next <= first["finished_at"].as_u64().unwrap() + 6, "{view}");
    let note = sign(&keys(11), now(), 1, &[], "still serving");
    publish_all(&local, std::slice::from_ref(&note)).await;
    let mut c = local.connect().await;
    assert_eq!(c.req_ids("s", vec![json!({"ids": [note.id.to_hex()]})]).await, vec![note.id.to_hex()]);
}

#[tokio::test]
async fn no_number_of_connections_makes_the_relay_hold_more_than_max_items_held() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.sync.max_items = 3;
        c.sync.max_items_held = 5;
    })
    .await;
    let events: Vec<Event> = (0..3).map(|i| sign(&keys(12), now() - i, 1, &[], "held")).collect();
    publish_all(&relay, &events).await;
    let full = json!([
        "NEG-ERR",
        "b",
        "blocked: the relay's open sync sessions hold as many items as it allows; try again when they close"
    ]);
    let (mut one, mut two) = (relay.connect().await, relay.connect().await);
    one.send(json!(["NEG-OPEN", "a", {}, empty_open()])).await;
    let first = one.recv().await;
    assert_eq!(first[0], "NEG-MSG", "{first}");
    // 3 held: another 3 would pass 5, on any connection.
    two.send(json!(["NEG-OPEN", "b", {}, empty_open()])).await;
    assert_eq!(two.recv().await, full);
    // 2 more fit.
    two.send(json!(["NEG-OPEN", "k", {"limit": 2}, empty_open()])).await;
    assert_eq!(two.recv().await[0], "NEG-MSG");
    two.send(json!(["NEG-CLOSE", "k"])).await;
    // A closed session gives its items back…
    one.send(json!(["NEG-CLOSE", "a"])).await;
    one.send(json!(["NEG-MSG", "a", "61"])).await;
    assert_eq!(one.recv().await[0], "NEG-ERR");
    two.send(json!(["NEG-OPEN", "b", {}, empty_open()])).await;
    assert_eq!(two.recv().await[0], "NEG-MSG");
    // …and so does a connection that goes away.
    drop(two);
    poll("the closed connection's session to be given back", STEP, async || {
        one.send(json!(["NEG-OPEN", "b", {}, empty_open()])).await;
        let answer = one.recv().await;
        if answer[0] == "NEG-MSG" {
            return Ok(());
        }
        assert_eq!(answer, full);
        Err(answer.to_string())
    })
    .await;
}

#[tokio::test]
async fn an_idle_session_is_closed_with_a_neg_err() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.sync.idle_secs = 1;
        c.server.ping_interval_secs = 1;
    })
    .await;
    let mut c = relay.connect().await;
    c.send(json!(["NEG-OPEN", "slow", {}, empty_open()])).await;
    assert_eq!(c.recv().await[0], "NEG-MSG");
    // Checked at each ping: after at most idle + one interval, and the connection stays open.
    let closed = c.recv_within(Duration::from_secs(5)).await;
    assert_eq!(closed, Some(json!(["NEG-ERR", "slow", "closed: the session was idle for more than 1 seconds"])));
    c.send(json!(["NEG-MSG", "slow", "61"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "slow", "closed: no negentropy session is open with this id"]));
}

#[tokio::test]
async fn members_only_events_are_not_copied_to_where_anyone_reads_them_unless_allowed() {
    let member = keys(21);
    let peer = TestRelay::start(|c| {
        admin(c);
        c.access.mode = hearth::config::AccessMode::MembersOnly;
        c.auth.members = vec![member.public_key()];
    })
    .await;
    let local = TestRelay::start(admin).await;
    let note = sign(&member, now() - 10, 1, &[], "for the members");
    let mut c = peer.connect().await;
    assert_eq!(c.auth(&member, &peer.ws_url()).await[2], json!(true));
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");

    // Down from a members-only peer into this public relay: refused, naming the override.
    let down = json!({"url": peer.ws_url(), "direction": "down"});
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(down)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(
        body["error"],
        "the peer serves its events to its members only, and this relay (access.mode = \"public\") would serve them \
         to anyone: set access.mode = \"members-only\" here first, or pass --allow-public to copy them anyway"
    );
    assert_eq!((body["stored"].clone(), body["need"].clone()), (json!(0), json!(0)));

    // Allowed, it still needs this relay's key to be a member there: the refusal says which key.
    let ours = local.nip11().await["self"].as_str().unwrap().to_string();
    let allowed = json!({"url": peer.ws_url(), "direction": "down", "allow_public": true});
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(allowed.clone())).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let error = body["error"].as_str().unwrap();
    assert!(
        error.starts_with("the peer refused: restricted: this relay is for its members only (this relay signs in as "),
        "{error}"
    );
    assert!(
        error.contains(&format!("make that key a member of the peer, e.g. `PUT /admin/v1/members/{ours}`")),
        "{error}"
    );
    let (status, _) = call(&peer, Method::PUT, &format!("/admin/v1/members/{ours}"), Some(json!({}))).await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = call(&local, Method::POST, "/admin/v1/sync/rounds", Some(allowed)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // The note, and the peer's own kind 19004 (who may create rooms there), which is the peer's
    // to say and not this relay's: refused.
    assert_eq!((body["need"].clone(), body["stored"].clone()), (json!(2), json!(1)));

    // Up from the members-only relay to a public one: refused the same way.
    let up = json!({"url": local.ws_url(), "direction": "up"});
    let (status, body) = call(&peer, Method::POST, "/admin/v1/sync/rounds", Some(up)).await;
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert_eq!(
        body["error"],
        "this relay serves its events to its members only, and the peer does not require AUTH to read: it would \
         serve them to anyone; make the peer members-only first, or pass --allow-public to copy them anyway"
    );
}
