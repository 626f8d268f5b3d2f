//! `hearth backup DIR [--relay URL]` and `hearth restore DIR`: a whole community written into a
//! backup folder and brought back from one.
//!
//! Owns where a backup is read: offline on the configured data directory while no relay holds
//! it, or from a running relay through `GET /admin/v1/backup` (with `admin.token`), its parts
//! written by the same [`crate::backup::folder::Writer`] either way; and the restore into an
//! empty data directory: the key first (so the relay keeps its identity), then every event by the
//! store's own rules (not the publish rules: an event the community accepted is restored whoever
//! may publish now), the settings, the audit log and the blobs.

use std::io::BufRead;
use std::path::Path;
use std::time::Duration;

use serde::Serialize;

use super::dir::{OfflineError, open};
use crate::app::AppState;
use crate::backup::folder::{MEDIA, Reader, Writer};
use crate::backup::{BackupError, Manifest, Part};
use crate::config::Config;
use crate::protocol::Event;
use crate::protocol::verify::verify;
use crate::store::{PutOutcome, Store, StoreError};

/// How long a backup from a running relay may take.
const BACKUP_WAIT: Duration = Duration::from_secs(24 * 3600);

impl From<BackupError> for OfflineError {
    fn from(e: BackupError) -> OfflineError {
        match e {
            BackupError::Store(e) => OfflineError::Store(e),
            BackupError::Io(e) => OfflineError::Io(e),
            BackupError::Format(text) => OfflineError::Unusable(text),
            BackupError::Gone | BackupError::Blob(_) => OfflineError::Io(std::io::Error::other(e.to_string())),
        }
    }
}

/// Writes the community into `to` (which must not exist or be empty): from the running relay at
/// `relay` (its http(s):// or ws(s):// URL), else from the configured data directory.
pub async fn backup(config: Config, to: &Path, relay: Option<&str>) -> Result<Manifest, OfflineError> {
    // The folder is made only once the backup can start: a refusal leaves nothing behind.
    let Some(relay) = relay else {
        let app = open(config, false).map_err(|e| match e {
            OfflineError::Store(StoreError::InUse { path }) => OfflineError::Unusable(format!(
                "data directory {} is in use by a running hearth: back it up through it with \
                 `hearth backup {} --relay http://HOST:PORT` (admin.token set)",
                path.display(),
                to.display()
            )),
            e => e,
        })?;
        let mut writer = match Writer::create(to) {
            Ok(writer) => writer,
            Err(e) => {
                AppState::close(app).await?;
                return Err(e.into());
            }
        };
        let reading = app.clone();
        let done = tokio::task::spawn_blocking(move || {
            crate::backup::read_out(&reading, &mut |part| writer.take(part).map(|_| ()))
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()));
        AppState::close(app).await?;
        return Ok(done??);
    };
    let token = &config.admin.token;
    if token.is_empty() {
        return Err(OfflineError::Unusable(
            "--relay: a backup through the admin API needs admin.token (HEARTH_ADMIN__TOKEN), the running relay's"
                .into(),
        ));
    }
    let url = format!("{}/admin/v1/backup", crate::client::nip11::http_base(relay));
    let failed = |e: String| OfflineError::Unusable(format!("--relay {url}: {e}"));
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(10))
        .timeout(BACKUP_WAIT)
        .build()
        .map_err(|e| failed(e.to_string()))?;
    let mut response = http.get(&url).bearer_auth(token).send().await.map_err(|e| {
        failed(format!("cannot reach the relay ({e}): give the address it serves HTTP on, e.g. http://127.0.0.1:7777"))
    })?;
    if !response.status().is_success() {
        let status = response.status();
        let body = response.text().await.unwrap_or_default();
        return Err(failed(format!("{status}: {body}")));
    }
    let mut writer = Writer::create(to)?;
    let mut pending: Vec<u8> = Vec::new();
    let incomplete = || {
        OfflineError::Io(std::io::Error::other(format!(
            "the backup stream from {url} ended before its end (the relay stopped or the connection broke): \
             {} has no manifest and cannot be restored; run the backup again into a new folder",
            to.display()
        )))
    };
    loop {
        let chunk = response.chunk().await.map_err(|_| incomplete())?;
        let Some(chunk) = chunk else { return Err(incomplete()) };
        pending.extend_from_slice(&chunk);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let part: Part = serde_json::from_slice(&line)
                .map_err(|e| OfflineError::Unusable(format!("{url}: not a hearth backup stream ({e})")))?;
            if let Some(manifest) = writer.take(part)? {
                return Ok(manifest);
            }
        }
    }
}

/// What `hearth restore` prints.
#[derive(Debug, Serialize)]
pub struct Restored {
    /// The relay's public key (NIP-11 `self`) the restored community has.
    pub relay_pubkey: String,
    /// Events in the backup.
    pub events: u64,
    /// Of those, stored (the rest were expired meanwhile, or refused by the store's rules).
    pub stored: u64,
    /// Settings documents restored.
    pub settings: u64,
    /// Audit entries restored.
    pub audit: u64,
    /// Blobs' uploads restored.
    pub uploads: u64,
}

