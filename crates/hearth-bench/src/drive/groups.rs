//! NIP-29's chat workload on the release relay: many groups with their members online, each
//! member subscribed to its group's `#h`, messages spread over the groups; beside it in the same
//! run the plain fan-out workload, what a change of a group's state costs next to a message, and
//! the start-up of a store holding many groups' moderation events.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use tokio::sync::Semaphore;

use super::sockets::hold;
use super::sync::import;
use super::workloads::{deliveries, delivery_times, send_paced};
use super::*;
use crate::stats::percentile_ms;
use hearth::protocol::{Event, Keys, Kind, Timestamp};

/// Sockets per source address.
const PER_ADDRESS: usize = 200;
/// Members on one socket (two subscriptions to their group): 20,000 members online fit in the
/// 20,000 files a process may open here, the relay's and this client's alike.
const MEMBERS_PER_SOCKET: usize = 2;
/// Changes and messages timed one at a time for a change's cost.
const TIMED: usize = 200;
/// Events of one group in the start-up store: its creation and nine members added.
const EVENTS_PER_GROUP: usize = 10;

/// An event of `keys` to group `g`.
fn to_group(keys: &Keys, at: u64, kind: u16, g: &str, tags: &[&[&str]], content: &str) -> Event {
    let mut all = vec![vec!["h".to_string(), g.to_string()]];
    all.extend(tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect::<Vec<String>>()));
    keys.sign(Timestamp(at), Kind(kind), all, content)
}

/// A connection authenticated (NIP-42) as `keys`.
async fn authed(
    relay: &str,
    keys: &Keys,
) -> Res<(futures_util::stream::SplitSink<Ws, Message>, futures_util::stream::SplitStream<Ws>)> {
    let (mut tx, mut rx) = connect(relay).await?.split();
    let challenge = loop {
        let frame = next_frame(&mut rx).await.ok_or("no AUTH challenge")?;
        if frame[0] == "AUTH" {
            break frame[1].as_str().unwrap_or("").to_string();
        }
    };
    let auth = hearth::protocol::nip42::answer(keys, relay, &challenge, Timestamp::now());
    tx.send(Message::text(json!(["AUTH", auth]).to_string())).await.map_err(err)?;
    let ok = next_frame(&mut rx).await.ok_or("no OK to AUTH")?;
    if ok[2] != true {
        return Err(format!("AUTH refused: {ok}"));
    }
    Ok((tx, rx))
}

/// Sends `events` back to back and waits for every OK; an error names the first refusal.
async fn publish_all(
    tx: &mut futures_util::stream::SplitSink<Ws, Message>,
    rx: &mut futures_util::stream::SplitStream<Ws>,
    events: &[Event],
) -> Res<()> {
    for e in events {
        tx.send(Message::text(json!(["EVENT", e]).to_string())).await.map_err(err)?;
    }
    for _ in events {
        let ok = next_frame(rx).await.ok_or("the relay went quiet")?;
        if ok[0] == "OK" && ok[2] != true {
            return Err(format!("refused: {ok}"));
        }
    }
    Ok(())
}

/// Each of `events`, sent alone: the time to its OK.
async fn timed(
    tx: &mut futures_util::stream::SplitSink<Ws, Message>,
    rx: &mut futures_util::stream::SplitStream<Ws>,
    events: &[Event],
) -> Res<Vec<Duration>> {
    let mut took = Vec::with_capacity(events.len());
    for e in events {
        let started = Instant::now();
        publish_all(tx, rx, std::slice::from_ref(e)).await?;
        took.push(started.elapsed());
    }
    Ok(took)
}

/// The chat workload: `groups` groups of `members` members online, `messages` messages at
/// `rate` a second; then the plain fan-out beside it, a change's cost, and a start-up with
/// `startup_groups` groups in the store.
pub(crate) async fn groups(
    groups: usize,
    members: usize,
    messages: usize,
    rate: u64,
    startup_groups: usize,
) -> Res<Vec<Report>> {
    let conns = (groups * members).div_ceil(MEMBERS_PER_SOCKET);
    let _ = rlimit::increase_nofile_limit(conns as u64 + 2048);
    let cap = (conns + 1024).to_string();
    let relay = Spawned::start("groups", &[("HEARTH_SERVER__MAX_CONNECTIONS", cap.as_str())])?;
    let outcome = chat(&relay, groups, members, messages, rate).await;
    relay.stop();
    let mut reports = outcome?;
    reports.push(startup(startup_groups)?);
    Ok(reports)
}

