//! `sync`: one NIP-77 round between two release relays' stores that differ by 1 % (each lacks a
//! different half of it): how long it takes, what its negentropy messages cost on the wire beside
//! the ids alone, and the peak memory of the syncing process and of the peer answering it.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;

/// In the scattered case one line in this many is missing from one side (and the next from the
/// other): the stores are 1 % apart.
const STRIDE: usize = 200;

/// `hearth` beside this binary on the data directory `dir/data`.
pub(super) fn hearth(dir: &Path, env: &[(&str, &str)]) -> Res<Command> {
    let exe = std::env::current_exe().map_err(err)?.with_file_name("hearth");
    let mut cmd = Command::new(exe);
    cmd.current_dir(dir)
        .env("HEARTH_SERVER__BIND", "127.0.0.1:0")
        .env("HEARTH_STORAGE__DATA_DIR", dir.join("data"))
        .envs(env.iter().copied());
    Ok(cmd)
}

/// `hearth import` of `lines` into `dir`.
pub(super) fn import<'a>(dir: &Path, lines: impl Iterator<Item = &'a str>) -> Res<()> {
    let mut child = hearth(dir, &[])?.arg("import").stdin(Stdio::piped()).stdout(Stdio::null()).spawn().map_err(err)?;
    let mut stdin = std::io::BufWriter::new(child.stdin.take().ok_or("no stdin")?);
    for line in lines {
        stdin.write_all(line.as_bytes()).and_then(|()| stdin.write_all(b"\n")).map_err(err)?;
    }
    drop(stdin.into_inner().map_err(err)?);
    match child.wait().map_err(err)?.code() {
        Some(0) => Ok(()),
        code => Err(format!("hearth import exited {code:?}")),
    }
}

/// `hearth <args>` on `dir`: the JSON line it prints, its peak RSS (MB, sampled every 10 ms:
/// the high-water mark only grows) and its wall time; an error unless it exits 0.
pub(super) fn run_hearth(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Res<(Value, f64, f64)> {
    let started = Instant::now();
    let mut child = hearth(dir, env)?.args(args).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().map_err(err)?;
    let pid = child.id().to_string();
    let mut peak_kb = 0;
    while child.try_wait().map_err(err)?.is_none() {
        peak_kb = peak_kb.max(proc_status_kb(&pid, "VmHWM:"));
        std::thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().map_err(err)?;
    let summary: Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("hearth {args:?}'s summary: {e}"))?;
    if out.status.code() != Some(0) {
        return Err(format!("hearth {args:?} exited {:?}: {summary}", out.status.code()));
    }
    Ok((summary, peak_kb as f64 / 1024.0, started.elapsed().as_secs_f64()))
}

/// `hearth sync <peer> <args>` on `dir`: see [`run_hearth`].
fn run_sync(dir: &Path, peer: &str, args: &[&str], env: &[(&str, &str)]) -> Res<(Value, f64, f64)> {
    let mut all = vec!["sync", peer];
    all.extend_from_slice(args);
    run_hearth(dir, &all, env)
}

/// Two stores of `file`'s events (generated with `events` when missing), each less a different
/// 0.5 %: `scattered` (every 200th line from one side, the next from the other: every range of
/// the set differs, negentropy's hardest case) and `recent` (the newest 1 % split between the
/// sides: a backup that missed the last days). For each, a dry run (the exchange alone), a round
/// both ways, and a dry run again, which must find nothing left.
pub(crate) async fn sync(events: usize, file: &Path) -> Res<Vec<Report>> {
    let mut reports = Vec::new();
    if !file.exists() {
        reports.push(gen_file(events, file)?);
    }
    let lines = read_lines(file)?;
    let scattered: Vec<u8> = (0..lines.len()).map(|i| [1, 2].get(i % STRIDE).copied().unwrap_or(0)).collect();
    // The newest 1 %, by created_at: the older half of it missing from ours, the newer from theirs.
    let mut by_time: Vec<(u64, usize)> = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let at = serde_json::from_str::<Value>(line).map_err(err)?["created_at"].as_u64().unwrap_or(0);
        by_time.push((at, i));
    }
    by_time.sort_unstable();
    let mut recent = vec![0u8; lines.len()];
    let newest = lines.len() / (STRIDE / 2);
    for (rank, (_, i)) in by_time.iter().rev().take(newest).enumerate() {
        recent[*i] = if rank < newest / 2 { 2 } else { 1 };
    }
    for (name, lacks) in [("scattered", scattered), ("recent", recent)] {
        reports.push(scenario(name, &lines, &lacks)?);
    }
    Ok(reports)
}

