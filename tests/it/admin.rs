//! The admin API and NIP-86 through the real server.

use std::time::Duration;

use crate::common::*;
use hearth::config::Config;
use hearth::protocol::nip98;
use hearth::protocol::{Keys, Timestamp};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TOKEN: &str = "s3cret-admin-token";

fn with_admin(c: &mut Config) {
    c.admin.token = TOKEN.into();
    c.admin.pubkeys = vec![keys(100).public_key()];
}

/// An admin client against `base` (the relay's or the admin listener's address).
struct AdminApi {
    base: String,
}

impl AdminApi {
    fn new(relay: &TestRelay) -> AdminApi {
        AdminApi { base: format!("http://{}", relay.admin_addr.unwrap_or(relay.addr)) }
    }

    /// The status and the JSON body (`null` for a body that is not JSON: the page's files).
    async fn call(&self, method: Method, path: &str, body: Option<Value>, auth: Option<&str>) -> (StatusCode, Value) {
        let mut headers = Vec::new();
        if let Some(auth) = auth {
            headers.push(("authorization", auth));
        }
        if body.is_some() {
            headers.push(("content-type", "application/json"));
        }
        let url = format!("{}{path}", self.base);
        let (status, _, bytes) = request(&url, method, &headers, body.map(|b| b.to_string().into_bytes())).await;
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    async fn token(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        self.call(method, path, body, Some(&format!("Bearer {TOKEN}"))).await
    }

    /// NIP-86 at `POST /`, NIP-98 signed by `signer`.
    async fn nip86(&self, signer: &Keys, method: &str, params: Value) -> (StatusCode, Value) {
        let body = json!({"method": method, "params": params}).to_string();
        let url = format!("{}/", self.base);
        let auth = nip98::header(
            signer,
            &nip98::Request { url: &url, method: "POST", body: body.as_bytes() },
            Timestamp(now()),
        )
        .unwrap();
        let headers = [("content-type", "application/nostr+json+rpc"), ("authorization", auth.as_str())];
        let (status, _, bytes) = request(&url, Method::POST, &headers, Some(body.into_bytes())).await;
        (status, serde_json::from_slice(&bytes).unwrap())
    }
}

#[tokio::test]
async fn admin_is_off_when_unconfigured() {
    let relay = TestRelay::start(generous).await;
    let api = AdminApi::new(&relay);
    assert_eq!(
        api.token(Method::GET, "/admin/v1/limits", None).await,
        (StatusCode::NOT_FOUND, json!({"error": "not found"}))
    );
    let (status, _) = api.nip86(&keys(100), "supportedmethods", json!([])).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn every_auth_failure_is_a_bare_401_and_failures_are_throttled() {
    let relay = TestRelay::start(|c| {
        generous(c);
        with_admin(c);
    })
    .await;
    let api = AdminApi::new(&relay);
    let unauthorized = (StatusCode::UNAUTHORIZED, json!({"error": "unauthorized"}));
    let url = format!("{}/admin/v1/limits", api.base);
    let stranger =
        nip98::header(&keys(5), &nip98::Request { url: &url, method: "GET", body: b"" }, Timestamp(now())).unwrap();
    let stale =
        nip98::header(&keys(100), &nip98::Request { url: &url, method: "GET", body: b"" }, Timestamp(now() - 300))
            .unwrap();
    for auth in
        [None, Some("Bearer wrong"), Some("Bearer "), Some("Basic eDp5"), Some(stranger.as_str()), Some(stale.as_str())]
    {
        assert_eq!(api.call(Method::GET, "/admin/v1/limits", None, auth).await, unauthorized, "{auth:?}");
    }
    // The admin pubkey over NIP-98, and the token, work.
    let good =
        nip98::header(&keys(100), &nip98::Request { url: &url, method: "GET", body: b"" }, Timestamp(now())).unwrap();
    assert_eq!(api.call(Method::GET, "/admin/v1/limits", None, Some(&good)).await.0, StatusCode::OK);
    assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::OK);
    // Ten failures a minute per IP; then even the right token waits.
    for _ in 0..4 {
        assert_eq!(api.call(Method::GET, "/admin/v1/limits", None, Some("Bearer nope")).await, unauthorized);
    }
    let (status, body) = api.call(Method::GET, "/admin/v1/limits", None, Some("Bearer nope")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["limit_type"], "admin_auth");
    assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::TOO_MANY_REQUESTS);
    relay.clock.advance(Duration::from_secs(6));
    assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::OK);
}

#[tokio::test]
async fn a_nip98_admin_call_is_bound_to_its_url_its_method_and_one_use_and_post_root_wants_nip98() {
    let relay = TestRelay::start(|c| {
        generous(c);
        with_admin(c);
    })
    .await;
    let api = AdminApi::new(&relay);
    let unauthorized = (StatusCode::UNAUTHORIZED, json!({"error": "unauthorized"}));
    let signed = |path: &str, method: &str| {
        let url = format!("{}{path}", api.base);
        nip98::header(&keys(100), &nip98::Request { url: &url, method, body: b"" }, Timestamp(now())).unwrap()
    };
    // Used once: the same header again is a replay.
    let once = signed("/admin/v1/audit", "GET");
    assert_eq!(api.call(Method::GET, "/admin/v1/audit", None, Some(&once)).await.0, StatusCode::OK);
    assert_eq!(api.call(Method::GET, "/admin/v1/audit", None, Some(&once)).await, unauthorized);
    // Signed for another URL, or another method.
    let elsewhere = signed("/admin/v1/members", "GET");
    assert_eq!(api.call(Method::GET, "/admin/v1/audit", None, Some(&elsewhere)).await, unauthorized);
    let as_get = signed("/admin/v1/store/compact", "GET");
    assert_eq!(api.call(Method::POST, "/admin/v1/store/compact", None, Some(&as_get)).await, unauthorized);
    // NIP-86 at POST / takes NIP-98 only: the admin token is refused there.
    let resp = web()
        .post(format!("{}/", api.base))
        .header("content-type", "application/nostr+json+rpc")
        .header("authorization", format!("Bearer {TOKEN}"))
        .body(json!({"method": "supportedmethods", "params": []}).to_string())
        .timeout(STEP)
        .send()
        .await
        .unwrap();
    assert_eq!((resp.status(), resp.json::<Value>().await.unwrap()), unauthorized);
    let (status, body) = api.nip86(&keys(100), "supportedmethods", json!([])).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    // None of the refused calls did anything: the audit log holds no compaction.
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit", None).await;
    assert_eq!(audit, json!({"entries": []}));
}

