//! `cluster`: the Redis limiter backend beside the memory one, in one run: one admission's
//! p50/p99 in-process (one at a time, so each Redis one is a loopback round trip), the admissions
//! per second one Redis sustains for hearth (four nodes' links, 32 at a time on each, and how busy
//! the Redis was meanwhile), and the 4 × 256 ingest of one file on a release relay with each
//! backend. Starts its own `redis-server` (Debian's package: `tests/redis/install.sh`) on a free
//! port in a scratch directory.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::*;
use crate::stats::percentile_ms;
use hearth::cluster::Link;
use hearth::config::LimitsConfig;
use hearth::limiter::{Billed, LimitType, Limiter, SystemClock};

/// Distinct principals the in-process admissions spread over (each with its IP ceiling).
const PRINCIPALS: u32 = 10_000;
/// How long the throughput round runs.
const FLOOD: Duration = Duration::from_secs(5);

/// A `redis-server` of the bench's own, killed when dropped.
pub(super) struct Redis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Redis {
    pub(super) fn start() -> Res<Redis> {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/redis/install.sh");
        let installed = Command::new("bash").arg(script).status().map_err(err)?;
        if !installed.success() {
            return Err("redis-server is missing and tests/redis/install.sh could not install it".into());
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0").map_err(err)?.local_addr().map_err(err)?.port();
        let dir = tempfile::tempdir().map_err(err)?;
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .spawn()
            .map_err(err)?;
        let begin = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if begin.elapsed() > Duration::from_secs(10) {
                return Err("redis-server did not listen within 10 s".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Redis { child, port, _dir: dir })
    }

    pub(super) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// CPU seconds the server has used (user + system).
    fn cpu_secs(&self) -> f64 {
        cpu_secs(self.child.id())
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Quotas no admission here reaches: every one is billed and admitted.
fn never_refused() -> LimitsConfig {
    let mut config = LimitsConfig { max_tracked_principals: 4 * u64::from(PRINCIPALS), ..LimitsConfig::default() };
    for tier in [&mut config.human, &mut config.ip] {
        tier.messages_per_min = 1_000_000_000;
    }
    config
}

fn ip(n: u32) -> Billed {
    Billed::ip(std::net::IpAddr::V4(std::net::Ipv4Addr::from(n.wrapping_add(10 << 24))))
}

fn shared(redis: &Redis, config: &LimitsConfig) -> Res<Limiter> {
    let link = Link::open(&redis.url(), Duration::from_millis(config.redis_timeout_ms), "bench:").map_err(err)?;
    Ok(Limiter::shared(config, Arc::new(SystemClock::default()), Arc::new(link)))
}

/// One admission at a time over [`PRINCIPALS`] principals, after a round that created them: p50
/// and p99 in µs.
async fn one_at_a_time(limiter: &Limiter) -> Res<(f64, f64)> {
    for n in 0..PRINCIPALS {
        limiter.admit(&ip(n), LimitType::Messages).await.map_err(|d| format!("refused: {d}"))?;
    }
    let mut samples = Vec::with_capacity(PRINCIPALS as usize);
    for n in 0..PRINCIPALS {
        let at = Instant::now();
        let admitted = limiter.admit(&ip(n), LimitType::Messages).await;
        samples.push(at.elapsed());
        admitted.map_err(|d| format!("refused: {d}"))?;
    }
    Ok((percentile_ms(&mut samples, 50.0) * 1000.0, percentile_ms(&mut samples, 99.0) * 1000.0))
}

/// Admissions per second over [`FLOOD`] from `nodes` limiters (each its own link, as nodes are)
/// with `each` admissions in flight on each; and the Redis server's CPU share meanwhile.
async fn flood(redis: &Redis, config: &LimitsConfig, nodes: usize, each: usize) -> Res<(f64, f64)> {
    let limiters: Vec<Arc<Limiter>> = (0..nodes).map(|_| shared(redis, config).map(Arc::new)).collect::<Res<_>>()?;
    let cpu_before = redis.cpu_secs();
    let begin = Instant::now();
    let mut tasks = Vec::new();
    for (node, limiter) in limiters.iter().enumerate() {
        for lane in 0..each {
            let limiter = limiter.clone();
            let start = u32::try_from(node * each + lane).map_err(err)?;
            tasks.push(tokio::spawn(async move {
                let (mut n, mut done, mut failed) = (start, 0u64, 0u64);
                while begin.elapsed() < FLOOD {
                    match limiter.admit(&ip(n % PRINCIPALS), LimitType::Messages).await {
                        Ok(()) => done += 1,
                        Err(_) => failed += 1,
                    }
                    n = n.wrapping_add(997);
                }
                (done, failed)
            }));
        }
    }
    let (mut done, mut failed) = (0, 0);
    for task in tasks {
        let (d, f) = task.await.map_err(err)?;
        done += d;
        failed += f;
    }
    if failed > 0 {
        return Err(format!("{failed} admissions were not admitted (Redis too slow for redis_timeout_ms?)"));
    }
    let secs = begin.elapsed().as_secs_f64();
    Ok((done as f64 / secs, (redis.cpu_secs() - cpu_before) / secs))
}

/// See the module doc; `file` is generated with `events` events when it does not exist.
pub(crate) async fn cluster(events: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let redis = Redis::start()?;
    let config = never_refused();
    let memory = Limiter::new(&config, Arc::new(SystemClock::default()));
    let (memory_p50, memory_p99) = one_at_a_time(&memory).await?;
    let (redis_p50, redis_p99) = one_at_a_time(&shared(&redis, &config)?).await?;
    let (per_sec, redis_cpu) = flood(&redis, &config, 4, 32).await?;

    let mut ingest_with = async |name: &str, env: &[(&str, &str)]| -> Res<f64> {
        let relay = Spawned::start(name, env)?;
        let ingested = ingest(&relay.relay, file, 4, 256).await?;
        let rate = ingested.json["events_per_sec"].as_f64().unwrap_or(0.0);
        reports.push(ingested);
        relay.stop();
        Ok(rate)
    };
    let url = redis.url();
    let ingest_memory = ingest_with("cluster-memory", &[]).await?;
    let ingest_redis =
        ingest_with("cluster-redis", &[("HEARTH_LIMITS__BACKEND", "redis"), ("HEARTH_LIMITS__REDIS_URL", &url)])
            .await?;
    let ratio = ingest_redis / ingest_memory.max(1e-9);
    reports.push(Report {
        json: json!({"cmd": "cluster", "admit_memory_p50_us": memory_p50, "admit_memory_p99_us": memory_p99,
            "admit_redis_p50_us": redis_p50, "admit_redis_p99_us": redis_p99, "redis_admissions_per_sec": per_sec,
            "redis_cpu_share": redis_cpu, "ingest_memory_per_sec": ingest_memory, "ingest_redis_per_sec": ingest_redis,
            "ingest_redis_over_memory": ratio}),
        summary: format!(
            "cluster: admit p50/p99 memory {memory_p50:.2}/{memory_p99:.2} µs, redis {redis_p50:.0}/{redis_p99:.0} µs; \
             one Redis {per_sec:.0} admissions/s (4 links × 32 in flight, Redis {:.0} % of a core); \
             ingest 4×256 redis {ingest_redis:.0}/s vs memory {ingest_memory:.0}/s ({ratio:.2} x)",
            redis_cpu * 100.0
        ),
    });
    Ok(reports)
}
