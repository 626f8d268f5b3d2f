//! The media server on the release relay: a large upload and its download beside the disk's own
//! sequential write and read (`dd`, in the same run), the relay's memory while the upload
//! streams in (it must stay flat: the body is never held whole), and many uploads at once.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::stats::percentile_ms;
use hearth::protocol::blossom::{self, Verb};
use hearth::protocol::{Keys, Timestamp};

/// Bytes written per chunk of an upload.
const CHUNK: usize = 1 << 20;

/// `dd` of `mb` MiB: (write MB/s with an fsync at the end, read MB/s).
fn dd(dir: &std::path::Path, mb: u64) -> Res<(f64, f64)> {
    let file = dir.join("dd.bin");
    let run = |args: &[String]| -> Res<f64> {
        let started = Instant::now();
        let out = std::process::Command::new("dd").args(args).output().map_err(err)?;
        if !out.status.success() {
            return Err(format!("dd: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(mb as f64 * 1.048_576 / started.elapsed().as_secs_f64())
    };
    let of = format!("of={}", file.display());
    let write = run(&["if=/dev/zero".into(), of, "bs=1M".into(), format!("count={mb}"), "conv=fsync".into()])?;
    let read = run(&[format!("if={}", file.display()), "of=/dev/null".into(), "bs=1M".into()])?;
    std::fs::remove_file(&file).map_err(err)?;
    Ok((write, read))
}

/// The HTTP address of a relay's `ws://…/`.
fn http_addr(relay: &str) -> String {
    relay.trim_start_matches("ws://").trim_end_matches('/').to_string()
}

/// PUTs `size` bytes (made chunk by chunk from `seed`, never held whole) as `keys`; the status.
async fn upload(addr: &str, keys: &Keys, size: u64, seed: u8) -> Res<u16> {
    let auth = blossom::header(keys, Verb::Upload, &[], Timestamp::now(), Timestamp::now().0 + 3600);
    let mut tcp = tokio::net::TcpStream::connect(addr).await.map_err(err)?;
    let head = format!(
        "PUT /upload HTTP/1.1\r\nHost: {addr}\r\nAuthorization: {auth}\r\nContent-Type: application/octet-stream\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.map_err(err)?;
    let mut chunk = vec![0u8; CHUNK];
    let mut sent = 0u64;
    let mut n = 0u64;
    while sent < size {
        let len = (size - sent).min(CHUNK as u64) as usize;
        // Distinct bytes per chunk and per upload, so no two blobs are one.
        for (i, b) in chunk[..len].iter_mut().enumerate() {
            *b = (i as u64).wrapping_mul(31).wrapping_add(n).wrapping_add(u64::from(seed) << 8) as u8;
        }
        tcp.write_all(&chunk[..len]).await.map_err(err)?;
        sent += len as u64;
        n += 1;
    }
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).await.map_err(err)?;
    let text = String::from_utf8_lossy(&answer);
    text.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or_else(|| format!("no status in {text}"))
}

/// GETs `/<sha256>` and counts the bytes of the answer.
async fn download(addr: &str, sha: &str) -> Res<u64> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.map_err(err)?;
    tcp.write_all(format!("GET /{sha} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .map_err(err)?;
    let mut buf = vec![0u8; CHUNK];
    let mut total = 0u64;
    loop {
        let n = tcp.read(&mut buf).await.map_err(err)?;
        if n == 0 {
            return Ok(total);
        }
        total += n as u64;
    }
}

/// `hearth-bench media`: one `size_mb` upload and download beside `dd`, the RSS during the
/// upload, then `concurrent` uploads of `each_mb` at once.
pub(crate) async fn media(size_mb: u64, concurrent: usize, each_mb: u64) -> Res<Vec<Report>> {
    let scratch = scratch_dir("media")?;
    let (dd_write, dd_read) = dd(&scratch, size_mb)?;
    let big = (size_mb << 20).to_string();
    let env = [
        ("HEARTH_MEDIA__MAX_BLOB_BYTES", big.as_str()),
        ("HEARTH_MEDIA__MAX_TOTAL_BYTES", "1099511627776"),
        ("HEARTH_LIMITS__HUMAN__UPLOAD_BYTES_PER_DAY", "1125899906842624"),
        ("HEARTH_LIMITS__IP__UPLOAD_BYTES_PER_DAY", "1125899906842624"),
    ];
    let relay = Spawned::start_on(scratch.clone(), &env)?;
    let outcome = run(&relay, size_mb, concurrent, each_mb, (dd_write, dd_read)).await;
    relay.stop();
    let _ = std::fs::remove_dir_all(&scratch);
    outcome
}

async fn run(
    relay: &Spawned,
    size_mb: u64,
    concurrent: usize,
    each_mb: u64,
    (dd_write, dd_read): (f64, f64),
) -> Res<Vec<Report>> {
    let addr = http_addr(&relay.relay);
    let keys = Keys::from_bytes([7; 32]).map_err(err)?;
    let rss_before = relay.rss_kb();
    let size = size_mb << 20;
    let started = Instant::now();
    let uploading = tokio::spawn({
        let (addr, keys) = (addr.clone(), keys.clone());
        async move { upload(&addr, &keys, size, 0).await }
    });
    let mut rss_peak = rss_before;
    while !uploading.is_finished() {
        rss_peak = rss_peak.max(relay.rss_kb());
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = uploading.await.map_err(err)??;
    let up_secs = started.elapsed().as_secs_f64();
    if status != 201 {
        return Err(format!("the upload was answered {status}"));
    }
    let list: serde_json::Value = reqwest::get(format!("http://{addr}/list/{}", keys.public_key().to_hex()))
        .await
        .map_err(err)?
        .json()
        .await
        .map_err(err)?;
    let sha = list[0]["sha256"].as_str().ok_or("the upload is not listed")?.to_string();
    let started = Instant::now();
    let got = download(&addr, &sha).await?;
    let down_secs = started.elapsed().as_secs_f64();
    if got < size {
        return Err(format!("downloaded {got} of {size} bytes"));
    }
    let mb = size as f64 / 1e6;
    let (upload_mb_s, download_mb_s) = (mb / up_secs, mb / down_secs);
    // Many at once, each its own key.
    let started = Instant::now();
    let tasks: Vec<_> = (0..concurrent)
        .map(|i| {
            let addr = addr.clone();
            tokio::spawn(async move {
                let keys = Keys::from_bytes([(i % 200) as u8 + 20; 32]).map_err(err)?;
                let t = Instant::now();
                let status = upload(&addr, &keys, each_mb << 20, (i % 250) as u8 + 1).await?;
                if status != 201 && status != 200 {
                    return Err(format!("upload {i} was answered {status}"));
                }
                Ok::<Duration, String>(t.elapsed())
            })
        })
        .collect();
    let mut times = Vec::new();
    for t in tasks {
        times.push(t.await.map_err(err)??);
    }
    let all_secs = started.elapsed().as_secs_f64();
    let (p50, p99) = (percentile_ms(&mut times, 50.0), percentile_ms(&mut times, 99.0));
    let json = serde_json::json!({
        "bench": "media", "size_mb": size_mb,
        "dd_write_mb_s": dd_write, "dd_read_mb_s": dd_read,
        "upload_mb_s": upload_mb_s, "download_mb_s": download_mb_s,
        "upload_vs_dd_write": upload_mb_s / dd_write, "download_vs_dd_read": download_mb_s / dd_read,
        "rss_before_mb": rss_before as f64 / 1024.0, "rss_peak_during_upload_mb": rss_peak as f64 / 1024.0,
        "concurrent": concurrent, "each_mb": each_mb, "concurrent_secs": all_secs,
        "concurrent_mb_s": (concurrent as u64 * each_mb) as f64 * 1.048_576 / all_secs,
        "concurrent_p50_ms": p50, "concurrent_p99_ms": p99,
    });
    let summary = format!(
        "media: a {size_mb} MiB upload at {upload_mb_s:.0} MB/s ({:.2}x dd's write {dd_write:.0} MB/s), its download at {download_mb_s:.0} MB/s ({:.2}x dd's read {dd_read:.0} MB/s); relay RSS {:.0} MB before, {:.0} MB at most during the upload; {concurrent} uploads of {each_mb} MiB at once in {all_secs:.2} s (p50 {p50:.0} ms, p99 {p99:.0} ms)",
        upload_mb_s / dd_write,
        download_mb_s / dd_read,
        rss_before as f64 / 1024.0,
        rss_peak as f64 / 1024.0
    );
    Ok(vec![Report { json, summary }])
}
