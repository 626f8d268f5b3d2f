//! Unit tests of the client rules: the rate-limit gate, the one resend, pacing.

use super::*;

fn event(n: u8) -> Event {
    Keys::from_bytes([7; 32]).unwrap().sign(Timestamp(1000 + u64::from(n)), Kind(1), vec![], &format!("e{n}"))
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
    c.publish(e.clone(), t0);
    assert!(is_event_frame(&c.poll_transmit(t0), &e));
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
    assert_eq!(c.poll_transmit(t0 + Duration::from_millis(2999)), None);
    assert!(is_event_frame(&c.poll_transmit(t0 + Duration::from_secs(3)), &e));
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
    assert!(is_event_frame(&c.poll_transmit(t1), &e));
    c.on_frame(&ok(&e, false, LIMITED), t1);
    // Failed at once: the total wait was the one gate, 3 s.
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Err(PublishError::Refused(LIMITED.into())))));
    assert_eq!(c.poll_transmit(t1 + Duration::from_secs(10)), None);
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
    assert_eq!(c.poll_transmit(t0), None);
}

#[test]
fn an_uncorrelated_notice_arms_the_gate_but_never_resends() {
    let t0 = Instant::now();
    let mut c = core(60);
    let (e1, e2) = (event(5), event(6));
    c.publish(e1.clone(), t0);
    assert!(is_event_frame(&c.poll_transmit(t0), &e1));
    c.on_frame(&json!(["NOTICE", "rate-limited: quota exceeded (ws_events); retry in 2s"]).to_string(), t0);
    c.publish(e2.clone(), t0);
    assert_eq!(c.poll_transmit(t0 + Duration::from_secs(1)), None);
    // After the gate only the new frame goes out; e1 is not sent again.
    let t2 = t0 + Duration::from_secs(2);
    assert!(is_event_frame(&c.poll_transmit(t2), &e2));
    assert_eq!(c.poll_transmit(t2), None);
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
    assert_eq!(c.poll_transmit(t0 + Duration::from_secs(5)), None);
}

#[test]
fn a_timeout_during_the_wait_cancels_the_resend() {
    let (t0, mut c, e) = sent(5, 8);
    c.on_frame(&ok(&e, false, "rate-limited: quota exceeded (messages); retry in 4s"), t0);
    c.on_tick(t0 + Duration::from_secs(5));
    assert_eq!(c.poll_update(), Some(Update::Published(e.id, Err(PublishError::Timeout))));
    assert_eq!(c.poll_transmit(t0 + Duration::from_secs(5)), None);
}

#[test]
fn a_rate_limited_req_is_reissued_first_once_the_gate_clears() {
    let t0 = Instant::now();
    let mut c = core(60);
    let f: Filter = serde_json::from_str("{}").unwrap();
    c.req("a", vec![f.clone()]);
    c.req("b", vec![f]);
    assert!(c.poll_transmit(t0).unwrap().starts_with("[\"REQ\",\"a\""));
    c.on_frame(&json!(["CLOSED", "a", "rate-limited: quota exceeded (ws_events); retry in 1s"]).to_string(), t0);
    assert_eq!(c.poll_update(), None);
    assert_eq!(c.poll_transmit(t0), None);
    let t1 = t0 + Duration::from_secs(1);
    assert!(c.poll_transmit(t1).unwrap().starts_with("[\"REQ\",\"a\""));
    assert!(c.poll_transmit(t1).unwrap().starts_with("[\"REQ\",\"b\""));
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
    assert!(c.poll_transmit(t0).is_some());
    assert!(c.poll_transmit(t0).is_some());
    assert_eq!(c.poll_transmit(t0), None);
    assert_eq!(c.next_wakeup(t0), Some(t0 + Duration::from_millis(100)));
    assert!(c.poll_transmit(t0 + Duration::from_millis(100)).is_some());
    assert_eq!(c.poll_transmit(t0 + Duration::from_millis(150)), None);
}

#[test]
fn auth_challenges_are_answered_without_waiting_for_the_gate() {
    let t0 = Instant::now();
    let keys = Keys::from_bytes([9; 32]).unwrap();
    let mut c = Core::new("ws://relay/", Some(keys.clone()), Duration::from_secs(60), None);
    c.on_frame(&json!(["NOTICE", "rate-limited: quota exceeded (ws_events); retry in 5s"]).to_string(), t0);
    c.on_frame(&json!(["AUTH", "chal"]).to_string(), t0);
    let auth: Value = serde_json::from_str(&c.poll_transmit(t0).unwrap()).unwrap();
    assert_eq!(auth[0], "AUTH");
    assert_eq!(auth[1]["kind"], 22242);
    assert_eq!(auth[1]["pubkey"], keys.public_key().to_hex());
    assert_eq!(auth[1]["tags"], json!([["relay", "ws://relay/"], ["challenge", "chal"]]));
}
