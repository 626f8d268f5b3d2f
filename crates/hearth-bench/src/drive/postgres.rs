//! `postgres`: the PostgreSQL store beside the embedded one, in one run: the 4 × 256 ingest of
//! one file, the query mix (p50/p99) and a fan-out, on a release relay with each backend (and
//! the mix again on PostgreSQL once its table is in time order, `CLUSTER`); the
//! file's first 200,000 events split over two nodes on one PostgreSQL (how ingest grows from one
//! node to two, beside one node's rate over all of them); and
//! the cross-node delivery latency (a note published on node A, timed until a subscriber on node
//! B has it, one at a time: p50/p99). Starts its own PostgreSQL (`hearth::testing::postgres`,
//! fsync on, 512 MB of shared buffers unless `--pg-buffers-mb` says otherwise, 8 GB of
//! `max_wal_size`) and `redis-server` on free ports in scratch directories.

use std::path::Path;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

use super::cluster::Redis;
use super::*;
use crate::stats::percentile_ms;
use hearth::protocol::{Keys, Kind, Timestamp};
use hearth::testing::postgres::Postgres;

/// The events the two-node ingest takes from the file at most (a 1M file's first fifth).
const TWO_NODES_MAX: usize = 200_000;
/// Notes timed across nodes.
const CROSSINGS: usize = 500;

/// A release relay on `env`: ingest, queries and a fan-out; (events/s, query p50, p99).
async fn one_backend(name: &str, env: &[(&str, &str)], file: &Path, reports: &mut Vec<Report>) -> Res<(f64, f64, f64)> {
    let relay = Spawned::start(name, env)?;
    let ingested = ingest(&relay.relay, file, 4, 256).await?;
    let rate = ingested.json["events_per_sec"].as_f64().unwrap_or(0.0);
    reports.push(ingested);
    let queried = query(&relay.relay, file, 2000, None).await?;
    let (p50, p99) = queried.p50_p99();
    reports.push(queried);
    reports.push(fanout(&relay.relay, 200, 200, 100).await?);
    relay.stop();
    Ok((rate, p50, p99))
}

/// The file's first `max` lines split in two files (even and odd lines), and all of them in a
/// third.
fn halves(
    file: &Path,
    max: usize,
) -> Res<(tempfile::TempDir, std::path::PathBuf, std::path::PathBuf, std::path::PathBuf)> {
    let dir = tempfile::tempdir().map_err(err)?;
    let text = std::fs::read_to_string(file).map_err(err)?;
    let (mut a, mut b, mut both) = (String::new(), String::new(), String::new());
    for (i, line) in text.lines().take(max).enumerate() {
        both.push_str(line);
        both.push('\n');
        let half = if i % 2 == 0 { &mut a } else { &mut b };
        half.push_str(line);
        half.push('\n');
    }
    let (pa, pb, pboth) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"), dir.path().join("both.jsonl"));
    std::fs::write(&pa, a).map_err(err)?;
    std::fs::write(&pb, b).map_err(err)?;
    std::fs::write(&pboth, both).map_err(err)?;
    Ok((dir, pa, pb, pboth))
}

/// [`CROSSINGS`] notes published on `a`, each timed until `b`'s subscriber has it.
async fn crossings(a: &str, b: &str) -> Res<(f64, f64)> {
    let (mut sub_tx, mut sub_rx) = connect(b).await?.split();
    let since = Timestamp::now().0;
    let filter = json!({"kinds": [1], "#t": ["crossing"], "since": since});
    sub_tx.send(Message::text(json!(["REQ", "x", filter]).to_string())).await.map_err(err)?;
    while let Some(text) = next_text(&mut sub_rx).await {
        if text.starts_with("[\"EOSE\"") {
            break;
        }
    }
    let (mut pub_tx, mut pub_rx) = connect(a).await?.split();
    let keys = Keys::from_bytes([201; 32]).map_err(err)?;
    let mut samples = Vec::with_capacity(CROSSINGS);
    for i in 0..CROSSINGS {
        let tags = vec![vec!["t".to_string(), "crossing".to_string()]];
        let event = keys.sign(Timestamp(since), Kind(1), tags, &format!("crossing {i}"));
        let id = event.id.to_hex();
        let at = Instant::now();
        pub_tx.send(Message::text(json!(["EVENT", event]).to_string())).await.map_err(err)?;
        loop {
            let text = next_text(&mut sub_rx).await.ok_or("node B's subscription ended")?;
            let frame: Value = serde_json::from_str(&text).map_err(err)?;
            if frame[0] == "EVENT" && frame[2]["id"] == id {
                break;
            }
        }
        samples.push(at.elapsed());
        while let Some(text) = next_text(&mut pub_rx).await {
            if text.contains(&id) {
                break;
            }
        }
    }
    Ok((percentile_ms(&mut samples, 50.0), percentile_ms(&mut samples, 99.0)))
}

