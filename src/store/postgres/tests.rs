//! The PostgreSQL backend against the contract: the same writes as the embedded store, the same
//! answers, and `tags` holding exactly the stored events' tags; two handles on one database (two
//! nodes) writing one address, or an event and its deletion, at once; batches; shared media
//! records. How it reads: a long tag value found exactly; a `#p` filter with a `limit` from one
//! range of `tags_value`; a room of a kind the statistics have not seen by its tag, each event by
//! its `seq`; a read of many pages resuming inside a second in id order, each page from its bound
//! in the index, a feed's page in index order (no sort); a database of schema 5 migrated to the
//! author indexes without the trailing `id` and to `tags_value` carrying `seq`, its answers
//! unchanged.

use std::sync::Arc;

use crate::protocol::{Event, Keys, Kind, PubKey};
use crate::store::tests::{Rng, ids, outcome, random_write, same_answers, signed};
use crate::store::*;
use crate::testing::postgres::Postgres;
use std::path::Path;

use super::sql::{self, After};

/// Installs Debian's PostgreSQL when it is missing (`tests/postgres/install.sh`).
fn install() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/postgres/install.sh");
        let status = std::process::Command::new("bash").arg(script).status().unwrap();
        assert!(status.success(), "tests/postgres/install.sh could not install postgresql");
    });
}

/// A server with database `name`, and a store on it (with a data directory of its own).
async fn server(name: &str) -> (Postgres, String) {
    install();
    let pg = Postgres::start(false).await.unwrap();
    let url = pg.database(name).await.unwrap();
    (pg, url)
}

