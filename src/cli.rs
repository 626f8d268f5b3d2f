//! The `hearth` client subcommands: `keygen`, `publish`, `req`, `count`; and the open-file limit
//! the relay raises at start.
//!
//! Owns argument handling, key loading and output: JSON lines on stdout, human messages on
//! stderr, and exit codes that tell refused, invalid and network failures apart. The protocol
//! work is the [`crate::client`] library's.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::client::session::Options;
use crate::client::{Progress, PublishError, Session};
use crate::protocol::{Event, Filter, Keys, Kind, Timestamp};

/// Exit code: everything succeeded.
pub const OK: u8 = 0;
/// Exit code: the relay refused something (not as invalid).
pub const REFUSED: u8 = 3;
/// Exit code: invalid input, or the relay found an event invalid.
pub const INVALID: u8 = 4;
/// Exit code: the relay could not be reached or the connection broke.
pub const NETWORK: u8 = 5;

/// Where the signing key comes from.
#[derive(clap::Args, Debug, Clone)]
pub struct KeyArgs {
    /// Secret key, hex or nsec (default: $HEARTH_KEY).
    #[arg(long, env = "HEARTH_KEY", hide_env_values = true)]
    pub key: Option<String>,
    /// File holding the secret key, hex or nsec.
    #[arg(long)]
    pub key_file: Option<PathBuf>,
}

impl KeyArgs {
    /// The key, if one was given.
    pub fn load(&self) -> Result<Option<Keys>, String> {
        let text = match (&self.key, &self.key_file) {
            (Some(k), _) => k.clone(),
            (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?,
            (None, None) => return Ok(None),
        };
        Keys::parse(&text).map(Some).map_err(|e| e.to_string())
    }
}

/// Prints a fresh key pair as one JSON line.
pub fn keygen() -> u8 {
    let mut secret = [0u8; 32];
    let keys = loop {
        if getrandom::fill(&mut secret).is_err() {
            eprintln!("hearth: no randomness available");
            return NETWORK;
        }
        if let Ok(k) = Keys::from_bytes(secret) {
            break k;
        }
    };
    let pubkey = keys.public_key();
    println!(
        "{}",
        json!({
            "secret": keys.secret_hex(),
            "nsec": crate::protocol::nip19::encode("nsec", &secret),
            "pubkey": pubkey.to_hex(),
            "npub": crate::protocol::nip19::encode("npub", &pubkey.0),
        })
    );
    OK
}

/// A stdin line that is not a complete event: signed with the key.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Draft {
    kind: u16,
    #[serde(default)]
    content: String,
    #[serde(default)]
    tags: Vec<Vec<String>>,
}

fn event_from_line(line: &str, keys: Option<&Keys>) -> Result<Event, String> {
    let value: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    if value.get("sig").is_some() {
        return Event::from_json(line).map_err(|e| format!("not a valid event: {e}"));
    }
    let draft: Draft = serde_json::from_value(value).map_err(|e| format!("not an event draft: {e}"))?;
    let keys = keys.ok_or("an unsigned line needs a key (--key, HEARTH_KEY or --key-file)")?;
    Ok(keys.sign(Timestamp::now(), Kind(draft.kind), draft.tags, &draft.content))
}

/// The exit code a failed publish maps to.
fn code_of(error: &PublishError) -> u8 {
    match error {
        PublishError::Refused(m) if m.starts_with("invalid:") => INVALID,
        PublishError::Refused(_) => REFUSED,
        PublishError::Timeout | PublishError::Disconnected(_) => NETWORK,
    }
}

/// A session with the relay over the transport the user chose; a failure is printed.
async fn connect(url: &str, rest: bool, keys: Option<Keys>) -> Result<Session, u8> {
    let session = if rest {
        Session::connect_rest(url, keys, Options::default()).await
    } else {
        Session::connect(url, keys, Options::default()).await
    };
    session.map_err(|e| {
        eprintln!("hearth: {e}");
        NETWORK
    })
}

/// The progress line of a publish run: `done` of `total` finished, and what the client did.
fn progress_line(done: usize, total: usize, p: &Progress, now: Instant) -> String {
    let mut line = format!(
        "published {done}/{total}: sent {}, accepted {}, refused {}, rate-limited {}",
        p.sent, p.accepted, p.refused, p.limited
    );
    if let Some(until) = p.gate_until.filter(|&u| u > now) {
        let secs = until.saturating_duration_since(now).as_secs_f64().ceil();
        line.push_str(&format!(", waiting for the gate {secs:.0}s"));
    }
    line
}

