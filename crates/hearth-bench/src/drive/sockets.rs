//! Idle sockets: what each one costs the relay, whether a fresh client is still served while
//! thousands are held, and whether their memory comes back when they close; and what an open
//! subscription costs, with a chat client's worth of them on each socket.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use futures_util::SinkExt;
use serde_json::json;
use tokio::net::TcpSocket;

use super::*;
use crate::stats::percentile_ms;

/// Sockets opened at once while filling.
const OPENING: usize = 256;
/// Sockets per source address (loopback has a whole /8; the per-IP cap stays at its default).
const PER_ADDRESS: usize = 200;
/// Fresh clients timed while the idle sockets are held.
const PROBES: usize = 50;

/// A WebSocket from `127.0.0.x`, once the relay's AUTH challenge has arrived (the upgrade is
/// done and the connection's task is in its loop).
async fn open_from(addr: SocketAddr, source: Ipv4Addr) -> Res<Ws> {
    let socket = TcpSocket::new_v4().map_err(err)?;
    socket.bind(SocketAddr::new(IpAddr::V4(source), 0)).map_err(err)?;
    let stream = socket.connect(addr).await.map_err(err)?;
    let url = format!("ws://{addr}/");
    let config = Some(hearth::client::ws::socket_config());
    let (mut ws, _) =
        tokio_tungstenite::client_async_with_config(url, MaybeTlsStream::Plain(stream), config).await.map_err(err)?;
    match tokio::time::timeout(QUIET, ws.next()).await {
        Ok(Some(Ok(Message::Text(_)))) => Ok(ws),
        other => Err(format!("no AUTH challenge from {addr}: {other:?}")),
    }
}

/// From a new socket to EOSE of a one-event REQ.
async fn probe(addr: SocketAddr) -> Res<Duration> {
    let started = Instant::now();
    let mut ws = open_from(addr, Ipv4Addr::new(127, 0, 0, 1)).await?;
    ws.send(Message::text(json!(["REQ", "probe", {"limit": 1}]).to_string())).await.map_err(err)?;
    loop {
        match tokio::time::timeout(QUIET, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if t.as_str().starts_with("[\"EOSE\"") => break,
            Ok(Some(Ok(_))) => {}
            other => return Err(format!("probe: no EOSE: {other:?}")),
        }
    }
    let took = started.elapsed();
    let _ = ws.close(None).await;
    Ok(took)
}

/// The socket address of a spawned relay.
fn socket_of(relay: &Spawned) -> Res<SocketAddr> {
    relay.relay.trim_start_matches("ws://").trim_end_matches('/').parse().map_err(|e| format!("relay address: {e}"))
}

/// Opens `conns` WebSockets, `OPENING` at a time, `per_address` from each source address
/// `127.<net>.x.y` (loopback has a whole /8).
pub(super) async fn hold(addr: SocketAddr, conns: usize, per_address: usize, net: u8) -> Res<Vec<Ws>> {
    let mut held = Vec::with_capacity(conns);
    for chunk in (0..conns).collect::<Vec<_>>().chunks(OPENING) {
        let opening = chunk.iter().map(|&i| {
            let n = 2 + i / per_address;
            open_from(addr, Ipv4Addr::new(127, net, (n / 250) as u8, (n % 250) as u8 + 1))
        });
        for ws in futures_util::future::join_all(opening).await {
            held.push(ws?);
        }
    }
    Ok(held)
}

async fn probes(addr: SocketAddr) -> Res<Vec<Duration>> {
    let mut took = Vec::with_capacity(PROBES);
    for _ in 0..PROBES {
        took.push(probe(addr).await?);
    }
    Ok(took)
}

/// Starts a release relay, holds `conns` idle WebSockets on it, and reports the resident memory
/// each one adds, fresh clients' latency to EOSE before and while they are held, and how much of
/// that memory is given back after they close.
pub(crate) async fn idle(conns: usize) -> Res<Report> {
    // This process holds the client end of every socket.
    let _ = rlimit::increase_nofile_limit(conns as u64 + 1024);
    let cap = (conns + 1024).to_string();
    let relay = Spawned::start("idle", &[("HEARTH_SERVER__MAX_CONNECTIONS", &cap)])?;
    let outcome = async {
        let addr = socket_of(&relay)?;
        // Warm: the first connections allocate what every later one reuses.
        let mut alone = probes(addr).await?;
        let base_kb = relay.rss_kb();
        let started = Instant::now();
        let held = hold(addr, conns, PER_ADDRESS, 0).await?;
        let fill_secs = started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let held_kb = relay.rss_kb();
        let mut loaded = probes(addr).await?;
        drop(held);
        // The relay notices each close, ends its task and frees what the connection held.
        tokio::time::sleep(Duration::from_secs(3)).await;
        let after_kb = relay.rss_kb();
        let per_socket = held_kb.saturating_sub(base_kb) as f64 * 1024.0 / conns.max(1) as f64;
        let grown = held_kb.saturating_sub(base_kb).max(1) as f64;
        let returned = held_kb.saturating_sub(after_kb) as f64 / grown;
        let (alone_p50, alone_max) = (percentile_ms(&mut alone, 50.0), percentile_ms(&mut alone, 100.0));
        let (loaded_p50, loaded_max) = (percentile_ms(&mut loaded, 50.0), percentile_ms(&mut loaded, 100.0));
        Ok(Report {
            json: json!({"cmd": "idle", "conns": conns, "fill_secs": fill_secs, "rss_base_kb": base_kb,
                "rss_held_kb": held_kb, "rss_after_close_kb": after_kb, "bytes_per_socket": per_socket,
                "returned_ratio": returned, "fresh_p50_ms": alone_p50, "fresh_max_ms": alone_max,
                "held_p50_ms": loaded_p50, "held_max_ms": loaded_max}),
            summary: format!(
                "idle {conns} sockets: {:.1} KB each ({base_kb} -> {held_kb} kB RSS, {:.0}% returned after close: \
                 {after_kb} kB); fresh client to EOSE p50 {alone_p50:.2} / max {alone_max:.2} ms alone, \
                 p50 {loaded_p50:.2} / max {loaded_max:.2} ms beside them",
                per_socket / 1024.0,
                returned * 100.0
            ),
        })
    }
    .await;
    relay.stop();
    outcome
}

