//! The workloads: generation, ingest, query mix, fan-out, physical bounds, and the suites.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use hearth::protocol::verify::verify;
use hearth::protocol::{Event, Filter, Keys, Kind, Timestamp};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

use crate::stats::{Rng, percentile_ms};

/// One subcommand's results.
pub struct Report {
    /// One JSON line.
    pub json: Value,
    /// A readable summary.
    pub summary: String,
}

type Res<T> = Result<T, String>;
type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const TOPICS: [&str; 20] = [
    "nostr", "rust", "bitcoin", "music", "art", "food", "travel", "books", "science", "news", "photo", "dev", "linux",
    "garden", "cats", "dogs", "coffee", "sports", "film", "maths",
];
const QUIET: Duration = Duration::from_secs(30);

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

fn author(i: u64) -> Res<Keys> {
    Keys::from_bytes([(i % 100) as u8 + 1; 32]).map_err(err)
}

/// Pre-signs `count` kind-1 events: ~100 authors, 100–300-byte content, `t`/`p` tags,
/// created_at spread over 30 days. Signed on every core; written as JSON lines.
pub fn gen_file(count: usize, out: &Path) -> Res<Report> {
    let started = Instant::now();
    let now = Timestamp::now().0;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let chunk = count.div_ceil(threads).max(1);
    let lines: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Res<Vec<String>> {
                    let mut rng = Rng::new(0x5eed + t as u64);
                    let mut out = Vec::new();
                    for i in (t * chunk)..((t + 1) * chunk).min(count) {
                        let keys = author(i as u64)?;
                        let len = 100 + rng.below(201) as usize;
                        let content: String = (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
                        let mut tags = vec![
                            vec!["t".to_string(), TOPICS[rng.below(20) as usize].to_string()],
                            vec!["p".to_string(), author(rng.below(100))?.public_key().to_hex()],
                        ];
                        if rng.below(3) == 0 {
                            tags.push(vec!["t".to_string(), TOPICS[rng.below(20) as usize].to_string()]);
                        }
                        let at = Timestamp(now - rng.below(30 * 86_400));
                        out.push(keys.sign(at, Kind(1), tags, &format!("{i} {content}")).to_json());
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for h in handles {
            all.extend(h.join().map_err(|_| "signing thread panicked".to_string())??);
        }
        Ok::<_, String>(all)
    })?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(err)?);
    for line in &lines {
        writeln!(file, "{line}").map_err(err)?;
    }
    file.flush().map_err(err)?;
    let secs = started.elapsed().as_secs_f64();
    Ok(Report {
        json: json!({"cmd": "gen", "events": lines.len(), "file": out, "secs": secs}),
        summary: format!("gen: {} events signed to {} in {secs:.1}s", lines.len(), out.display()),
    })
}

fn read_lines(file: &Path) -> Res<Vec<String>> {
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    BufReader::new(f).lines().map(|l| l.map_err(err)).filter(|l| !matches!(l, Ok(s) if s.is_empty())).collect()
}

async fn connect(url: &str) -> Res<Ws> {
    let (ws, _) =
        tokio_tungstenite::connect_async_with_config(url, Some(hearth::client::session::socket_config()), true)
            .await
            .map_err(|e| format!("{url}: {e}"))?;
    Ok(ws)
}