/// Brings the backup in `from` back into the configured data directory, which must be empty
/// (and, on PostgreSQL, the database too).
pub async fn restore(config: Config, from: &Path) -> Result<Restored, OfflineError> {
    let backup = Reader::open(from)?;
    let dir = config.storage.data_dir.clone();
    if dir.exists() && std::fs::read_dir(&dir)?.next().is_some() {
        return Err(OfflineError::Unusable(format!(
            "data directory {} is not empty: restore into an empty one (set storage.data_dir to a new \
             folder, or move this one aside)",
            dir.display()
        )));
    }
    let keys = crate::protocol::Keys::parse(&backup.key()?)
        .map_err(|e| OfflineError::Unusable(format!("{}: relay.key: {e}", from.display())))?;
    key_is_private(&from.join(crate::backup::folder::KEY))?;
    std::fs::create_dir_all(&dir)?;
    let restored = restore_into(config, &backup, keys).await;
    if restored.is_err() {
        // Empty again, so that the same restore can simply be run once more (a PostgreSQL that
        // was down, a full disk).
        for entry in std::fs::read_dir(&dir)?.flatten() {
            let path = entry.path();
            let _ = if path.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        }
    }
    restored
}

/// [`restore`] into the empty data directory of `config`.
async fn restore_into(config: Config, backup: &Reader, keys: crate::protocol::Keys) -> Result<Restored, OfflineError> {
    let dir = config.storage.data_dir.clone();
    crate::identity::keep(&dir.join(crate::identity::KEY_FILE), &keys)
        .map_err(|e| OfflineError::Io(std::io::Error::other(e.to_string())))?;
    let configured = config.relay.secret_key.trim();
    if !configured.is_empty()
        && crate::protocol::Keys::parse(configured).map(|k| k.public_key()) != Ok(keys.public_key())
    {
        tracing::warn!(
            restored = %keys.public_key().to_hex(),
            "relay.secret_key is set to another key and wins over the restored relay.key: the relay will \
             not be the same identity (NIP-11 self) until relay.secret_key is removed"
        );
    }
    let (store_dir, tuning) = (dir.clone(), config.storage.tuning());
    let store = tokio::task::spawn_blocking(move || Store::open_tuned(&store_dir, tuning))
        .await
        .map_err(|e| StoreError::Task(e.to_string()))??;
    let restored = fill(&store, backup, keys).await;
    let closed = store.close(config.storage.cache_capacity_mb).await;
    let mut restored = restored?;
    closed?;
    let mut blobs = 0;
    if backup.dir.join(MEDIA).join(super::media::RECORDS).exists() && backup.manifest.blobs > 0 {
        let app = open(config, false)?;
        let media = super::media::import(&app, &backup.dir.join(MEDIA)).await;
        let held = app.blobs.records().hashes().map(|h| h.len() as u64);
        AppState::close(app).await?;
        let media = media?;
        if media.invalid > 0 {
            return Err(OfflineError::Unusable(format!(
                "{} of the backup's blobs were refused (each named above: a file whose bytes are not the \
                 hash it is named by, or a record naming no blob); the backup was changed or damaged: \
                 restore an intact copy",
                media.invalid
            )));
        }
        restored.uploads = media.uploads;
        blobs = held.map_err(OfflineError::from)?;
    }
    let m = &backup.manifest;
    let counted = [
        ("events", m.events, restored.events),
        ("settings documents", m.settings, restored.settings),
        ("audit entries", m.audit, restored.audit),
        ("blobs", m.blobs, blobs),
    ];
    if let Some((what, said, found)) = counted.into_iter().find(|(_, said, found)| said != found) {
        return Err(OfflineError::Unusable(format!(
            "the manifest says {said} {what}, the folder holds {found}: the backup is incomplete or was \
             changed; restore an intact copy"
        )));
    }
    Ok(restored)
}

/// A relay key that others could read was not written by `hearth backup` (it writes 0600):
/// refused, so that a copied or tampered folder is not taken as the community's identity.
fn key_is_private(path: &Path) -> Result<(), OfflineError> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(OfflineError::Unusable(format!(
            "{}: the relay's secret key is readable by others (mode {mode:o}); `hearth backup` writes it \
             0600. If this folder is yours, `chmod 600` it and restore again",
            path.display()
        )));
    }
    Ok(())
}

/// The events, settings and audit log of `backup` into `store`.
async fn fill(store: &Store, backup: &Reader, keys: crate::protocol::Keys) -> Result<Restored, OfflineError> {
    if !store.is_empty() {
        return Err(OfflineError::Unusable(format!(
            "the {} store already holds {} events: restore into an empty one",
            store.backend_name(),
            store.len()
        )));
    }
    let mut restored =
        Restored { relay_pubkey: keys.public_key().to_hex(), events: 0, stored: 0, settings: 0, audit: 0, uploads: 0 };
    for (n, line) in backup.events()?.lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        restored.events += 1;
        let bad = |e: String| OfflineError::Unusable(format!("{}: line {}: {e}", crate::backup::folder::EVENTS, n + 1));
        let event = Event::from_json(&line).map_err(|e| bad(e.to_string()))?;
        let verified = verify(event).map_err(|e| bad(e.to_string()))?;
        if matches!(store.put(verified).await?, PutOutcome::Stored(_)) {
            restored.stored += 1;
        }
    }
    for (name, value) in backup.settings()? {
        store.save_setting(&name, value).await?;
        restored.settings += 1;
    }
    for entry in backup.audit()? {
        store.append_audit(entry).await?;
        restored.audit += 1;
    }
    Ok(restored)
}