#[tokio::test]
async fn limits_tuned_live_apply_to_open_connections_and_survive_restart() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        c.limits.agent.messages_per_min = 77;
    })
    .await;
    let api = AdminApi::new(&relay);
    let (status, limits) = api.token(Method::GET, "/admin/v1/limits", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(limits["human"]["ws_events_per_sec"], json!({"value": 10, "source": "default"}));
    assert_eq!(limits["human"]["ws_reqs_per_sec"], json!({"value": 10, "source": "default"}));
    assert_eq!(limits["agent"]["messages_per_min"]["value"], 77);
    let mut c = relay.connect().await;
    c.send(json!(["COUNT", "before", {}])).await;
    assert_eq!(c.recv().await[0], "COUNT");
    let (status, limits) = api
        .token(
            Method::PATCH,
            "/admin/v1/limits",
            Some(json!({"human": {"ws_reqs_per_sec": 1, "ws_reqs_burst_window_secs": 1}})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(limits["human"]["ws_reqs_per_sec"], json!({"value": 1, "source": "admin"}));
    // The next frame of the already open connection is judged by the new value.
    c.send(json!(["COUNT", "after", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "after", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));
    // Clients see the new per-tier value at once.
    let info = relay.nip11().await;
    assert_eq!(info["hearth_limits"]["human"]["ws_reqs_per_sec"], 1);
    // Tuned up: the refusals stop.
    api.token(Method::PATCH, "/admin/v1/limits", Some(json!({"human": {"ws_reqs_per_sec": 1000}}))).await;
    c.send(json!(["COUNT", "up", {}])).await;
    assert_eq!(c.recv().await[0], "COUNT");
    drop(c);
    // Survives a restart.
    let dir = relay.stop().await;
    let relay = TestRelay::start_in(dir, with_admin).await;
    let api = AdminApi::new(&relay);
    let (_, limits) = api.token(Method::GET, "/admin/v1/limits", None).await;
    assert_eq!(limits["human"]["ws_reqs_per_sec"], json!({"value": 1000, "source": "admin"}));
    assert_eq!(limits["human"]["ws_reqs_burst_window_secs"], json!({"value": 1, "source": "admin"}));
    let mut c = relay.connect().await;
    c.send(json!(["COUNT", "a", {}])).await;
    assert_eq!(c.recv().await[0], "COUNT");
    // Back to the configured values.
    let (_, limits) = api.token(Method::DELETE, "/admin/v1/limits/overrides/human/ws_reqs_per_sec", None).await;
    assert_eq!(limits["human"]["ws_reqs_per_sec"], json!({"value": 10, "source": "default"}));
    assert_eq!(limits["human"]["ws_reqs_burst_window_secs"]["source"], "admin");
    let (_, limits) = api.token(Method::DELETE, "/admin/v1/limits/overrides", None).await;
    assert_eq!(limits["human"]["ws_reqs_burst_window_secs"], json!({"value": 10, "source": "default"}));
}

#[tokio::test]
async fn a_bad_patch_names_the_field_and_changes_nothing() {
    let relay = TestRelay::start(with_admin).await;
    let api = AdminApi::new(&relay);
    let (_, before) = api.token(Method::GET, "/admin/v1/limits", None).await;
    for (patch, error) in [
        (
            json!({"human": {"ws_events_per_sec": 20, "messages_per_min": 0}}),
            "`human.messages_per_min` must be a positive integer of at most 1000000000",
        ),
        (json!({"robots": {"ws_events_per_sec": 20}}), "unknown tier `robots` (expected human, agent or ip)"),
        (
            json!({"agent": {"bogus": 1}}),
            "unknown limit `agent.bogus` (the limits are ws_events_per_sec, ws_burst_window_secs, ws_reqs_per_sec, \
             ws_reqs_burst_window_secs, messages_per_min, api_calls_per_min, upload_bytes_per_day)",
        ),
        (
            json!({"agent": {"api_calls_per_min": -5}}),
            "`agent.api_calls_per_min` must be a positive integer of at most 1000000000",
        ),
        // 2^64 - 1 and just past each maximum: refused, so NIP-11 never advertises them.
        (
            json!({"ip": {"ws_events_per_sec": u64::MAX}}),
            "`ip.ws_events_per_sec` must be a positive integer of at most 10000000",
        ),
        (
            json!({"human": {"ws_burst_window_secs": 3601}}),
            "`human.ws_burst_window_secs` must be a positive integer of at most 3600",
        ),
        (
            json!({"human": {"api_calls_per_min": 1_000_000_001u64}}),
            "`human.api_calls_per_min` must be a positive integer of at most 1000000000",
        ),
    ] {
        assert_eq!(
            api.token(Method::PATCH, "/admin/v1/limits", Some(patch)).await,
            (StatusCode::BAD_REQUEST, json!({"error": error}))
        );
    }
    assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.1, before);
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit", None).await;
    assert_eq!(audit, json!({"entries": []}));
}

/// A PATCH of the limits with `If-Match: if_match`: status, body and `ETag`.
async fn patch_if_match(api: &AdminApi, if_match: Option<&str>, body: Value) -> (StatusCode, Value, String) {
    let bearer = format!("Bearer {TOKEN}");
    let mut headers = vec![("authorization", bearer.as_str()), ("content-type", "application/json")];
    if let Some(tag) = if_match {
        headers.push(("if-match", tag));
    }
    let url = format!("{}/admin/v1/limits", api.base);
    let (status, headers, bytes) = request(&url, Method::PATCH, &headers, Some(body.to_string().into_bytes())).await;
    let tag = headers.get("etag").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    (status, serde_json::from_slice(&bytes).unwrap(), tag)
}

#[tokio::test]
async fn a_limits_patch_from_a_stale_etag_is_412_with_the_current_document_and_changes_nothing() {
    let relay = TestRelay::start(with_admin).await;
    let api = AdminApi::new(&relay);
    let (_, doc, headers) =
        http_with_headers(&format!("{}/admin/v1/limits", api.base), Method::GET, None, Some(TOKEN), None).await;
    let first = headers["etag"].to_str().unwrap().to_string();
    assert!(first.starts_with('"') && first.ends_with('"') && first.len() == 18, "{first}");
    // Two admins patch from the same tag at once: exactly one wins, the other sees its change.
    let (a, b) = tokio::join!(
        patch_if_match(&api, Some(&first), json!({"human": {"ws_events_per_sec": 21}})),
        patch_if_match(&api, Some(&first), json!({"human": {"ws_events_per_sec": 22}})),
    );
    let (won, lost) = if a.0 == StatusCode::OK { (a, b) } else { (b, a) };
    assert_eq!((won.0, lost.0), (StatusCode::OK, StatusCode::PRECONDITION_FAILED));
    assert_ne!(won.2, first, "a change gives a new tag");
    assert_eq!(lost.1, won.1, "the refused one gets the current document");
    assert_eq!(lost.2, won.2, "with its tag");
    let value = won.1["human"]["ws_events_per_sec"].clone();
    assert!(value == json!({"value": 21, "source": "admin"}) || value == json!({"value": 22, "source": "admin"}));
    assert_ne!(doc["human"]["ws_events_per_sec"], value);
    // The stale tag again: refused, nothing changes, nothing is audited for it.
    let (status, body, tag) = patch_if_match(&api, Some(&first), json!({"agent": {"messages_per_min": 5}})).await;
    assert_eq!((status, &body, &tag), (StatusCode::PRECONDITION_FAILED, &won.1, &won.2));
    // The current tag among others, `*`, and no If-Match at all are taken.
    let list = format!("\"0000000000000000\", {}", won.2);
    let (status, body, tag) = patch_if_match(&api, Some(&list), json!({"agent": {"messages_per_min": 5}})).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["agent"]["messages_per_min"], json!({"value": 5, "source": "admin"}));
    let (status, _, star) = patch_if_match(&api, Some("*"), json!({"agent": {"messages_per_min": 6}})).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(star, tag);
    let (status, _, _) = patch_if_match(&api, None, json!({"agent": {"messages_per_min": 7}})).await;
    assert_eq!(status, StatusCode::OK);
    // A weak tag never matches (RFC 9110 strong comparison).
    let (_, _, headers) =
        http_with_headers(&format!("{}/admin/v1/limits", api.base), Method::GET, None, Some(TOKEN), None).await;
    let now = headers["etag"].to_str().unwrap().to_string();
    let (status, _, _) =
        patch_if_match(&api, Some(&format!("W/{now}")), json!({"agent": {"messages_per_min": 8}})).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED);
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit", None).await;
    assert_eq!(audit["entries"].as_array().unwrap().len(), 4, "{audit}");
}

