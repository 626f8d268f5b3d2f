//! NIP-29 groups through the real server, with exact frames: creating, joining and talking in a
//! group, roles, closed groups with invites and waiting requests, the relay's signed state
//! events, moderation, private groups withheld from strangers on every read path, and the state
//! folded again from the store after a restart.

use crate::common::*;
use hearth::protocol::{Event, Keys};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// `who` signs a `kind` event to group `g` with `tags` after its `h`.
pub(crate) fn to_group(who: &Keys, kind: u16, g: &str, tags: &[&[&str]], content: &str) -> Event {
    let h = ["h", g];
    let mut all: Vec<&[&str]> = vec![&h];
    all.extend_from_slice(tags);
    sign(who, now(), kind, &all, content)
}

pub(crate) fn hex(k: &Keys) -> String {
    k.public_key().to_hex()
}

/// A connection authenticated as `who`.
pub(crate) async fn as_(relay: &TestRelay, who: &Keys) -> Client {
    let mut c = relay.connect().await;
    assert_eq!(c.auth(who, &relay.ws_url()).await[2], true);
    c
}

/// Publishes `event` and asserts the exact OK.
pub(crate) async fn ok(c: &mut Client, event: &Event, accepted: bool, message: &str) {
    assert_eq!(c.publish(event).await, json!(["OK", event.id.to_hex(), accepted, message]), "kind {}", event.kind.0);
}

/// The relay's current state event of `kind` for group `g`, as a reader without AUTH sees it.
async fn state_event(relay: &TestRelay, kind: u16, g: &str) -> Option<Value> {
    let mut c = relay.connect().await;
    let found = c.req("state", vec![json!({"kinds": [kind], "#d": [g]})]).await;
    assert!(found.len() <= 1, "one current {kind} per group: {found:?}");
    found.into_iter().next()
}

fn tags(event: &Value) -> Vec<Vec<String>> {
    serde_json::from_value(event["tags"].clone()).unwrap()
}

/// Waits (within a deadline) until the relay's `kind` for `g` has `want` tags: the relay signs
/// its state events just after it answers the change.
async fn until_state(relay: &TestRelay, kind: u16, g: &str, want: &[&[&str]]) -> Value {
    let want: Vec<Vec<String>> = want.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
    poll(&format!("{kind} of {g} to be {want:?}"), STEP, async || {
        let found = state_event(relay, kind, g).await;
        match &found {
            Some(event) if tags(event) == want => Ok(event.clone()),
            _ => Err(format!("{found:?}")),
        }
    })
    .await
}

#[tokio::test]
async fn a_group_is_created_joined_talked_in_and_left_and_the_relay_signs_its_state() {
    let relay = TestRelay::start(generous).await;
    let info = relay.nip11().await;
    assert!(info["supported_nips"].as_array().unwrap().contains(&json!(29)), "{info}");
    let relay_key = info["self"].as_str().unwrap().to_string();
    let (alice, bob) = (keys(1), keys(2));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "pizza", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9007, "pizza", &[], "again"), false, "duplicate: the group `pizza` exists already")
        .await;
    let meta = until_state(&relay, 39000, "pizza", &[&["d", "pizza"]]).await;
    assert_eq!(meta["pubkey"], relay_key);
    until_state(&relay, 39001, "pizza", &[&["d", "pizza"], &["p", &hex(&alice), "admin"]]).await;
    let roles = state_event(&relay, 39003, "pizza").await.unwrap();
    assert_eq!(
        tags(&roles).iter().map(|t| t[..2].join(" ")).collect::<Vec<_>>(),
        ["d pizza", "role admin", "role moderator"]
    );
    // Anyone else's state event is refused.
    let forged = sign(&bob, now(), 39000, &[&["d", "pizza"], &["name", "Mine"]], "");
    ok(&mut a, &forged, false, "restricted: kinds 39000-39009 are signed by this relay's own key (NIP-11 self) only")
        .await;
    // Bob joins an open group at once: the relay signs the 9000 that makes him a member.
    let mut b = as_(&relay, &bob).await;
    ok(&mut b, &to_group(&bob, 9021, "pizza", &[], "hi"), true, "").await;
    let mut members = [hex(&alice), hex(&bob)];
    members.sort();
    let want: Vec<Vec<&str>> =
        [vec!["d", "pizza"]].into_iter().chain(members.iter().map(|m| vec!["p", m.as_str()])).collect();
    until_state(&relay, 39002, "pizza", &want.iter().map(Vec::as_slice).collect::<Vec<_>>()).await;
    let put = b.req("put", vec![json!({"kinds": [9000], "#h": ["pizza"]})]).await;
    assert_eq!(put.len(), 1);
    assert_eq!(
        (&put[0]["pubkey"], tags(&put[0])),
        (&json!(relay_key), vec![vec!["h".to_string(), "pizza".into()], vec!["p".into(), hex(&bob)]])
    );
    ok(&mut b, &to_group(&bob, 9021, "pizza", &[], ""), false, "duplicate: already a member of this group").await;
    // Talking; a group that does not exist takes nothing.
    ok(&mut b, &to_group(&bob, 9, "pizza", &[], "margherita"), true, "").await;
    ok(
        &mut b,
        &to_group(&bob, 9, "nope", &[], "x"),
        false,
        "invalid: there is no group `nope` on this relay; create it first (kind 9007)",
    )
    .await;
    // A member without a role may not moderate.
    ok(
        &mut b,
        &to_group(&bob, 9002, "pizza", &[&["name", "Bob's"]], ""),
        false,
        "restricted: only the group's admins may edit its metadata",
    )
    .await;
    // Leaving: the relay signs the 9001.
    ok(&mut b, &to_group(&bob, 9022, "pizza", &[], ""), true, "").await;
    until_state(&relay, 39002, "pizza", &[&["d", "pizza"], &["p", &hex(&alice)]]).await;
    ok(&mut b, &to_group(&bob, 9022, "pizza", &[], ""), false, "restricted: not a member of this group").await;
}

