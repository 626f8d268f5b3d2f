//! The client's protocol state machine, with no I/O and time passed in: the rate-limit gate, the
//! one-resend rule, pacing, NIP-42 answers and correlation of replies.
//!
//! Owns every decision the client makes about a relay's answers. The async session
//! ([`super::session`]) only moves frames between this core and a socket, so every rule is tested
//! with a fake clock through this same code.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::protocol::{Event, EventId, Filter, Keys, Kind, Timestamp};

/// Parses the `retry in Ns` hint of a `rate-limited:` message.
pub fn retry_hint(message: &str) -> Option<Duration> {
    if !message.starts_with("rate-limited:") {
        return None;
    }
    let rest = &message[message.rfind("retry in ")? + "retry in ".len()..];
    let secs: u64 = rest.trim_end_matches('s').trim().parse().ok()?;
    Some(Duration::from_secs(secs.max(1)))
}

/// Why a publish failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PublishError {
    /// The relay refused it (`OK false`), with its message.
    #[error("{0}")]
    Refused(String),
    /// No accepted OK before the publish timeout.
    #[error("timed out waiting for the relay")]
    Timeout,
    /// The connection closed or was reset before the OK.
    #[error("connection lost: {0}")]
    Disconnected(String),
}

/// What happened, for the session to hand to its callers.
#[derive(Clone, Debug, PartialEq)]
pub enum Update {
    /// A publish finished: `Ok(message)` (`""` or `duplicate: …`) or why not.
    Published(EventId, Result<String, PublishError>),
    /// A stored or live event for a subscription.
    Event(String, Value),
    /// End of stored events for a subscription.
    Eose(String),
    /// The relay closed a subscription (not for rate limits: those are re-issued).
    Closed(String, String),
    /// A COUNT answer.
    Count(String, u64),
    /// A NOTICE.
    Notice(String),
}

/// The outbound rate: `burst` frames at once, refilling at `per_sec`.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Sustained frames per second.
    pub per_sec: f64,
    /// Frames that may go back to back.
    pub burst: f64,
}

#[derive(Debug)]
enum Frame {
    Event(EventId),
    Req(String),
    Count(String),
}

struct Publish {
    event: Event,
    deadline: Instant,
    resent: bool,
}

/// The client's state for one relay connection.
pub struct Core {
    keys: Option<Keys>,
    relay_url: String,
    publish_timeout: Duration,
    gate_until: Option<Instant>,
    pace: Option<Pace>,
    tokens: f64,
    refilled_at: Option<Instant>,
    queue: VecDeque<Frame>,
    /// AUTH and CLOSE frames: never billed, never gated.
    urgent: VecDeque<String>,
    publishes: HashMap<EventId, Publish>,
    reqs: HashMap<String, Vec<Filter>>,
    counts: HashMap<String, Vec<Filter>>,
    updates: VecDeque<Update>,
}

impl Core {
    /// A core for `relay_url`; `keys` answer AUTH challenges.
    pub fn new(relay_url: &str, keys: Option<Keys>, publish_timeout: Duration, pace: Option<Pace>) -> Core {
        Core {
            keys,
            relay_url: relay_url.to_string(),
            publish_timeout,
            gate_until: None,
            tokens: pace.map_or(0.0, |p| p.burst),
            pace,
            refilled_at: None,
            queue: VecDeque::new(),
            urgent: VecDeque::new(),
            publishes: HashMap::new(),
            reqs: HashMap::new(),
            counts: HashMap::new(),
            updates: VecDeque::new(),
        }
    }

    /// Sets the outbound pace (e.g. from the relay's NIP-11 document).
    pub fn set_pace(&mut self, pace: Pace) {
        self.tokens = self.tokens.min(pace.burst);
        self.pace = Some(pace);
    }

    /// When the gate opens, if it is armed.
    pub fn gate(&self) -> Option<Instant> {
        self.gate_until
    }

