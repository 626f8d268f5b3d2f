//! What the chat clients people use (Flotilla, Chachi) ask of a relay, frame by frame, as each
//! sends it: a NIP-43 join with an empty claim to add any space, NIP-86 `supportedmethods` from a
//! browser origin, a NEG-OPEN per room at once, the relay's kind 19004 naming who may create
//! rooms, and members' mail (zap receipts, gift wraps) from outside an allow-listed relay.

use std::time::Duration;

use crate::common::*;
use hearth::config::{AccessMode, Config, GroupCreators};
use hearth::protocol::{Event, Keys, Timestamp, nip98};
use negentropy::{Negentropy, NegentropyStorageVector};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "clients-admin-token";

fn operator() -> Keys {
    keys(90)
}

/// Flotilla's join request: `["claim", ""]` when it has no code.
fn join(who: &Keys, claim: &str) -> Event {
    sign(who, now(), 28934, &[&["claim", claim]], "")
}

async fn authed(relay: &TestRelay, who: &Keys) -> Client {
    let mut c = relay.connect().await;
    assert_eq!(c.auth(who, &relay.ws_url()).await[2], true);
    c
}

/// Adds `who` to the relay's member list (`PUT`) or takes it off (`DELETE`) through the admin API;
/// the relay has said what follows from it (its kind 19004 among it) when this returns.
async fn member(relay: &TestRelay, method: Method, who: &Keys) {
    let path = format!("/admin/v1/members/{}", who.public_key().to_hex());
    let body = (method == Method::PUT).then(|| json!({}));
    let (status, answer) = http(relay, method, &path, body, Some(TOKEN), None).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
}

fn community(mode: AccessMode) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        generous(c);
        c.admin.token = TOKEN.into();
        c.admin.pubkeys = vec![operator().public_key()];
        c.access.mode = mode;
    }
}

#[tokio::test]
async fn a_public_relay_accepts_an_empty_claim_and_a_member_is_told_it_is_one_already() {
    let relay = TestRelay::start(community(AccessMode::Public)).await;
    let (alice, bob) = (keys(1), keys(2));
    // Before AUTH: asked to authenticate, as before.
    let mut anon = relay.connect().await;
    let early = join(&alice, "");
    assert_eq!(
        anon.publish(&early).await,
        json!(["OK", early.id.to_hex(), false, "auth-required: authenticate as the requester first"])
    );
    // After AUTH: the key may post already, so the join is accepted and makes no member.
    let mut a = authed(&relay, &alice).await;
    let request = join(&alice, "");
    assert_eq!(a.publish(&request).await, json!(["OK", request.id.to_hex(), true, ""]));
    let (_, members) = http(&relay, Method::GET, "/admin/v1/members", None, Some(TOKEN), None).await;
    assert_eq!(members["members"], json!([]), "{members}");
    let note = sign(&alice, now(), 1, &[], "hello");
    assert_eq!(a.publish(&note).await, json!(["OK", note.id.to_hex(), true, ""]));
    // A member's join: accepted as a duplicate, nothing changes.
    member(&relay, Method::PUT, &bob).await;
    let mut b = authed(&relay, &bob).await;
    let again = join(&bob, "");
    assert_eq!(b.publish(&again).await, json!(["OK", again.id.to_hex(), true, "duplicate: you are already a member"]));
}

