//! A backup of a whole community: what it holds and how it is read out of a relay.
//!
//! Owns the backup's parts ([`Part`]) and their order, and reading them out of a relay's state
//! (`read_out`): the relay's key, every settings document (members, invites, bans and blocks,
//! tiers and limit overrides, NIP-11 overrides, the groups' signing state), the audit log, every
//! stored event (oldest first, in store order, so deletions and replacements fold the same way
//! again), every blob with who uploaded it, and last a [`Manifest`] counting them. The same parts
//! are written by `hearth backup` offline and streamed by `GET /admin/v1/backup` online, and
//! [`folder`] turns them into the backup folder `hearth restore` reads.

pub mod folder;

use std::io::Read;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use crate::app::AppState;
use crate::protocol::{Filter, Timestamp};
use crate::store::media::BlobRecord;

/// The layout version of a backup this hearth writes and reads.
pub const FORMAT: u32 = 1;

/// Bytes of a blob in one [`Part::BlobData`].
const BLOB_CHUNK: usize = 1 << 20;

/// One part of a backup, in the order `read_out` gives them.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    /// The relay's secret key, hex.
    Key(String),
    /// A settings document: JSON when it is, else its bytes in base64.
    Setting {
        /// The document's name.
        name: String,
        /// Its value, when JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        json: Option<Box<RawValue>>,
        /// Its bytes, when not JSON.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        base64: Option<String>,
    },
    /// An audit log entry (JSON), oldest first.
    Audit(Box<RawValue>),
    /// A stored event, as stored.
    Event(Box<RawValue>),
    /// A blob begins: its hash and each upload of it. Its bytes follow as [`Part::BlobData`].
    Blob {
        /// The blob's SHA-256, lowercase hex.
        sha256: String,
        /// Who uploaded it, and when.
        records: Vec<BlobRecord>,
    },
    /// The next bytes of the blob begun last, base64.
    BlobData(String),
    /// The backup is complete: what it holds.
    End(Manifest),
}

/// What a backup holds (`manifest.json`, written last: a folder without it is incomplete).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The layout version ([`FORMAT`]).
    pub format: u32,
    /// The hearth version that wrote it.
    pub hearth: String,
    /// When the backup began (Unix seconds): the events are those stored by then.
    pub created_at: u64,
    /// The relay's public key (NIP-11 `self`), hex.
    pub relay_pubkey: String,
    /// The access mode of the relay it came from.
    pub access_mode: String,
    /// Events.
    pub events: u64,
    /// Settings documents.
    pub settings: u64,
    /// Audit entries.
    pub audit: u64,
    /// Blobs (each with one record or more).
    pub blobs: u64,
    /// Bytes of the blobs.
    pub blob_bytes: u64,
}

/// Why a backup or a restore stopped.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Reading the relay's state failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// Reading or writing a file failed.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// A blob's bytes could not be read (a file, or the bucket's object).
    #[error(transparent)]
    Blob(#[from] crate::blobs::BlobError),
    /// The backup folder or stream is not what hearth writes (the text says what is wrong).
    #[error("{0}")]
    Format(String),
    /// Whoever took the parts stopped (a client that went away).
    #[error("the backup's reader went away")]
    Gone,
}

/// Reads every part of `app`'s community out to `sink`, blocking (run it off the async threads),
/// and returns the manifest it ended with.
pub(crate) fn read_out(
    app: &AppState,
    sink: &mut dyn FnMut(Part) -> Result<(), BackupError>,
) -> Result<Manifest, BackupError> {
    let now = Timestamp::now();
    let mut manifest = Manifest {
        format: FORMAT,
        hearth: env!("CARGO_PKG_VERSION").into(),
        created_at: now.0,
        relay_pubkey: app.keys.public_key().to_hex(),
        access_mode: app.config.access.mode.name().into(),
        ..Manifest::default()
    };
    sink(Part::Key(app.keys.secret_hex()))?;
    for (name, value) in app.store.settings()? {
        let (json, base64) = match serde_json::from_slice::<Box<RawValue>>(&value) {
            Ok(json) => (Some(json), None),
            Err(_) => (None, Some(base64::engine::general_purpose::STANDARD.encode(&value))),
        };
        sink(Part::Setting { name, json, base64 })?;
        manifest.settings += 1;
    }
    for entry in app.store.audit_log(usize::MAX)?.into_iter().rev() {
        let json = serde_json::from_slice::<Box<RawValue>>(&entry)
            .map_err(|e| BackupError::Format(format!("an audit entry is not JSON: {e}")))?;
        sink(Part::Audit(json))?;
        manifest.audit += 1;
    }
    for event in app.store.export(&Filter::default(), now)? {
        let event = event?;
        let raw = RawValue::from_string(event.as_str().to_string())
            .map_err(|e| BackupError::Format(format!("a stored event is not JSON: {e}")))?;
        sink(Part::Event(raw))?;
        manifest.events += 1;
    }
    let records = app.blobs.records();
    for hash in records.hashes()? {
        let hash = crate::protocol::blossom::BlobHash(hash);
        let owners = records.owners_of(&hash.0)?;
        if owners.is_empty() {
            continue;
        }
        let size = owners.first().map_or(0, |r| r.size);
        sink(Part::Blob { sha256: hash.to_hex(), records: owners })?;
        let mut file = app.blobs.reader(&hash, size)?;
        let mut buffer = vec![0; BLOB_CHUNK];
        loop {
            let read = file.read(&mut buffer)?;
            if read == 0 {
                break;
            }
            manifest.blob_bytes += read as u64;
            sink(Part::BlobData(base64::engine::general_purpose::STANDARD.encode(&buffer[..read])))?;
        }
        manifest.blobs += 1;
    }
    sink(Part::End(manifest.clone()))?;
    Ok(manifest)
}
