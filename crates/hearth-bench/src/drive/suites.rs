//! The workloads together: the full suite, the limiter-overhead pairs, and the smoke mode CI runs.

use std::path::Path;
use std::sync::Arc;

use serde_json::json;

use super::*;
use crate::stats::median;

/// Pairs of ingests into fresh relays with the limiter on and off, in alternating order so that
/// drift of a shared machine cancels; the ratio reported is the median of the pairs' ratios.
pub(super) async fn limiter_overhead(file: &Path) -> Res<Report> {
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
    let ratio = median(ratios.iter().copied());
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
pub(crate) async fn suite(count: usize, file: &Path) -> Res<Vec<Report>> {
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
        reports.push(query(&on.relay, file, 400, None).await?);
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

/// Every workload at a tiny size against an in-process relay; fails if any result is wrong.
pub(crate) async fn smoke() -> Res<Vec<Report>> {
    let dir = scratch_dir("smoke")?;
    let file = dir.join("events.jsonl");
    let mut reports = vec![gen_file(300, &file)?];
    let mut config = hearth::config::Config::default();
    config.storage.data_dir = dir.join("data");
    for tier in [&mut config.limits.human, &mut config.limits.agent, &mut config.limits.ip] {
        tier.ws_events_per_sec = 10_000_000;
        tier.ws_reqs_per_sec = 10_000_000;
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
        let query = query(&relay_url, &file, 20, None).await?;
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
        // Each address, and its IP ceiling.
        if limiter.json["tracked"] != 2000 {
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