#[tokio::test]
async fn a_members_relay_asks_for_an_invite_code_and_takes_a_good_one_over_both_transports() {
    for mode in [AccessMode::MembersWrite, AccessMode::MembersOnly] {
        let relay = TestRelay::start(community(mode)).await;
        let (carol, dave) = (keys(3), keys(4));
        let mut c = authed(&relay, &carol).await;
        let empty = join(&carol, "");
        assert_eq!(
            c.publish(&empty).await,
            json!([
                "OK",
                empty.id.to_hex(),
                false,
                "restricted: only members publish here: join with an invite code from a member"
            ]),
            "{mode:?}"
        );
        let wrong = join(&carol, "not-a-code");
        assert_eq!(
            c.publish(&wrong).await,
            json!(["OK", wrong.id.to_hex(), false, "restricted: this invite code is not valid"])
        );
        let (status, made) =
            http(&relay, Method::POST, "/admin/v1/invites", Some(json!({"uses": 2})), Some(TOKEN), None).await;
        assert_eq!(status, StatusCode::CREATED, "{made}");
        let code = made["code"].as_str().unwrap();
        let good = join(&carol, code);
        assert_eq!(c.publish(&good).await, json!(["OK", good.id.to_hex(), true, ""]));
        let again = join(&carol, code);
        assert_eq!(
            c.publish(&again).await,
            json!(["OK", again.id.to_hex(), true, "duplicate: you are already a member"])
        );
        // Over REST, signed NIP-98 by the requester: the same rules, even in members-only.
        let by_rest = join(&dave, code);
        let (status, body) = http(
            &relay,
            Method::POST,
            "/api/v1/events",
            Some(serde_json::to_value(&by_rest).unwrap()),
            None,
            Some(&dave),
        )
        .await;
        assert_eq!(
            (status, body),
            (StatusCode::OK, json!({"accepted": true, "id": by_rest.id.to_hex(), "message": ""})),
            "{mode:?}"
        );
        let note = sign(&dave, now(), 1, &[], "in");
        let mut d = authed(&relay, &dave).await;
        assert_eq!(d.publish(&note).await, json!(["OK", note.id.to_hex(), true, ""]));
    }
}

/// A NIP-86 call as a browser makes it: from another origin, `Content-Type:
/// application/nostr+json+rpc`, signed by `signer` when given.
async fn nip86_from_page(relay: &TestRelay, signer: Option<&Keys>) -> reqwest::Response {
    let url = relay.http_url("/");
    let body = json!({"method": "supportedmethods", "params": []}).to_string();
    let mut req = web()
        .post(&url)
        .header("origin", "https://app.example")
        .header("content-type", "application/nostr+json+rpc")
        .body(body.clone());
    if let Some(keys) = signer {
        let request = nip98::Request { url: &url, method: "POST", body: body.as_bytes() };
        req = req.header("authorization", nip98::header(keys, &request, Timestamp::now()).unwrap());
    }
    tokio::time::timeout(STEP, req.send()).await.unwrap().unwrap()
}

fn assert_cors(resp: &reqwest::Response) {
    let header = |name: &str| resp.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
    assert_eq!(header("access-control-allow-origin").as_deref(), Some("*"), "{:?}", resp.headers());
    let allowed = header("access-control-allow-headers").unwrap_or_default().to_lowercase();
    assert!(allowed.split(", ").any(|h| h == "authorization"), "{allowed}");
    assert!(allowed.split(", ").any(|h| h == "content-type"), "{allowed}");
}

#[tokio::test]
async fn nip86_answers_a_browser_origin_with_cors_headers_whether_it_grants_or_refuses() {
    let relay = TestRelay::start(community(AccessMode::Public)).await;
    let preflight = web()
        .request(Method::OPTIONS, relay.http_url("/"))
        .header("origin", "https://app.example")
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "authorization,content-type")
        .send()
        .await
        .unwrap();
    assert_eq!(preflight.status(), StatusCode::NO_CONTENT);
    assert_cors(&preflight);
    let admin = nip86_from_page(&relay, Some(&operator())).await;
    assert_eq!(admin.status(), StatusCode::OK);
    assert_cors(&admin);
    let methods: Value = admin.json().await.unwrap();
    assert_eq!(methods["result"][0], "supportedmethods", "{methods}");
    // A stranger's call and an unsigned one are refused, readably by the page.
    for signer in [Some(&keys(5)), None] {
        let refused = nip86_from_page(&relay, signer).await;
        assert_eq!(refused.status(), StatusCode::UNAUTHORIZED);
        assert_cors(&refused);
    }
}

fn empty_open() -> String {
    let mut storage = NegentropyStorageVector::new();
    storage.seal().unwrap();
    hex::encode(Negentropy::borrowed(&storage, 60_000).unwrap().initiate().unwrap())
}

