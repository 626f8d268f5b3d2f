//! Unit tests of the client rules: the rate-limit gate, the one resend, pacing.

use serde_json::{Value, json};

use super::*;
use crate::protocol::{Kind, Tier};

/// The next frame as the WebSocket session would send it.
fn tx(c: &mut Core, now: Instant) -> Option<String> {
    c.poll_transmit(now).map(|m| serde_json::to_string(&m).unwrap())
}

fn event(n: u8) -> Event {
    Keys::test(7).sign(Timestamp(1000 + u64::from(n)), Kind(1), vec![], &format!("e{n}"))
}

fn ok(e: &Event, accepted: bool, message: &str) -> String {
    json!(["OK", e.id, accepted, message]).to_string()
}

fn core(timeout_secs: u64) -> Core {
    Core::new("ws://relay/", None, Duration::from_secs(timeout_secs), None)
}

fn is_event_frame(frame: &Option<String>, e: &Event) -> bool {
    frame.as_deref().is_some_and(|f| f.starts_with("[\"EVENT\"") && f.contains(&e.id.to_hex()))
}

/// A core with `timeout_secs` that has published `event(n)` at `t0` and sent its frame.
fn sent(timeout_secs: u64, n: u8) -> (Instant, Core, Event) {
    let t0 = Instant::now();
    let mut c = core(timeout_secs);
    let e = event(n);
    c.publish(e.clone());
    assert!(is_event_frame(&tx(&mut c, t0), &e));
    (t0, c, e)
}

const LIMITED: &str = "rate-limited: quota exceeded (messages); retry in 3s";

#[test]
fn retry_hints_are_parsed_only_from_rate_limited_messages() {
    assert_eq!(retry_hint(LIMITED), Some(Duration::from_secs(3)));
    assert_eq!(retry_hint("rate-limited: relay busy (unavailable); retry in 1s"), Some(Duration::from_secs(1)));
    assert_eq!(retry_hint("rate-limited: slow down"), None);
    assert_eq!(retry_hint("invalid: retry in 3s"), None);
}

#[test]
fn a_rate_limited_publish_is_resent_once_the_gate_clears_and_succeeds() {
    let (t0, mut c, e) = sent(60, 1);
    c.on_frame(&ok(&e, false, LIMITED), t0);
    assert_eq!(c.gate(), Some(t0 + Duration::from_secs(3)));
    assert_eq!(c.next_wakeup(t0), Some(t0 + Duration::from_secs(3)));
    assert_eq!(tx(&mut c, t0 + Duration::from_millis(2999)), None);
    assert!(is_event_frame(&tx(&mut c, t0 + Duration::from_secs(3)), &e));
    assert_eq!(c.poll_update(), None);
    c.on_frame(&ok(&e, true, ""), t0 + Duration::from_secs(3));
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Ok(String::new()))));
    assert!(c.idle());
}

#[test]
fn a_second_refusal_fails_fast_with_the_relays_reason() {
    let (t0, mut c, e) = sent(60, 2);
    c.on_frame(&ok(&e, false, LIMITED), t0);
    let t1 = t0 + Duration::from_secs(3);
    assert!(is_event_frame(&tx(&mut c, t1), &e));
    c.on_frame(&ok(&e, false, LIMITED), t1);
    // Failed at once: the total wait was the one gate, 3 s.
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Err(PublishError::Refused(LIMITED.into())))));
    assert_eq!(tx(&mut c, t1 + Duration::from_secs(10)), None);
}

#[test]
fn a_gate_as_long_as_the_timeout_fails_the_publish_at_once() {
    let (t0, mut c, e) = sent(10, 3);
    let long = "rate-limited: quota exceeded (messages); retry in 10s";
    c.on_frame(&ok(&e, false, long), t0);
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Err(PublishError::Refused(long.into())))));
    // The gate still protects later frames.
    assert_eq!(c.gate(), Some(t0 + Duration::from_secs(10)));
}

#[test]
fn other_refusals_fail_at_once_without_a_resend() {
    let (t0, mut c, e) = sent(60, 4);
    c.on_frame(&ok(&e, false, "blocked: this pubkey is banned"), t0);
    assert_eq!(
        c.poll_update(),
        Some(Update::Published(e.id, Err(PublishError::Refused("blocked: this pubkey is banned".into()))))
    );
    assert_eq!(c.gate(), None);
    assert_eq!(tx(&mut c, t0), None);
}

