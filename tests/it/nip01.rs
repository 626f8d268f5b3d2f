//! NIP-01 over a real WebSocket: exact frames for EVENT, REQ, CLOSE, COUNT and bad input.

use crate::common::*;
use serde_json::json;

#[tokio::test]
async fn event_is_accepted_then_duplicate_is_reported() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let e = sign(&keys(1), now(), 1, &[], "hello");
    let ok = c.publish(&e).await;
    assert_eq!(ok, json!(["OK", e.id.to_hex(), true, ""]));
    let ok = c.publish(&e).await;
    assert_eq!(ok, json!(["OK", e.id.to_hex(), true, "duplicate: already have this event"]));
    assert_eq!(c.req_ids("s", vec![json!({})]).await, vec![e.id.to_hex()]);
}

#[tokio::test]
async fn bad_signature_is_rejected_invalid_and_not_stored() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let mut e = sign(&keys(1), now(), 1, &[], "hello");
    e.sig.0[0] ^= 1;
    let ok = c.publish(&e).await;
    assert_eq!(ok, json!(["OK", e.id.to_hex(), false, "invalid: signature does not verify"]));
    let mut tampered = sign(&keys(1), now(), 1, &[], "hello");
    tampered.content = "changed".into();
    let ok = c.publish(&tampered).await;
    assert_ok(&ok, &tampered.id.to_hex(), false, "invalid: event id does not match");
    assert!(c.req("s", vec![json!({})]).await.is_empty());
}

#[tokio::test]
async fn req_returns_stored_then_eose_then_live_events() {
    let relay = TestRelay::start(generous).await;
    let mut publisher = relay.connect().await;
    let mut reader = relay.connect().await;
    let k = keys(2);
    let old = sign(&k, now() - 10, 1, &[], "old");
    assert_ok(&publisher.publish(&old).await, &old.id.to_hex(), true, "");
    reader.send(json!(["REQ", "sub1", {"kinds": [1]}])).await;
    assert_eq!(reader.recv().await, json!(["EVENT", "sub1", old]));
    assert_eq!(reader.recv().await, json!(["EOSE", "sub1"]));
    let live = sign(&k, now(), 1, &[], "live");
    assert_ok(&publisher.publish(&live).await, &live.id.to_hex(), true, "");
    assert_eq!(reader.recv().await, json!(["EVENT", "sub1", live]));
    // A non-matching event is not delivered.
    let other = sign(&k, now(), 7, &[], "+");
    assert_ok(&publisher.publish(&other).await, &other.id.to_hex(), true, "");
    reader.assert_nothing_before_barrier("a non-matching event was delivered").await;
    // After CLOSE nothing more arrives.
    reader.send(json!(["CLOSE", "sub1"])).await;
    // A COUNT answered proves the CLOSE before it was processed (frames are handled in order).
    reader.send(json!(["COUNT", "probe", {"kinds": [12345]}])).await;
    assert_eq!(reader.recv().await, json!(["COUNT", "probe", {"count": 0}]));
    let after = sign(&k, now(), 1, &[], "after close");
    assert_ok(&publisher.publish(&after).await, &after.id.to_hex(), true, "");
    reader.assert_nothing_before_barrier("an event reached a closed subscription").await;
}

#[tokio::test]
async fn req_with_existing_id_replaces_the_subscription() {
    let relay = TestRelay::start(generous).await;
    let mut publisher = relay.connect().await;
    let mut reader = relay.connect().await;
    assert!(reader.req("s", vec![json!({"kinds": [1]})]).await.is_empty());
    assert!(reader.req("s", vec![json!({"kinds": [2]})]).await.is_empty());
    let k = keys(3);
    let one = sign(&k, now(), 1, &[], "kind 1");
    assert_ok(&publisher.publish(&one).await, &one.id.to_hex(), true, "");
    let two = sign(&k, now(), 2, &[], "kind 2");
    assert_ok(&publisher.publish(&two).await, &two.id.to_hex(), true, "");
    assert_eq!(reader.recv().await, json!(["EVENT", "s", two]));
    reader.assert_nothing_before_barrier("the replaced filter still matched").await;
}

