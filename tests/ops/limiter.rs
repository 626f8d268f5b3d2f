//! The shared admission limiter through the real server, with the limiter's clock frozen and
//! advanced by hand (no sleeps).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::common::*;
use hearth::config::LimitsConfig;
use hearth::limiter::Principal;
use serde_json::json;

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

fn ws_refusal(secs: u64) -> String {
    format!("rate-limited: quota exceeded (ws_events); retry in {secs}s")
}

fn reqs_refusal(secs: u64) -> String {
    format!("rate-limited: quota exceeded (ws_reqs); retry in {secs}s")
}

#[tokio::test]
async fn ten_reqs_and_an_event_within_budget_are_judged_normally() {
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    for i in 0..10 {
        c.send(json!(["REQ", format!("r{i}"), {"limit": 1}])).await;
    }
    let e = sign(&keys(1), now(), 1, &[], "within budget");
    c.send(json!(["EVENT", e])).await;
    // Every REQ matches the event: each subscription gets it exactly once, live or stored, and
    // its order against the OK and the EOSEs is the relay's to choose.
    let (mut eose, mut ok, mut delivered) = (0, None, Vec::new());
    while eose < 10 || ok.is_none() || delivered.len() < 10 {
        let frame = c.recv().await;
        match frame[0].as_str().unwrap() {
            "EOSE" => eose += 1,
            "OK" => ok = Some(frame),
            "EVENT" => {
                assert_eq!(frame[2]["id"], json!(e.id.to_hex()), "{frame}");
                delivered.push(frame[1].as_str().unwrap().to_string());
            }
            _ => panic!("unexpected {frame}"),
        }
    }
    c.assert_nothing_before_barrier("a frame too many").await;
    assert_eq!(eose, 10);
    assert_eq!(ok.unwrap(), json!(["OK", e.id.to_hex(), true, ""]));
    delivered.sort();
    delivered.dedup();
    assert_eq!(delivered.len(), 10, "a subscription got the event twice: {delivered:?}");
}

#[tokio::test]
async fn sixty_reqs_past_their_budget_and_an_event_get_correlated_answers_and_no_notice() {
    // Reads of 5 a second over 10 s: a burst of 50.
    let relay = TestRelay::start(|c| c.limits.human.ws_reqs_per_sec = 5).await;
    let mut c = relay.connect().await;
    for i in 0..60 {
        c.send(json!(["REQ", format!("r{i}"), {"kinds": [7]}])).await;
    }
    let e = sign(&keys(2), now(), 1, &[], "on its own budget");
    c.send(json!(["EVENT", e])).await;
    let mut frames = Vec::new();
    for _ in 0..61 {
        frames.push(c.recv().await);
    }
    c.assert_nothing_before_barrier("a frame too many").await;
    for i in 0..50 {
        assert!(frames.contains(&json!(["EOSE", format!("r{i}")])), "r{i} was not served");
    }
    for i in 50..60 {
        assert!(frames.contains(&json!(["CLOSED", format!("r{i}"), reqs_refusal(1)])), "r{i}: {frames:?}");
    }
    assert!(frames.contains(&json!(["OK", e.id.to_hex(), true, ""])));
    assert!(frames.iter().all(|f| f[0] != "NOTICE"));
    // Refused REQs created no subscription.
    relay.clock.advance(Duration::from_secs(60));
    let mut other = relay.connect().await;
    assert_eq!(other.req("check", vec![json!({})]).await.len(), 1);
    let live = sign(&keys(2), now(), 7, &[], "live");
    assert_ok(&other.publish(&live).await, &live.id.to_hex(), true, "");
    let mut subs = Vec::new();
    for _ in 0..50 {
        let f = c.recv().await;
        assert_eq!(f[0], "EVENT");
        subs.push(f[1].as_str().unwrap().to_string());
    }
    c.assert_nothing_before_barrier("a refused REQ got a live event").await;
    subs.sort();
    subs.dedup();
    assert_eq!(subs.len(), 50);
}