#[test]
fn an_uncorrelated_notice_arms_the_gate_but_never_resends() {
    let t0 = Instant::now();
    let mut c = core(60);
    let (e1, e2) = (event(5), event(6));
    c.publish(e1.clone());
    assert!(is_event_frame(&tx(&mut c, t0), &e1));
    c.on_frame(&json!(["NOTICE", "rate-limited: quota exceeded (ws_events); retry in 2s"]).to_string(), t0);
    c.publish(e2.clone());
    assert_eq!(tx(&mut c, t0 + Duration::from_secs(1)), None);
    // After the gate only the new frame goes out; e1 is not sent again.
    let t2 = t0 + Duration::from_secs(2);
    assert!(is_event_frame(&tx(&mut c, t2), &e2));
    assert_eq!(tx(&mut c, t2), None);
}

#[test]
fn a_reset_during_the_wait_cancels_the_resend() {
    let (t0, mut c, e) = sent(60, 7);
    c.on_frame(&ok(&e, false, LIMITED), t0);
    c.on_disconnect("connection reset");
    assert_eq!(
        c.poll_update(),
        Some(Update::Published(e.id, Err(PublishError::Disconnected("connection reset".into()))))
    );
    assert_eq!(tx(&mut c, t0 + Duration::from_secs(5)), None);
}

#[test]
fn a_timeout_during_the_wait_cancels_the_resend() {
    let (t0, mut c, e) = sent(5, 8);
    c.on_frame(&ok(&e, false, "rate-limited: quota exceeded (messages); retry in 4s"), t0);
    c.on_tick(t0 + Duration::from_secs(5));
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Err(PublishError::Timeout))));
    assert_eq!(tx(&mut c, t0 + Duration::from_secs(5)), None);
}

#[test]
fn a_rate_limited_req_is_reissued_first_once_the_gate_clears() {
    let t0 = Instant::now();
    let mut c = core(60);
    let f: Filter = serde_json::from_str("{}").unwrap();
    c.req("a", vec![f.clone()]);
    c.req("b", vec![f]);
    assert!(tx(&mut c, t0).unwrap().starts_with("[\"REQ\",\"a\""));
    c.on_frame(&json!(["CLOSED", "a", "rate-limited: quota exceeded (ws_events); retry in 1s"]).to_string(), t0);
    assert_eq!(c.poll_update(), None);
    assert_eq!(tx(&mut c, t0), None);
    let t1 = t0 + Duration::from_secs(1);
    assert!(tx(&mut c, t1).unwrap().starts_with("[\"REQ\",\"a\""));
    assert!(tx(&mut c, t1).unwrap().starts_with("[\"REQ\",\"b\""));
    c.on_frame(&json!(["CLOSED", "b", "error: too many"]).to_string(), t1);
    assert_eq!(c.poll_update(), Some(Update::Closed("b".into(), "error: too many".into())));
}

#[test]
fn pacing_spreads_frames_at_the_advertised_rate() {
    let t0 = Instant::now();
    let mut c = Core::new("ws://relay/", None, Duration::from_secs(60), Some(Pace { per_sec: 10.0, burst: 2.0 }));
    let f: Filter = serde_json::from_str("{}").unwrap();
    for i in 0..4 {
        c.req(&format!("s{i}"), vec![f.clone()]);
    }
    assert!(tx(&mut c, t0).is_some());
    assert!(tx(&mut c, t0).is_some());
    assert_eq!(tx(&mut c, t0), None);
    assert_eq!(c.next_wakeup(t0), Some(t0 + Duration::from_millis(100)));
    assert!(tx(&mut c, t0 + Duration::from_millis(100)).is_some());
    assert_eq!(tx(&mut c, t0 + Duration::from_millis(150)), None);
}

