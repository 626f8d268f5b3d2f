//! `scale`: how memory, start-up and queries go with the size of the store, on the release
//! relay. One size per run; the README's curve is several runs.

use std::path::Path;
use std::time::Instant;

use serde_json::json;

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
    let data = on.stop_keeping();
    let disk = dir_size(&data.join("data"));

    let (clean_ms, on) = start_timed(data).await?;
    let queried = query(&on.relay, file, 400).await?;
    let (p50, p99) = (queried.json["p50_ms"].as_f64().unwrap_or(0.0), queried.json["p99_ms"].as_f64().unwrap_or(0.0));
    reports.push(queried);
    let rss_mb = on.rss_kb() as f64 / 1024.0;
    let (crash_ms, on) = start_timed(on.kill_keeping()).await?;
    on.stop();

    let ratio = if validate_per_sec > 0.0 { ingest_rate / validate_per_sec } else { 0.0 };
    reports.push(Report {
        json: json!({"cmd": "scale", "events": stored, "ingest_per_sec": ingest_rate,
            "validate_per_sec": validate_per_sec, "ingest_over_validation": ratio,
            "peak_ingest_rss_mb": peak_ingest_mb, "startup_after_stop_ms": clean_ms,
            "startup_after_kill9_ms": crash_ms, "rss_after_query_mb": rss_mb, "query_p50_ms": p50,
            "query_p99_ms": p99, "disk_bytes": disk, "disk_bytes_per_event": disk / stored.max(1)}),
        summary: format!(
            "scale {stored} events: ingest {ingest_rate:.0}/s ({ratio:.2} x one core's validation), peak RSS {peak_ingest_mb:.0} MB; \
             start-up {clean_ms:.0} ms after a stop, {crash_ms:.0} ms after kill -9; after the query mix RSS {rss_mb:.0} MB, \
             p50 {p50:.2} / p99 {p99:.2} ms; disk {} B/event",
            disk / stored.max(1)
        ),
    });
    Ok(reports)
}
