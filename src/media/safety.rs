//! What a stranger's blob may do when it is opened in the relay's origin: nothing.
//!
//! Owns the headers every blob answer carries (`GET`/`HEAD`, a `Range` too) so that no upload
//! runs as the relay's own page, whose origin the admin page shares: `X-Content-Type-Options:
//! nosniff`, a Content-Security-Policy that forbids script, and for every type that is not plainly
//! a picture, a sound, a video or a PDF, `Content-Disposition: attachment` (the browser saves it
//! instead of showing it). The stored type is kept as uploaded, so a client's `<img>`, `<audio>`
//! and `<video>` (which ignore the disposition) go on showing what they showed.

use warp::http::HeaderValue;
use warp::http::header::{CONTENT_DISPOSITION, CONTENT_SECURITY_POLICY, HeaderMap, X_CONTENT_TYPE_OPTIONS};

/// The policy of a blob shown in a browser: its own bytes as media, no script, no forms, no
/// plugin, and a sandbox (an opaque origin) around whatever a document would do.
pub const SANDBOXED: &str =
    "default-src 'none'; img-src 'self' data:; media-src 'self'; style-src 'unsafe-inline'; sandbox";

/// A PDF's policy: as [`SANDBOXED`], but without `sandbox` and with `object-src 'self'`, which
/// Chromium's viewer needs to show the document (its script runs in the viewer, never here).
pub const PDF: &str =
    "default-src 'none'; img-src 'self' data:; media-src 'self'; style-src 'unsafe-inline'; object-src 'self'";

/// True when a blob of `media_type` is shown where it is opened: pictures (not SVG, a document
/// that may carry script), sounds, videos and PDFs. Everything else is an attachment.
pub fn shown_inline(media_type: &str) -> bool {
    let essence = media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    match essence.split_once('/') {
        Some(("image", sub)) => !sub.starts_with("svg"),
        Some(("audio" | "video", _)) => true,
        _ => essence == "application/pdf",
    }
}

/// Sets the headers that keep a blob of `media_type` from acting in the relay's origin.
pub fn protect(headers: &mut HeaderMap, media_type: &str) {
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    let pdf = media_type.split(';').next().is_some_and(|t| t.trim().eq_ignore_ascii_case("application/pdf"));
    headers.insert(CONTENT_SECURITY_POLICY, HeaderValue::from_static(if pdf { PDF } else { SANDBOXED }));
    let disposition = if shown_inline(media_type) { "inline" } else { "attachment" };
    headers.insert(CONTENT_DISPOSITION, HeaderValue::from_static(disposition));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_media_and_pdfs_are_shown_inline() {
        for shown in ["image/png", "image/jpeg", "IMAGE/WEBP", "audio/ogg", "video/mp4; codecs=avc1", "application/pdf"]
        {
            assert!(shown_inline(shown), "{shown}");
        }
        for saved in [
            "text/html",
            "text/html; charset=utf-8",
            "application/xhtml+xml",
            "image/svg+xml",
            "text/xml",
            "application/xml",
            "text/javascript",
            "application/javascript",
            "text/plain",
            "application/octet-stream",
            "application/zip",
            "",
        ] {
            assert!(!shown_inline(saved), "{saved}");
        }
    }

    #[test]
    fn every_blob_is_nosniff_and_scriptless_and_documents_are_attachments() {
        let mut headers = HeaderMap::new();
        protect(&mut headers, "text/html");
        assert_eq!(headers[X_CONTENT_TYPE_OPTIONS], "nosniff");
        assert_eq!(headers[CONTENT_SECURITY_POLICY], SANDBOXED);
        assert_eq!(headers[CONTENT_DISPOSITION], "attachment");
        let mut headers = HeaderMap::new();
        protect(&mut headers, "image/png");
        assert_eq!(
            (&headers[CONTENT_SECURITY_POLICY], &headers[CONTENT_DISPOSITION]),
            (&HeaderValue::from_static(SANDBOXED), &HeaderValue::from_static("inline"))
        );
        let mut headers = HeaderMap::new();
        protect(&mut headers, "application/pdf");
        assert_eq!(
            (&headers[CONTENT_SECURITY_POLICY], &headers[CONTENT_DISPOSITION]),
            (&HeaderValue::from_static(PDF), &HeaderValue::from_static("inline"))
        );
    }
}
