//! NIP-62 on the release relay: a key with many events among a large store asks to vanish;
//! how long until its request is answered (every event of it gone), and what the query mix of
//! everyone else sees meanwhile, beside the same mix without a vanish.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use futures_util::{SinkExt, StreamExt};
use serde_json::json;

use super::*;
use hearth::protocol::{Keys, Kind, Timestamp};

/// Writes `count` notes signed by `keys`, a second apart, as JSON lines.
fn own_file(keys: &Keys, count: usize, out: &Path) -> Res<()> {
    let now = Timestamp::now().0;
    let mut w = std::io::BufWriter::new(std::fs::File::create(out).map_err(err)?);
    for i in 0..count {
        let e = keys.sign(
            Timestamp(now - 86_400 + (i as u64 % 80_000)),
            Kind(1),
            vec![],
            &format!("a note of mine, number {i}"),
        );
        writeln!(w, "{}", serde_json::to_string(&e).map_err(err)?).map_err(err)?;
    }
    w.flush().map_err(err)
}

/// `hearth-bench vanish`: `events` others' events (`file`, generated when missing) and `theirs`
/// of one key in a fresh relay; the query mix alone, then again while the key vanishes.
pub(crate) async fn vanish(events: usize, theirs: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let keys = Keys::from_bytes([0x62; 32]).map_err(err)?;
    let relay = Spawned::start("vanish", &[])?;
    let own = relay.data.join("vanishing.jsonl");
    own_file(&keys, theirs, &own)?;
    ingest(&relay.relay, file, 4, 256).await?;
    ingest(&relay.relay, &own, 4, 256).await?;
    let without = query(&relay.relay, file, 400, None).await?;
    let request = keys.sign(Timestamp::now(), Kind(62), vec![vec!["relay".into(), "ALL_RELAYS".into()]], "");
    let (mut tx, mut rx) = connect(&relay.relay).await?.split();
    let started = Instant::now();
    tx.send(Message::text(json!(["EVENT", request]).to_string())).await.map_err(err)?;
    let answer = async {
        loop {
            let frame = next_frame(&mut rx).await.ok_or("the relay went quiet")?;
            if frame[0] == "OK" {
                return Ok::<_, String>((frame, started.elapsed()));
            }
        }
    };
    let (answered, during) = tokio::join!(answer, query(&relay.relay, file, 400, None));
    let (ok, took) = answered?;
    let during = during?;
    relay.stop();
    if ok[2] != true {
        return Err(format!("the request to vanish was refused: {ok}"));
    }
    let ((without_p50, without_p99), (during_p50, during_p99)) = (without.p50_p99(), during.p50_p99());
    let secs = took.as_secs_f64();
    reports.push(Report {
        json: json!({"cmd": "vanish", "events": events, "theirs": theirs, "vanish_secs": secs,
            "removed_per_sec": theirs as f64 / secs, "query_p50_ms_without": without_p50, "query_p99_ms_without": without_p99,
            "query_p50_ms_during": during_p50, "query_p99_ms_during": during_p99}),
        summary: format!(
            "vanish: {theirs} events of one key among {events} gone in {secs:.1} s ({:.0}/s); the query mix p50/p99 \
             {without_p50:.2}/{without_p99:.2} ms without, {during_p50:.2}/{during_p99:.2} ms during",
            theirs as f64 / secs
        ),
    });
    Ok(reports)
}