#[tokio::test]
async fn a_limits_preview_counts_who_the_proposed_values_would_refuse_now_and_changes_nothing() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        c.limits.human.ws_reqs_per_sec = 2;
        c.limits.human.ws_reqs_burst_window_secs = 5;
    })
    .await;
    let api = AdminApi::new(&relay);
    // Three principals (three IPs, the limiter's clock standing still): one has used 4 of its
    // 10 ws_reqs, one 8, one none yet (its AUTH challenge is all it has had).
    let mut busy = Vec::new();
    for (host, frames) in [(11u8, 4), (12, 8)] {
        let mut c = Client::connect_from(&relay.ws_url(), std::net::Ipv4Addr::new(127, 0, 0, host).into()).await;
        for i in 0..frames {
            c.send(json!(["COUNT", format!("n{i}"), {}])).await;
            assert_eq!(c.recv().await[0], "COUNT");
        }
        busy.push(c);
    }
    let (_, before) = api.token(Method::GET, "/admin/v1/limits", None).await;
    let preview = |body: Value| api.token(Method::POST, "/admin/v1/limits/preview", Some(body));
    let (status, body) = preview(json!({})).await;
    assert_eq!(status, StatusCode::OK);
    let tracked = body["tracked"].as_u64().unwrap();
    assert!(tracked >= 2, "{body}");
    let zero = json!({"ws_events": 0, "ws_reqs": 0, "messages": 0, "api_calls": 0, "upload_bytes": 0, "any": 0});
    assert_eq!((&body["would_refuse"], &body["refused_now"]), (&zero, &zero), "{body}");
    // A burst of 6 (2/s × 3 s) refuses the one that used 8; of 2 (1/s × 2 s), both.
    let (_, body) = preview(json!({"human": {"ws_reqs_burst_window_secs": 3}})).await;
    let refusing =
        |n: u64| json!({"ws_events": 0, "ws_reqs": n, "messages": 0, "api_calls": 0, "upload_bytes": 0, "any": n});
    assert_eq!(body["would_refuse"], refusing(1), "{body}");
    let (_, body) = preview(json!({"human": {"ws_reqs_per_sec": 1, "ws_reqs_burst_window_secs": 2}})).await;
    assert_eq!(body["would_refuse"], refusing(2), "{body}");
    assert_eq!(body["refused_now"], zero);
    // Validated as a PATCH is; nothing changed, nothing audited, and the clients are not billed.
    assert_eq!(
        preview(json!({"human": {"ws_events_per_sec": 0}})).await,
        (
            StatusCode::BAD_REQUEST,
            json!({"error": "`human.ws_events_per_sec` must be a positive integer of at most 10000000"})
        )
    );
    assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.1, before);
    assert_eq!(api.token(Method::GET, "/admin/v1/audit", None).await.1, json!({"entries": []}));
    let c = &mut busy[1];
    c.send(json!(["COUNT", "more", {}])).await;
    assert_eq!(c.recv().await[0], "COUNT", "the 9th of 10 is still admitted");
}