#[tokio::test]
async fn forty_negentropy_sessions_at_once_are_all_answered_and_a_flood_is_rate_limited_truthfully() {
    // The relay's default quotas and bounds (the limiter's clock stands still unless moved).
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    let open = empty_open();
    let neg_open = |id: &str| json!(["NEG-OPEN", id, {"kinds": [9], "#h": [id]}, open]);
    // A chat client listing forty rooms at once, one session each, unanswered until all are sent.
    for i in 0..40 {
        c.send(neg_open(&format!("room-{i}"))).await;
    }
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let frame = c.recv().await;
        assert_eq!(frame[0], "NEG-MSG", "{frame}");
        answered.insert(frame[1].as_str().unwrap().to_string());
    }
    assert_eq!(answered.len(), 40);
    // The rest of the burst of reads (ws_reqs: 10/s over 10 s, 100 frames), each replacing one
    // session; the first frame past it is told when one more is taken.
    for _ in 40..100 {
        c.send(neg_open("room-0")).await;
        assert_eq!(c.recv().await[0], "NEG-MSG");
    }
    c.send(neg_open("flood")).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "flood", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));
    // With the budget back, the connection's own bound: 64 sessions.
    relay.clock.advance(Duration::from_secs(10));
    for i in 40..64 {
        c.send(neg_open(&format!("room-{i}"))).await;
        assert_eq!(c.recv().await[0], "NEG-MSG");
    }
    c.send(neg_open("one-more")).await;
    assert_eq!(
        c.recv().await,
        json!(["NEG-ERR", "one-more", "blocked: too many open negentropy sessions: at most 64 per connection"])
    );
    c.send(json!(["NEG-CLOSE", "room-0"])).await;
    c.send(neg_open("one-more")).await;
    assert_eq!(c.recv().await[0], "NEG-MSG");
}

#[tokio::test]
async fn negentropy_sessions_count_under_the_address_bound_like_subscriptions() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.server.max_subscriptions_per_ip = 3;
    })
    .await;
    let mut c = relay.connect().await;
    let open = empty_open();
    assert_eq!(c.req("sub", vec![json!({"limit": 0})]).await.len(), 0);
    for sub in ["a", "b", "a"] {
        c.send(json!(["NEG-OPEN", sub, {}, open])).await;
        assert_eq!(c.recv().await[0], "NEG-MSG");
    }
    c.send(json!(["NEG-OPEN", "c", {}, open])).await;
    assert_eq!(
        c.recv().await,
        json!(["NEG-ERR", "c", "blocked: too many subscriptions open from your address: at most 3; close some first"])
    );
    c.send(json!(["NEG-CLOSE", "a"])).await;
    c.send(json!(["NEG-OPEN", "c", {}, open])).await;
    assert_eq!(c.recv().await[0], "NEG-MSG");
}

/// The keys the relay's current kind 19004 names, and its tags' first `-`.
async fn room_creators(relay: &TestRelay) -> Vec<String> {
    let nip11 = relay.nip11().await;
    let mut c = relay.connect().await;
    let found = c.req("creators", vec![json!({"kinds": [19004], "authors": [nip11["self"]]})]).await;
    assert_eq!(found.len(), 1, "{found:?}");
    let tags = found[0]["tags"].as_array().unwrap();
    assert_eq!(tags[0], json!(["-"]));
    let mut keys: Vec<String> =
        tags.iter().filter(|t| t[0] == "p").map(|t| t[1].as_str().unwrap().to_string()).collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn the_relay_names_who_may_create_rooms_and_keeps_it_in_step_with_its_members() {
    let relay = TestRelay::start(|c| {
        community(AccessMode::MembersWrite)(c);
        c.groups.create = GroupCreators::Members;
    })
    .await;
    let ops = operator().public_key().to_hex();
    assert_eq!(room_creators(&relay).await, vec![ops.clone()]);
    let erin = keys(6);
    member(&relay, Method::PUT, &erin).await;
    let mut expected = vec![ops.clone(), erin.public_key().to_hex()];
    expected.sort();
    assert_eq!(room_creators(&relay).await, expected);
    member(&relay, Method::DELETE, &erin).await;
    assert_eq!(room_creators(&relay).await, vec![ops.clone()]);
    // Nobody else may say who creates rooms.
    let forged = sign(&keys(7), now(), 19004, &[&["p", &keys(7).public_key().to_hex()]], "");
    let mut c = relay.connect().await;
    assert_eq!(
        c.publish(&forged).await,
        json!([
            "OK",
            forged.id.to_hex(),
            false,
            "restricted: kind 19004 (who may create rooms) is signed by this relay's own key only; groups.create decides it"
        ])
    );
    // A restart with the same members signs nothing new.
    let before = {
        let mut c = relay.connect().await;
        c.req("all", vec![json!({"kinds": [19004]})]).await
    };
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, |c| {
        community(AccessMode::MembersWrite)(c);
        c.groups.create = GroupCreators::Members;
    })
    .await;
    let mut c = relay.connect().await;
    assert_eq!(c.req("all", vec![json!({"kinds": [19004]})]).await, before);
    // Only admins: the setting changed, the list with it.
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, |c| {
        community(AccessMode::MembersWrite)(c);
        c.groups.create = GroupCreators::Admins;
        c.admin.pubkeys.push(keys(8).public_key());
    })
    .await;
    let mut admins = vec![ops, keys(8).public_key().to_hex()];
    admins.sort();
    assert_eq!(room_creators(&relay).await, admins);
}

