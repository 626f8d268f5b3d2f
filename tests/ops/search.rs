//! NIP-50 search through the `hearth` binary: ranking on a fixed corpus, the query language,
//! search combined with the other filter fields, events that leave the store leaving the index,
//! the limits and refusals, and the index across a `kill -9` and a removal.

use std::path::Path;
use std::time::Duration;

use super::binary::GENEROUS;
use crate::common::*;
use hearth::protocol::Event;
use serde_json::{Value, json};

/// How long a test waits for the index to show what it expects (one commit interval is a
/// second; a rebuild after a restart takes longer on a busy machine).
const PATIENCE: Duration = Duration::from_secs(30);

/// The relay on `dir`, with quotas no test here reaches.
fn relay(dir: &Path, env: &[(&str, &str)]) -> (Running, String) {
    let mut all: Vec<(&str, &str)> = GENEROUS.to_vec();
    all.extend_from_slice(env);
    start_with(dir, &all)
}

/// The ids a REQ answers, or the CLOSED message that refused it.
async fn ask(c: &mut Client, filter: Value) -> Result<Vec<String>, String> {
    c.send(json!(["REQ", "q", filter])).await;
    let mut ids = Vec::new();
    loop {
        let f = c.recv().await;
        match f[0].as_str() {
            Some("EVENT") => ids.push(f[2]["id"].as_str().unwrap().to_string()),
            Some("EOSE") => {
                c.send(json!(["CLOSE", "q"])).await;
                return Ok(ids);
            }
            Some("CLOSED") => return Err(f[2].as_str().unwrap().to_string()),
            _ => panic!("unexpected frame: {f}"),
        }
    }
}

/// Asks `filter` until the answer is `want` (the index commits within a second, a rebuild
/// takes longer); panics with the last answer after [`PATIENCE`].
async fn until(c: &mut Client, filter: Value, want: &[String]) {
    until_by(c, filter, |got| got == want, want).await;
}

/// [`until`] with the answer's test `done` (`want` is shown when it never passes).
async fn until_by(c: &mut Client, filter: Value, done: impl Fn(&[String]) -> bool, want: &[String]) {
    poll(&format!("{filter} to answer {want:?}"), PATIENCE, async || {
        let got = ask(c, filter.clone()).await;
        if got.as_deref().is_ok_and(&done) { Ok(()) } else { Err(format!("{got:?}")) }
    })
    .await
}

fn ids(events: &[&Event]) -> Vec<String> {
    events.iter().map(|e| e.id.to_hex()).collect()
}

