//! The media server (Blossom) over real HTTP: every BUD route with exact statuses, headers and
//! bodies; each refusal with its reason; members, quotas, bans and the storage bound.

use std::time::Duration;

use hearth::config::{AccessMode, Config, Uploaders};
use hearth::protocol::Keys;
use hearth::protocol::blossom::{self, BlobHash, Verb};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::common::{STEP, TestRelay, generous, keys, now, request};

pub(crate) fn hash_of(bytes: &[u8]) -> BlobHash {
    BlobHash(Sha256::digest(bytes).into())
}

/// A kind 24242 authorization header for `verb` naming `blobs`, valid for an hour; each one a
/// new event (two signed in one second would otherwise be the same event, and a replay).
pub(crate) fn auth(k: &Keys, verb: Verb, blobs: &[BlobHash]) -> String {
    static FRESH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let fresh = FRESH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    blossom::header(k, verb, blobs, hearth::protocol::Timestamp(now()), now() + 3600 + fresh)
}

/// What a media call answered.
pub(crate) struct Answer {
    pub(crate) status: StatusCode,
    pub(crate) headers: reqwest::header::HeaderMap,
    pub(crate) body: Vec<u8>,
}

impl Answer {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {:?}", String::from_utf8_lossy(&self.body)))
    }
    pub(crate) fn header(&self, name: &str) -> &str {
        self.headers.get(name).map(|v| v.to_str().unwrap()).unwrap_or("")
    }
    pub(crate) fn reason(&self) -> &str {
        self.header("x-reason")
    }
}