#[tokio::test]
async fn a_closed_restricted_group_takes_members_by_invite_or_an_admins_approval_and_only_their_messages() {
    let relay = TestRelay::start(generous).await;
    let (alice, carol, dave) = (keys(1), keys(3), keys(4));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "club", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9002, "club", &[&["name", "Club"], &["closed"], &["restricted"]], ""), true, "").await;
    until_state(&relay, 39000, "club", &[&["d", "club"], &["name", "Club"], &["restricted"], &["closed"]]).await;
    let mut c = as_(&relay, &carol).await;
    ok(
        &mut c,
        &to_group(&carol, 9, "club", &[], "let me talk"),
        false,
        "restricted: not a member of this group: only its members write to it; join the group first",
    )
    .await;
    ok(
        &mut c,
        &to_group(&carol, 9021, "club", &[&["code", "guess"]], ""),
        false,
        "restricted: this invite code is not valid for this group; the refusal is final",
    )
    .await;
    let pending = "restricted: the group is closed: your join request waits for an admin to let you in";
    ok(&mut c, &to_group(&carol, 9021, "club", &[], "please"), false, pending).await;
    ok(&mut c, &to_group(&carol, 9021, "club", &[], "please!"), false, pending).await;
    // An invite of one use lets Dave in; the admin lets Carol in.
    ok(&mut a, &to_group(&alice, 9009, "club", &[&["code", "pass"], &["uses", "1"]], ""), true, "").await;
    let mut d = as_(&relay, &dave).await;
    ok(&mut d, &to_group(&dave, 9021, "club", &[&["code", "pass"]], ""), true, "").await;
    ok(&mut d, &to_group(&dave, 9, "club", &[], "in"), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "club", &[&["p", &hex(&carol)]], ""), true, "").await;
    ok(&mut c, &to_group(&carol, 9, "club", &[], "in too"), true, "").await;
    // Its kinds: set to chat only.
    ok(
        &mut a,
        &to_group(
            &alice,
            9002,
            "club",
            &[&["name", "Club"], &["closed"], &["restricted"], &["supported_kinds", "9"]],
            "",
        ),
        true,
        "",
    )
    .await;
    ok(
        &mut c,
        &to_group(&carol, 1, "club", &[], "a note"),
        false,
        "invalid: this group does not take kind 1 (see its supported_kinds)",
    )
    .await;
}

