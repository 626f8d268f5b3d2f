//! `access.mode` and the member list: who may publish and who may read, on every transport, and
//! the list kept by the admin API and NIP-86 alike.

use crate::common::*;
use hearth::config::{AccessMode, Config};
use hearth::protocol::Keys;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "members-admin-token";

fn mode(mode: AccessMode) -> impl FnOnce(&mut Config) {
    move |c: &mut Config| {
        generous(c);
        c.admin.token = TOKEN.into();
        c.access.mode = mode;
    }
}

/// An HTTP call to `relay`: with the admin token (`admin`), or signed NIP-98 by `signer`.
async fn call(
    relay: &TestRelay,
    method: Method,
    path: &str,
    body: Option<Value>,
    admin: bool,
    signer: Option<&Keys>,
) -> (StatusCode, Value) {
    http(relay, method, path, body, admin.then_some(TOKEN), signer).await
}

#[tokio::test]
async fn in_members_write_only_members_publish_and_the_list_is_one_for_the_api_and_nip86() {
    let relay = TestRelay::start(mode(AccessMode::MembersWrite)).await;
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let a = alice.public_key().to_hex();
    let added =
        call(&relay, Method::PUT, &format!("/admin/v1/members/{a}"), Some(json!({"note": "founder"})), true, None)
            .await;
    assert_eq!(added, (StatusCode::OK, json!({"pubkey": a, "note": "founder", "added": true})));

    let mut c = relay.connect().await;
    let note = sign(&alice, now(), 1, &[], "a member's note");
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");
    let stranger = sign(&bob, now(), 1, &[], "a stranger's note");
    let refused = c.publish(&stranger).await;
    assert_eq!(
        refused,
        json!(["OK", stranger.id.to_hex(), false, "restricted: only members of this relay may publish here"])
    );
    let (status, body) = call(&relay, Method::POST, "/api/v1/events", Some(json!(stranger)), false, Some(&bob)).await;
    assert_eq!(
        (status, body["message"].as_str()),
        (StatusCode::FORBIDDEN, Some("restricted: only members of this relay may publish here"))
    );
    // Anyone reads.
    assert_eq!(c.req_ids("all", vec![json!({"kinds": [1]})]).await, vec![note.id.to_hex()]);
    let info = relay.nip11().await;
    assert_eq!(
        (info["limitation"]["restricted_writes"].as_bool(), info["limitation"]["auth_required"].as_bool()),
        (Some(true), Some(false))
    );

    // NIP-86 adds to the same list the API lists.
    let rpc = json!({"method": "allowpubkey", "params": [carol.public_key().to_hex(), "invited"]});
    assert_eq!(call(&relay, Method::POST, "/admin/v1/rpc", Some(rpc), true, None).await.1["result"], json!(true));
    let (status, list) = call(&relay, Method::GET, "/admin/v1/members?limit=1", None, true, None).await;
    assert_eq!(status, StatusCode::OK);
    let (first, second) = if a < carol.public_key().to_hex() {
        (a.clone(), carol.public_key().to_hex())
    } else {
        (carol.public_key().to_hex(), a.clone())
    };
    assert_eq!(
        (list["total"].as_u64(), list["members"][0]["pubkey"].as_str(), list["next"].as_str()),
        (Some(2), Some(first.as_str()), Some(first.as_str()))
    );
    let (_, rest) = call(&relay, Method::GET, &format!("/admin/v1/members?after={first}"), None, true, None).await;
    assert_eq!(rest["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        (rest["members"][0]["pubkey"].as_str(), rest["members"][0]["source"].as_str(), rest["next"].clone()),
        (Some(second.as_str()), Some("admin"), Value::Null)
    );
    let rpc = json!({"method": "listallowedpubkeys", "params": []});
    assert_eq!(
        call(&relay, Method::POST, "/admin/v1/rpc", Some(rpc), true, None).await.1["result"].as_array().map(Vec::len),
        Some(2)
    );

    // Removed: no longer publishes; removing again is a 404; a bad key a 400.
    let path = format!("/admin/v1/members/{a}");
    assert_eq!(
        call(&relay, Method::DELETE, &path, None, true, None).await,
        (StatusCode::OK, json!({"pubkey": a, "removed": true}))
    );
    assert_eq!(call(&relay, Method::DELETE, &path, None, true, None).await.0, StatusCode::NOT_FOUND);
    assert_eq!(
        call(&relay, Method::PUT, "/admin/v1/members/nope", Some(json!({})), true, None).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        call(&relay, Method::PUT, &path, Some(json!({"role": "x"})), true, None).await.0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(call(&relay, Method::GET, "/admin/v1/members", None, false, None).await.0, StatusCode::UNAUTHORIZED);
    let again = sign(&alice, now(), 1, &[], "after leaving");
    assert_ok(&c.publish(&again).await, &again.id.to_hex(), false, "restricted: ");
    // Every change is in the audit log.
    let actions = audit_actions(&relay, TOKEN).await;
    assert!(
        ["member.add", "member.remove", "allowpubkey"].iter().all(|a| actions.iter().any(|b| b == a)),
        "{actions:?}"
    );
}

#[tokio::test]
async fn in_members_only_reading_and_writing_need_auth_as_a_member_on_both_transports() {
    let relay = TestRelay::start(mode(AccessMode::MembersOnly)).await;
    let (alice, bob) = (keys(1), keys(2));
    let a = alice.public_key().to_hex();
    call(&relay, Method::PUT, &format!("/admin/v1/members/{a}"), Some(json!({})), true, None).await;
    assert_eq!(relay.nip11().await["limitation"]["auth_required"], true);

    // Before AUTH: every frame is asked to authenticate, with the challenge again for reads.
    let mut c = relay.connect().await;
    let note = sign(&alice, now(), 1, &[], "members only");
    let early = c.publish(&note).await;
    assert_eq!(
        early,
        json!([
            "OK",
            note.id.to_hex(),
            false,
            "auth-required: this relay is for its members; answer the AUTH challenge"
        ])
    );
    c.send(json!(["REQ", "r", {"kinds": [1]}])).await;
    assert_eq!(
        c.recv().await,
        json!(["CLOSED", "r", "auth-required: this relay is for its members; answer the AUTH challenge"])
    );
    assert_eq!(c.recv().await, json!(["AUTH", c.challenge]));
    // Authenticated as a stranger: restricted.
    assert_eq!(c.auth(&bob, &relay.ws_url()).await[2], true);
    c.send(json!(["COUNT", "n", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "n", "restricted: this relay is for its members only"]));
    let by_bob = sign(&bob, now(), 1, &[], "let me in");
    assert_eq!(
        c.publish(&by_bob).await,
        json!(["OK", by_bob.id.to_hex(), false, "restricted: this relay is for its members only"])
    );
    // A member reads and writes.
    let mut m = relay.connect().await;
    assert_eq!(m.auth(&alice, &relay.ws_url()).await[2], true);
    assert_ok(&m.publish(&note).await, &note.id.to_hex(), true, "");
    assert_eq!(m.req_ids("r", vec![json!({"kinds": [1]})]).await, vec![note.id.to_hex()]);

    // REST: 401 unsigned, 403 for a stranger, the events for a member.
    let query = json!({"filters": [{"kinds": [1]}]});
    let (status, body) = call(&relay, Method::POST, "/api/v1/query", Some(query.clone()), false, None).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::UNAUTHORIZED, Some("auth-required: this relay is for its members; sign the request (NIP-98)"))
    );
    let (status, body) = call(&relay, Method::POST, "/api/v1/query", Some(query.clone()), false, Some(&bob)).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (StatusCode::FORBIDDEN, Some("restricted: this relay is for its members only"))
    );
    let path = format!("/api/v1/events/{}", note.id.to_hex());
    assert_eq!(call(&relay, Method::GET, &path, None, false, Some(&bob)).await.0, StatusCode::FORBIDDEN);
    let (status, body) = call(&relay, Method::POST, "/api/v1/query", Some(query), false, Some(&alice)).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"events": [note]})));
}