pub(crate) async fn call(
    relay: &TestRelay,
    method: Method,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Answer {
    let (status, headers, body) = request(&relay.http_url(path), method, headers, body).await;
    Answer { status, headers, body }
}

pub(crate) async fn upload(relay: &TestRelay, auth_header: &str, bytes: &[u8], media_type: &str) -> Answer {
    let sha = hash_of(bytes).to_hex();
    let headers = [("authorization", auth_header), ("content-type", media_type), ("x-sha-256", sha.as_str())];
    call(relay, Method::PUT, "/upload", &headers, Some(bytes.to_vec())).await
}

pub(crate) async fn start(tweak: impl FnOnce(&mut Config)) -> TestRelay {
    TestRelay::start(|c| {
        generous(c);
        tweak(c);
    })
    .await
}

#[tokio::test]
async fn a_blob_is_uploaded_served_ranged_listed_and_deleted_by_its_owner() {
    let relay = start(|_| {}).await;
    let (alice, bob) = (keys(1), keys(2));
    let bytes = b"\x89PNG not really a picture, but bytes all the same".to_vec();
    let hash = hash_of(&bytes);
    let sha = hash.to_hex();
    let t0 = now();
    let put = upload(&relay, &auth(&alice, Verb::Upload, &[hash]), &bytes, "image/png").await;
    assert_eq!(put.status, StatusCode::CREATED, "{}", put.reason());
    let descriptor = put.json();
    let uploaded = descriptor["uploaded"].as_u64().unwrap();
    assert!((t0..=now()).contains(&uploaded));
    let url = relay.http_url(&format!("/{sha}.png"));
    assert_eq!(
        descriptor,
        json!({"url": url, "sha256": sha, "size": bytes.len(), "type": "image/png", "uploaded": uploaded})
    );
    assert_eq!(put.header("access-control-allow-origin"), "*");
    // The same bytes again from the same key: 200 and the same descriptor.
    let again = upload(&relay, &auth(&alice, Verb::Upload, &[hash]), &bytes, "image/png").await;
    assert_eq!((again.status, again.json()), (StatusCode::OK, descriptor.clone()));
    // Served whole, with and without an extension, byte for byte, with its type.
    for path in [format!("/{sha}"), format!("/{sha}.png"), format!("/{sha}.bin")] {
        let got = call(&relay, Method::GET, &path, &[], None).await;
        assert_eq!((got.status, got.body.as_slice()), (StatusCode::OK, bytes.as_slice()), "{path}");
        assert_eq!((got.header("content-type"), got.header("accept-ranges")), ("image/png", "bytes"));
        assert_eq!(got.header("access-control-allow-origin"), "*");
    }
    let head = call(&relay, Method::HEAD, &format!("/{sha}"), &[], None).await;
    assert_eq!((head.status, head.body.len()), (StatusCode::OK, 0));
    assert_eq!(head.header("content-length"), bytes.len().to_string());
    // Ranges: a middle, a tail, a suffix; past the end is 416 with the size.
    let middle = call(&relay, Method::GET, &format!("/{sha}"), &[("range", "bytes=2-5")], None).await;
    assert_eq!((middle.status, middle.body.as_slice()), (StatusCode::PARTIAL_CONTENT, &bytes[2..=5]));
    assert_eq!(middle.header("content-range"), format!("bytes 2-5/{}", bytes.len()));
    let suffix = call(&relay, Method::GET, &format!("/{sha}"), &[("range", "bytes=-4")], None).await;
    assert_eq!(suffix.body.as_slice(), &bytes[bytes.len() - 4..]);
    let past = call(&relay, Method::GET, &format!("/{sha}"), &[("range", "bytes=1000-")], None).await;
    assert_eq!(
        (past.status, past.header("content-range")),
        (StatusCode::RANGE_NOT_SATISFIABLE, format!("bytes */{}", bytes.len()).as_str())
    );
    // Listed for its owner, not for anyone else.
    let list = call(&relay, Method::GET, &format!("/list/{}", alice.public_key().to_hex()), &[], None).await;
    assert_eq!((list.status, list.json()), (StatusCode::OK, json!([descriptor])));
    let none = call(&relay, Method::GET, &format!("/list/{}", bob.public_key().to_hex()), &[], None).await;
    assert_eq!(none.json(), json!([]));
    // Bob may not delete it; Alice may, and then it is gone from the disk too.
    let path = relay.data_dir().join("media").join(&sha[..2]).join(&sha);
    assert!(path.exists());
    let theirs = call(
        &relay,
        Method::DELETE,
        &format!("/{sha}"),
        &[("authorization", &auth(&bob, Verb::Delete, &[hash]))],
        None,
    )
    .await;
    assert_eq!(
        (theirs.status, theirs.reason()),
        (StatusCode::FORBIDDEN, "restricted: only a key that uploaded this blob may delete it")
    );
    let mine = call(
        &relay,
        Method::DELETE,
        &format!("/{sha}"),
        &[("authorization", &auth(&alice, Verb::Delete, &[hash]))],
        None,
    )
    .await;
    assert_eq!(mine.status, StatusCode::OK, "{}", mine.reason());
    let gone = call(&relay, Method::GET, &format!("/{sha}"), &[], None).await;
    assert_eq!(
        (gone.status, gone.reason(), gone.json()),
        (StatusCode::NOT_FOUND, "blob not found", json!({"message": "blob not found"}))
    );
    assert!(!path.exists());
}

#[tokio::test]
async fn a_blob_two_keys_uploaded_stays_until_both_delete_it() {
    let relay = start(|_| {}).await;
    let (alice, bob) = (keys(1), keys(2));
    let bytes = b"shared".to_vec();
    let hash = hash_of(&bytes);
    assert_eq!(
        upload(&relay, &auth(&alice, Verb::Upload, &[hash]), &bytes, "text/plain").await.status,
        StatusCode::CREATED
    );
    assert_eq!(upload(&relay, &auth(&bob, Verb::Upload, &[hash]), &bytes, "text/plain").await.status, StatusCode::OK);
    let del = |k: &Keys| auth(k, Verb::Delete, &[hash]);
    let path = format!("/{hash}");
    assert_eq!(
        call(&relay, Method::DELETE, &path, &[("authorization", &del(&alice))], None).await.status,
        StatusCode::OK
    );
    assert_eq!(call(&relay, Method::GET, &path, &[], None).await.body, bytes);
    assert_eq!(
        call(&relay, Method::DELETE, &path, &[("authorization", &del(&bob))], None).await.status,
        StatusCode::OK
    );
    assert_eq!(call(&relay, Method::GET, &path, &[], None).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn cors_preflight_and_every_answer_carry_blossoms_headers() {
    let relay = start(|_| {}).await;
    for path in
        ["/upload".to_string(), "/mirror".into(), format!("/{}", "ab".repeat(32)), format!("/list/{}", "ab".repeat(32))]
    {
        let pre = call(
            &relay,
            Method::OPTIONS,
            &path,
            &[("origin", "https://app.example"), ("access-control-request-method", "PUT")],
            None,
        )
        .await;
        assert_eq!(pre.status, StatusCode::NO_CONTENT, "{path}");
        assert_eq!(pre.header("access-control-allow-origin"), "*");
        assert_eq!(pre.header("access-control-allow-methods"), "GET, HEAD, PUT, DELETE");
        assert_eq!(pre.header("access-control-allow-headers"), "Authorization, *");
    }
    let refused = call(&relay, Method::PUT, "/upload", &[], Some(b"x".to_vec())).await;
    assert_eq!(refused.header("access-control-allow-origin"), "*");
    assert_eq!(refused.header("access-control-expose-headers"), "*");
    let wrong = call(&relay, Method::POST, "/upload", &[], None).await;
    assert_eq!((wrong.status, wrong.header("allow")), (StatusCode::METHOD_NOT_ALLOWED, "PUT, HEAD, OPTIONS"));
}

#[tokio::test]
async fn each_refused_upload_says_why() {
    let relay = start(|c| {
        c.media.max_blob_bytes = 64;
        c.media.allowed_types = vec!["image/*".into(), "text/plain".into()];
    })
    .await;
    let k = keys(1);
    let bytes = b"hello".to_vec();
    let hash = hash_of(&bytes);
    // No authorization.
    let none = call(&relay, Method::PUT, "/upload", &[("content-type", "text/plain")], Some(bytes.clone())).await;
    assert_eq!(
        (none.status, none.reason()),
        (
            StatusCode::UNAUTHORIZED,
            "auth-required: sign a kind 24242 authorization event (t = upload) and send it as `Authorization: Nostr <base64>`"
        )
    );
    // A hash announced that the bytes do not have.
    let other = hash_of(b"other").to_hex();
    let h = auth(&k, Verb::Upload, &[]);
    let mismatch = call(
        &relay,
        Method::PUT,
        "/upload",
        &[("authorization", &h), ("content-type", "text/plain"), ("x-sha-256", &other)],
        Some(bytes.clone()),
    )
    .await;
    assert_eq!(mismatch.status, StatusCode::CONFLICT);
    assert_eq!(mismatch.reason(), format!("invalid: the blob's sha256 is {hash}, not the {other} announced"));
    // Too large: refused on its Content-Length, before the body.
    let big = vec![7u8; 65];
    let large = upload(&relay, &auth(&k, Verb::Upload, &[]), &big, "text/plain").await;
    assert_eq!(
        (large.status, large.reason()),
        (StatusCode::PAYLOAD_TOO_LARGE, "invalid: blobs here are at most 64 bytes")
    );
    // A type not taken.
    let typed = upload(&relay, &auth(&k, Verb::Upload, &[]), &bytes, "application/zip").await;
    assert_eq!(
        (typed.status, typed.reason()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "invalid: application/zip is not taken here; allowed: image/*, text/plain"
        )
    );
    // Expired, another verb, another blob named, a forged signature.
    let expired = blossom::header(&k, Verb::Upload, &[], hearth::protocol::Timestamp(now() - 100), now() - 1);
    let r = upload(&relay, &expired, &bytes, "text/plain").await;
    assert_eq!(
        (r.status, r.reason()),
        (StatusCode::UNAUTHORIZED, "invalid: the authorization event has expired; sign a new one")
    );
    let r = upload(&relay, &auth(&k, Verb::Delete, &[hash]), &bytes, "text/plain").await;
    assert_eq!(r.reason(), "invalid: the authorization event's t tag must be \"upload\" for this request");
    let r = upload(&relay, &auth(&k, Verb::Upload, &[hash_of(b"other")]), &bytes, "text/plain").await;
    assert_eq!(
        (r.status, r.reason()),
        (StatusCode::UNAUTHORIZED, "invalid: the authorization event's x tags do not name this blob")
    );
    // Used once, refused after.
    let once = auth(&k, Verb::Upload, &[hash]);
    assert_eq!(upload(&relay, &once, &bytes, "text/plain").await.status, StatusCode::CREATED);
    let replayed = upload(&relay, &once, &bytes, "text/plain").await;
    assert_eq!(
        (replayed.status, replayed.reason()),
        (
            StatusCode::UNAUTHORIZED,
            "invalid: this authorization event was already used; sign a new one for each upload or delete"
        )
    );
    // A chunked body (no Content-Length) is refused before it is read.
    let mut tcp = tokio::net::TcpStream::connect(relay.addr).await.unwrap();
    let request = format!(
        "PUT /upload HTTP/1.1\r\nHost: {}\r\nAuthorization: {}\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        relay.addr,
        auth(&k, Verb::Upload, &[])
    );
    tokio::io::AsyncWriteExt::write_all(&mut tcp, request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(STEP, tokio::io::AsyncReadExt::read_to_string(&mut tcp, &mut answer)).await.unwrap().unwrap();
    assert!(answer.starts_with("HTTP/1.1 411"), "{answer}");
    // Nothing of these is stored but the one upload.
    let list = call(&relay, Method::GET, &format!("/list/{}", k.public_key().to_hex()), &[], None).await;
    assert_eq!(list.json().as_array().unwrap().len(), 1);
    let tmp = std::fs::read_dir(relay.data_dir().join("media").join("tmp")).unwrap().count();
    assert_eq!(tmp, 0, "no temporary file is left behind");
}

#[tokio::test]
async fn members_modes_decide_who_uploads_and_who_reads() {
    let (member, stranger) = (keys(1), keys(2));
    let relay = start(|c| {
        c.access.mode = AccessMode::MembersWrite;
        c.auth.members = vec![member.public_key()];
    })
    .await;
    let bytes = b"members only upload".to_vec();
    let hash = hash_of(&bytes);
    let r = upload(&relay, &auth(&stranger, Verb::Upload, &[hash]), &bytes, "text/plain").await;
    assert_eq!(
        (r.status, r.reason()),
        (StatusCode::FORBIDDEN, "restricted: only members of this relay may upload here")
    );
    assert_eq!(
        upload(&relay, &auth(&member, Verb::Upload, &[hash]), &bytes, "text/plain").await.status,
        StatusCode::CREATED
    );
    // members-write: anyone reads.
    assert_eq!(call(&relay, Method::GET, &format!("/{hash}"), &[], None).await.body, bytes);
    let dir = relay.stop().await;

    // The same directory as members-only: reads need a member's `get` authorization.
    let relay = TestRelay::start_in(dir, |c| {
        generous(c);
        c.access.mode = AccessMode::MembersOnly;
        c.auth.members = vec![member.public_key()];
    })
    .await;
    let path = format!("/{hash}");
    let anon = call(&relay, Method::GET, &path, &[], None).await;
    assert_eq!(
        (anon.status, anon.reason()),
        (
            StatusCode::UNAUTHORIZED,
            "auth-required: sign a kind 24242 authorization event (t = get) and send it as `Authorization: Nostr <base64>`"
        )
    );
    let theirs =
        call(&relay, Method::GET, &path, &[("authorization", &auth(&stranger, Verb::Get, &[hash]))], None).await;
    assert_eq!(
        (theirs.status, theirs.reason()),
        (StatusCode::FORBIDDEN, "restricted: this relay's media is for its members only")
    );
    let mine = call(&relay, Method::GET, &path, &[("authorization", &auth(&member, Verb::Get, &[hash]))], None).await;
    assert_eq!((mine.status, mine.body.clone()), (StatusCode::OK, bytes.clone()));
    assert_eq!(mine.header("cache-control"), "private, max-age=3600");
    // A get authorization may be used again until it expires (a page of pictures, one signature).
    let reusable = auth(&member, Verb::Get, &[]);
    for _ in 0..2 {
        assert_eq!(
            call(&relay, Method::GET, &path, &[("authorization", &reusable)], None).await.status,
            StatusCode::OK
        );
    }
    let list = format!("/list/{}", member.public_key().to_hex());
    assert_eq!(call(&relay, Method::GET, &list, &[], None).await.status, StatusCode::UNAUTHORIZED);
    let listed = call(&relay, Method::GET, &list, &[("authorization", &auth(&member, Verb::List, &[]))], None).await;
    assert_eq!(listed.json().as_array().unwrap().len(), 1);
    relay.stop().await;

    // "anyone" lets any key upload even in a members mode.
    let relay = start(|c| {
        c.access.mode = AccessMode::MembersWrite;
        c.auth.members = vec![member.public_key()];
        c.media.upload = Some(Uploaders::Anyone);
    })
    .await;
    assert_eq!(
        upload(&relay, &auth(&stranger, Verb::Upload, &[]), b"mine", "text/plain").await.status,
        StatusCode::CREATED
    );
}

#[tokio::test]
async fn uploads_bill_their_bytes_with_a_true_hint_and_head_upload_says_so_first() {
    let relay = start(|c| {
        c.limits.human.upload_bytes_per_day = 4096;
    })
    .await;
    let k = keys(1);
    let three_kib = vec![1u8; 3 * 1024];
    assert_eq!(
        upload(&relay, &auth(&k, Verb::Upload, &[]), &three_kib, "text/plain").await.status,
        StatusCode::CREATED
    );
    // 1 KiB is left; 2 KiB wait for one more KiB: a day / 4 KiB = 21,600 s.
    let two_kib = vec![2u8; 2 * 1024];
    let h = auth(&k, Verb::Upload, &[]);
    let sha = hash_of(&two_kib).to_hex();
    let size = two_kib.len().to_string();
    let check = [
        ("authorization", h.as_str()),
        ("x-sha-256", sha.as_str()),
        ("x-content-length", size.as_str()),
        ("x-content-type", "text/plain"),
    ];
    let head = call(&relay, Method::HEAD, "/upload", &check, None).await;
    let words = "rate-limited: quota exceeded (upload_bytes); retry in 21600s";
    assert_eq!(
        (head.status, head.reason(), head.header("retry-after")),
        (StatusCode::TOO_MANY_REQUESTS, words, "21600")
    );
    let put = upload(&relay, &auth(&k, Verb::Upload, &[]), &two_kib, "text/plain").await;
    assert_eq!((put.status, put.reason(), put.header("retry-after")), (StatusCode::TOO_MANY_REQUESTS, words, "21600"));
    // A check bills nothing; 1 KiB still fits.
    let one_kib = vec![3u8; 1024];
    let sha1 = hash_of(&one_kib).to_hex();
    let fits = [
        ("authorization", h.as_str()),
        ("x-sha-256", sha1.as_str()),
        ("x-content-length", "1024"),
        ("x-content-type", "text/plain"),
    ];
    assert_eq!(call(&relay, Method::HEAD, "/upload", &fits, None).await.status, StatusCode::OK);
    // The hint is true: a nanosecond short is still refused, at the hint it is taken.
    relay.clock.advance(Duration::from_secs(21_600) - Duration::from_nanos(1));
    assert_eq!(
        upload(&relay, &auth(&k, Verb::Upload, &[]), &two_kib, "text/plain").await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
    relay.clock.advance(Duration::from_nanos(1));
    assert_eq!(upload(&relay, &auth(&k, Verb::Upload, &[]), &two_kib, "text/plain").await.status, StatusCode::CREATED);
    // More than a whole day's quota can never be taken: 413, not a hint that would lie.
    let huge = vec![4u8; 4097];
    let r = upload(&relay, &auth(&k, Verb::Upload, &[]), &huge, "text/plain").await;
    assert_eq!(
        (r.status, r.reason()),
        (StatusCode::PAYLOAD_TOO_LARGE, "invalid: the blob is larger than your daily upload quota of 4096 bytes")
    );
    // The usage report counts bytes.
    let usage = relay.limiter.usage(&hearth::limiter::Principal::Pubkey(k.public_key())).await;
    assert_eq!((usage.limits["upload_bytes"].limit, usage.limits["upload_bytes"].used), (4096, 4096));
}

#[tokio::test]
async fn the_storage_bound_is_507_and_a_ban_takes_uploads_down() {
    let token = "t";
    let relay = start(|c| {
        c.media.max_total_bytes = 100;
        c.admin.token = token.into();
    })
    .await;
    let (alice, mallory) = (keys(1), keys(2));
    assert_eq!(
        upload(&relay, &auth(&alice, Verb::Upload, &[]), &[1u8; 80], "text/plain").await.status,
        StatusCode::CREATED
    );
    let full = upload(&relay, &auth(&alice, Verb::Upload, &[]), &[2u8; 40], "text/plain").await;
    assert_eq!(
        (full.status, full.reason()),
        (StatusCode::INSUFFICIENT_STORAGE, "error: the relay's media storage is full; ask its operator for room")
    );
    let bad = b"spam picture".to_vec();
    let hash = hash_of(&bad);
    assert_eq!(
        upload(&relay, &auth(&mallory, Verb::Upload, &[]), &bad, "text/plain").await.status,
        StatusCode::CREATED
    );
    let (status, _) = crate::common::http(
        &relay,
        Method::POST,
        "/admin/v1/rpc",
        Some(json!({"method": "banpubkey", "params": [mallory.public_key().to_hex(), "spam"]})),
        Some(token),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call(&relay, Method::GET, &format!("/{hash}"), &[], None).await.status, StatusCode::NOT_FOUND);
    let list = call(&relay, Method::GET, &format!("/list/{}", mallory.public_key().to_hex()), &[], None).await;
    assert_eq!(list.json(), json!([]));
    let again = upload(&relay, &auth(&mallory, Verb::Upload, &[]), b"more", "text/plain").await;
    assert_eq!(
        (again.status, again.reason()),
        (StatusCode::FORBIDDEN, "blocked: this pubkey is banned from this relay")
    );
}

#[tokio::test]
async fn a_mirror_fetches_from_another_hearth_and_checks_the_hash() {
    let (a, b) = (start(|_| {}).await, start(|_| {}).await);
    let k = keys(1);
    let bytes = b"mirror me".to_vec();
    let hash = hash_of(&bytes);
    let put = upload(&a, &auth(&k, Verb::Upload, &[hash]), &bytes, "text/plain").await;
    let url = put.json()["url"].as_str().unwrap().to_string();
    let body = json!({"url": url}).to_string().into_bytes();
    let h = auth(&k, Verb::Upload, &[hash]);
    let mirrored =
        call(&b, Method::PUT, "/mirror", &[("authorization", &h), ("content-type", "application/json")], Some(body))
            .await;
    assert_eq!(mirrored.status, StatusCode::CREATED, "{}", mirrored.reason());
    assert_eq!(mirrored.json()["sha256"], json!(hash.to_hex()));
    assert_eq!(mirrored.json()["url"], json!(b.http_url(&format!("/{hash}.txt"))));
    assert_eq!(call(&b, Method::GET, &format!("/{hash}"), &[], None).await.body, bytes);
    // A URL whose bytes are not the blob its auth names: 409, nothing stored.
    let other = hash_of(b"something else");
    let wrong = json!({"url": url}).to_string().into_bytes();
    let h = auth(&k, Verb::Upload, &[other]);
    let r =
        call(&b, Method::PUT, "/mirror", &[("authorization", &h), ("x-sha-256", &other.to_hex())], Some(wrong)).await;
    assert_eq!(r.status, StatusCode::CONFLICT, "{}", r.reason());
    assert_eq!(call(&b, Method::GET, &format!("/{other}"), &[], None).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn blobs_survive_a_restart_and_leftovers_are_cleared_at_start() {
    let relay = start(|_| {}).await;
    let k = keys(1);
    let bytes = b"kept".to_vec();
    let hash = hash_of(&bytes);
    assert_eq!(upload(&relay, &auth(&k, Verb::Upload, &[]), &bytes, "text/plain").await.status, StatusCode::CREATED);
    let media = relay.data_dir().join("media");
    let dir = relay.stop().await;
    // What a kill leaves: a temporary file, and a blob renamed into place but never recorded.
    std::fs::write(media.join("tmp").join("upload-half"), b"half").unwrap();
    let orphan = hash_of(b"orphan").to_hex();
    std::fs::create_dir_all(media.join(&orphan[..2])).unwrap();
    std::fs::write(media.join(&orphan[..2]).join(&orphan), b"orphan").unwrap();
    let relay = TestRelay::start_in(dir, generous).await;
    assert_eq!(call(&relay, Method::GET, &format!("/{hash}"), &[], None).await.body, bytes);
    assert_eq!(call(&relay, Method::GET, &format!("/{orphan}"), &[], None).await.status, StatusCode::NOT_FOUND);
    assert!(!media.join(&orphan[..2]).join(&orphan).exists());
    assert_eq!(std::fs::read_dir(media.join("tmp")).unwrap().count(), 0);
}

#[tokio::test]
async fn operators_list_blobs_with_their_owners_names_and_delete_them_audited() {
    let token = "t";
    let relay = start(|c| c.admin.token = token.into()).await;
    let (alice, bob) = (keys(1), keys(2));
    let mut ws = relay.connect().await;
    let profile =
        crate::common::sign(&alice, now(), 0, &[], r#"{"name":"alice","picture":"https://pics.example/a.png"}"#);
    crate::common::assert_ok(&ws.publish(&profile).await, &profile.id.to_hex(), true, "");
    let one = b"first blob".to_vec();
    let two = b"second, longer blob".to_vec();
    let (h1, h2) = (hash_of(&one), hash_of(&two));
    assert_eq!(upload(&relay, &auth(&alice, Verb::Upload, &[]), &one, "image/png").await.status, StatusCode::CREATED);
    assert_eq!(upload(&relay, &auth(&bob, Verb::Upload, &[]), &one, "image/png").await.status, StatusCode::OK);
    assert_eq!(upload(&relay, &auth(&alice, Verb::Upload, &[]), &two, "text/plain").await.status, StatusCode::CREATED);
    let admin = |m: Method, path: String| {
        let relay = &relay;
        async move { crate::common::http(relay, m, &path, None, Some(token), None).await }
    };
    assert_eq!(
        crate::common::http(&relay, Method::GET, "/admin/v1/media", None, None, None).await.0,
        StatusCode::UNAUTHORIZED
    );
    let (status, doc) = admin(Method::GET, "/admin/v1/media".into()).await;
    assert_eq!(status, StatusCode::OK);
    // A malformed `after` is refused whichever list is asked for (schemathesis found it ignored).
    for query in ["after=nothex", &format!("pubkey={}&after=nothex", alice.public_key().to_hex())] {
        let (status, refused) = admin(Method::GET, format!("/admin/v1/media?{query}")).await;
        assert_eq!(
            (status, refused["error"].clone()),
            (StatusCode::BAD_REQUEST, json!("after must be a blob's sha256"))
        );
    }
    assert_eq!((doc["used_bytes"].as_u64(), doc["next"].clone()), (Some((one.len() + two.len()) as u64), Value::Null));
    let blob_one = doc["blobs"].as_array().unwrap().iter().find(|b| b["sha256"] == json!(h1.to_hex())).unwrap().clone();
    assert_eq!(
        (blob_one["size"].as_u64(), blob_one["path"].clone()),
        (Some(one.len() as u64), json!(format!("/{h1}.png")))
    );
    let owners: Vec<(String, String)> = blob_one["owners"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| (o["pubkey"].as_str().unwrap().to_string(), o["name"].as_str().unwrap().to_string()))
        .collect();
    assert!(owners.contains(&(alice.public_key().to_hex(), "alice".into())));
    assert!(owners.contains(&(bob.public_key().to_hex(), String::new())));
    let alice_usage = doc["by_pubkey"].as_array().unwrap().iter().find(|p| p["name"] == "alice").unwrap().clone();
    assert_eq!(
        (alice_usage["bytes"].as_u64(), alice_usage["blobs"].as_u64()),
        (Some((one.len() + two.len()) as u64), Some(2))
    );
    assert_eq!(alice_usage["picture"], "https://pics.example/a.png");
    // A page of one, then the next.
    let (_, first) = admin(Method::GET, "/admin/v1/media?limit=1".into()).await;
    assert_eq!(first["blobs"].as_array().unwrap().len(), 1);
    let after = first["next"].as_str().unwrap().to_string();
    let (_, second) = admin(Method::GET, format!("/admin/v1/media?limit=1&after={after}")).await;
    assert_eq!((second["blobs"].as_array().unwrap().len(), second["next"].clone()), (1, Value::Null));
    // Deleted for both owners, gone from disk, audited.
    let (status, _) = admin(Method::DELETE, format!("/admin/v1/media/{h1}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(call(&relay, Method::GET, &format!("/{h1}"), &[], None).await.status, StatusCode::NOT_FOUND);
    assert!(!relay.data_dir().join("media").join(&h1.to_hex()[..2]).join(h1.to_hex()).exists());
    assert_eq!(admin(Method::DELETE, format!("/admin/v1/media/{h1}")).await.0, StatusCode::NOT_FOUND);
    assert_eq!(crate::common::audit_actions(&relay, token).await[0], "media.delete");
    assert_eq!(call(&relay, Method::GET, &format!("/{h2}"), &[], None).await.body, two);
}

#[tokio::test]
async fn nip11_and_the_home_page_say_where_media_is() {
    let relay = start(|c| {
        c.access.mode = AccessMode::MembersWrite;
        c.media.allowed_types = vec!["image/*".into()];
    })
    .await;
    assert_eq!(
        relay.nip11().await["hearth_media"],
        json!({"server": null, "buds": [1, 2, 4, 6, 11, 12], "max_blob_bytes": 104857600, "allowed_types": ["image/*"],
               "upload": "members", "auth_required_to_read": false})
    );
    let home = call(&relay, Method::GET, "/", &[], None).await;
    assert!(
        String::from_utf8(home.body)
            .unwrap()
            .contains("Media (Blossom): PUT /upload, GET /<sha256>, GET /list/<pubkey> at this address.")
    );
    let off = start(|c| c.media.enabled = false).await;
    assert_eq!(off.nip11().await.get("hearth_media"), None);
    let put = upload(&off, &auth(&keys(1), Verb::Upload, &[]), b"x", "text/plain").await;
    assert_eq!(put.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_strangers_blob_never_acts_in_the_relays_origin() {
    let relay = start(|_| {}).await;
    let stranger = keys(66);
    let script = b"<script>fetch('/steal?'+sessionStorage.getItem('hearth-admin-token'))</script>";
    let sandboxed = "default-src 'none'; img-src 'self' data:; media-src 'self'; style-src 'unsafe-inline'; sandbox";
    // Documents and script are saved, never shown; pictures, sounds and videos are shown, all
    // without sniffing and without script.
    for (media_type, disposition) in [
        ("text/html", "attachment"),
        ("application/xhtml+xml", "attachment"),
        ("image/svg+xml", "attachment"),
        ("text/xml", "attachment"),
        ("application/javascript", "attachment"),
        ("text/plain", "attachment"),
        ("application/octet-stream", "attachment"),
        ("image/png", "inline"),
        ("audio/ogg", "inline"),
        ("video/mp4", "inline"),
    ] {
        let mut bytes = script.to_vec();
        bytes.extend_from_slice(media_type.as_bytes());
        let put = upload(&relay, &auth(&stranger, Verb::Upload, &[hash_of(&bytes)]), &bytes, media_type).await;
        assert_eq!(put.status, StatusCode::CREATED, "{media_type}: {}", put.reason());
        let path = format!("/{}", hash_of(&bytes).to_hex());
        let ranged = [("range", "bytes=0-7")];
        for (method, headers, status) in [
            (Method::GET, &[][..], StatusCode::OK),
            (Method::HEAD, &[][..], StatusCode::OK),
            (Method::GET, &ranged[..], StatusCode::PARTIAL_CONTENT),
        ] {
            let got = call(&relay, method.clone(), &path, headers, None).await;
            assert_eq!(got.status, status, "{method} {media_type}");
            assert_eq!(
                (
                    got.header("content-type"),
                    got.header("x-content-type-options"),
                    got.header("content-security-policy"),
                    got.header("content-disposition"),
                ),
                (media_type, "nosniff", sandboxed, disposition),
                "{method} {media_type}"
            );
        }
    }
    // A PDF is shown, in Chromium's viewer (which needs `object-src`), and runs nothing here.
    let pdf = b"%PDF-1.4\n%%EOF\n".to_vec();
    upload(&relay, &auth(&stranger, Verb::Upload, &[hash_of(&pdf)]), &pdf, "application/pdf").await;
    let got = call(&relay, Method::GET, &format!("/{}", hash_of(&pdf).to_hex()), &[], None).await;
    assert_eq!(
        (
            got.header("content-security-policy"),
            got.header("content-disposition"),
            got.header("x-content-type-options")
        ),
        (
            "default-src 'none'; img-src 'self' data:; media-src 'self'; style-src 'unsafe-inline'; object-src 'self'",
            "inline",
            "nosniff"
        )
    );
}
