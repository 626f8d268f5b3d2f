use super::*;

fn keys() -> Keys {
    Keys::test(7)
}

const H: BlobHash = BlobHash([0xab; 32]);

#[test]
fn hashes_parse_from_path_segments() {
    let hex = "ab".repeat(32);
    assert_eq!(BlobHash::from_segment(&hex), Some(H));
    assert_eq!(BlobHash::from_segment(&format!("{hex}.png")), Some(H));
    assert_eq!(BlobHash::from_segment(&hex.to_uppercase()), Some(H));
    assert_eq!(BlobHash::from_segment(&format!("{hex}.")), None);
    assert_eq!(BlobHash::from_segment(&format!("{hex}.p/g")), None);
    assert_eq!(BlobHash::from_segment("upload"), None);
    assert_eq!(BlobHash::from_segment(&hex[..63]), None);
}

#[test]
fn a_good_authorization_names_its_signer_and_blobs() {
    let h = header(&keys(), Verb::Upload, &[H], Timestamp(1000), 2000);
    let a = check(&h, Verb::Upload, Timestamp(1001), "relay.example").unwrap();
    assert_eq!((a.pubkey, a.blobs.clone(), a.expiration), (keys().public_key(), vec![H], 2000));
    assert!(a.covers(&H, true));
    assert!(!a.covers(&BlobHash([1; 32]), true));
}

#[test]
fn url_safe_unpadded_base64_is_read_too() {
    let h = header(&keys(), Verb::List, &[], Timestamp(1000), 2000);
    let b64 = h.strip_prefix("Nostr ").unwrap();
    let safe = b64.replace('+', "-").replace('/', "_").trim_end_matches('=').to_string();
    assert!(check(&format!("Nostr {safe}"), Verb::List, Timestamp(1000), "x").is_ok());
}

#[test]
fn each_failure_has_its_reason() {
    let k = keys();
    let now = Timestamp(1000);
    let h = header(&k, Verb::Upload, &[], now, 2000);
    assert_eq!(check(&h, Verb::Delete, now, "x"), Err(AuthError::WrongVerb("delete")));
    assert_eq!(check(&h, Verb::Upload, Timestamp(2000), "x"), Err(AuthError::Expired));
    let ahead = header(&k, Verb::Upload, &[], Timestamp(1000 + SKEW_SECS + 1), 5000);
    assert_eq!(check(&ahead, Verb::Upload, now, "x"), Err(AuthError::Future));
    let no_exp = k.sign(now, KIND, vec![vec!["t".into(), "upload".into()]], "");
    let enc = |e: &Event| format!("Nostr {}", base64::engine::general_purpose::STANDARD.encode(e.to_json().unwrap()));
    assert_eq!(check(&enc(&no_exp), Verb::Upload, now, "x"), Err(AuthError::NoExpiration));
    let other = k.sign(now, Kind(27235), vec![], "");
    assert_eq!(check(&enc(&other), Verb::Upload, now, "x"), Err(AuthError::WrongKind));
    let mut forged =
        k.sign(now, KIND, vec![vec!["t".into(), "upload".into()], vec!["expiration".into(), "2000".into()]], "");
    forged.sig.0[0] ^= 1;
    assert_eq!(check(&enc(&forged), Verb::Upload, now, "x"), Err(AuthError::BadSignature));
    let elsewhere = k.sign(
        now,
        KIND,
        vec![
            vec!["t".into(), "get".into()],
            vec!["expiration".into(), "2000".into()],
            vec!["server".into(), "https://cdn.other.example/".into()],
        ],
        "",
    );
    assert_eq!(check(&enc(&elsewhere), Verb::Get, now, "relay.example"), Err(AuthError::WrongServer));
    assert!(check(&enc(&elsewhere), Verb::Get, now, "cdn.other.example").is_ok());
    assert_eq!(check("Bearer x", Verb::Get, now, "x"), Err(AuthError::Malformed));
    assert_eq!(check("Nostr !!!", Verb::Get, now, "x"), Err(AuthError::Malformed));
}

#[test]
fn server_tags_compare_hosts() {
    assert_eq!(host_of("https://Cdn.Example.com:8443/path"), "cdn.example.com");
    assert_eq!(host_of("cdn.example.com"), "cdn.example.com");
    assert_eq!(host_of("http://[::1]:7777/"), "::1");
    assert_eq!(host_of("127.0.0.1:7777"), "127.0.0.1");
}

#[test]
fn extensions_follow_the_type() {
    assert_eq!(extension("image/png"), Some("png"));
    assert_eq!(extension("image/JPEG; q=1"), Some("jpg"));
    assert_eq!(extension("application/x-unknown"), None);
}