#[tokio::test]
async fn filters_or_together_and_limit_zero_sends_only_eose() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let (a, b) = (keys(4), keys(5));
    let ea = sign(&a, 100, 1, &[], "a");
    let eb = sign(&b, 200, 7, &[], "b");
    assert_ok(&c.publish(&ea).await, &ea.id.to_hex(), true, "");
    assert_ok(&c.publish(&eb).await, &eb.id.to_hex(), true, "");
    let ids = c.req_ids("or", vec![json!({"authors": [a.public_key().to_hex()]}), json!({"kinds": [7]})]).await;
    assert_eq!(ids, vec![eb.id.to_hex(), ea.id.to_hex()]);
    assert!(c.req("zero", vec![json!({"limit": 0})]).await.is_empty());
}

#[tokio::test]
async fn limit_is_defaulted_and_clamped_to_max_limit() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_limit = 3;
        c.limitation.default_limit = 2;
    })
    .await;
    let mut c = relay.connect().await;
    let k = keys(6);
    for i in 0..5 {
        c.publish(&sign(&k, 1000 + i, 1, &[], &i.to_string())).await;
    }
    assert_eq!(c.req("d", vec![json!({})]).await.len(), 2);
    assert_eq!(c.req("m", vec![json!({"limit": 100})]).await.len(), 3);
}

#[tokio::test]
async fn count_returns_the_number_of_matches() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(7);
    for i in 0..4 {
        c.publish(&sign(&k, 1000 + i, 1, &[&["t", "x"]], &i.to_string())).await;
    }
    c.publish(&sign(&k, 1000, 2, &[], "other")).await;
    c.send(json!(["COUNT", "q", {"#t": ["x"]}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "q", {"count": 4}]));
    c.send(json!(["COUNT", "q2", {"kinds": [1], "limit": 1}, {"kinds": [2]}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "q2", {"count": 5}]));
}

#[tokio::test]
async fn malformed_json_gets_a_notice_and_the_connection_stays_usable() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    c.send_text("{not json").await;
    let notice = c.recv().await;
    assert_eq!(notice[0], "NOTICE");
    assert!(notice[1].as_str().unwrap().starts_with("invalid: frame is not a JSON array"), "{notice}");
    c.send_text(r#"["NOPE"]"#).await;
    assert_eq!(c.recv().await, json!(["NOTICE", "invalid: unknown message type \"NOPE\""]));
    let e = sign(&keys(8), now(), 1, &[], "still works");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
}

#[tokio::test]
async fn malformed_event_gets_ok_false_with_its_id() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let ok = c.publish_raw(r#"{"id":"abc","kind":1}"#).await;
    assert_ok(&ok, "abc", false, "invalid: malformed event");
    let ok = c.publish_raw(r#"17"#).await;
    assert_ok(&ok, "", false, "invalid: malformed event");
}

#[tokio::test]
async fn bad_filter_is_closed_with_its_sub_id() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    c.send(json!(["REQ", "bad", {"ids": ["abcd"]}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "bad", "invalid: filter 0: id must be 64 lowercase hex characters"]));
    c.send(json!(["REQ", "bad2", {"searches": "x"}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "bad2", "invalid: filter 0: unsupported filter field `searches`"]));
    c.send(json!(["REQ", "bad3", {"search": 7}])).await;
    let closed = c.recv().await;
    assert_eq!((&closed[0], &closed[1]), (&json!("CLOSED"), &json!("bad3")));
    assert!(closed[2].as_str().unwrap().starts_with("invalid: filter 0: invalid type: integer `7`"), "{closed}");
}

