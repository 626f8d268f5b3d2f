//! An async relay session, driven by [`super::core::Core`]: the caller's handle for both
//! transports.
//!
//! Owns what both transports' tasks share: the commands callers send through
//! a bounded channel, and who waits for the answers (`Waiters`). Every decision (gate, resend,
//! pacing, AUTH) is the core's; the tasks are [`super::ws`]'s and [`super::rest`]'s.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot, watch};

use super::core::{Core, Pace, Progress, PublishError, Update};

use crate::protocol::{Event, EventId, Filter, Tier};

/// Session settings.
#[derive(Clone, Debug)]
pub struct Options {
    /// How long a publish may take from when it is first sent, waits for the gate included
    /// (time queued behind the client's own pacing does not count).
    pub publish_timeout: Duration,
    /// Outbound pace; `None` = read it from the relay's NIP-11 document (no pacing if absent).
    pub pace: Option<Pace>,
}

impl Default for Options {
    fn default() -> Self {
        Options { publish_timeout: Duration::from_secs(60), pace: None }
    }
}

/// What a caller asks of its session's task, over either transport.
pub(super) enum Command {
    Publish(Box<Event>, oneshot::Sender<Result<String, PublishError>>),
    Req(String, Vec<Filter>, mpsc::Sender<Update>),
    Count(String, Vec<Filter>, oneshot::Sender<Result<u64, String>>),
    Close(String),
}

/// A session with one relay, over a WebSocket ([`Session::connect`]) or its REST API
/// ([`Session::connect_rest`]: a subscription there ends at EOSE, with no live events).
pub struct Session {
    commands: mpsc::Sender<Command>,
    next_sub: std::sync::atomic::AtomicU64,
    progress: watch::Receiver<Progress>,
    /// The caller's tier as the relay names it (REST answers only).
    tier: Option<watch::Receiver<Option<Tier>>>,
}

impl Session {
    /// A session and the ends its task keeps: the commands, and where it says its progress.
    pub(super) fn channels(
        tier: Option<watch::Receiver<Option<Tier>>>,
    ) -> (Session, mpsc::Receiver<Command>, watch::Sender<Progress>) {
        let (commands, rx) = mpsc::channel(1024);
        let (progress_tx, progress) = watch::channel(Progress::default());
        let session = Session { commands, next_sub: std::sync::atomic::AtomicU64::new(0), progress, tier };
        (session, rx, progress_tx)
    }

    /// What the session has done so far.
    pub fn progress(&self) -> Progress {
        *self.progress.borrow()
    }

    /// The caller's tier, as the relay last named it (over REST, once it has answered).
    pub fn tier(&self) -> Option<Tier> {
        self.tier.as_ref().and_then(|t| *t.borrow())
    }

    /// Publishes an event: `Ok("")`, `Ok("duplicate: …")`, or why not.
    pub async fn publish(&self, event: Event) -> Result<String, PublishError> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Publish(Box::new(event), tx))
            .await
            .map_err(|_| PublishError::Disconnected("session closed".into()))?;
        rx.await.map_err(|_| PublishError::Disconnected("session closed".into()))?
    }

    fn sub_id(&self) -> String {
        format!("h{}", self.next_sub.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// Opens a subscription; updates (events, EOSE, CLOSED) arrive on the receiver.
    pub async fn subscribe(&self, filters: Vec<Filter>) -> Result<(String, mpsc::Receiver<Update>), String> {
        let sub = self.sub_id();
        let (tx, rx) = mpsc::channel(1024);
        self.commands.send(Command::Req(sub.clone(), filters, tx)).await.map_err(|_| "session closed".to_string())?;
        Ok((sub, rx))
    }

    /// Stored events matching `filters`, up to EOSE; the subscription is then closed.
    pub async fn fetch(&self, filters: Vec<Filter>) -> Result<Vec<Value>, String> {
        let (sub, mut rx) = self.subscribe(filters).await?;
        let mut events = Vec::new();
        loop {
            match rx.recv().await {
                Some(Update::Event(_, e)) => events.push(e),
                Some(Update::Eose(_)) => break,
                Some(Update::Closed(_, why)) => return Err(why),
                Some(_) => {}
                None => return Err("connection lost".into()),
            }
        }
        self.close(&sub).await;
        Ok(events)
    }

    /// Closes a subscription.
    pub async fn close(&self, sub: &str) {
        let _ = self.commands.send(Command::Close(sub.to_string())).await;
    }

    /// NIP-45 COUNT.
    pub async fn count(&self, filters: Vec<Filter>) -> Result<u64, String> {
        let (tx, rx) = oneshot::channel();
        self.commands
            .send(Command::Count(self.sub_id(), filters, tx))
            .await
            .map_err(|_| "session closed".to_string())?;
        rx.await.map_err(|_| "connection lost".to_string())?
    }
}

/// Who waits for what the core answers: the same for both transports' tasks.
#[derive(Default)]
pub(super) struct Waiters {
    publishes: HashMap<EventId, oneshot::Sender<Result<String, PublishError>>>,
    subs: HashMap<String, mpsc::Sender<Update>>,
    counts: HashMap<String, oneshot::Sender<Result<u64, String>>>,
}

impl Waiters {
    /// Takes a caller's command into the core; false once the session was dropped (`None`):
    /// nothing waits for answers then, so nothing is resent.
    pub(super) fn command(&mut self, core: &mut Core, command: Option<Command>) -> bool {
        match command {
            Some(Command::Publish(event, tx)) => {
                self.publishes.insert(event.id, tx);
                core.publish(*event);
            }
            Some(Command::Req(sub, filters, tx)) => {
                self.subs.insert(sub.clone(), tx);
                core.req(&sub, filters);
            }
            Some(Command::Count(sub, filters, tx)) => {
                self.counts.insert(sub.clone(), tx);
                core.count(&sub, filters);
            }
            Some(Command::Close(sub)) => {
                self.subs.remove(&sub);
                core.close(&sub);
            }
            None => {
                core.on_disconnect("session closed");
                return false;
            }
        }
        true
    }

    /// Hands the core's updates to whoever waits for them. The progress goes first: whoever
    /// reads a result then sees progress that counts it.
    pub(super) async fn deliver(&mut self, core: &mut Core, progress: &watch::Sender<Progress>) {
        progress.send_replace(core.progress());
        while let Some(update) = core.poll_update() {
            match update {
                Update::Published(id, result) => {
                    if let Some(tx) = self.publishes.remove(&id) {
                        let _ = tx.send(result);
                    }
                }
                Update::Count(sub, n) => {
                    if let Some(tx) = self.counts.remove(&sub) {
                        let _ = tx.send(Ok(n));
                    }
                }
                Update::Closed(sub, why) => {
                    if let Some(tx) = self.counts.remove(&sub) {
                        let _ = tx.send(Err(why));
                    } else if let Some(tx) = self.subs.remove(&sub) {
                        let _ = tx.send(Update::Closed(sub, why)).await;
                    }
                }
                Update::Event(ref sub, _) | Update::Eose(ref sub) => {
                    if let Some(tx) = self.subs.get(sub) {
                        let _ = tx.send(update.clone()).await;
                    }
                }
                Update::Notice(_) => {}
            }
        }
    }

    /// The relay is gone: dropping the senders tells every waiting subscriber and COUNT.
    pub(super) fn lost(&mut self) {
        self.subs.clear();
        self.counts.clear();
    }
}

/// Until the core's next wake-up, or for ever when it needs none.
pub(super) async fn sleep_until(wake: Option<Instant>) {
    match wake {
        Some(at) => tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await,
        None => std::future::pending().await,
    }
}
