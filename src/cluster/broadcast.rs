//! Live delivery across nodes: every event a node accepts, sent to the others through Redis
//! publish/subscribe.
//!
//! Owns [`Broadcast`]: the channel (`<prefix>events`), this node's id (random per process, so a
//! node leaves its own messages out), sending one event's JSON, and [`Broadcast::listen`], a
//! subscription's stream of the other nodes' events. A message is `<node id>\n<event JSON>`.
//! What the events mean is the caller's (`crate::nodes`); this knows only bytes.

use std::sync::Arc;

use futures_util::{Stream, StreamExt};

use super::{Link, LinkError};

/// The events of every node, over one Redis channel.
pub struct Broadcast {
    link: Arc<Link>,
    channel: String,
    node: String,
}

impl Broadcast {
    /// The channel of `link`'s prefix, for a node with a fresh random id.
    pub fn new(link: Arc<Link>) -> Broadcast {
        let mut id = [0u8; 8];
        // A node id collision only costs the two nodes each other's events: getrandom failing
        // leaves zeroes, and the process id still tells most nodes apart.
        let _ = getrandom::fill(&mut id);
        let node = format!("{}-{}", hex::encode(id), std::process::id());
        Broadcast { channel: link.key(&["events"]), link, node }
    }

    /// This node's id.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Sends one event's JSON to every other node; an error when Redis is down (the other
    /// nodes then catch up from a shared store once it is back).
    pub async fn send(&self, json: &str) -> Result<(), LinkError> {
        let message = format!("{}\n{json}", self.node);
        let mut conn = self.link.connection();
        let channel = self.channel.clone();
        self.link
            .call(async move { redis::AsyncCommands::publish::<_, _, i64>(&mut conn, channel, message).await })
            .await?;
        Ok(())
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