#[tokio::test]
async fn nip11_limits_are_enforced_with_correlated_answers() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.limitation.max_subscriptions = 2;
        c.limitation.max_filters = 2;
        c.limitation.max_subid_length = 8;
        c.limitation.max_event_tags = 2;
        c.limitation.max_content_length = 10;
        c.limitation.max_message_length = 2000;
        c.limitation.created_at_lower_limit = 3600;
        c.limitation.created_at_upper_limit = 60;
    })
    .await;
    let mut c = relay.connect().await;
    c.send(json!(["REQ", "123456789", {}])).await;
    assert_eq!(
        c.recv().await,
        json!(["CLOSED", "123456789", "error: subscription id is 9 characters, the limit is 8"])
    );
    c.send(json!(["REQ", "f", {}, {}, {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "f", "error: 3 filters, the limit is 2"]));
    c.req("a", vec![json!({})]).await;
    c.req("b", vec![json!({})]).await;
    c.send(json!(["REQ", "c", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "c", "error: too many subscriptions: at most 2 per connection"]));
    // Replacing an open id is not a new subscription.
    c.req("a", vec![json!({"kinds": [1]})]).await;

    let k = keys(9);
    let long = sign(&k, now(), 1, &[], "01234567890");
    assert_eq!(
        c.publish(&long).await,
        json!(["OK", long.id.to_hex(), false, "invalid: content is 11 bytes, the limit is 10"])
    );
    let tags = sign(&k, now(), 1, &[&["t", "1"], &["t", "2"], &["t", "3"]], "");
    assert_eq!(
        c.publish(&tags).await,
        json!(["OK", tags.id.to_hex(), false, "invalid: event has 3 tags, the limit is 2"])
    );
    let old = sign(&k, now() - 7200, 1, &[], "");
    assert_eq!(
        c.publish(&old).await,
        json!(["OK", old.id.to_hex(), false, "invalid: created_at is more than 3600 seconds in the past"])
    );
    let future = sign(&k, now() + 600, 1, &[], "");
    assert_eq!(
        c.publish(&future).await,
        json!(["OK", future.id.to_hex(), false, "invalid: created_at is more than 60 seconds in the future"])
    );
    let big = sign(&k, now(), 1, &[&["x", &"y".repeat(3000)]], "");
    let ok = c.publish(&big).await;
    assert_ok(&ok, &big.id.to_hex(), false, "invalid: message is ");
    c.send(json!(["REQ", "big", {"#x": ["y".repeat(3000)]}])).await;
    let closed = c.recv().await;
    assert_eq!(closed[0], "CLOSED");
    assert_eq!(closed[1], "big");
    assert!(closed[2].as_str().unwrap().ends_with("the limit is 2000"), "{closed}");
    // Nothing refused was stored.
    assert!(c.req("a", vec![json!({})]).await.is_empty());
}

#[tokio::test]
async fn binary_frames_get_a_notice() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    use futures_util::SinkExt;
    c.ws.send(tokio_tungstenite::tungstenite::Message::binary(vec![1u8, 2, 3])).await.unwrap();
    assert_eq!(c.recv().await, json!(["NOTICE", "invalid: binary frames are not supported; send text"]));
}

#[tokio::test]
async fn ephemeral_events_are_delivered_live_but_never_stored() {
    let relay = TestRelay::start(generous).await;
    let mut publisher = relay.connect().await;
    let mut reader = relay.connect().await;
    reader.req("live", vec![json!({"kinds": [20001]})]).await;
    let e = sign(&keys(10), now(), 20001, &[], "typing…");
    assert_eq!(publisher.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    assert_eq!(reader.recv().await, json!(["EVENT", "live", e]));
    assert!(publisher.req("later", vec![json!({"kinds": [20001]})]).await.is_empty());
}

#[tokio::test]
async fn replaceable_event_keeps_newest_and_refuses_older() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(11);
    let v1 = sign(&k, 1000, 0, &[], "v1");
    let v2 = sign(&k, 2000, 0, &[], "v2");
    c.publish(&v1).await;
    assert_eq!(c.publish(&v2).await, json!(["OK", v2.id.to_hex(), true, ""]));
    assert_eq!(c.publish(&v1).await, json!(["OK", v1.id.to_hex(), false, "duplicate: a newer version is stored"]));
    assert_eq!(c.req_ids("s", vec![json!({"kinds": [0]})]).await, vec![v2.id.to_hex()]);
}

