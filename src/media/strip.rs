//! Taking the place and the camera out of a picture before it is stored (`media.strip_metadata`,
//! `PUT /media` only: `/upload` keeps the bytes exact, since its clients check the hash).
//!
//! Owns [`strip`]: for JPEG, PNG and WebP every metadata segment or chunk is dropped through
//! `img-parts` (EXIF with its GPS and serial numbers, XMP, IPTC, comments, text chunks), the
//! colour profile and the pixels kept byte for byte. A JPEG loses its EXIF orientation too:
//! reading it with `little_exif` let a crafted EXIF block take gigabytes (found by fuzzing), and
//! no other maintained crate here writes it back. HEIC and HEIF go through `little_exif`, which
//! leaves only orientation and resolution in the EXIF item; a panic inside it on a malformed
//! file is a refusal like any unreadable picture. Nothing is decoded or re-encoded: what is not
//! metadata is what was uploaded.

use img_parts::Bytes;
use img_parts::jpeg::{Jpeg, markers};
use img_parts::png::Png;
use img_parts::riff::{RiffChunk, RiffContent};
use img_parts::webp::{CHUNK_ANMF, CHUNK_EXIF, CHUNK_VP8, CHUNK_VP8L, CHUNK_VP8X, CHUNK_XMP, WebP};
use little_exif::filetype::FileExtension;
use little_exif::metadata::Metadata;

/// The VP8X flags that say EXIF and XMP chunks follow.
const VP8X_EXIF_XMP: u8 = 0b0000_1100;
/// PNG's chunks of text and metadata.
pub(crate) const PNG_METADATA: [[u8; 4]; 5] = [*b"eXIf", *b"tEXt", *b"zTXt", *b"iTXt", *b"tIME"];

/// Whether a JPEG segment is one a stripped picture keeps: anything but comments and application
/// segments, of which only JFIF (APP0), Adobe's colour transform (APP14) and the ICC profile
/// (APP2) stay.
pub(crate) fn jpeg_keeps(marker: u8, contents: &[u8]) -> bool {
    let app = (markers::APP0..=markers::APP15).contains(&marker);
    let icc = marker == markers::APP2 && contents.starts_with(b"ICC_PROFILE\0");
    marker != markers::COM && (!app || marker == markers::APP0 || marker == markers::APP14 || icc)
}

/// Why a picture could not be stripped; the upload is refused with it (415).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum StripError {
    /// The bytes are not a picture of the type announced.
    #[error(
        "the body is not a {0} picture this relay can read; upload it with that type, or through /upload unchanged"
    )]
    Unreadable(&'static str),
}

/// The picture formats stripped, by media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Picture {
    /// `image/jpeg`
    Jpeg,
    /// `image/png`
    Png,
    /// `image/webp`
    WebP,
    /// `image/heic`, `image/heif`
    Heif,
}

impl Picture {
    /// The format of `media_type` (parameters left off), when it is one that is stripped.
    pub fn of(media_type: &str) -> Option<Picture> {
        match media_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase().as_str() {
            "image/jpeg" | "image/jpg" | "image/pjpeg" => Some(Picture::Jpeg),
            "image/png" => Some(Picture::Png),
            "image/webp" => Some(Picture::WebP),
            "image/heic" | "image/heif" | "image/heic-sequence" | "image/heif-sequence" => Some(Picture::Heif),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Picture::Jpeg => "JPEG",
            Picture::Png => "PNG",
            Picture::WebP => "WebP",
            Picture::Heif => "HEIC/HEIF",
        }
    }
}

/// `bytes` without their metadata.
pub fn strip(picture: Picture, bytes: Vec<u8>) -> Result<Vec<u8>, StripError> {
    let unreadable = || StripError::Unreadable(picture.name());
    match picture {
        Picture::Jpeg => jpeg(bytes).ok_or_else(unreadable),
        Picture::Png => {
            let mut png = Png::from_bytes(Bytes::from(bytes)).map_err(|_| unreadable())?;
            let has = |kind: &[u8; 4]| png.chunks().iter().any(|c| &c.kind() == kind);
            if !has(b"IHDR") || !has(b"IDAT") {
                return Err(unreadable());
            }
            png.chunks_mut().retain(|c| !PNG_METADATA.contains(&c.kind()));
            Ok(png.encoder().bytes().to_vec())
        }
        Picture::WebP => webp(bytes).ok_or_else(unreadable),
        Picture::Heif => {
            let mut bytes = bytes;
            match contained(|| Metadata::clear_metadata(&mut bytes, FileExtension::HEIF)) {
                Some(Ok(())) => Ok(bytes),
                _ => Err(unreadable()),
            }
        }
    }
}