#[tokio::test]
async fn a_moderators_deletion_removes_the_event_for_good_and_a_deleted_group_leaves_nothing() {
    let relay = TestRelay::start(generous).await;
    let (alice, mo, bob) = (keys(1), keys(5), keys(2));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "g", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "g", &[&["p", &hex(&mo), "moderator"]], ""), true, "").await;
    let mut b = as_(&relay, &bob).await;
    let rude = to_group(&bob, 9, "g", &[], "rude");
    ok(&mut b, &rude, true, "").await;
    let mut m = as_(&relay, &mo).await;
    ok(&mut m, &to_group(&mo, 9005, "g", &[&["e", &rude.id.to_hex()]], ""), true, "").await;
    assert!(b.req("byid", vec![json!({"ids": [rude.id.to_hex()]})]).await.is_empty());
    ok(&mut b, &rude, false, "blocked: deleted by the group's moderators").await;
    // A moderator may not delete the group; its admin may, and everything of it is gone.
    ok(&mut m, &to_group(&mo, 9008, "g", &[], ""), false, "restricted: only the group's admins may delete it").await;
    ok(&mut a, &to_group(&alice, 9008, "g", &[], ""), true, "").await;
    assert!(a.req("all", vec![json!({"#h": ["g"]})]).await.is_empty());
    assert!(a.req("state", vec![json!({"kinds": [39000, 39001, 39002, 39003], "#d": ["g"]})]).await.is_empty());
    ok(
        &mut b,
        &to_group(&bob, 9, "g", &[], "anyone?"),
        false,
        "invalid: there is no group `g` on this relay; create it first (kind 9007)",
    )
    .await;
}

#[tokio::test]
async fn late_publication_and_unknown_previous_references_are_refused() {
    let relay = TestRelay::start(generous).await;
    let alice = keys(1);
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "g", &[], ""), true, "").await;
    let first = to_group(&alice, 9, "g", &[], "first");
    ok(&mut a, &first, true, "").await;
    let old = sign(&alice, now() - 7200, 9, &[&["h", "g"]], "from two hours ago");
    ok(
        &mut a,
        &old,
        false,
        "invalid: an event to a group may be dated at most 3600 seconds in the past; sign it again with the time now",
    )
    .await;
    let known = first.id.to_hex()[..8].to_string();
    ok(&mut a, &to_group(&alice, 9, "g", &[&["previous", &known]], "after first"), true, "").await;
    ok(
        &mut a,
        &to_group(&alice, 9, "g", &[&["previous", "deadbeef"]], "after what?"),
        false,
        "invalid: previous `deadbeef` names none of this group's last 50 events on this relay",
    )
    .await;
}