/// The next text frame (skipping pings), or None at the end / after `QUIET`.
async fn next_text(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<String> {
    loop {
        match tokio::time::timeout(QUIET, rx.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return Some(t.as_str().to_string()),
            Ok(Some(Ok(Message::Close(_)))) | Ok(None) | Ok(Some(Err(_))) | Err(_) => return None,
            Ok(Some(Ok(_))) => {}
        }
    }
}

/// The next text frame as JSON (skipping pings), or None at the end / after `QUIET`.
async fn next_frame(rx: &mut futures_util::stream::SplitStream<Ws>) -> Option<Value> {
    serde_json::from_str(&next_text(rx).await?).ok()
}

#[derive(Default)]
struct IngestTally {
    ok_true: u64,
    ok_false: u64,
    first_refusal: Option<String>,
    latencies: Vec<Duration>,
}

/// Publishes `file` over `conns` connections, `inflight` unacknowledged EVENTs each.
pub async fn ingest(relay: &str, file: &Path, conns: usize, inflight: usize) -> Res<Report> {
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
    Ok(Report {
        json: json!({"cmd": "ingest", "conns": conns, "inflight": inflight, "events": total, "secs": secs,
            "events_per_sec": rate, "ok_p50_ms": p50, "ok_p99_ms": p99, "ok_true": t.ok_true,
            "ok_false": t.ok_false, "missing": missing, "first_refusal": t.first_refusal}),
        summary: format!(
            "ingest {conns}x{inflight}: {rate:.0} events/s, OK p50 {p50:.2} ms p99 {p99:.2} ms, true {} false {} missing {missing}",
            t.ok_true, t.ok_false
        ),
    })
}

/// WebSocket ping → pong round trips, one at a time: what a 1 × 1 ingest costs before the relay
/// does any work (the relay's WebSocket layer answers a ping itself).
pub async fn rtt(relay: &str, n: usize) -> Res<Report> {
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

/// The four query shapes of the mix.
fn shapes(events: &[Event], n: usize) -> Vec<(&'static str, Value)> {
    let mut rng = Rng::new(42);
    let newest = events.iter().map(|e| e.created_at.0).max().unwrap_or(0);
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

/// Runs the query mix one REQ at a time and checks each count against the file.
pub async fn query(relay: &str, file: &Path, n: usize) -> Res<Report> {
    let events: Vec<Event> = read_lines(file)?.iter().map(|l| Event::from_json(l).map_err(err)).collect::<Res<_>>()?;
    if events.is_empty() {
        return Err("no events in the file".into());
    }
    let mix = shapes(&events, n);
    // The expected counts first, so the client does nothing but the queries while they are timed.
    let mut expected = Vec::with_capacity(mix.len());
    for (_, filter) in &mix {
        let f: Filter = serde_json::from_value(filter.clone()).map_err(err)?;
        let matching = events.iter().filter(|e| f.matches(e)).count();
        expected.push(matching.min(f.limit.map_or(usize::MAX, |l| l as usize)));
    }
    let (mut tx, mut rx) = connect(relay).await?.split();
    let mut latencies: HashMap<&str, Vec<Duration>> = HashMap::new();
    let mut mismatches = 0;
    for (i, ((shape, filter), expected)) in mix.iter().zip(expected).enumerate() {
        let sub = format!("q{i}");
        let started = Instant::now();
        tx.send(Message::text(json!(["REQ", sub, filter]).to_string())).await.map_err(err)?;
        let mut got = 0;
        loop {
            let text = next_text(&mut rx).await.ok_or("relay went quiet during a query")?;
            // Only the verb and the subscription id: the client must not be what is measured.
            let head: Vec<&serde_json::value::RawValue> = serde_json::from_str(&text).map_err(err)?;
            let verb = head.first().map(|v| v.get());
            let same_sub = head.get(1).map(|v| v.get().trim_matches('"')) == Some(sub.as_str());
            match verb {
                Some("\"EVENT\"") if same_sub => got += 1,
                Some("\"EOSE\"") if same_sub => break,
                Some("\"CLOSED\"") if same_sub => return Err(format!("query refused: {text}")),
                _ => {}
            }
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
    summary.push_str(&format!(" all p50 {p50:.2}/p99 {p99:.2} ms; count mismatches {mismatches}"));
    Ok(Report {
        json: json!({"cmd": "query", "queries": n, "p50_ms": p50, "p99_ms": p99, "shapes": per_shape, "mismatches": mismatches}),
        summary,
    })
}

/// The id of an event, the rest skipped.
#[derive(serde::Deserialize)]
struct IdOnly<'a> {
    id: &'a str,
}

/// S subscribers, then E events at `rate`/s; measures delivery latency and completeness.
pub async fn fanout(relay: &str, subs: usize, events: usize, rate: u64) -> Res<Report> {
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
            let mut seen: Vec<(String, Instant)> = Vec::new();
            if tx.send(Message::text(json!(["REQ", "f", {"kinds": [1], "since": since}]).to_string())).await.is_err() {
                return seen;
            }
            while let Some(frame) = next_frame(&mut rx).await {
                if frame[0] == "EOSE" {
                    break;
                }
            }
            ready.add_permits(1);
            while seen.len() < events {
                let Some(text) = next_text(&mut rx).await else { break };
                let at = Instant::now();
                // Only the id, borrowed: 500 subscribers' parsing must not be what is measured.
                if let Ok(("EVENT", _, IdOnly { id })) = serde_json::from_str::<(&str, &str, IdOnly)>(&text) {
                    seen.push((id.to_string(), at));
                }
            }
            seen
        }));
    }
    let all_ready = ready.acquire_many(subs as u32).await.map_err(err)?;
    all_ready.forget();
    let (mut tx, mut rx) = connect(relay).await?.split();
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
    for e in &batch {
        tick.tick().await;
        sent_at.insert(e.id.to_hex(), Instant::now());
        tx.send(Message::text(json!(["EVENT", e]).to_string())).await.map_err(err)?;
    }
    let mut latencies = Vec::new();
    for r in receivers {
        for (id, at) in r.await.map_err(err)? {
            if let Some(sent) = sent_at.get(&id) {
                latencies.push(at.saturating_duration_since(*sent));
            }
        }
    }
    let _ = oks.await;
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

/// Single-thread validation rate (parse, re-serialize, sha256, schnorr) and fsync latency.
pub fn bound(file: &Path, dir: &Path) -> Res<Report> {
    let lines: Vec<String> = read_lines(file)?.into_iter().take(20_000).collect();
    let started = Instant::now();
    for line in &lines {
        let event = Event::from_json(line).map_err(err)?;
        verify(event).map_err(err)?;
    }
    let validate_per_sec = lines.len() as f64 / started.elapsed().as_secs_f64();
    let path = dir.join(format!(".hearth-bench-fsync-{}", std::process::id()));
    let mut f = std::fs::File::create(&path).map_err(err)?;
    let mut samples = Vec::new();
    for _ in 0..50 {
        let at = Instant::now();
        f.write_all(&[7u8; 4096]).map_err(err)?;
        f.sync_all().map_err(err)?;
        samples.push(at.elapsed());
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    let fsync_ms = percentile_ms(&mut samples, 50.0);
    Ok(Report {
        json: json!({"cmd": "bound", "validate_per_sec": validate_per_sec, "fsync_p50_ms": fsync_ms}),
        summary: format!("bound: one core validates {validate_per_sec:.0} events/s; one fsync {fsync_ms:.3} ms"),
    })
}

fn dir_size(path: &Path) -> u64 {
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| match e.metadata() {
                    Ok(m) if m.is_dir() => dir_size(&e.path()),
                    Ok(m) => m.len(),
                    Err(_) => 0,
                })
                .sum()
        })
        .unwrap_or(0)
}