/// Connections per source address in `subs`: with 200 subscriptions each, the default
/// `server.max_subscriptions_per_ip` (2,000) of every address is used to the last place.
const SUBS_PER_ADDRESS: usize = 10;

/// Opens `subs` subscriptions on `ws`, one `#h` channel each as a chat client asks for them, and
/// waits for every EOSE.
async fn subscribe(ws: &mut Ws, conn: usize, subs: usize) -> Res<()> {
    for s in 0..subs {
        let filter = json!({"kinds": [9, 10, 11, 12], "#h": [format!("channel-{conn}-{s}")], "limit": 50});
        ws.send(Message::text(json!(["REQ", format!("ch{s}"), filter]).to_string())).await.map_err(err)?;
    }
    let mut eose = 0;
    while eose < subs {
        match tokio::time::timeout(QUIET, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) if t.as_str().starts_with("[\"EOSE\"") => eose += 1,
            Ok(Some(Ok(Message::Text(t)))) => return Err(format!("subscription refused: {t}")),
            Ok(Some(Ok(_))) => {}
            other => return Err(format!("no EOSE for every subscription: {other:?}")),
        }
    }
    Ok(())
}

/// Starts a release relay (quotas off: this measures memory, not admission), holds `conns`
/// WebSockets on it and opens `subs` subscriptions on each: the resident memory each subscription
/// adds beside an idle socket's, and the relay's whole RSS with all of them open.
pub(crate) async fn subs(conns: usize, subs: usize) -> Res<Report> {
    let _ = rlimit::increase_nofile_limit(conns as u64 + 1024);
    let cap = (conns + 1024).to_string();
    let total = (conns * subs + 1000).to_string();
    let per_conn = subs.max(1).to_string();
    let env = [
        ("HEARTH_SERVER__MAX_CONNECTIONS", cap.as_str()),
        ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_TOTAL", total.as_str()),
        ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_PER_IP", "2000"),
        ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", per_conn.as_str()),
        ("HEARTH_LIMITS__ENABLED", "false"),
    ];
    let relay = Spawned::start("subs", &env)?;
    let outcome = async {
        let addr = socket_of(&relay)?;
        probes(addr).await?;
        let base_kb = relay.rss_kb();
        let mut held = hold(addr, conns, SUBS_PER_ADDRESS, 1).await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle_kb = relay.rss_kb();
        let started = Instant::now();
        for (c, chunk) in held.chunks_mut(OPENING).enumerate() {
            let opening = chunk.iter_mut().enumerate().map(|(i, ws)| subscribe(ws, c * OPENING + i, subs));
            for done in futures_util::future::join_all(opening).await {
                done?;
            }
        }
        let open_secs = started.elapsed().as_secs_f64();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let subs_kb = relay.rss_kb();
        let mut beside = probes(addr).await?;
        drop(held);
        let count = (conns * subs).max(1) as f64;
        let per_sub = subs_kb.saturating_sub(idle_kb) as f64 * 1024.0 / count;
        let per_socket = idle_kb.saturating_sub(base_kb) as f64 * 1024.0 / conns.max(1) as f64;
        let (p50, max) = (percentile_ms(&mut beside, 50.0), percentile_ms(&mut beside, 100.0));
        Ok(Report {
            json: json!({"cmd": "subs", "conns": conns, "subs_per_conn": subs, "open_secs": open_secs,
                "rss_base_kb": base_kb, "rss_idle_kb": idle_kb, "rss_subs_kb": subs_kb,
                "bytes_per_socket": per_socket, "bytes_per_subscription": per_sub,
                "fresh_p50_ms": p50, "fresh_max_ms": max}),
            summary: format!(
                "subs {conns} sockets x {subs}: {:.0} bytes per subscription, {:.1} KB per idle socket; RSS \
                 {base_kb} -> {idle_kb} kB idle -> {subs_kb} kB with every subscription open ({open_secs:.1} s to \
                 open them); fresh client to EOSE beside them p50 {p50:.2} / max {max:.2} ms",
                per_sub,
                per_socket / 1024.0,
            ),
        })
    }
    .await;
    relay.stop();
    outcome
}
