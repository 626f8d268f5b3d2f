//! The REST session's task: the relay's HTTP API (`/api/v1/events`, `/query`, `/count`) driven by
//! the same [`Core`] as a WebSocket session, so the gate, the one resend and the pacing are the
//! same rules, and the caller's [`Session`] is the same type.
//!
//! Owns the HTTP side: mapping each request the core lets out onto a call, and each answer
//! (status, `Retry-After`, body) back onto a [`Reply`]. Calls go one at a time, so a refusal is
//! seen before the next call leaves: a gate window costs at most one `429`. The pace is the
//! caller's tier's `api_calls_per_min`, which the relay names in every answer's `X-Hearth-Tier`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};

use super::core::{Core, Pace, Progress, Reply, Target, Transport};
use super::nip11::{http_base, nip11};
use super::session::{Command, Options, Session, Waiters, sleep_until};

use crate::protocol::nip98;
use crate::protocol::{ClientMessage, Keys, TIER_HEADER, Tier, Timestamp};

impl Session {
    /// A session with the relay at `relay_url` (`ws(s)://` or `http(s)://`) over its REST API;
    /// `keys` sign every call (NIP-98), so it is billed to the key.
    pub async fn connect_rest(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
        start(relay_url, keys, options).await
    }
}

/// What the session task needs besides the core.
struct Driver {
    http: reqwest::Client,
    base: String,
    keys: Option<Keys>,
    nip11: Option<Value>,
    /// The pace was given by the caller: the tier does not change it.
    fixed_pace: bool,
}

/// One call's outcome, as the transport saw it.
enum Answer {
    /// The relay answered: the reply for the core, and the tier it named.
    Reply(Vec<Reply>, Option<Tier>),
    /// No answer: the relay is unreachable or the connection broke.
    Lost(String),
}

/// Starts a REST session with the relay at `relay_url`: see [`Session::connect_rest`].
pub(super) async fn start(relay_url: &str, keys: Option<Keys>, options: Options) -> Result<Session, String> {
    let base = http_base(relay_url);
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| format!("cannot make an HTTP client: {e}"))?;
    // An unreachable relay fails here, like a WebSocket connect.
    let nip11 = nip11(&http, &base).await?;
    // Until the relay names the tier, the human tier's pace; only one call is out before it
    // does, so a different tier costs at most that call's share of the burst.
    let pace = options.pace.or_else(|| nip11.as_ref().and_then(|d| Pace::advertised(d, Tier::Human, Transport::Rest)));
    let core = Core::new(&base, None, options.publish_timeout, pace);
    let (tier_tx, tier) = watch::channel(None);
    let (session, rx, progress) = Session::channels(Some(tier));
    let driver = Driver { http, base, keys, nip11, fixed_pace: options.pace.is_some() };
    tokio::spawn(driver.run(core, rx, progress, tier_tx));
    Ok(session)
}

impl Driver {
    async fn run(
        self,
        mut core: Core,
        mut commands: mpsc::Receiver<Command>,
        progress: watch::Sender<Progress>,
        tier: watch::Sender<Option<Tier>>,
    ) {
        let mut waiters = Waiters::default();
        let (answers_tx, mut answers) = mpsc::channel::<Answer>(1);
        let mut in_flight = false;
        let mut open = true;
        while open || in_flight {
            while !in_flight && let Some(message) = core.poll_transmit(Instant::now()) {
                // AUTH and CLOSE have no call: no challenge comes over HTTP, and a REST read ends
                // with its answer.
                let Some(call) = self.call(message) else { continue };
                in_flight = true;
                let answers_tx = answers_tx.clone();
                tokio::spawn(async move {
                    let _ = answers_tx.send(call.await).await;
                });
            }
            waiters.deliver(&mut core, &progress).await;
            let wake = core.next_wakeup(Instant::now());
            tokio::select! {
                Some(answer) = answers.recv() => {
                    in_flight = false;
                    match answer {
                        Answer::Reply(replies, named) => {
                            if let Some(named) = named
                                && *tier.borrow() != Some(named)
                            {
                                tier.send_replace(Some(named));
                                let pace = self.nip11.as_ref().and_then(|d| Pace::advertised(d, named, Transport::Rest));
                                if let (false, Some(pace)) = (self.fixed_pace, pace) {
                                    core.set_tier_pace(pace);
                                }
                            }
                            let now = Instant::now();
                            for reply in replies {
                                core.on_reply(reply, now);
                            }
                        }
                        Answer::Lost(why) => {
                            core.on_disconnect(&why);
                            waiters.lost();
                        }
                    }
                }
                command = commands.recv(), if open => open = waiters.command(&mut core, command),
                _ = sleep_until(wake) => core.on_tick(Instant::now()),
            }
        }
    }

