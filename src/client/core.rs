//! The client's protocol state machine, with no I/O and time passed in: the rate-limit gates, the
//! one-resend rule, pacing, NIP-42 answers and correlation of replies.
//!
//! Writes (EVENT) and reads (REQ, COUNT) wait in queues of their own. When the relay bills them
//! to separate budgets (hearth's `ws_events` and `ws_reqs`, [`Core::set_read_pace`]) each has its
//! own gate and pace, so a refused REQ never holds back the user's next message; otherwise one
//! lane paces both in the order they were asked for.
//!
//! Owns every decision the client makes about a relay's answers. The async session
//! ([`super::session`]) only moves frames between this core and a socket, so every rule is tested
//! with a fake clock through this same code.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

use crate::protocol::{ClientMessage, Event, EventId, Filter, Keys, Timestamp};

mod lane;
mod vocabulary;

use lane::Lane;

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

/// The queue (and, when the relay bills them apart, the lane) of writes and of reads.
const WRITES: usize = 0;
const READS: usize = 1;

/// The client's state for one relay connection.
pub struct Core {
    keys: Option<Keys>,
    relay_url: String,
    publish_timeout: Duration,
    /// The writes' lane, and the reads' when `split`.
    lanes: [Lane; 2],
    /// Reads are billed apart from writes: they use `lanes[READS]`.
    split: bool,
    /// Writes and reads waiting, each with the order it was asked in.
    queues: [VecDeque<(u64, Frame)>; 2],
    asked: u64,
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
            lanes: [Lane::new(pace), Lane::new(None)],
            split: false,
            queues: [VecDeque::new(), VecDeque::new()],
            asked: 0,
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

    /// Sets the outbound pace (e.g. from the relay's NIP-11 document): of writes, and of reads
    /// unless they have their own ([`Core::set_read_pace`]).
    pub fn set_pace(&mut self, pace: Pace) {
        self.lanes[WRITES].set_pace(pace);
    }

    /// Reads (REQ, COUNT) are billed to a budget of their own, paced at `pace`, with a gate of
    /// their own: the relay advertised one (hearth's `ws_reqs`).
    pub fn set_read_pace(&mut self, pace: Pace) {
        self.lanes[READS] = Lane::new(Some(pace));
        self.split = true;
    }

    /// Paces at another tier's `pace` once the relay named it: its burst, less what has been sent
    /// already, since the relay billed those calls to that tier's bucket from the start.
    pub fn set_tier_pace(&mut self, pace: Pace) {
        self.lanes[WRITES].set_pace_after(pace, self.progress.sent);
    }

    /// The lane the requests of `queue` are paced and gated in.
    fn lane(&self, queue: usize) -> usize {
        if self.split { queue } else { WRITES }
    }

    /// When the last armed gate opens, if one is armed.
    pub fn gate(&self) -> Option<Instant> {
        self.lanes.iter().filter_map(Lane::gate).max()
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
        Progress { gate_until: self.gate(), ..self.progress }
    }

    /// Arms the gate of the lane `queue` is paced in, or of every lane (`None`: a refusal not
    /// tied to one budget, like a busy relay or a NOTICE).
    fn arm(&mut self, now: Instant, wait: Duration, queue: Option<usize>) {
        let mut opened = false;
        for lane in 0..self.lanes.len() {
            if queue.is_none_or(|q| self.lane(q) == lane) {
                opened |= self.lanes[lane].arm(now, wait);
            }
        }
        if opened {
            self.progress.gate_waits += 1;
        }
    }

    /// Queues `frame` at the back of its queue (or, resent, at the front).
    fn enqueue(&mut self, frame: Frame, front: bool) {
        let queue = if matches!(frame, Frame::Event(_)) { WRITES } else { READS };
        if front {
            self.queues[queue].push_front((0, frame));
        } else {
            self.asked += 1;
            self.queues[queue].push_back((self.asked, frame));
        }
    }

    /// Queues an event for publishing.
    pub fn publish(&mut self, event: Event) {
        let id = event.id;
        self.publishes.insert(id, Publish { event, deadline: None, resent: false });
        self.enqueue(Frame::Event(id), false);
    }

    /// Queues a subscription.
    pub fn req(&mut self, sub_id: &str, filters: Vec<Filter>) {
        self.reqs.insert(sub_id.to_string(), filters);
        self.enqueue(Frame::Req(sub_id.to_string()), false);
    }

