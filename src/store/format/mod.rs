//! The bytes on disk, and nothing else: the store's lowest floor.
//!
//! Owns the encoding of every file and key of a data directory: an event record ([`record`]),
//! the framed event log ([`log`]), an index segment file ([`segment`]), the catalogue's keys
//! ([`keys`]) and its id buckets ([`bucket`]), a compaction's moves file ([`moves`]), and the
//! sync that makes a sled flush durable ([`durable`]). It imports nothing of the store above it:
//! each format is pure encoding over `std` files and byte slices, with its own error, so that a
//! second backend (or a fuzz target) can read any of them alone.
//!
//! This file holds what the formats share and imports none of them: the [`Serial`] that places a
//! record, the [`FormatError`] of a damaged value, and a file removal that tolerates a file
//! already gone.

pub mod bucket;
pub mod durable;
pub mod keys;
pub mod log;
pub mod moves;
pub mod record;
pub mod segment;

use std::path::Path;

/// The position of a record in the event log (its frame's offset); only grows.
pub type Serial = u64;

/// A stored value that does not decode, or a file that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    /// What is damaged, and how.
    #[error("{0}")]
    Damaged(String),
    /// The file could not be read or written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

/// A serial (or another big-endian u64) stored as a value.
pub fn decode_serial(value: &[u8]) -> Result<Serial, FormatError> {
    value.try_into().map(u64::from_be_bytes).map_err(|_| FormatError::Damaged("id entry".into()))
}

/// Removes a file unless it is gone already (the merge thread and a compaction may both remove
/// one of the files they replaced).
pub fn remove_if_there(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
