//! The community switch: a chat client re-subscribes to every channel at once and then sends a
//! message. Reads (REQ, COUNT, NEG-OPEN) bill `ws_reqs`, writes `ws_events`, so at the default
//! configuration neither waits for the other, while a flood of either is bounded as before; and
//! open subscriptions are bounded per connection, per address and relay-wide. The limiter's
//! clock is moved by hand (no sleeps).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::common::*;
use serde_json::{Value, json};

fn refusal(limit_type: &str, secs: u64) -> String {
    format!("rate-limited: quota exceeded ({limit_type}); retry in {secs}s")
}

/// Sends every frame of `frames` back to back, unanswered: one burst, as a client's socket sends it.
async fn burst(c: &mut Client, frames: impl IntoIterator<Item = Value>) {
    for frame in frames {
        c.send(frame).await;
    }
}

/// Reads frames until `done` says every expected one came; then nothing more may have come.
async fn frames_until(c: &mut Client, mut done: impl FnMut(&[Value]) -> bool) -> Vec<Value> {
    let mut frames = Vec::new();
    while !done(&frames) {
        frames.push(c.recv().await);
    }
    c.assert_nothing_before_barrier("a frame too many").await;
    frames
}

fn count_of(frames: &[Value], verb: &str) -> usize {
    frames.iter().filter(|f| f[0] == verb).count()
}

#[tokio::test]
async fn seventy_channel_reqs_then_a_message_at_defaults_get_every_eose_and_ok_true_with_no_refusal() {
    let relay = TestRelay::start(|_| {}).await;
    let nip11 = relay.nip11().await;
    assert_eq!(nip11["limitation"]["max_subscriptions"], 200);
    assert_eq!(nip11["hearth_limits"]["human"]["ws_reqs_per_sec"], 10);
    assert_eq!(nip11["hearth_limits"]["human"]["ws_reqs_burst_window_secs"], 10);
    assert_eq!(nip11["hearth_limits"]["ip"]["ws_reqs_per_sec"], 40);
    let mut c = relay.connect().await;
    let user = keys(70);
    assert_eq!(c.auth(&user, &relay.ws_url()).await[2], true);
    // The channel the message goes to (NIP-29: a group exists before it takes messages).
    let create = sign(&user, now(), 9007, &[&["h", "channel-7"]], "");
    assert_eq!(c.publish(&create).await, json!(["OK", create.id.to_hex(), true, ""]));
    let message = sign(&user, now(), 9, &[&["h", "channel-7"]], "back in the community");
    let reqs = (0..70).map(|i| json!(["REQ", format!("ch{i}"), {"kinds": [9], "#h": [format!("channel-{i}")]}]));
    burst(&mut c, reqs.chain([json!(["EVENT", message])])).await;
    let frames =
        frames_until(&mut c, |f| count_of(f, "EOSE") == 70 && count_of(f, "OK") == 1 && count_of(f, "EVENT") == 1)
            .await;
    for i in 0..70 {
        assert!(frames.contains(&json!(["EOSE", format!("ch{i}")])), "ch{i}: {frames:?}");
    }
    assert!(frames.contains(&json!(["OK", message.id.to_hex(), true, ""])), "{frames:?}");
    // Its own channel's subscription has it, once; no other does.
    let delivered: Vec<&Value> = frames.iter().filter(|f| f[0] == "EVENT").collect();
    assert_eq!((&delivered[0][1], &delivered[0][2]["id"]), (&json!("ch7"), &json!(message.id.to_hex())));
    assert!(frames.iter().all(|f| f[0] != "CLOSED" && f[0] != "NOTICE"), "{frames:?}");
}

