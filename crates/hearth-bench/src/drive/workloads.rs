//! One load against one relay each: ingest, ping round trips, the query mix, fan-out (the
//! physical bounds and the limiter on its own are `bounds.rs`'s).

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth::protocol::{Event, Filter, Keys, Kind, Timestamp};
use serde_json::{Value, json};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;

use super::*;
use crate::stats::{Rng, percentile_ms};

#[derive(Default)]
pub(super) struct IngestTally {
    ok_true: u64,
    ok_false: u64,
    first_refusal: Option<String>,
    latencies: Vec<Duration>,
}

/// Publishes `file` over `conns` connections, `inflight` unacknowledged EVENTs each.
pub(crate) async fn ingest(relay: &str, file: &Path, conns: usize, inflight: usize) -> Res<Report> {
    let lines = read_lines(file)?;
    let total = lines.len();
    let conns = conns.max(1);
    let mut chunks: Vec<Vec<String>> = vec![Vec::new(); conns];
    for (i, line) in lines.into_iter().enumerate() {
        chunks[i % conns].push(line);
    }
    let tally = Arc::new(Mutex::new(IngestTally::default()));
    let started = Instant::now();
    let mut tasks = Vec::new();
    for chunk in chunks {
        let ws = connect(relay).await?;
        let tally = tally.clone();
        tasks.push(tokio::spawn(async move {
            let (mut tx, mut rx) = ws.split();
            let window = Arc::new(Semaphore::new(inflight.max(1)));
            let sent: Arc<Mutex<HashMap<String, Instant>>> = Arc::new(Mutex::new(HashMap::new()));
            let expected = chunk.len();
            let (w, s) = (window.clone(), sent.clone());
            let writer = tokio::spawn(async move {
                for line in chunk {
                    let Ok(permit) = w.acquire().await else { return };
                    permit.forget();
                    let id = serde_json::from_str::<Value>(&line)
                        .ok()
                        .and_then(|v| v["id"].as_str().map(str::to_string))
                        .unwrap_or_default();
                    if let Ok(mut s) = s.lock() {
                        s.insert(id, Instant::now());
                    }
                    if tx.send(Message::text(format!("[\"EVENT\",{line}]"))).await.is_err() {
                        return;
                    }
                }
            });
            let mut got = 0;
            while got < expected {
                let Some(frame) = next_frame(&mut rx).await else { break };
                if frame[0] != "OK" {
                    continue;
                }
                got += 1;
                window.add_permits(1);
                let at = frame[1].as_str().and_then(|id| sent.lock().ok().and_then(|mut s| s.remove(id)));
                if let Ok(mut t) = tally.lock() {
                    if let Some(at) = at {
                        t.latencies.push(at.elapsed());
                    }
                    if frame[2] == true {
                        t.ok_true += 1;
                    } else {
                        t.ok_false += 1;
                        if t.first_refusal.is_none() {
                            t.first_refusal = frame[3].as_str().map(str::to_string);
                        }
                    }
                }
            }
            writer.abort();
        }));
    }
    for t in tasks {
        t.await.map_err(err)?;
    }
    let secs = started.elapsed().as_secs_f64();
    let mut t = tally.lock().map_err(err)?;
    let missing = total as u64 - t.ok_true - t.ok_false;
    let rate = t.ok_true as f64 / secs;
    let (p50, p99) = (percentile_ms(&mut t.latencies, 50.0), percentile_ms(&mut t.latencies, 99.0));
    // The longest an OK took: a stall of the writer (a compaction's pause) shows here even when
    // it held up fewer events than the p99 counts.
    let max = t.latencies.iter().max().map_or(0.0, |d| d.as_secs_f64() * 1e3);
    Ok(Report {
        json: json!({"cmd": "ingest", "conns": conns, "inflight": inflight, "events": total, "secs": secs,
            "events_per_sec": rate, "ok_p50_ms": p50, "ok_p99_ms": p99, "ok_max_ms": max, "ok_true": t.ok_true,
            "ok_false": t.ok_false, "missing": missing, "first_refusal": t.first_refusal}),
        summary: format!(
            "ingest {conns}x{inflight}: {rate:.0} events/s, OK p50 {p50:.2} ms p99 {p99:.2} ms max {max:.0} ms, true {} false {} missing {missing}",
            t.ok_true, t.ok_false
        ),
    })
}