fn scratch_dir(name: &str) -> Res<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(err)?.as_nanos();
    let dir = std::env::temp_dir().join(format!("hearth-bench-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}

/// Quotas that never refuse, as `HEARTH_…` variables.
const GENEROUS: [(&str, &str); 8] = [
    ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__HUMAN__API_CALLS_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__AGENT__WS_EVENTS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__AGENT__API_CALLS_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__HANDLER_WAIT_MS", "10000"),
    ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "20"),
];

/// One kB figure of `/proc/<pid>/status` (0 where there is no such file, e.g. not on Linux).
fn proc_status_kb(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A release `hearth` started by the suite on a scratch directory.
struct Spawned {
    child: std::process::Child,
    data: PathBuf,
    relay: String,
}

impl Spawned {
    /// Starts the `hearth` beside this binary with generous quotas and `env` on top.
    fn start(name: &str, env: &[(&str, &str)]) -> Res<Spawned> {
        let exe = std::env::current_exe().map_err(err)?.with_file_name("hearth");
        let data = scratch_dir(name)?;
        let mut child = std::process::Command::new(&exe)
            .current_dir(&data)
            .env("HEARTH_SERVER__BIND", "127.0.0.1:0")
            .env("HEARTH_STORAGE__DATA_DIR", data.join("data"))
            .envs(GENEROUS)
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e} (build it with cargo build --release)", exe.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let mut lines = BufReader::new(stderr).lines();
        let addr = loop {
            let line = lines.next().ok_or("hearth exited before listening")?.map_err(err)?;
            if let Some(i) = line.find("listening on ") {
                break line[i + "listening on ".len()..].trim().to_string();
            }
        };
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Spawned { child, data, relay: format!("ws://{addr}/") })
    }

    /// Peak resident memory so far, in MB.
    fn peak_rss_mb(&self) -> f64 {
        proc_status_kb(&self.child.id().to_string(), "VmHWM:") as f64 / 1024.0
    }

    /// SIGTERM, wait, remove the data.
    fn stop(mut self) {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// Pairs of ingests into fresh relays with the limiter on and off, in alternating order so that
/// drift of a shared machine cancels; the ratio reported is the median of the pairs' ratios.
async fn limiter_overhead(file: &Path) -> Res<Report> {
    const PAIRS: usize = 5;
    let rate = |enabled: &'static str| async move {
        let relay = Spawned::start("suite-overhead", &[("HEARTH_LIMITS__ENABLED", enabled)])?;
        let outcome = ingest(&relay.relay, file, 4, 256).await;
        relay.stop();
        Ok::<f64, String>(outcome?.json["events_per_sec"].as_f64().unwrap_or(0.0))
    };
    let (mut on, mut off, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for pair in 0..PAIRS {
        let (rate_on, rate_off) = if pair % 2 == 0 {
            let r = rate("true").await?;
            (r, rate("false").await?)
        } else {
            let r = rate("false").await?;
            (rate("true").await?, r)
        };
        on.push(rate_on);
        off.push(rate_off);
        ratios.push(if rate_off > 0.0 { rate_on / rate_off } else { 0.0 });
    }
    let mut sorted = ratios.clone();
    sorted.sort_by(f64::total_cmp);
    let ratio = sorted[PAIRS / 2];
    let list = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
    Ok(Report {
        json: json!({"cmd": "limiter_overhead", "on_per_sec": on, "off_per_sec": off, "ratios": ratios, "ratio": ratio}),
        summary: format!(
            "limiter overhead: ingest with the limiter on {} /s, off {} /s: median ratio {ratio:.3}",
            list(&on),
            list(&off)
        ),
    })
}

/// Starts the release `hearth` beside this binary on a scratch directory and runs everything;
/// then measures the limiter's overhead on fresh relays ([`limiter_overhead`]).
pub async fn suite(count: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(count, file)?);
    }
    let latency_file = file.with_extension("latency.jsonl");
    reports.push(gen_file(2000, &latency_file)?);
    let on = Spawned::start("suite", &[])?;
    let outcome = async {
        reports.push(bound(file, &on.data)?);
        reports.push(ingest(&on.relay, file, 4, 256).await?);
        let disk = dir_size(&on.data.join("data"));
        let events = read_lines(file)?.len().max(1) as u64;
        reports.push(Report {
            json: json!({"cmd": "disk", "bytes": disk, "bytes_per_event": disk / events}),
            summary: format!("disk: {} bytes after ingest, {} bytes per event", disk, disk / events),
        });
        reports.push(rtt(&on.relay, 2000).await?);
        reports.push(ingest(&on.relay, &latency_file, 1, 1).await?);
        reports.push(query(&on.relay, file, 400).await?);
        reports.push(fanout(&on.relay, 500, 200, 100).await?);
        let rss = on.peak_rss_mb();
        reports.push(Report {
            json: json!({"cmd": "rss", "peak_rss_mb": rss}),
            summary: format!("rss: peak {rss:.1} MB over ingest + query + fan-out"),
        });
        Ok::<_, String>(())
    }
    .await;
    on.stop();
    outcome?;
    reports.push(limiter_overhead(file).await?);
    Ok(reports)
}

