//! A client's test written against a real hearth started in-process: what another project's
//! test suite looks like with `hearth::testing`. Run it with `cargo run --example test_relay`;
//! `cargo test` runs it too.
//!
//! The "client under test" here is a few lines of raw WebSocket: it publishes, and when the
//! relay refuses with `rate-limited: …; retry in Ns` it waits N seconds and resends once. The
//! relay's limiter runs on a manual clock, so the test moves time instead of sleeping.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hearth::config::LimitsConfig;
use hearth::protocol::{Event, Keys, Kind, Timestamp};
use hearth::testing::{Options, TestRelay};
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;

type Ws = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// Sends one EVENT and returns the relay's OK frame.
async fn publish(ws: &mut Ws, event: &Event) -> Result<Value, Box<dyn std::error::Error>> {
    ws.send(Message::text(json!(["EVENT", event]).to_string())).await?;
    while let Some(frame) = ws.next().await {
        if let Message::Text(text) = frame? {
            let frame: Value = serde_json::from_str(text.as_str())?;
            if frame[0] == "OK" && frame[1] == event.id.to_hex() {
                return Ok(frame);
            }
        }
    }
    Err("the relay closed the connection".into())
}

/// The wait a `rate-limited: …; retry in Ns` message asks for.
fn retry_in(message: &str) -> Option<Duration> {
    let secs = message.strip_prefix("rate-limited: ")?.rsplit("retry in ").next()?.strip_suffix('s')?;
    secs.parse().ok().map(Duration::from_secs)
}

async fn a_refused_publish_is_resent_once_after_the_wait() -> Result<(), Box<dyn std::error::Error>> {
    // Two durable events a minute, on a clock only the test moves.
    let mut limits = LimitsConfig::default();
    limits.human.messages_per_min = 2;
    let relay = TestRelay::start(Options { limits: Some(limits), manual_clock: true, ..Default::default() }).await?;

    let (mut ws, _) = tokio_tungstenite::connect_async(relay.ws_url()).await?;
    let keys = Keys::from_bytes([1; 32])?;
    let notes: Vec<Event> =
        (0..3).map(|i| keys.sign(Timestamp::now(), Kind(1), vec![], &format!("note {i}"))).collect();
    assert_eq!(publish(&mut ws, &notes[0]).await?[2], true);
    assert_eq!(publish(&mut ws, &notes[1]).await?[2], true);

    // The third is refused, with a truthful wait: one cell of a 2-per-minute bucket.
    let refused = publish(&mut ws, &notes[2]).await?;
    assert_eq!(refused[2], false);
    let wait = retry_in(refused[3].as_str().unwrap_or("")).ok_or("no retry hint")?;
    assert_eq!(wait, Duration::from_secs(30));

    // The client waits (the test moves the clock) and resends once: accepted.
    relay.advance(wait);
    assert_eq!(publish(&mut ws, &notes[2]).await?, json!(["OK", notes[2].id.to_hex(), true, ""]));
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    a_refused_publish_is_resent_once_after_the_wait().await?;
    println!("ok: the refused publish was resent once after the relay's wait");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_refused_publish_is_resent_once_after_the_wait() {
        if let Err(e) = super::a_refused_publish_is_resent_once_after_the_wait().await {
            panic!("{e}");
        }
    }
}
