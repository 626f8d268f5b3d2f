//! `chat`: a public chat's busy hour on any relay — NIP-28 channels, which every relay serves
//! (hearth's own NIP-29 groups are measured by `groups`; no peer serves them). `channels` rooms
//! with `history` messages each; `members` sockets, each a member of `rooms_each` rooms, opening
//! them as a chat client does (`{"kinds": [42], "#e": [<room>], "limit": 50}` each, all at once,
//! each timed from its REQ to its EOSE; a room refused with CLOSED, or with no EOSE within 30 s,
//! is counted as not opened); then `messages` new messages at `rate`/s, each timed until
//! every member of its room has it.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;

use super::workloads::{deliveries, delivery_times, send_paced};
use super::*;
use crate::stats::percentile_ms;
use hearth::protocol::{Event, Keys, Kind, Timestamp};

/// What one run asks of the relay.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Chat {
    /// Rooms.
    pub channels: usize,
    /// Member sockets.
    pub members: usize,
    /// Rooms each member is in.
    pub rooms_each: usize,
    /// Messages stored in each room before the members come.
    pub history: usize,
    /// Messages sent while the members listen.
    pub messages: usize,
    /// Messages a second.
    pub rate: u64,
}

/// Messages a second the history is stored at (not what is measured).
const HISTORY_RATE: u64 = 1_000;

/// The history a room's newcomer is sent.
const ROOM_LIMIT: u64 = 50;

/// The rooms member `m` is in.
fn rooms_of(chat: &Chat, m: usize) -> Vec<usize> {
    (0..chat.rooms_each.min(chat.channels)).map(|k| (m * chat.rooms_each + k) % chat.channels).collect()
}

/// A kind-42 message in `room` (the kind-40 event `root`).
fn message(keys: &Keys, root: &Event, at: u64, text: &str) -> Event {
    let tags = vec![vec!["e".to_string(), root.id.to_hex(), String::new(), "root".to_string()]];
    keys.sign(Timestamp(at), Kind(42), tags, text)
}