#[tokio::test]
async fn stats_sample_connections_subscriptions_stored_events_and_refusals_every_five_seconds() {
    let relay = TestRelay::start_real_clock(|c| {
        with_admin(c);
        c.limits.human.ws_events_per_sec = 1;
        c.limits.human.ws_burst_window_secs = 3;
        c.limits.human.messages_per_min = 1000;
    })
    .await;
    let api = AdminApi::new(&relay);
    // The first sample is taken at start: nothing yet, rates of zero.
    let (status, body) = api.token(Method::GET, "/admin/v1/stats", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["interval_secs"], 5);
    let first = &body["samples"][0];
    assert_eq!((&first["connections"], &first["subscriptions"]), (&json!(0), &json!(0)), "{body}");
    assert_eq!((&first["events_stored_per_sec"], &first["admission_p99_us"]), (&json!(0.0), &Value::Null));
    // Two connections, one subscription, 3 events stored, 2 ws_events refused (a burst of 3;
    // the REQ bills ws_reqs).
    let mut a = relay.connect().await;
    let mut b = relay.connect().await;
    b.req("live", vec![json!({"kinds": [7]})]).await;
    // Five at once: a burst of 3 is taken; what the real clock refilled meanwhile is counted
    // from the answers, not assumed.
    let (mut stored, mut refused) = (0u64, 0u64);
    for i in 0..5 {
        let e = sign(&keys(30), now(), 1, &[], &format!("{i}"));
        let frame = a.publish(&e).await;
        if frame[2] == true {
            stored += 1;
        } else {
            assert_ok(&frame, &e.id.to_hex(), false, "rate-limited: ");
            refused += 1;
        }
    }
    assert!(stored >= 3 && refused >= 1, "{stored} stored, {refused} refused");
    // The next sample, within one interval (plus the machine's slack).
    let sample = poll("a second sample", 3 * STEP, async || {
        let (_, body) = api.token(Method::GET, "/admin/v1/stats", None).await;
        body["samples"].as_array().and_then(|s| s.get(1)).cloned().ok_or_else(|| body.to_string())
    })
    .await;
    assert_eq!((&sample["connections"], &sample["subscriptions"]), (&json!(2), &json!(1)), "{sample}");
    // Rates over the seconds the sampler measured: each rate times those seconds is exactly the
    // count the answers above gave.
    let secs = sample["secs"].as_f64().unwrap();
    let count = |v: &Value| (v.as_f64().unwrap() * secs).round() as u64;
    assert_eq!(count(&sample["events_stored_per_sec"]), stored, "{sample}");
    assert_eq!(count(&sample["refusals_per_sec"]["ws_events"]), refused, "{sample}");
    assert_eq!(count(&sample["refusals_per_sec"]["messages"]), 0, "{sample}");
    assert!(sample["admission_p99_us"].as_u64().is_some(), "{sample}");
}

#[tokio::test]
async fn usage_after_a_scripted_sequence_matches_exactly() {
    let relay = TestRelay::start(with_admin).await;
    let api = AdminApi::new(&relay);
    let alice = keys(20);
    let mut c = relay.connect().await;
    assert_eq!(c.auth(&alice, &relay.ws_url()).await[2], true);
    for i in 0..3 {
        c.send(json!(["COUNT", format!("n{i}"), {}])).await;
        c.recv().await;
    }
    assert_eq!(c.publish(&sign(&alice, now(), 1, &[], "durable")).await[2], true);
    assert_eq!(c.publish(&sign(&alice, now(), 20001, &[], "ephemeral")).await[2], true);
    c.req("open", vec![json!({"kinds": [1]})]).await;
    let url = relay.http_url("/api/v1/count");
    let body = json!({"filters": [{}]}).to_string();
    let auth =
        nip98::header(&alice, &nip98::Request { url: &url, method: "POST", body: body.as_bytes() }, Timestamp(now()))
            .unwrap();
    let resp = web()
        .post(&url)
        .header("content-type", "application/json")
        .header("authorization", auth)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let npub = hearth::protocol::nip19::encode("npub", &alice.public_key().0);
    let (status, usage) = api.token(Method::GET, &format!("/admin/v1/usage/{npub}"), None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(usage["principal"], alice.public_key().to_hex());
    assert_eq!(usage["tier"], "human");
    assert_eq!(
        usage["limits"]["ws_events"],
        json!({"used": 2, "limit": 50, "remaining": 48, "window_secs": 5, "retry_in_secs": 0})
    );
    assert_eq!(
        usage["limits"]["ws_reqs"],
        json!({"used": 4, "limit": 100, "remaining": 96, "window_secs": 10, "retry_in_secs": 0})
    );
    assert_eq!(
        usage["limits"]["messages"],
        json!({"used": 1, "limit": 120, "remaining": 119, "window_secs": 60, "retry_in_secs": 0})
    );
    assert_eq!(
        usage["limits"]["api_calls"],
        json!({"used": 1, "limit": 60, "remaining": 59, "window_secs": 60, "retry_in_secs": 0})
    );
    assert_eq!(usage["refusals"]["ws_events"], 0);
    assert_eq!(usage["connections"], 1);
    assert_eq!(usage["subscriptions"], 1);
    assert_eq!(usage["stored_events"], 1);
    assert!(usage["first_seen"].as_u64().unwrap() <= usage["last_seen"].as_u64().unwrap());
    // The IP side: the AUTH frame is the IP's own; its ceiling carries every frame and call
    // of every key from it.
    let (_, ip) = api.token(Method::GET, "/admin/v1/usage/ip/127.0.0.1", None).await;
    assert_eq!(ip["limits"]["ws_events"]["used"], 1);
    assert_eq!(ip["ip_ceiling"]["principal"], "127.0.0.1/32");
    assert_eq!(ip["ip_ceiling"]["tier"], "ip");
    assert_eq!(
        ip["ip_ceiling"]["limits"]["ws_events"],
        json!({"used": 3, "limit": 200, "remaining": 197, "window_secs": 5, "retry_in_secs": 0})
    );
    assert_eq!(
        ip["ip_ceiling"]["limits"]["ws_reqs"],
        json!({"used": 4, "limit": 400, "remaining": 396, "window_secs": 10, "retry_in_secs": 0})
    );
    assert_eq!(ip["ip_ceiling"]["limits"]["messages"]["used"], 1);
    assert_eq!(ip["ip_ceiling"]["limits"]["api_calls"]["used"], 1);
    let (_, busiest) = api.token(Method::GET, "/admin/v1/usage?sort=usage&limit=1", None).await;
    assert_eq!(busiest["principals"][0]["principal"], alice.public_key().to_hex());
    let (status, _) = api.token(Method::GET, "/admin/v1/usage/not-a-key", None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // One reading of a number parameter on every route.
    for path in ["/admin/v1/usage?limit=-5", "/admin/v1/audit?limit=-5", "/admin/v1/audit?limit=1e3"] {
        assert_eq!(
            api.token(Method::GET, path, None).await,
            (StatusCode::BAD_REQUEST, json!({"error": "limit must be a whole number"})),
            "{path}"
        );
    }
}

#[tokio::test]
async fn tier_changes_apply_live_and_are_audited() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        c.limits.agent.ws_reqs_per_sec = 1;
        c.limits.agent.ws_reqs_burst_window_secs = 1;
    })
    .await;
    let api = AdminApi::new(&relay);
    let bot = keys(21);
    let mut c = relay.connect().await;
    assert_eq!(c.auth(&bot, &relay.ws_url()).await[2], true);
    let path = format!("/admin/v1/pubkeys/{}/tier", bot.public_key());
    let (status, body) = api.token(Method::PUT, &path, Some(json!({"tier": "agent"}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"pubkey": bot.public_key().to_hex(), "tier": "agent"})));
    c.send(json!(["COUNT", "a", {}])).await;
    assert_eq!(c.recv().await[0], "COUNT");
    c.send(json!(["COUNT", "b", {}])).await;
    assert_eq!(c.recv().await[0], "CLOSED");
    assert_eq!(api.token(Method::PUT, &path, Some(json!({"tier": "robot"}))).await.0, StatusCode::BAD_REQUEST);
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit", None).await;
    let entry = &audit["entries"][0];
    assert_eq!(entry["who"], "token");
    assert_eq!(entry["action"], "tier.set");
    assert_eq!(entry["target"], bot.public_key().to_hex());
    assert_eq!((entry["old"].clone(), entry["new"].clone()), (json!("human"), json!("agent")));
}