async fn chat(relay: &Spawned, groups: usize, members: usize, messages: usize, rate: u64) -> Res<Vec<Report>> {
    let url = relay.relay.clone();
    let addr: SocketAddr = url.trim_start_matches("ws://").trim_end_matches('/').parse().map_err(err)?;
    let admin = Keys::from_bytes([201; 32]).map_err(err)?;
    let (mut atx, mut arx) = authed(&url, &admin).await?;
    let t0 = Timestamp::now().0;
    let ids: Vec<String> = (0..groups).map(|g| format!("channel-{g}")).collect();
    let creates: Vec<Event> = ids.iter().map(|g| to_group(&admin, t0, 9007, g, &[], "")).collect();
    let started = Instant::now();
    publish_all(&mut atx, &mut arx, &creates).await?;
    let create_secs = started.elapsed().as_secs_f64();
    let sockets = (groups * members).div_ceil(MEMBERS_PER_SOCKET);
    eprintln!(
        "groups: {groups} created in {create_secs:.1} s; opening {sockets} sockets for {} members",
        groups * members
    );
    // Members online: each subscribed to its group's messages, two to a socket.
    let held = hold(addr, sockets, PER_ADDRESS, 2).await?;
    let ready = Arc::new(Semaphore::new(0));
    let mut receivers = Vec::with_capacity(held.len());
    for (i, ws) in held.into_iter().enumerate() {
        let (mut tx, mut rx) = ws.split();
        let g = ((i * MEMBERS_PER_SOCKET) / members.max(1)).min(groups.saturating_sub(1));
        let group = ids[g].clone();
        let ready = ready.clone();
        // Message i goes to group i % groups, and to each subscription of it.
        let expected = MEMBERS_PER_SOCKET * (messages / groups.max(1) + usize::from(g < messages % groups.max(1)));
        receivers.push(tokio::spawn(async move {
            for member in 0..MEMBERS_PER_SOCKET {
                let req = json!(["REQ", format!("m{member}"), {"kinds": [9], "#h": [group], "limit": 0}]);
                if tx.send(Message::text(req.to_string())).await.is_err() {
                    return Vec::new();
                }
            }
            let mut eose = 0;
            while let Some(frame) = next_frame(&mut rx).await {
                if frame[0] == "EOSE" {
                    eose += 1;
                    if eose == MEMBERS_PER_SOCKET {
                        break;
                    }
                }
            }
            ready.add_permits(1);
            deliveries(&mut rx, expected).await
        }));
    }
    ready.acquire_many(receivers.len() as u32).await.map_err(err)?.forget();
    eprintln!("groups: every member subscribed; {messages} messages at {rate}/s");
    let author = Keys::from_bytes([202; 32]).map_err(err)?;
    let batch: Vec<Event> = (0..messages)
        .map(|i| to_group(&author, t0, 9, &ids[i % groups.max(1)], &[], &format!("message {i}")))
        .collect();
    let sent_at = send_paced(&url, &batch, rate).await?;
    // Receivers that got all they expect end; the others at QUIET after the last message.
    let mut latencies = delivery_times(receivers, &sent_at).await?;
    let want = messages * members.div_ceil(MEMBERS_PER_SOCKET) * MEMBERS_PER_SOCKET;
    let delivered = latencies.len();
    let (p50, p99) = (percentile_ms(&mut latencies, 50.0), percentile_ms(&mut latencies, 99.0));
    let rss_mb = relay.rss_kb() as f64 / 1024.0;
    let chat = Report {
        json: json!({"cmd": "groups", "groups": groups, "members": members, "messages": messages, "rate": rate,
            "create_secs": create_secs, "p50_ms": p50, "p99_ms": p99, "delivered": delivered, "expected": want, "rss_mb": rss_mb}),
        summary: format!(
            "groups {groups} x {members} members online, {messages} messages at {rate}/s: fan-out to #h subscribers p50 {p50:.2} ms \
             p99 {p99:.2} ms, {delivered}/{want} delivered; {groups} groups created in {create_secs:.1} s; relay RSS {rss_mb:.0} MB"
        ),
    };
    eprintln!("groups: fan-out measured; the plain fan-out beside it");
    // The plain fan-out, on the same relay, its group members still connected.
    let plain = super::workloads::fanout(&url, 500, 200, 100).await?;
    // A change's cost: a member added (four state events signed and stored) beside a message.
    let changes: Vec<Event> = (0..TIMED)
        .map(|i| {
            let member =
                Keys::from_bytes([(i % 200) as u8 + 1; 32]).map(|k| k.public_key().to_hex()).unwrap_or_default();
            to_group(&admin, Timestamp::now().0, 9000, &ids[i % groups.max(1)], &[&["p", &member]], "")
        })
        .collect();
    let plain_messages: Vec<Event> = (0..TIMED)
        .map(|i| to_group(&admin, Timestamp::now().0, 9, &ids[i % groups.max(1)], &[], &format!("timed {i}")))
        .collect();
    let mut change_took = timed(&mut atx, &mut arx, &changes).await?;
    let mut message_took = timed(&mut atx, &mut arx, &plain_messages).await?;
    let (c50, m50) = (percentile_ms(&mut change_took, 50.0), percentile_ms(&mut message_took, 50.0));
    let (c99, m99) = (percentile_ms(&mut change_took, 99.0), percentile_ms(&mut message_took, 99.0));
    let cost = Report {
        json: json!({"cmd": "groups-change", "timed": TIMED, "change_p50_ms": c50, "change_p99_ms": c99,
            "message_p50_ms": m50, "message_p99_ms": m99, "ratio_p50": c50 / m50.max(1e-9)}),
        summary: format!(
            "a member added (9000: four state events signed and stored) p50 {c50:.2} / p99 {c99:.2} ms to its OK, beside a \
             message p50 {m50:.2} / p99 {m99:.2} ms: {:.1}x",
            c50 / m50.max(1e-9)
        ),
    };
    Ok(vec![chat, plain, cost])
}

