//! What no relay is in: the physical bounds a relay's figures are read against (one core's
//! validation rate, one fsync) and the limiter's admission on its own, in-process.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use hearth::protocol::Event;
use hearth::protocol::verify::verify;
use serde_json::json;

use super::*;
use crate::stats::percentile_ms;

/// Single-thread validation rate (parse, re-serialize, sha256, schnorr) and fsync latency.
pub(crate) fn bound(file: &Path, dir: &Path) -> Res<Report> {
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

/// `limiter.admit` in-process: p50/p99 of one call over `principals` distinct unauthenticated
/// addresses (each also billing its own IP ceiling: two entries in the table), and the memory
/// the limiter holds once it tracks them all.
pub(crate) fn limiter(principals: u32) -> Res<Report> {
    use hearth::config::LimitsConfig;
    use hearth::limiter::{Billed, Clock, LimitType, Limiter, SystemClock};
    let rss_kb = || proc_status_kb("self", "VmRSS:");
    let config = LimitsConfig { max_tracked_principals: 2 * u64::from(principals), ..LimitsConfig::default() };
    let before = rss_kb();
    let clock = Arc::new(SystemClock::default());
    let limiter = Limiter::new(&config, clock.clone());
    let ip = |n: u32| Billed::ip(std::net::IpAddr::V4(std::net::Ipv4Addr::from(n.wrapping_add(1 << 24))));
    // The memory backend's admission is synchronous under the async call; timed without it.
    let admit = |n: u32| {
        limiter.admit_at(&ip(n), LimitType::WsEvents, clock.now_ns()).map_err(|r| format!("admit refused: {r}"))
    };
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
