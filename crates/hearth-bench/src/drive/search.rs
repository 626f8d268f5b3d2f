//! `search`: NIP-50 at one store size on release relays: the ingest of one file with the search
//! index on beside off (same file, same run, alternating pairs: the median ratio is the figure),
//! the disk and the peak RSS the index adds, live fan-out to 500 subscribers on each, its build
//! rate (`hearth search-reindex` of the store ingested without it), and two-word queries' latency
//! on a warm relay.

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use super::sync::run_hearth;
use super::*;
use crate::stats::{Rng, median, percentile_ms};

/// Queries before the timed ones: the index's files into the page cache.
const WARM_QUERIES: usize = 100;
/// Timed queries.
const TIMED_QUERIES: usize = 400;
/// The words a query draws from: past the most common ones (which match most notes, as `the`
/// does), as a person looking for a note types.
const QUERY_WORDS: std::ops::Range<usize> = 30..WORDS.len();

/// One ingest of the file into a fresh relay.
struct Run {
    rate: f64,
    stored: u64,
    peak_mb: f64,
}

/// See the module doc; `file` is generated (words, [`gen_text_file`]) with `events` events when
/// it does not exist. The ingests run in `pairs` pairs, off and on in alternating order (off on,
/// on off, off on, …), and the ratio is the median of the pairs' (one pair moves with the
/// machine's minute); after the last ingest of each, 500 subscribers' fan-out on that relay.
pub(crate) async fn search(events: usize, file: &Path, pairs: usize) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_text_file(events, file)?);
    }
    let pairs = pairs.max(1);
    let (mut off, mut on) = (Vec::new(), Vec::new());
    let (mut off_dir, mut on_dir) = (None, None);
    let (mut fanout_off, mut fanout_on) = (None, None);
    for round in 0..pairs * 2 {
        // off on | on off | off on …
        let with_index = (round % 2 == 1) != (round / 2 % 2 == 1);
        let (name, env): (&str, &[(&str, &str)]) =
            if with_index { ("search-on", &[]) } else { ("search-off", &[("HEARTH_STORAGE__SEARCH", "false")]) };
        let relay = Spawned::start(name, env)?;
        let ingested = ingest(&relay.relay, file, 4, 256).await?;
        let run = Run {
            rate: ingested.json["events_per_sec"].as_f64().unwrap_or(0.0),
            stored: ingested.json["ok_true"].as_u64().unwrap_or(0),
            peak_mb: relay.peak_rss_mb(),
        };
        reports.push(ingested);
        let last = round + 2 >= pairs * 2;
        if last {
            relay.settle(Duration::from_secs(60));
            let fanned = fanout(&relay.relay, 500, 200, 100).await?;
            let p99 = fanned.json["p99_ms"].as_f64().unwrap_or(f64::NAN);
            reports.push(fanned);
            *(if with_index { &mut fanout_on } else { &mut fanout_off }) = Some(p99);
        }
        let dir = relay.stop_keeping();
        let (runs, kept) = if with_index { (&mut on, &mut on_dir) } else { (&mut off, &mut off_dir) };
        runs.push(run);
        // The first store without the index is rebuilt below; the last with it is queried.
        if kept.is_none() || with_index {
            if let Some(old) = kept.replace(dir) {
                let _ = std::fs::remove_dir_all(old);
            }
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    let (Some(off_dir), Some(on_dir)) = (off_dir, on_dir) else { return Err("no runs".into()) };
    let ratio = median(off.iter().zip(&on).map(|(off, on)| on.rate / off.rate.max(1e-9)));
    let (rate_off, rate_on) = (median(off.iter().map(|r| r.rate)), median(on.iter().map(|r| r.rate)));
    let (peak_off, peak_on) = (median(off.iter().map(|r| r.peak_mb)), median(on.iter().map(|r| r.peak_mb)));
    let stored = on.iter().map(|r| r.stored).min().unwrap_or(0);
    let disk_off = dir_size(&off_dir.join("data"));
    let disk_on = dir_size(&on_dir.join("data"));
    let index_bytes = dir_size(&on_dir.join("data").join("search"));
    let index_per_event = index_bytes as f64 / stored.max(1) as f64;

    let (built, build_peak_mb, _) = run_hearth(&off_dir, &["search-reindex"], &[])?;
    let _ = std::fs::remove_dir_all(&off_dir);
    let indexed = built["events"].as_f64().unwrap_or(0.0);
    let build_rate = indexed / built["seconds"].as_f64().unwrap_or(f64::MAX).max(1e-9);

    let relay = Spawned::start_on(on_dir, &[])?;
    let rss_before_mb = relay.rss_kb() as f64 / 1024.0;
    let (mut samples, found) = two_word_queries(&relay.relay).await?;
    let rss_after_mb = relay.rss_kb() as f64 / 1024.0;
    relay.stop();
    let (p50, p99) = (percentile_ms(&mut samples, 50.0), percentile_ms(&mut samples, 99.0));
    let (fanout_off, fanout_on) = (fanout_off.unwrap_or(f64::NAN), fanout_on.unwrap_or(f64::NAN));
    let pair_ratios: Vec<String> =
        off.iter().zip(&on).map(|(f, n)| format!("{:.2}", n.rate / f.rate.max(1e-9))).collect();
    reports.push(Report {
        json: json!({"cmd": "search", "events": stored, "pairs": pairs,
            "ingest_off_per_sec": off.iter().map(|r| r.rate).collect::<Vec<_>>(),
            "ingest_on_per_sec": on.iter().map(|r| r.rate).collect::<Vec<_>>(),
            "ingest_on_over_off": ratio, "peak_ingest_rss_off_mb": peak_off, "peak_ingest_rss_on_mb": peak_on,
            "fanout_p99_off_ms": fanout_off, "fanout_p99_on_ms": fanout_on,
            "disk_off_bytes": disk_off, "disk_on_bytes": disk_on, "index_bytes": index_bytes,
            "index_bytes_per_event": index_per_event,
            "build_events": indexed, "build_per_sec": build_rate, "build_peak_rss_mb": build_peak_mb,
            "rss_before_queries_mb": rss_before_mb, "rss_after_queries_mb": rss_after_mb,
            "two_word_p50_ms": p50, "two_word_p99_ms": p99, "mean_results": found}),
        summary: format!(
            "search {stored} events: ingest {rate_on:.0}/s with the index, {rate_off:.0}/s without (medians); \
             on ÷ off, the median of {pairs} pairs: {ratio:.2} x ({}); peak RSS {peak_on:.0} vs {peak_off:.0} MB; \
             fan-out to 500 p99 {fanout_on:.2} vs {fanout_off:.2} ms; disk {disk_on} vs {disk_off} B (index \
             {index_bytes} B, {index_per_event:.0} B an event); rebuild {build_rate:.0} events/s, peak RSS \
             {build_peak_mb:.0} MB; two-word queries p50 {p50:.2} / p99 {p99:.2} ms ({found:.1} results each), \
             RSS {rss_before_mb:.0} → {rss_after_mb:.0} MB",
            pair_ratios.join(", ")
        ),
    });
    Ok(reports)
}

/// Two-word searches (limit 20) on one connection to `relay`, one at a time: the timed ones'
/// latencies (REQ sent to EOSE) and the mean number of events they found.
async fn two_word_queries(relay: &str) -> Res<(Vec<Duration>, f64)> {
    let ws = connect(relay).await?;
    let (mut tx, mut rx) = ws.split();
    let mut rng = Rng::new(0x5ea7c4);
    let mut samples = Vec::with_capacity(TIMED_QUERIES);
    let mut found = 0usize;
    for i in 0..WARM_QUERIES + TIMED_QUERIES {
        let word = |rng: &mut Rng| WORDS[QUERY_WORDS.start + rng.below(QUERY_WORDS.len() as u64) as usize];
        let text = format!("{} {}", word(&mut rng), word(&mut rng));
        let frame = json!(["REQ", "s", {"search": text, "limit": 20}]).to_string();
        let started = Instant::now();
        tx.send(Message::text(frame)).await.map_err(err)?;
        let mut events = 0;
        loop {
            let f: Value = tokio::time::timeout(QUIET, next_frame(&mut rx)).await.map_err(err)?.ok_or("closed")?;
            match f[0].as_str() {
                Some("EVENT") => events += 1,
                Some("EOSE") => break,
                // The relay's NIP-42 challenge, first on the connection.
                Some("AUTH") => {}
                _ => return Err(format!("{text}: {f}")),
            }
        }
        if i >= WARM_QUERIES {
            samples.push(started.elapsed());
            found += events;
        }
        tx.send(Message::text(json!(["CLOSE", "s"]).to_string())).await.map_err(err)?;
    }
    Ok((samples, found as f64 / TIMED_QUERIES as f64))
}