#[tokio::test]
async fn a_private_groups_events_reach_its_members_only_on_every_read_path() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob, stranger) = (keys(1), keys(2), keys(9));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "secret", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9002, "secret", &[&["private"], &["hidden"]], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "secret", &[&["p", &hex(&bob)]], ""), true, "").await;
    // A stranger subscribed to every note before it is said, authenticated, and an anonymous one.
    let mut s = as_(&relay, &stranger).await;
    assert!(s.req("live", vec![json!({"kinds": [1]})]).await.is_empty());
    let mut anon = relay.connect().await;
    assert!(anon.req("live", vec![json!({"kinds": [1]})]).await.is_empty());
    let mut b = as_(&relay, &bob).await;
    assert!(b.req("live", vec![json!({"kinds": [1]})]).await.is_empty());
    let said = to_group(&alice, 1, "secret", &[], "the password is swordfish");
    ok(&mut a, &said, true, "").await;
    // Live: the member hears it, the strangers do not.
    let heard = b.recv().await;
    assert_eq!((&heard[0], &heard[2]["id"]), (&json!("EVENT"), &json!(said.id.to_hex())));
    s.assert_nothing_before_barrier("a stranger heard a private group").await;
    anon.assert_nothing_before_barrier("an anonymous reader heard a private group").await;
    // Stored, by every filter that could find it.
    let id = said.id.to_hex();
    for filter in [json!({"ids": [id]}), json!({"kinds": [1]}), json!({"#h": ["secret"]}), json!({})] {
        assert!(s.req("q", vec![filter.clone()]).await.iter().all(|e| e["id"] != json!(id)), "{filter}");
        assert!(b.req("q", vec![filter.clone()]).await.iter().any(|e| e["id"] == json!(id)), "member, {filter}");
    }
    // Search: once the index has it (within a second), the member finds it and the stranger not.
    poll("the index to have it", STEP, async || {
        if b.req("q", vec![json!({"search": "swordfish"})]).await.is_empty() { Err("not found".into()) } else { Ok(()) }
    })
    .await;
    assert!(s.req("q", vec![json!({"search": "swordfish"})]).await.is_empty());
    // The metadata of a hidden group, too.
    assert!(s.req("meta", vec![json!({"kinds": [39000], "#d": ["secret"]})]).await.is_empty());
    assert_eq!(b.req("meta", vec![json!({"kinds": [39000], "#d": ["secret"]})]).await.len(), 1);
    // COUNT, from the index's lists or not: each reader's count is what its REQ serves, the
    // stranger's without the group's events (none at all of the first two filters).
    let mut m = as_(&relay, &bob).await;
    // Of everything, the stranger counts all but the group's events: its moderation, its note and
    // the relay's four state events (39000-39003).
    let group = b.req("c", vec![json!({"#h": ["secret"]}), json!({"#d": ["secret"]})]).await.len() as u64;
    assert_eq!(group, 8);
    for (filter, stranger_counts, member_counts) in [
        (json!({"kinds": [1]}), Some(0), Some(1)),
        (json!({"#h": ["secret"]}), Some(0), Some(4)),
        (json!({}), None, None),
    ] {
        let mut counts = Vec::new();
        for reader in [&mut s, &mut m] {
            reader.send(json!(["COUNT", "n", filter.clone()])).await;
            let counted = reader.recv().await;
            assert_eq!(counted[0], "COUNT", "{counted}");
            let served = reader.req("c", vec![filter.clone()]).await.len() as u64;
            assert_eq!(counted[2]["count"].as_u64(), Some(served), "{filter}: {counted}");
            counts.push(served);
        }
        if let Some(n) = member_counts {
            assert_eq!(counts[1], n, "{filter}: {counts:?}");
        }
        let stranger = stranger_counts.unwrap_or_else(|| counts[1] - group);
        assert_eq!(counts[0], stranger, "{filter}: {counts:?}");
    }
    // Before AUTH, a request for the group alone is asked to authenticate.
    anon.send(json!(["REQ", "g", {"#h": ["secret"]}])).await;
    let closed = anon.recv().await;
    assert_eq!((&closed[0], &closed[1]), (&json!("CLOSED"), &json!("g")), "{closed}");
    assert!(closed[2].as_str().unwrap().starts_with("auth-required: "), "{closed}");
    assert_eq!(anon.recv().await[0], "AUTH");
    // REST: the stranger signs its query (NIP-98), the member too.
    let body = json!({"filters": [{"kinds": [1]}]});
    let (status, answer) = http(&relay, Method::POST, "/api/v1/query", Some(body.clone()), None, Some(&stranger)).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!answer.to_string().contains(&id), "{answer}");
    let (_, answer) = http(&relay, Method::POST, "/api/v1/query", Some(body), None, Some(&bob)).await;
    assert!(answer.to_string().contains(&id), "{answer}");
    // NIP-77: the stranger's item set holds no id of the group.
    let (_, theirs) = crate::sync::reconcile(&mut s, "neg", json!({"kinds": [1]}), &[]).await;
    assert!(!theirs.contains(&id), "{theirs:?}");
    let (_, members) = crate::sync::reconcile(&mut b, "neg", json!({"kinds": [1]}), &[]).await;
    assert!(members.contains(&id), "{members:?}");
}

#[tokio::test]
async fn the_groups_are_folded_again_from_the_store_after_a_restart() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "g", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9002, "g", &[&["name", "G"], &["restricted"], &["closed"]], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "g", &[&["p", &hex(&bob), "moderator"]], ""), true, "").await;
    let mut c = as_(&relay, &carol).await;
    ok(
        &mut c,
        &to_group(&carol, 9021, "g", &[], ""),
        false,
        "restricted: the group is closed: your join request waits for an admin to let you in",
    )
    .await;
    drop((a, c));
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, generous).await;
    // The same rules hold: bob still moderates, carol still waits and may not write.
    let mut c = as_(&relay, &carol).await;
    ok(
        &mut c,
        &to_group(&carol, 9, "g", &[], "hello?"),
        false,
        "restricted: not a member of this group: only its members write to it; join the group first",
    )
    .await;
    ok(
        &mut c,
        &to_group(&carol, 9021, "g", &[], ""),
        false,
        "restricted: the group is closed: your join request waits for an admin to let you in",
    )
    .await;
    let mut b = as_(&relay, &bob).await;
    ok(&mut b, &to_group(&bob, 9009, "g", &[&["code", "k"]], ""), true, "").await;
    ok(
        &mut b,
        &to_group(&bob, 9002, "g", &[&["name", "Mine"]], ""),
        false,
        "restricted: only the group's admins may edit its metadata",
    )
    .await;
    let admins = state_event(&relay, 39001, "g").await.unwrap();
    let mut got = tags(&admins);
    got.sort();
    let mut want = vec![
        vec!["d".to_string(), "g".into()],
        vec!["p".into(), hex(&alice), "admin".into()],
        vec!["p".into(), hex(&bob), "moderator".into()],
    ];
    want.sort();
    assert_eq!(got, want);
}

