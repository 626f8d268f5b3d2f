//! NIP-43 through the real server: invite codes minted by the admin API or handed out in a kind
//! 28935 event, join (28934) and leave (28936) requests, and the member list the relay signs.

use crate::common::*;
use hearth::config::{AccessMode, Config};
use hearth::protocol::{Event, Keys};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "nip43-admin-token";

fn admin_keys() -> Keys {
    keys(100)
}

fn community(c: &mut Config) {
    generous(c);
    c.admin.token = TOKEN.into();
    c.admin.pubkeys = vec![admin_keys().public_key()];
    c.access.mode = AccessMode::MembersWrite;
    c.access.publish_members = true;
}

async fn admin(relay: &TestRelay, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    http(relay, method, path, body, Some(TOKEN), None).await
}

async fn mint(relay: &TestRelay, body: Value) -> String {
    let (status, made) = admin(relay, Method::POST, "/admin/v1/invites", Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{made}");
    made["code"].as_str().unwrap().to_string()
}

fn join(who: &Keys, code: &str) -> Event {
    sign(who, now(), 28934, &[&["claim", code]], "")
}

/// A connection authenticated as `who`.
async fn authed(relay: &TestRelay, who: &Keys) -> Client {
    let mut c = relay.connect().await;
    assert_eq!(c.auth(who, &relay.ws_url()).await[2], true);
    c
}

#[tokio::test]
async fn an_invite_claimed_once_makes_a_member_a_second_claim_is_refused_and_leave_removes() {
    let relay = TestRelay::start(community).await;
    let (dana, erin) = (keys(4), keys(5));
    let code = mint(&relay, json!({"note": "for dana"})).await;

    // Before AUTH, a join request is asked to authenticate; after it, the claim makes a member.
    let mut anon = relay.connect().await;
    let early = join(&dana, &code);
    assert_ok(&anon.publish(&early).await, &early.id.to_hex(), false, "auth-required: ");
    let mut watcher = relay.connect().await;
    watcher.req("all", vec![json!({"kinds": [28934, 28936]})]).await;
    let mut d = authed(&relay, &dana).await;
    let note = sign(&dana, now(), 1, &[], "before joining");
    assert_ok(&d.publish(&note).await, &note.id.to_hex(), false, "restricted: ");
    let request = join(&dana, &code);
    assert_ok(&d.publish(&request).await, &request.id.to_hex(), true, "");
    let note = sign(&dana, now(), 1, &[], "a member now");
    assert_ok(&d.publish(&note).await, &note.id.to_hex(), true, "");

    // The code was single-use; unknown and expired codes are refused the same way.
    let mut e = authed(&relay, &erin).await;
    let second = join(&erin, &code);
    assert_eq!(
        e.publish(&second).await,
        json!(["OK", second.id.to_hex(), false, "restricted: this invite code has been used"])
    );
    let unknown = join(&erin, "no-such-code");
    assert_eq!(
        e.publish(&unknown).await,
        json!(["OK", unknown.id.to_hex(), false, "restricted: this invite code is not valid"])
    );
    let expired = mint(&relay, json!({"uses": 5, "expires_at": now() - 10})).await;
    let late = join(&erin, &expired);
    assert_eq!(
        e.publish(&late).await,
        json!(["OK", late.id.to_hex(), false, "restricted: this invite code has expired"])
    );
    let stale = sign(&erin, now() - 3600, 28934, &[&["claim", &expired]], "");
    assert_ok(&e.publish(&stale).await, &stale.id.to_hex(), false, "invalid: ");
    // Another's request on one's own connection is not one's own.
    let theirs = join(&dana, &expired);
    assert_ok(&e.publish(&theirs).await, &theirs.id.to_hex(), false, "restricted: ");
    let (_, listed) = admin(&relay, Method::GET, "/admin/v1/invites", None).await;
    let first = listed["invites"].as_array().unwrap().iter().find(|i| i["code"] == code.as_str()).unwrap().clone();
    assert_eq!(
        (first["used"].as_u64(), first["uses"].as_u64(), first["usable"].as_bool()),
        (Some(1), Some(1), Some(false))
    );

    // Leave: a member no more.
    let leave = sign(&dana, now(), 28936, &[], "");
    assert_ok(&d.publish(&leave).await, &leave.id.to_hex(), true, "");
    let after = sign(&dana, now(), 1, &[], "gone");
    assert_ok(&d.publish(&after).await, &after.id.to_hex(), false, "restricted: ");
    let again = sign(&dana, now(), 28936, &[], "");
    assert_ok(&d.publish(&again).await, &again.id.to_hex(), false, "restricted: not a member");
    // Requests are answered by the relay, never delivered or stored.
    watcher.assert_nothing_before_barrier("a join or leave request was delivered").await;
    assert_eq!(watcher.req("stored", vec![json!({"kinds": [28934, 28936]})]).await, Vec::<Value>::new());
    let actions = audit_actions(&relay, TOKEN).await;
    assert!(
        ["member.join", "member.leave", "invite.create"].iter().all(|a| actions.iter().any(|b| b == a)),
        "{actions:?}"
    );
    // The audit log names a code the same way everywhere, and never whole.
    let (_, audit) = admin(&relay, Method::GET, "/admin/v1/audit?limit=100", None).await;
    let shown = format!("{}…", &code[..8]);
    let entries = audit["entries"].as_array().unwrap();
    let entry = |action: &str| entries.iter().find(|e| e["action"] == action).unwrap().clone();
    assert_eq!(entry("member.join")["new"], json!(shown));
    assert!(entries.iter().any(|e| e["action"] == "invite.create" && e["target"] == json!(shown)), "{audit}");
    assert!(!audit.to_string().contains(&code), "{audit}");
}

#[tokio::test]
async fn the_relay_signs_its_member_list_and_each_change_with_its_own_key() {
    let relay = TestRelay::start(community).await;
    let info = relay.nip11().await;
    assert_eq!(info["supported_nips"], json!([1, 9, 11, 17, 29, 40, 42, 43, 45, 50, 56, 59, 62, 70, 77]));
    let me = info["self"].as_str().unwrap().to_string();
    let (dana, erin) = (keys(4), keys(5));
    for who in [&dana, &erin] {
        let path = format!("/admin/v1/members/{}", who.public_key().to_hex());
        assert_eq!(admin(&relay, Method::PUT, &path, Some(json!({}))).await.0, StatusCode::OK);
    }
    let path = format!("/admin/v1/members/{}", dana.public_key().to_hex());
    assert_eq!(admin(&relay, Method::DELETE, &path, None).await.0, StatusCode::OK);

    let mut c = relay.connect().await;
    let lists = c.req("list", vec![json!({"kinds": [13534], "authors": [me]})]).await;
    assert_eq!(lists.len(), 1, "one list, replaced on each change: {lists:?}");
    let list = &lists[0];
    assert_eq!(list["tags"], json!([["-"], ["member", erin.public_key().to_hex()]]));
    let added = c.req("added", vec![json!({"kinds": [8000], "authors": [me]})]).await;
    let removed = c.req("removed", vec![json!({"kinds": [8001], "authors": [me]})]).await;
    assert_eq!(added.len(), 2);
    assert_eq!(removed.len(), 1);
    assert_eq!(removed[0]["tags"], json!([["-"], ["p", dana.public_key().to_hex()]]));
    // Each verifies: the relay's own check of every event it is sent takes them as they are.
    for event in [list, &added[0], &removed[0]] {
        let parsed = Event::from_json(&event.to_string()).unwrap();
        assert!(hearth::protocol::verify::verify(parsed).is_ok(), "{event}");
    }
    // The same key across a restart (kept in the data directory).
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, community).await;
    assert_eq!(relay.nip11().await["self"].as_str(), Some(me.as_str()));
}