    fn arm(&mut self, now: Instant, wait: Duration) {
        let until = now + wait;
        self.gate_until = Some(self.gate_until.map_or(until, |g| g.max(until)));
    }

    /// Queues an event for publishing.
    pub fn publish(&mut self, event: Event, now: Instant) {
        let id = event.id;
        self.publishes.insert(id, Publish { event, deadline: now + self.publish_timeout, resent: false });
        self.queue.push_back(Frame::Event(id));
    }

    /// Queues a subscription.
    pub fn req(&mut self, sub_id: &str, filters: Vec<Filter>) {
        self.reqs.insert(sub_id.to_string(), filters);
        self.queue.push_back(Frame::Req(sub_id.to_string()));
    }

    /// Queues a COUNT.
    pub fn count(&mut self, sub_id: &str, filters: Vec<Filter>) {
        self.counts.insert(sub_id.to_string(), filters);
        self.queue.push_back(Frame::Count(sub_id.to_string()));
    }

    /// Closes a subscription.
    pub fn close(&mut self, sub_id: &str) {
        self.reqs.remove(sub_id);
        self.urgent.push_back(json!(["CLOSE", sub_id]).to_string());
    }

    fn fail(&mut self, id: EventId, error: PublishError) {
        if self.publishes.remove(&id).is_some() {
            self.updates.push_back(Update::Published(id, Err(error)));
        }
    }

    /// Handles one frame from the relay.
    pub fn on_frame(&mut self, text: &str, now: Instant) {
        let Ok(Value::Array(frame)) = serde_json::from_str::<Value>(text) else { return };
        let kind = frame.first().and_then(Value::as_str).unwrap_or("");
        let s = |i: usize| frame.get(i).and_then(Value::as_str).unwrap_or("").to_string();
        match kind {
            "OK" => {
                let Some(id) = EventId::from_hex(&s(1)) else { return };
                let accepted = frame.get(2).and_then(Value::as_bool).unwrap_or(false);
                let message = s(3);
                if accepted {
                    if self.publishes.remove(&id).is_some() {
                        self.updates.push_back(Update::Published(id, Ok(message)));
                    }
                    return;
                }
                let Some(publish) = self.publishes.get_mut(&id) else { return };
                match retry_hint(&message) {
                    // Exactly one resend, and only if the gate clears before the deadline.
                    Some(wait) if !publish.resent && now + wait < publish.deadline => {
                        publish.resent = true;
                        self.arm(now, wait);
                        self.queue.push_front(Frame::Event(id));
                    }
                    Some(wait) => {
                        self.arm(now, wait);
                        self.fail(id, PublishError::Refused(message));
                    }
                    None => self.fail(id, PublishError::Refused(message)),
                }
            }
            "CLOSED" => {
                let (sub, message) = (s(1), s(2));
                if let Some(wait) = retry_hint(&message) {
                    self.arm(now, wait);
                    if self.reqs.contains_key(&sub) {
                        self.queue.push_front(Frame::Req(sub));
                        return;
                    }
                    if self.counts.contains_key(&sub) {
                        self.queue.push_front(Frame::Count(sub));
                        return;
                    }
                }
                self.reqs.remove(&sub);
                self.counts.remove(&sub);
                self.updates.push_back(Update::Closed(sub, message));
            }
            "NOTICE" => {
                let message = s(1);
                // Uncorrelated: it may be about any frame, so it arms the gate and resends nothing.
                if let Some(wait) = retry_hint(&message) {
                    self.arm(now, wait);
                }
                self.updates.push_back(Update::Notice(message));
            }
            "AUTH" => {
                if let Some(keys) = &self.keys {
                    let tags = vec![vec!["relay".into(), self.relay_url.clone()], vec!["challenge".into(), s(1)]];
                    let auth = keys.sign(Timestamp::now(), Kind::AUTH, tags, "");
                    self.urgent.push_back(json!(["AUTH", auth]).to_string());
                }
            }
            "EVENT" => self.updates.push_back(Update::Event(s(1), frame.get(2).cloned().unwrap_or(Value::Null))),
            "EOSE" => self.updates.push_back(Update::Eose(s(1))),
            "COUNT" => {
                let sub = s(1);
                self.counts.remove(&sub);
                let n = frame.get(2).and_then(|c| c["count"].as_u64()).unwrap_or(0);
                self.updates.push_back(Update::Count(sub, n));
            }
            _ => {}
        }
    }