/// A store of `groups` groups (each made and given nine members by its admin) imported, then the
/// relay started on it: the time until it listens, with every group folded.
fn startup(groups: usize) -> Res<Report> {
    let dir = scratch_dir("groups-startup")?;
    let admin = Keys::from_bytes([203; 32]).map_err(err)?;
    let t0 = Timestamp::now().0.saturating_sub(3600);
    let mut lines = Vec::with_capacity(groups * EVENTS_PER_GROUP);
    for g in 0..groups {
        let id = format!("g{g}");
        lines.push(json!(to_group(&admin, t0, 9007, &id, &[], "")).to_string());
        for m in 1..EVENTS_PER_GROUP {
            let member = Keys::from_bytes([m as u8; 32]).map_err(err)?.public_key().to_hex();
            lines.push(json!(to_group(&admin, t0 + m as u64, 9000, &id, &[&["p", &member]], "")).to_string());
        }
    }
    import(&dir, lines.iter().map(String::as_str))?;
    let started = Instant::now();
    let relay = Spawned::start_on(dir, &[])?;
    let secs = started.elapsed().as_secs_f64();
    let folded = relay.last_lines().lines().find(|l| l.contains("groups folded")).unwrap_or("").to_string();
    let rss_mb = relay.rss_kb() as f64 / 1024.0;
    relay.stop();
    if !folded.contains(&format!("groups={groups} ")) {
        return Err(format!("the relay did not fold {groups} groups: {folded}"));
    }
    Ok(Report {
        json: json!({"cmd": "groups-startup", "groups": groups, "events": lines.len(), "listening_secs": secs, "rss_mb": rss_mb}),
        summary: format!(
            "start-up on {groups} groups ({} moderation events): listening after {secs:.2} s, every group folded; RSS {rss_mb:.0} MB",
            lines.len()
        ),
    })
}
