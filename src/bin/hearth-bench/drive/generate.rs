//! Pre-signed events for the workloads: a seeded, reproducible mix of authors, tags and times.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::time::Instant;

use hearth::protocol::{Keys, Kind, Timestamp};
use serde_json::json;

use super::*;
use crate::stats::Rng;

pub(super) const TOPICS: [&str; 20] = [
    "nostr", "rust", "bitcoin", "music", "art", "food", "travel", "books", "science", "news", "photo", "dev", "linux",
    "garden", "cats", "dogs", "coffee", "sports", "film", "maths",
];
pub(super) fn author(i: u64) -> Res<Keys> {
    Keys::from_bytes([(i % 100) as u8 + 1; 32]).map_err(err)
}

/// Pre-signs `count` kind-1 events: ~100 authors, 100–300-byte content, `t`/`p` tags,
/// created_at spread over 30 days. Signed on every core; written as JSON lines.
pub(crate) fn gen_file(count: usize, out: &Path) -> Res<Report> {
    gen_file_with(count, out, 0)
}

/// [`gen_file`] with `private_percent` of the events kind 4 direct messages to their `p` tag's
/// pubkey instead (0: exactly `gen_file`'s events).
pub(crate) fn gen_file_with(count: usize, out: &Path, private_percent: u64) -> Res<Report> {
    let started = Instant::now();
    let now = Timestamp::now().0;
    let threads = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    let chunk = count.div_ceil(threads).max(1);
    let lines: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                scope.spawn(move || -> Res<Vec<String>> {
                    let mut rng = Rng::new(0x5eed + t as u64);
                    let mut out = Vec::new();
                    for i in (t * chunk)..((t + 1) * chunk).min(count) {
                        let keys = author(i as u64)?;
                        let len = 100 + rng.below(201) as usize;
                        let content: String = (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect();
                        let mut tags = vec![
                            vec!["t".to_string(), TOPICS[rng.below(20) as usize].to_string()],
                            vec!["p".to_string(), author(rng.below(100))?.public_key().to_hex()],
                        ];
                        if rng.below(3) == 0 {
                            tags.push(vec!["t".to_string(), TOPICS[rng.below(20) as usize].to_string()]);
                        }
                        let at = Timestamp(now - rng.below(30 * 86_400));
                        // Drawn only when asked for, so that the file of 0 % is the one it was.
                        let private = private_percent > 0 && rng.below(100) < private_percent;
                        let kind = if private { Kind(4) } else { Kind(1) };
                        out.push(keys.sign(at, kind, tags, &format!("{i} {content}")).to_json().map_err(err)?);
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::with_capacity(count);
        for h in handles {
            all.extend(h.join().map_err(|_| "signing thread panicked".to_string())??);
        }
        Ok::<_, String>(all)
    })?;
    let mut file = std::io::BufWriter::new(std::fs::File::create(out).map_err(err)?);
    for line in &lines {
        writeln!(file, "{line}").map_err(err)?;
    }
    file.flush().map_err(err)?;
    let secs = started.elapsed().as_secs_f64();
    Ok(Report {
        json: json!({"cmd": "gen", "events": lines.len(), "file": out, "secs": secs}),
        summary: format!("gen: {} events signed to {} in {secs:.1}s", lines.len(), out.display()),
    })
}

pub(super) fn read_lines(file: &Path) -> Res<Vec<String>> {
    let f = std::fs::File::open(file).map_err(|e| format!("{}: {e}", file.display()))?;
    BufReader::new(f).lines().map(|l| l.map_err(err)).filter(|l| !matches!(l, Ok(s) if s.is_empty())).collect()
}