    /// Fails publishes past their deadline (cancelling any pending resend).
    pub fn on_tick(&mut self, now: Instant) {
        let expired: Vec<EventId> =
            self.publishes.iter().filter(|(_, p)| p.deadline <= now).map(|(id, _)| *id).collect();
        for id in expired {
            self.fail(id, PublishError::Timeout);
        }
        if self.gate_until.is_some_and(|g| g <= now) {
            self.gate_until = None;
        }
    }

    /// The connection is gone: every pending publish fails, nothing is resent.
    pub fn on_disconnect(&mut self, reason: &str) {
        let ids: Vec<EventId> = self.publishes.keys().copied().collect();
        for id in ids {
            self.fail(id, PublishError::Disconnected(reason.to_string()));
        }
        self.queue.clear();
    }

    fn take_token(&mut self, now: Instant) -> bool {
        let Some(pace) = self.pace else { return true };
        let elapsed = self.refilled_at.map_or(0.0, |at| now.saturating_duration_since(at).as_secs_f64());
        self.tokens = (self.tokens + elapsed * pace.per_sec).min(pace.burst);
        self.refilled_at = Some(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// The next frame to send now, if the gate and the pace allow one.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<String> {
        if let Some(frame) = self.urgent.pop_front() {
            return Some(frame);
        }
        self.on_tick(now);
        if self.gate_until.is_some() {
            return None;
        }
        loop {
            let frame = self.queue.front()?;
            let text = match frame {
                Frame::Event(id) => match self.publishes.get(id) {
                    Some(p) => json!(["EVENT", p.event]).to_string(),
                    None => {
                        self.queue.pop_front();
                        continue;
                    }
                },
                Frame::Req(sub) => match self.reqs.get(sub) {
                    Some(filters) => req_frame("REQ", sub, filters),
                    None => {
                        self.queue.pop_front();
                        continue;
                    }
                },
                Frame::Count(sub) => match self.counts.get(sub) {
                    Some(filters) => req_frame("COUNT", sub, filters),
                    None => {
                        self.queue.pop_front();
                        continue;
                    }
                },
            };
            if !self.take_token(now) {
                return None;
            }
            self.queue.pop_front();
            return Some(text);
        }
    }

    /// When the core next needs attention without a frame arriving (gate, pace, deadline).
    pub fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let deadline = self.publishes.values().map(|p| p.deadline).min();
        let pace = match (self.pace, self.queue.is_empty()) {
            (Some(p), false) if self.tokens < 1.0 => {
                Some(now + Duration::from_secs_f64((1.0 - self.tokens) / p.per_sec))
            }
            _ => None,
        };
        [self.gate_until, deadline, pace].into_iter().flatten().min()
    }

    /// The next update for callers.
    pub fn poll_update(&mut self) -> Option<Update> {
        self.updates.pop_front()
    }

    /// True when nothing is queued or awaiting an answer.
    pub fn idle(&self) -> bool {
        self.queue.is_empty() && self.publishes.is_empty() && self.urgent.is_empty()
    }
}

fn req_frame(verb: &str, sub: &str, filters: &[Filter]) -> String {
    let mut frame = vec![json!(verb), json!(sub)];
    frame.extend(filters.iter().map(|f| json!(f)));
    Value::Array(frame).to_string()
}

#[cfg(test)]
mod tests;