#[tokio::test]
async fn results_are_ranked_and_the_query_language_and_filters_narrow_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, addr) = relay(dir.path(), &[]);
    let url = format!("ws://{addr}/");
    let mut c = Client::connect(&url).await;
    let (alice, bob) = (keys(1), keys(2));
    let dense = sign(&alice, 1000, 1, &[], "meetup meetup meetup");
    let tagged = sign(&bob, 1001, 1, &[&["t", "meetup"]], "nothing here");
    let cafe = sign(&alice, 1002, 1, &[], "The Meetup is on Friday at the Café");
    let long = sign(
        &bob,
        1003,
        1,
        &[],
        "a long note that mentions the meetup once among many other words about weather and trains and food",
    );
    let article = sign(&alice, 1004, 30023, &[&["d", "plan"], &["title", "Planning the next meetup"]], "body text");
    let reaction = sign(&alice, 1005, 7, &[], "meetup");
    let tokyo = sign(&bob, 1006, 1, &[], "東京で会いましょう");
    let older_twin = sign(&alice, 1007, 1, &[], "gathering");
    let newer_twin = sign(&bob, 1008, 1, &[], "gathering");
    for e in [&dense, &tagged, &cafe, &long, &article, &reaction, &tokyo, &older_twin, &newer_twin] {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
    // BM25: three occurrences first; then one each, the shorter texts first (the tag and the
    // title are text too); kind 7 is not indexed.
    until(&mut c, json!({"search": "meetup"}), &ids(&[&dense, &tagged, &article, &cafe, &long])).await;
    // Equal scores: newest first.
    assert_eq!(ask(&mut c, json!({"search": "gathering"})).await, Ok(ids(&[&newer_twin, &older_twin])));
    // `limit` after ranking.
    assert_eq!(ask(&mut c, json!({"search": "meetup", "limit": 2})).await, Ok(ids(&[&dense, &tagged])));
    // A phrase, case and diacritics folded.
    assert_eq!(ask(&mut c, json!({"search": "\"the cafe\""})).await, Ok(ids(&[&cafe])));
    assert_eq!(ask(&mut c, json!({"search": "\"cafe the\""})).await, Ok(vec![]));
    assert_eq!(ask(&mut c, json!({"search": "MEETUP café"})).await, Ok(ids(&[&cafe])));
    // Exclusions, of a word and of a phrase.
    assert_eq!(
        ask(&mut c, json!({"search": "meetup -friday -\"many other\""})).await,
        Ok(ids(&[&dense, &tagged, &article]))
    );
    // A prefix.
    assert_eq!(ask(&mut c, json!({"search": "plan*"})).await, Ok(ids(&[&article])));
    // CJK without spaces.
    assert_eq!(ask(&mut c, json!({"search": "東京"})).await, Ok(ids(&[&tokyo])));
    assert_eq!(ask(&mut c, json!({"search": "会い"})).await, Ok(ids(&[&tokyo])));
    assert_eq!(ask(&mut c, json!({"search": "京都"})).await, Ok(vec![]));
    // Unknown extensions are ignored; include:spam is accepted.
    assert_eq!(ask(&mut c, json!({"search": "gathering nsfw:no include:spam"})).await.map(|v| v.len()), Ok(2));
    // Combined with the other fields.
    let alice_hex = alice.public_key().to_hex();
    assert_eq!(
        ask(&mut c, json!({"search": "meetup", "authors": [alice_hex]})).await,
        Ok(ids(&[&dense, &article, &cafe]))
    );
    assert_eq!(ask(&mut c, json!({"search": "meetup", "kinds": [30023]})).await, Ok(ids(&[&article])));
    assert_eq!(ask(&mut c, json!({"search": "meetup", "#t": ["meetup"]})).await, Ok(ids(&[&tagged])));
    assert_eq!(
        ask(&mut c, json!({"search": "meetup", "since": 1001, "until": 1003})).await,
        Ok(ids(&[&tagged, &cafe, &long]))
    );
    // COUNT with a search, and the REST query.
    c.send(json!(["COUNT", "n", {"search": "meetup"}])).await;
    assert_eq!(c.recv().await, json!(["COUNT", "n", {"count": 5}]));
    let rest: Value = web()
        .post(format!("http://{addr}/api/v1/query"))
        .json(&json!({"filters": [{"search": "meetup", "limit": 3}]}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rest_ids: Vec<&str> = rest["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap()).collect();
    assert_eq!(rest_ids, ids(&[&dense, &tagged, &article]));
    // A live subscription gets new matching events only.
    c.send(json!(["REQ", "live", {"search": "gathering"}])).await;
    for _ in 0..3 {
        c.recv().await;
    }
    let other = sign(&alice, 1010, 1, &[], "unrelated");
    let third = sign(&alice, 1011, 1, &[], "one more Gathering");
    assert_ok(&c.publish(&other).await, &other.id.to_hex(), true, "");
    c.send(json!(["EVENT", third])).await;
    let mut got = [c.recv().await, c.recv().await];
    got.sort_by_key(|f| f[0].as_str().unwrap().to_string());
    assert_eq!(got[0], json!(["EVENT", "live", third]));
    assert_eq!(got[1][0], "OK");
}

#[tokio::test]
async fn refusals_name_the_limit_and_nip11_lists_50_only_when_search_is_on() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, addr) =
        relay(dir.path(), &[("HEARTH_LIMITS__MAX_SEARCH_CHARS", "10"), ("HEARTH_ADMIN__TOKEN", "t0ken")]);
    let info = nip11_at(&format!("http://{addr}/")).await;
    assert!(info["supported_nips"].as_array().unwrap().contains(&json!(50)), "{info}");
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let too_long = ask(&mut c, json!({"search": "a very long search"})).await;
    assert_eq!(too_long, Err("invalid: search is longer than 10 characters".into()));
    assert_eq!(ask(&mut c, json!({"search": "-only"})).await, Err("invalid: search has no word to look for".into()));
    let rest = web()
        .post(format!("http://{addr}/api/v1/query"))
        .json(&json!({"filters": [{"search": "a very long search"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 400);
    // An export takes every event its filter matches: a search is refused, not failed.
    let export = web()
        .get(format!("http://{addr}/admin/v1/export"))
        .query(&[("filter", r#"{"search":"x"}"#)])
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(export.status(), 400);
    // A search with NEG-OPEN is refused.
    c.send(json!(["NEG-OPEN", "n", {"search": "x"}, "6100000200"])).await;
    let refused = c.recv().await;
    let why = "blocked: a filter that selects every event it matches cannot have \"search\"; leave it out";
    assert_eq!(refused, json!(["NEG-ERR", "n", why]));

    let off = tempfile::tempdir().unwrap();
    let (_relay, addr) = relay(off.path(), &[("HEARTH_STORAGE__SEARCH", "false")]);
    let info = nip11_at(&format!("http://{addr}/")).await;
    assert!(!info["supported_nips"].as_array().unwrap().contains(&json!(50)), "{info}");
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    assert_eq!(
        ask(&mut c, json!({"search": "x"})).await,
        Err("unsupported: search is off on this relay (NIP-50)".into())
    );
    assert!(!off.path().join("data").join("search").exists());
}

#[tokio::test]
async fn deleted_replaced_and_expired_events_leave_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let (_relay, addr) = relay(dir.path(), &[("HEARTH_STORAGE__EXPIRATION_SWEEP_SECS", "1")]);
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    let k = keys(3);
    let t = now();
    let doomed = sign(&k, t, 1, &[], "lighthouse doomed");
    let kept = sign(&k, t + 1, 1, &[], "lighthouse kept");
    let profile = sign(&k, t, 0, &[], "lighthouse keeper profile");
    let expiring = sign(&k, t, 1, &[&["expiration", &(t + 5).to_string()]], "lighthouse brief");
    for e in [&doomed, &kept, &profile, &expiring] {
        assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
    }
    let all = ids(&[&doomed, &kept, &profile, &expiring]);
    let same_set = |got: &[String]| got.len() == all.len() && all.iter().all(|id| got.contains(id));
    until_by(&mut c, json!({"search": "lighthouse"}), same_set, &all).await;
    let deletion = sign(&k, t + 2, 5, &[&["e", &doomed.id.to_hex()]], "");
    assert_ok(&c.publish(&deletion).await, &deletion.id.to_hex(), true, "");
    let newer_profile = sign(&k, t + 3, 0, &[], "a new profile");
    assert_ok(&c.publish(&newer_profile).await, &newer_profile.id.to_hex(), true, "");
    // The deleted note, the replaced profile and (after its time) the expired note are gone.
    until(&mut c, json!({"search": "lighthouse"}), &ids(&[&kept])).await;
    until(&mut c, json!({"search": "profile"}), &ids(&[&newer_profile])).await;
}

#[tokio::test]
async fn the_index_survives_kill_9_and_is_rebuilt_when_removed() {
    let dir = tempfile::tempdir().unwrap();
    let k = keys(4);
    let notes: Vec<Event> = (0..200).map(|i| sign(&k, 1000 + i, 1, &[], &format!("harbour note {i}"))).collect();
    let want = |n: usize| -> Vec<String> { notes[..n].iter().rev().map(|e| e.id.to_hex()).collect() };
    {
        let (mut relay, addr) = relay(dir.path(), &[]);
        let mut c = Client::connect(&format!("ws://{addr}/")).await;
        for e in &notes[..100] {
            assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
        }
        until(&mut c, json!({"search": "harbour", "limit": 500}), &want(100)).await;
        // The second hundred are acknowledged, then the relay dies before (most of) them are
        // committed to the index.
        for e in &notes[100..] {
            assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
        }
        relay.0.kill().unwrap();
        relay.0.wait().unwrap();
    }
    {
        let (_relay, addr) = relay(dir.path(), &[]);
        let mut c = Client::connect(&format!("ws://{addr}/")).await;
        until(&mut c, json!({"search": "harbour", "limit": 500}), &want(200)).await;
    }
    std::fs::remove_dir_all(dir.path().join("data").join("search")).unwrap();
    let (mut running, addr) = relay(dir.path(), &[]);
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    until(&mut c, json!({"search": "harbour", "limit": 500}), &want(200)).await;
    until(&mut c, json!({"search": "\"note 7\""}), &ids(&[&notes[7]])).await;
    drop(c);
    assert_eq!(sigterm(&mut running).code(), Some(0));

    // Offline: search-reindex builds it again from the store, as check --repair does.
    let offline = |args: &[&str]| {
        let out = hearth()
            .current_dir(dir.path())
            .env("HEARTH_STORAGE__DATA_DIR", dir.path().join("data"))
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        let last = String::from_utf8_lossy(&out.stdout).lines().last().unwrap_or_default().to_string();
        serde_json::from_str::<Value>(&last).unwrap()
    };
    assert_eq!(offline(&["search-reindex"])["events"], 200);
    assert_eq!(offline(&["check", "--repair"])["remaining"], 0);
    let (_relay, addr) = relay(dir.path(), &[]);
    let mut c = Client::connect(&format!("ws://{addr}/")).await;
    assert_eq!(ask(&mut c, json!({"search": "harbour", "limit": 500})).await, Ok(want(200)));
}
