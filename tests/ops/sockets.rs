//! Sockets that cannot be held: request-head and body timeouts, pings to silent WebSocket peers,
//! and the connection caps, each against the real server over raw TCP where a well-behaved
//! client library would not misbehave on purpose.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;
use serde_json::{Value, json};

/// Reads until the relay closes the socket (each read waits at most [`STEP`]: a relay that keeps
/// a silent socket open fails the test); what it sent.
async fn until_closed(tcp: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(STEP, tcp.read(&mut buf)).await.expect("the relay never closed the socket") {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

/// A WebSocket opened by hand over TCP from `from` (the handshake sent, not yet read).
async fn raw_websocket(relay: &TestRelay, from: IpAddr) -> TcpStream {
    let mut tcp = tcp_from(relay.addr, from).await;
    let upgrade = format!(
        "GET / HTTP/1.1\r\nHost: {}\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
        relay.addr
    );
    tcp.write_all(upgrade.as_bytes()).await.unwrap();
    tcp
}

/// One masked client frame with `opcode` and a payload under 126 bytes.
fn client_frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let mask = [1u8, 2, 3, 4];
    let mut frame = vec![0x80 | opcode, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

/// The status code of the close frame (opcode 8) the relay sent after its 101 response.
fn close_code(got: &[u8]) -> Option<u16> {
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut at = head_end;
    while at + 2 <= got.len() {
        let (opcode, len) = (got[at] & 0x0f, usize::from(got[at + 1] & 0x7f));
        let (len, start) = match len {
            126 => (usize::from(u16::from_be_bytes([got[at + 2], got[at + 3]])), at + 4),
            n => (n, at + 2),
        };
        if opcode == 8 && len >= 2 {
            return Some(u16::from_be_bytes([got[start], got[start + 1]]));
        }
        at = start + len;
    }
    None
}

fn quick(c: &mut hearth::config::Config) {
    c.server.header_timeout_secs = 1;
    c.server.body_timeout_secs = 1;
    c.server.ping_interval_secs = 1;
}

#[tokio::test]
async fn a_silent_socket_and_a_trickled_header_are_closed_after_the_header_timeout() {
    let relay = TestRelay::start(quick).await;
    let mut silent = TcpStream::connect(relay.addr).await.unwrap();
    assert_eq!(until_closed(&mut silent).await, b"");
    // A header a byte every 100 ms, never finished: the relay closes it while it still trickles
    // (a timeout reset by every byte would let it trickle on until the test gives up).
    let mut slow = TcpStream::connect(relay.addr).await.unwrap();
    slow.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").await.unwrap();
    let mut sent = 0;
    let closed_mid_header = loop {
        // A write to a socket the relay closed fails by the second try; 100 s of trickling
        // (100 times the header timeout) is the test's deadline.
        if sent == 1000 {
            break false;
        }
        if slow.write_all(b"X").await.is_err() {
            break true;
        }
        sent += 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(closed_mid_header, "a header trickled for {sent} bytes was never closed");
    // The relay still serves everyone else.
    assert_eq!(relay.nip11().await["software"], "hearth");
}

#[tokio::test]
async fn a_body_shorter_than_its_content_length_gets_408_and_is_closed() {
    let relay = TestRelay::start(quick).await;
    let mut tcp = TcpStream::connect(relay.addr).await.unwrap();
    let head = format!(
        "POST /api/v1/count HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{\"fil",
        relay.addr
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let got = until_closed(&mut tcp).await;
    let text = String::from_utf8_lossy(&got);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.ends_with(r#"{"error":"the request took too long to arrive"}"#), "{text}");
}

#[tokio::test]
async fn a_websocket_peer_that_answers_no_ping_is_closed_and_its_subscriptions_freed() {
    let relay = TestRelay::start(|c| {
        quick(c);
        c.admin.token = "t".into();
    })
    .await;
    // A client that keeps reading answers pings (tungstenite does) and stays.
    let mut alive = relay.connect().await;
    let reading = tokio::spawn(async move {
        assert_eq!(alive.recv_within(Duration::from_secs(4)).await, None);
        alive
    });
    // The silent peer: a handshake by hand, one REQ, then it never reads or writes again.
    let mut tcp = raw_websocket(&relay, IpAddr::V4(Ipv4Addr::new(127, 0, 0, 3))).await;
    tcp.write_all(&client_frame(0x1, br#"["REQ","s",{}]"#)).await.unwrap();
    let usage = |relay: &TestRelay| {
        let url = relay.http_url("/admin/v1/usage/ip/127.0.0.3");
        async move {
            let resp = web().get(url).bearer_auth("t").send().await.unwrap();
            resp.json::<Value>().await.unwrap()
        }
    };
    poll("the REQ to register", STEP, async || {
        let u = usage(&relay).await;
        if u["subscriptions"] == 1 { Ok(()) } else { Err(u.to_string()) }
    })
    .await;
    // Reading only the bytes, never answering: the relay pings, waits an interval, closes.
    until_closed(&mut tcp).await;
    let u = usage(&relay).await;
    assert_eq!((u["connections"].clone(), u["subscriptions"].clone()), (json!(0), json!(0)), "{u}");
    // The reading client lived through the same pings.
    let mut alive = reading.await.unwrap();
    assert!(alive.req("still", vec![json!({"limit": 1})]).await.is_empty());
}

#[tokio::test]
async fn the_per_ip_cap_holds_while_another_ip_connects() {
    let relay = TestRelay::start(|c| c.server.max_connections_per_ip = 3).await;
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(relay.connect().await);
    }
    let resp = web_get(relay.http_url("/")).await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        json!({
            "error": "rate-limited: too many connections (max_connections_per_ip); retry in 1s",
            "limit_type": "max_connections_per_ip",
            "retry_after_secs": 1
        })
    );
    let other = reqwest::Client::builder().local_address(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))).build().unwrap();
    let resp = other.get(relay.http_url("/")).header("accept", "application/nostr+json").send().await.unwrap();
    assert_eq!(resp.status(), reqwest::StatusCode::OK);
    // A closed WebSocket gives its place back.
    let first = held.remove(0);
    drop(first);
    poll("the closed socket's place to come back", STEP, async || {
        let resp = web().get(relay.http_url("/")).timeout(STEP).send().await.unwrap();
        if resp.status() == reqwest::StatusCode::OK { Ok(()) } else { Err(resp.status().to_string()) }
    })
    .await;
}

#[tokio::test]
async fn protocol_errors_close_with_their_rfc_6455_status() {
    let relay = TestRelay::start(|c| c.limitation.max_message_length = 1000).await;
    // Text that is not UTF-8: 1007.
    let mut tcp = raw_websocket(&relay, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    tcp.write_all(&client_frame(0x1, &[0x5b, 0xff, 0xfe, 0x5d])).await.unwrap();
    let got = until_closed(&mut tcp).await;
    assert_eq!(close_code(&got), Some(1007));
    // A reserved opcode: 1002.
    let mut tcp = raw_websocket(&relay, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    tcp.write_all(&client_frame(0x3, b"?")).await.unwrap();
    let got = until_closed(&mut tcp).await;
    assert_eq!(close_code(&got), Some(1002));
    // A frame past what the relay reads at all (2 × max_message_length, at least + 64 KiB): 1009.
    let mut tcp = raw_websocket(&relay, IpAddr::V4(Ipv4Addr::LOCALHOST)).await;
    let mut header = vec![0x81, 0x80 | 127];
    header.extend_from_slice(&(1u64 << 20).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    tcp.write_all(&header).await.unwrap();
    let got = until_closed(&mut tcp).await;
    assert_eq!(close_code(&got), Some(1009));
    // Everyone else is still served.
    let mut c = relay.connect().await;
    assert!(c.req("s", vec![json!({"limit": 1})]).await.is_empty());
}

#[tokio::test]
async fn a_reader_that_keeps_up_receives_every_event_of_an_unpaced_burst() {
    let relay = TestRelay::start(generous).await;
    let mut reader = relay.connect().await;
    for s in 0..5 {
        assert!(reader.req(&format!("s{s}"), vec![json!({"kinds": [1]})]).await.is_empty());
    }
    let mut publisher = relay.connect().await;
    let k = keys(33);
    let events: Vec<_> = (0..5000).map(|i| sign(&k, now() - 5000 + i, 1, &[], &format!("burst {i}"))).collect();
    let burst = tokio::spawn(async move {
        for e in &events {
            publisher.send(json!(["EVENT", e])).await;
        }
        for _ in &events {
            assert_eq!(publisher.recv().await[2], true);
        }
    });
    let mut per_sub = std::collections::HashMap::new();
    for _ in 0..25_000 {
        let f = reader.recv().await;
        assert_eq!(f[0], "EVENT", "{f}");
        *per_sub.entry(f[1].as_str().unwrap().to_string()).or_insert(0) += 1;
    }
    burst.await.unwrap();
    assert_eq!(per_sub.len(), 5);
    assert!(per_sub.values().all(|n| *n == 5000), "{per_sub:?}");
    reader.assert_nothing_before_barrier("a frame past the burst").await;
}

#[tokio::test]
async fn a_thousand_idle_sockets_leave_a_fresh_client_served_and_are_released_when_they_close() {
    // Both ends of every socket are in this process.
    rlimit::increase_nofile_limit(4096).unwrap();
    let relay = TestRelay::start(|c| c.admin.token = "t".into()).await;
    let sources: Vec<IpAddr> = (10..15).map(|n| IpAddr::V4(Ipv4Addr::new(127, 0, 0, n))).collect();
    let connections = |relay: &TestRelay, ip: IpAddr| {
        let url = relay.http_url(&format!("/admin/v1/usage/ip/{ip}"));
        async move {
            let resp = web().get(url).bearer_auth("t").send().await.unwrap();
            resp.json::<Value>().await.unwrap()["connections"].clone()
        }
    };
    let (mut idle, url) = (Vec::new(), relay.ws_url());
    for &ip in &sources {
        let opening = (0..200).map(|_| Client::connect_from(&url, ip));
        idle.extend(futures_util::future::join_all(opening).await);
    }
    for &ip in &sources {
        assert_eq!(connections(&relay, ip).await, json!(200), "{ip}");
    }
    let mut fresh = relay.connect().await;
    let event = sign(&keys(1), now(), 1, &[], "beside a thousand idle sockets");
    assert_ok(&fresh.publish(&event).await, &event.id.to_hex(), true, "");
    assert_eq!(fresh.req_ids("s", vec![json!({"ids": [event.id.to_hex()]})]).await, vec![event.id.to_hex()]);
    drop(idle);
    for &ip in &sources {
        poll(&format!("the closed sockets of {ip} to be released"), STEP, async || {
            let held = connections(&relay, ip).await;
            if held == json!(0) { Ok(()) } else { Err(held.to_string()) }
        })
        .await;
    }
}