#[test]
fn auth_challenges_are_answered_without_waiting_for_the_gate() {
    let t0 = Instant::now();
    let keys = Keys::test(9);
    let mut c = Core::new("ws://relay/", Some(keys.clone()), Duration::from_secs(60), None);
    c.on_frame(&json!(["NOTICE", "rate-limited: quota exceeded (ws_events); retry in 5s"]).to_string(), t0);
    c.on_frame(&json!(["AUTH", "chal"]).to_string(), t0);
    let auth: Value = serde_json::from_str(&tx(&mut c, t0).unwrap()).unwrap();
    assert_eq!(auth[0], "AUTH");
    assert_eq!(auth[1]["kind"], 22242);
    assert_eq!(auth[1]["pubkey"], keys.public_key().to_hex());
    assert_eq!(auth[1]["tags"], json!([["relay", "ws://relay/"], ["challenge", "chal"]]));
}

#[test]
fn a_read_refused_again_after_its_wait_is_closed_with_the_relays_reason() {
    let t0 = Instant::now();
    let mut c = core(60);
    c.count("n", vec![serde_json::from_str("{}").unwrap()]);
    assert!(tx(&mut c, t0).unwrap().starts_with("[\"COUNT\",\"n\""));
    let limited = |wait| Reply::Limited {
        target: Target::Sub("n".into()),
        message: "rate-limited: quota exceeded (api_calls); retry in 1s".into(),
        wait,
    };
    c.on_reply(limited(Duration::from_secs(1)), t0);
    assert_eq!(c.poll_update(), None);
    let t1 = t0 + Duration::from_secs(1);
    assert!(tx(&mut c, t1).unwrap().starts_with("[\"COUNT\",\"n\""));
    c.on_reply(limited(Duration::from_secs(1)), t1);
    assert_eq!(
        c.poll_update(),
        Some(Update::Closed("n".into(), "rate-limited: quota exceeded (api_calls); retry in 1s".into()))
    );
    assert_eq!(tx(&mut c, t1 + Duration::from_secs(2)), None);
    let p = c.progress();
    assert_eq!((p.sent, p.limited, p.refused, p.gate_waits), (2, 2, 1, 2));
}

#[test]
fn refusals_inside_one_gate_window_count_as_one_wait() {
    let t0 = Instant::now();
    let mut c = core(60);
    let (e1, e2) = (event(10), event(11));
    c.publish(e1.clone());
    c.publish(e2.clone());
    assert!(is_event_frame(&tx(&mut c, t0), &e1));
    assert!(is_event_frame(&tx(&mut c, t0), &e2));
    c.on_frame(&ok(&e1, false, LIMITED), t0);
    c.on_frame(&ok(&e2, false, LIMITED), t0 + Duration::from_millis(5));
    let p = c.progress();
    assert_eq!((p.limited, p.gate_waits), (2, 1));
    assert_eq!(p.gate_until, Some(t0 + Duration::from_millis(3005)));
    // Both go back to the head of the queue, the later refusal first.
    let t1 = t0 + Duration::from_secs(4);
    assert!(is_event_frame(&tx(&mut c, t1), &e2));
    assert!(is_event_frame(&tx(&mut c, t1), &e1));
    c.on_frame(&ok(&e1, true, ""), t1);
    c.on_frame(&ok(&e2, true, ""), t1);
    assert_eq!(c.progress().accepted, 2);
    assert!(c.idle());
}

#[test]
fn the_publish_timeout_runs_from_the_first_send_not_from_the_queue() {
    let t0 = Instant::now();
    let mut c = Core::new("ws://relay/", None, Duration::from_secs(5), Some(Pace { per_sec: 0.1, burst: 1.0 }));
    let (e1, e2) = (event(12), event(13));
    c.publish(e1.clone());
    c.publish(e2.clone());
    assert!(is_event_frame(&tx(&mut c, t0), &e1));
    c.on_frame(&ok(&e1, true, ""), t0);
    // e2 waits 10 s for its turn, longer than the timeout, and is still sent.
    c.on_tick(t0 + Duration::from_secs(9));
    assert_eq!(c.poll_update(), Some(Update::Published(e1.id, Ok(String::new()))));
    assert_eq!(c.poll_update(), None);
    let t1 = t0 + Duration::from_secs(10);
    assert!(is_event_frame(&tx(&mut c, t1), &e2));
    c.on_tick(t1 + Duration::from_secs(5));
    assert_eq!(c.poll_update(), Some(Update::Published(e2.id, Err(PublishError::Timeout))));
}