/// WebSocket ping → pong round trips, one at a time: what a 1 × 1 ingest costs before the relay
/// does any work (the relay's WebSocket layer answers a ping itself).
pub(crate) async fn rtt(relay: &str, n: usize) -> Res<Report> {
    let (mut tx, mut rx) = connect(relay).await?.split();
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let payload = (i as u64).to_be_bytes().to_vec();
        let started = Instant::now();
        tx.send(Message::Ping(payload.clone().into())).await.map_err(err)?;
        loop {
            match tokio::time::timeout(QUIET, rx.next()).await {
                Ok(Some(Ok(Message::Pong(p)))) if p[..] == payload[..] => break,
                Ok(Some(Ok(_))) => {}
                _ => return Err("no pong from the relay".into()),
            }
        }
        samples.push(started.elapsed());
    }
    let (p50, p99) = (percentile_ms(&mut samples, 50.0), percentile_ms(&mut samples, 99.0));
    Ok(Report {
        json: json!({"cmd": "rtt", "pings": n, "p50_ms": p50, "p99_ms": p99}),
        summary: format!("rtt: WebSocket ping round trip p50 {p50:.3} ms p99 {p99:.3} ms ({n} pings)"),
    })
}

/// The four query shapes of the mix, drawn from `events` (a sample of the file) and the file's
/// newest `created_at`.
pub(super) fn shapes(events: &[Event], newest: u64, n: usize) -> Vec<(&'static str, Value)> {
    let mut rng = Rng::new(42);
    (0..n)
        .map(|i| match i % 4 {
            0 => ("author", json!({"authors": [events[rng.below(events.len() as u64) as usize].pubkey], "limit": 50})),
            1 => ("kind_tag", json!({"kinds": [1], "#t": [TOPICS[rng.below(20) as usize]], "limit": 100})),
            2 => {
                let ids: Vec<_> = (0..20).map(|_| events[rng.below(events.len() as u64) as usize].id).collect();
                ("ids", json!({"ids": ids}))
            }
            _ => {
                let since = newest - rng.below(30 * 86_400);
                ("window", json!({"since": since, "until": since + 6 * 3600, "limit": 200}))
            }
        })
        .collect()
}

/// Each event of a JSON-lines file in turn: the file is read as it goes, never held whole (a
/// 10M-event file is 6.4 GB).
///
/// The pages it has read are dropped from the page cache as it goes: two passes over a file of
/// many GB would otherwise push the relay's store out of it, and the query mix that follows is
/// meant to meet a warm store.
fn each_event(file: &Path, mut with: impl FnMut(Event)) -> Res<()> {
    use std::io::BufRead;
    const DROP_EVERY: u64 = 64 << 20;
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, f);
    let (mut line, mut read, mut dropped) = (String::new(), 0u64, 0u64);
    loop {
        line.clear();
        let n = reader.read_line(&mut line).map_err(err)?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if read - dropped >= DROP_EVERY {
            drop_cached(reader.get_ref(), std::num::NonZeroU64::new(read));
            dropped = read;
        }
        let text = line.trim_end_matches(['\n', '\r']);
        if !text.is_empty() {
            with(Event::from_json(text).map_err(err)?);
        }
    }
    drop_cached(reader.get_ref(), None);
    Ok(())
}

/// Asks the kernel to drop the cached pages of `file`'s first `len` bytes (all, for `None`).
/// Advice only: where it is ignored (or has no such call) the measurement suffers, not the run.
fn drop_cached(file: &std::fs::File, len: Option<std::num::NonZeroU64>) {
    #[cfg(any(target_os = "linux", target_os = "android", target_os = "freebsd"))]
    let _ = rustix::fs::fadvise(file, 0, len, rustix::fs::Advice::DontNeed);
    #[cfg(not(any(target_os = "linux", target_os = "android", target_os = "freebsd")))]
    let _ = (file, len);
}

