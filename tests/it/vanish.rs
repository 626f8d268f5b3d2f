//! NIP-62 request to vanish: every event of the key and every gift wrap to it leave every read
//! path (and the disk at the next compaction), its older events are refused after, the request
//! is kept and audited; a request for another relay is refused.

use reqwest::Method;
use serde_json::json;

use crate::common::*;

#[tokio::test]
async fn a_key_that_asks_to_vanish_is_gone_from_every_read_path_and_stays_gone() {
    let (alice, bob) = (keys(1), keys(2));
    let relay = TestRelay::start(|c| {
        generous(c);
        c.admin.token = "t".into();
        c.storage.search = true;
    })
    .await;
    let mut a = relay.connect().await;
    assert_eq!(a.auth(&alice, &relay.ws_url()).await[2], true);
    let t = now();
    let note = sign(&alice, t - 30, 1, &[], "a secret recipe for bread");
    let profile = sign(&alice, t - 20, 0, &[], r#"{"name":"alice"}"#);
    let wrap = sign(&keys(9), t - 3600, 1059, &[&["p", &alice.public_key().to_hex()]], "sealed for alice");
    let theirs = sign(&bob, t - 10, 1, &[&["p", &alice.public_key().to_hex()]], "bob stays");
    for e in [&note, &profile, &wrap, &theirs] {
        assert_ok(&a.publish(e).await, &e.id.to_hex(), true, "");
    }
    // Another relay's request is not this relay's to act on.
    let elsewhere = sign(&alice, t, 62, &[&["relay", "wss://other.example"]], "");
    assert_eq!(
        a.publish(&elsewhere).await,
        json!(["OK", elsewhere.id.to_hex(), false, "invalid: this request to vanish names other relays, not this one"])
    );
    assert_eq!(a.req_ids("n", vec![json!({"ids": [note.id.to_hex()]})]).await, vec![note.id.to_hex()]);
    // This relay's.
    let request = sign(&alice, t, 62, &[&["relay", &relay.ws_url()]], "please forget me");
    assert_ok(&a.publish(&request).await, &request.id.to_hex(), true, "");
    let mine = json!({"authors": [alice.public_key().to_hex()]});
    assert_eq!(a.req_ids("a", vec![mine.clone()]).await, vec![request.id.to_hex()]);
    assert_eq!(
        a.req_ids("w", vec![json!({"kinds": [1059], "#p": [alice.public_key().to_hex()]})]).await,
        Vec::<String>::new()
    );
    assert_eq!(a.req_ids("s", vec![json!({"search": "bread"})]).await, Vec::<String>::new());
    // NIP-77: a reconciliation finds only the request.
    let (_, need) = crate::sync::reconcile(&mut a, "neg", mine.clone(), &[]).await;
    assert_eq!(need, vec![request.id.to_hex()]);
    a.send(json!(["COUNT", "c", {"authors": [alice.public_key().to_hex()], "kinds": [0, 1]}])).await;
    assert_eq!(a.recv().await, json!(["COUNT", "c", {"count": 0}]));
    let (status, body) =
        http(&relay, Method::POST, "/api/v1/query", Some(json!({"filters": [{"kinds": [1]}]})), None, None).await;
    assert_eq!(status, 200);
    assert_eq!(
        body["events"].as_array().unwrap().iter().map(|e| e["id"].clone()).collect::<Vec<_>>(),
        vec![json!(theirs.id.to_hex())]
    );
    // Sent again, the old events are refused; bob's are untouched.
    let words = "blocked: this key asked to vanish from this relay (NIP-62); its older events are not taken again";
    assert_eq!(a.publish(&note).await, json!(["OK", note.id.to_hex(), false, words]));
    assert_eq!(a.publish(&wrap).await, json!(["OK", wrap.id.to_hex(), false, words]));
    assert_eq!(audit_actions(&relay, "t").await[0], "vanish");
    // A compaction takes the words off the disk; a restart keeps all of it.
    let (status, _) = http(&relay, Method::POST, "/admin/v1/store/compact", None, Some("t"), None).await;
    assert_eq!(status, 202);
    poll("the compaction to end", STEP, async || {
        let (_, store) = http(&relay, Method::GET, "/admin/v1/store", None, Some("t"), None).await;
        if store["compacting"] == false && !store["last_compaction"].is_null() {
            Ok(())
        } else {
            Err(store.to_string())
        }
    })
    .await;
    let data = relay.data_dir();
    let dir = relay.stop().await;
    let on_disk: Vec<u8> = std::fs::read_dir(&data)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("events"))
        .flat_map(|e| std::fs::read(e.path()).unwrap_or_default())
        .collect();
    // The embedded store's event log is in the data directory (PostgreSQL's rows are not).
    if backend() == Backend::Sled {
        assert!(!on_disk.is_empty());
        assert!(
            !on_disk.windows(b"secret recipe".len()).any(|w| w == b"secret recipe"),
            "the note's words are still in the event log"
        );
    }
    let relay = TestRelay::start_in(dir, |c| {
        generous(c);
        c.storage.search = true;
    })
    .await;
    let mut a = relay.connect().await;
    assert_eq!(a.req_ids("a", vec![mine]).await, vec![request.id.to_hex()]);
    assert_eq!(a.publish(&note).await[3], words);
    // Newer events of the key are taken: it may come back.
    let back = sign(&alice, now() + 1, 1, &[], "hello again");
    assert_ok(&a.publish(&back).await, &back.id.to_hex(), true, "");
    assert!(relay.nip11().await["supported_nips"].as_array().unwrap().contains(&json!(62)));
}
