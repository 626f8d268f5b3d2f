//! Unit tests of the store through its API: dedup, replacement, deletion, expiry, queries, reopen.

use super::*;
use crate::protocol::verify::verify;
use std::collections::HashMap;

use crate::protocol::{Event, Filter, Keys, Kind, KindClass, PubKey};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;
use std::time::Duration;

use super::db::{EVENTS_TREE, open_db};
use super::embedded::{catalogue, write};
use super::format::keys::{self, SCHEMA_VERSION};
use super::format::log;
use super::format::record;

/// What the tests look at and hold of a store in the middle of a compaction.
impl Store {
    /// Starts a compaction and returns once its swap is done, with the writer's part of its remap
    /// held until `Store::release_remap` (or a reopen).
    #[cfg(test)]
    pub(crate) async fn compact_until_swapped(&self) {
        self.until_compaction_ends().await.unwrap();
        self.embedded().writes.shared.compaction.hold_remap.store(true, Ordering::Release);
        assert!(self.start_compaction());
        while self.embedded().writes.shared.view.read().unwrap_or_else(PoisonError::into_inner).places.moved().is_none()
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// Lets a held remap go on, and waits until it is done.
    #[cfg(test)]
    pub(crate) async fn release_remap(&self) {
        self.embedded().writes.shared.compaction.hold_remap.store(false, Ordering::Release);
        self.until_compaction_ends().await.unwrap();
    }

    /// Waits until no task holds another handle of this store (a held compaction's task lets go
    /// once the store has shut down), so that the directory can be opened again.
    #[cfg(test)]
    pub(crate) async fn until_alone(&self) {
        while Arc::strong_count(self.embedded()) > 1 {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    /// True while a compaction's remap is unfinished (its moves are still read).
    #[cfg(test)]
    pub(crate) fn remapping(&self) -> bool {
        self.embedded().writes.shared.view.read().unwrap_or_else(PoisonError::into_inner).places.moved().is_some()
    }
}

pub(super) fn signed(k: &Keys, at: u64, kind: u16, tags: &[&[&str]]) -> VerifiedEvent {
    let tags = tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
    verify(k.sign(Timestamp(at), Kind(kind), tags, "c")).unwrap()
}

/// What a put did, without the mark a stored event got (which a model does not know).
pub(super) fn outcome(o: &PutOutcome) -> &'static str {
    match o {
        PutOutcome::Stored(_) => "stored",
        PutOutcome::Duplicate => "duplicate",
        PutOutcome::Superseded => "superseded",
        PutOutcome::Deleted => "deleted",
    }
}

pub(super) fn ids(store: &Store, filter: &str) -> Vec<EventId> {
    let f: Filter = serde_json::from_str(filter).unwrap();
    store
        .query(&[f], Timestamp(2_000_000_000))
        .unwrap()
        .iter()
        .map(|raw| Event::from_json(raw.as_str()).unwrap().id)
        .collect()
}

#[tokio::test]
async fn duplicate_is_stored_once() {
    let store = Store::temporary().unwrap();
    let e = signed(&Keys::test(1), 10, 1, &[]);
    assert!(matches!(store.put(e.clone()).await.unwrap(), PutOutcome::Stored(_)));
    assert!(matches!(store.put(e.clone()).await.unwrap(), PutOutcome::Duplicate));
    assert_eq!(ids(&store, "{}"), vec![e.id]);
}

#[tokio::test]
async fn replaceable_keeps_newest_and_refuses_older() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(1);
    let old = signed(&k, 10, 0, &[]);
    let new = signed(&k, 20, 0, &[]);
    store.put(old.clone()).await.unwrap();
    assert!(matches!(store.put(new.clone()).await.unwrap(), PutOutcome::Stored(_)));
    assert!(matches!(store.put(old.clone()).await.unwrap(), PutOutcome::Superseded));
    assert_eq!(ids(&store, r#"{"kinds":[0]}"#), vec![new.id]);
    // The old version left no index entries behind.
    assert_eq!(store.count_by_author(&k.public_key()).unwrap(), 1);
}

#[tokio::test]
async fn addressable_ties_keep_lowest_id() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(2);
    let a = signed(&k, 10, 30023, &[&["d", "x"]]);
    let b = signed(&k, 10, 30023, &[&["d", "x"], &["t", "other"]]);
    let (low, high) = if a.id < b.id { (a, b) } else { (b, a) };
    store.put(high.clone()).await.unwrap();
    assert!(matches!(store.put(low.clone()).await.unwrap(), PutOutcome::Stored(_)));
    assert!(matches!(store.put(high.clone()).await.unwrap(), PutOutcome::Superseded));
    // Another d tag is another address.
    let other = signed(&k, 5, 30023, &[&["d", "y"]]);
    store.put(other.clone()).await.unwrap();
    assert_eq!(ids(&store, r#"{"kinds":[30023]}"#), vec![low.id, other.id]);
}

#[tokio::test]
async fn deletion_removes_own_targets_and_tombstones_them() {
    let store = Store::temporary().unwrap();
    let (alice, bob) = (Keys::test(1), Keys::test(2));
    let mine = signed(&alice, 10, 1, &[]);
    let theirs = signed(&bob, 10, 1, &[]);
    let article = signed(&alice, 10, 30023, &[&["d", "a"]]);
    store.put(mine.clone()).await.unwrap();
    store.put(theirs.clone()).await.unwrap();
    store.put(article.clone()).await.unwrap();
    let address = format!("30023:{}:a", alice.public_key());
    let deletion = signed(&alice, 20, 5, &[&["e", &mine.id.to_hex()], &["e", &theirs.id.to_hex()], &["a", &address]]);
    store.put(deletion.clone()).await.unwrap();
    let mut left = ids(&store, "{}");
    left.sort();
    let mut want = vec![theirs.id, deletion.id];
    want.sort();
    assert_eq!(left, want);
    assert!(matches!(store.put(mine).await.unwrap(), PutOutcome::Deleted));
    assert!(matches!(store.put(signed(&alice, 15, 30023, &[&["d", "a"]])).await.unwrap(), PutOutcome::Deleted));
    assert!(matches!(store.put(signed(&alice, 25, 30023, &[&["d", "a"]])).await.unwrap(), PutOutcome::Stored(_)));
}

#[tokio::test]
async fn expired_events_are_not_served_and_are_swept() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(3);
    let e = signed(&k, 10, 1, &[&["expiration", "100"]]);
    store.put(e.clone()).await.unwrap();
    let f: Filter = serde_json::from_str("{}").unwrap();
    assert_eq!(store.query(std::slice::from_ref(&f), Timestamp(99)).unwrap().len(), 1);
    assert_eq!(store.query(std::slice::from_ref(&f), Timestamp(100)).unwrap().len(), 0);
    assert!(store.get(&e.id, Timestamp(100)).unwrap().is_none());
    assert_eq!(store.sweep_expired(Timestamp(100)).await.unwrap(), 1);
    assert_eq!(store.count_by_author(&k.public_key()).unwrap(), 0);
}

#[tokio::test]
async fn query_orders_newest_first_and_limits_per_filter() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(4);
    let mut all = Vec::new();
    for (i, at) in [5, 1, 3, 3, 9].into_iter().enumerate() {
        let e = signed(&k, at, 1, &[&["t", &format!("v{at}")], &["n", &i.to_string()]]);
        store.put(e.clone()).await.unwrap();
        all.push(e);
    }
    let mut expected: Vec<_> = all.iter().map(|e| (std::cmp::Reverse(e.created_at), e.id)).collect();
    expected.sort();
    let expected: Vec<EventId> = expected.into_iter().map(|(_, id)| id).collect();
    assert_eq!(ids(&store, "{}"), expected);
    assert_eq!(ids(&store, r#"{"limit":2}"#), expected[..2].to_vec());
    assert_eq!(ids(&store, r#"{"since":3,"until":5}"#), expected[1..4].to_vec());
    assert_eq!(ids(&store, r##"{"#t":["v3"]}"##), expected[2..4].to_vec());
    assert_eq!(ids(&store, r#"{"limit":0}"#), Vec::<EventId>::new());
    let f: Filter = serde_json::from_str(r#"{"kinds":[1]}"#).unwrap();
    assert_eq!(store.count(&[f.clone(), f], Timestamp(0)).unwrap(), 5);
}

#[tokio::test]
async fn a_limit_that_cuts_a_tie_keeps_the_lowest_ids() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(5);
    let mut same_second = Vec::new();
    for i in 0..12 {
        let e = signed(&k, 50, 1, &[&["n", &i.to_string()]]);
        store.put(e.clone()).await.unwrap();
        same_second.push(e.id);
    }
    store.put(signed(&k, 60, 1, &[])).await.unwrap();
    same_second.sort();
    let got = ids(&store, r#"{"kinds":[1],"limit":4}"#);
    assert_eq!(got[1..], same_second[..3]);
    assert_eq!(
        ids(&store, r#"{"authors":["0000000000000000000000000000000000000000000000000000000000000000"]}"#),
        vec![]
    );
}

#[tokio::test]
async fn writes_of_one_group_see_each_other() {
    // Sent together, these can land in one writer group: the duplicate, the older replaceable version
    // and the deleted event must each be judged against the writes before them in the group.
    let store = Store::temporary().unwrap();
    let k = Keys::test(6);
    let note = signed(&k, 10, 1, &[]);
    let (old, new) = (signed(&k, 10, 0, &[]), signed(&k, 20, 0, &[]));
    let doomed = signed(&k, 10, 1, &[&["t", "x"]]);
    let deletion = signed(&k, 30, 5, &[&["e", &doomed.id.to_hex()]]);
    let outcomes = futures_util::future::join_all([
        store.put(note.clone()),
        store.put(note.clone()),
        store.put(new.clone()),
        store.put(old.clone()),
        store.put(doomed.clone()),
        store.put(deletion.clone()),
        store.put(doomed.clone()),
    ])
    .await;
    let names: Vec<&str> = outcomes.into_iter().map(|o| outcome(&o.unwrap())).collect();
    assert_eq!(names, ["stored", "duplicate", "stored", "superseded", "stored", "stored", "deleted"]);
    let mut left = ids(&store, "{}");
    left.sort();
    let mut want = vec![note.id, new.id, deletion.id];
    want.sort();
    assert_eq!(left, want);
    assert_eq!(ids(&store, r##"{"#t":["x"]}"##), vec![]);
    assert_eq!(store.len(), 3);
}

fn mark_of(outcome: Result<PutOutcome, StoreError>) -> Mark {
    match outcome {
        Ok(PutOutcome::Stored(mark)) => mark,
        other => panic!("not stored: {other:?}"),
    }
}

#[tokio::test]
async fn a_querys_mark_tells_the_events_it_saw_from_those_stored_after_it() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(7);
    let now = Timestamp(2_000_000_000);
    let seen = mark_of(store.put(signed(&k, 10, 1, &[])).await);
    let (events, looked) = store.query_marked(&[Filter::default()], now).unwrap();
    assert_eq!((events.len(), seen <= looked), (1, true));
    // A sweep commits the group so far, so a put before it and one after it in the same group
    // become visible at different marks; each gets its own.
    let (first, swept, second) =
        tokio::join!(store.put(signed(&k, 11, 1, &[])), store.sweep_expired(now), store.put(signed(&k, 12, 1, &[])));
    swept.unwrap();
    let (first, second) = (mark_of(first), mark_of(second));
    assert!(looked < first && first <= second, "{looked:?} {first:?} {second:?}");
    // The count goes on through a compaction (its marks are not places in the log).
    let (_, before_compaction) = store.query_marked(&[Filter::default()], now).unwrap();
    assert!(second <= before_compaction);
    store.compact().await.unwrap();
    let after_compaction = mark_of(store.put(signed(&k, 13, 1, &[])).await);
    assert!(before_compaction < after_compaction);
    let (events, looked) = store.query_marked(&[Filter::default()], now).unwrap();
    assert_eq!((events.len(), after_compaction <= looked), (4, true));
}

#[tokio::test]
async fn reopening_rebuilds_the_index_and_new_records_overwrite_none() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(7);
    let first: Vec<_> = (0..5).map(|i| signed(&k, 100 + i, 1, &[&["t", "a"]])).collect();
    {
        let store = Store::open(dir.path(), 8).unwrap();
        for e in &first {
            store.put(e.clone()).await.unwrap();
        }
        store.remove(first[4].id).await.unwrap();
        store.shutdown().await.unwrap();
    }
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(store.len(), 4);
    let later = signed(&k, 50, 1, &[&["t", "a"]]);
    store.put(later.clone()).await.unwrap();
    let want: Vec<EventId> = [3, 2, 1, 0].iter().map(|&i| first[i].id).chain([later.id]).collect();
    assert_eq!(ids(&store, r##"{"#t":["a"]}"##), want);
    assert_eq!(store.count_by_author(&k.public_key()).unwrap(), 5);
    assert!(matches!(store.put(first[0].clone()).await.unwrap(), PutOutcome::Duplicate));
}

#[test]
fn data_directories_of_older_layouts_are_refused() {
    for (tree, version) in [("events_v1", 1), ("events_v2", 2)] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = sled::open(dir.path()).unwrap();
            db.open_tree(tree).unwrap();
            db.flush().unwrap();
        }
        match Store::open(dir.path(), 8) {
            Err(e) => assert_eq!(
                e.to_string(),
                format!(
                    "storage: data directory has schema version {version}, this hearth reads 5: run `hearth migrate` to carry its events over"
                )
            ),
            Ok(_) => panic!("a v{version} directory was opened"),
        }
    }
}

#[tokio::test]
async fn a_layout_3_directory_is_converted_at_open_and_every_event_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(8);
    let events: Vec<_> = (0..300).map(|i| signed(&k, 1_000 + i, 1, &[&["t", "a"]])).collect();
    {
        let store = Store::open(dir.path(), 8).unwrap();
        for e in &events {
            store.put(e.clone()).await.unwrap();
        }
        store.shutdown().await.unwrap();
    }
    {
        // Layout 3, made from today's: one `i` key per id, the serial its value.
        let db = open_db(dir.path(), 8).unwrap();
        let tree = db.open_tree(EVENTS_TREE).unwrap();
        let buckets: Vec<_> = catalogue::buckets(&tree).map(Result::unwrap).collect();
        assert_eq!(catalogue::all(&tree, &Default::default()).count(), 300);
        for (key, value) in buckets {
            for (id, serial) in format::bucket::entries(&value).unwrap() {
                tree.insert([&[keys::ID][..], &id.0].concat(), &serial.to_be_bytes()).unwrap();
            }
            tree.remove(key).unwrap();
        }
        tree.insert(keys::meta("schema"), &[3u8]).unwrap();
        db.flush().unwrap();
    }
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(store.len(), 300);
    for e in &events {
        assert!(store.get(&e.id, Timestamp(2_000_000_000)).unwrap().is_some());
    }
    let want: Vec<EventId> = events.iter().rev().map(|e| e.id).collect();
    assert_eq!(ids(&store, r##"{"#t":["a"]}"##), want);
    assert!(matches!(store.put(events[7].clone()).await.unwrap(), PutOutcome::Duplicate));
    let keys_left =
        store.embedded().reader.tree.scan_prefix([keys::ID]).filter(|item| item.as_ref().unwrap().0.len() != 4).count();
    assert_eq!(keys_left, 0);
    assert_eq!(store.embedded().reader.tree.get(keys::meta("schema")).unwrap().unwrap().as_ref(), [SCHEMA_VERSION]);
}

#[tokio::test]
async fn every_blob_sled_writes_is_synced() {
    // Leaves of several 60 KB settings documents exceed sled's 128 KiB inline limit and go to
    // blob files, which sled itself never syncs.
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let document = vec![b'x'; 60_000];
    for i in 0..40 {
        store.save_setting(&format!("doc-{i:02}"), document.clone()).await.unwrap();
    }
    let synced = store.embedded().writes.shared.durable.as_ref().unwrap().synced_blobs();
    let blobs: Vec<_> = std::fs::read_dir(dir.path().join("blobs")).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(!blobs.is_empty(), "no blob was written: the test no longer covers blobs");
    for blob in blobs {
        assert!(synced.contains(&blob), "blob {blob:?} was not synced");
    }
    assert_eq!(store.load_setting("doc-39").unwrap().map(|d| d.len()), Some(60_000));
}

#[tokio::test]
async fn frames_after_sleds_end_are_replayed_at_open_and_a_torn_one_is_cut_off() {
    // A crash after a group's frames were synced (and acknowledged) but before sled flushed its
    // batch leaves frames after the end sled recorded. They are written here as the writer does.
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(10);
    let kept = signed(&k, 100, 1, &[]);
    let doomed = signed(&k, 110, 1, &[]);
    {
        let store = Store::open(dir.path(), 8).unwrap();
        store.put(kept.clone()).await.unwrap();
        store.put(doomed.clone()).await.unwrap();
        store.shutdown().await.unwrap();
    }
    let path = dir.path().join(log::FILE);
    let size = || std::fs::metadata(&path).unwrap().len();
    let committed = size();
    let note = signed(&k, 200, 1, &[&["t", "replayed"]]);
    let removed_by_admin = signed(&k, 250, 1, &[]);
    let deletion = signed(&k, 300, 5, &[&["e", &doomed.id.to_hex()]]);
    let mut tail = Vec::new();
    for e in [&note, &removed_by_admin, &deletion] {
        log::push_frame(&mut tail, &record::encode(e.event()));
    }
    log::push_frame(&mut tail, &write::replay::remove_frame(&removed_by_admin.id));
    let replayed = tail.len() as u64;
    // Half a frame of a group whose sync never returned.
    let mut torn = Vec::new();
    log::push_frame(&mut torn, &record::encode(signed(&k, 400, 1, &[]).event()));
    tail.extend_from_slice(&torn[..torn.len() / 2]);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&tail);
    std::fs::write(&path, bytes).unwrap();

    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(size(), committed + replayed);
    assert_eq!(ids(&store, "{}"), vec![deletion.id, note.id, kept.id]);
    assert_eq!(ids(&store, r##"{"#t":["replayed"]}"##), vec![note.id]);
    // The replayed deletion left its tombstone, and the replayed put its identity.
    assert!(matches!(store.put(doomed.clone()).await.unwrap(), PutOutcome::Deleted));
    assert!(matches!(store.put(note.clone()).await.unwrap(), PutOutcome::Duplicate));
    store.shutdown().await.unwrap();
    drop(store);
    // The replay was made durable: the next open finds the same without replaying.
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(ids(&store, "{}"), vec![deletion.id, note.id, kept.id]);
    assert_eq!(size(), committed + replayed);
}

#[tokio::test]
async fn a_replayed_sweep_runs_where_it_ran_the_first_time() {
    // A profile that expired and was swept; then an older profile, stored because the address
    // was free again. Replayed without the sweep, the older one would be refused as superseded.
    let dir = tempfile::tempdir().unwrap();
    drop(Store::open(dir.path(), 8).unwrap());
    let k = Keys::test(11);
    let expiring = signed(&k, 120, 0, &[&["expiration", "150"]]);
    let older = signed(&k, 110, 0, &[]);
    let note = signed(&k, 130, 1, &[]);
    let deletion = signed(&k, 140, 5, &[&["e", &note.id.to_hex()]]);
    let mut tail = Vec::new();
    log::push_frame(&mut tail, &record::encode(note.event()));
    log::push_frame(&mut tail, &record::encode(expiring.event()));
    log::push_frame(&mut tail, &write::replay::sweep_frame(Timestamp(200)));
    log::push_frame(&mut tail, &record::encode(older.event()));
    // After the sweep's partial apply, a deletion still reads its target from the tail.
    log::push_frame(&mut tail, &record::encode(deletion.event()));
    let path = dir.path().join(log::FILE);
    let mut bytes = std::fs::read(&path).unwrap();
    bytes.extend_from_slice(&tail);
    std::fs::write(&path, bytes).unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(ids(&store, r#"{"kinds":[0]}"#), vec![older.id]);
    assert_eq!(ids(&store, "{}"), vec![deletion.id, older.id]);
    assert!(matches!(store.put(note.clone()).await.unwrap(), PutOutcome::Deleted));
}

fn signed_text(k: &Keys, at: u64, kind: u16, tags: &[&[&str]], content: &str) -> VerifiedEvent {
    let tags = tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
    verify(k.sign(Timestamp(at), Kind(kind), tags, content)).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_keeps_every_write_and_removal_made_while_it_runs() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let (alice, bob, carol) = (Keys::test(1), Keys::test(2), Keys::test(3));
    let pad = "x".repeat(1000);
    // 200 dead versions of a profile, and 1,200 live notes of about 1.2 KB: enough that the copy,
    // held to 1 MiB/s, is still running while the writes below arrive.
    for i in 0..200 {
        store.put(signed_text(&alice, 1000 + i, 0, &[], &pad)).await.unwrap();
    }
    let notes: Vec<_> = (0..1200).map(|i| signed_text(&bob, 2000 + i, 1, &[&["t", "n"]], &pad)).collect();
    for note in &notes {
        store.put(note.clone()).await.unwrap();
    }
    let before = store.stats().unwrap();
    assert!(before.dead_bytes > 200_000, "{before:?}");
    // An export started before the compaction reads every one of its events after it.
    let export = store.export(&Filter::default(), Timestamp(2_000_000_000)).unwrap();
    store.set_compaction_policy(CompactPolicy { max_bytes_per_sec: 1 << 20, ..CompactPolicy::default() });

    let running = tokio::spawn({
        let store = store.clone();
        async move { store.compact().await }
    });
    // Lookups by id, through the catalogue, all the way through: each finds its event (never
    // another record at the same offset of the other file), before, during and after the swap.
    let reader = std::thread::spawn({
        let (store, want) = (store.clone(), notes[700].id);
        move || {
            let mut reads = 0;
            while store.is_compacting() || reads == 0 {
                let got = store.get(&want, Timestamp(2_000_000_000)).unwrap().unwrap();
                assert_eq!(Event::from_json(got.as_str()).unwrap().id, want);
                assert_eq!(ids(&store, &format!(r#"{{"ids":["{}"]}}"#, want.to_hex())), vec![want]);
                reads += 1;
            }
            reads
        }
    });
    while !store.is_compacting() {
        tokio::task::yield_now().await;
    }
    assert!(matches!(store.compact().await, Err(StoreError::Compacting)));
    // Meanwhile: new notes, a new profile version, deletions of old notes, a moderation removal.
    let later: Vec<_> = (0..30).map(|i| signed_text(&carol, 5000 + i, 1, &[&["t", "n"]], "later")).collect();
    for e in &later {
        assert!(matches!(store.put(e.clone()).await.unwrap(), PutOutcome::Stored(_)));
    }
    let profile = signed_text(&alice, 9000, 0, &[], "newest");
    store.put(profile.clone()).await.unwrap();
    let deletion = signed_text(&bob, 9001, 5, &[&["e", &notes[0].id.to_hex()], &["e", &notes[1].id.to_hex()]], "");
    store.put(deletion.clone()).await.unwrap();
    assert!(store.remove(notes[2].id).await.unwrap());
    assert!(store.is_compacting(), "the copy was still running: the writes above went on beside it");
    let done = running.await.unwrap().unwrap();
    assert!(reader.join().unwrap() > 0);
    assert!(done.after_bytes < done.before_bytes, "{done:?}");
    assert!(done.writes_paused_ms >= done.reads_paused_ms, "{done:?}");

    let mut want: Vec<EventId> = vec![profile.id, deletion.id];
    want.extend(later.iter().map(|e| e.id));
    want.extend(notes[3..].iter().map(|e| e.id));
    let mut got = ids(&store, "{}");
    assert_eq!(got.len(), want.len());
    got.sort();
    want.sort();
    assert_eq!(got, want);
    assert_eq!(ids(&store, r#"{"kinds":[0]}"#), vec![profile.id]);
    let got = store.get(&notes[500].id, Timestamp(2_000_000_000)).unwrap().unwrap();
    assert_eq!(Event::from_json(got.as_str()).unwrap().id, notes[500].id);
    assert!(store.get(&notes[1].id, Timestamp(2_000_000_000)).unwrap().is_none());
    let after = store.stats().unwrap();
    assert_eq!((after.log_generation, after.events), (1, want.len() as u64), "{after:?}");
    // Only what died during the compaction is dead in the new log: the last profile version copied.
    assert!(after.dead_bytes < 10_000, "{after:?}");
    assert_eq!(export.count(), 1 + 1200, "the export's snapshot, read from the old log");
    let files: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert!(files.iter().any(|f| f == "events.1.log") && !files.iter().any(|f| f == "events.log"), "{files:?}");

    // Written after it, and the whole store again after a reopen.
    let last = signed_text(&carol, 9500, 1, &[], "after");
    store.put(last.clone()).await.unwrap();
    store.shutdown().await.unwrap();
    drop(store);
    let store = Store::open(dir.path(), 8).unwrap();
    want.push(last.id);
    want.sort();
    let mut got = ids(&store, "{}");
    got.sort();
    assert_eq!(got, want);
    assert!(matches!(store.put(notes[700].clone()).await.unwrap(), PutOutcome::Duplicate));
    assert!(
        matches!(store.put(notes[2].clone()).await.unwrap(), PutOutcome::Stored(_)),
        "removed by moderation, not deleted"
    );
}

#[tokio::test]
async fn a_temporary_store_compacts_in_memory() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(4);
    for i in 0..10 {
        store.put(signed(&k, 100 + i, 0, &[])).await.unwrap();
    }
    let newest = signed(&k, 200, 0, &[]);
    store.put(newest.clone()).await.unwrap();
    assert!(store.stats().unwrap().dead_bytes > 0);
    store.compact().await.unwrap();
    let stats = store.stats().unwrap();
    assert_eq!((stats.dead_bytes, stats.events, stats.log_generation), (0, 1, 1), "{stats:?}");
    assert_eq!(ids(&store, "{}"), vec![newest.id]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shutdown_abandons_a_compaction_copy_and_the_next_open_removes_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path(), 8).unwrap();
    let k = Keys::test(5);
    let pad = "y".repeat(1000);
    for i in 0..400 {
        store.put(signed_text(&k, 100 + i, 1, &[], &pad)).await.unwrap();
    }
    // One byte a second: the copy would take days after its first chunk.
    store.set_compaction_policy(CompactPolicy { max_bytes_per_sec: 1, ..CompactPolicy::default() });
    let running = tokio::spawn({
        let store = store.clone();
        async move { store.compact().await }
    });
    while !dir.path().join("events.1.log").exists() {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    store.shutdown().await.unwrap();
    // A liveness bound, not a timing target: without the stop the copy would not end for days.
    let abandoned = tokio::time::timeout(std::time::Duration::from_secs(60), running).await.unwrap().unwrap();
    assert!(matches!(abandoned, Err(StoreError::Closed)), "{abandoned:?}");
    drop(store);
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!((store.len(), store.stats().unwrap().log_generation), (400, 0));
    assert!(!dir.path().join("events.1.log").exists());
}

/// A small seeded generator (xorshift64*), so that a failing sequence can be run again.
pub(super) struct Rng(pub(super) u64);

impl Rng {
    pub(super) fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) % n
    }
}

/// A store whose index is mostly in segments of `per_segment` events.
fn segmented(dir: &Path, per_segment: usize) -> Store {
    Store::open_tuned(
        dir,
        Tuning { cache_capacity_mb: 8, index_memory_events: per_segment, search: None, postgres: None },
    )
    .unwrap()
}

/// One write of a seeded mix over `authors`: profiles, addressable posts, notes with tags, an
/// expiry or a `p`, direct messages, deletions of a stored id or of an address.
pub(super) fn random_write(rng: &mut Rng, authors: &[Keys], stored: &[EventId]) -> VerifiedEvent {
    let tags = ["a", "b", "c"];
    let k = &authors[rng.below(authors.len() as u64) as usize];
    let at = 1000 + rng.below(400);
    let t = tags[rng.below(3) as usize];
    match rng.below(11) {
        0 => signed(k, at, 0, &[]),
        1 => signed(k, at, 30023, &[&["d", tags[rng.below(2) as usize]], &["t", t]]),
        2 if !stored.is_empty() => {
            let target = stored[rng.below(stored.len() as u64) as usize].to_hex();
            signed(k, at, 5, &[&["e", &target]])
        }
        3 => signed(k, at, 1, &[&["t", t], &["expiration", &(1000 + rng.below(600)).to_string()]]),
        4 => signed(k, at, 1, &[&["t", t], &["p", "x"]]),
        5 => signed(k, at, 4, &[&["p", &authors[rng.below(authors.len() as u64) as usize].public_key().to_hex()]]),
        6 => {
            let address = format!("30023:{}:{}", k.public_key().to_hex(), tags[rng.below(2) as usize]);
            signed(k, at, 5, &[&["a", &address]])
        }
        _ => signed(k, at, 1, &[&["t", t]]),
    }
}

/// The filters both stores are asked.
pub(super) fn probes(authors: &[Keys], some_ids: &[EventId]) -> Vec<String> {
    let mut out = vec![
        "{}".to_string(),
        r#"{"limit":7}"#.into(),
        r#"{"kinds":[1]}"#.into(),
        r#"{"kinds":[0,30023]}"#.into(),
        r##"{"#t":["a"]}"##.into(),
        r##"{"#t":["b","c"],"limit":5}"##.into(),
        r##"{"kinds":[1],"#t":["a"],"#p":["x"]}"##.into(),
        r#"{"since":1100,"until":1300}"#.into(),
        r#"{"since":1100,"until":1300,"limit":3}"#.into(),
    ];
    for k in authors {
        let pk = k.public_key().to_hex();
        out.push(format!(r#"{{"authors":["{pk}"]}}"#));
        out.push(format!(r#"{{"authors":["{pk}"],"kinds":[1],"limit":4}}"#));
    }
    let ids: Vec<String> = some_ids.iter().map(|id| format!("\"{}\"", id.to_hex())).collect();
    out.push(format!(r#"{{"ids":[{}]}}"#, ids.join(",")));
    out
}

/// What a query of `filter` serves to the operator (every event), kept to what `reader` may see by
/// the rule written out here rather than the store's viewer code (so a fault there shows): an
/// event of kind 4 or 1059 only to its author or a key in one of its `p` tags, when `private`;
/// as negentropy items, sorted by created_at, id.
fn query_items(store: &Store, filter: &Filter, private: bool, reader: Option<PubKey>) -> Vec<Item> {
    // Every match, then the limit on what the reader may see: newest first, ties lowest id first.
    let every = Filter { limit: None, ..filter.clone() };
    let (events, _) =
        store.query_as(std::slice::from_ref(&every), Timestamp(2_000_000_000), &Viewer::everything()).unwrap();
    let mut items: Vec<Item> = events
        .iter()
        .map(|e| serde_json::from_str::<serde_json::Value>(e.as_str()).unwrap())
        .filter(|v| {
            let kind = v["kind"].as_u64().unwrap();
            if !private || (kind != 4 && kind != 1059) {
                return true;
            }
            let Some(reader) = reader.map(|r| r.to_hex()) else { return false };
            v["pubkey"] == reader.as_str()
                || v["tags"].as_array().unwrap().iter().any(|t| t[0] == "p" && t[1] == reader.as_str())
        })
        .map(|v| (Timestamp(v["created_at"].as_u64().unwrap()), EventId::from_hex(v["id"].as_str().unwrap()).unwrap()))
        .collect();
    items.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    items.truncate(filter.limit.map_or(usize::MAX, |l| usize::try_from(l).unwrap_or(usize::MAX)));
    items.sort_unstable();
    items
}

/// Every probe answers the same on both stores, and they hold the same events.
pub(super) fn same_answers(segmented: &Store, reference: &Store, authors: &[Keys], some_ids: &[EventId], when: &str) {
    for probe in probes(authors, some_ids) {
        assert_eq!(ids(segmented, &probe), ids(reference, &probe), "{probe} {when}");
        let f: Filter = serde_json::from_str(&probe).unwrap();
        let now = Timestamp(2_000_000_000);
        assert_eq!(
            segmented.count(std::slice::from_ref(&f), now).unwrap(),
            reference.count(&[f], now).unwrap(),
            "count {probe} {when}"
        );
    }
    assert_eq!(segmented.len(), reference.len(), "{when}");
    let private = crate::protocol::PrivateKinds::new(&[Kind(4), Kind(1059)]);
    let reader = authors[0].public_key();
    let viewers = [
        (Viewer::everything(), false, None),
        (private.viewer(None), true, None),
        (private.viewer(Some(reader)), true, Some(reader)),
    ];
    for probe in probes(authors, some_ids) {
        let f: Filter = serde_json::from_str(&probe).unwrap();
        for (viewer, private, reader) in &viewers {
            let want = query_items(reference, &f, *private, *reader);
            for (store, which) in [(segmented, "segmented"), (reference, "in memory")] {
                let at = Timestamp(2_000_000_000);
                let got = store.items(&f, at, viewer, usize::MAX).unwrap().unwrap();
                assert_eq!(got, want, "items of {probe} for {viewer:?}, {which}, {when}");
                // `max` is the number of items: exactly as many are served, one more than it is not.
                let exact = store.items(&f, at, viewer, want.len()).unwrap();
                assert_eq!(exact.as_ref(), Some(&want), "max = {} of {probe}, {which}, {when}", want.len());
                if let Some(fewer) = want.len().checked_sub(1).filter(|_| f.limit.is_none()) {
                    let over = store.items(&f, at, viewer, fewer).unwrap();
                    assert!(over.is_none(), "max = {fewer} of {probe} ({} items), {which}, {when}", want.len());
                }
            }
        }
    }
    for k in authors {
        let pk = k.public_key();
        assert_eq!(segmented.count_by_author(&pk).unwrap(), reference.count_by_author(&pk).unwrap(), "{when}");
    }
    let (a, b) = (segmented.stats().unwrap(), reference.stats().unwrap());
    assert_eq!(a.events, b.events, "{when}");
    // Bytes are the embedded store's own measure (PostgreSQL's tables count theirs).
    if a.backend == b.backend {
        assert_eq!(a.live_bytes, b.live_bytes, "{when}");
    }
}

// Two workers: a compaction's task let go by the shutdown drops its handles on one while the
// reopen waits for the directory's lock (blocking) on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_in_segments_answers_exactly_as_one_in_memory_through_removals_reopens_and_compactions() {
    // The same writes go to a store whose index is written out every 5 events (so it is in many
    // segments, merged as they come) and to a temporary store, whose index is all in memory; the
    // first is reopened and compacted along the way. Every probe must answer the same.
    let dir = tempfile::tempdir().unwrap();
    let authors: Vec<Keys> = (1..=4).map(Keys::test).collect();
    let mut rng = Rng(0x5eed_2026_1201);
    let mut seg = segmented(dir.path(), 5);
    let mut held_until = None;
    let reference = Store::temporary().unwrap();
    let mut stored: Vec<EventId> = Vec::new();
    for step in 0..400u64 {
        let event = random_write(&mut rng, &authors, &stored);
        stored.push(event.id);
        let (a, b) = (seg.put(event.clone()).await, reference.put(event).await);
        assert_eq!(outcome(&a.unwrap()), outcome(&b.unwrap()), "put at step {step}");
        if rng.below(25) == 0 {
            let id = stored[rng.below(stored.len() as u64) as usize];
            assert_eq!(seg.remove(id).await.unwrap(), reference.remove(id).await.unwrap(), "remove at step {step}");
        }
        if rng.below(40) == 0 {
            let now = Timestamp(1000 + rng.below(600));
            assert_eq!(seg.sweep_expired(now).await.unwrap(), reference.sweep_expired(now).await.unwrap());
        }
        let recent = &stored[stored.len().saturating_sub(20)..];
        if step % 97 == 96 && (step / 97) % 2 == 0 {
            seg.compact().await.unwrap();
            same_answers(&seg, &reference, &authors, recent, &format!("after a compaction at {step}"));
        } else if step % 97 == 96 {
            // Held after its swap: old segments and catalogue entries read through the moves,
            // while writes and removals go on, until it is let go (or the store is reopened).
            seg.compact_until_swapped().await;
            assert!(seg.remapping());
            held_until = Some(step + 60);
            same_answers(&seg, &reference, &authors, recent, &format!("in a compaction's remap at {step}"));
        }
        if held_until == Some(step + 30) {
            // A kill -9 thirty steps into a held remap: the files as they are now (the writer is
            // idle, what was acknowledged is in the log, sled's last flush may be behind it) open
            // as a store that has every event and finishes the remap by itself.
            let crashed = tempfile::tempdir().unwrap();
            for entry in std::fs::read_dir(dir.path()).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    std::fs::copy(entry.path(), crashed.path().join(entry.file_name())).unwrap();
                }
            }
            let reopened = segmented(crashed.path(), 5);
            same_answers(&reopened, &reference, &authors, recent, &format!("after a kill in a remap at {step}"));
            reopened.release_remap().await;
            same_answers(&reopened, &reference, &authors, recent, &format!("after a remap after a kill at {step}"));
            reopened.shutdown().await.unwrap();
        }
        if held_until == Some(step) {
            seg.release_remap().await;
            held_until = None;
            assert!(!seg.remapping());
            let files = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap());
            let generation = seg.stats().unwrap().log_generation;
            for name in files {
                assert!(!name.starts_with("moves."), "{name} is left after the remap");
                assert!(
                    !name.starts_with("index.") || name.starts_with(&format!("index.{generation}.")),
                    "{name} is left after the remap"
                );
            }
            same_answers(&seg, &reference, &authors, recent, &format!("after a remap at {step}"));
        }
        if step % 61 == 60 {
            seg.shutdown().await.unwrap();
            seg.until_alone().await;
            drop(seg);
            seg = segmented(dir.path(), 5);
            same_answers(&seg, &reference, &authors, recent, &format!("after a reopen at {step}"));
            if held_until.take().is_some() {
                // The reopened store goes on with the remap by itself.
                seg.release_remap().await;
                same_answers(&seg, &reference, &authors, recent, &format!("after a remap resumed at {step}"));
            }
        }
    }
    let stats = seg.stats().unwrap();
    assert!(stats.index_segments >= 2, "the index is not in several segments: {stats:?}");
    assert!(stats.index_segments <= 12, "merges did not keep the segments few: {stats:?}");
    same_answers(&seg, &reference, &authors, &stored[stored.len() - 20..], "at the end");
    // Opened with the in-memory part larger than the store, it reads what is in segments as is.
    seg.shutdown().await.unwrap();
    drop(seg);
    let seg = segmented(dir.path(), 100_000);
    same_answers(&seg, &reference, &authors, &stored[stored.len() - 20..], "reopened with a larger memory part");
}

#[tokio::test]
async fn unreadable_or_unrecorded_segments_are_built_again_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(3);
    let events: Vec<_> = (0..40).map(|i| signed(&k, 500 + i, 1, &[&["t", "z"]])).collect();
    {
        let store = segmented(dir.path(), 8);
        for e in &events {
            store.put(e.clone()).await.unwrap();
        }
        store.remove(events[3].id).await.unwrap();
        store.shutdown().await.unwrap();
    }
    let want: Vec<EventId> = events.iter().rev().filter(|e| e.id != events[3].id).map(|e| e.id).collect();
    let segment_files = || -> Vec<std::path::PathBuf> {
        let mut files: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "seg"))
            .collect();
        files.sort();
        files
    };
    let files = segment_files();
    assert!(!files.is_empty());
    // A damaged segment: the index is built again from the log, and serves everything.
    let bytes = std::fs::read(&files[0]).unwrap();
    std::fs::write(&files[0], &bytes[..bytes.len() - 3]).unwrap();
    let store = segmented(dir.path(), 8);
    assert_eq!(ids(&store, r##"{"#t":["z"]}"##), want);
    assert_eq!(store.len(), 39);
    // The segments merged while they were built are gone: what is left is the index.
    assert_eq!(segment_files().len(), store.stats().unwrap().index_segments);
    store.shutdown().await.unwrap();
    drop(store);
    // A stray segment file that the catalogue does not name is removed at open.
    std::fs::write(dir.path().join("index.0.999.seg"), b"left by a crash").unwrap();
    let store = segmented(dir.path(), 8);
    assert!(!dir.path().join("index.0.999.seg").exists());
    assert_eq!(ids(&store, r#"{"limit":100}"#), want);
}

#[tokio::test]
async fn a_count_from_the_lists_alone_leaves_out_expired_events_and_counts_each_event_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = segmented(dir.path(), 2);
    let k = Keys::test(4);
    for e in [
        signed(&k, 10, 1, &[&["t", "a"], &["t", "b"]]),
        signed(&k, 11, 1, &[&["t", "a"]]),
        signed(&k, 12, 1, &[&["t", "a"], &["expiration", "100"]]),
        signed(&k, 13, 7, &[]),
        signed(&k, 14, 1, &[&["t", "b"]]),
    ] {
        store.put(e).await.unwrap();
    }
    let now = Timestamp(2_000_000_000);
    let count = |filter: &str| store.count(&[serde_json::from_str(filter).unwrap()], now).unwrap();
    // The expired event is not swept yet: still in the lists, not counted, as it is not served.
    for (filter, want) in [
        ("{}", 4),
        (r#"{"kinds":[1]}"#, 3),
        (r##"{"#t":["a","b"]}"##, 3),
        (r##"{"#t":["a"]}"##, 2),
        (r#"{"since":11,"until":13}"#, 2),
    ] {
        assert_eq!(count(filter), want, "{filter}");
        assert_eq!(ids(&store, filter).len() as u64, want, "{filter} served");
    }
    let pk = k.public_key().to_hex();
    assert_eq!(count(&format!(r#"{{"authors":["{pk}"],"kinds":[1,7]}}"#)), 4);
}

/// NIP-01/09/40 storage as the protocol states it, for the store to be checked against: which
/// events are live, which ids and addresses are tombstoned, and what a put answers.
#[derive(Default)]
struct Model {
    live: HashMap<EventId, Event>,
    /// NIP-09 `e` deletions: the id, by whom (each key that asked: another key's request must
    /// not lift the author's).
    tombstones: HashMap<EventId, std::collections::HashSet<PubKey>>,
    /// NIP-09 `a` deletions: the address, up to when.
    deleted_addresses: HashMap<(PubKey, u16, String), u64>,
}

impl Model {
    fn address(e: &Event) -> Option<(PubKey, u16, String)> {
        match e.kind.class() {
            KindClass::Replaceable => Some((e.pubkey, e.kind.0, String::new())),
            KindClass::Addressable => Some((e.pubkey, e.kind.0, e.d_tag().to_string())),
            _ => None,
        }
    }

    fn put(&mut self, e: &Event) -> PutOutcome {
        if self.live.contains_key(&e.id) {
            return PutOutcome::Duplicate;
        }
        if self.tombstones.get(&e.id).is_some_and(|by| by.contains(&e.pubkey)) {
            return PutOutcome::Deleted;
        }
        if let Some(address) = Model::address(e) {
            if self.deleted_addresses.get(&address).is_some_and(|&until| e.created_at.0 <= until) {
                return PutOutcome::Deleted;
            }
            let current = self.live.values().find(|x| Model::address(x).as_ref() == Some(&address)).cloned();
            if let Some(current) = current {
                // The newer stays; of two at the same second, the lower id.
                if (current.created_at, std::cmp::Reverse(current.id)) > (e.created_at, std::cmp::Reverse(e.id)) {
                    return PutOutcome::Superseded;
                }
                self.live.remove(&current.id);
            }
        }
        self.live.insert(e.id, e.clone());
        if e.kind == Kind::DELETION {
            self.delete(e);
        }
        PutOutcome::Stored(super::Mark::default())
    }

    fn delete(&mut self, deletion: &Event) {
        for value in deletion.tag_values("e") {
            let Some(id) = EventId::from_hex(value) else { continue };
            match self.live.get(&id) {
                // Only its author's events, and never a deletion.
                Some(target) if target.pubkey != deletion.pubkey || target.kind == Kind::DELETION => continue,
                Some(_) => {
                    self.live.remove(&id);
                }
                None => {}
            }
            self.tombstones.entry(id).or_default().insert(deletion.pubkey);
        }
        for value in deletion.tag_values("a") {
            let mut parts = value.splitn(3, ':');
            let (Some(kind), Some(pubkey)) = (parts.next(), parts.next()) else { continue };
            let (Ok(kind), Some(pubkey)) = (kind.parse::<u16>(), PubKey::from_hex(pubkey)) else { continue };
            if pubkey != deletion.pubkey {
                continue;
            }
            let address = (pubkey, kind, parts.next().unwrap_or("").to_string());
            let until = self.deleted_addresses.entry(address.clone()).or_insert(0);
            *until = (*until).max(deletion.created_at.0);
            self.live.retain(|_, x| Model::address(x).as_ref() != Some(&address) || x.created_at > deletion.created_at);
        }
    }

    fn sweep(&mut self, now: Timestamp) -> usize {
        let before = self.live.len();
        self.live.retain(|_, e| e.expiration().is_none_or(|at| at > now));
        before - self.live.len()
    }

    /// What a REQ of `filter` at `now` is served: unexpired matches, newest first, ties by
    /// lowest id, at most `limit`.
    fn query(&self, filter: &Filter, now: Timestamp) -> Vec<EventId> {
        let mut hits: Vec<&Event> =
            self.live.values().filter(|e| filter.matches(e) && e.expiration().is_none_or(|at| at > now)).collect();
        hits.sort_by_key(|e| (std::cmp::Reverse(e.created_at), e.id));
        hits.into_iter().take(filter.limit.map_or(usize::MAX, |l| l as usize)).map(|e| e.id).collect()
    }
}

// Two workers: a compaction's task let go by the shutdown drops its handles on one while the
// reopen waits for the directory's lock (blocking) on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_answers_every_put_and_query_as_the_protocol_model_does_through_reopens_and_compactions() {
    // Seeded random writes (notes, replaceable and addressable versions, NIP-09 deletions by id
    // and by address, some of other authors' events, NIP-40 expirations), moderation removals,
    // sweeps, reopens and compactions; after every put its outcome, and at every checkpoint
    // every probe, must be the model's.
    let dir = tempfile::tempdir().unwrap();
    let authors: Vec<Keys> = (11..=14).map(Keys::test).collect();
    let mut rng = Rng(0x0de1_2026_1201);
    let mut store = segmented(dir.path(), 7);
    let mut held = false;
    let mut model = Model::default();
    let mut sent: Vec<Event> = Vec::new();
    let now = Timestamp(1300);
    let check = |store: &Store, model: &Model, sent: &[Event], when: &str| {
        let mut probes = probes(&authors, &sent.iter().rev().take(30).map(|e| e.id).collect::<Vec<_>>());
        probes.push(r#"{"kinds":[10002]}"#.into());
        probes.push(r#"{"kinds":[5],"limit":10}"#.into());
        for probe in probes {
            let f: Filter = serde_json::from_str(&probe).unwrap();
            let got: Vec<EventId> = store
                .query(std::slice::from_ref(&f), now)
                .unwrap()
                .iter()
                .map(|raw| Event::from_json(raw.as_str()).unwrap().id)
                .collect();
            assert_eq!(got, model.query(&f, now), "{probe} {when}");
            let count = store.count(std::slice::from_ref(&f), now).unwrap();
            let all = Filter { limit: None, ..f };
            assert_eq!(count, model.query(&all, now).len() as u64, "count {probe} {when}");
        }
        assert_eq!(store.len(), model.live.len(), "{when}");
    };
    for step in 0..600u64 {
        let k = &authors[rng.below(4) as usize];
        let at = 1000 + rng.below(500);
        let t = ["a", "b", "c"][rng.below(3) as usize];
        let d = ["x", "y"][rng.below(2) as usize];
        // Versions of one address often share a second, so the tie rule is exercised.
        let coarse = 1000 + 25 * rng.below(20);
        let event = match rng.below(12) {
            0 => signed(k, coarse, 0, &[&["t", t]]),
            1 => signed(k, coarse, 10002, &[&["t", t]]),
            2 | 3 => signed(k, coarse, 30023, &[&["d", d], &["t", t]]),
            4 if !sent.is_empty() => {
                let target = sent[rng.below(sent.len() as u64) as usize].id.to_hex();
                signed(k, at, 5, &[&["e", &target]])
            }
            5 => {
                // By address: mostly the author's own, sometimes another's (which must do nothing).
                let owner = if rng.below(4) == 0 { &authors[rng.below(4) as usize] } else { k };
                let a = format!("30023:{}:{d}", owner.public_key().to_hex());
                signed(k, at, 5, &[&["a", &a]])
            }
            6 => signed(k, at, 1, &[&["t", t], &["expiration", &(1200 + rng.below(200)).to_string()]]),
            // An event sent before, again.
            7 if !sent.is_empty() => verify(sent[rng.below(sent.len() as u64) as usize].clone()).unwrap(),
            _ => signed(k, at, 1, &[&["t", t]]),
        };
        let want = model.put(event.event());
        sent.push(event.event().clone());
        let got = store.put(event).await.unwrap();
        assert_eq!(outcome(&got), outcome(&want), "put at step {step}");
        if rng.below(30) == 0 {
            let id = sent[rng.below(sent.len() as u64) as usize].id;
            assert_eq!(store.remove(id).await.unwrap(), model.live.remove(&id).is_some(), "remove at step {step}");
        }
        if rng.below(50) == 0 {
            let at = Timestamp(1200 + rng.below(200));
            assert_eq!(store.sweep_expired(at).await.unwrap(), model.sweep(at), "sweep at step {step}");
        }
        if step % 50 == 49 {
            check(&store, &model, &sent, &format!("at step {step}"));
        }
        if step % 131 == 130 && (step / 131) % 2 == 0 {
            store.compact().await.unwrap();
            check(&store, &model, &sent, &format!("after a compaction at {step}"));
        } else if step % 131 == 130 {
            // Every other one is held after its swap: the writes and probes that follow meet the
            // catalogue and the index read through the compaction's moves.
            store.compact_until_swapped().await;
            assert!(store.remapping());
            held = true;
            check(&store, &model, &sent, &format!("in a compaction's remap at {step}"));
        }
        if step % 89 == 88 {
            store.shutdown().await.unwrap();
            store.until_alone().await;
            drop(store);
            if held {
                let checked = crate::store::check::check(dir.path(), 8).unwrap();
                assert_eq!(checked.problems, vec![], "a directory in the middle of a remap checks clean");
            }
            store = segmented(dir.path(), 7);
            check(&store, &model, &sent, &format!("after a reopen at {step}"));
            if std::mem::take(&mut held) {
                // The reopened store goes on with the remap by itself.
                store.release_remap().await;
                assert!(!store.remapping());
                check(&store, &model, &sent, &format!("after a remap finished after a reopen at {step}"));
            }
        }
    }
    assert!(model.live.len() > 50 && model.tombstones.len() > 5, "a sequence that exercised little");
}

#[tokio::test]
async fn a_clean_stop_writes_the_in_memory_index_out_so_the_next_start_reads_no_tail() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(9);
    let store = segmented(dir.path(), 1000);
    let events: Vec<VerifiedEvent> = (0..10).map(|i| signed(&k, 1000 + i, 1, &[&["t", "x"]])).collect();
    for e in &events {
        store.put(e.clone()).await.unwrap();
    }
    // Ten events, a segment holds a thousand: all in memory while it runs.
    assert_eq!(store.stats().unwrap().index_segments, 0);
    let replaced = signed(&k, 2000, 0, &[]);
    store.put(replaced.clone()).await.unwrap();
    store.put(signed(&k, 2001, 0, &[])).await.unwrap();
    store.remove(events[3].event().id).await.unwrap();
    store.shutdown().await.unwrap();
    drop(store);

    let store = segmented(dir.path(), 1000);
    let stats = store.stats().unwrap();
    assert_eq!((stats.index_segments, stats.events), (1, 10), "{stats:?}");
    let mut want: Vec<EventId> = events.iter().map(|e| e.event().id).filter(|id| *id != events[3].event().id).collect();
    want.reverse();
    assert_eq!(ids(&store, r##"{"#t":["x"]}"##), want);
    assert!(ids(&store, r#"{"kinds":[0]}"#).iter().all(|id| *id != replaced.event().id));
    assert_eq!(ids(&store, r#"{"kinds":[0]}"#).len(), 1);
    // A stop with nothing new in memory writes no empty segment.
    store.shutdown().await.unwrap();
    drop(store);
    assert_eq!(segmented(dir.path(), 1000).stats().unwrap().index_segments, 1);
}

#[tokio::test]
async fn a_start_after_a_crash_leaves_out_the_tails_removed_events_by_their_recorded_removals() {
    let k = Keys::test(21);
    let notes: Vec<VerifiedEvent> = (0..20).map(|i| signed(&k, 1000 + i, 1, &[&["t", "x"]])).collect();
    let (v1, v2) = (signed(&k, 1100, 0, &[]), signed(&k, 1101, 0, &[]));
    let deletion = signed(&k, 1200, 5, &[&["e", &notes[5].id.to_hex()]]);
    let expiring = signed(&k, 1300, 1, &[&["expiration", "1400"]]);
    let mut want: Vec<EventId> =
        notes.iter().map(|e| e.id).filter(|id| *id != notes[3].id && *id != notes[5].id).collect();
    want.extend([v2.id, deletion.id]);
    want.sort();
    for layout in [5u8, 4] {
        let dir = tempfile::tempdir().unwrap();
        let store = segmented(dir.path(), 1000);
        for e in notes.iter().chain([&v1, &v2, &deletion, &expiring]) {
            store.put(e.clone()).await.unwrap();
        }
        // Removed while in memory, each in its own way: by moderation, a newer version, a
        // deletion, the expiry sweep.
        assert!(store.remove(notes[3].id).await.unwrap());
        assert_eq!(store.sweep_expired(Timestamp(1500)).await.unwrap(), 1);
        assert_eq!(store.stats().unwrap().index_segments, 0, "everything is in the log's tail");
        // A crash: the writer stops without writing the in-memory index out (sled is flushed).
        drop(store);
        if layout == 4 {
            // As a layout-4 build left it: no removal of a tail event was recorded.
            let db = open_db(dir.path(), 8).unwrap();
            let tree = db.open_tree(EVENTS_TREE).unwrap();
            for item in tree.scan_prefix([keys::REMOVED]) {
                tree.remove(item.unwrap().0).unwrap();
            }
            tree.insert(keys::meta("schema"), &[4]).unwrap();
            db.flush().unwrap();
        }
        let store = segmented(dir.path(), 1000);
        let mut got = ids(&store, "{}");
        got.sort();
        assert_eq!(got, want, "layout {layout}: the tail read back without its removed events");
        assert_eq!(store.len(), want.len(), "layout {layout}");
        assert_eq!(store.count(&[Filter::default()], Timestamp(1500)).unwrap(), want.len() as u64);
        store.shutdown().await.unwrap();
    }
}

#[tokio::test]
async fn events_removed_between_a_compactions_copy_and_its_swap_stay_removed_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(22);
    let store = segmented(dir.path(), 1000);
    let notes: Vec<VerifiedEvent> = (0..10).map(|i| signed(&k, 1000 + i, 1, &[])).collect();
    for e in &notes {
        store.put(e.clone()).await.unwrap();
    }
    let control = &store.embedded().writes.shared.compaction;
    control.hold_swap.store(true, Ordering::Release);
    assert!(store.start_compaction());
    while !control.copied.load(Ordering::Acquire) {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // Copied, then removed before the swap; and one stored after the copy.
    assert!(store.remove(notes[2].id).await.unwrap());
    let later = signed(&k, 2000, 1, &[]);
    store.put(later.clone()).await.unwrap();
    assert!(store.remove(notes[4].id).await.unwrap());
    control.hold_swap.store(false, Ordering::Release);
    while store.is_compacting() {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert_eq!(store.stats().unwrap().log_generation, 1);
    let mut want: Vec<EventId> =
        notes.iter().map(|e| e.id).filter(|id| *id != notes[2].id && *id != notes[4].id).collect();
    want.push(later.id);
    want.sort();
    let mut got = ids(&store, "{}");
    got.sort();
    assert_eq!(got, want);
    // A crash: the new log's tail (all of it: nothing was written out) is read back at the start.
    store.until_alone().await;
    drop(store);
    let store = segmented(dir.path(), 1000);
    let mut got = ids(&store, "{}");
    got.sort();
    assert_eq!(got, want, "the removals made during the compaction are still removals after a crash");
    assert_eq!(store.len(), want.len());
}

/// The positions in sled's log that its snapshot files in `dir` cover (`snap.<lsn in hex>`).
fn snapshots(dir: &Path) -> Vec<u64> {
    let mut lsns: Vec<u64> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            u64::from_str_radix(name.strip_prefix("snap.")?, 16).ok()
        })
        .collect();
    lsns.sort_unstable();
    lsns
}

#[tokio::test]
async fn a_closed_store_leaves_sled_nothing_to_read_back_at_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let k = Keys::test(11);
    let write = |store: Store, from: u64| {
        let k = k.clone();
        async move {
            for i in 0..200 {
                store.put(signed(&k, from + i, 1, &[])).await.unwrap();
            }
            store
        }
    };
    // What the next open reads back: the log past the newest snapshot, which it then writes.
    let reopened = || {
        let before = snapshots(dir.path());
        drop(open_db(dir.path(), 8).unwrap());
        (before, snapshots(dir.path()))
    };
    // A shutdown alone: the next open reads the writes back.
    let store = write(Store::open(dir.path(), 8).unwrap(), 1000).await;
    store.shutdown().await.unwrap();
    drop(store);
    let (before, plain) = reopened();
    assert!(plain.last() > before.last(), "{before:?} -> {plain:?}");
    // A close while another handle is held: no checkpoint, and no wait for one.
    let store = write(Store::open(dir.path(), 8).unwrap(), 2000).await;
    let held = store.clone();
    store.close(8).await.unwrap();
    assert_eq!(snapshots(dir.path()), plain);
    drop(held);
    let (_, read_back) = reopened();
    assert!(read_back.last() > plain.last(), "{plain:?} -> {read_back:?}");
    // A close of the last handle: the checkpoint covers every write, the next open reads none.
    let store = write(Store::open(dir.path(), 8).unwrap(), 3000).await;
    store.close(8).await.unwrap();
    let (checkpointed, next) = reopened();
    assert!(checkpointed.last() > read_back.last(), "{read_back:?} -> {checkpointed:?}");
    assert_eq!(next, checkpointed);
    assert_eq!(ids(&Store::open(dir.path(), 8).unwrap(), r#"{"kinds":[1]}"#).len(), 600);
}

/// A store opened in `dir` with `n` kind-1 notes of `Keys::test(key)` stored, and the notes.
async fn stored_notes(dir: &Path, key: u8, n: u64) -> (Store, Vec<VerifiedEvent>) {
    let store = Store::open(dir, 8).unwrap();
    let k = Keys::test(key);
    let events: Vec<VerifiedEvent> = (0..n).map(|i| signed(&k, 1000 + i, 1, &[])).collect();
    for e in &events {
        store.put(e.clone()).await.unwrap();
    }
    (store, events)
}

// Two workers: a compaction's task let go by the shutdown drops its handles on one while the
// reopen waits for the directory's lock (blocking) on the other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_offline_compaction_finishes_a_remap_left_by_a_stop_first() {
    let dir = tempfile::tempdir().unwrap();
    let (store, want) = swapped_with_its_remap_held(dir.path(), 12).await;
    // Stopped after a compaction's swap, its remap unfinished: the next open goes on with it.
    store.shutdown().await.unwrap();
    store.until_alone().await;
    drop(store);

    let done = super::check::compact(dir.path(), 8).await.unwrap();
    assert!(done.after_bytes <= done.before_bytes, "{done:?}");
    let store = Store::open(dir.path(), 8).unwrap();
    assert_eq!(ids(&store, r#"{"kinds":[1]}"#), want);
}

/// A store in `dir` of 40 notes by key `key`, the first 20 of them removed, and a compaction
/// swapped in with its remap held; the ids still stored, newest first.
async fn swapped_with_its_remap_held(dir: &Path, key: u8) -> (Store, Vec<EventId>) {
    let (store, events) = stored_notes(dir, key, 40).await;
    for e in &events[..20] {
        store.remove(e.event().id).await.unwrap();
    }
    store.compact_until_swapped().await;
    (store, events[20..].iter().rev().map(|e| e.event().id).collect())
}

#[tokio::test]
async fn a_remap_step_that_fails_ends_the_wait_with_its_error_and_is_tried_again() {
    let dir = tempfile::tempdir().unwrap();
    let (store, want) = swapped_with_its_remap_held(dir.path(), 14).await;
    // A disk that is full while the catalogue is rewritten: whoever waits for the remap (`hearth
    // compact`, when an open resumed one) hears why instead of waiting for ever, and reads go on.
    store.embedded().writes.shared.compaction.fail_remap.store(true, Ordering::Release);
    store.embedded().writes.shared.compaction.hold_remap.store(false, Ordering::Release);
    let failed = store.until_compaction_ends().await;
    let want_error =
        "storage: the rewrite of the catalogue that a cut-off compaction left failed: storage: no space left on device";
    assert_eq!(failed.map_err(|e| e.to_string()), Err(want_error.to_string()));
    assert!(store.remapping());
    assert_eq!(ids(&store, r#"{"kinds":[1]}"#), want);
    // Once there is room again, the writer's next try finishes it.
    store.embedded().writes.shared.compaction.fail_remap.store(false, Ordering::Release);
    let waited = std::time::Instant::now();
    while store.remapping() {
        assert!(waited.elapsed() < Duration::from_secs(30), "the remap was not tried again");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    store.until_compaction_ends().await.unwrap();
    assert_eq!(ids(&store, r#"{"kinds":[1]}"#), want);
}

#[tokio::test]
async fn a_snapshot_that_a_kill_cut_off_is_removed_and_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    let (store, events) = stored_notes(dir.path(), 13, 30).await;
    store.close(8).await.unwrap();
    // What a kill in the middle of sled writing a snapshot leaves (at a stop's checkpoint, or at
    // any open): a partial file under a name sled reads first.
    let cut = dir.path().join("snap.FFFFFFFFFFFFFFF0.generating");
    std::fs::write(&cut, vec![7u8; 4096]).unwrap();

    let store = Store::open(dir.path(), 8).unwrap();
    assert!(!cut.exists());
    let want: Vec<EventId> = events.iter().rev().map(|e| e.event().id).collect();
    assert_eq!(ids(&store, r#"{"kinds":[1]}"#), want);
}

#[tokio::test]
async fn a_screened_viewer_is_served_no_event_of_a_group_withheld_from_it_on_any_read() {
    let store = Store::temporary().unwrap();
    let k = Keys::test(1);
    let open = signed(&k, 1000, 9, &[&["h", "open"]]);
    let secret = signed(&k, 1001, 9, &[&["h", "secret"]]);
    let state = signed(&k, 1002, 39000, &[&["d", "hidden"], &["name", "H"]]);
    let other_state = signed(&k, 1003, 39000, &[&["d", "open"]]);
    for e in [&open, &secret, &state, &other_state] {
        store.put(e.clone()).await.unwrap();
    }
    let screen = crate::protocol::GroupScreen {
        unreadable: ["secret".to_string()].into(),
        unseen: ["hidden".to_string()].into(),
    };
    let viewer = crate::protocol::PrivateKinds::default().viewer(None).screened(screen);
    assert!(viewer.screens());
    let at = Timestamp(2_000_000_000);
    let f = |json: &str| -> Filter { serde_json::from_str(json).unwrap() };
    // Filters counted and itemized from the index's lists alone, and ones that read records.
    for (probe, want) in [
        (r#"{"kinds":[9]}"#, vec![open.id]),
        (r##"{"#h":["secret"]}"##, vec![]),
        (r#"{"kinds":[39000]}"#, vec![other_state.id]),
        (r#"{}"#, vec![other_state.id, open.id]),
        (&format!(r#"{{"ids":["{}"]}}"#, secret.id), vec![]),
    ] {
        let filter = f(probe);
        let (got, _) = store.query_as(std::slice::from_ref(&filter), at, &viewer).unwrap();
        let got: Vec<EventId> = got
            .iter()
            .map(|e| {
                EventId::from_hex(
                    serde_json::from_str::<serde_json::Value>(e.as_str()).unwrap()["id"].as_str().unwrap(),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(got, want, "query {probe}");
        assert_eq!(
            store.count_as(std::slice::from_ref(&filter), at, &viewer).unwrap(),
            want.len() as u64,
            "count {probe}"
        );
        let items = store.items(&filter, at, &viewer, usize::MAX).unwrap().unwrap();
        let mut want_items: Vec<EventId> = want.clone();
        want_items.sort_by_key(|id| {
            [&open, &secret, &state, &other_state].iter().find(|e| e.id == *id).map(|e| e.created_at)
        });
        assert_eq!(items.iter().map(|(_, id)| *id).collect::<Vec<_>>(), want_items, "items {probe}");
    }
    assert!(store.get_as(&secret.id, at, &viewer).unwrap().is_none());
    assert!(store.get_as(&state.id, at, &viewer).unwrap().is_none());
    assert!(store.get_as(&open.id, at, &viewer).unwrap().is_some());
    // The operator, and a reader withheld nothing, see all four.
    assert_eq!(store.count_as(&[f("{}")], at, &Viewer::everything()).unwrap(), 4);
    let unscreened =
        crate::protocol::PrivateKinds::default().viewer(None).screened(crate::protocol::GroupScreen::default());
    assert!(!unscreened.screens());
    assert_eq!(store.items(&f("{}"), at, &unscreened, usize::MAX).unwrap().unwrap().len(), 4);
}