    /// Queues a COUNT.
    pub fn count(&mut self, sub_id: &str, filters: Vec<Filter>) {
        self.counts.insert(sub_id.to_string(), filters);
        self.enqueue(Frame::Count(sub_id.to_string()), false);
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
                self.arm(now, wait, None);
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
                // A busy relay refuses whatever comes next; a quota, only what bills it.
                let queue = match &target {
                    _ if message.contains("(unavailable)") => None,
                    Target::Event(_) => Some(WRITES),
                    Target::Sub(_) => Some(READS),
                };
                self.arm(now, wait, queue);
                match target {
                    Target::Event(id) => {
                        let Some(publish) = self.publishes.get_mut(&id) else { return };
                        // Exactly one resend, alone at the head of the queue, and only if the
                        // gate clears before the deadline.
                        if !publish.resent && publish.deadline.is_none_or(|d| now + wait < d) {
                            publish.resent = true;
                            self.enqueue(Frame::Event(id), true);
                        } else {
                            self.fail(id, PublishError::Refused(message));
                        }
                    }
                    Target::Sub(sub) => {
                        let pending = self.reqs.contains_key(&sub) || self.counts.contains_key(&sub);
                        if pending && self.resent_subs.insert(sub.clone()) {
                            let frame = if self.reqs.contains_key(&sub) { Frame::Req(sub) } else { Frame::Count(sub) };
                            self.enqueue(frame, true);
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
                    self.arm(now, wait, None);
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
        for lane in &mut self.lanes {
            lane.tick(now);
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
        self.queues.iter_mut().for_each(VecDeque::clear);
    }

    /// The frame `frame` stands for, if it still waits (not answered, failed or closed).
    fn message(&self, frame: &Frame) -> Option<ClientMessage> {
        match frame {
            Frame::Event(id) => self.publishes.get(id).map(|p| ClientMessage::Event(Box::new(p.event.clone()))),
            Frame::Req(sub) => {
                self.reqs.get(sub).map(|f| ClientMessage::Req { sub_id: sub.clone(), filters: f.clone() })
            }
            Frame::Count(sub) => {
                self.counts.get(sub).map(|f| ClientMessage::Count { sub_id: sub.clone(), filters: f.clone() })
            }
        }
    }

    /// The next request to send now, if its lane's gate and pace allow one: of the writes and
    /// the reads waiting, the one asked for first whose lane lets it go. AUTH and CLOSE go first
    /// and are never paced or gated.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<ClientMessage> {
        if let Some(frame) = self.urgent.pop_front() {
            return Some(frame);
        }
        self.on_tick(now);
        if self.auth_hold.is_some() {
            return None;
        }
        // Heads that no longer stand for a request are dropped.
        for queue in [WRITES, READS] {
            while let Some((_, frame)) = self.queues[queue].front() {
                if self.message(frame).is_some() {
                    break;
                }
                self.queues[queue].pop_front();
            }
        }
        let mut heads: Vec<(u64, usize)> =
            [WRITES, READS].into_iter().filter_map(|q| self.queues[q].front().map(|(asked, _)| (*asked, q))).collect();
        heads.sort_unstable();
        for (_, queue) in heads {
            let lane = self.lane(queue);
            if !self.lanes[lane].take(now) {
                continue;
            }
            let (_, frame) = self.queues[queue].pop_front()?;
            let message = self.message(&frame)?;
            if let Frame::Event(id) = frame
                && let Some(publish) = self.publishes.get_mut(&id)
            {
                publish.deadline.get_or_insert(now + self.publish_timeout);
            }
            self.progress.sent += 1;
            return Some(message);
        }
        None
    }

    /// When the core next needs attention without a frame arriving (gates, pace, deadline).
    pub fn next_wakeup(&self, now: Instant) -> Option<Instant> {
        let deadline = self.publishes.values().filter_map(|p| p.deadline).min();
        let writes_wait = !self.queues[WRITES].is_empty() || (!self.split && !self.queues[READS].is_empty());
        let mut lanes = vec![self.lanes[WRITES].wakeup(now, writes_wait)];
        if self.split {
            lanes.push(self.lanes[READS].wakeup(now, !self.queues[READS].is_empty()));
        }
        lanes.into_iter().chain([self.auth_hold, deadline]).flatten().min()
    }

    /// The next update for callers.
    pub fn poll_update(&mut self) -> Option<Update> {
        self.updates.pop_front()
    }

    /// True when nothing is queued or awaiting an answer.
    pub fn idle(&self) -> bool {
        self.queues.iter().all(VecDeque::is_empty) && self.publishes.is_empty() && self.urgent.is_empty()
    }
}

#[cfg(test)]
mod tests;
