//! `search`: NIP-50 at one store size on release relays: the ingest of one file with the search
//! index on beside off (same file, same run: the ratio is the figure), the disk and the peak RSS
//! the index adds, its build rate (`hearth search-reindex` of the store ingested without it), and
//! two-word queries' latency on a warm relay.

use std::path::Path;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};

use super::sync::run_hearth;
use super::*;
use crate::stats::{Rng, percentile_ms};

/// Queries before the timed ones: the index's files into the page cache.
const WARM_QUERIES: usize = 100;
/// Timed queries.
const TIMED_QUERIES: usize = 400;
/// The words a query draws from: past the most common ones (which match most notes, as `the`
/// does), as a person looking for a note types.
const QUERY_WORDS: std::ops::Range<usize> = 30..WORDS.len();

/// See the module doc; `file` is generated (words, [`gen_text_file`]) with `events` events when
/// it does not exist.
pub(crate) async fn search(events: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_text_file(events, file)?);
    }
    let mut ingest_with = async |name: &str, env: &[(&str, &str)]| -> Res<(f64, u64, f64, std::path::PathBuf)> {
        let on = Spawned::start(name, env)?;
        let ingested = ingest(&on.relay, file, 4, 256).await?;
        let rate = ingested.json["events_per_sec"].as_f64().unwrap_or(0.0);
        let stored = ingested.json["ok_true"].as_u64().unwrap_or(0);
        reports.push(ingested);
        let peak = on.peak_rss_mb();
        Ok((rate, stored, peak, on.stop_keeping()))
    };
    let (rate_off, stored, peak_off, off_dir) =
        ingest_with("search-off", &[("HEARTH_STORAGE__SEARCH", "false")]).await?;
    let (rate_on, _, peak_on, on_dir) = ingest_with("search-on", &[]).await?;
    let disk_off = dir_size(&off_dir.join("data"));
    let disk_on = dir_size(&on_dir.join("data"));
    let index_bytes = dir_size(&on_dir.join("data").join("search"));

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
    let ratio = rate_on / rate_off.max(1e-9);
    reports.push(Report {
        json: json!({"cmd": "search", "events": stored, "ingest_off_per_sec": rate_off, "ingest_on_per_sec": rate_on,
            "ingest_on_over_off": ratio, "peak_ingest_rss_off_mb": peak_off, "peak_ingest_rss_on_mb": peak_on,
            "disk_off_bytes": disk_off, "disk_on_bytes": disk_on, "index_bytes": index_bytes,
            "build_events": indexed, "build_per_sec": build_rate, "build_peak_rss_mb": build_peak_mb,
            "rss_before_queries_mb": rss_before_mb, "rss_after_queries_mb": rss_after_mb,
            "two_word_p50_ms": p50, "two_word_p99_ms": p99, "mean_results": found}),
        summary: format!(
            "search {stored} events: ingest {rate_on:.0}/s with the index, {rate_off:.0}/s without ({ratio:.2} x); \
             peak RSS {peak_on:.0} vs {peak_off:.0} MB; disk {disk_on} vs {disk_off} B (index {index_bytes} B); \
             rebuild {build_rate:.0} events/s, peak RSS {build_peak_mb:.0} MB; two-word queries p50 {p50:.2} / \
             p99 {p99:.2} ms ({found:.1} results each), RSS {rss_before_mb:.0} → {rss_after_mb:.0} MB"
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