#[tokio::test]
async fn zap_receipts_and_gift_wraps_to_a_member_come_in_from_outside_and_nothing_else() {
    let relay = TestRelay::start(community(AccessMode::MembersOnly)).await;
    let (mail_to, zapper, stranger) = (keys(10), keys(11), keys(12));
    member(&relay, Method::PUT, &mail_to).await;
    let to_member = mail_to.public_key().to_hex();
    let to_stranger = stranger.public_key().to_hex();
    // A zap service never authenticates: its receipt to a member is taken as it comes.
    let mut anon = relay.connect().await;
    let receipt = sign(&zapper, now(), 9735, &[&["p", &to_member], &["bolt11", "lnbc1"]], "");
    assert_eq!(anon.publish(&receipt).await, json!(["OK", receipt.id.to_hex(), true, ""]));
    let elsewhere = sign(&zapper, now(), 9735, &[&["p", &to_stranger]], "");
    assert_eq!(
        anon.publish(&elsewhere).await,
        json!([
            "OK",
            elsewhere.id.to_hex(),
            false,
            "auth-required: this relay is for its members; answer the AUTH challenge"
        ])
    );
    let note = sign(&zapper, now(), 1, &[&["p", &to_member]], "hi");
    assert_ok(&anon.publish(&note).await, &note.id.to_hex(), false, "auth-required: ");
    // A gift wrap from a one-time key, on a connection authenticated as anyone.
    let one_time = keys(13);
    let wrap = sign(&one_time, now() - 3600, 1059, &[&["p", &to_member]], "sealed");
    assert_ok(&anon.publish(&wrap).await, &wrap.id.to_hex(), false, "auth-required: ");
    let mut s = authed(&relay, &stranger).await;
    assert_eq!(s.publish(&wrap).await, json!(["OK", wrap.id.to_hex(), true, ""]));
    let stray = sign(&one_time, now(), 1059, &[&["p", &to_stranger]], "sealed");
    assert_eq!(
        s.publish(&stray).await,
        json!(["OK", stray.id.to_hex(), false, "restricted: this relay is for its members only"])
    );
    // The member reads both; the stranger reads nothing.
    let mut m = authed(&relay, &mail_to).await;
    let mut got = m.req_ids("mail", vec![json!({"kinds": [9735, 1059], "#p": [to_member]})]).await;
    got.sort();
    let mut want = vec![receipt.id.to_hex(), wrap.id.to_hex()];
    want.sort();
    assert_eq!(got, want);
    s.send(json!(["REQ", "mail", {"#p": [to_member]}])).await;
    assert_eq!(s.recv().await, json!(["CLOSED", "mail", "restricted: this relay is for its members only"]));
    // NIP-11 says so.
    let nip11 = relay.nip11().await;
    assert_eq!(nip11["hearth_access"], json!({"mode": "members-only", "members_mail_kinds": [9735, 1059]}));
    assert_eq!(nip11["nip29"], json!({"subgroups": true}));
}