#[tokio::test]
async fn a_key_flooding_reqs_is_refused_on_ws_reqs_with_a_true_hint_and_its_events_still_pass() {
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    let user = keys(71);
    assert_eq!(c.auth(&user, &relay.ws_url()).await[2], true);
    let reqs = (0..110).map(|i| json!(["REQ", format!("r{i}"), {"#h": [format!("g{i}")]}]));
    burst(&mut c, reqs.chain([json!(["COUNT", "n", {"kinds": [1]}])])).await;
    let frames = frames_until(&mut c, |f| f.len() == 111).await;
    // The burst of 100 reads, then each refused on its own frame with the wait that is enough.
    for i in 0..100 {
        assert!(frames.contains(&json!(["EOSE", format!("r{i}")])), "r{i}");
    }
    for i in 100..110 {
        assert!(frames.contains(&json!(["CLOSED", format!("r{i}"), refusal("ws_reqs", 1)])), "r{i}: {frames:?}");
    }
    assert!(frames.contains(&json!(["CLOSED", "n", refusal("ws_reqs", 1)])), "{frames:?}");
    // The writes' budget is untouched: a message goes through at once.
    let e = sign(&user, now(), 1, &[], "still talking");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    // The hint is true: a second later ten more reads are admitted, and the eleventh is not.
    relay.clock.advance(Duration::from_secs(1));
    burst(&mut c, (0..11).map(|i| json!(["COUNT", format!("c{i}"), {"kinds": [1]}]))).await;
    let frames = frames_until(&mut c, |f| f.len() == 11).await;
    assert_eq!(count_of(&frames, "COUNT"), 10, "{frames:?}");
    assert!(frames.contains(&json!(["CLOSED", "c10", refusal("ws_reqs", 1)])), "{frames:?}");
    let usage = relay.limiter.usage(&hearth::limiter::Principal::Pubkey(user.public_key())).await;
    // Eleven REQs and COUNTs, one COUNT after the wait, and the two barrier COUNTs of
    // `frames_until`, refused on the same budget.
    assert_eq!((usage.refusals["ws_reqs"], usage.refusals["ws_events"]), (14, 0));
}

#[tokio::test]
async fn a_key_flooding_events_keeps_its_reqs_and_counts() {
    let relay = TestRelay::start(|_| {}).await;
    let mut c = relay.connect().await;
    let user = keys(72);
    assert_eq!(c.auth(&user, &relay.ws_url()).await[2], true);
    let events: Vec<_> = (0..51).map(|i| sign(&user, now(), 1, &[], &format!("flood {i}"))).collect();
    burst(&mut c, events.iter().map(|e| json!(["EVENT", e]))).await;
    let frames = frames_until(&mut c, |f| f.len() == 51).await;
    assert_eq!(frames.iter().filter(|f| f[2] == true).count(), 50, "{frames:?}");
    assert!(frames.contains(&json!(["OK", events[50].id.to_hex(), false, refusal("ws_events", 1)])));
    // Its reads are on their own budget.
    assert_eq!(c.req("after", vec![json!({"authors": [user.public_key().to_hex()]})]).await.len(), 50);
    c.send(json!(["COUNT", "n", {"authors": [user.public_key().to_hex()]}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "n", {"count": 50}]));
}