/// `limiter.admit` in-process: p50/p99 of one call over `principals` distinct principals, and
/// the memory the limiter holds once it tracks them all.
pub fn limiter(principals: u32) -> Res<Report> {
    use hearth::config::LimitsConfig;
    use hearth::limiter::{LimitType, Limiter, Principal, SystemClock};
    let rss_kb = || proc_status_kb("self", "VmRSS:");
    let config = LimitsConfig { max_tracked_principals: u64::from(principals), ..LimitsConfig::default() };
    let before = rss_kb();
    let limiter = Limiter::new(&config, Arc::new(SystemClock::default()));
    let ip = |n: u32| Principal::Ip(std::net::IpAddr::V4(std::net::Ipv4Addr::from(n.wrapping_add(1 << 24))));
    let admit = |n: u32| limiter.admit(&ip(n), LimitType::WsEvents).map_err(|r| format!("admit refused: {r}"));
    // First admission of each principal creates its state: memory is read after that round,
    // before the samples of the timed second round (which finds the state) are allocated.
    for n in 0..principals {
        admit(n)?;
    }
    let held_mb = rss_kb().saturating_sub(before) as f64 / 1024.0;
    let mut samples = Vec::with_capacity(principals as usize);
    for n in 0..principals {
        let at = Instant::now();
        let admitted = admit(n);
        samples.push(at.elapsed());
        admitted?;
    }
    let tracked = limiter.tracked();
    let (p50, p99) = (percentile_ms(&mut samples, 50.0) * 1000.0, percentile_ms(&mut samples, 99.0) * 1000.0);
    Ok(Report {
        json: json!({"cmd": "limiter", "principals": principals, "tracked": tracked, "admit_p50_us": p50,
            "admit_p99_us": p99, "memory_mb": held_mb}),
        summary: format!(
            "limiter: admit p50 {p50:.3} µs p99 {p99:.3} µs; {tracked} principals tracked in {held_mb:.0} MB"
        ),
    })
}

