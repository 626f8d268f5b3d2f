//! `scale`: how memory, start-up and queries go with the size of the store, on the release
//! relay. One size per run; the book's curve (docs/src/performance.md) is several runs. `compact`: a compaction of such
//! a store under an ingest, as a client meets it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// Time from starting the relay on `data` to its first answered REQ, and the relay.
async fn start_timed(data: std::path::PathBuf) -> Res<(f64, Spawned)> {
    let started = Instant::now();
    let on = Spawned::start_on(data, &[])?;
    req(&on.relay, json!({"limit": 1})).await?;
    Ok((started.elapsed().as_secs_f64() * 1e3, on))
}

/// Ingest of `file` (generated with `events` events if missing), then restarts and queries.
pub(crate) async fn scale(events: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let on = Spawned::start("scale", &[])?;
    let bound = bound(file, &on.data)?;
    let validate_per_sec = bound.json["validate_per_sec"].as_f64().unwrap_or(0.0);
    reports.push(bound);
    let ingested = ingest(&on.relay, file, 4, 256).await?;
    let ingest_rate = ingested.json["events_per_sec"].as_f64().unwrap_or(0.0);
    let stored = ingested.json["ok_true"].as_u64().unwrap_or(0);
    reports.push(ingested);
    let peak_ingest_mb = on.peak_rss_mb();
    // The stop checkpoints the catalogue (what the next start would otherwise read back).
    let stopping = Instant::now();
    let data = on.stop_keeping();
    let stop_ms = stopping.elapsed().as_secs_f64() * 1e3;
    let disk = dir_size(&data.join("data"));

    let (clean_ms, on) = start_timed(data).await?;
    let queried = query(&on.relay, file, 400, Some(&on.data.join("data"))).await?;
    let (p50, p99) = queried.p50_p99();
    reports.push(queried);
    let rss_mb = on.rss_kb() as f64 / 1024.0;
    let (crash_ms, on) = start_timed(on.kill_keeping()).await?;
    on.stop();

    let ratio = if validate_per_sec > 0.0 { ingest_rate / validate_per_sec } else { 0.0 };
    reports.push(Report {
        json: json!({"cmd": "scale", "events": stored, "ingest_per_sec": ingest_rate,
            "validate_per_sec": validate_per_sec, "ingest_over_validation": ratio,
            "peak_ingest_rss_mb": peak_ingest_mb, "stop_after_ingest_ms": stop_ms, "startup_after_stop_ms": clean_ms,
            "startup_after_kill9_ms": crash_ms, "rss_after_query_mb": rss_mb, "query_p50_ms": p50,
            "query_p99_ms": p99, "disk_bytes": disk, "disk_bytes_per_event": disk / stored.max(1)}),
        summary: format!(
            "scale {stored} events: ingest {ingest_rate:.0}/s ({ratio:.2} x one core's validation), peak RSS {peak_ingest_mb:.0} MB; \
             stop {stop_ms:.0} ms, start-up {clean_ms:.0} ms after it, {crash_ms:.0} ms after kill -9; after the query mix RSS {rss_mb:.0} MB, \
             p50 {p50:.2} / p99 {p99:.2} ms; disk {} B/event",
            disk / stored.max(1)
        ),
    });
    Ok(reports)
}

/// The token the `compact` mode gives its relay's admin API.
const ADMIN_TOKEN: &str = "hearth-bench";

/// A compaction under load: `file` (generated with `events` events if missing) ingested into a
/// fresh release relay, then a fifth as many new events ingested (4 × 256) while a compaction is
/// asked for `delay_ms` into that ingest; reports how long the compaction stopped writes and
/// what the ingest's acknowledgements saw meanwhile (the longest OK is the pause as a client
/// meets it).
pub(crate) async fn compact_under_ingest(events: usize, file: &Path, delay_ms: u64) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let on = Spawned::start("compact", &[("HEARTH_ADMIN__TOKEN", ADMIN_TOKEN)])?;
    let stored = ingest(&on.relay, file, 4, 256).await?;
    let stored_events = stored.json["ok_true"].as_u64().unwrap_or(0);
    reports.push(stored);
    // New events (signed now, so none is a duplicate of the file's), written beside the relay.
    let during_file = on.data.join("during.jsonl");
    gen_file((events / 5).max(1_000), &during_file)?;
    let http = format!("http://{}", on.relay.trim_start_matches("ws://").trim_end_matches('/'));
    let client = reqwest::Client::new();
    let ask = {
        let (client, http) = (client.clone(), http.clone());
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(delay_ms)).await;
            let url = format!("{http}/admin/v1/store/compact");
            let resp = client.post(url).bearer_auth(ADMIN_TOKEN).send().await.map_err(err)?;
            match resp.status().as_u16() {
                202 => Ok(()),
                status => Err(format!("POST /admin/v1/store/compact: {status}")),
            }
        })
    };
    let during = ingest(&on.relay, &during_file, 4, 256).await?;
    ask.await.map_err(err)??;
    // The compaction's figures once it (its background remap included) is done.
    let started = Instant::now();
    let store = loop {
        let resp = client.get(format!("{http}/admin/v1/store")).bearer_auth(ADMIN_TOKEN).send().await;
        let store: Value = resp.map_err(err)?.json().await.map_err(err)?;
        if store["compacting"] == false && !store["last_compaction"].is_null() {
            break store;
        }
        if started.elapsed() > Duration::from_secs(3600) {
            return Err("the compaction did not finish within an hour".into());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    on.stop();
    let done = &store["last_compaction"];
    let figure = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    let (paused, seconds) = (figure(done, "writes_paused_ms"), figure(done, "seconds"));
    let (p99, max, rate) =
        (figure(&during.json, "ok_p99_ms"), figure(&during.json, "ok_max_ms"), figure(&during.json, "events_per_sec"));
    reports.push(during);
    reports.push(Report {
        json: json!({"cmd": "compact", "events": stored_events, "writes_paused_ms": paused,
            "reads_paused_ms": figure(done, "reads_paused_ms"), "compaction_seconds": seconds,
            "ingest_ok_p99_ms": p99, "ingest_ok_max_ms": max, "ingest_per_sec": rate}),
        summary: format!(
            "compact {stored_events} events under a 4x256 ingest: writes paused {paused:.1} ms, compaction {seconds:.1} s \
             (its remap included); the ingest meanwhile: OK p99 {p99:.0} ms, longest {max:.0} ms, {rate:.0}/s"
        ),
    });
    Ok(reports)
}
