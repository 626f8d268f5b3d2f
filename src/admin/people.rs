//! Who a pubkey is, as the admin page shows people: the name and picture of its kind 0 where
//! the store has one, beside the hex.
//!
//! Owns [`profiles`], which the groups' and the media's views share.

use std::collections::HashMap;

use serde_json::Value;

use crate::app::AppState;
use crate::protocol::{Filter, Kind, PubKey, Timestamp, Viewer};

/// The names and pictures of `pubkeys` from their stored kind 0.
pub(super) async fn profiles(app: &AppState, pubkeys: Vec<PubKey>) -> HashMap<PubKey, (String, String)> {
    let mut out = HashMap::new();
    if pubkeys.is_empty() {
        return out;
    }
    let filter = Filter { kinds: Some(vec![Kind(0)]), authors: Some(pubkeys), ..Filter::default() };
    let Ok((events, _)) = app.store.query_async(vec![filter], Timestamp::now(), Viewer::everything()).await else {
        return out;
    };
    for json in events {
        let Ok(event) = serde_json::from_str::<crate::protocol::Event>(json.as_str()) else { continue };
        let profile: Value = serde_json::from_str(&event.content).unwrap_or(Value::Null);
        let text = |k: &str| profile[k].as_str().unwrap_or("").to_string();
        let name = Some(text("display_name")).filter(|n| !n.is_empty()).unwrap_or_else(|| text("name"));
        out.entry(event.pubkey).or_insert((name, text("picture")));
    }
    out
}