/// How often the progress line is redrawn while nothing finishes (the gate's countdown).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// `hearth publish`: one event from flags, or JSON lines from stdin.
pub async fn publish(
    relay: &str,
    use_rest: bool,
    keys: Option<Keys>,
    kind: u16,
    content: Option<String>,
    tags: Vec<String>,
) -> u8 {
    let mut worst = OK;
    let events: Vec<Result<Event, String>> = match content {
        Some(content) => {
            let Some(keys) = keys.as_ref() else {
                eprintln!("hearth: publishing needs a key (--key, HEARTH_KEY or --key-file)");
                return INVALID;
            };
            let tags = tags.iter().map(|t| t.splitn(2, '=').map(str::to_string).collect()).collect();
            vec![Ok(keys.sign(Timestamp::now(), Kind(kind), tags, &content))]
        }
        None => std::io::stdin()
            .lock()
            .lines()
            .map_while(Result::ok)
            .filter(|l| !l.trim().is_empty())
            .map(|l| event_from_line(&l, keys.as_ref()))
            .collect(),
    };
    let total = events.len();
    let progress = total > 1 && std::io::stderr().is_terminal();
    let relay = match connect(relay, use_rest, keys).await {
        Ok(relay) => relay,
        Err(code) => return code,
    };
    let mut pending = FuturesUnordered::new();
    let mut done = 0usize;
    let mut iter = events.into_iter();
    let mut redraw = tokio::time::interval(PROGRESS_EVERY);
    loop {
        while pending.len() < 64 {
            let Some(next) = iter.next() else { break };
            let relay = &relay;
            pending.push(async move {
                let event = next?;
                let id = event.id.to_hex();
                Ok::<_, String>((id, relay.publish(event).await))
            });
        }
        let outcome = tokio::select! {
            outcome = pending.next() => outcome,
            _ = redraw.tick(), if progress => {
                eprint!("\r{}\x1b[K", progress_line(done, total, &relay.progress(), Instant::now()));
                let _ = std::io::stderr().flush();
                continue;
            }
        };
        let Some(outcome) = outcome else { break };
        done += 1;
        match outcome {
            Ok((id, Ok(message))) => println!("{}", json!({"id": id, "accepted": true, "message": message})),
            Ok((id, Err(e))) => {
                worst = worst.max(code_of(&e));
                println!("{}", json!({"id": id, "accepted": false, "message": e.to_string()}));
            }
            Err(e) => {
                worst = worst.max(INVALID);
                eprintln!("hearth: skipped a line: {e}");
            }
        }
    }
    if progress {
        eprintln!("\r{}\x1b[K", progress_line(done, total, &relay.progress(), Instant::now()));
    }
    worst
}

/// Parses the filter argument and connects: the shared start of `req` and `count`.
async fn connect_with_filter(
    relay: &str,
    rest: bool,
    keys: Option<Keys>,
    filter: &str,
) -> Result<(Session, Filter), u8> {
    let filter: Filter = serde_json::from_str(filter).map_err(|e| {
        eprintln!("hearth: bad filter: {e}");
        INVALID
    })?;
    Ok((connect(relay, rest, keys).await?, filter))
}

/// `hearth req`: stored events matching the filter, as JSON lines.
pub async fn req(relay: &str, rest: bool, keys: Option<Keys>, filter: &str) -> u8 {
    let (relay, filter) = match connect_with_filter(relay, rest, keys, filter).await {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    match relay.fetch(vec![filter]).await {
        Ok(events) => {
            for e in events {
                println!("{e}");
            }
            OK
        }
        Err(why) => {
            eprintln!("hearth: {why}");
            REFUSED
        }
    }
}

/// `hearth count`: `{"count": n}`.
pub async fn count(relay: &str, rest: bool, keys: Option<Keys>, filter: &str) -> u8 {
    let (relay, filter) = match connect_with_filter(relay, rest, keys, filter).await {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    match relay.count(vec![filter]).await {
        Ok(n) => {
            println!("{}", json!({"count": n}));
            OK
        }
        Err(why) => {
            eprintln!("hearth: {why}");
            REFUSED
        }
    }
}

/// Open files beyond the connections: the store's files, the listeners, the blocking pool's.
const FD_MARGIN: u64 = 64;

/// Raises the soft open-file limit to the hard one (a soft limit of 1024 is common, and a relay
/// at its cap of connections would otherwise fail every accept), and warns when even that is
/// below `server.max_connections` plus a margin.
pub fn raise_fd_limit(max_connections: usize) {
    let wanted = (max_connections as u64).saturating_add(FD_MARGIN);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) if limit < wanted => tracing::warn!(
            limit,
            wanted,
            "the open-file limit is below server.max_connections plus a margin; raise the hard limit (ulimit -Hn) or lower server.max_connections"
        ),
        Ok(limit) => tracing::debug!(limit, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "could not raise the open-file limit"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_progress_line_counts_what_was_sent_and_the_gate_it_waits_for() {
        let now = Instant::now();
        let mut p = Progress { sent: 70, accepted: 61, refused: 1, limited: 9, gate_waits: 9, gate_until: None };
        assert_eq!(
            progress_line(62, 300, &p, now),
            "published 62/300: sent 70, accepted 61, refused 1, rate-limited 9"
        );
        p.gate_until = Some(now + Duration::from_millis(2300));
        assert_eq!(
            progress_line(62, 300, &p, now),
            "published 62/300: sent 70, accepted 61, refused 1, rate-limited 9, waiting for the gate 3s"
        );
        // A gate that has opened is not shown.
        assert!(!progress_line(62, 300, &p, now + Duration::from_secs(3)).contains("gate"));
    }
}