/// Events the query mix draws its authors and ids from (a uniform sample of the file).
const SAMPLE: usize = 100_000;

/// Reads every file under `dir` once, so that its pages are in the page cache.
fn warm(dir: &Path) -> Res<u64> {
    sum_files(dir, &mut |path, _| {
        std::io::copy(&mut std::fs::File::open(path).map_err(err)?, &mut std::io::sink()).map_err(err)
    })
}

/// Runs the query mix one REQ at a time and checks each count against the file; with `warm`
/// (the relay's data directory), after reading the store's files once.
pub(crate) async fn query(relay: &str, file: &Path, n: usize, warm_dir: Option<&Path>) -> Res<Report> {
    // Reservoir sampling: every event of the file equally likely to be drawn.
    let (mut sample, mut seen, mut newest, mut rng) = (Vec::with_capacity(SAMPLE), 0u64, 0, Rng::new(7));
    each_event(file, |e| {
        newest = newest.max(e.created_at.0);
        seen += 1;
        if sample.len() < SAMPLE {
            sample.push(e);
        } else if let Some(slot) = sample.get_mut(rng.below(seen) as usize) {
            *slot = e;
        }
    })?;
    if sample.is_empty() {
        return Err("no events in the file".into());
    }
    let mix = shapes(&sample, newest, n);
    drop(sample);
    // The expected counts first, so the client does nothing but the queries while they are timed.
    let filters: Vec<Filter> =
        mix.iter().map(|(_, f)| serde_json::from_value(f.clone()).map_err(err)).collect::<Res<_>>()?;
    let mut matching = vec![0usize; filters.len()];
    each_event(file, |e| {
        for (count, f) in matching.iter_mut().zip(&filters) {
            *count += usize::from(f.matches(&e));
        }
    })?;
    let expected: Vec<usize> =
        matching.iter().zip(&filters).map(|(&m, f)| m.min(f.limit.map_or(usize::MAX, |l| l as usize))).collect();
    let warmed = warm_dir.map(warm).transpose()?;
    let (mut tx, mut rx) = connect(relay).await?.split();
    let mut latencies: HashMap<&str, Vec<Duration>> = HashMap::new();
    let mut mismatches = 0;
    // Per shape: how many the relay refused, and its first refusal's frame.
    let (mut refusals, mut refused): (HashMap<&str, usize>, HashMap<&str, String>) = (HashMap::new(), HashMap::new());
    for (i, ((shape, filter), expected)) in mix.iter().zip(expected).enumerate() {
        let sub = format!("q{i}");
        let started = Instant::now();
        tx.send(Message::text(json!(["REQ", sub, filter]).to_string())).await.map_err(err)?;
        let mut got = 0;
        let answered = loop {
            let text = next_text(&mut rx).await.ok_or("relay went quiet during a query")?;
            match verb_of(&text, &sub)? {
                Some("EVENT") => got += 1,
                Some("EOSE") => break true,
                // Refused (a relay's own rule, e.g. a filter it will not scan): counted, not timed.
                Some("CLOSED") => {
                    refused.entry(shape).or_insert_with(|| text.clone());
                    *refusals.entry(shape).or_default() += 1;
                    break false;
                }
                _ => {}
            }
        };
        if !answered {
            continue;
        }
        latencies.entry(shape).or_default().push(started.elapsed());
        if got != expected {
            mismatches += 1;
        }
        tx.send(Message::text(json!(["CLOSE", sub]).to_string())).await.map_err(err)?;
    }
    let mut per_shape = serde_json::Map::new();
    let mut summary = format!("query x{n}:");
    let mut all = Vec::new();
    for (shape, samples) in latencies.iter_mut() {
        let (p50, p99) = (percentile_ms(samples, 50.0), percentile_ms(samples, 99.0));
        per_shape.insert(shape.to_string(), json!({"p50_ms": p50, "p99_ms": p99, "n": samples.len()}));
        summary.push_str(&format!(" {shape} p50 {p50:.2}/p99 {p99:.2} ms;"));
        all.extend(samples.iter().copied());
    }
    let (p50, p99) = (percentile_ms(&mut all, 50.0), percentile_ms(&mut all, 99.0));
    let refused_total: usize = refusals.values().sum();
    summary.push_str(&format!(
        " all p50 {p50:.2}/p99 {p99:.2} ms; count mismatches {mismatches}; refused {refused_total}"
    ));
    Ok(Report {
        json: json!({"cmd": "query", "queries": n, "p50_ms": p50, "p99_ms": p99, "shapes": per_shape,
            "mismatches": mismatches, "refused": refusals, "first_refusals": refused, "warmed_bytes": warmed}),
        summary,
    })
}