fn open(url: &str, dir: &Path, search: bool) -> Store {
    let tuning = Tuning {
        cache_capacity_mb: 8,
        index_memory_events: INDEX_MEMORY_EVENTS,
        search: search.then(|| SearchTuning { kinds: vec![Kind(1)], memory_mb: 15 }),
        postgres: Some(PgTuning { url: url.to_string(), pool: 4 }),
    };
    Store::open_tuned(dir, tuning).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_answers_exactly_as_the_embedded_store_through_the_same_writes() {
    let (server, url) = server("contract").await;
    let dir = tempfile::tempdir().unwrap();
    let mut pg = open(&url, dir.path(), false);
    let reference = Store::temporary().unwrap();
    let authors: Vec<Keys> = (1..=4).map(Keys::test).collect();
    let mut rng = Rng(0x5eed_2026_1205);
    let mut stored: Vec<EventId> = Vec::new();
    for step in 0..300u64 {
        let event = random_write(&mut rng, &authors, &stored);
        stored.push(event.id);
        // Sent twice at times: the second is a duplicate on both.
        let again = rng.below(15) == 0;
        let (a, b) = (pg.put(event.clone()).await, reference.put(event.clone()).await);
        assert_eq!(outcome(&a.unwrap()), outcome(&b.unwrap()), "put at step {step}");
        if again {
            let (a, b) = (pg.put(event.clone()).await, reference.put(event).await);
            assert_eq!(outcome(&a.unwrap()), outcome(&b.unwrap()), "put again at step {step}");
        }
        if rng.below(25) == 0 {
            let id = stored[rng.below(stored.len() as u64) as usize];
            assert_eq!(pg.remove(id).await.unwrap(), reference.remove(id).await.unwrap(), "remove at step {step}");
        }
        if rng.below(40) == 0 {
            let now = Timestamp(1000 + rng.below(600));
            assert_eq!(pg.sweep_expired(now).await.unwrap(), reference.sweep_expired(now).await.unwrap());
        }
        if step % 50 == 49 {
            let recent = &stored[stored.len().saturating_sub(20)..];
            same_answers(&pg, &reference, &authors, recent, &format!("at step {step}"));
        }
        if step % 120 == 119 {
            // A restart of the node: everything is in the database.
            pg.shutdown().await.unwrap();
            drop(pg);
            pg = open(&url, dir.path(), false);
        }
    }
    // Export: every event, oldest first, the same set as the embedded store's.
    let export = |s: &Store| -> Vec<String> {
        let all = s.export(&Filter::default(), Timestamp(2_000_000_000)).unwrap();
        all.map(|e| Event::from_json(e.unwrap().as_str()).unwrap().id.to_hex()).collect()
    };
    let (mut a, mut b) = (export(&pg), export(&reference));
    assert_eq!(a.len(), b.len());
    a.sort();
    b.sort();
    assert_eq!(a, b);
    // `tags` holds the stored events' tags exactly: none of a removed, deleted, superseded or
    // expired event is left behind (migration 5's trigger), none is missing.
    let client = server.connect("contract").await.unwrap();
    let mut tag_rows = 0;
    for row in client.query("SELECT json FROM events", &[]).await.unwrap() {
        let tags = Event::from_json(row.get(0)).unwrap().tags;
        let named = tags.iter().filter(|t| t.len() > 1 && t[0].chars().count() == 1);
        tag_rows += named.map(|t| (&t[0], &t[1])).collect::<std::collections::HashSet<_>>().len();
    }
    let count =
        "SELECT count(*), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM events e WHERE e.seq = t.seq)) FROM tags t";
    let row = client.query_one(count, &[]).await.unwrap();
    assert_eq!((row.get::<_, i64>(0) as usize, row.get::<_, i64>(1)), (tag_rows, 0), "tag rows, of no event");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nodes_writing_one_address_at_once_keep_the_newest_version_everywhere() {
    let (_pg, url) = server("races").await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let nodes = [open(&url, d1.path(), false), open(&url, d2.path(), false)];
    let alice = Keys::test(9);
    // 40 versions of one profile and of one addressable event, sent to both nodes at once.
    let mut writes = Vec::new();
    for n in 0..40u64 {
        for (kind, tags) in [(0u16, vec![]), (30023, vec![vec!["d".to_string(), "post".to_string()]])] {
            let e = Arc::new(
                crate::protocol::verify::verify(alice.sign(Timestamp(1000 + n), Kind(kind), tags, &n.to_string()))
                    .unwrap(),
            );
            let node = nodes[(n % 2) as usize].clone();
            writes.push(tokio::spawn(async move { node.put(e).await.map(|o| outcome(&o)) }));
        }
    }
    for w in writes {
        w.await.unwrap().unwrap();
    }
    for node in &nodes {
        let pk = alice.public_key().to_hex();
        let profile = ids(node, &format!(r#"{{"authors":["{pk}"],"kinds":[0]}}"#));
        let post = ids(node, &format!(r#"{{"authors":["{pk}"],"kinds":[30023]}}"#));
        assert_eq!(profile.len(), 1, "one version of the profile");
        assert_eq!(post.len(), 1, "one version of the post");
        let newest = alice.sign(Timestamp(1039), Kind(0), vec![], "39");
        assert_eq!(profile[0], newest.id, "the newest profile won");
    }
    // An older version now is superseded on either node.
    let old = crate::protocol::verify::verify(alice.sign(Timestamp(1001), Kind(0), vec![], "late")).unwrap();
    assert_eq!(outcome(&nodes[1].put(old).await.unwrap()), "superseded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_and_its_deletion_racing_on_two_nodes_always_end_deleted() {
    let (_pg, url) = server("deletions").await;
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(&url, d1.path(), false), open(&url, d2.path(), false));
    let bob = Keys::test(10);
    for n in 0..30u64 {
        let note =
            Arc::new(crate::protocol::verify::verify(bob.sign(Timestamp(2000 + n), Kind(1), vec![], "oops")).unwrap());
        let tags = vec![vec!["e".to_string(), note.id.to_hex()]];
        let deletion =
            Arc::new(crate::protocol::verify::verify(bob.sign(Timestamp(2100 + n), Kind(5), tags, "")).unwrap());
        let (na, nb) = (a.clone(), b.clone());
        let (n1, d1) = (note.clone(), deletion.clone());
        let (x, y) =
            tokio::join!(tokio::spawn(async move { na.put(n1).await }), tokio::spawn(async move { nb.put(d1).await }));
        x.unwrap().unwrap();
        y.unwrap().unwrap();
        assert!(
            !a.contains(&note.id).await.unwrap() && !b.contains(&note.id).await.unwrap(),
            "round {n}: the note outlived its deletion"
        );
        assert_eq!(outcome(&a.put(note.clone()).await.unwrap()), "deleted", "round {n}");
    }
    // Another key's deletion of the same id neither deletes it nor lifts the tombstone.
    let mallory = Keys::test(11);
    let note = crate::protocol::verify::verify(bob.sign(Timestamp(3000), Kind(1), vec![], "mine")).unwrap();
    assert_eq!(outcome(&a.put(note.clone()).await.unwrap()), "stored");
    let forged = vec![vec!["e".to_string(), note.id.to_hex()]];
    a.put(crate::protocol::verify::verify(mallory.sign(Timestamp(3001), Kind(5), forged, "")).unwrap()).await.unwrap();
    assert!(b.contains(&note.id).await.unwrap(), "another key's deletion removed it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tag_value_is_found_exactly_and_a_p_filter_with_a_limit_reads_one_index_range() {
    let (pg, url) = server("tags").await;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&url, dir.path(), false);
    let k = Keys::test(12);
    let long = "x".repeat(10_000);
    let other = format!("{}y", "x".repeat(9_999));
    let found = signed(&k, 1000, 1, &[&["t", &long]]);
    store.put(found.clone()).await.unwrap();
    store.put(signed(&k, 1001, 1, &[&["t", &other]])).await.unwrap();
    let filter = serde_json::json!({"#t": [long]}).to_string();
    assert_eq!(ids(&store, &filter), vec![found.id]);
    // Enough rows that the planner prefers an index; the plan of a #p read with a limit.
    let someone = Keys::test(13).public_key().to_hex();
    for n in 0..2000u64 {
        let p = if n % 100 == 0 { someone.clone() } else { Keys::test((n % 200) as u8 + 20).public_key().to_hex() };
        store.put(signed(&k, 2000 + n, 1, &[&["p", &p]])).await.unwrap();
    }
    let client = pg.connect("tags").await.unwrap();
    client.batch_execute("ANALYZE").await.unwrap();
    let f: Filter = serde_json::from_str(&format!(r##"{{"#p":["{someone}"],"limit":5}}"##)).unwrap();
    let plan = plan(&client, &f, None, 5).await;
    assert!(
        plan.contains("Index Scan using tags_value") || plan.contains("Index Only Scan using tags_value"),
        "{plan}"
    );
    assert!(!plan.contains("Sort"), "the rows come in index order, no sort: {plan}");
    assert_eq!(ids(&store, &f_json(&someone)).len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_room_of_a_kind_new_since_the_last_analyze_is_read_by_its_tag_and_each_event_by_seq() {
    // A chat's first messages: kind 42 and `#e` values the statistics have never seen, so the
    // planner counts one row of each. It once walked `events_kind` for every tag row (the whole
    // kind, 1,237 rows a probe at 1M: 56 ms a room where 2 would do); each tag row's event must
    // be fetched by its `seq` (the primary key), which `tags_value` carries.
    let (pg, url) = server("rooms").await;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&url, dir.path(), false);
    let k = Keys::test(14);
    for n in 0..2000u64 {
        store.put(signed(&k, 1000 + n, 1, &[&["t", "chat"]])).await.unwrap();
    }
    let client = pg.connect("rooms").await.unwrap();
    client.batch_execute("ANALYZE").await.unwrap();
    let rooms: Vec<String> = (0..4u8).map(|n| Keys::test(30 + n).public_key().to_hex()).collect();
    let mut in_room = Vec::new();
    for n in 0..400u64 {
        let message = signed(&k, 5000 + n, 42, &[&["e", &rooms[(n % 4) as usize], "", "root"]]);
        if n % 4 == 1 {
            in_room.push(message.id);
        }
        store.put(message).await.unwrap();
    }
    let room = format!(r##"{{"kinds":[42],"#e":["{}"],"limit":50}}"##, rooms[1]);
    let plan = plan(&client, &serde_json::from_str(&room).unwrap(), None, 50).await;
    assert!(plan.contains("using tags_value"), "{plan}");
    assert!(plan.contains("Index Scan using events_pkey"), "each tag row's event found by its seq: {plan}");
    assert!(!plan.contains("events_id_key"), "{plan}");
    assert!(!plan.contains("events_kind"), "{plan}");
    // Once vacuum has marked the pages visible, the seq comes from the index alone.
    client.batch_execute("VACUUM ANALYZE tags").await.unwrap();
    let plan = self::plan(&client, &serde_json::from_str(&room).unwrap(), None, 50).await;
    assert!(plan.contains("Index Only Scan using tags_value"), "{plan}");
    let want: Vec<EventId> = in_room.into_iter().rev().take(50).collect();
    assert_eq!(ids(&store, &room), want, "the room's newest 50, newest first");
}

/// The plan PostgreSQL makes for the page of `filter` of `size` rows after `after`.
async fn plan(client: &tokio_postgres::Client, filter: &Filter, after: Option<After>, size: i64) -> String {
    let sql = sql::page(filter, Timestamp(2_000_000_000), after, size);
    let explain = format!("EXPLAIN {}", sql.text);
    let lines: Vec<String> =
        client.query_typed(&explain, &sql.typed()).await.unwrap().iter().map(|r| r.get(0)).collect();
    lines.join("\n")
}

fn f_json(p: &str) -> String {
    format!(r##"{{"#p":["{p}"],"limit":5}}"##)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_commits_to_the_disk_whatever_the_database_default() {
    let (pg, url) = server("durable").await;
    // The database's own default does not wait for the disk at commit…
    let admin = pg.connect("durable").await.unwrap();
    admin.batch_execute("ALTER DATABASE durable SET synchronous_commit = off").await.unwrap();
    let fresh = pg.connect("durable").await.unwrap();
    let default: String = fresh.query_one("SHOW synchronous_commit", &[]).await.unwrap().get(0);
    assert_eq!(default, "off");
    // …and the store's connections do: OK true waits for a commit on the server's disk.
    let dir = tempfile::tempdir().unwrap();
    let store = open(&url, dir.path(), false);
    let Backend::Postgres(inner) = &store.backend else { panic!("not on PostgreSQL") };
    let inner = inner.clone();
    let setting = tokio::task::spawn_blocking(move || {
        inner.blocking(|client| async move {
            let row = client.query_one("SHOW synchronous_commit", &[]).await?;
            Ok(row.get::<_, String>(0))
        })
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(setting, "on");
    store.shutdown().await.unwrap();
}

/// Group commit: puts sent together (in one order, without waiting for each other's answers)
/// are committed in batches, and each is answered as the embedded store answers the same puts
/// one after another: duplicates, replaced and deleted versions, deletions of events of the
/// same batch, runs of plain events (one statement each) with repeats inside them and events a
/// deletion of the batch removed. The batches really hold several puts (the writer saw more than
/// one waiting).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn puts_sent_together_are_committed_in_batches_and_answered_as_one_by_one() {
    let (_pg, url) = server("batches").await;
    let dir = tempfile::tempdir().unwrap();
    let pg = open(&url, dir.path(), false);
    let reference = Store::temporary().unwrap();
    let authors: Vec<Keys> = (1..=4).map(Keys::test).collect();
    let mut rng = Rng(0x6a7c_2026_1206);
    let mut events = Vec::new();
    let mut stored: Vec<EventId> = Vec::new();
    for _ in 0..600 {
        let event = random_write(&mut rng, &authors, &stored);
        stored.push(event.id);
        if rng.below(10) == 0 {
            events.push(event.clone());
        }
        events.push(event);
    }
    // Earlier events again, in runs of their own: deleted ones are answered deleted by the
    // tombstones a deletion earlier in the same batch wrote, the rest as duplicates.
    for _ in 0..80 {
        let again = events[rng.below(events.len() as u64) as usize].clone();
        events.push(again);
    }
    let mut expected = Vec::new();
    for event in &events {
        expected.push(outcome(&reference.put(event.clone()).await.unwrap()));
    }
    let before = super::batch::BATCHES.load(std::sync::atomic::Ordering::Relaxed);
    // Polled in order, the puts reach the writer in this order, and wait for it together.
    let answers = super::batch::in_order(events.iter().map(|e| pg.put(e.clone())).collect()).await;
    let got: Vec<&str> = answers.iter().map(|a| outcome(a.as_ref().unwrap())).collect();
    for (n, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "put {n}: {}", events[n].to_json().unwrap());
    }
    let batches = super::batch::BATCHES.load(std::sync::atomic::Ordering::Relaxed) - before;
    assert!(batches < events.len() as u64 / 4, "{batches} commits for {} puts: not batched", events.len());
    let recent = &stored[stored.len() - 20..];
    same_answers(&pg, &reference, &authors, recent, "after the batches");
}

/// One put of a batch that PostgreSQL refuses (a tag named NUL, which its text cannot hold)
/// fails alone: the puts beside it in the batch are stored and acknowledged, it is answered with
/// its error and is not stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_that_fails_in_a_batch_fails_alone() {
    let (_pg, url) = server("one_fails").await;
    let dir = tempfile::tempdir().unwrap();
    let pg = open(&url, dir.path(), false);
    let k = Keys::test(9);
    let (first, last) = (signed(&k, 1000, 1, &[]), signed(&k, 1002, 1, &[]));
    // A one-letter tag name that is a NUL: a valid event, a name PostgreSQL's text cannot hold.
    let bad = signed(&k, 1001, 1, &[&["\u{0}", "x"]]);
    let answers = super::batch::in_order([&first, &bad, &last].map(|e| pg.put(e.clone())).into()).await;
    assert_eq!(outcome(answers[0].as_ref().unwrap()), "stored");
    assert!(answers[1].is_err(), "{:?}", answers[1]);
    assert_eq!(outcome(answers[2].as_ref().unwrap()), "stored");
    assert_eq!(ids(&pg, r#"{"kinds":[1]}"#), vec![last.id, first.id]);
}

/// The duplicate check asked by many publishes at once (`seen`): each is answered for its own id,
/// stored or not, whichever query of the looker it was part of.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_duplicate_checks_at_once_are_each_answered_for_their_own_id() {
    let (_pg, url) = server("seen").await;
    let dir = tempfile::tempdir().unwrap();
    let pg = open(&url, dir.path(), false);
    let k = Keys::test(12);
    let notes: Vec<_> = (0..300).map(|n| signed(&k, 5000 + n, 1, &[])).collect();
    // Every other note stored.
    for note in notes.iter().step_by(2) {
        assert_eq!(outcome(&pg.put(note.clone()).await.unwrap()), "stored");
    }
    let answers = super::batch::in_order(notes.iter().map(|n| pg.contains(&n.id)).collect()).await;
    for (n, answer) in answers.into_iter().enumerate() {
        assert_eq!(answer.unwrap(), n % 2 == 0, "note {n}");
    }
}

/// The media records every node shares answer every read exactly as a node's own sled through
/// the same changes: adds (a key's record written again replaces its old one), removals of one
/// owner and of every owner, the total counted once per blob, pages, lists per owner.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_media_records_answer_exactly_as_a_nodes_own_through_the_same_changes() {
    use crate::store::media::BlobRecord;
    let (_pg, url) = server("media").await;
    let dir = tempfile::tempdir().unwrap();
    let pg = open(&url, dir.path(), false);
    let reference = Store::temporary().unwrap();
    let (shared, own) = (pg.blob_records(true).clone(), reference.media().clone());
    assert!(shared.is_shared() && !own.is_shared());
    assert!(!pg.media().is_shared(), "blobs on a node's disk keep the node's own records");
    let hashes: Vec<[u8; 32]> = (1..=5u8).map(|n| [n * 40; 32]).collect();
    let owners: Vec<PubKey> = (1..=3).map(|n| Keys::test(n).public_key()).collect();
    let mut rng = Rng(0x6d65_6469_6120);
    for step in 0..200u64 {
        let hash = hashes[rng.below(5) as usize];
        let owner = owners[rng.below(3) as usize];
        if rng.below(3) == 0 {
            let who = if rng.below(4) == 0 { None } else { Some(owner) };
            let (a, b) = (shared.remove(hash, who).await.unwrap(), own.remove(hash, who).await.unwrap());
            assert_eq!(a, b, "remove at step {step}");
        } else {
            let record = BlobRecord {
                sha256: hex::encode(hash),
                owner,
                size: 1000 + u64::from(hash[0]),
                media_type: format!("image/x-{}", rng.below(3)),
                uploaded: 1_700_000_000 + step,
            };
            let (a, b) = (shared.add(hash, record.clone()).await.unwrap(), own.add(hash, record).await.unwrap());
            assert_eq!(a, b, "add at step {step}");
        }
        assert_eq!(shared.total_bytes().unwrap(), own.total_bytes().unwrap(), "total at step {step}");
        assert_eq!(shared.hashes().unwrap(), own.hashes().unwrap(), "hashes at step {step}");
        assert_eq!(shared.per_owner().unwrap(), own.per_owner().unwrap(), "per owner at step {step}");
        for h in &hashes {
            assert_eq!(shared.owners_of(h).unwrap(), own.owners_of(h).unwrap(), "owners at step {step}");
        }
        for o in &owners {
            assert_eq!(shared.of_owner(o).unwrap(), own.of_owner(o).unwrap(), "of owner at step {step}");
        }
        for after in [None, Some(hashes[1]), Some([0xff; 32])] {
            assert_eq!(shared.page(after, 2).unwrap(), own.page(after, 2).unwrap(), "page at step {step}");
        }
    }
    assert!(shared.total_bytes().unwrap() > 0, "the walk ended with blobs to compare");
}

/// A blob's hold on one node keeps another node's hold of the same blob waiting (seen in
/// `pg_locks`) until it is dropped; another blob's is not held up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blobs_hold_keeps_another_node_waiting_until_it_is_dropped() {
    let (pg, url) = server("holds").await;
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (open(&url, dir_a.path(), false), open(&url, dir_b.path(), false));
    let (on_a, on_b) = (a.blob_records(true).clone(), b.blob_records(true).clone());
    let held = on_a.hold([7; 32]).await.unwrap();
    let other = tokio::time::timeout(std::time::Duration::from_secs(10), on_b.hold([8; 32])).await;
    drop(other.expect("another blob's hold waits for nothing").unwrap());
    let waiting = tokio::spawn(async move { on_b.hold([7; 32]).await.map(drop) });
    let client = pg.connect("holds").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let row = client
            .query_one("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted", &[])
            .await
            .unwrap();
        if row.get::<_, i64>(0) == 1 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "node B never waited for the hold");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!waiting.is_finished(), "node B took a blob node A holds");
    drop(held);
    let taken = tokio::time::timeout(std::time::Duration::from_secs(10), waiting).await;
    taken.expect("node B took the hold once A let go").unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_many_pages_resumes_inside_a_second_in_id_order_from_its_bound_in_the_index() {
    let (pg, url) = server("pages").await;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&url, dir.path(), false);
    let reference = Store::temporary().unwrap();
    let authors: Vec<Keys> = (40..43).map(Keys::test).collect();
    // 1,200 events in three seconds (a page of 500 ends inside a second), then 800 over 200.
    for n in 0..2000u64 {
        let at = if n < 1200 { 10_000 + n / 400 } else { 10_100 + (n - 1200) / 4 };
        let parity = if n % 2 == 0 { "even" } else { "odd" };
        let event = signed(&authors[(n % 3) as usize], at, 1, &[&["t", parity], &["r", &n.to_string()]]);
        store.put(event.clone()).await.unwrap();
        reference.put(event).await.unwrap();
    }
    let author = authors[1].public_key().to_hex();
    for filter in [
        r#"{"kinds":[1]}"#.to_string(),
        r#"{"since":10000,"until":10002}"#.to_string(),
        format!(r#"{{"authors":["{author}"]}}"#),
        r##"{"#t":["even"]}"##.to_string(),
        r#"{"kinds":[1],"limit":1100}"#.to_string(),
    ] {
        let (got, want) = (ids(&store, &filter), ids(&reference, &filter));
        assert!(got.len() > 500, "{filter}: more than a page");
        assert_eq!(got, want, "{filter}: the embedded store's events, in its order");
    }
    // A resumed page starts at its bound: `created_at <=` is a condition of the index scan, not a
    // filter over every newer row.
    let client = pg.connect("pages").await.unwrap();
    client.batch_execute("ANALYZE").await.unwrap();
    let window: Filter = serde_json::from_str(r#"{"since":10100}"#).unwrap();
    let after = (Timestamp(10_150), EventId([0; 32]));
    let resumed = plan(&client, &window, Some(after), 500).await;
    let cond = resumed.lines().find(|l| l.contains("Index Cond")).unwrap_or_default();
    assert!(resumed.contains("on events_time") || resumed.contains("using events_time"), "{resumed}");
    assert!(cond.contains("created_at <="), "{resumed}");
    // A feed's page reads its rows in index order, ties by id included: a second crowded by many
    // keys is not read and sorted whole for every reader's 50 newest.
    for feed in [r#"{"kinds":[1],"limit":50}"#, r#"{"limit":50}"#, r#"{"since":10001,"limit":50}"#] {
        let plan = plan(&client, &serde_json::from_str(feed).unwrap(), None, 50).await;
        assert!(plan.contains("Index Scan") && !plan.contains("Sort"), "{feed}: {plan}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_of_schema_5_gets_the_latest_indexes_and_answers_alike() {
    let (pg, url) = server("schema5").await;
    let dir = tempfile::tempdir().unwrap();
    let store = open(&url, dir.path(), false);
    let (alice, bob) = (Keys::test(44), Keys::test(45));
    for n in 0..60u64 {
        let who = if n % 2 == 0 { &alice } else { &bob };
        store.put(signed(who, 20_000 + n / 6, 1 + (n % 2) as u16, &[&["r", &n.to_string()]])).await.unwrap();
    }
    let alice_hex = alice.public_key().to_hex();
    let filters = [
        r#"{"limit":25}"#.to_string(),
        format!(r#"{{"authors":["{alice_hex}"],"limit":7}}"#),
        r#"{"kinds":[2],"until":20005}"#.to_string(),
        format!(r#"{{"authors":["{alice_hex}"],"kinds":[1]}}"#),
        r##"{"kinds":[2],"#r":["7","13","41"],"limit":2}"##.to_string(),
    ];
    let before: Vec<Vec<EventId>> = filters.iter().map(|f| ids(&store, f)).collect();
    store.shutdown().await.unwrap();
    drop(store);
    // Back to what schema 5 had (and 6, for `tags_value`).
    let client = pg.connect("schema5").await.unwrap();
    client
        .batch_execute(
            "DROP INDEX events_author, events_author_kind;
             CREATE INDEX events_author ON events (pubkey, created_at DESC, id);
             CREATE INDEX events_author_kind ON events (pubkey, kind, created_at DESC, id);
             DROP INDEX tags_value;
             CREATE INDEX tags_value ON tags (name, value, created_at DESC, id);
             DELETE FROM hearth_schema WHERE version >= 6;",
        )
        .await
        .unwrap();
    let store = open(&url, dir.path(), false);
    let defs: Vec<String> = client
        .query("SELECT indexdef FROM pg_indexes WHERE tablename IN ('events', 'tags') ORDER BY indexname", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .filter(|d: &String| d.contains("created_at DESC"))
        .collect();
    assert_eq!(
        defs,
        [
            "CREATE INDEX events_author ON public.events USING btree (pubkey, created_at DESC)",
            "CREATE INDEX events_author_kind ON public.events USING btree (pubkey, kind, created_at DESC)",
            "CREATE INDEX events_kind ON public.events USING btree (kind, created_at DESC, id)",
            "CREATE INDEX events_time ON public.events USING btree (created_at DESC, id)",
            "CREATE INDEX tags_value ON public.tags USING btree (name, value, created_at DESC, id) INCLUDE (seq)",
        ]
    );
    let version: i32 = client.query_one("SELECT max(version) FROM hearth_schema", &[]).await.unwrap().get(0);
    assert_eq!(version, 7);
    let after: Vec<Vec<EventId>> = filters.iter().map(|f| ids(&store, f)).collect();
    assert_eq!(after, before);
    assert_eq!(before.iter().map(Vec::len).collect::<Vec<_>>(), [25, 7, 18, 30, 2]);
}
