//! The `hearth` client subcommands: `keygen`, `publish`, `req`, `count`.
//!
//! Owns argument handling, key loading and output: JSON lines on stdout, human messages on
//! stderr, and exit codes that tell refused, invalid and network failures apart. The protocol
//! work is the [`crate::client`] library's.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::client::session::Options;
use crate::client::{PublishError, Session, rest};
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
    let session = if use_rest {
        None
    } else {
        match Session::connect(relay, keys.clone(), Options::default()).await {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("hearth: {e}");
                return NETWORK;
            }
        }
    };
    let http = reqwest::Client::builder().timeout(Duration::from_secs(60)).build().unwrap_or_default();
    let base = rest::http_base(relay);
    let mut pending = FuturesUnordered::new();
    let mut done = 0usize;
    let mut iter = events.into_iter();
    loop {
        while pending.len() < 64 {
            let Some(next) = iter.next() else { break };
            let (session, http, base, keys) = (&session, &http, &base, keys.as_ref());
            pending.push(async move {
                let event = next?;
                let id = event.id.to_hex();
                let result = match session {
                    Some(s) => s.publish(event).await,
                    None => rest::publish(http, base, &event, keys).await,
                };
                Ok::<_, String>((id, result))
            });
        }
        let Some(outcome) = pending.next().await else { break };
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
        if progress {
            eprint!("\rpublished {done}/{total}");
            let _ = std::io::stderr().flush();
        }
    }
    if progress {
        eprintln!();
    }
    worst
}

/// Parses the filter argument and connects: the shared start of `req` and `count`.
async fn connect_with_filter(relay: &str, keys: Option<Keys>, filter: &str) -> Result<(Session, Filter), u8> {
    let filter: Filter = serde_json::from_str(filter).map_err(|e| {
        eprintln!("hearth: bad filter: {e}");
        INVALID
    })?;
    let session = Session::connect(relay, keys, Options::default()).await.map_err(|e| {
        eprintln!("hearth: {e}");
        NETWORK
    })?;
    Ok((session, filter))
}

/// `hearth req`: stored events matching the filter, as JSON lines.
pub async fn req(relay: &str, keys: Option<Keys>, filter: &str) -> u8 {
    let (session, filter) = match connect_with_filter(relay, keys, filter).await {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    match session.fetch(vec![filter]).await {
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
pub async fn count(relay: &str, keys: Option<Keys>, filter: &str) -> u8 {
    let (session, filter) = match connect_with_filter(relay, keys, filter).await {
        Ok(pair) => pair,
        Err(code) => return code,
    };
    match session.count(vec![filter]).await {
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