#[tokio::test]
async fn the_ip_ceiling_bills_reads_apart_from_writes_under_every_key() {
    let relay = TestRelay::start(|c| {
        c.limits.ip.ws_reqs_per_sec = 1;
        c.limits.ip.ws_reqs_burst_window_secs = 4;
    })
    .await;
    // Four keys from one address: the address's four reads, whoever sends them.
    let mut clients = Vec::new();
    for n in 0..4u8 {
        let mut c = relay.connect().await;
        assert_eq!(c.auth(&keys(80 + n), &relay.ws_url()).await[2], true);
        assert!(c.req("s", vec![json!({"kinds": [1]})]).await.is_empty());
        clients.push(c);
    }
    let mut fresh = relay.connect().await;
    assert_eq!(fresh.auth(&keys(90), &relay.ws_url()).await[2], true);
    fresh.send(json!(["REQ", "s", {"kinds": [1]}])).await;
    assert_eq!(fresh.recv().await, json!(["CLOSED", "s", refusal("ws_reqs", 1)]));
    // Writes of the same address are billed apart.
    let e = sign(&keys(90), now(), 1, &[], "the address can still write");
    assert_eq!(fresh.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    relay.clock.advance(Duration::from_secs(1));
    assert!(fresh.req("s", vec![json!({"kinds": [1]})]).await.len() == 1);
}

#[tokio::test]
async fn a_neg_open_bills_ws_reqs_and_is_refused_on_its_neg_err() {
    let relay = TestRelay::start(|c| {
        c.limits.human.ws_reqs_per_sec = 1;
        c.limits.human.ws_reqs_burst_window_secs = 1;
    })
    .await;
    let mut c = relay.connect().await;
    c.send(json!(["COUNT", "n", {}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "n", {"count": 0}]));
    c.send(json!(["NEG-OPEN", "neg", {"kinds": [1]}, "6100000200"])).await;
    assert_eq!(c.recv().await, json!(["NEG-ERR", "neg", refusal("ws_reqs", 1)]));
    // Writes are not billed to it.
    let e = sign(&keys(73), now(), 1, &[], "a write");
    assert_eq!(c.publish(&e).await[2], true);
    relay.clock.advance(Duration::from_secs(1));
    c.send(json!(["NEG-OPEN", "neg", {"kinds": [1]}, "6100000200"])).await;
    assert_eq!(c.recv().await[0], "NEG-MSG");
}

#[tokio::test]
async fn a_connection_holds_200_subscriptions_and_the_201st_is_refused_without_a_hint() {
    let relay = TestRelay::start(generous).await;
    let mut c = relay.connect().await;
    burst(&mut c, (0..201).map(|i| json!(["REQ", format!("s{i}"), {"#h": [format!("g{i}")]}]))).await;
    let frames = frames_until(&mut c, |f| f.len() == 201).await;
    assert_eq!(count_of(&frames, "EOSE"), 200);
    let refused: Vec<&Value> = frames.iter().filter(|f| f[0] == "CLOSED").collect();
    assert_eq!(refused.len(), 1, "{frames:?}");
    assert_eq!(refused[0][2], "error: too many subscriptions: at most 200 per connection");
    // Replacing an open id takes no new place.
    assert!(c.req("s0", vec![json!({"kinds": [1]})]).await.is_empty());
}

const ADDRESS_FULL: &str = "blocked: too many subscriptions open from your address: at most 3; close some first";

#[tokio::test]
async fn subscriptions_are_bounded_per_address_and_relay_wide_and_closing_gives_places_back() {
    let relay = TestRelay::start(|c| {
        generous(c);
        c.server.max_subscriptions_per_ip = 3;
        c.server.max_subscriptions_total = 5;
    })
    .await;
    let [one, two, three] = [1, 2, 3].map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n)));
    let mut a = Client::connect_from(&relay.ws_url(), one).await;
    let mut b = Client::connect_from(&relay.ws_url(), one).await;
    assert!(a.req("a1", vec![json!({"kinds": [1]})]).await.is_empty());
    assert!(a.req("a2", vec![json!({"kinds": [1]})]).await.is_empty());
    assert!(b.req("b1", vec![json!({"kinds": [1]})]).await.is_empty());
    // The address holds three, over both its connections.
    b.send(json!(["REQ", "b2", {"kinds": [1]}])).await;
    assert_eq!(b.recv().await, json!(["CLOSED", "b2", ADDRESS_FULL]));
    // Another address has its own share, until the relay's five are taken.
    let mut other = Client::connect_from(&relay.ws_url(), two).await;
    assert!(other.req("o1", vec![json!({"kinds": [1]})]).await.is_empty());
    assert!(other.req("o2", vec![json!({"kinds": [1]})]).await.is_empty());
    let mut third = Client::connect_from(&relay.ws_url(), three).await;
    third.send(json!(["REQ", "t1", {"kinds": [1]}])).await;
    assert_eq!(
        third.recv().await,
        json!([
            "CLOSED",
            "t1",
            "blocked: the relay holds as many subscriptions as it can (5); close one or try again later"
        ])
    );
    // A CLOSE gives its place back, to its own address first of all.
    a.send(json!(["CLOSE", "a1"])).await;
    a.assert_nothing_before_barrier("CLOSE is not answered").await;
    assert!(b.req("b2", vec![json!({"kinds": [1]})]).await.is_empty());
    // A connection gone gives back every place it held (the relay ends it on its own task: ask
    // until it has, within a deadline).
    a.ws.close(None).await.unwrap();
    drop(a);
    let mut n = 0;
    poll("the closed connection's places to be given back", STEP, async || {
        n += 1;
        third.send(json!(["REQ", format!("t{n}"), {"kinds": [1]}])).await;
        let answer = third.recv().await;
        if answer[0] == "EOSE" { Ok(()) } else { Err(answer.to_string()) }
    })
    .await;
    // No refused REQ got a subscription: only the open ones hear a new event.
    let e = sign(&keys(74), now(), 1, &[], "live");
    assert_eq!(other.publish(&e).await[2], true);
    for (client, subs) in [(&mut b, ["b1", "b2"]), (&mut other, ["o1", "o2"])] {
        let mut heard: Vec<String> = Vec::new();
        for _ in 0..2 {
            let f = client.recv().await;
            assert_eq!(f[0], "EVENT", "{f}");
            heard.push(f[1].as_str().unwrap().to_string());
        }
        heard.sort();
        assert_eq!(heard, subs);
        client.assert_nothing_before_barrier("a refused REQ got a live event").await;
    }
}
