//! `[media]`: the Blossom server inside hearth (BUD-01/02/04/06/11/12).
//!
//! Owns [`MediaConfig`] and [`Uploaders`], whose keys may upload.

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
        }
    }
}

impl MediaConfig {
    /// Whose keys may upload, in a members mode (`members-write`, `members-only`) or not.
    pub fn uploaders(&self, members_mode: bool) -> Uploaders {
        self.upload.unwrap_or(if members_mode { Uploaders::Members } else { Uploaders::Anyone })
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
    fn uploaders_follow_the_mode_unless_set() {
        let c = MediaConfig::default();
        assert_eq!(c.uploaders(false), Uploaders::Anyone);
        assert_eq!(c.uploaders(true), Uploaders::Members);
        let c = MediaConfig { upload: Some(Uploaders::Anyone), ..c };
        assert_eq!(c.uploaders(true), Uploaders::Anyone);
    }
}