/// See the module doc; `file` is generated with `events` events when it does not exist; the
/// server has `buffers_mb` of shared buffers.
pub(crate) async fn postgres(events: usize, file: &Path, buffers_mb: u32) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/postgres/install.sh");
    if !std::process::Command::new("bash").arg(script).status().map_err(err)?.success() {
        return Err("PostgreSQL is missing and tests/postgres/install.sh could not install it".into());
    }
    let (sled_rate, sled_p50, sled_p99) = one_backend("pg-sled", &[], file, &mut reports).await?;
    let pg = Postgres::start_tuned(true, buffers_mb).await?;
    let one = pg.database("one").await?;
    let on_pg = [("HEARTH_STORAGE__BACKEND", "postgres"), ("HEARTH_STORAGE__POSTGRES_URL", one.as_str())];
    let (pg_rate, pg_p50, pg_p99) = one_backend("pg-one", &on_pg, file, &mut reports).await?;
    // The file's events arrive in no time order (a backfill, an import); a live relay's arrive
    // about in time order, so a window's rows share heap pages. The same mix again once the
    // table is in time order, as `CLUSTER` leaves it (the book's advice for an imported store).
    let client = pg.connect("one").await?;
    client.batch_execute("CLUSTER events USING events_time; ANALYZE events").await.map_err(err)?;
    drop(client);
    let relay = Spawned::start("pg-one-clustered", &on_pg)?;
    let queried = query(&relay.relay, file, 2000, None).await?;
    relay.stop();
    let (in_order_p50, in_order_p99) = queried.p50_p99();
    reports.push(queried);

    let redis = Redis::start()?;
    let (two, url) = (pg.database("two").await?, redis.url());
    let env = [
        ("HEARTH_STORAGE__BACKEND", "postgres"),
        ("HEARTH_STORAGE__POSTGRES_URL", two.as_str()),
        ("HEARTH_LIMITS__BACKEND", "redis"),
        ("HEARTH_LIMITS__REDIS_URL", url.as_str()),
        ("HEARTH_LIMITS__REDIS_TIMEOUT_MS", "1000"),
    ];
    let (_halves, half_a, half_b, first) = halves(file, TWO_NODES_MAX)?;
    // One node over the same events, into an empty database: the base the two nodes grow from.
    let small = pg.database("one-small").await?;
    let relay = Spawned::start("pg-one-small", &[on_pg[0], ("HEARTH_STORAGE__POSTGRES_URL", small.as_str())])?;
    let single = ingest(&relay.relay, &first, 4, 256).await?;
    relay.stop();
    let one_rate = single.json["events_per_sec"].as_f64().unwrap_or(0.0);
    reports.push(single);
    let (a, b) = (Spawned::start("pg-node-a", &env)?, Spawned::start("pg-node-b", &env)?);
    let begin = Instant::now();
    let (ra, rb) = tokio::join!(ingest(&a.relay, &half_a, 4, 256), ingest(&b.relay, &half_b, 4, 256));
    let two_secs = begin.elapsed().as_secs_f64();
    let stored = ra?.json["events"].as_u64().unwrap_or(0) + rb?.json["events"].as_u64().unwrap_or(0);
    let two_rate = stored as f64 / two_secs;
    let (cross_p50, cross_p99) = crossings(&a.relay, &b.relay).await?;
    a.stop();
    b.stop();
    let grows = two_rate / one_rate.max(1e-9);
    reports.push(Report {
        json: json!({"cmd": "postgres", "events": events, "pg_buffers_mb": buffers_mb, "ingest_sled_per_sec": sled_rate, "ingest_postgres_per_sec": pg_rate,
            "ingest_postgres_over_sled": pg_rate / sled_rate.max(1e-9), "ingest_two_nodes_per_sec": two_rate,
            "ingest_one_node_same_events_per_sec": one_rate, "two_nodes_over_one": grows, "query_sled_p50_ms": sled_p50, "query_sled_p99_ms": sled_p99,
            "query_postgres_p50_ms": pg_p50, "query_postgres_p99_ms": pg_p99,
            "query_postgres_clustered_p50_ms": in_order_p50, "query_postgres_clustered_p99_ms": in_order_p99,
            "cross_node_p50_ms": cross_p50, "cross_node_p99_ms": cross_p99}),
        summary: format!(
            "postgres: ingest 4×256 sled {sled_rate:.0}/s, postgres {pg_rate:.0}/s ({:.2} x); of the first \
             {TWO_NODES_MAX}: one node {one_rate:.0}/s, two nodes on one postgres {two_rate:.0}/s \
             ({grows:.2} x); queries p50/p99 sled {sled_p50:.2}/{sled_p99:.2} ms, postgres \
             {pg_p50:.2}/{pg_p99:.2} ms, in time order {in_order_p50:.2}/{in_order_p99:.2} ms; cross-node delivery p50/p99 {cross_p50:.2}/{cross_p99:.2} ms",
            pg_rate / sled_rate.max(1e-9)
        ),
    });
    Ok(reports)
}
