//! The registry's rules: each matching subscription gets an event once, a full queue or byte
//! bound cuts a connection off, a drained queue gives back its buffer, the `#h` index.
use super::*;
use crate::protocol::{Keys, Kind, Timestamp};

fn local() -> Principal {
    Principal::Ip(std::net::IpAddr::from([127, 0, 0, 1]))
}

fn event() -> Event {
    Keys::test(5).sign(Timestamp(1), Kind(1), vec![], "x")
}

#[test]
fn matching_subscriptions_get_the_event_once_each() {
    let fanout = Arc::new(Fanout::default());
    let a = fanout.register(8, 1 << 20, local());
    let b = fanout.register(8, 1 << 20, local());
    fanout.subscribe(a.id, "s1", 1, vec![serde_json::from_str(r#"{"kinds":[1]}"#).unwrap()]);
    fanout.subscribe(a.id, "s2", 2, vec![serde_json::from_str(r#"{"kinds":[2]}"#).unwrap()]);
    fanout.subscribe(b.id, "s1", 1, vec![serde_json::from_str("{}").unwrap(), serde_json::from_str("{}").unwrap()]);
    let e = event();
    fanout.publish(&e, None);
    assert!(
        matches!(a.try_recv(), Some(Live { sub_id, event, .. }) if sub_id == "s1" && event.as_str() == e.to_json().unwrap())
    );
    assert!(a.try_recv().is_none());
    assert!(b.try_recv().is_some());
    assert!(b.try_recv().is_none());
    assert_eq!(fanout.total_subscriptions(), 3);
    drop(a);
    assert_eq!(fanout.total_subscriptions(), 1);
}

#[test]
fn a_late_older_generation_never_replaces_a_newer_one() {
    let fanout = Arc::new(Fanout::default());
    let reg = fanout.register(8, 1 << 20, local());
    fanout.subscribe(reg.id, "s", 2, vec![serde_json::from_str(r#"{"kinds":[1]}"#).unwrap()]);
    fanout.subscribe(reg.id, "s", 1, vec![serde_json::from_str(r#"{"kinds":[2]}"#).unwrap()]);
    assert!(!fanout.unsubscribe(reg.id, "s", Some(1)));
    let e = event();
    fanout.publish(&e, None);
    assert!(reg.try_recv().is_some());
    assert!(fanout.unsubscribe(reg.id, "s", None));
    assert_eq!(fanout.total_subscriptions(), 0);
}

#[test]
fn a_full_queue_cuts_the_connection_off() {
    let fanout = Arc::new(Fanout::default());
    let reg = fanout.register(1, 1 << 20, local());
    fanout.subscribe(reg.id, "s", 1, vec![serde_json::from_str("{}").unwrap()]);
    let e = event();
    fanout.publish(&e, None);
    assert!(!reg.slow.is_cancelled());
    fanout.publish(&e, None);
    assert!(reg.slow.is_cancelled());
}

#[test]
fn a_drained_queue_gives_back_the_buffer_of_a_burst() {
    let fanout = Arc::new(Fanout::default());
    let reg = fanout.register(1000, 1 << 30, local());
    fanout.subscribe(reg.id, "s", 1, vec![serde_json::from_str("{}").unwrap()]);
    let e = event();
    for _ in 0..500 {
        fanout.publish(&e, None);
    }
    assert!(reg.outbox.lock().frames.capacity() >= 500);
    let mut drained = 0;
    while let Some(frame) = reg.try_recv() {
        reg.written(&frame);
        drained += 1;
    }
    assert_eq!(drained, 500);
    let queue = reg.outbox.lock();
    assert!(queue.frames.capacity() <= KEPT_CAPACITY, "{}", queue.frames.capacity());
    assert_eq!(queue.bytes, 0);
}

#[test]
fn the_byte_bound_cuts_the_connection_off() {
    let fanout = Arc::new(Fanout::default());
    let e = event();
    let one = e.to_json().unwrap().len() + "s".len() + 12;
    let reg = fanout.register(100, 2 * one, local());
    fanout.subscribe(reg.id, "s", 1, vec![serde_json::from_str("{}").unwrap()]);
    fanout.publish(&e, None);
    fanout.publish(&e, None);
    assert!(!reg.slow.is_cancelled());
    fanout.publish(&e, None);
    assert!(reg.slow.is_cancelled());
}

#[tokio::test]
async fn a_waiting_connection_wakes_for_a_published_event() {
    let fanout = Arc::new(Fanout::default());
    let reg = fanout.register(8, 1 << 20, local());
    fanout.subscribe(reg.id, "s", 1, vec![serde_json::from_str("{}").unwrap()]);
    let e = event();
    let waiting = tokio::spawn(async move { reg.recv().await });
    tokio::task::yield_now().await;
    fanout.publish(&e, None);
    let frame = tokio::time::timeout(std::time::Duration::from_secs(5), waiting).await.unwrap().unwrap();
    assert_eq!(frame.sub_id, "s");
}

#[test]
fn an_event_of_a_group_reaches_its_groups_subscriptions_and_the_general_ones_only() {
    let fanout = Arc::new(Fanout::default());
    let filter = |json: &str| -> Filter { serde_json::from_str(json).unwrap() };
    let regs: Vec<Registration> = (0..10).map(|_| fanout.register(8, 1 << 20, local())).collect();
    for (n, reg) in regs.iter().enumerate() {
        fanout.subscribe(reg.id, "ch", 1, vec![filter(&format!(r##"{{"kinds":[9],"#h":["g{n}"]}}"##))]);
    }
    let general = fanout.register(8, 1 << 20, local());
    fanout.subscribe(general.id, "all", 1, vec![filter(r#"{"kinds":[9]}"#)]);
    let e = Keys::test(5).sign(Timestamp(1), Kind(9), vec![vec!["h".into(), "g3".into()]], "x");
    {
        let conns = fanout.read();
        let candidates = conns.index.candidates(e.tag_values("h"), conns.entries.len()).unwrap();
        assert_eq!(candidates, {
            let mut want = vec![regs[3].id, general.id];
            want.sort_unstable();
            want
        });
    }
    fanout.publish(&e, None);
    for (n, reg) in regs.iter().enumerate() {
        assert_eq!(reg.try_recv().is_some(), n == 3, "g{n}");
    }
    assert!(general.try_recv().is_some());
    // Closed and gone subscriptions leave the index.
    assert!(fanout.unsubscribe(regs[3].id, "ch", None));
    drop(general);
    let conns = fanout.read();
    assert_eq!(conns.index.candidates(e.tag_values("h"), conns.entries.len()), Some(vec![]));
    assert_eq!(
        super::index::groups_of(&[filter(r##"{"#h":["b","a"]}"##), filter(r##"{"#h":["a"]}"##)]),
        Some(vec!["a".to_string(), "b".to_string()])
    );
    assert_eq!(super::index::groups_of(&[filter(r##"{"#h":["a"]}"##), filter("{}")]), None);
}