/// `work` (a call into `little_exif`), or None when it panicked: fuzzing found malformed HEIF
/// files it panics on (an item location of an unknown construction method), and a stranger's
/// bytes must not take the upload down with them.
fn contained<T>(work: impl FnOnce() -> T) -> Option<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(work)).ok()
}

/// Keeps the frame, tables, scans, JFIF, Adobe's colour transform and the ICC profile; drops
/// every other application segment (EXIF and XMP are APP1, IPTC APP13) and comments.
fn jpeg(bytes: Vec<u8>) -> Option<Vec<u8>> {
    let mut jpeg = Jpeg::from_bytes(Bytes::from(bytes)).ok()?;
    // A picture has a frame and a scan; segments alone are not one.
    let has = |marker: u8| jpeg.segments().iter().any(|s| s.marker() == marker);
    let mut frames =
        (markers::SOF0..=markers::SOF15).filter(|m| ![markers::DHT, markers::JPG, markers::DAC].contains(m));
    if !has(markers::SOS) || !frames.any(has) {
        return None;
    }
    jpeg.segments_mut().retain(|s| jpeg_keeps(s.marker(), s.contents()));
    let out = jpeg.encoder().bytes();
    // img-parts writes some malformed files (a scan without its end, found by fuzzing) in a form
    // it cannot read back: what is stored must be a picture.
    Jpeg::from_bytes(out.clone()).ok()?;
    Some(out.to_vec())
}

