//! `[media]`: the Blossom server inside hearth (BUD-01/02/04/06/11/12).
//!
//! Owns [`MediaConfig`], [`Uploaders`] (whose keys may upload), [`MediaStore`] (where the
//! bytes live) and [`Secret`], a credential that no debug print or log line shows.

use serde::{Deserialize, Serialize};

/// `[media]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MediaConfig {
    /// Blobs are served and taken at the relay's HTTP address (`/upload`, `/<sha256>`, …).
    pub enabled: bool,
    /// The largest blob taken, in bytes (413 beyond).
    pub max_blob_bytes: u64,
    /// All blobs together, in bytes; past it an upload is answered 507.
    pub max_total_bytes: u64,
    /// MIME types taken (`image/*` covers a family); empty = any.
    pub allowed_types: Vec<String>,
    /// `PUT /media` (BUD-05) takes location, camera and other metadata (EXIF, XMP, IPTC,
    /// comments) out of JPEG, PNG, WebP and HEIC pictures before they are stored; `/upload`
    /// always keeps the bytes it is sent.
    pub strip_metadata: bool,
    /// Whose keys may upload; unset: `members` in the members modes, `anyone` in `public`.
    pub upload: Option<Uploaders>,
    /// Where the blobs' bytes live: `disk` (`<data_dir>/media`) or `s3` (a bucket every node
    /// shares). Start-up only.
    pub store: MediaStore,
    /// With `store = "s3"`: the service's URL (`https://s3.example.org`, `http://127.0.0.1:3900`).
    pub s3_endpoint: String,
    /// With `store = "s3"`: the bucket (made beforehand; hearth never creates or empties one).
    pub s3_bucket: String,
    /// With `store = "s3"`: the region the service signs for (Garage's `s3_region`).
    pub s3_region: String,
    /// With `store = "s3"`: the access key's id.
    pub s3_access_key_id: String,
    /// With `store = "s3"`: the access key's secret (never logged, never shown by the admin API).
    pub s3_secret_access_key: Secret,
}

/// `media.store`: where the blobs' bytes live.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MediaStore {
    /// Files under `<data_dir>/media`, this node's own.
    #[default]
    Disk,
    /// Objects in an S3-compatible bucket, shared by every node that names it.
    S3,
}

impl MediaStore {
    /// Its name in `relay.toml` and the admin API.
    pub fn as_str(self) -> &'static str {
        match self {
            MediaStore::Disk => "disk",
            MediaStore::S3 => "s3",
        }
    }
}

/// A credential read from the configuration: its debug form says only whether it is set.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(pub String);

impl Secret {
    /// The value itself, for the one place that signs with it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_empty() { "<unset>" } else { "<set>" })
    }
}

impl Default for MediaConfig {
    fn default() -> Self {
        MediaConfig {
            enabled: true,
            max_blob_bytes: 100 << 20,
            max_total_bytes: 10 << 30,
            allowed_types: Vec::new(),
            strip_metadata: true,
            upload: None,
            store: MediaStore::Disk,
            s3_endpoint: String::new(),
            s3_bucket: String::new(),
            s3_region: String::new(),
            s3_access_key_id: String::new(),
            s3_secret_access_key: Secret::default(),
        }
    }
}

impl MediaConfig {
    /// Whose keys may upload, in a members mode (`members-write`, `members-only`) or not.
    pub fn uploaders(&self, members_mode: bool) -> Uploaders {
        self.upload.unwrap_or(if members_mode { Uploaders::Members } else { Uploaders::Anyone })
    }

    /// With `store = "s3"`, the first key that is missing or malformed, and what to set it to.
    pub fn s3_problem(&self) -> Option<(&'static str, &'static str)> {
        if self.store != MediaStore::S3 {
            return None;
        }
        let endpoint = self.s3_endpoint.trim();
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Some((
                "media.s3_endpoint",
                "media.store is \"s3\": set it to the service's http:// or https:// URL",
            ));
        }
        let missing: [(&'static str, bool, &'static str); 4] = [
            ("media.s3_bucket", self.s3_bucket.trim().is_empty(), "media.store is \"s3\": name the bucket"),
            (
                "media.s3_region",
                self.s3_region.trim().is_empty(),
                "media.store is \"s3\": set the region the service signs for (Garage: its s3_region)",
            ),
            (
                "media.s3_access_key_id",
                self.s3_access_key_id.trim().is_empty(),
                "media.store is \"s3\": set the access key's id",
            ),
            (
                "media.s3_secret_access_key",
                self.s3_secret_access_key.0.is_empty(),
                "media.store is \"s3\": set the access key's secret",
            ),
        ];
        missing.into_iter().find(|(_, empty, _)| *empty).map(|(key, _, problem)| (key, problem))
    }

    /// Whether `media_type` (parameters left off) is taken.
    pub fn allows_type(&self, media_type: &str) -> bool {
        let t = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        self.allowed_types.is_empty()
            || self.allowed_types.iter().any(|a| {
                let a = a.trim().to_ascii_lowercase();
                match a.strip_suffix("/*") {
                    Some(family) => t.split('/').next() == Some(family),
                    None => a == t,
                }
            })
    }
}

/// `media.upload`: whose keys may upload (always with a valid authorization).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Uploaders {
    /// The relay's members (and its admins).
    Members,
    /// Any key.
    Anyone,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_match_exactly_or_by_family() {
        let c = MediaConfig { allowed_types: vec!["image/*".into(), "audio/ogg".into()], ..MediaConfig::default() };
        assert!(c.allows_type("image/png"));
        assert!(c.allows_type("Audio/OGG; codecs=opus"));
        assert!(!c.allows_type("audio/mpeg"));
        assert!(!c.allows_type("imagex/png"));
        assert!(MediaConfig::default().allows_type("application/x-anything"));
    }

    #[test]
    fn s3_needs_every_key_and_never_shows_its_secret() {
        let mut c = MediaConfig { store: MediaStore::S3, ..MediaConfig::default() };
        assert_eq!(c.s3_problem().map(|p| p.0), Some("media.s3_endpoint"));
        c.s3_endpoint = "http://127.0.0.1:3900".into();
        assert_eq!(c.s3_problem().map(|p| p.0), Some("media.s3_bucket"));
        c.s3_bucket = "hearth".into();
        c.s3_region = "garage".into();
        c.s3_access_key_id = "GK1".into();
        assert_eq!(c.s3_problem().map(|p| p.0), Some("media.s3_secret_access_key"));
        c.s3_secret_access_key = Secret("very-secret-value".into());
        assert_eq!(c.s3_problem(), None);
        let shown = format!("{c:?}");
        assert!(!shown.contains("very-secret-value") && shown.contains("<set>"), "{shown}");
        assert_eq!(MediaConfig::default().s3_problem(), None);
    }

    #[test]
    fn uploaders_follow_the_mode_unless_set() {
        let c = MediaConfig::default();
        assert_eq!(c.uploaders(false), Uploaders::Anyone);
        assert_eq!(c.uploaders(true), Uploaders::Members);
        let c = MediaConfig { upload: Some(Uploaders::Anyone), ..c };
        assert_eq!(c.uploaders(true), Uploaders::Anyone);
    }
}