#[tokio::test]
async fn malformed_frames_are_billed_too_and_refused_in_their_own_shape() {
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    for _ in 0..50 {
        c.send_text("{garbage").await;
        assert!(c.recv().await[1].as_str().unwrap().starts_with("invalid: "));
    }
    c.send_text("{garbage").await;
    assert_eq!(c.recv().await, json!(["NOTICE", ws_refusal(1)]));
    c.send_text(r#"["EVENT",{"id":"abc"}]"#).await;
    assert_eq!(c.recv().await, json!(["OK", "abc", false, ws_refusal(1)]));
    c.send_text(r#"["REQ","s",{"ids":["nothex"]}]"#).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "s", ws_refusal(1)]));
}

#[tokio::test]
async fn ephemeral_events_bill_ws_events_but_not_messages() {
    let relay = TestRelay::start(|c| c.limits.human.messages_per_min = 2).await;
    let mut c = relay.connect().await;
    for i in 0..5 {
        let e = sign(&keys(3), now(), 20001, &[], &format!("typing {i}"));
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    }
    let usage = relay.limiter.usage(&Principal::Ip(LOCALHOST)).await;
    assert_eq!(usage.limits["messages"].used, 0);
    assert_eq!(usage.limits["ws_events"].used, 5);
    for i in 0..2 {
        let e = sign(&keys(3), now(), 1, &[], &format!("durable {i}"));
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    }
    let third = sign(&keys(3), now(), 1, &[], "durable 2");
    assert_eq!(
        c.publish(&third).await,
        json!(["OK", third.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in 30s"])
    );
    // Ephemeral still passes while messages is exhausted.
    let e = sign(&keys(3), now(), 20001, &[], "still typing");
    assert_eq!(c.publish(&e).await[2], true);
}

#[tokio::test]
async fn resending_after_the_hinted_wait_succeeds_and_never_stores_twice() {
    let relay = TestRelay::start(|c| c.limits.human.messages_per_min = 1).await;
    let mut c = relay.connect().await;
    let first = sign(&keys(4), now(), 1, &[], "first");
    let second = sign(&keys(4), now(), 1, &[], "second");
    assert_eq!(c.publish(&first).await[2], true);
    let refused = c.publish(&second).await;
    assert_eq!(
        refused,
        json!(["OK", second.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in 60s"])
    );
    // One second short of the hint is still refused…
    relay.clock.advance(Duration::from_secs(59));
    assert_eq!(c.publish(&second).await[2], false);
    // …the hinted wait (counted from the first refusal) is enough.
    relay.clock.advance(Duration::from_secs(1));
    assert_eq!(c.publish(&second).await, json!(["OK", second.id.to_hex(), true, ""]));
    // A resend of a stored event is a duplicate, and is not billed to messages.
    assert_eq!(c.publish(&first).await, json!(["OK", first.id.to_hex(), true, "duplicate: already have this event"]));
    assert_eq!(c.req("all", vec![json!({})]).await.len(), 2);
}

#[tokio::test]
async fn a_limit_changed_at_runtime_applies_to_the_next_frame_of_an_open_connection() {
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    c.send(json!(["COUNT", "a", {}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "a", {"count": 0}]));
    let mut tight = LimitsConfig::default();
    tight.human.ws_reqs_per_sec = 1;
    tight.human.ws_reqs_burst_window_secs = 1;
    relay.limiter.set_limits(tight.clone());
    c.send(json!(["COUNT", "b", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "b", reqs_refusal(1)]));
    tight.human.ws_reqs_per_sec = 1000;
    relay.limiter.set_limits(tight);
    c.send(json!(["COUNT", "c", {}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "c", {"count": 0}]));
}

#[tokio::test]
async fn close_succeeds_while_over_quota_and_auth_waits_for_the_ips_quota() {
    let relay = TestRelay::start(|c| {
        c.limits.human.ws_events_per_sec = 1;
        c.limits.human.ws_burst_window_secs = 1;
        c.limits.human.ws_reqs_per_sec = 1;
        c.limits.human.ws_reqs_burst_window_secs = 1;
    })
    .await;
    let mut c = relay.connect().await;
    assert!(c.req("s", vec![json!({"kinds": [1]})]).await.is_empty());
    c.send(json!(["COUNT", "over", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "over", reqs_refusal(1)]));
    c.send(json!(["CLOSE", "s"])).await;
    let e = sign(&keys(6), now(), 1, &[], "spends the writes");
    assert_eq!(c.publish(&e).await[2], true);
    // AUTH bills the IP's writes, which are over their quota: a fresh key is no way around it.
    let k = keys(5);
    let ok = c.auth(&k, &relay.ws_url()).await;
    assert_eq!((&ok[2], &ok[3]), (&json!(false), &json!(ws_refusal(1))), "{ok}");
    // After the wait it says, the same AUTH is admitted.
    relay.clock.advance(Duration::from_secs(1));
    let ok = c.auth(&k, &relay.ws_url()).await;
    assert_eq!(ok[2], true, "{ok}");
    // CLOSE took effect: a new event reaches no subscription of this connection.
    let mut other = relay.connect().await;
    other.publish(&sign(&keys(6), now(), 1, &[], "after close")).await;
    c.assert_nothing_before_barrier("a closed subscription got a live event").await;
}

async fn counts_admitted(c: &mut Client, n: usize) -> Vec<bool> {
    let mut out = Vec::new();
    for i in 0..n {
        c.send(json!(["COUNT", format!("q{i}"), {}])).await;
        out.push(c.recv().await[0] == "COUNT");
    }
    out
}

#[tokio::test]
async fn one_pubkey_on_two_connections_shares_a_budget_two_pubkeys_on_one_ip_do_not() {
    let relay = TestRelay::start(|c| {
        c.limits.human.ws_reqs_per_sec = 1;
        c.limits.human.ws_reqs_burst_window_secs = 4;
    })
    .await;
    let (alice, bob) = (keys(7), keys(8));
    let mut a1 = relay.connect().await;
    let mut a2 = relay.connect().await;
    let mut b = relay.connect().await;
    for (c, k) in [(&mut a1, &alice), (&mut a2, &alice), (&mut b, &bob)] {
        assert_eq!(c.auth(k, &relay.ws_url()).await[2], true);
    }
    assert_eq!(counts_admitted(&mut a1, 3).await, [true, true, true]);
    assert_eq!(counts_admitted(&mut a2, 2).await, [true, false]);
    assert_eq!(counts_admitted(&mut b, 4).await, [true, true, true, true]);
    let usage = relay.limiter.usage(&Principal::Pubkey(alice.public_key())).await;
    assert_eq!(usage.limits["ws_reqs"].used, 4);
    assert_eq!(usage.refusals["ws_reqs"], 1);
}

#[tokio::test]
async fn agents_have_their_own_tier() {
    let agent = keys(9);
    let relay = TestRelay::start(|c| {
        c.limits.agent.ws_reqs_per_sec = 1;
        c.limits.agent.ws_reqs_burst_window_secs = 2;
        c.limits.agent_pubkeys = vec![agent.public_key()];
    })
    .await;
    let mut c = relay.connect().await;
    assert_eq!(c.auth(&agent, &relay.ws_url()).await[2], true);
    assert_eq!(counts_admitted(&mut c, 3).await, [true, true, false]);
    let mut human = relay.connect().await;
    assert_eq!(counts_admitted(&mut human, 3).await, [true, true, true]);
}

// NIP-42

#[tokio::test]
async fn auth_failures_are_answered_and_change_nothing() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(10);
    let url = relay.ws_url();
    let cases: Vec<(Vec<Vec<String>>, u64, u16, &str)> = vec![
        (
            vec![vec!["relay".into(), url.clone()], vec!["challenge".into(), "wrong".into()]],
            now(),
            22242,
            "auth-required: the challenge tag",
        ),
        (
            vec![vec!["relay".into(), "ws://elsewhere:1/".into()], vec!["challenge".into(), c.challenge.clone()]],
            now(),
            22242,
            "auth-required: the relay tag",
        ),
        (
            vec![vec!["relay".into(), url.clone()], vec!["challenge".into(), c.challenge.clone()]],
            now() - 1800,
            22242,
            "auth-required: created_at",
        ),
        (
            vec![vec!["relay".into(), url.clone()], vec!["challenge".into(), c.challenge.clone()]],
            now(),
            1,
            "invalid: AUTH needs a kind 22242",
        ),
    ];
    for (tags, at, kind, prefix) in cases {
        let e = k.sign(hearth::protocol::Timestamp(at), hearth::protocol::Kind(kind), tags, "");
        c.send(json!(["AUTH", e])).await;
        assert_ok(&c.recv().await, &e.id.to_hex(), false, prefix);
    }
    let mut forged = k.sign(
        hearth::protocol::Timestamp(now()),
        hearth::protocol::Kind(22242),
        vec![vec!["relay".into(), url.clone()], vec!["challenge".into(), c.challenge.clone()]],
        "",
    );
    forged.sig.0[5] ^= 1;
    c.send(json!(["AUTH", forged])).await;
    assert_ok(&c.recv().await, &forged.id.to_hex(), false, "invalid: signature does not verify");
    // Still unauthenticated: the author's protected event is refused.
    let protected = sign(&k, now(), 1, &[&["-"]], "");
    assert_ok(&c.publish(&protected).await, &protected.id.to_hex(), false, "auth-required: ");
}

#[tokio::test]
async fn protected_events_need_auth_as_their_author() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let (author, other) = (keys(11), keys(12));
    assert_eq!(c.auth(&other, &relay.ws_url()).await[2], true);
    let e = sign(&author, now(), 1, &[&["-"]], "mine");
    assert_eq!(
        c.publish(&e).await,
        json!(["OK", e.id.to_hex(), false, "blocked: this event may only be published by its author"])
    );
    assert_eq!(c.auth(&author, &relay.ws_url()).await[2], true);
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    // AUTH events themselves are never stored or broadcast.
    assert!(c.req("auth", vec![json!({"kinds": [22242]})]).await.is_empty());
}

#[tokio::test]
async fn auth_required_refuses_until_authenticated_and_members_restrict_authors() {
    let member = keys(13);
    let relay = TestRelay::start(|c| {
        generous(c);
        c.auth.required = true;
        c.auth.members = vec![member.public_key()];
    })
    .await;
    let mut c = relay.connect().await;
    let required = "auth-required: this relay requires authentication; answer the AUTH challenge";
    c.send(json!(["REQ", "s", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "s", required]));
    c.send(json!(["COUNT", "n", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "n", required]));
    let e = sign(&member, now(), 1, &[], "hi");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), false, required]));
    assert_eq!(c.auth(&keys(14), &relay.ws_url()).await[2], true);
    assert!(c.req("s", vec![json!({"kinds": [1]})]).await.is_empty());
    let outsider = sign(&keys(14), now(), 1, &[], "let me in");
    assert_eq!(
        c.publish(&outsider).await,
        json!(["OK", outsider.id.to_hex(), false, "restricted: only members of this relay may publish here"])
    );
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    let info = relay.nip11().await;
    assert_eq!(info["limitation"]["auth_required"], true);
    assert_eq!(info["limitation"]["restricted_writes"], true);
}

#[tokio::test]
async fn a_disabled_limiter_refuses_no_quota() {
    let relay = TestRelay::start(|c| {
        c.limits.enabled = false;
        c.limitation.max_subscriptions = 100;
    })
    .await;
    let mut c = relay.connect().await;
    // Twice the ws_events burst of 50, and more events than the messages burst of 120 allows.
    for i in 0..100 {
        c.send(json!(["REQ", format!("r{i}"), {"kinds": [7], "limit": 1}])).await;
    }
    for _ in 0..100 {
        assert_eq!(c.recv().await[0], "EOSE");
    }
    for i in 0..130 {
        let e = sign(&keys(3), now(), 1, &[], &format!("note {i}"));
        assert_ok(&c.publish(&e).await, &e.id.to_hex(), true, "");
    }
    assert_eq!(relay.limiter.usage(&Principal::Ip(LOCALHOST)).await.refusals.values().sum::<u64>(), 0);
}
