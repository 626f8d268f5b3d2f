//! The `hearth` binary itself: configuration errors, the start-up line, and SIGTERM.

use std::process::{Command, Stdio};

use crate::common::*;
use hearth::protocol::Event;
use serde_json::json;

#[test]
fn zero_limit_stops_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let out = hearth().current_dir(dir.path()).env("HEARTH_LIMITATION__MAX_SUBSCRIPTIONS", "0").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("limitation.max_subscriptions"), "{err}");
}

#[test]
fn unknown_key_and_bad_address_stop_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("custom.toml");
    std::fs::write(&file, "[server]\nbindd = \"127.0.0.1:1\"\n").unwrap();
    let out = hearth().current_dir(dir.path()).arg("--config").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("bindd"));
    let out = hearth().current_dir(dir.path()).env("HEARTH_SERVER__BIND", "not-an-address").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("server.bind"));
}

#[test]
fn a_data_directory_that_cannot_be_created_is_named_with_what_failed() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let data = file.join("data");
    let out = hearth().current_dir(dir.path()).env("HEARTH_STORAGE__DATA_DIR", &data).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    let want = format!("data directory {}: cannot create it: Not a directory", data.display());
    assert!(err.contains(&want), "{err}");
}

/// The power-cut tests' disk: `hearth-bench lossy` mounted on `dir/data` (where [`start_with`]
/// puts the relay's data) over `dir/disk`, a filesystem that keeps every write in memory until
/// its file is synced. [`Lossy::cut`] is the power cut; dropped, it is cut and unmounted. Needs
/// root and /dev/fuse, as the tmpfs of the full-disk test needs root.
pub(crate) struct Lossy {
    serving: Option<Running>,
    dir: std::path::PathBuf,
}

impl Lossy {
    pub(crate) fn mount(dir: &std::path::Path) -> Lossy {
        let (disk, data) = (dir.join("disk"), dir.join("data"));
        std::fs::create_dir_all(&disk).unwrap();
        std::fs::create_dir_all(&data).unwrap();
        let mut child = Command::new(crate::common::bench_exe())
            .arg("lossy")
            .args([&disk, &data])
            // Held open by the child's handle: if this process dies, the filesystem unmounts.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let serving = Running(child);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line);
            let _ = tx.send(line);
        });
        let line = rx.recv_timeout(STEP * 6).unwrap_or_default();
        assert_eq!(line.trim(), "mounted", "the lossy filesystem did not mount (it needs root and /dev/fuse)");
        Lossy { serving: Some(serving), dir: dir.to_path_buf() }
    }

    /// Kills the filesystem with what it had not synced and unmounts it: every program on it
    /// must have been stopped first.
    fn unmount(&mut self) {
        if let Some(serving) = self.serving.take() {
            // Killed (and waited for) first: what it held is gone.
            drop(serving);
            let _ = Command::new("umount").arg("-l").arg(self.dir.join("data")).status();
        }
    }

    /// The power cut: the disk loses whatever was written and not synced, and is mounted again
    /// as the cut left it.
    pub(crate) fn cut(&mut self) {
        self.unmount();
        *self = Lossy::mount(&self.dir);
    }
}

impl Drop for Lossy {
    fn drop(&mut self) {
        self.unmount();
    }
}

fn start(dir: &std::path::Path) -> (Running, String) {
    start_with(dir, &[])
}

/// Quotas no test here should reach (the IP ceiling's too: a test's frames all come from one
/// address).
pub(crate) const GENEROUS: [(&str, &str); 4] = [
    ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "100000"),
    ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "1000000"),
    ("HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC", "100000"),
    ("HEARTH_LIMITS__IP__MESSAGES_PER_MIN", "1000000"),
];

fn frame(msg: tokio_tungstenite::tungstenite::Message) -> serde_json::Value {
    serde_json::from_str(msg.into_text().unwrap().as_str()).unwrap()
}