#[test]
fn with_keys_requests_wait_for_the_auth_answer_or_the_hold() {
    let t0 = Instant::now();
    let keys = Keys::test(9);
    let mut c = Core::new("ws://relay/", Some(keys), Duration::from_secs(60), None);
    c.hold_for_auth(t0 + Duration::from_secs(2));
    let e = event(14);
    c.publish(e.clone());
    assert_eq!(tx(&mut c, t0), None);
    assert_eq!(c.next_wakeup(t0), Some(t0 + Duration::from_secs(2)));
    c.on_frame(&json!(["AUTH", "chal"]).to_string(), t0);
    let auth: Value = serde_json::from_str(&tx(&mut c, t0).unwrap()).unwrap();
    assert_eq!(tx(&mut c, t0), None, "the EVENT waits for the relay's OK to the AUTH");
    c.on_frame(&json!(["OK", auth[1]["id"], true, ""]).to_string(), t0);
    assert!(is_event_frame(&tx(&mut c, t0), &e));
    // The AUTH's OK is not a publish's.
    assert_eq!(c.poll_update(), None);

    // A refused AUTH ends the hold too, behind the gate it names.
    let mut c = Core::new("ws://relay/", Some(Keys::test(9)), Duration::from_secs(60), None);
    c.hold_for_auth(t0 + Duration::from_secs(2));
    c.publish(e.clone());
    c.on_frame(&json!(["AUTH", "chal"]).to_string(), t0);
    let auth: Value = serde_json::from_str(&tx(&mut c, t0).unwrap()).unwrap();
    let limited = "rate-limited: quota exceeded (ws_events); retry in 1s";
    c.on_frame(&json!(["OK", auth[1]["id"], false, limited]).to_string(), t0);
    assert_eq!(tx(&mut c, t0), None);
    assert!(is_event_frame(&tx(&mut c, t0 + Duration::from_secs(1)), &e));

    // A relay that sends no challenge costs the hold once.
    let mut c = core(60);
    c.hold_for_auth(t0 + Duration::from_secs(2));
    c.publish(e.clone());
    assert_eq!(tx(&mut c, t0 + Duration::from_millis(1999)), None);
    assert!(is_event_frame(&tx(&mut c, t0 + Duration::from_secs(2)), &e));
}

#[test]
fn the_advertised_pace_is_the_tiers_under_the_ip_ceiling() {
    let doc = json!({"hearth_limits": {
        "human": {"ws_events_per_sec": 10, "ws_burst_window_secs": 5, "api_calls_per_min": 60},
        "agent": {"ws_events_per_sec": 100, "ws_burst_window_secs": 5, "api_calls_per_min": 1200},
        "ip": {"ws_events_per_sec": 40, "ws_burst_window_secs": 5, "api_calls_per_min": 240},
    }});
    let pace = |tier, transport| Pace::advertised(&doc, tier, transport).map(|p| (p.per_sec, p.burst));
    assert_eq!(pace(Tier::Human, Transport::Rest), Some((0.9, 59.0)));
    assert_eq!(pace(Tier::Human, Transport::WebSocket), Some((9.0, 49.0)));
    // The agent tier is above the ceiling every request of the address is billed to as well.
    assert_eq!(pace(Tier::Agent, Transport::Rest), Some((4.0 * 0.9, 239.0)));
    assert_eq!(pace(Tier::Agent, Transport::WebSocket), Some((36.0, 199.0)));
    // A relay that advertises no limits (or has its limiter off) is not paced.
    assert_eq!(Pace::advertised(&json!({"name": "x"}), Tier::Human, Transport::Rest).map(|p| p.burst), None);
    // Nor are reads apart from writes on a relay that bills them with the writes.
    assert_eq!(pace(Tier::Human, Transport::WebSocketReads), None);
    let mut doc = doc;
    doc["hearth_limits"]["human"]["ws_reqs_per_sec"] = json!(10);
    doc["hearth_limits"]["human"]["ws_reqs_burst_window_secs"] = json!(10);
    doc["hearth_limits"]["ip"]["ws_reqs_per_sec"] = json!(40);
    doc["hearth_limits"]["ip"]["ws_reqs_burst_window_secs"] = json!(10);
    assert_eq!(
        Pace::advertised(&doc, Tier::Human, Transport::WebSocketReads).map(|p| (p.per_sec, p.burst)),
        Some((9.0, 99.0))
    );
}

