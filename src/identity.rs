//! The relay's own key: what it signs its NIP-43 events with, named by NIP-11 `self`.
//!
//! Owns choosing it: `relay.secret_key` (hex or nsec) when set, else the key kept in the data
//! directory (`relay.key`, hex, readable by its owner only), generated at the first start and
//! read back at every later one, so the relay's identity survives restarts and upgrades. The
//! secret is never logged.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::protocol::Keys;

/// The file in the data directory that keeps a generated key.
pub const KEY_FILE: &str = "relay.key";

/// Why the relay's key could not be had.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// `relay.secret_key` is not a key.
    #[error("relay.secret_key: {0}")]
    Configured(crate::protocol::keys::KeyError),
    /// The kept key file could not be read or written.
    #[error("{}: {source}", path.display())]
    File {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The kept key file holds no key.
    #[error("{}: not a secret key ({source}); remove it to have a new one generated", path.display())]
    Damaged {
        /// The key file.
        path: PathBuf,
        /// Why.
        source: crate::protocol::keys::KeyError,
    },
    /// The operating system gave no randomness for a new key.
    #[error("no randomness for a new relay key: {0}")]
    Random(String),
}

/// The relay's key: `configured` (`relay.secret_key`) when not empty, else the one kept in `dir`
/// (generated and kept there when there is none yet).
pub fn load(configured: &str, dir: &Path) -> Result<Keys, IdentityError> {
    if !configured.trim().is_empty() {
        return Keys::parse(configured.trim()).map_err(IdentityError::Configured);
    }
    let path = dir.join(KEY_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Keys::parse(text.trim()).map_err(|source| IdentityError::Damaged { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => generate(&path),
        Err(source) => Err(IdentityError::File { path, source }),
    }
}

/// A new key, kept at `path` durably before it is used (a crash cannot leave two identities).
fn generate(path: &Path) -> Result<Keys, IdentityError> {
    let keys = loop {
        let mut bytes = [0u8; 32];
        getrandom::fill(&mut bytes).map_err(|e| IdentityError::Random(e.to_string()))?;
        // Out of range only with a chance of about 2^-128.
        if let Ok(keys) = Keys::from_bytes(bytes) {
            break keys;
        }
    };
    keep(path, &keys)?;
    tracing::info!(pubkey = %keys.public_key().to_hex(), file = %path.display(), "generated the relay's own key");
    Ok(keys)
}

/// Keeps `keys` at `path` (hex, readable by its owner only), durably: written beside it, synced,
/// renamed into place, the folder synced.
pub fn keep(path: &Path, keys: &Keys) -> Result<(), IdentityError> {
    let file = |source| IdentityError::File { path: path.to_path_buf(), source };
    let partial = path.with_extension("key.partial");
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut out = options.open(&partial).map_err(file)?;
    out.write_all(keys.secret_hex().as_bytes()).and_then(|()| out.sync_all()).map_err(file)?;
    std::fs::rename(&partial, path).map_err(file)?;
    if let Some(dir) = path.parent() {
        std::fs::File::open(dir).and_then(|d| d.sync_all()).map_err(file)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_key_is_kept_and_read_back_and_a_configured_one_wins() {
        let dir = tempfile::tempdir().unwrap();
        let first = load("", dir.path()).unwrap();
        assert_eq!(load("", dir.path()).unwrap().public_key(), first.public_key());
        let kept = std::fs::metadata(dir.path().join(KEY_FILE)).unwrap();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&kept.permissions()) & 0o777, 0o600);
        let configured = Keys::from_bytes([9; 32]).unwrap();
        assert_eq!(load(&configured.secret_hex(), dir.path()).unwrap().public_key(), configured.public_key());
        assert!(matches!(load("nope", dir.path()), Err(IdentityError::Configured(_))));
        std::fs::write(dir.path().join(KEY_FILE), "garbage").unwrap();
        assert!(matches!(load("", dir.path()), Err(IdentityError::Damaged { .. })));
    }
}