#[tokio::test]
async fn an_admin_asking_for_an_invite_gets_a_fresh_claim_and_others_are_refused() {
    let relay = TestRelay::start(|c| {
        community(c);
        c.access.mode = AccessMode::MembersOnly;
    })
    .await;
    let ask = json!(["REQ", "invite", {"kinds": [28935]}]);
    let mut anon = relay.connect().await;
    anon.send(ask.clone()).await;
    let closed = anon.recv().await;
    assert_eq!((closed[0].as_str(), closed[1].as_str()), (Some("CLOSED"), Some("invite")));
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(anon.recv().await[0], "AUTH");
    let mut stranger = authed(&relay, &keys(6)).await;
    stranger.send(ask.clone()).await;
    assert_eq!(
        stranger.recv().await,
        json!(["CLOSED", "invite", "restricted: invite claims are handed to the relay's admins only"])
    );

    let mut boss = authed(&relay, &admin_keys()).await;
    let got = boss.req("invite", vec![json!({"kinds": [28935]})]).await;
    assert_eq!(got.len(), 1);
    let invite = &got[0];
    assert_eq!(
        (invite["kind"].as_u64(), invite["pubkey"].as_str()),
        (Some(28935), relay.nip11().await["self"].as_str())
    );
    assert_eq!(invite["tags"][0], json!(["-"]));
    let claim = invite["tags"][1][1].as_str().unwrap();
    // A stranger on a members-only relay joins with it, and reads from then on.
    let request = join(&keys(6), claim);
    assert_ok(&stranger.publish(&request).await, &request.id.to_hex(), true, "");
    assert_eq!(stranger.req("now", vec![json!({"kinds": [1]})]).await, Vec::<Value>::new());
}

#[tokio::test]
async fn a_flood_of_bad_claims_is_refused_by_the_limiter_before_any_lookup() {
    let relay = TestRelay::start(|c| {
        community(c);
        c.limits.human.ws_events_per_sec = 2;
        c.limits.human.ws_burst_window_secs = 1;
    })
    .await;
    let mut e = authed(&relay, &keys(7)).await;
    for n in 0..2 {
        let guess = join(&keys(7), &format!("guess-{n}"));
        assert_eq!(
            e.publish(&guess).await,
            json!(["OK", guess.id.to_hex(), false, "restricted: this invite code is not valid"])
        );
    }
    // The burst is spent: the next guess is refused on arrival, before any code is looked up.
    let guess = join(&keys(7), "guess-2");
    let refused = e.publish(&guess).await;
    assert_ok(&refused, &guess.id.to_hex(), false, "rate-limited: quota exceeded (ws_events); retry in ");
}