/// Drops the EXIF and XMP chunks and clears the flags that announced them.
fn webp(bytes: Vec<u8>) -> Option<Vec<u8>> {
    let mut webp = WebP::from_bytes(Bytes::from(bytes)).ok()?;
    if ![CHUNK_VP8, CHUNK_VP8L, CHUNK_ANMF].iter().any(|id| webp.has_chunk(*id)) {
        return None;
    }
    webp.chunks_mut().retain(|c| c.id() != CHUNK_EXIF && c.id() != CHUNK_XMP);
    for chunk in webp.chunks_mut().iter_mut().filter(|c| c.id() == CHUNK_VP8X) {
        if let RiffContent::Data(data) = chunk.content()
            && let Some(flags) = data.first()
        {
            let mut cleared = data.to_vec();
            cleared[0] = flags & !VP8X_EXIF_XMP;
            *chunk = RiffChunk::new(CHUNK_VP8X, RiffContent::Data(Bytes::from(cleared)));
        }
    }
    Some(webp.encoder().bytes().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_types_stripped_are_the_pictures_cameras_write() {
        assert_eq!(Picture::of("image/jpeg"), Some(Picture::Jpeg));
        assert_eq!(Picture::of("IMAGE/PNG; q=1"), Some(Picture::Png));
        assert_eq!(Picture::of("image/webp"), Some(Picture::WebP));
        assert_eq!(Picture::of("image/heic"), Some(Picture::Heif));
        for other in ["image/gif", "video/mp4", "application/octet-stream", ""] {
            assert_eq!(Picture::of(other), None, "{other}");
        }
    }

    /// Pictures a camera would write (made with ImageMagick, cwebp, heif-enc, exiftool and
    /// webpmux): GPS in EXIF, a serial number, a model, an XMP description, orientation 6.
    fn fixture(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/media").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    fn contains(haystack: &[u8], needle: &[u8]) -> bool {
        haystack.windows(needle.len()).any(|w| w == needle)
    }

    /// The EXIF tags `bytes` still carry, by number, read back by little_exif.
    fn exif_tags(bytes: &[u8], as_type: FileExtension) -> Vec<u16> {
        match Metadata::new_from_vec(&bytes.to_vec(), as_type) {
            Ok(m) => m.get_ifds().iter().flat_map(|ifd| ifd.get_tags().iter().map(|t| t.as_u16())).collect(),
            Err(_) => Vec::new(),
        }
    }

    const SECRETS: [&[u8]; 3] = [b"HEARTH-SERIAL-4711", b"HearthCam", b"hearth-secret-place"];
    /// GPSLatitude, in the GPS directory.
    const GPS_LATITUDE: u16 = 0x0002;

    #[test]
    fn a_jpeg_loses_place_camera_and_words_and_keeps_its_pixels() {
        let original = fixture("gps.jpg");
        for secret in SECRETS {
            assert!(contains(&original, secret), "the fixture carries {}", String::from_utf8_lossy(secret));
        }
        assert!(exif_tags(&original, FileExtension::JPEG).contains(&GPS_LATITUDE));
        let stripped = strip(Picture::Jpeg, original.clone()).unwrap();
        for secret in SECRETS {
            assert!(!contains(&stripped, secret), "{} is left", String::from_utf8_lossy(secret));
        }
        assert_eq!(exif_tags(&stripped, FileExtension::JPEG), Vec::<u16>::new());
        let frames = |bytes: &[u8]| {
            let jpeg = Jpeg::from_bytes(Bytes::copy_from_slice(bytes)).unwrap();
            jpeg.segments()
                .iter()
                .filter(|s| !(markers::APP0..=markers::APP15).contains(&s.marker()))
                .map(|s| s.clone().encoder().bytes())
                .collect::<Vec<_>>()
        };
        assert_eq!(frames(&stripped), frames(&original), "tables, frame and scans are untouched");
    }

    #[test]
    fn png_webp_and_heic_lose_their_place_and_camera() {
        for (name, picture, as_type) in [
            ("gps.png", Picture::Png, FileExtension::PNG { as_zTXt_chunk: false }),
            ("gps.webp", Picture::WebP, FileExtension::WEBP),
            ("gps.heic", Picture::Heif, FileExtension::HEIF),
        ] {
            let original = fixture(name);
            assert!(exif_tags(&original, as_type).contains(&GPS_LATITUDE), "{name} carries a place");
            let stripped = strip(picture, original.clone()).unwrap();
            let left = exif_tags(&stripped, as_type);
            assert!(!left.contains(&GPS_LATITUDE), "{name}: {left:x?}");
            assert!(!contains(&stripped, b"HEARTH-SERIAL-4711"), "{name} keeps the serial number");
            assert!(!contains(&stripped, b"HearthCam"), "{name} keeps the camera");
            if picture != Picture::Heif {
                assert!(!contains(&stripped, b"hearth-secret-place"), "{name} keeps its XMP");
            }
            assert!(stripped.len() < original.len(), "{name}");
        }
    }

    #[test]
    fn a_webp_no_longer_announces_the_chunks_it_lost() {
        let stripped = strip(Picture::WebP, fixture("gps.webp")).unwrap();
        let webp = WebP::from_bytes(Bytes::from(stripped)).unwrap();
        let Some(RiffContent::Data(flags)) = webp.chunk_by_id(CHUNK_VP8X).map(|c| c.content()) else {
            panic!("the VP8X chunk is kept")
        };
        assert_eq!(flags[0] & VP8X_EXIF_XMP, 0);
        assert!(!webp.has_chunk(CHUNK_EXIF) && !webp.has_chunk(CHUNK_XMP));
    }

    #[test]
    fn jpegs_that_would_be_stored_unreadable_are_not_pictures() {
        // Found by the `strip` fuzz target: segments without a frame or a scan, and a scan
        // without its end, came out as files nothing reads (kept in fuzz/corpus/strip/).
        for name in ["regression-no-scan", "regression-scan-without-end"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/strip").join(name);
            let data = std::fs::read(&path).unwrap();
            assert_eq!(strip(Picture::Jpeg, data[1..].to_vec()), Err(StripError::Unreadable("JPEG")), "{name}");
        }
    }

    #[test]
    fn heif_files_little_exif_panics_or_overreaches_on_are_refused() {
        // Found by the `strip` fuzz target; the first byte of each picked the format.
        for name in ["regression-heif-construction-method", "regression-heif-huge-box", "regression-heif-4gib-box"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/strip").join(name);
            let data = std::fs::read(&path).unwrap();
            assert_eq!(data[0] % 4, 3, "{name} is fed as HEIF");
            assert_eq!(strip(Picture::Heif, data[1..].to_vec()), Err(StripError::Unreadable("HEIC/HEIF")), "{name}");
        }
    }

    #[test]
    fn bytes_that_are_not_the_picture_announced_are_refused_by_name() {
        for picture in [Picture::Jpeg, Picture::Png, Picture::WebP, Picture::Heif] {
            assert_eq!(
                strip(picture, b"<html><script>alert(1)</script>".to_vec()),
                Err(StripError::Unreadable(picture.name()))
            );
        }
    }
}