#[tokio::test]
async fn every_nip86_method_works_and_bans_apply_on_both_transports() {
    let relay = TestRelay::start(|c| {
        generous(c);
        with_admin(c);
    })
    .await;
    let api = AdminApi::new(&relay);
    let admin = keys(100);
    let (spammer, friend) = (keys(30), keys(31));
    let mut c = relay.connect().await;
    let kept = sign(&friend, now(), 1, &[], "kept");
    let doomed = sign(&friend, now(), 1, &[], "doomed");
    assert_ok(&c.publish(&kept).await, &kept.id.to_hex(), true, "");
    assert_ok(&c.publish(&doomed).await, &doomed.id.to_hex(), true, "");
    // A non-admin signer is refused.
    assert_eq!(api.nip86(&keys(5), "supportedmethods", json!([])).await.0, StatusCode::UNAUTHORIZED);
    let (_, methods) = api.nip86(&admin, "supportedmethods", json!([])).await;
    assert_eq!(methods["result"].as_array().unwrap().len(), 20);
    let rpc = |m: &'static str, p: Value| {
        let api = &api;
        let admin = &admin;
        async move {
            let (status, body) = api.nip86(admin, m, p).await;
            assert_eq!(status, StatusCode::OK, "{m}: {body}");
            assert!(body.get("error").is_none(), "{m}: {body}");
            body["result"].clone()
        }
    };
    let sp = spammer.public_key().to_hex();
    assert_eq!(rpc("banpubkey", json!([sp, "spam"])).await, json!(true));
    assert_eq!(rpc("listbannedpubkeys", json!([])).await, json!([{"pubkey": sp, "reason": "spam"}]));
    let e = sign(&spammer, now(), 1, &[], "buy now");
    assert_eq!(
        c.publish(&e).await,
        json!(["OK", e.id.to_hex(), false, "blocked: this pubkey is banned from this relay"])
    );
    let rest = web()
        .post(relay.http_url("/api/v1/events"))
        .header("content-type", "application/json")
        .body(json!(e).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 403);
    assert_eq!(rpc("unbanpubkey", json!([sp])).await, json!(true));
    assert_eq!(c.publish(&e).await[2], true);
    // Events.
    assert_eq!(rpc("banevent", json!([doomed.id.to_hex(), "illegal"])).await, json!(true));
    assert_eq!(rpc("listbannedevents", json!([])).await, json!([{"id": doomed.id.to_hex(), "reason": "illegal"}]));
    let served = c.req_ids("all", vec![json!({"authors": [friend.public_key().to_hex()]})]).await;
    assert_eq!(served, vec![kept.id.to_hex()]);
    assert_eq!(c.publish(&doomed).await[3], "blocked: this event is banned from this relay");
    assert_eq!(rpc("allowevent", json!([doomed.id.to_hex()])).await, json!(true));
    assert_eq!(rpc("listeventsneedingmoderation", json!([])).await, json!([]));
    // Allow lists.
    assert_eq!(rpc("allowpubkey", json!([friend.public_key().to_hex(), "friend"])).await, json!(true));
    assert_eq!(
        rpc("listallowedpubkeys", json!([])).await,
        json!([{"pubkey": friend.public_key().to_hex(), "reason": "friend"}])
    );
    let outsider = sign(&keys(32), now(), 1, &[], "hi");
    assert_eq!(c.publish(&outsider).await[3], "restricted: only members of this relay may publish here");
    assert_eq!(rpc("unallowpubkey", json!([friend.public_key().to_hex()])).await, json!(true));
    assert_eq!(c.publish(&outsider).await[2], true);
    assert_eq!(rpc("allowkind", json!([1])).await, json!(true));
    assert_eq!(rpc("listallowedkinds", json!([])).await, json!([1]));
    let reaction = sign(&friend, now(), 7, &[], "+");
    assert_eq!(c.publish(&reaction).await[3], "blocked: kind 7 is not allowed on this relay");
    assert_eq!(rpc("disallowkind", json!([1])).await, json!(true));
    assert_eq!(c.publish(&reaction).await[2], true);
    // Relay information.
    assert_eq!(rpc("changerelayname", json!(["renamed"])).await, json!(true));
    assert_eq!(rpc("changerelaydescription", json!(["new description"])).await, json!(true));
    assert_eq!(rpc("changerelayicon", json!(["https://example.invalid/icon.png"])).await, json!(true));
    let info = relay.nip11().await;
    assert_eq!((info["name"].clone(), info["description"].clone()), (json!("renamed"), json!("new description")));
    assert_eq!(info["icon"], "https://example.invalid/icon.png");
    // IPs: the test client is 127.0.0.1.
    assert_eq!(rpc("blockip", json!(["127.0.0.1", "flood"])).await, json!(true));
    assert_eq!(rpc("listblockedips", json!([])).await, json!([{"ip": "127.0.0.1", "reason": "flood"}]));
    let refused = tokio_tungstenite::connect_async(relay.ws_url()).await;
    assert!(refused.is_err(), "a blocked IP could open a WebSocket");
    let rest = web_get(relay.http_url(&format!("/api/v1/events/{}", kept.id))).await.unwrap();
    assert_eq!(rest.status(), 403);
    assert_eq!(rpc("unblockip", json!(["127.0.0.1"])).await, json!(true));
    relay.connect().await;
    // Errors are reported in `error`.
    let (_, body) = api.nip86(&admin, "banpubkey", json!(["nope"])).await;
    assert_eq!(body, json!({"result": null, "error": "`nope` is not a hex pubkey or npub"}));
    let (_, body) = api.nip86(&admin, "frobnicate", json!([])).await;
    assert_eq!(body["error"], "unsupported method `frobnicate`");
    // The same through /admin/v1/rpc with the bearer token.
    let (status, body) =
        api.token(Method::POST, "/admin/v1/rpc", Some(json!({"method": "listallowedkinds", "params": []}))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": []})));
    // Every change is in the audit log, with its admin pubkey.
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit?limit=100", None).await;
    let actions: Vec<&str> =
        audit["entries"].as_array().unwrap().iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        [
            "unblockip",
            "blockip",
            "relayinfo",
            "relayinfo",
            "relayinfo",
            "disallowkind",
            "allowkind",
            "unallowpubkey",
            "allowpubkey",
            "allowevent",
            "banevent",
            "unbanpubkey",
            "banpubkey"
        ]
    );
    assert!(audit["entries"].as_array().unwrap().iter().all(|e| e["who"] == admin.public_key().to_hex()));
    assert_eq!(audit["entries"][12]["new"], "spam");
}

