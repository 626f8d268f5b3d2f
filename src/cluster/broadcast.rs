//! Live delivery across nodes: every event a node accepts, sent to the others through Redis
//! publish/subscribe.
//!
//! Owns [`Broadcast`]: the channel (`<prefix>events`), this node's id (random per process, so a
//! node leaves its own messages out), sending one event's JSON, and [`Broadcast::listen`], a
//! subscription's stream of the other nodes' events. A message is `<node id>\n<event JSON>`.
//! A message that cannot be sent (Redis down, or this node not yet aware it is back) waits in
//! order, up to [`MAX_WAITING`], and goes out before the next one and at each [`Broadcast::retry`].
//! Messages are queued in the order a node accepted their events and sent in that order.
//! What the events mean is the caller's (`crate::delivery`); this knows only bytes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::{Stream, StreamExt};

use super::{Link, LinkError};

/// Messages kept while Redis cannot take them; the oldest go first when there are more.
pub const MAX_WAITING: usize = 10_000;

/// The events of every node, over one Redis channel.
pub struct Broadcast {
    link: Arc<Link>,
    channel: String,
    node: String,
    /// Messages not sent yet, oldest first.
    waiting: Mutex<VecDeque<String>>,
    /// One sender at a time, so that messages leave in order.
    sending: tokio::sync::Mutex<()>,
}

impl Broadcast {
    /// The channel of `link`'s prefix, for a node with a fresh random id.
    pub fn new(link: Arc<Link>) -> Broadcast {
        let mut id = [0u8; 8];
        // A node id collision only costs the two nodes each other's events: getrandom failing
        // leaves zeroes, and the process id still tells most nodes apart.
        let _ = getrandom::fill(&mut id);
        let node = format!("{}-{}", hex::encode(id), std::process::id());
        Broadcast { channel: link.key(&["events"]), link, node, waiting: Mutex::default(), sending: Default::default() }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Queues one event's JSON for every other node, after those still waiting (in the order
    /// queued, whichever task sends them); [`Broadcast::retry`] sends.
    pub fn queue(&self, json: &str) {
        let mut waiting = self.waiting();
        if waiting.len() == MAX_WAITING {
            waiting.pop_front();
            tracing::warn!("too many events wait for Redis; the oldest is dropped from live delivery");
        }
        waiting.push_back(format!("{}\n{json}", self.node));
    }

    /// Sends the messages waiting, oldest first, until one fails.
    pub async fn retry(&self) -> Result<(), LinkError> {
        let _turn = self.sending.lock().await;
        loop {
            let Some(message) = self.waiting().front().cloned() else { return Ok(()) };
            let mut conn = self.link.connection();
            let channel = self.channel.clone();
            let publish = async move { redis::AsyncCommands::publish::<_, _, i64>(&mut conn, channel, message).await };
            self.link.call(publish).await?;
            self.waiting().pop_front();
        }
    }

    /// True when messages wait for Redis.
    pub fn has_waiting(&self) -> bool {
        !self.waiting().is_empty()
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, VecDeque<String>> {
        self.waiting.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Subscribes: the other nodes' events' JSON, until the connection ends.
    pub async fn listen(&self) -> Result<impl Stream<Item = String> + use<>, LinkError> {
        let mut pubsub = self.link.pubsub().await?;
        pubsub.subscribe(&self.channel).await.map_err(|e| LinkError::Redis(e.to_string()))?;
        let own = format!("{}\n", self.node);
        Ok(pubsub.into_on_message().filter_map(move |message| {
            let text: Option<String> = message.get_payload().ok();
            let event = text.and_then(|t| {
                let (node, json) = t.split_once('\n')?;
                (format!("{node}\n") != own).then(|| json.to_string())
            });
            std::future::ready(event)
        }))
    }
}