/// One round between a store without the lines `lacks` marks 1 and one without those marked 2.
fn scenario(name: &str, lines: &[String], lacks: &[u8]) -> Res<Report> {
    let (ours, theirs) = (scratch_dir("sync-ours")?, scratch_dir("sync-theirs")?);
    let without = |side: u8| lines.iter().zip(lacks).filter(move |(_, l)| **l != side).map(|(line, _)| line.as_str());
    import(&ours, without(1))?;
    import(&theirs, without(2))?;
    let held = without(1).count() as u64;
    let max_items = (lines.len() * 2).to_string();
    let env = [("HEARTH_SYNC__MAX_ITEMS", max_items.as_str()), ("HEARTH_SYNC__MAX_ITEMS_HELD", max_items.as_str())];
    let peer = Spawned::start_on(theirs, &env)?;
    let peer_before_mb = peer.peak_rss_mb();

    let (dry, dry_peak_mb, dry_secs) = run_sync(&ours, &peer.relay, &["--dry-run"], &env)?;
    // What the exchange must find: exactly the lines one side lacks, each once.
    let lacking = |side: u8| lacks.iter().filter(|l| **l == side).count() as u64;
    if dry["have"] != lacking(2) || dry["need"] != lacking(1) {
        let _ = std::fs::remove_dir_all(&ours);
        return Err(format!("{name}: the exchange found {dry}, not have {} and need {}", lacking(2), lacking(1)));
    }
    let (full, full_peak_mb, full_secs) = run_sync(&ours, &peer.relay, &["--direction", "both"], &env)?;
    let (after, ..) = run_sync(&ours, &peer.relay, &["--dry-run"], &env)?;
    let peer_peak_mb = peer.peak_rss_mb();
    peer.stop();
    let _ = std::fs::remove_dir_all(&ours);
    if after["have"] != 0 || after["need"] != 0 {
        return Err(format!("{name}: after the round the stores still differ: {after}"));
    }

    let figure = |v: &Value, key: &str| v[key].as_f64().unwrap_or(0.0);
    let wire = figure(&dry, "sync_bytes");
    // The ids alone: every id we hold, as the hex a JSON frame carries them in.
    let ids_bytes = held * 64;
    let ratio = ids_bytes as f64 / wire.max(1.0);
    let differing = figure(&dry, "have") + figure(&dry, "need");
    let json = json!({"cmd": "sync", "case": name, "events_each": held, "differing": differing,
        "reconcile_seconds": dry_secs, "reconcile_bytes": wire, "ids_alone_bytes": ids_bytes,
        "ids_over_reconcile": ratio, "reconcile_peak_rss_mb": dry_peak_mb, "round_seconds": full_secs,
        "round": full, "round_peak_rss_mb": full_peak_mb, "peer_rss_before_mb": peer_before_mb,
        "peer_peak_rss_mb": peer_peak_mb});
    let summary = format!(
        "sync ({name}) {held} events each, {differing} differing: the exchange {dry_secs:.1} s and {wire:.0} B \
         ({ratio:.1} x fewer than the ids alone, {ids_bytes} B), peak RSS {dry_peak_mb:.0} MB; the round both ways \
         {full_secs:.1} s (stored {}, published {}), peak RSS {full_peak_mb:.0} MB; the peer's peak RSS \
         {peer_before_mb:.0} → {peer_peak_mb:.0} MB",
        full["stored"], full["published"]
    );
    Ok(Report { json, summary })
}