#[tokio::test]
async fn binary_serves_on_the_logged_address_and_exits_0_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(dir.path());
    let e = sign(&keys(1), now(), 1, &[], "via the binary");
    {
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/")).await.unwrap();
        use futures_util::{SinkExt, StreamExt};
        let challenge = tokio::time::timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(frame(challenge)[0], "AUTH");
        ws.send(tokio_tungstenite::tungstenite::Message::text(json!(["EVENT", e]).to_string())).await.unwrap();
        let ok = tokio::time::timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
        assert_eq!(frame(ok), json!(["OK", e.id.to_hex(), true, ""]));
    }
    let status = sigterm(&mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
    // Acknowledged means durable: a new process on the same directory serves it.
    let (mut child, addr) = start(dir.path());
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{addr}/")).await.unwrap();
    use futures_util::{SinkExt, StreamExt};
    let challenge = tokio::time::timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(frame(challenge)[0], "AUTH");
    ws.send(tokio_tungstenite::tungstenite::Message::text(json!(["REQ", "s", {}]).to_string())).await.unwrap();
    let first = tokio::time::timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    assert_eq!(frame(first), json!(["EVENT", "s", e]));
    drop(ws);
    let status = sigterm(&mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[tokio::test]
async fn every_acknowledged_write_survives_kill_9() {
    // SIGKILL right after the last OK: the event log holds the acknowledged groups, sled's batches
    // for them may never have been flushed, and the next start must replay them.
    let dir = tempfile::tempdir().unwrap();
    let (mut child, addr) = start_with(dir.path(), &GENEROUS);
    let url = format!("ws://{addr}/");
    let mut c = Client::connect(&url).await;
    let k = keys(4);
    let base = now() - 1000;
    let notes: Vec<Event> = (0..200).map(|i| sign(&k, base + i, 1, &[&["t", "kill"]], &format!("note {i}"))).collect();
    // Pipelined, so that the writer takes them in groups.
    for e in &notes {
        c.send(json!(["EVENT", e])).await;
    }
    for _ in &notes {
        let ok = c.recv().await;
        assert_eq!((&ok[0], &ok[2]), (&json!("OK"), &json!(true)), "{ok}");
    }
    let (old, new) = (sign(&k, base, 0, &[], "old profile"), sign(&k, base + 1, 0, &[], "new profile"));
    let deletion = sign(&k, base + 500, 5, &[&["e", &notes[0].id.to_hex()]], "");
    for e in [&old, &new, &deletion] {
        let ok = c.publish(e).await;
        assert_eq!(ok[2], true, "{ok}");
    }
    child.0.kill().unwrap();
    child.0.wait().unwrap();
    drop(c);

    let (mut child, addr) = start_with(dir.path(), &GENEROUS);
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let mut want: Vec<String> = notes[1..].iter().rev().map(|e| e.id.to_hex()).collect();
    assert_eq!(c.req_ids("notes", vec![json!({"#t": ["kill"], "limit": 500})]).await, want);
    want = vec![new.id.to_hex()];
    assert_eq!(c.req_ids("profile", vec![json!({"kinds": [0]})]).await, want);
    assert_eq!(c.req_ids("deletion", vec![json!({"kinds": [5]})]).await, vec![deletion.id.to_hex()]);
    // What was acknowledged as stored, replaced or deleted stays so.
    assert_eq!(c.publish(&notes[5]).await[3], "duplicate: already have this event");
    assert_eq!(c.publish(&old).await[2], false);
    assert_eq!(c.publish(&notes[0]).await[2], false);
    assert_eq!(sigterm(&mut child).code(), Some(0));
}

/// The value of the Prometheus sample `name` whose labels include every one of `labels`
/// (0 when the relay has not recorded it yet).
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.strip_prefix(name).is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{')))
        .find(|l| labels.iter().all(|label| l.contains(label)))
        .map_or(0.0, |l| l.rsplit(' ').next().unwrap().parse().unwrap())
}

#[tokio::test]
async fn metrics_count_exactly_what_one_relay_process_did() {
    // Its own process, so its own recorder: no other test's relay can move these counters.
    let dir = tempfile::tempdir().unwrap();
    let env = [
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1"),
        ("HEARTH_LIMITS__HUMAN__WS_BURST_WINDOW_SECS", "1"),
        ("HEARTH_LIMITS__HUMAN__WS_REQS_PER_SEC", "1"),
        ("HEARTH_LIMITS__HUMAN__WS_REQS_BURST_WINDOW_SECS", "1"),
        ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "1000000"),
    ];
    let (mut child, addr) = start_with(dir.path(), &env);
    let metrics = || async {
        let text = web_get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
        let stored = sample(&text, "hearth_events_stored_total", &[]);
        let refused = |limit_type: &str| {
            let label = format!("limit_type=\"{limit_type}\"");
            sample(&text, "hearth_admission_rejections_total", &[r#"reason="quota""#, &label])
        };
        let latency = sample(&text, "hearth_admission_seconds_count", &[]);
        (stored, (refused("ws_events"), refused("ws_reqs")), latency)
    };
    let before = metrics().await;
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let e = sign(&keys(9), now(), 1, &[], "counted once");
    assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), true, ""]));
    // Reads have their own budget (set by its HEARTH_… form): the first COUNT is admitted after
    // the EVENT spent the writes', the second is refused on ws_reqs.
    c.send(json!(["COUNT", "q", {}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "q", {"count": 1}]));
    c.send(json!(["COUNT", "r", {}])).await;
    assert_eq!(c.recv().await, json!(["CLOSED", "r", "rate-limited: quota exceeded (ws_reqs); retry in 1s"]));
    let after = metrics().await;
    assert_eq!(after.0 - before.0, 1.0, "stored");
    assert_eq!((after.1.0 - before.1.0, after.1.1 - before.1.1), (0.0, 1.0), "ws_events and ws_reqs refusals");
    // The EVENT bills ws_events and messages, each COUNT ws_reqs.
    assert_eq!(after.2 - before.2, 4.0, "admissions timed");
    // Its resident memory, as the kernel counts it for the process.
    let text = web_get(format!("http://{addr}/metrics")).await.unwrap().text().await.unwrap();
    let resident = sample(&text, "process_resident_memory_bytes", &[]);
    let kernel_kb: f64 = std::fs::read_to_string(format!("/proc/{}/status", child.0.id()))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(resident > 1e6 && (resident - kernel_kb * 1024.0).abs() < 0.5 * resident, "{resident} vs {kernel_kb} kB");
    // The heap as its allocator counts it: some of what the process holds, all of it in memory
    // the allocator holds.
    let allocated = sample(&text, "hearth_heap_allocated_bytes", &[]);
    let heap_resident = sample(&text, "hearth_heap_resident_bytes", &[]);
    assert!(allocated > 1e5 && allocated <= heap_resident, "{allocated} allocated, {heap_resident} held");
    // jemalloc's `resident` is an upper bound (pages it mapped and may not have touched yet), so
    // it is held to the process's resident memory only loosely.
    assert!(heap_resident <= resident * 2.0, "{heap_resident} held by the heap, {resident} resident");
    let status = sigterm(&mut child);
    assert_eq!(status.code(), Some(0), "{status:?}");
}
