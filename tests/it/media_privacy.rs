//! What a picture says of its owner, and a stranger's blob reported: `PUT /media` (BUD-05) takes
//! the place and the camera out of a photo while `/upload` keeps its bytes exact, and a BUD-09
//! `PUT /report` lands in the admins' review queue, where a decision deletes the blob and bans
//! its uploader.

use hearth::protocol::blossom::Verb;
use reqwest::{Method, StatusCode};
use serde_json::json;

use crate::common::{http, keys, now, sign};
use crate::media::{auth, call, hash_of, start, upload};

fn photo() -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/media/gps.jpg");
    std::fs::read(path).unwrap()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// What the photo says of where it was taken and with what.
const SECRETS: [&[u8]; 3] = [b"HEARTH-SERIAL-4711", b"HearthCam", b"hearth-secret-place"];

#[tokio::test]
async fn a_photo_sent_to_media_comes_back_without_its_place_and_upload_keeps_it_exact() {
    let relay = start(|_| {}).await;
    let alice = keys(1);
    let original = photo();
    let sha = hash_of(&original);
    // The authorization names the bytes sent, as blossom-client-sdk signs it for /media.
    let headers = |a: &str| {
        [("authorization", a.to_string()), ("content-type", "image/jpeg".into()), ("x-sha-256", sha.to_hex())]
    };
    let a = auth(&alice, Verb::Upload, &[sha]);
    let h = headers(&a);
    let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let head = call(
        &relay,
        Method::HEAD,
        "/media",
        &[("authorization", &a), ("x-content-length", "10"), ("x-content-type", "image/jpeg")],
        None,
    )
    .await;
    assert_eq!(head.status, StatusCode::OK, "{}", head.reason());
    let sent = call(&relay, Method::PUT, "/media", &pairs, Some(original.clone())).await;
    assert_eq!(sent.status, StatusCode::CREATED, "{}", sent.reason());
    let descriptor = sent.json();
    let served_hash = descriptor["sha256"].as_str().unwrap().to_string();
    assert_ne!(served_hash, sha.to_hex(), "the descriptor names the blob as stored, not as sent");
    let got = call(&relay, Method::GET, &format!("/{served_hash}"), &[], None).await;
    assert_eq!(got.status, StatusCode::OK);
    assert_eq!(hash_of(&got.body).to_hex(), served_hash, "the stored hash is the hash of what is served");
    assert_eq!(descriptor["size"], json!(got.body.len()));
    assert_eq!(got.header("content-type"), "image/jpeg");
    for secret in SECRETS {
        assert!(contains(&original, secret));
        assert!(!contains(&got.body, secret), "{} is served", String::from_utf8_lossy(secret));
    }
    // The same photo through /upload is stored byte for byte.
    let exact = upload(&relay, &auth(&alice, Verb::Upload, &[sha]), &original, "image/jpeg").await;
    assert_eq!(exact.status, StatusCode::CREATED, "{}", exact.reason());
    assert_eq!(exact.json()["sha256"], json!(sha.to_hex()));
    let got = call(&relay, Method::GET, &format!("/{}", sha.to_hex()), &[], None).await;
    assert_eq!(got.body, original);
    // The authorization must name the bytes sent: one naming another blob is refused.
    let other = auth(&alice, Verb::Upload, &[hash_of(b"something else")]);
    let h = headers(&other);
    let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let wrong = call(&relay, Method::PUT, "/media", &pairs, Some(original.clone())).await;
    assert_eq!(wrong.status, StatusCode::UNAUTHORIZED, "{}", wrong.reason());
    // A body that is not the picture its type says is refused with what to do instead.
    let fake = b"<html><script>1</script></html>".to_vec();
    let fake_sha = hash_of(&fake).to_hex();
    let a = auth(&alice, Verb::Upload, &[]);
    let refused = call(
        &relay,
        Method::PUT,
        "/media",
        &[("authorization", &a), ("content-type", "image/png"), ("x-sha-256", &fake_sha)],
        Some(fake),
    )
    .await;
    assert_eq!(
        (refused.status, refused.reason()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid: the body is not a PNG picture this relay can read; upload it with that type, or through /upload unchanged"
        )
    );
    assert_eq!(call(&relay, Method::GET, &format!("/{fake_sha}"), &[], None).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn with_stripping_off_media_stores_what_it_is_sent() {
    let relay = start(|c| c.media.strip_metadata = false).await;
    let original = photo();
    let sha = hash_of(&original);
    let a = auth(&keys(1), Verb::Upload, &[sha]);
    let sent = call(
        &relay,
        Method::PUT,
        "/media",
        &[("authorization", &a), ("content-type", "image/jpeg"), ("x-sha-256", &sha.to_hex())],
        Some(original.clone()),
    )
    .await;
    assert_eq!(sent.status, StatusCode::CREATED, "{}", sent.reason());
    assert_eq!(sent.json()["sha256"], json!(sha.to_hex()));
}

#[tokio::test]
async fn a_reported_blob_reaches_the_queue_and_the_admins_decision_deletes_it_and_bans_its_uploader() {
    let token = "t";
    let relay = start(|c| c.admin.token = token.into()).await;
    let (mallory, alice) = (keys(2), keys(1));
    let blob = b"<svg>not nice</svg>".to_vec();
    let sha = hash_of(&blob).to_hex();
    let up = upload(&relay, &auth(&mallory, Verb::Upload, &[]), &blob, "image/svg+xml").await;
    assert_eq!(up.status, StatusCode::CREATED);
    let preflight = call(&relay, Method::OPTIONS, "/report", &[], None).await;
    assert!(preflight.header("access-control-allow-methods").contains("PUT"), "{:?}", preflight.headers);
    // What a report must be, each refusal saying it.
    let shape = "send a signed kind 1984 event (NIP-56) with an [\"x\", \"<sha256>\", \"<report type>\"] tag per blob";
    let note = sign(&alice, now(), 1, &[&["x", &sha]], "");
    let unknown = "ab".repeat(32);
    let nothing = sign(&alice, now(), 1984, &[&["p", &mallory.public_key().to_hex(), "spam"]], "");
    let elsewhere = sign(&alice, now(), 1984, &[&["x", &unknown, "illegal"]], "");
    for (body, status, reason) in [
        (b"{".to_vec(), StatusCode::BAD_REQUEST, None),
        (
            note.to_json().unwrap().into_bytes(),
            StatusCode::BAD_REQUEST,
            Some(format!("invalid: kind 1 is not a report: {shape}")),
        ),
        (
            nothing.to_json().unwrap().into_bytes(),
            StatusCode::BAD_REQUEST,
            Some(format!("invalid: the report names no blob: {shape}")),
        ),
        (
            elsewhere.to_json().unwrap().into_bytes(),
            StatusCode::NOT_FOUND,
            Some(format!("no blob {unknown} is held here")),
        ),
    ] {
        let answer = call(&relay, Method::PUT, "/report", &[], Some(body)).await;
        assert_eq!(answer.status, status, "{}", answer.reason());
        if let Some(reason) = reason {
            assert_eq!(answer.reason(), reason);
        }
    }
    let report = sign(&alice, now(), 1984, &[&["x", &sha, "malware"]], "a script in a picture");
    let answer = call(&relay, Method::PUT, "/report", &[], Some(report.to_json().unwrap().into_bytes())).await;
    assert_eq!((answer.status, answer.json()), (StatusCode::OK, json!({"message": "reported", "blobs": 1})));
    let (status, queue) = http(&relay, Method::GET, "/admin/v1/reports", None, Some(token), None).await;
    assert_eq!(status, StatusCode::OK);
    let entry = &queue["reports"][0];
    assert_eq!(queue["total"], json!(1), "{queue}");
    assert_eq!(
        (&entry["target"], &entry["type"], &entry["types"], &entry["comments"]),
        (&json!(sha), &json!("blob"), &json!({"malware": 1}), &json!(["a script in a picture"]))
    );
    assert_eq!(entry["blob"]["type"], json!("image/svg+xml"));
    assert_eq!(entry["blob"]["size"], json!(blob.len()));
    assert_eq!(entry["author"]["pubkey"], json!(mallory.public_key().to_hex()));
    // The admin bans the uploader's writes: the blob is gone and the key uploads no more.
    let (status, done) = http(
        &relay,
        Method::POST,
        &format!("/admin/v1/reports/{sha}/ban"),
        Some(json!({"reach": "writes"})),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{done}");
    assert_eq!(done["banned"], json!(mallory.public_key().to_hex()));
    assert_eq!(call(&relay, Method::GET, &format!("/{sha}"), &[], None).await.status, StatusCode::NOT_FOUND);
    let again = upload(&relay, &auth(&mallory, Verb::Upload, &[]), b"more", "image/png").await;
    assert_eq!(
        (again.status, again.reason()),
        (StatusCode::FORBIDDEN, "blocked: this pubkey is banned from this relay")
    );
    let (_, queue) = http(&relay, Method::GET, "/admin/v1/reports", None, Some(token), None).await;
    assert_eq!(queue["total"], json!(0), "{queue}");
    let (_, log) = http(&relay, Method::GET, "/admin/v1/audit", None, Some(token), None).await;
    assert!(log.to_string().contains("report.ban"), "{log}");
    // A report of a note that also names a blob held elsewhere is about the note.
    let mut ws = relay.connect().await;
    let note = sign(&alice, now(), 1, &[], "look at my picture elsewhere");
    crate::common::assert_ok(&ws.publish(&note).await, &note.id.to_hex(), true, "");
    let both = sign(&keys(3), now(), 1984, &[&["e", &note.id.to_hex(), "spam"], &["x", &unknown]], "");
    crate::common::assert_ok(&ws.publish(&both).await, &both.id.to_hex(), true, "");
    let (_, queue) = http(&relay, Method::GET, "/admin/v1/reports", None, Some(token), None).await;
    assert_eq!(
        (&queue["total"], &queue["reports"][0]["type"], &queue["reports"][0]["target"]),
        (&json!(1), &json!("event"), &json!(note.id.to_hex())),
        "{queue}"
    );
}