/// See the module doc.
pub(crate) async fn chat(relay: &str, chat: Chat) -> Res<Report> {
    let chat = Chat { channels: chat.channels.max(1), members: chat.members.max(1), ..chat };
    let now = Timestamp::now().0;
    let owner = Keys::from_bytes([201; 32]).map_err(err)?;
    let people: Vec<Keys> =
        (0..64u8).map(|i| Keys::from_bytes([i.wrapping_add(1); 32]).map_err(err)).collect::<Res<_>>()?;
    let roots: Vec<Event> = (0..chat.channels)
        .map(|c| {
            owner.sign(Timestamp(now - 1), Kind(40), vec![], &json!({"name": format!("room {now} {c}")}).to_string())
        })
        .collect();
    let mut stored = roots.clone();
    for (c, root) in roots.iter().enumerate() {
        for i in 0..chat.history {
            let at = now - 1 - (chat.history - i) as u64;
            stored.push(message(&people[(c + i) % people.len()], root, at, &format!("history {c} {i}")));
        }
    }
    // At a pace every relay takes on one connection (chorus drops a publisher faster than its
    // broadcast drains: at 5,000/s it did).
    send_paced(relay, &stored, HISTORY_RATE).await?;

    // Each member's socket: its rooms opened at once, each timed to its EOSE; then every live
    // message of its rooms, its id and when it came (until all have come, or the relay is quiet
    // for `QUIET`).
    let ready = Arc::new(Semaphore::new(0));
    let (started, started_rx) = tokio::sync::watch::channel(false);
    let in_room = |room: usize| (0..chat.messages).filter(|i| i % chat.channels == room).count();
    let mut receivers = Vec::new();
    let mut openers = Vec::new();
    let mut expected = 0;
    for m in 0..chat.members {
        let (mut tx, mut rx) = connect(relay).await?.split();
        let rooms = rooms_of(&chat, m);
        let waiting: usize = rooms.iter().map(|r| in_room(*r)).sum();
        expected += waiting;
        let rooms: Vec<String> = rooms.iter().map(|r| roots[*r].id.to_hex()).collect();
        let (ready, mut live) = (ready.clone(), started_rx.clone());
        let (opened_tx, opened_rx) = tokio::sync::oneshot::channel::<(Vec<Duration>, Vec<String>)>();
        openers.push(opened_rx);
        receivers.push(tokio::spawn(async move {
            let mut asked: HashMap<String, Instant> = HashMap::new();
            for (k, room) in rooms.iter().enumerate() {
                let frame = json!(["REQ", format!("r{k}"), {"kinds": [42], "#e": [room], "limit": ROOM_LIMIT}]);
                asked.insert(format!("r{k}"), Instant::now());
                if tx.send(Message::text(frame.to_string())).await.is_err() {
                    return Vec::new();
                }
            }
            // A room the relay refuses (CLOSED) or never ends (no EOSE before it is quiet for
            // `QUIET`) is left out of the rooms opened, and the member still listens.
            let (mut opened, mut refused) = (Vec::new(), Vec::new());
            while opened.len() + refused.len() < rooms.len() {
                let Some(frame) = next_frame(&mut rx).await else { break };
                let Some(at) = frame[1].as_str().and_then(|sub| asked.get(sub)) else { continue };
                match frame[0].as_str() {
                    Some("EOSE") => opened.push(at.elapsed()),
                    Some("CLOSED") => refused.push(frame[2].as_str().unwrap_or_default().to_string()),
                    _ => {}
                }
            }
            let _ = opened_tx.send((opened, refused));
            ready.add_permits(1);
            // Listened for from the first live message on (not while another member waits out
            // a room the relay did not end).
            if live.wait_for(|started| *started).await.is_err() {
                return Vec::new();
            }
            deliveries(&mut rx, waiting).await
        }));
    }
    let (mut opens, mut refusals) = (Vec::new(), Vec::new());
    for opened in openers {
        let (times, refused) = opened.await.map_err(|_| "a member's socket ended before its rooms were asked for")?;
        opens.extend(times);
        refusals.extend(refused);
    }
    ready.acquire_many(chat.members as u32).await.map_err(err)?.forget();

    let live: Vec<Event> = (0..chat.messages)
        .map(|i| message(&people[i % people.len()], &roots[i % chat.channels], now, &format!("live {now} {i}")))
        .collect();
    let _ = started.send(true);
    let sent_at = send_paced(relay, &live, chat.rate).await?;
    let mut latencies = delivery_times(receivers, &sent_at).await?;
    let delivered = latencies.len();
    let completeness = delivered as f64 / expected.max(1) as f64;
    let (open_p50, open_p99) = (percentile_ms(&mut opens, 50.0), percentile_ms(&mut opens, 99.0));
    let (p50, p99) = (percentile_ms(&mut latencies, 50.0), percentile_ms(&mut latencies, 99.0));
    let Chat { channels, members, rooms_each, history, messages, rate } = chat;
    let (opened, asked) = (opens.len(), members * rooms_each.min(channels));
    Ok(Report {
        json: json!({"cmd": "chat", "channels": channels, "members": members, "rooms_each": rooms_each,
            "history": history, "messages": messages, "rate": rate, "room_open_p50_ms": open_p50,
            "room_open_p99_ms": open_p99, "rooms_opened": opened, "rooms_asked": asked,
            "rooms_refused": refusals.len(), "first_refusal": refusals.first(), "delivery_p50_ms": p50,
            "delivery_p99_ms": p99, "delivered": delivered, "expected": expected, "completeness": completeness}),
        summary: format!(
            "chat {channels} rooms x {history} messages, {members} members in {rooms_each} rooms each: a room opened \
             (REQ to EOSE, limit {ROOM_LIMIT}) p50 {open_p50:.2} / p99 {open_p99:.2} ms, {opened} of {asked} ({} refused); {messages} messages at \
             {rate}/s delivered p50 {p50:.2} / p99 {p99:.2} ms, {delivered} of {expected} ({:.1} %)",
            refusals.len(),
            completeness * 100.0
        ),
    })
}