#[tokio::test]
async fn a_separate_admin_bind_moves_the_admin_surface_off_the_relay_port() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        c.admin.bind = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let on_admin_port = AdminApi::new(&relay);
    assert_eq!(on_admin_port.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::OK);
    let on_relay_port = AdminApi { base: format!("http://{}", relay.addr) };
    assert_eq!(on_relay_port.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::NOT_FOUND);
    // The relay itself is still served on its port.
    relay.connect().await;
}

#[tokio::test]
async fn admin_calls_do_not_bill_the_callers_quotas() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        c.limits.human.api_calls_per_min = 1;
    })
    .await;
    let api = AdminApi::new(&relay);
    for _ in 0..5 {
        assert_eq!(api.token(Method::GET, "/admin/v1/limits", None).await.0, StatusCode::OK);
    }
    let (_, usage) = api.token(Method::GET, "/admin/v1/usage/ip/127.0.0.1", None).await;
    assert_eq!(usage["limits"]["api_calls"]["used"], 0);
}

#[tokio::test]
async fn export_streams_a_snapshot_oldest_first_while_writes_go_on() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        generous(c);
    })
    .await;
    let mut client = relay.connect().await;
    let author = keys(7);
    let start = now() - 10_000;
    // Enough events for several chunks of the body.
    let mut events = Vec::new();
    for i in 0..600u64 {
        let kind = if i % 100 == 0 { 30023 } else { 1 };
        let d = format!("d{i}");
        let d_tag = ["d", d.as_str()];
        let tags: Vec<&[&str]> = if kind == 30023 { vec![&d_tag[..]] } else { vec![] };
        let e = sign(&author, start + i, kind, &tags, &format!("event {i} {}", "x".repeat(200)));
        assert_ok(&client.publish(&e).await, &e.id.to_hex(), true, "");
        events.push(e);
    }
    let url = |query: &str| format!("http://{}/admin/v1/export{query}", relay.addr);
    let http = web();
    let mut resp = http.get(url("")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    // After the snapshot: a new event and a deletion of the first one.
    let late = sign(&author, start + 5000, 1, &[], "after the export began");
    assert_ok(&client.publish(&late).await, &late.id.to_hex(), true, "");
    let deletion = sign(&author, start + 5001, 5, &[&["e", &events[1].id.to_hex()]], "");
    assert_ok(&client.publish(&deletion).await, &deletion.id.to_hex(), true, "");
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
    }
    let lines: Vec<String> = String::from_utf8(body).unwrap().lines().map(str::to_string).collect();
    let want: Vec<String> = events.iter().map(|e| serde_json::to_string(e).unwrap()).collect();
    assert_eq!(lines.len(), want.len());
    assert!(lines == want, "the export is the stored events as they were, oldest first");
    // Now the deletion and the late event are in; a filter picks from them.
    let filter = "%7B%22kinds%22%3A%5B5%2C30023%5D%7D"; // {"kinds":[5,30023]}
    let text = http.get(url(&format!("?filter={filter}"))).bearer_auth(TOKEN).send().await.unwrap().text().await;
    let kinds: Vec<u64> =
        text.unwrap().lines().map(|l| serde_json::from_str::<Value>(l).unwrap()["kind"].as_u64().unwrap()).collect();
    assert_eq!(kinds, vec![30023, 30023, 30023, 30023, 30023, 30023, 5]);
    let resp = http.get(url("?filter=%7B%22kinds")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::BAD_REQUEST);
    assert!(resp.json::<Value>().await.unwrap()["error"].as_str().unwrap().starts_with("filter: "));
    assert_eq!(http.get(url("")).send().await.unwrap().status(), StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn store_stats_count_live_and_dead_bytes() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        generous(c);
    })
    .await;
    let api = AdminApi::new(&relay);
    let bearer = format!("Bearer {TOKEN}");
    let (status, empty) = api.call(Method::GET, "/admin/v1/store", None, Some(&bearer)).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        (&empty["events"], &empty["live_bytes"], &empty["dead_bytes"], &empty["log_bytes"]),
        (&json!(0), &json!(0), &json!(0), &json!(0))
    );
    assert_eq!((&empty["log_generation"], &empty["last_compaction"]), (&json!(0), &Value::Null));
    let mut client = relay.connect().await;
    let author = keys(9);
    let old = sign(&author, now() - 10, 0, &[], &"o".repeat(3000));
    let new = sign(&author, now(), 0, &[], "short");
    assert_ok(&client.publish(&old).await, &old.id.to_hex(), true, "");
    let (_, one) = api.call(Method::GET, "/admin/v1/store", None, Some(&bearer)).await;
    assert_eq!(one["events"], 1);
    assert_eq!(one["dead_bytes"], 0, "{one}");
    assert_eq!(one["live_bytes"], one["log_bytes"], "{one}");
    assert!(one["live_bytes"].as_u64().unwrap() > 3000, "{one}");
    // The new version replaces the old one: its frame is dead space until a compaction.
    assert_ok(&client.publish(&new).await, &new.id.to_hex(), true, "");
    let (_, two) = api.call(Method::GET, "/admin/v1/store", None, Some(&bearer)).await;
    assert_eq!(two["events"], 1);
    assert!(two["dead_bytes"].as_u64().unwrap() >= one["live_bytes"].as_u64().unwrap(), "{one} {two}");
    assert_eq!(
        two["live_bytes"].as_u64().unwrap() + two["dead_bytes"].as_u64().unwrap(),
        two["log_bytes"].as_u64().unwrap()
    );
    assert!(two["live_bytes"].as_u64().unwrap() < 1000, "{two}");
    let (status, _) = api.call(Method::GET, "/admin/v1/store", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

/// Polls `GET /admin/v1/store` until the log reaches `generation` with no compaction running.
async fn store_at_generation(api: &AdminApi, generation: u64) -> Value {
    poll(&format!("a compaction to generation {generation}"), 2 * STEP, async || {
        let (_, stats) = api.token(Method::GET, "/admin/v1/store", None).await;
        if stats["log_generation"] == generation && stats["compacting"] == false {
            Ok(stats)
        } else {
            Err(stats.to_string())
        }
    })
    .await
}

#[tokio::test]
async fn the_relay_compacts_on_its_own_once_half_its_log_is_dead_and_when_asked() {
    let relay = TestRelay::start(|c| {
        with_admin(c);
        generous(c);
        c.storage.compact_min_mb = 0;
        c.storage.compact_dead_ratio = 0.5;
    })
    .await;
    let api = AdminApi::new(&relay);
    let mut client = relay.connect().await;
    let author = keys(9);
    let notes: Vec<_> = (0..3).map(|i| sign(&author, now() - 100 + i, 1, &[], &format!("note {i}"))).collect();
    for note in &notes {
        assert_ok(&client.publish(note).await, &note.id.to_hex(), true, "");
    }
    let old = sign(&author, now() - 10, 0, &[], &"o".repeat(3000));
    assert_ok(&client.publish(&old).await, &old.id.to_hex(), true, "");
    let (_, before) = api.token(Method::GET, "/admin/v1/store", None).await;
    assert_eq!((&before["log_generation"], &before["dead_bytes"]), (&json!(0), &json!(0)), "{before}");
    // The new version makes most of the log dead: a compaction follows by itself.
    let new = sign(&author, now(), 0, &[], "short");
    assert_ok(&client.publish(&new).await, &new.id.to_hex(), true, "");
    let after = store_at_generation(&api, 1).await;
    assert_eq!((&after["events"], &after["dead_bytes"]), (&json!(4), &json!(0)), "{after}");
    assert_eq!(after["live_bytes"], after["log_bytes"], "{after}");
    let done = &after["last_compaction"];
    assert!(done["after_bytes"].as_u64().unwrap() < done["before_bytes"].as_u64().unwrap(), "{after}");
    let mut want: Vec<String> = notes.iter().chain([&new]).map(|e| e.id.to_hex()).collect();
    want.sort();
    let mut got = client.req_ids("all", vec![json!({})]).await;
    got.sort();
    assert_eq!(got, want);

    // Asked for: 202, then the log's next generation; the request is audited.
    let (status, _) = api.call(Method::POST, "/admin/v1/store/compact", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = api.token(Method::POST, "/admin/v1/store/compact", None).await;
    assert_eq!((status, body), (StatusCode::ACCEPTED, json!({"compacting": true})));
    let again = store_at_generation(&api, 2).await;
    assert_eq!(again["events"], 4, "{again}");
    let (_, audit) = api.token(Method::GET, "/admin/v1/audit", None).await;
    assert_eq!(audit["entries"][0]["action"], "store.compact", "{audit}");
    // Writes go on after it.
    let later = sign(&author, now(), 1, &[], "later");
    assert_ok(&client.publish(&later).await, &later.id.to_hex(), true, "");
    let mut reader = relay.connect().await;
    assert_eq!(reader.req_ids("one", vec![json!({"ids": [later.id.to_hex()]})]).await, vec![later.id.to_hex()]);
}

/// The page's headers, checked on every file.
fn assert_page_headers(resp: &reqwest::Response, content_type: &str, what: &str) {
    let header = |name: &str| resp.headers().get(name).map(|v| v.to_str().unwrap().to_string());
    assert_eq!(header("content-type").as_deref(), Some(content_type), "{what}");
    assert_eq!(header("x-content-type-options").as_deref(), Some("nosniff"), "{what}");
    let csp = header("content-security-policy").unwrap_or_default();
    for directive in ["default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'"] {
        assert!(csp.split(';').any(|d| d.trim() == directive), "{what}: {directive} missing from {csp}");
    }
    assert!(!csp.contains("unsafe-inline") && !csp.contains("unsafe-eval"), "{what}: {csp}");
}

#[tokio::test]
async fn the_admin_page_is_served_with_its_headers_where_the_admin_api_is() {
    let relay = TestRelay::start(with_admin).await;
    let base = format!("http://{}", relay.addr);
    let http = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build().unwrap();
    let page = http.get(format!("{base}/admin/")).send().await.unwrap();
    assert_eq!(page.status(), StatusCode::OK);
    assert_page_headers(&page, "text/html; charset=utf-8", "/admin/");
    let html = page.text().await.unwrap();
    assert_eq!(html, std::fs::read_to_string("admin-ui/index.html").unwrap());
    // Every file of admin-ui/ is embedded and served as it is on disk (a file the page imports
    // that the binary lacks would break the page).
    let mut names: Vec<String> = std::fs::read_dir("admin-ui")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".html") || n.ends_with(".css") || n.ends_with(".js"))
        .collect();
    names.sort();
    assert!(names.len() >= 12, "{names:?}");
    for name in &names {
        let resp = http.get(format!("{base}/admin/{name}")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK, "{name}");
        let want = match name.rsplit('.').next().unwrap() {
            "html" => "text/html; charset=utf-8",
            "css" => "text/css; charset=utf-8",
            _ => "text/javascript; charset=utf-8",
        };
        assert_page_headers(&resp, want, name);
        assert_eq!(resp.bytes().await.unwrap(), std::fs::read(format!("admin-ui/{name}")).unwrap(), "{name}");
    }
    // `/admin` itself sends the browser to `/admin/`, where the page's relative links resolve.
    let bare = http.get(format!("{base}/admin")).send().await.unwrap();
    assert_eq!(bare.status(), StatusCode::PERMANENT_REDIRECT);
    assert_eq!(bare.headers()["location"], "/admin/");
    for missing in ["/admin/nope.js", "/admin/tests/admin.spec.js", "/admin/..%2FCargo.toml", "/admin/v1/nope"] {
        let resp = http.get(format!("{base}{missing}")).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{missing}");
        assert_eq!(resp.json::<Value>().await.unwrap(), json!({"error": "not found"}), "{missing}");
    }
    // The API the page's header and overview read.
    let api = AdminApi::new(&relay);
    let (status, about) = api.token(Method::GET, "/admin/v1/relay", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!((&about["software"], &about["version"]), (&json!("hearth"), &json!(env!("CARGO_PKG_VERSION"))));
    assert!(about["uptime_secs"].as_u64().unwrap() < 600 && about["started_at"].as_u64().unwrap() <= now());
    assert!(about["name"].is_string() && about["description"].is_string() && about["icon"].is_string(), "{about}");
    assert_eq!(api.call(Method::GET, "/admin/v1/relay", None, None).await.0, StatusCode::UNAUTHORIZED);
    let (_, renamed) = api
        .token(Method::POST, "/admin/v1/rpc", Some(json!({"method": "changerelayname", "params": ["the den"]})))
        .await;
    assert_eq!(renamed["result"], true);
    assert_eq!(api.token(Method::GET, "/admin/v1/relay", None).await.1["name"], "the den");
    // Who may write and read, as the mode and the member list make it: the first member of a
    // public relay restricts its writes.
    assert_eq!(about["relay_pubkey"], relay.nip11().await["self"]);
    let access =
        json!({"mode": "public", "members": 0, "writes": "anyone", "reads": "anyone", "publish_members": false});
    assert_eq!(about["access"], access);
    let member = keys(40).public_key().to_hex();
    assert_eq!(
        api.token(Method::PUT, &format!("/admin/v1/members/{}", member.to_uppercase()), Some(json!({}))).await.0,
        StatusCode::OK
    );
    let access =
        json!({"mode": "public", "members": 1, "writes": "members", "reads": "anyone", "publish_members": false});
    assert_eq!(api.token(Method::GET, "/admin/v1/relay", None).await.1["access"], access);
    let listed = api.token(Method::GET, "/admin/v1/members", None).await.1;
    assert_eq!(listed["members"][0]["pubkey"], json!(member), "an upper-case hex key is the same key");
}

#[tokio::test]
async fn the_admin_page_is_not_served_while_the_admin_api_is_off_nor_off_its_bind() {
    let off = TestRelay::start(generous).await;
    for path in ["/admin/", "/admin/app.js", "/admin"] {
        let resp = web_get(format!("http://{}{path}", off.addr)).await.unwrap();
        assert_eq!(resp.status(), StatusCode::NOT_FOUND, "{path}");
    }
    let moved = TestRelay::start(|c| {
        with_admin(c);
        c.admin.bind = Some("127.0.0.1:0".parse().unwrap());
    })
    .await;
    let on_relay_port = web_get(format!("http://{}/admin/", moved.addr)).await.unwrap();
    assert_eq!(on_relay_port.status(), StatusCode::NOT_FOUND);
    let on_admin_port = web_get(format!("http://{}/admin/", moved.admin_addr.unwrap())).await.unwrap();
    assert_eq!(on_admin_port.status(), StatusCode::OK);
    assert_page_headers(&on_admin_port, "text/html; charset=utf-8", "on admin.bind");
}