#[tokio::test]
async fn a_change_dated_before_the_last_one_takes_its_place_in_time_and_a_restart_agrees() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob) = (keys(1), keys(2));
    let mut a = as_(&relay, &alice).await;
    let t = now();
    ok(&mut a, &sign(&alice, t - 20, 9007, &[&["h", "g"]], ""), true, "").await;
    ok(&mut a, &sign(&alice, t, 9002, &[&["h", "g"], &["name", "Now"], &["closed"]], ""), true, "").await;
    // An admin whose clock is behind: its edit stands before the later one, which still wins.
    ok(&mut a, &sign(&alice, t - 10, 9002, &[&["h", "g"], &["name", "Before"]], ""), true, "").await;
    // One dated before the group was made has no group to change.
    let early = sign(&alice, t - 30, 9002, &[&["h", "g"], &["name", "Early"]], "");
    ok(
        &mut a,
        &early,
        false,
        "invalid: an event to group `g` may not be dated before the group was created; sign it again with the time now",
    )
    .await;
    // A join dated before the group was closed is let in, as the replay will have it.
    let mut b = as_(&relay, &bob).await;
    ok(&mut b, &sign(&bob, t - 5, 9021, &[&["h", "g"]], ""), true, "").await;
    let want_members = {
        let mut m = vec![hex(&alice), hex(&bob)];
        m.sort();
        m
    };
    let members =
        |event: &Value| tags(event).into_iter().filter(|t| t[0] == "p").map(|t| t[1].clone()).collect::<Vec<_>>();
    until_state(&relay, 39000, "g", &[&["d", "g"], &["name", "Now"], &["closed"]]).await;
    assert_eq!(members(&state_event(&relay, 39002, "g").await.unwrap()), want_members);
    drop((a, b));
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, generous).await;
    let mut b = as_(&relay, &bob).await;
    ok(&mut b, &to_group(&bob, 9021, "g", &[], ""), false, "duplicate: already a member of this group").await;
    ok(&mut b, &to_group(&bob, 9, "g", &[], "still here"), true, "").await;
}

const TOKEN: &str = "groups-admin-token";

