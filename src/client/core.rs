//! The client's protocol state machine, with no I/O and time passed in: the rate-limit gate, the
//! one-resend rule, pacing, NIP-42 answers and correlation of replies.
//!
//! Owns every decision the client makes about a relay's answers. The async session
//! ([`super::session`]) only moves frames between this core and a socket, so every rule is tested
//! with a fake clock through this same code.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::protocol::{ClientMessage, Event, EventId, Filter, Keys, Timestamp};

mod vocabulary;

pub use vocabulary::{Pace, Progress, PublishError, Reply, Target, Transport, Update, retry_hint};

#[derive(Debug)]
enum Frame {
    Event(EventId),
    Req(String),
    Count(String),
}

struct Publish {
    event: Event,
    /// Set when it is first sent: time spent queued behind the client's own pacing is not the
    /// relay's to answer for.
    deadline: Option<Instant>,
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
    urgent: VecDeque<ClientMessage>,
    publishes: HashMap<EventId, Publish>,
    reqs: HashMap<String, Vec<Filter>>,
    counts: HashMap<String, Vec<Filter>>,
    /// Until when queued requests wait for the NIP-42 handshake, and the AUTH event it awaits.
    auth_hold: Option<Instant>,
    auth_sent: Option<EventId>,
    /// Subscriptions and COUNTs re-issued once after a wait, until they are answered.
    resent_subs: HashSet<String>,
    updates: VecDeque<Update>,
    progress: Progress,
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
            auth_hold: None,
            auth_sent: None,
            resent_subs: HashSet::new(),
            updates: VecDeque::new(),
            progress: Progress::default(),
        }
    }

    /// Sets the outbound pace (e.g. from the relay's NIP-11 document).
    pub fn set_pace(&mut self, pace: Pace) {
        self.tokens = self.tokens.min(pace.burst);
        self.pace = Some(pace);
    }

    /// Paces at another tier's `pace` once the relay named it: its burst, less what has been sent
    /// already, since the relay billed those calls to that tier's bucket from the start.
    pub fn set_tier_pace(&mut self, pace: Pace) {
        self.tokens = (pace.burst - self.progress.sent as f64).max(0.0);
        self.pace = Some(pace);
    }

    /// When the gate opens, if it is armed.
    pub fn gate(&self) -> Option<Instant> {
        self.gate_until
    }

    /// Holds queued requests until the relay's NIP-42 challenge has been answered and the relay
    /// said `OK` to the AUTH, or until `until`: requests sent before it are billed to the address.
    pub fn hold_for_auth(&mut self, until: Instant) {
        self.auth_hold = Some(until);
    }

    fn auth_answered(&mut self) {
        self.auth_sent = None;
        self.auth_hold = None;
    }

    /// What the client has done so far.
    pub fn progress(&self) -> Progress {
        Progress { gate_until: self.gate_until, ..self.progress }
    }

    fn arm(&mut self, now: Instant, wait: Duration) {
        if self.gate_until.is_none_or(|g| g <= now) {
            self.progress.gate_waits += 1;
        }
        let until = now + wait;
        self.gate_until = Some(self.gate_until.map_or(until, |g| g.max(until)));
    }

    /// Queues an event for publishing.
    pub fn publish(&mut self, event: Event) {
        let id = event.id;
        self.publishes.insert(id, Publish { event, deadline: None, resent: false });
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
        self.resent_subs.remove(sub_id);
        self.urgent.push_back(ClientMessage::Close(sub_id.to_string()));
    }

    fn fail(&mut self, id: EventId, error: PublishError) {
        if self.publishes.remove(&id).is_some() {
            self.progress.refused += 1;
            self.updates.push_back(Update::Published(id, Err(error)));
        }
    }

    /// Ends a subscription or COUNT with the relay's reason.
    fn close_sub(&mut self, sub: String, message: String) {
        let known = self.reqs.remove(&sub).is_some() | self.counts.remove(&sub).is_some();
        if self.resent_subs.remove(&sub) | known {
            self.progress.refused += 1;
        }
        self.updates.push_back(Update::Closed(sub, message));
    }

    /// Handles one frame from the relay.
    pub fn on_frame(&mut self, text: &str, now: Instant) {
        if let Some(reply) = Reply::parse(text) {
            self.on_reply(reply, now);
        }
    }

    /// Handles one answer from the relay, whatever carried it.
    pub fn on_reply(&mut self, reply: Reply, now: Instant) {
        match reply {
            // The relay's verdict on our AUTH: whichever it is, nothing waits for it longer (a
            // refused AUTH leaves the requests to the address).
            Reply::Ok { id, .. } if self.auth_sent == Some(id) => self.auth_answered(),
            Reply::Limited { target: Target::Event(id), wait, .. } if self.auth_sent == Some(id) => {
                self.auth_answered();
                self.arm(now, wait);
            }
            Reply::Ok { id, accepted: true, message } => {
                if self.publishes.remove(&id).is_some() {
                    self.progress.accepted += 1;
                    self.updates.push_back(Update::Published(id, Ok(message)));
                }
            }
            Reply::Ok { id, accepted: false, message } => self.fail(id, PublishError::Refused(message)),
            Reply::Limited { target, message, wait } => {
                self.progress.limited += 1;
                self.arm(now, wait);
                match target {
                    Target::Event(id) => {
                        let Some(publish) = self.publishes.get_mut(&id) else { return };
                        // Exactly one resend, alone at the head of the queue, and only if the
                        // gate clears before the deadline.
                        if !publish.resent && publish.deadline.is_none_or(|d| now + wait < d) {
                            publish.resent = true;
                            self.queue.push_front(Frame::Event(id));
                        } else {
                            self.fail(id, PublishError::Refused(message));
                        }
                    }
                    Target::Sub(sub) => {
                        let pending = self.reqs.contains_key(&sub) || self.counts.contains_key(&sub);
                        if pending && self.resent_subs.insert(sub.clone()) {
                            let frame = if self.reqs.contains_key(&sub) { Frame::Req(sub) } else { Frame::Count(sub) };
                            self.queue.push_front(frame);
                        } else {
                            self.close_sub(sub, message);
                        }
                    }
                }
            }
            Reply::Closed { sub, message } => self.close_sub(sub, message),
            Reply::Notice(message) => {
                // Uncorrelated: it may be about any frame, so it arms the gate and resends nothing.
                if let Some(wait) = retry_hint(&message) {
                    self.arm(now, wait);
                }
                self.updates.push_back(Update::Notice(message));
            }
            Reply::Auth(challenge) => {
                if let Some(keys) = &self.keys {
                    let auth = crate::protocol::nip42::answer(keys, &self.relay_url, &challenge, Timestamp::now());
                    self.auth_sent = Some(auth.id);
                    self.urgent.push_back(ClientMessage::Auth(Box::new(auth)));
                }
            }
            Reply::Event(sub, event) => self.updates.push_back(Update::Event(sub, event)),
            Reply::Eose(sub) => {
                self.resent_subs.remove(&sub);
                self.updates.push_back(Update::Eose(sub));
            }
            Reply::Count(sub, n) => {
                self.counts.remove(&sub);
                self.resent_subs.remove(&sub);
                self.updates.push_back(Update::Count(sub, n));
            }
        }
    }

    /// Fails publishes past their deadline (cancelling any pending resend).
    pub fn on_tick(&mut self, now: Instant) {
        let expired: Vec<EventId> =
            self.publishes.iter().filter(|(_, p)| p.deadline.is_some_and(|d| d <= now)).map(|(id, _)| *id).collect();
        for id in expired {
            self.fail(id, PublishError::Timeout);
        }
        if self.gate_until.is_some_and(|g| g <= now) {
            self.gate_until = None;
        }
        if self.auth_hold.is_some_and(|h| h <= now) {
            self.auth_hold = None;
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

    /// The next request to send now, if the gate and the pace allow one. AUTH and CLOSE go first
    /// and are never paced or gated.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ClientMessage> {
        if let Some(frame) = self.urgent.pop_front() {
            return Some(frame);
        }
        self.on_tick(now);
        if self.gate_until.is_some() || self.auth_hold.is_some() {
            return None;
        }
        loop {
            let message = match self.queue.front()? {
                Frame::Event(id) => self.publishes.get(id).map(|p| ClientMessage::Event(Box::new(p.event.clone()))),
                Frame::Req(sub) => {
                    self.reqs.get(sub).map(|f| ClientMessage::Req { sub_id: sub.clone(), filters: f.clone() })
                }
                Frame::Count(sub) => {
                    self.counts.get(sub).map(|f| ClientMessage::Count { sub_id: sub.clone(), filters: f.clone() })
                }
            };
            let Some(message) = message else {
                // Answered, failed or closed while it waited.
                self.queue.pop_front();
                continue;
            };
            if !self.take_token(now) {
                return None;
            }
            if let Some(Frame::Event(id)) = self.queue.pop_front()
                && let Some(publish) = self.publishes.get_mut(&id)
            {
                publish.deadline.get_or_insert(now + self.publish_timeout);
            }
            self.progress.sent += 1;
            return Some(message);
        }
    }

    /// When the core next needs attention without a frame arriving (gate, pace, deadline).
    pub fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let deadline = self.publishes.values().filter_map(|p| p.deadline).min();
        let pace = match (self.pace, self.queue.is_empty()) {
            (Some(p), false) if self.tokens < 1.0 => {
                Some(now + Duration::from_secs_f64((1.0 - self.tokens) / p.per_sec))
            }
            _ => None,
        };
        [self.gate_until, self.auth_hold, deadline, pace].into_iter().flatten().min()
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

#[cfg(test)]
mod tests;