#[tokio::test]
async fn deletion_removes_targets_and_tombstones_refuse_them() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(12);
    let note = sign(&k, 1000, 1, &[], "oops");
    assert_ok(&c.publish(&note).await, &note.id.to_hex(), true, "");
    let deletion = sign(&k, 1001, 5, &[&["e", &note.id.to_hex()]], "");
    assert_eq!(c.publish(&deletion).await, json!(["OK", deletion.id.to_hex(), true, ""]));
    assert_eq!(c.req_ids("s", vec![json!({})]).await, vec![deletion.id.to_hex()]);
    assert_eq!(c.publish(&note).await, json!(["OK", note.id.to_hex(), false, "blocked: deleted by its author"]));
}

#[tokio::test]
async fn expired_event_is_refused_on_arrival() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let e = sign(&keys(13), now(), 1, &[&["expiration", &(now() - 1).to_string()]], "");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), false, "invalid: event has expired"]));
    let fresh = sign(&keys(13), now(), 1, &[&["expiration", &(now() + 3600).to_string()]], "");
    assert_eq!(c.publish(&fresh).await, json!(["OK", fresh.id.to_hex(), true, ""]));
}

#[tokio::test]
async fn protected_event_is_refused_without_auth() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let e = sign(&keys(14), now(), 1, &[&["-"]], "members only");
    assert_eq!(
        c.publish(&e).await,
        json!(["OK", e.id.to_hex(), false, "auth-required: this event may only be published by its author"])
    );
}

#[tokio::test]
async fn every_event_in_a_pipelined_burst_gets_exactly_one_ok() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    let k = keys(15);
    let events: Vec<_> = (0..300).map(|i| sign(&k, 1000 + i, 1, &[], &i.to_string())).collect();
    for e in &events {
        c.send(json!(["EVENT", e])).await;
    }
    let mut seen = std::collections::HashMap::new();
    for _ in 0..events.len() {
        let ok = c.recv().await;
        assert_eq!(ok[0], "OK");
        assert_eq!(ok[2], true, "{ok}");
        *seen.entry(ok[1].as_str().unwrap().to_string()).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 300);
    assert!(seen.values().all(|n| *n == 1));
    c.assert_nothing_before_barrier("an EVENT got a second OK").await;
}

#[tokio::test]
async fn a_record_damaged_on_disk_while_serving_is_skipped_and_every_other_event_served() {
    let relay = TestRelay::start(generous).await;
    let mut client = relay.connect().await;
    let author = keys(30);
    let events: Vec<_> = ["first", "DAMAGE-ME in the middle", "last"]
        .iter()
        .enumerate()
        .map(|(i, c)| sign(&author, now() - 10 + i as u64, 1, &[&["t", "d"]], c))
        .collect();
    for e in &events {
        assert_ok(&client.publish(e).await, &e.id.to_hex(), true, "");
    }
    // One flipped byte inside the middle record, under the running relay.
    let path = relay.data_dir().join("events.log");
    let mut bytes = std::fs::read(&path).unwrap();
    let at = bytes.windows(9).position(|w| w == b"DAMAGE-ME").unwrap();
    bytes[at] ^= 0x20;
    std::fs::write(&path, &bytes).unwrap();

    let want = vec![events[2].id.to_hex(), events[0].id.to_hex()];
    for (sub, filter) in [
        ("all", json!({})),
        ("tag", json!({"#t": ["d"]})),
        ("ids", json!({"ids": events.iter().map(|e| e.id.to_hex()).collect::<Vec<_>>()})),
    ] {
        assert_eq!(client.req_ids(sub, vec![filter.clone()]).await, want, "{sub}");
        // Again: the relay logged it once and still serves.
        assert_eq!(client.req_ids(&format!("{sub}2"), vec![filter]).await, want, "{sub}");
    }
    let http = web();
    let get = |id: String| http.get(relay.http_url(&format!("/api/v1/events/{id}"))).send();
    assert_eq!(get(events[1].id.to_hex()).await.unwrap().status(), 404);
    let served: serde_json::Value = get(events[0].id.to_hex()).await.unwrap().json().await.unwrap();
    assert_eq!(served["id"], events[0].id.to_hex(), "{served}");
}
