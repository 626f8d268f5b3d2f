//! NIP-56 reports and the review queue: a report is sealed to its author and the admins on every
//! read path; the queue groups reports by target, newest first; an admin's decision (dismiss,
//! delete, ban with its reach) takes the target out, is audited, and NIP-86 works over the same
//! queue.

use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use crate::common::*;
use hearth::protocol::{Event, Keys};

const TOKEN: &str = "t";

fn report(by: &Keys, at: u64, event: Option<&Event>, pubkey: &Keys, kind: &str, why: &str) -> Event {
    let pk = pubkey.public_key().to_hex();
    match event {
        Some(e) => sign(by, at, 1984, &[&["e", &e.id.to_hex(), kind], &["p", &pk]], why),
        None => sign(by, at, 1984, &[&["p", &pk, kind]], why),
    }
}

async fn admin(relay: &TestRelay, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    http(relay, method, path, body, Some(TOKEN), None).await
}

#[tokio::test]
async fn a_report_is_read_by_its_author_and_the_admins_only() {
    let (alice, mallory, moderator, carol) = (keys(1), keys(2), keys(3), keys(4));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.pubkeys = vec![moderator.public_key()];
        // Reports searchable, so that search is one more path they must be withheld on.
        c.storage.search = true;
        c.storage.search_kinds.push(hearth::protocol::Kind(1984));
    })
    .await;
    let mut m = relay.connect().await;
    let spam = sign(&mallory, now() - 10, 1, &[], "buy now");
    assert_ok(&m.publish(&spam).await, &spam.id.to_hex(), true, "");
    let r = report(&alice, now(), Some(&spam), &mallory, "spam", "it is spam");
    let mut a = relay.connect().await;
    assert_ok(&a.publish(&r).await, &r.id.to_hex(), true, "");
    let reports = json!({"kinds": [1984]});
    // Before AUTH: asked to authenticate.
    let mut anon = relay.connect().await;
    anon.send(json!(["REQ", "r", reports.clone()])).await;
    assert!(anon.recv().await[2].as_str().unwrap().starts_with("auth-required: "));
    for (who, sees) in [(&alice, true), (&moderator, true), (&mallory, false), (&carol, false)] {
        let mut c = relay.connect().await;
        assert_eq!(c.auth(who, &relay.ws_url()).await[2], true);
        let got = c.req_ids("r", vec![reports.clone(), json!({"#e": [spam.id.to_hex()]})]).await;
        assert_eq!(got, if sees { vec![r.id.to_hex()] } else { vec![] }, "{}", who.public_key());
    }
    // Over REST: asked to sign; signed by the reported key, nothing; by the moderator, the report.
    let query = json!({"filters": [{"kinds": [1984]}]});
    assert_eq!(
        http(&relay, Method::POST, "/api/v1/query", Some(query.clone()), None, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (_, theirs) = http(&relay, Method::POST, "/api/v1/query", Some(query.clone()), None, Some(&mallory)).await;
    assert_eq!(theirs["events"], json!([]));
    let (_, admins) = http(&relay, Method::POST, "/api/v1/query", Some(query), None, Some(&moderator)).await;
    assert_eq!(admins["events"][0]["id"], json!(r.id.to_hex()));
    // Search (NIP-50): once the index has the report, its words are found for the moderator
    // only.
    let mut admin = relay.connect().await;
    admin.auth(&moderator, &relay.ws_url()).await;
    crate::search::until_found(&mut admin, "spam", 1).await;
    assert_eq!(admin.req_ids("s", vec![json!({"search": "spam"})]).await, vec![r.id.to_hex()]);
    for who in [&mallory, &carol] {
        let mut c = relay.connect().await;
        c.auth(who, &relay.ws_url()).await;
        assert_eq!(c.req_ids("s", vec![json!({"search": "spam"})]).await, Vec::<String>::new(), "{}", who.public_key());
    }
    // NIP-77: the reported key's reconciliation finds nothing of it, the moderator's finds it.
    for (who, want) in [(&mallory, vec![]), (&moderator, vec![r.id.to_hex()])] {
        let mut c = relay.connect().await;
        c.auth(who, &relay.ws_url()).await;
        assert_eq!(crate::sync::reconcile(&mut c, "neg", reports.clone(), &[]).await.1, want);
    }
    // Live: a report published now reaches the moderator's subscription, not the reported key's.
    let mut watching_admin = relay.connect().await;
    watching_admin.auth(&moderator, &relay.ws_url()).await;
    assert_eq!(
        watching_admin.req("live", vec![json!({"kinds": [1984], "since": now() + 1})]).await,
        Vec::<Value>::new()
    );
    let mut watching_reported = relay.connect().await;
    watching_reported.auth(&mallory, &relay.ws_url()).await;
    assert_eq!(
        watching_reported.req("live", vec![json!({"kinds": [1984], "since": now() + 1})]).await,
        Vec::<Value>::new()
    );
    let later = report(&carol, now() + 2, Some(&spam), &mallory, "spam", "me too");
    let mut by_carol = relay.connect().await;
    assert_ok(&by_carol.publish(&later).await, &later.id.to_hex(), true, "");
    assert_eq!(watching_admin.recv().await, json!(["EVENT", "live", later]));
    watching_reported.assert_nothing_before_barrier("a report is not the reported key's to read").await;
    // The reported key cannot count it either.
    let mut c = relay.connect().await;
    c.auth(&mallory, &relay.ws_url()).await;
    c.send(json!(["COUNT", "n", {"#p": [mallory.public_key().to_hex()]}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "n", {"count": 0}]));
}

#[tokio::test]
async fn the_queue_groups_reports_by_target_and_each_decision_takes_its_target_out_audited() {
    let (alice, bob, mallory, imposter) = (keys(1), keys(2), keys(3), keys(4));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = TOKEN.into();
    })
    .await;
    let mut c = relay.connect().await;
    let profile = sign(&mallory, now() - 100, 0, &[], r#"{"name":"mallory"}"#);
    let spam = sign(&mallory, now() - 50, 1, &[], "buy now");
    let fake = sign(&imposter, now() - 50, 1, &[], "I am alice");
    let elsewhere = sign(&mallory, now() - 50, 1, &[], "never sent here");
    for e in [&profile, &spam, &fake] {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
    let t = now();
    for r in [
        report(&alice, t - 3, Some(&spam), &mallory, "spam", "spam"),
        report(&bob, t - 2, Some(&spam), &mallory, "spam", ""),
        report(&bob, t - 1, None, &imposter, "impersonation", "pretends to be alice"),
        // Of an event this relay does not hold: not its to review.
        report(&alice, t, Some(&elsewhere), &mallory, "spam", ""),
    ] {
        assert_ok(&c.publish(&r).await, &r.id.to_hex(), true, "");
    }
    assert_eq!(http(&relay, Method::GET, "/admin/v1/reports", None, None, None).await.0, StatusCode::UNAUTHORIZED);
    let (status, doc) = admin(&relay, Method::GET, "/admin/v1/reports", None).await;
    assert_eq!(status, StatusCode::OK);
    let queue = doc["reports"].as_array().unwrap();
    assert_eq!(queue.len(), 2, "{doc}");
    // Newest first: the key reported last, then the event.
    assert_eq!(queue[0]["target"], json!(imposter.public_key().to_hex()));
    assert_eq!((queue[0]["type"].clone(), queue[0]["types"].clone()), (json!("pubkey"), json!({"impersonation": 1})));
    assert_eq!(queue[0]["comments"], json!(["pretends to be alice"]));
    assert_eq!(queue[1]["target"], json!(spam.id.to_hex()));
    assert_eq!((queue[1]["count"].clone(), queue[1]["types"].clone()), (json!(2), json!({"spam": 2})));
    assert_eq!(queue[1]["event"]["content"], "buy now");
    assert_eq!(queue[1]["author"]["name"], "mallory");
    assert_eq!(queue[1]["reporters"].as_array().unwrap().len(), 2);
    // NIP-86 sees the same queue.
    let (_, rpc) = admin(
        &relay,
        Method::POST,
        "/admin/v1/rpc",
        Some(json!({"method": "listeventsneedingmoderation", "params": []})),
    )
    .await;
    assert_eq!(rpc["result"], json!([{"id": spam.id.to_hex(), "reason": "spam ×2"}]));

    // Dismissed: out of the queue, audited.
    let key = imposter.public_key().to_hex();
    let (status, _) = admin(&relay, Method::POST, &format!("/admin/v1/reports/{key}/dismiss"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(audit_actions(&relay, TOKEN).await[0], "report.dismiss");
    // Deleting a key is not a thing: said so.
    let (status, body) = admin(
        &relay,
        Method::POST,
        &format!("/admin/v1/reports/{}/ban", spam.id.to_hex()),
        Some(json!({"reach": "everything"})),
    )
    .await;
    assert_eq!(
        (status, body["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("a ban needs {\"reach\": \"event\" | \"events\" | \"writes\"}"))
    );
    // The event deleted: gone from every read, refused if sent again, audited.
    let (status, done) =
        admin(&relay, Method::POST, &format!("/admin/v1/reports/{}/delete", spam.id.to_hex()), None).await;
    assert_eq!((status, done), (StatusCode::OK, json!({"deleted": spam.id.to_hex()})));
    assert_eq!(c.req_ids("s", vec![json!({"ids": [spam.id.to_hex()]})]).await, Vec::<String>::new());
    assert_eq!(
        c.publish(&spam).await,
        json!(["OK", spam.id.to_hex(), false, "blocked: this event is banned from this relay"])
    );
    assert_eq!(audit_actions(&relay, TOKEN).await[0], "report.delete");
    let (_, doc) = admin(&relay, Method::GET, "/admin/v1/reports", None).await;
    assert_eq!(doc["reports"], json!([]));
    assert_eq!(
        admin(&relay, Method::POST, &format!("/admin/v1/reports/{key}/dismiss"), None).await.0,
        StatusCode::NOT_FOUND
    );

    // A new report of a dismissed key brings it back; a ban of its events removes them all and
    // its writes after.
    let again = report(&alice, now() + 1, None, &imposter, "impersonation", "still at it");
    assert_ok(&c.publish(&again).await, &again.id.to_hex(), true, "");
    let (_, doc) = admin(&relay, Method::GET, "/admin/v1/reports", None).await;
    assert_eq!(doc["reports"][0]["count"], 1);
    let (status, done) = admin(
        &relay,
        Method::POST,
        &format!("/admin/v1/reports/{key}/ban"),
        Some(json!({"reach": "events", "reason": "impersonation"})),
    )
    .await;
    assert_eq!((status, done), (StatusCode::OK, json!({"banned": key, "reach": "events", "removed": 1})));
    assert_eq!(c.req_ids("f", vec![json!({"authors": [key]})]).await, Vec::<String>::new());
    let more = sign(&imposter, now(), 1, &[], "again");
    assert_eq!(c.publish(&more).await[3], "blocked: this pubkey is banned from this relay");
    assert_eq!(audit_actions(&relay, TOKEN).await[0], "report.ban");
}

#[tokio::test]
async fn nip86_banevent_and_allowevent_answer_the_queue() {
    let (alice, mallory) = (keys(1), keys(2));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = TOKEN.into();
    })
    .await;
    let mut c = relay.connect().await;
    let (one, two) = (sign(&mallory, now() - 5, 1, &[], "one"), sign(&mallory, now() - 4, 1, &[], "two"));
    for e in [&one, &two] {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
        let r = report(&alice, now(), Some(e), &mallory, "nudity", "");
        assert_ok(&c.publish(&r).await, &r.id.to_hex(), true, "");
    }
    let rpc = |method: &'static str, params: Value| {
        let relay = &relay;
        async move {
            admin(relay, Method::POST, "/admin/v1/rpc", Some(json!({"method": method, "params": params}))).await.1["result"].clone()
        }
    };
    assert_eq!(rpc("listeventsneedingmoderation", json!([])).await.as_array().unwrap().len(), 2);
    assert_eq!(rpc("banevent", json!([one.id.to_hex(), "nudity"])).await, json!(true));
    assert_eq!(rpc("allowevent", json!([two.id.to_hex(), "fine"])).await, json!(true));
    assert_eq!(rpc("listeventsneedingmoderation", json!([])).await, json!([]));
    assert_eq!(rpc("listbannedevents", json!([])).await, json!([{"id": one.id.to_hex(), "reason": "nudity"}]));
    assert_eq!(c.req_ids("s", vec![json!({"authors": [mallory.public_key().to_hex()]})]).await, vec![two.id.to_hex()]);
}

#[tokio::test]
async fn an_event_enough_members_reported_is_held_until_an_admin_decides() {
    let (alice, bob, carol, mallory) = (keys(1), keys(2), keys(3), keys(4));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = TOKEN.into();
        c.access.mode = hearth::config::AccessMode::MembersWrite;
        c.auth.members = vec![alice.public_key(), bob.public_key(), carol.public_key(), mallory.public_key()];
        c.moderation.hold_after_reports = 2;
        c.admin.pubkeys = vec![keys(9).public_key()];
    })
    .await;
    let mut c = relay.connect().await;
    let note = sign(&mallory, now() - 10, 1, &[], "something nasty");
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");
    let ids = json!({"ids": [note.id.to_hex()]});
    // One report: still served; the same reporter twice still counts once.
    for r in [
        report(&alice, now() - 5, Some(&note), &mallory, "profanity", ""),
        report(&alice, now() - 4, Some(&note), &mallory, "spam", ""),
    ] {
        assert_ok(&c.publish(&r).await, &r.id.to_hex(), true, "");
    }
    assert_eq!(c.req_ids("n", vec![ids.clone()]).await, vec![note.id.to_hex()]);
    // A second member: held, off every read path, refused if sent again.
    let second = report(&bob, now() - 3, Some(&note), &mallory, "profanity", "");
    assert_ok(&c.publish(&second).await, &second.id.to_hex(), true, "");
    assert_eq!(c.req_ids("n", vec![ids.clone()]).await, Vec::<String>::new());
    let (_, body) = http(
        &relay,
        Method::POST,
        "/api/v1/query",
        Some(json!({"filters": [{"ids": [note.id.to_hex()]}]})),
        None,
        None,
    )
    .await;
    assert_eq!(body["events"], json!([]));
    assert_eq!(
        c.publish(&note).await,
        json!(["OK", note.id.to_hex(), false, "blocked: this event is held for review by the relay's admins"])
    );
    assert_eq!(audit_actions(&relay, TOKEN).await[0], "report.hold");
    let (_, doc) = admin(&relay, Method::GET, "/admin/v1/reports", None).await;
    assert_eq!(
        (doc["reports"][0]["held"].clone(), doc["reports"][0]["event"]["content"].clone()),
        (json!(true), json!("something nasty"))
    );
    // Dismissed: served again.
    let path = format!("/admin/v1/reports/{}/dismiss", note.id.to_hex());
    assert_eq!(admin(&relay, Method::POST, &path, None).await.0, StatusCode::OK);
    assert_eq!(c.req_ids("n", vec![ids.clone()]).await, vec![note.id.to_hex()]);
    // Reported again by two members after the decision: held again; deleted this time.
    for r in [
        report(&bob, now() + 1, Some(&note), &mallory, "spam", ""),
        report(&carol, now() + 1, Some(&note), &mallory, "spam", ""),
    ] {
        assert_ok(&c.publish(&r).await, &r.id.to_hex(), true, "");
    }
    assert_eq!(c.req_ids("n", vec![ids.clone()]).await, Vec::<String>::new());
    let path = format!("/admin/v1/reports/{}/delete", note.id.to_hex());
    assert_eq!(admin(&relay, Method::POST, &path, None).await.0, StatusCode::OK);
    assert_eq!(c.req_ids("n", vec![ids.clone()]).await, Vec::<String>::new());
    assert_eq!(c.publish(&note).await[3], "blocked: this event is banned from this relay");
    let (_, doc) = admin(&relay, Method::GET, "/admin/v1/reports", None).await;
    assert_eq!(doc["reports"], json!([]));
}
