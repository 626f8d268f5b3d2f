//! The fuzz entry points of the media server's parsers: a Blossom `Authorization` header, a
//! `Range` header, and a picture whose metadata is taken out.

use crate::media::download::range as parse_range;
use crate::media::strip::{PNG_METADATA, Picture, jpeg_keeps, strip as strip_picture};
use crate::protocol::Timestamp;
use crate::protocol::blossom::{self, BlobHash, Verb};

use super::input::text;

/// A Blossom `Authorization` header (either base64 alphabet, padded or not, the JSON and its
/// tags), checked for every verb at a fixed time and host: refused or taken, never a panic; one
/// taken for `upload` is taken for `media` too, and names the blobs it covers.
pub fn blossom_auth(data: &[u8]) {
    let Some(header) = text(data) else { return };
    let now = Timestamp(1_700_000_000);
    for verb in [Verb::Get, Verb::Upload, Verb::Media, Verb::List, Verb::Delete] {
        let Ok(auth) = blossom::check(header, verb, now, "relay.example") else { continue };
        let _ = auth.covers(&BlobHash([0; 32]), verb == Verb::Delete);
        if verb == Verb::Upload {
            assert!(blossom::check(header, Verb::Media, now, "relay.example").is_ok(), "upload but not media");
        }
    }
}

/// A `Range` header against a blob of the size the first two bytes give: a range taken lies
/// inside the blob, first byte first.
pub fn range(data: &[u8]) {
    let [a, b, rest @ ..] = data else { return };
    let size = u64::from(u16::from_le_bytes([*a, *b]));
    let Some(header) = text(rest) else { return };
    if let Ok(Some((start, end))) = parse_range(Some(header), size) {
        assert!(start <= end && end < size, "{header:?} of {size} bytes gave {start}-{end}");
    }
}

/// A picture (the first byte picks JPEG, PNG, WebP or HEIC) stripped of its metadata: refused or
/// stripped, never a panic of ours. What comes out of JPEG, PNG and WebP reads back and carries
/// no metadata segment or chunk (no EXIF, XMP, IPTC, comment or text): the relay's own rule of
/// what stays, held against what img-parts writes back. A panic inside `little_exif`, which
/// `strip` contains and refuses, is let through to that containment rather than to libFuzzer's
/// hook (which aborts on any panic, caught or not).
pub fn strip(data: &[u8]) {
    contain_little_exif();
    let [pick, rest @ ..] = data else { return };
    let picture = [Picture::Jpeg, Picture::Png, Picture::WebP, Picture::Heif][usize::from(pick % 4)];
    let Ok(out) = strip_picture(picture, rest.to_vec()) else { return };
    let bytes = img_parts::Bytes::from(out);
    match picture {
        Picture::Jpeg => {
            let Ok(jpeg) = img_parts::jpeg::Jpeg::from_bytes(bytes) else {
                panic!("a stripped JPEG does not read back")
            };
            for segment in jpeg.segments() {
                let marker = segment.marker();
                assert!(jpeg_keeps(marker, segment.contents()), "segment {marker:#x} survived");
            }
        }
        Picture::Png => {
            let Ok(png) = img_parts::png::Png::from_bytes(bytes) else { panic!("a stripped PNG does not read back") };
            for chunk in png.chunks() {
                let kind = chunk.kind();
                assert!(!PNG_METADATA.contains(&kind), "{kind:?} survived");
            }
        }
        Picture::WebP => {
            let Ok(webp) = img_parts::webp::WebP::from_bytes(bytes) else {
                panic!("a stripped WebP does not read back")
            };
            assert!(!webp.has_chunk(img_parts::webp::CHUNK_EXIF) && !webp.has_chunk(img_parts::webp::CHUNK_XMP));
        }
        Picture::Heif => {}
    }
}

/// Once: panics raised inside `little_exif` go to no hook (the relay's `strip` catches them);
/// every other panic to the hook in place (libFuzzer's, which aborts).
fn contain_little_exif() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if info.location().is_some_and(|at| at.file().contains("/little_exif-")) {
                return;
            }
            previous(info);
        }));
    });
}