/// Every workload at a tiny size against an in-process relay; fails if any result is wrong.
pub async fn smoke() -> Res<Vec<Report>> {
    let dir = scratch_dir("smoke")?;
    let file = dir.join("events.jsonl");
    let mut reports = vec![gen_file(300, &file)?];
    let mut config = hearth::config::Config::default();
    config.storage.data_dir = dir.join("data");
    for tier in [&mut config.limits.human, &mut config.limits.agent] {
        tier.ws_events_per_sec = 10_000_000;
        tier.messages_per_min = 1_000_000_000;
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.map_err(err)?;
    let relay_url = format!("ws://{}/", listener.local_addr().map_err(err)?);
    let relay = hearth::Relay::open(config, Arc::new(hearth::limiter::SystemClock::default())).map_err(err)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(relay.serve(listener, None, async move {
        let _ = stopped.await;
    }));
    let outcome = async {
        reports.push(bound(&file, &dir)?);
        let ingest = ingest(&relay_url, &file, 2, 16).await?;
        if ingest.json["ok_true"] != 300 {
            return Err(format!("smoke ingest: {}", ingest.json));
        }
        reports.push(ingest);
        let rtt = rtt(&relay_url, 20).await?;
        if rtt.json["pings"] != 20 {
            return Err(format!("smoke rtt: {}", rtt.json));
        }
        reports.push(rtt);
        let query = query(&relay_url, &file, 20).await?;
        if query.json["mismatches"] != 0 {
            return Err(format!("smoke query: {}", query.json));
        }
        reports.push(query);
        let fanout = fanout(&relay_url, 5, 10, 200).await?;
        if fanout.json["completeness"] != 1.0 {
            return Err(format!("smoke fanout: {}", fanout.json));
        }
        reports.push(fanout);
        let limiter = limiter(1000)?;
        if limiter.json["tracked"] != 1000 {
            return Err(format!("smoke limiter: {}", limiter.json));
        }
        reports.push(limiter);
        Ok(())
    }
    .await;
    let _ = stop.send(());
    server.await.map_err(err)?.map_err(err)?;
    let _ = std::fs::remove_dir_all(&dir);
    outcome?;
    Ok(reports)
}
