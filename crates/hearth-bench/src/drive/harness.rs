//! Release binaries of the relay as child processes: scratch directories, their sizes and the
//! memory the kernel reports for a process.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::*;

pub(super) fn dir_size(path: &Path) -> u64 {
    sum_files(path, &mut |_, meta| Ok(meta.len())).unwrap_or(0)
}

/// The sum of `per_file` over every file under `dir`, its subdirectories' included.
pub(super) fn sum_files(dir: &Path, per_file: &mut impl FnMut(&Path, &std::fs::Metadata) -> Res<u64>) -> Res<u64> {
    let mut sum = 0;
    for entry in std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))? {
        let entry = entry.map_err(err)?;
        let meta = entry.metadata().map_err(err)?;
        sum += if meta.is_dir() { sum_files(&entry.path(), per_file)? } else { per_file(&entry.path(), &meta)? };
    }
    Ok(sum)
}

pub(super) fn scratch_dir(name: &str) -> Res<PathBuf> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_err(err)?.as_nanos();
    let dir = std::env::temp_dir().join(format!("hearth-bench-{name}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(err)?;
    Ok(dir)
}

/// Quotas that never refuse, as `HEARTH_…` variables.
pub(super) const GENEROUS: [(&str, &str); 16] = [
    ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__HUMAN__WS_REQS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__AGENT__WS_REQS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__IP__WS_REQS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__HUMAN__API_CALLS_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__AGENT__WS_EVENTS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__AGENT__API_CALLS_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC", "10000000"),
    ("HEARTH_LIMITS__IP__MESSAGES_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__IP__API_CALLS_PER_MIN", "1000000000"),
    ("HEARTH_LIMITS__HANDLER_WAIT_MS", "10000"),
    ("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "20"),
    // The fan-out workload holds 500 subscriber sockets from one address.
    ("HEARTH_SERVER__MAX_CONNECTIONS_PER_IP", "10000"),
    ("HEARTH_SERVER__MAX_SUBSCRIPTIONS_PER_IP", "1000000"),
];

/// One kB figure of `/proc/<pid>/status` (0 where there is no such file, e.g. not on Linux).
pub(super) fn proc_status_kb(pid: &str, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// CPU seconds process `pid` has used (user + system), from `/proc/<pid>/stat`; 0 when unreadable.
pub(super) fn cpu_secs(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command's closing parenthesis: utime and stime are the 12th and 13th.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// A release `hearth` started by the suite on a scratch directory.
pub(super) struct Spawned {
    child: std::process::Child,
    pub(super) data: PathBuf,
    pub(super) relay: String,
    /// Its last log lines, for a failure's report.
    log: Arc<Mutex<VecDeque<String>>>,
}

/// Whether sled is writing a snapshot in `dir` now.
fn writing_snapshot(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else { return false };
    entries
        .flatten()
        .any(|e| e.file_name().to_str().is_some_and(|n| n.starts_with("snap.") && n.ends_with(".generating")))
}

/// Log lines a [`Spawned`] keeps.
const KEPT_LINES: usize = 30;

impl Spawned {
    /// Starts the `hearth` beside this binary with generous quotas and `env` on top.
    pub(super) fn start(name: &str, env: &[(&str, &str)]) -> Res<Spawned> {
        Spawned::start_on(scratch_dir(name)?, env)
    }

    /// [`Spawned::start`] on the scratch directory `data` (its data directory is `data/data`).
    /// Waits for its `listening on` line as long as it takes.
    pub(super) fn start_on(data: PathBuf, env: &[(&str, &str)]) -> Res<Spawned> {
        Spawned::start_within(data, env, None)
    }

    /// [`Spawned::start_on`], failing (with its last log lines, the process killed) when it is
    /// not listening within `limit` (if there is one).
    pub(super) fn start_within(data: PathBuf, env: &[(&str, &str)], limit: Option<Duration>) -> Res<Spawned> {
        let exe = std::env::current_exe().map_err(err)?.with_file_name("hearth");
        let mut child = std::process::Command::new(&exe)
            .current_dir(&data)
            .env("HEARTH_SERVER__BIND", "127.0.0.1:0")
            .env("HEARTH_STORAGE__DATA_DIR", data.join("data"))
            .envs(GENEROUS)
            .envs(env.iter().copied())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e} (build it with cargo build --release)", exe.display()))?;
        let stderr = child.stderr.take().ok_or("no stderr")?;
        let log = Arc::new(Mutex::new(VecDeque::with_capacity(KEPT_LINES)));
        let (tx, rx) = std::sync::mpsc::channel();
        let kept = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(i) = line.find("listening on ") {
                    let _ = tx.send(line[i + "listening on ".len()..].trim().to_string());
                }
                let mut kept = kept.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if kept.len() == KEPT_LINES {
                    kept.pop_front();
                }
                kept.push_back(line);
            }
        });
        let mut spawned = Spawned { child, data, relay: String::new(), log };
        let waited = match limit {
            None => rx.recv().map_err(err),
            Some(limit) => rx.recv_timeout(limit).map_err(err),
        };
        match waited {
            Ok(addr) => {
                spawned.relay = format!("ws://{addr}/");
                Ok(spawned)
            }
            Err(e) => {
                let _ = spawned.child.kill();
                let _ = spawned.child.wait();
                Err(format!("hearth was not listening ({e}); its last lines:\n{}", spawned.last_lines()))
            }
        }
    }

    /// Its last log lines.
    pub(super) fn last_lines(&self) -> String {
        let kept = self.log.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        kept.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Peak resident memory so far, in MB.
    pub(super) fn peak_rss_mb(&self) -> f64 {
        proc_status_kb(&self.child.id().to_string(), "VmHWM:") as f64 / 1024.0
    }

    /// Waits (at most `limit`) until the relay is at rest: under 5 % of a core over half a second
    /// (a store's flush and the search index's merges after an ingest run on behind it).
    pub(super) fn settle(&self, limit: Duration) {
        let deadline = std::time::Instant::now() + limit;
        let mut before = cpu_secs(self.child.id());
        while std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(500));
            let now = cpu_secs(self.child.id());
            // Under 5 % of a core over half a second: under 0.025 s (2.5 ticks of 10 ms).
            if now - before < 0.025 {
                return;
            }
            before = now;
        }
    }

    /// Resident memory now, in kB.
    pub(super) fn rss_kb(&self) -> u64 {
        proc_status_kb(&self.child.id().to_string(), "VmRSS:")
    }

    /// SIGTERM, wait, remove the data.
    pub(super) fn stop(self) {
        let data = self.stop_keeping();
        let _ = std::fs::remove_dir_all(&data);
    }

    /// SIGTERM and wait; the scratch directory stays, for the next start.
    pub(super) fn stop_keeping(mut self) -> PathBuf {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
        self.data
    }

    /// SIGTERM, then SIGKILL `after` it (whether the stop has finished or not), or, with
    /// `at_snapshot`, as soon as sled is seen writing a snapshot (`snap.<lsn>.generating` in the
    /// data directory; the stop's checkpoint writes one), if that comes first; then wait. The
    /// scratch directory stays.
    pub(super) fn terminate_then_kill(mut self, after: Duration, at_snapshot: bool) -> PathBuf {
        let _ = std::process::Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let begun = std::time::Instant::now();
        while begun.elapsed() < after {
            if at_snapshot && writing_snapshot(&self.data.join("data")) {
                break;
            }
            // A snapshot of a small store is written in well under a millisecond.
            std::thread::sleep(Duration::from_micros(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.data
    }

    /// SIGKILL and wait; the scratch directory stays.
    pub(super) fn kill_keeping(mut self) -> PathBuf {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.data
    }
}
