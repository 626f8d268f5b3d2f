//! The crash replay: the writes whose frames the event log holds after the end sled made
//! durable, redone in order through the same rules, and the log frames of the writes that are
//! not records (a moderation removal, an expiry sweep).

use sled::Tree;

use super::apply::{put, remove_into, sweep};
use super::pending::Pending;
use crate::protocol::{EventId, Timestamp};
use crate::store::contract::PutOutcome;
use crate::store::embedded::catalogue::Places;
use crate::store::error::StoreError;
use crate::store::format::log::{self, Log};
use crate::store::format::{Serial, keys, record};

/// First byte of the log frame of a moderation removal (then the id); records start with
/// `record::FORMAT`.
const REMOVE_FRAME: u8 = 0x80;
/// First byte of the log frame of an expiry sweep that removed events (then `now`, u64).
const SWEEP_FRAME: u8 = 0x81;

/// The log frame of a moderation removal.
pub(crate) fn remove_frame(id: &EventId) -> Vec<u8> {
    let mut frame = vec![REMOVE_FRAME];
    frame.extend_from_slice(&id.0);
    frame
}

/// The log frame of an expiry sweep that removed events.
pub(crate) fn sweep_frame(now: Timestamp) -> Vec<u8> {
    let mut frame = vec![SWEEP_FRAME];
    frame.extend_from_slice(&now.0.to_be_bytes());
    frame
}

/// The event a moderation removal's log frame removed; None for any other frame.
pub(crate) fn removed_by(frame: &[u8]) -> Option<EventId> {
    match frame.split_first() {
        Some((&REMOVE_FRAME, id)) => id.try_into().ok().map(EventId),
        _ => None,
    }
}

/// Redoes, in order, the writes whose frames are in the event log after the end sled made
/// durable (`serials`, from [`Log::recover_tail`]): puts, removals and sweeps take the same code
/// as the first time against the same state, so they decide the same way. Returns how many frames
/// were replayed; the caller flushes.
pub(crate) fn replay(tree: &Tree, log: &Log, serials: &[Serial], places: &Places) -> Result<usize, StoreError> {
    // The index is rebuilt from sled afterwards: the replayed changes to it are not needed.
    let mut p = Pending::new(tree, log, places.clone());
    for &serial in serials {
        let frame = log.read(serial)?;
        // What is applied to sled records as done exactly the frames before this one (a sweep
        // applies the group so far), so a crash during the replay redoes the rest.
        p.start = serial;
        let outcome = match frame.split_first() {
            Some((&REMOVE_FRAME, id)) => {
                let id = EventId(id.try_into().map_err(|_| StoreError::Corrupt(format!("removal frame at {serial}")))?);
                remove_into(&mut p, &id).map(drop)
            }
            Some((&SWEEP_FRAME, now)) => {
                let now = now.try_into().map_err(|_| StoreError::Corrupt(format!("sweep frame at {serial}")))?;
                if !p.is_empty() {
                    p.apply()?;
                }
                sweep(&mut p, Timestamp(u64::from_be_bytes(now))).map(drop)
            }
            _ => match put(&mut p, &record::decode(&frame)?, Some(serial))? {
                PutOutcome::Stored(_) => Ok(()),
                other => {
                    tracing::warn!(serial, outcome = ?other, "a replayed record was not stored again");
                    // Its frame is dead: recorded as a removal, so the tail's reader skips it.
                    p.insert(keys::removed(serial), (log::FRAME_HEADER as u32 + frame.len() as u32).to_be_bytes());
                    Ok(())
                }
            },
        };
        p.finish(outcome)?;
        p.start = serial + log::FRAME_HEADER + frame.len() as u64;
    }
    if !p.is_empty() {
        p.apply()?;
    }
    Ok(serials.len())
}
