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
    gen_events(count, out, private_percent, false)
}

/// [`gen_file`] with content that reads like text: words of [`WORDS`] drawn by a Zipf-like law
/// (the r-th most common about 1/r as often), as a search index meets a community's notes.
pub(crate) fn gen_text_file(count: usize, out: &Path) -> Res<Report> {
    gen_events(count, out, 0, true)
}

/// Common English words, most common first: the vocabulary of [`gen_text_file`].
pub(super) const WORDS: [&str; 195] = [
    "the",
    "be",
    "to",
    "of",
    "and",
    "a",
    "in",
    "that",
    "have",
    "i",
    "it",
    "for",
    "not",
    "on",
    "with",
    "he",
    "as",
    "you",
    "do",
    "at",
    "this",
    "but",
    "his",
    "by",
    "from",
    "they",
    "we",
    "say",
    "her",
    "she",
    "or",
    "an",
    "will",
    "my",
    "one",
    "all",
    "would",
    "there",
    "their",
    "what",
    "so",
    "up",
    "out",
    "if",
    "about",
    "who",
    "get",
    "which",
    "go",
    "me",
    "when",
    "make",
    "can",
    "like",
    "time",
    "no",
    "just",
    "him",
    "know",
    "take",
    "people",
    "into",
    "year",
    "your",
    "good",
    "some",
    "could",
    "them",
    "see",
    "other",
    "than",
    "then",
    "now",
    "look",
    "only",
    "come",
    "its",
    "over",
    "think",
    "also",
    "back",
    "after",
    "use",
    "two",
    "how",
    "our",
    "work",
    "first",
    "well",
    "way",
    "even",
    "new",
    "want",
    "because",
    "any",
    "these",
    "give",
    "day",
    "most",
    "us",
    "meetup",
    "garden",
    "river",
    "market",
    "coffee",
    "relay",
    "music",
    "winter",
    "summer",
    "bridge",
    "school",
    "forest",
    "city",
    "island",
    "train",
    "bread",
    "kitchen",
    "window",
    "mountain",
    "letter",
    "library",
    "festival",
    "harbour",
    "village",
    "camera",
    "bicycle",
    "concert",
    "recipe",
    "station",
    "museum",
    "theatre",
    "lantern",
    "meadow",
    "orchard",
    "workshop",
    "quarry",
    "lighthouse",
    "ferry",
    "cathedral",
    "vineyard",
    "glacier",
    "canyon",
    "prairie",
    "tundra",
    "lagoon",
    "volcano",
    "desert",
    "jungle",
    "savanna",
    "estuary",
    "fjord",
    "plateau",
    "archipelago",
    "peninsula",
    "delta",
    "reef",
    "marsh",
    "grove",
    "thicket",
    "hedge",
    "pasture",
    "barn",
    "silo",
    "windmill",
    "cottage",
    "manor",
    "castle",
    "tower",
    "chapel",
    "abbey",
    "cloister",
    "crypt",
    "vault",
    "attic",
    "cellar",
    "porch",
    "balcony",
    "terrace",
    "courtyard",
    "fountain",
    "statue",
    "monument",
    "obelisk",
    "pavilion",
    "gazebo",
    "pergola",
    "trellis",
    "greenhouse",
    "nursery",
    "apiary",
    "aviary",
    "kennel",
    "stable",
    "paddock",
    "corral",
];

/// A word of [`WORDS`], the r-th most common drawn about 1/r as often (log-uniform ranks).
pub(super) fn zipf_word(rng: &mut Rng) -> &'static str {
    let u = rng.below(1 << 20) as f64 / f64::from(1 << 20);
    let rank = (WORDS.len() as f64).powf(u) as usize;
    WORDS[rank.saturating_sub(1).min(WORDS.len() - 1)]
}

fn gen_events(count: usize, out: &Path, private_percent: u64, words: bool) -> Res<Report> {
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
                        let content: String = match words {
                            false => (0..len).map(|_| (b'a' + rng.below(26) as u8) as char).collect(),
                            true => {
                                let mut text = String::with_capacity(len + 16);
                                while text.len() < len {
                                    text.push_str(zipf_word(&mut rng));
                                    text.push(' ');
                                }
                                text
                            }
                        };
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
