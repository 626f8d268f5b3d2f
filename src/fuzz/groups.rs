//! The fuzz entry point of NIP-29's action tags: a group event of any kind with any tags, read
//! as the action it asks for.

use std::sync::OnceLock;

use crate::protocol::nip29::{Action, Metadata, Pin};
use crate::protocol::{Keys, Kind, Timestamp};

use super::input::text;

fn keys() -> Option<&'static Keys> {
    static KEYS: OnceLock<Option<Keys>> = OnceLock::new();
    KEYS.get_or_init(|| Keys::from_bytes([7; 32]).ok()).as_ref()
}

/// `[kind, [tags…]]` (a kind under 100 taken as 9000 + kind mod 23, so that most inputs are the
/// actions 9000–9022; any other as itself), signed and read as an action: never a panic; metadata
/// and pins read back from the tags the relay would write for them to the same.
pub fn nip29_action(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let Ok((kind, tags)) = serde_json::from_str::<(u16, Vec<Vec<String>>)>(text) else { return };
    if tags.iter().any(Vec::is_empty) {
        return;
    }
    let Some(keys) = keys() else { return };
    let kind = if kind < 100 { Kind(9000 + kind % 23) } else { Kind(kind) };
    let event = keys.sign(Timestamp(1_700_000_000), kind, tags, "");
    match Action::of(&event) {
        Ok(Action::EditMetadata(metadata)) => {
            let written = metadata.to_tags(true);
            match Metadata::from_tags(&written) {
                Ok(again) => assert_eq!(again, metadata, "{written:?}"),
                Err(e) => panic!("metadata the relay writes does not read back: {e}: {written:?}"),
            }
        }
        Ok(Action::UpdatePins(pins)) => {
            let written: Vec<Vec<String>> = pins.iter().map(Pin::to_tag).collect();
            match Pin::from_tags(&written) {
                Ok(again) => assert_eq!(again, pins, "{written:?}"),
                Err(e) => panic!("pins the relay writes do not read back: {e}: {written:?}"),
            }
        }
        Ok(_) | Err(_) => {}
    }
}