/// The verb of a relay frame of subscription `sub` (`None` for another subscription's), and
/// nothing more: the client must not be what is measured. A compact frame (`["EVENT","q7",…`,
/// as hearth and strfry write them) is read off its first bytes; another one is parsed, which
/// for an `EVENT` means scanning the whole event.
fn verb_of<'a>(text: &'a str, sub: &str) -> Res<Option<&'a str>> {
    let compact = text.strip_prefix("[\"").and_then(|rest| {
        let (verb, rest) = rest.split_once("\",\"")?;
        let rest = rest.strip_prefix(sub)?;
        (rest.starts_with("\",") || rest.starts_with("\"]")).then_some(verb)
    });
    if let Some(verb) = compact.filter(|verb| verb.bytes().all(|b| b.is_ascii_uppercase())) {
        return Ok(Some(verb));
    }
    let head: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).map_err(err)?;
    let same_sub = head.get(1).map(|v| v.get().trim_matches('"')) == Some(sub);
    Ok(head.first().filter(|_| same_sub).map(|v| v.get().trim_matches('"')))
}

/// Publishes `batch` on a connection of its own at `rate` a second and waits for every OK;
/// when each event was sent, by id.
pub(super) async fn send_paced(relay: &str, batch: &[Event], rate: u64) -> Res<HashMap<String, Instant>> {
    let (mut tx, mut rx) = connect(relay).await?.split();
    let events = batch.len();
    let oks = tokio::spawn(async move {
        let mut n = 0;
        while n < events {
            match next_frame(&mut rx).await {
                Some(f) if f[0] == "OK" => n += 1,
                Some(_) => {}
                None => break,
            }
        }
    });
    let mut sent_at: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    for e in batch {
        tick.tick().await;
        sent_at.insert(e.id.to_hex(), Instant::now());
        tx.send(Message::text(json!(["EVENT", e]).to_string())).await.map_err(err)?;
    }
    let _ = oks.await;
    Ok(sent_at)
}

/// How long each delivery the `receivers` saw (an event id and when it came) took from when it
/// was sent.
pub(super) async fn delivery_times(
    receivers: Vec<tokio::task::JoinHandle<Vec<(String, Instant)>>>,
    sent_at: &HashMap<String, Instant>,
) -> Res<Vec<Duration>> {
    let mut latencies = Vec::new();
    for r in receivers {
        for (id, at) in r.await.map_err(err)? {
            if let Some(sent) = sent_at.get(&id) {
                latencies.push(at.saturating_duration_since(*sent));
            }
        }
    }
    Ok(latencies)
}

/// The next `n` events `rx` receives, each its id and when it came (fewer when the relay closes or
/// goes quiet for `QUIET`). Only the id is parsed, borrowed: many subscribers' parsing must not be
/// what is measured.
pub(super) async fn deliveries(rx: &mut futures_util::stream::SplitStream<Ws>, n: usize) -> Vec<(String, Instant)> {
    let mut seen = Vec::with_capacity(n);
    while seen.len() < n {
        let Some(text) = next_text(rx).await else { break };
        let at = Instant::now();
        if let Ok(("EVENT", _, IdOnly { id })) = serde_json::from_str::<(&str, &str, IdOnly)>(&text) {
            seen.push((id.to_string(), at));
        }
    }
    seen
}