/// A core whose writes are paced at `writes` and whose reads have a lane of their own at `reads`.
fn split(writes: Pace, reads: Pace) -> Core {
    let mut c = Core::new("ws://relay/", None, Duration::from_secs(60), Some(writes));
    c.set_read_pace(reads);
    c
}

#[test]
fn with_reads_billed_apart_a_refused_req_never_holds_back_the_next_event() {
    let t0 = Instant::now();
    let mut c = split(Pace { per_sec: 9.0, burst: 49.0 }, Pace { per_sec: 9.0, burst: 99.0 });
    let f: Filter = serde_json::from_str("{}").unwrap();
    c.req("a", vec![f.clone()]);
    assert!(tx(&mut c, t0).unwrap().starts_with("[\"REQ\",\"a\""));
    c.on_frame(&json!(["CLOSED", "a", "rate-limited: quota exceeded (ws_reqs); retry in 2s"]).to_string(), t0);
    c.req("b", vec![f]);
    let e = event(20);
    c.publish(e.clone());
    // The reads wait for their gate; the event, asked for after them, goes at once.
    assert!(is_event_frame(&tx(&mut c, t0), &e));
    assert_eq!(tx(&mut c, t0), None);
    assert_eq!(c.next_wakeup(t0), Some(t0 + Duration::from_secs(2)));
    let t2 = t0 + Duration::from_secs(2);
    assert!(tx(&mut c, t2).unwrap().starts_with("[\"REQ\",\"a\""));
    assert!(tx(&mut c, t2).unwrap().starts_with("[\"REQ\",\"b\""));
    // And a refused event holds back no read.
    c.on_frame(&ok(&e, false, "rate-limited: quota exceeded (ws_events); retry in 1s"), t2);
    c.count("n", vec![serde_json::from_str("{}").unwrap()]);
    assert!(tx(&mut c, t2).unwrap().starts_with("[\"COUNT\",\"n\""));
    assert_eq!(tx(&mut c, t2), None);
    assert!(is_event_frame(&tx(&mut c, t2 + Duration::from_secs(1)), &e));
}

#[test]
fn with_reads_billed_apart_each_lane_keeps_its_own_pace_and_a_busy_relay_holds_both() {
    let t0 = Instant::now();
    let mut c = split(Pace { per_sec: 10.0, burst: 1.0 }, Pace { per_sec: 10.0, burst: 3.0 });
    let f: Filter = serde_json::from_str("{}").unwrap();
    for i in 0..4 {
        c.req(&format!("s{i}"), vec![f.clone()]);
    }
    let (e1, e2) = (event(21), event(22));
    c.publish(e1.clone());
    c.publish(e2.clone());
    let sent: Vec<String> = std::iter::from_fn(|| tx(&mut c, t0)).collect();
    // Three reads of their burst, one write of its own.
    assert_eq!(sent.len(), 4, "{sent:?}");
    assert_eq!(sent.iter().filter(|f| f.starts_with("[\"REQ\"")).count(), 3);
    assert!(sent.iter().any(|f| f.contains(&e1.id.to_hex())));
    let t1 = t0 + Duration::from_millis(100);
    c.on_frame(&ok(&e1, false, "rate-limited: relay busy (unavailable); retry in 1s"), t1);
    assert_eq!(tx(&mut c, t1), None, "a busy relay holds back reads and writes alike");
    let t2 = t0 + Duration::from_millis(1100);
    // One write (the resend, first) and the last read: each lane's own token after the gate.
    let sent: Vec<String> = std::iter::from_fn(|| tx(&mut c, t2)).collect();
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert!(is_event_frame(&Some(sent[0].clone()), &e1), "the resend goes first: {sent:?}");
    assert!(sent[1].starts_with("[\"REQ\",\"s3\""), "{sent:?}");
}