    /// The HTTP call for one request, and what it came to.
    fn call(&self, message: ClientMessage) -> Option<impl Future<Output = Answer> + Send + 'static> {
        let (path, target, body) = match &message {
            ClientMessage::Event(event) => ("events", Target::Event(event.id), event.to_json().ok()),
            ClientMessage::Req { sub_id, filters } => {
                ("query", Target::Sub(sub_id.clone()), Some(json!({ "filters": filters }).to_string()))
            }
            ClientMessage::Count { sub_id, filters } => {
                ("count", Target::Sub(sub_id.clone()), Some(json!({ "filters": filters }).to_string()))
            }
            // NIP-77 has no REST form.
            ClientMessage::Auth(_)
            | ClientMessage::Close(_)
            | ClientMessage::NegOpen { .. }
            | ClientMessage::NegMsg { .. }
            | ClientMessage::NegClose(_) => return None,
        };
        let url = format!("{}/api/v1/{path}", self.base);
        let request = body.map(|body| {
            let mut request = self.http.post(&url).header("content-type", "application/json");
            if let Some(keys) = &self.keys {
                let signed = nip98::Request { url: &url, method: "POST", body: body.as_bytes() };
                if let Ok(header) = nip98::header(keys, &signed, Timestamp::now()) {
                    request = request.header("authorization", header);
                }
            }
            request.body(body)
        });
        Some(async move {
            let Some(request) = request else { return Answer::Reply(Vec::new(), None) };
            let response = match request.send().await {
                Ok(response) => response,
                Err(e) => return Answer::Lost(format!("connection lost: {e}")),
            };
            let status = response.status().as_u16();
            let header = |name: &str| response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_string);
            let retry_after = header("retry-after").and_then(|v| v.trim().parse::<u64>().ok());
            let tier = header(TIER_HEADER).and_then(|t| Tier::parse(t.trim()));
            let body: Value = match response.bytes().await {
                Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                Err(e) => return Answer::Lost(format!("connection lost: {e}")),
            };
            Answer::Reply(replies_of(target, status, retry_after, &body), tier)
        })
    }
}

/// What one HTTP answer tells the core.
fn replies_of(target: Target, status: u16, retry_after: Option<u64>, body: &Value) -> Vec<Reply> {
    let text = |key: &str| body[key].as_str().filter(|m| !m.is_empty()).map(str::to_string);
    let reason = text("error").or_else(|| text("message")).unwrap_or_else(|| format!("HTTP {status}"));
    if let (429 | 503, Some(secs)) = (status, retry_after) {
        return vec![Reply::Limited { target, message: reason, wait: Duration::from_secs(secs.max(1)) }];
    }
    match target {
        Target::Event(id) if status == 200 => {
            vec![Reply::Ok { id, accepted: true, message: text("message").unwrap_or_default() }]
        }
        Target::Event(id) => vec![Reply::Ok { id, accepted: false, message: reason }],
        Target::Sub(sub) if status != 200 => vec![Reply::Closed { sub, message: reason }],
        Target::Sub(sub) => match (body.get("events").and_then(Value::as_array), body["count"].as_u64()) {
            (Some(events), _) => {
                let mut replies: Vec<Reply> = events.iter().map(|e| Reply::Event(sub.clone(), e.clone())).collect();
                replies.push(Reply::Eose(sub));
                replies
            }
            (None, Some(n)) => vec![Reply::Count(sub, n)],
            (None, None) => {
                vec![Reply::Closed { sub, message: "error: the relay's answer has no events or count".into() }]
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::EventId;

    #[test]
    fn a_429_or_503_with_retry_after_is_a_wait_for_the_core() {
        let id = EventId([1; 32]);
        let body = json!({"error": "rate-limited: quota exceeded (messages); retry in 2s"});
        for status in [429, 503] {
            assert_eq!(
                replies_of(Target::Event(id), status, Some(2), &body),
                vec![Reply::Limited {
                    target: Target::Event(id),
                    message: "rate-limited: quota exceeded (messages); retry in 2s".into(),
                    wait: Duration::from_secs(2),
                }]
            );
        }
        // Without Retry-After there is no wait to honour: a refusal like any other.
        assert_eq!(
            replies_of(Target::Event(id), 429, None, &body),
            vec![Reply::Ok {
                id,
                accepted: false,
                message: "rate-limited: quota exceeded (messages); retry in 2s".into()
            }]
        );
    }

    #[test]
    fn publish_and_read_answers_map_onto_the_core_replies() {
        let id = EventId([2; 32]);
        let accepted = json!({"accepted": true, "id": "", "message": "duplicate: already have this event"});
        assert_eq!(
            replies_of(Target::Event(id), 200, None, &accepted),
            vec![Reply::Ok { id, accepted: true, message: "duplicate: already have this event".into() }]
        );
        let refused = json!({"accepted": false, "message": "invalid: bad sig", "error": "invalid: bad sig"});
        assert_eq!(
            replies_of(Target::Event(id), 400, None, &refused),
            vec![Reply::Ok { id, accepted: false, message: "invalid: bad sig".into() }]
        );
        let sub = || Target::Sub("q1".into());
        assert_eq!(
            replies_of(sub(), 200, None, &json!({"events": [{"id": "a"}]})),
            vec![Reply::Event("q1".into(), json!({"id": "a"})), Reply::Eose("q1".into())]
        );
        assert_eq!(replies_of(sub(), 200, None, &json!({"count": 7})), vec![Reply::Count("q1".into(), 7)]);
        assert_eq!(
            replies_of(sub(), 400, None, &json!({"error": "too many filters"})),
            vec![Reply::Closed { sub: "q1".into(), message: "too many filters".into() }]
        );
        assert_eq!(
            replies_of(sub(), 502, None, &Value::Null),
            vec![Reply::Closed { sub: "q1".into(), message: "HTTP 502".into() }]
        );
    }

    #[test]
    fn ws_urls_map_to_their_http_base() {
        assert_eq!(http_base("wss://relay.example/"), "https://relay.example");
        assert_eq!(http_base("ws://127.0.0.1:7777"), "http://127.0.0.1:7777");
        assert_eq!(http_base("http://127.0.0.1:7777/"), "http://127.0.0.1:7777");
    }
}