/// The id of an event, the rest skipped.
#[derive(serde::Deserialize)]
struct IdOnly<'a> {
    id: &'a str,
}

/// S subscribers, then E events at `rate`/s; measures delivery latency and completeness.
pub(crate) async fn fanout(relay: &str, subs: usize, events: usize, rate: u64) -> Res<Report> {
    let since = Timestamp::now().0;
    let keys = Keys::from_bytes([200; 32]).map_err(err)?;
    let batch: Vec<Event> =
        (0..events).map(|i| keys.sign(Timestamp(since), Kind(1), vec![], &format!("fanout {since} {i}"))).collect();
    let ready = Arc::new(Semaphore::new(0));
    let mut receivers = Vec::new();
    for _ in 0..subs {
        let (mut tx, mut rx) = connect(relay).await?.split();
        let ready = ready.clone();
        receivers.push(tokio::spawn(async move {
            if tx.send(Message::text(json!(["REQ", "f", {"kinds": [1], "since": since}]).to_string())).await.is_err() {
                return Vec::new();
            }
            while let Some(frame) = next_frame(&mut rx).await {
                if frame[0] == "EOSE" {
                    break;
                }
            }
            ready.add_permits(1);
            deliveries(&mut rx, events).await
        }));
    }
    let all_ready = ready.acquire_many(subs as u32).await.map_err(err)?;
    all_ready.forget();
    let sent_at = send_paced(relay, &batch, rate).await?;
    let mut latencies = delivery_times(receivers, &sent_at).await?;
    let delivered = latencies.len();
    let completeness = delivered as f64 / (subs * events).max(1) as f64;
    let (p50, p99) = (percentile_ms(&mut latencies, 50.0), percentile_ms(&mut latencies, 99.0));
    let max = percentile_ms(&mut latencies, 100.0);
    Ok(Report {
        json: json!({"cmd": "fanout", "subs": subs, "events": events, "rate": rate, "p50_ms": p50, "p99_ms": p99,
            "max_ms": max, "delivered": delivered, "completeness": completeness}),
        summary: format!(
            "fanout {subs} subs x {events} events at {rate}/s: p50 {p50:.2} ms p99 {p99:.2} ms max {max:.2} ms, {:.1}% delivered",
            completeness * 100.0
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::verb_of;

    #[test]
    fn a_frames_verb_is_read_for_its_own_subscription_only() {
        let event = r#"{"id":"ab","kind":1,"content":"[\"EOSE\",\"q7\"]"}"#;
        assert_eq!(verb_of(&format!(r#"["EVENT","q7",{event}]"#), "q7").unwrap(), Some("EVENT"));
        assert_eq!(verb_of(r#"["EOSE","q7"]"#, "q7").unwrap(), Some("EOSE"));
        assert_eq!(verb_of(r#"["CLOSED","q7","error: no"]"#, "q7").unwrap(), Some("CLOSED"));
        // Another subscription whose id starts the same, either way round.
        assert_eq!(verb_of(&format!(r#"["EVENT","q70",{event}]"#), "q7").unwrap(), None);
        assert_eq!(verb_of(r#"["EOSE","q7"]"#, "q70").unwrap(), None);
        // Frames written with spaces are parsed; frames of no subscription are none of these.
        assert_eq!(verb_of(&format!(r#"[ "EVENT", "q7", {event} ]"#), "q7").unwrap(), Some("EVENT"));
        assert_eq!(verb_of(r#"["NOTICE","q7"]"#, "q7").unwrap(), Some("NOTICE"));
        assert_eq!(verb_of(r#"["OK","q7",true,""]"#, "q7").unwrap(), Some("OK"));
        assert!(verb_of("not json", "q7").is_err());
    }
}