#[tokio::test]
async fn operators_list_show_edit_and_delete_groups_and_answer_waiting_requests_through_the_admin_api() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = TOKEN.into();
    })
    .await;
    let admin = |method: Method, path: String, body: Option<Value>| {
        let relay = &relay;
        async move { http(relay, method, &path, body, Some(TOKEN), None).await }
    };
    let (alice, carol) = (keys(1), keys(3));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &sign(&carol, now(), 0, &[], r#"{"name":"Carol","picture":"https://pics/carol.png"}"#), true, "").await;
    for g in ["b-club", "a-club"] {
        ok(&mut a, &to_group(&alice, 9007, g, &[], ""), true, "").await;
    }
    ok(&mut a, &to_group(&alice, 9002, "a-club", &[&["name", "A"], &["closed"]], ""), true, "").await;
    let mut c = as_(&relay, &carol).await;
    ok(
        &mut c,
        &to_group(&carol, 9021, "a-club", &[], ""),
        false,
        "restricted: the group is closed: your join request waits for an admin to let you in",
    )
    .await;
    // The list, a page at a time, in id order.
    let (status, page) = admin(Method::GET, "/admin/v1/groups?limit=1".into(), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((page["total"].clone(), page["next"].clone()), (json!(2), json!("a-club")));
    assert_eq!(page["groups"][0]["id"], "a-club");
    assert_eq!((page["groups"][0]["members"].clone(), page["groups"][0]["pending"].clone()), (json!(1), json!(1)));
    let (_, rest) = admin(Method::GET, "/admin/v1/groups?limit=1&after=a-club".into(), None).await;
    assert_eq!((rest["groups"][0]["id"].clone(), rest["next"].clone()), (json!("b-club"), Value::Null));
    // One group: members with roles, requests waiting, each with its profile's name.
    let (_, one) = admin(Method::GET, "/admin/v1/groups/a-club".into(), None).await;
    assert_eq!(one["members"], json!([{"pubkey": hex(&alice), "name": "", "picture": "", "roles": ["admin"]}]));
    assert_eq!(one["pending"][0]["pubkey"], hex(&carol));
    assert_eq!(
        (one["pending"][0]["name"].clone(), one["pending"][0]["picture"].clone()),
        (json!("Carol"), json!("https://pics/carol.png"))
    );
    // Approved: the relay signs the 9000; carol may write.
    let path = format!("/admin/v1/groups/a-club/pending/{}/approve", hex(&carol));
    let (status, after) = admin(Method::POST, path.clone(), None).await;
    assert_eq!(status, StatusCode::OK, "{after}");
    assert_eq!((after["pending"].clone(), after["members"].as_array().unwrap().len()), (json!([]), 2));
    assert_eq!(admin(Method::POST, path, None).await.0, StatusCode::NOT_FOUND);
    ok(&mut c, &to_group(&carol, 9, "a-club", &[], "thanks"), true, "").await;
    // Edited: the fields named change, the rest stay; the relay's 39000 says so.
    let (status, edited) =
        admin(Method::PATCH, "/admin/v1/groups/a-club".into(), Some(json!({"about": "the A club", "private": true})))
            .await;
    assert_eq!(status, StatusCode::OK, "{edited}");
    assert_eq!(
        (edited["name"].clone(), edited["about"].clone(), edited["closed"].clone(), edited["private"].clone()),
        (json!("A"), json!("the A club"), json!(true), json!(true))
    );
    until_state(
        &relay,
        39000,
        "a-club",
        &[&["d", "a-club"], &["name", "A"], &["about", "the A club"], &["private"], &["closed"]],
    )
    .await;
    let (status, bad) = admin(Method::PATCH, "/admin/v1/groups/a-club".into(), Some(json!({"colour": "red"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    let (status, cycle) =
        admin(Method::PATCH, "/admin/v1/groups/a-club".into(), Some(json!({"parent": "a-club"}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{cycle}");
    // Deleted: gone from the list, its events from the store.
    let (status, _) = admin(Method::DELETE, "/admin/v1/groups/b-club".into(), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(admin(Method::GET, "/admin/v1/groups/b-club".into(), None).await.0, StatusCode::NOT_FOUND);
    assert!(a.req("b", vec![json!({"#h": ["b-club"]})]).await.is_empty());
    let actions = audit_actions(&relay, TOKEN).await;
    for action in ["group.approve", "group.edit", "group.delete"] {
        assert!(actions.iter().any(|a| a == action), "{action}: {actions:?}");
    }
}

#[tokio::test]
async fn typing_in_a_private_group_reaches_its_members_live_only_and_is_never_stored() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob, stranger) = (keys(1), keys(2), keys(9));
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "den", &[], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9002, "den", &[&["private"]], ""), true, "").await;
    ok(&mut a, &to_group(&alice, 9000, "den", &[&["p", &hex(&bob)]], ""), true, "").await;
    let mut b = as_(&relay, &bob).await;
    let mut s = as_(&relay, &stranger).await;
    for c in [&mut b, &mut s] {
        assert!(c.req("typing", vec![json!({"kinds": [20001, 20002]})]).await.is_empty());
    }
    let typing = to_group(&alice, 20002, "den", &[], "");
    ok(&mut a, &typing, true, "").await;
    let heard = b.recv().await;
    assert_eq!((&heard[1], &heard[2]["id"]), (&json!("typing"), &json!(typing.id.to_hex())));
    s.assert_nothing_before_barrier("a stranger saw someone typing in a private group").await;
    assert!(b.req("after", vec![json!({"kinds": [20002]})]).await.is_empty(), "typing is never stored");
    // Typing needs its group, as any event to a group does.
    ok(
        &mut a,
        &to_group(&alice, 20002, "elsewhere", &[], ""),
        false,
        "invalid: there is no group `elsewhere` on this relay; create it first (kind 9007)",
    )
    .await;
}

#[tokio::test]
async fn a_connections_changes_to_a_group_are_judged_in_the_order_it_sent_them() {
    let relay = TestRelay::start(generous).await;
    let alice = keys(1);
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9007, "fast", &[], ""), true, "").await;
    let said = to_group(&alice, 9, "fast", &[], "hello");
    ok(&mut a, &said, true, "").await;
    // Sent back to back: the first takes longer on its way in (its timeline reference is looked
    // up in the store), the second would overtake it if they were not kept in order.
    let t = now();
    let reference = said.id.to_hex()[..8].to_string();
    let first = sign(&alice, t, 9002, &[&["h", "fast"], &["name", "First"], &["previous", &reference]], "");
    let second = sign(&alice, t, 9002, &[&["h", "fast"], &["name", "Second"]], "");
    for e in [&first, &second] {
        a.send(json!(["EVENT", e])).await;
    }
    let mut oks = vec![a.recv().await, a.recv().await];
    oks.sort_by_key(|ok| ok[1].as_str().unwrap().to_string());
    let mut want = vec![json!(["OK", first.id.to_hex(), true, ""]), json!(["OK", second.id.to_hex(), true, ""])];
    want.sort_by_key(|ok| ok[1].as_str().unwrap().to_string());
    assert_eq!(oks, want);
    until_state(&relay, 39000, "fast", &[&["d", "fast"], &["name", "Second"]]).await;
    // And the store folds to the same.
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, generous).await;
    let mut a = as_(&relay, &alice).await;
    ok(&mut a, &to_group(&alice, 9002, "fast", &[&["name", "Second"], &["closed"]], ""), true, "").await;
    until_state(&relay, 39000, "fast", &[&["d", "fast"], &["name", "Second"], &["closed"]]).await;
}

#[tokio::test]
async fn the_relays_state_events_are_never_dated_before_the_change_they_show() {
    let relay = TestRelay::start(generous).await;
    let (alice, bob) = (keys(1), keys(2));
    let mut a = as_(&relay, &alice).await;
    // A client whose clock runs two seconds ahead of the relay's.
    let ahead = now() + 2;
    let create = sign(&alice, ahead, 9007, &[&["h", "clock"]], "");
    ok(&mut a, &create, true, "").await;
    let meta = until_state(&relay, 39000, "clock", &[&["d", "clock"]]).await;
    assert!(meta["created_at"].as_u64().unwrap() >= ahead, "{meta} is dated before the 9007 at {ahead}");
    let mut b = as_(&relay, &bob).await;
    let join = sign(&bob, ahead + 1, 9021, &[&["h", "clock"]], "");
    ok(&mut b, &join, true, "").await;
    let mut both = [hex(&alice), hex(&bob)];
    both.sort();
    let members = until_state(&relay, 39002, "clock", &[&["d", "clock"], &["p", &both[0]], &["p", &both[1]]]).await;
    assert!(members["created_at"].as_u64().unwrap() > ahead, "{members} is dated before the 9021");
}

#[tokio::test]
async fn a_group_is_created_before_auth_where_anyone_writes_and_only_after_it_where_writes_need_it() {
    // Chachi sends its 9007 first and answers the AUTH challenge later, if the person lets it;
    // with auth.required every write needs AUTH first, a 9007 too.
    let open = TestRelay::start(generous).await;
    let alice = keys(1);
    let mut c = open.connect().await;
    ok(&mut c, &to_group(&alice, 9007, "early", &[], ""), true, "").await;
    until_state(&open, 39001, "early", &[&["d", "early"], &["p", &hex(&alice), "admin"]]).await;
    let closed = TestRelay::start(|c: &mut hearth::config::Config| {
        generous(c);
        c.auth.required = true;
    })
    .await;
    let mut c = closed.connect().await;
    let create = to_group(&alice, 9007, "early", &[], "");
    let refused = c.publish(&create).await;
    assert_eq!(refused[2], false, "{refused}");
    assert!(refused[3].as_str().unwrap().starts_with("auth-required: "), "{refused}");
    let mut c = as_(&closed, &alice).await;
    ok(&mut c, &create, true, "").await;
}
