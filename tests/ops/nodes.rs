//! Two nodes on one PostgreSQL and one Redis (`storage.backend = "postgres"`,
//! `limits.backend = "redis"`): the real `hearth` binary, twice, against a real PostgreSQL
//! (`hearth::testing::postgres`, Debian's package) and a real `redis-server`, each started by the
//! test on free ports with temporary directories. An event accepted by one node reaches the live
//! subscribers of the other and its REQ at once; ephemeral events cross; a NIP-29 member put on one
//! node writes on the other; a node killed mid-publishing loses no acknowledged event; Redis
//! restarted, the other node catches up; PostgreSQL stopped, writes are refused with `error:`
//! (never `OK true`) and REST answers 503, and both come back without a restart.

use std::time::Instant;

use serde_json::{Value, json};

use super::cluster::{Node, Redis, node_at};
use crate::common::*;
use hearth::protocol::{Event, Keys};
use hearth::testing::postgres::Postgres;

/// The same relay key on every node: they sign the same NIP-29 state and NIP-43 lists.
const RELAY_KEY: &str = "1111111111111111111111111111111111111111111111111111111111111111";

/// A node of the relay on `db` (PostgreSQL) and the Redis at `redis`.
pub(crate) fn pg_node(redis: &str, db: &str, name: &str) -> Node {
    let env = [
        ("HEARTH_STORAGE__BACKEND", "postgres"),
        ("HEARTH_STORAGE__POSTGRES_URL", db),
        ("HEARTH_RELAY__SECRET_KEY", RELAY_KEY),
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1000"),
        ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "100000"),
        ("HEARTH_LIMITS__AGENT__WS_EVENTS_PER_SEC", "1000"),
        ("HEARTH_LIMITS__AGENT__MESSAGES_PER_MIN", "100000"),
    ];
    node_at(redis, name, &env)
}

/// A PostgreSQL with an empty database for the relay; its URL.
async fn database() -> (Postgres, String) {
    install_postgres();
    let pg = Postgres::start(false).await.unwrap();
    let url = pg.database("relay").await.unwrap();
    (pg, url)
}

/// Two nodes (`node-a`, `node-b`) of one relay on a PostgreSQL and a Redis of their own, and the
/// runtime the test's clients run on.
struct Cluster {
    rt: tokio::runtime::Runtime,
    a: Node,
    b: Node,
    pg: Postgres,
    redis: Redis,
}

/// (Bind every field: one left to `..` would be dropped, its server stopped, at once.)
fn cluster() -> Cluster {
    let redis = Redis::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pg, db) = rt.block_on(database());
    let (a, b) = (pg_node(&redis.url(), &db, "node-a"), pg_node(&redis.url(), &db, "node-b"));
    Cluster { rt, a, b, pg, redis }
}

/// The next EVENT frame of subscription `sub` (other frames skipped), within a deadline.
async fn next_event(c: &mut Client, sub: &str) -> Value {
    let deadline = Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = c.recv_within(left).await.unwrap_or_else(|| panic!("no EVENT on {sub} in time"));
        if frame[0] == "EVENT" && frame[1] == sub {
            return frame;
        }
    }
}

/// Subscribes `c` to `filter` as `sub` and waits for its EOSE.
pub(crate) async fn subscribe(c: &mut Client, sub: &str, filter: Value) {
    c.send(json!(["REQ", sub, filter])).await;
    let deadline = Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = c.recv_within(left).await.expect("no EOSE in time");
        if frame == json!(["EOSE", sub]) {
            return;
        }
    }
}

fn to_group(who: &Keys, kind: u16, g: &str, tags: &[&[&str]], content: &str) -> Event {
    let h = ["h", g];
    let mut all: Vec<&[&str]> = vec![&h];
    all.extend_from_slice(tags);
    sign(who, now(), kind, &all, content)
}

#[test]
fn a_note_typing_and_a_group_member_cross_from_one_node_to_the_other_at_once() {
    let Cluster { rt, a, b, pg: _pg, redis: _redis } = cluster();
    rt.block_on(async {
        let (alice, bob) = (keys(1), keys(2));
        let mut on_b = Client::connect(&b.ws()).await;
        subscribe(&mut on_b, "live", json!({"kinds": [1, 20001]})).await;
        let mut on_a = Client::connect(&a.ws()).await;
        let note = sign(&alice, now(), 1, &[], "hello from node A");
        assert_ok(&on_a.publish(&note).await, &note.id.to_hex(), true, "");
        let got = next_event(&mut on_b, "live").await;
        assert_eq!(got[2]["id"], json!(note.id.to_hex()));
        assert_eq!(got[2]["content"], "hello from node A");
        // B's REQ serves it at once: one store.
        let mut reader = Client::connect(&b.ws()).await;
        assert_eq!(reader.req_ids("r", vec![json!({"ids": [note.id.to_hex()]})]).await, vec![note.id.to_hex()]);
        // Typing (ephemeral) crosses too, and is never stored.
        let typing = sign(&alice, now(), 20001, &[], "typing");
        assert_ok(&on_a.publish(&typing).await, &typing.id.to_hex(), true, "");
        assert_eq!(next_event(&mut on_b, "live").await[2]["id"], json!(typing.id.to_hex()));
        assert!(reader.req_ids("t", vec![json!({"ids": [typing.id.to_hex()]})]).await.is_empty());
        // A group made on A, Bob put in on A, Bob writes on B.
        let mut admin = Client::connect(&a.ws()).await;
        assert_eq!(admin.auth(&alice, &a.ws()).await[2], true);
        // Node B folds a group change in before it delivers it: its delivery is when B knows.
        let mut watch_b = Client::connect(&b.ws()).await;
        subscribe(&mut watch_b, "changes", json!({"kinds": [9002], "#h": ["club"]})).await;
        let edit = to_group(&alice, 9002, "club", &[&["name", "Club"], &["closed"], &["restricted"]], "");
        for e in [to_group(&alice, 9007, "club", &[], ""), edit.clone()] {
            assert_ok(&admin.publish(&e).await, &e.id.to_hex(), true, "");
        }
        assert_eq!(next_event(&mut watch_b, "changes").await[2]["id"], json!(edit.id.to_hex()));
        let mut bob_b = Client::connect(&b.ws()).await;
        assert_eq!(bob_b.auth(&bob, &b.ws()).await[2], true);
        let early = to_group(&bob, 9, "club", &[], "may I?");
        let refused = "restricted: not a member of this group: only its members write to it; join the group first";
        assert_eq!(bob_b.publish(&early).await, json!(["OK", early.id.to_hex(), false, refused]));
        let put = to_group(&alice, 9000, "club", &[&["p", &bob.public_key().to_hex()]], "");
        assert_ok(&admin.publish(&put).await, &put.id.to_hex(), true, "");
        let said = to_group(&bob, 9, "club", &[], "in on B");
        let mut tries = 0;
        poll("node B to take the member node A put in", STEP, async || {
            tries += 1;
            let said = to_group(&bob, 9, "club", &[], &format!("in on B, try {tries}"));
            let frame = bob_b.publish(&said).await;
            if frame[2] == true {
                return Ok(());
            }
            assert_eq!(frame[3], refused, "{frame}");
            Err(frame.to_string())
        })
        .await;
        assert_ok(&bob_b.publish(&said).await, &said.id.to_hex(), true, "");
        // The admin pins Bob's message on A: B serves the relay's 39005 naming it; Bob, a plain
        // member, may not pin on B.
        let pin = to_group(&alice, 9010, "club", &[&["e", &said.id.to_hex()]], "");
        assert_ok(&admin.publish(&pin).await, &pin.id.to_hex(), true, "");
        // Each REQ on a connection of its own: a subscription left open hears the state signed anew.
        let relay = Client::connect(&b.ws()).await.req("relay", vec![json!({"kinds": [39000], "#d": ["club"]})]).await
            [0]["pubkey"]
            .clone();
        let want = json!([["d", "club"], ["e", said.id.to_hex()]]);
        poll("node B to serve the relay's 39005", STEP, async || {
            let pins = Client::connect(&b.ws())
                .await
                .req("p", vec![json!({"kinds": [39005], "#d": ["club"], "authors": [relay.clone()]})])
                .await;
            match pins.first() {
                Some(p) if p["tags"] == want => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let mine = to_group(&bob, 9010, "club", &[], "");
        let refused = "restricted: only the group's admins and moderators may pin events";
        assert_eq!(bob_b.publish(&mine).await, json!(["OK", mine.id.to_hex(), false, refused]));
    });
}

#[test]
fn a_node_killed_mid_publishing_loses_no_acknowledged_event_and_the_other_serves_each() {
    let Cluster { rt, mut a, b, pg: _pg, redis: _redis } = cluster();
    rt.block_on(async {
        let alice = keys(1);
        let mut on_a = Client::connect(&a.ws()).await;
        let mut acked = Vec::new();
        for i in 0..40u64 {
            let e = sign(&alice, now() - 100 + i, 1, &[], &format!("before the kill {i}"));
            // Sent without waiting; the OKs that come back before the kill are the promises.
            on_a.send(json!(["EVENT", e])).await;
            acked.push(e.id.to_hex());
        }
        let mut promised = Vec::new();
        while promised.len() < 20 {
            let frame = on_a.recv().await;
            if frame[0] == "OK" && frame[2] == true {
                promised.push(frame[1].as_str().unwrap().to_string());
            }
        }
        a.running.0.kill().unwrap();
        a.running.0.wait().unwrap();
        let mut on_b = Client::connect(&b.ws()).await;
        let served = on_b.req_ids("all", vec![json!({"ids": promised.clone()})]).await;
        let (mut served, mut promised) = (served, promised);
        served.sort();
        promised.sort();
        assert_eq!(served, promised, "an event node A acknowledged is missing on node B");
        assert!(acked.len() >= promised.len());
    });
}

#[test]
fn redis_restarted_the_other_node_catches_up_and_postgres_stopped_refuses_writes_until_it_is_back() {
    let Cluster { rt, a, b, mut pg, mut redis } = cluster();
    rt.block_on(async {
        let alice = keys(1);
        let mut on_b = Client::connect(&b.ws()).await;
        subscribe(&mut on_b, "live", json!({"kinds": [1]})).await;
        let mut on_a = Client::connect(&a.ws()).await;
        redis.kill();
        let missed = sign(&alice, now(), 1, &[], "sent while Redis was away");
        assert_ok(&on_a.publish(&missed).await, &missed.id.to_hex(), true, "");
        redis.run();
        // The subscription that stayed open on B gets it from the store once Redis is back.
        assert_eq!(next_event(&mut on_b, "live").await[2]["id"], json!(missed.id.to_hex()));
        // Live delivery resumes.
        let after = sign(&alice, now(), 1, &[], "after Redis came back");
        assert_ok(&on_a.publish(&after).await, &after.id.to_hex(), true, "");
        assert_eq!(next_event(&mut on_b, "live").await[2]["id"], json!(after.id.to_hex()));

        pg.kill();
        let refused = sign(&alice, now(), 1, &[], "while PostgreSQL is down");
        let frame = on_a.publish(&refused).await;
        assert_eq!(frame[2], false, "{frame}");
        assert!(frame[3].as_str().unwrap().starts_with("error: "), "{frame}");
        let query = web()
            .post(format!("http://{}/api/v1/query", a.addr))
            .json(&json!({"filters": [{"kinds": [1]}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(query.status(), 503);
        pg.restart().await.unwrap();
        let back = sign(&alice, now(), 1, &[], "PostgreSQL is back");
        let mut probes = 0;
        poll("node A to take writes again", STEP * 2, async || {
            probes += 1;
            let probe = sign(&alice, now(), 1, &[], &format!("probe {probes}"));
            let frame = on_a.publish(&probe).await;
            if frame[2] == true { Ok(()) } else { Err(frame.to_string()) }
        })
        .await;
        assert_ok(&on_a.publish(&back).await, &back.id.to_hex(), true, "");
        let mut reader = Client::connect(&b.ws()).await;
        let ids = reader
            .req_ids("r", vec![json!({"ids": [missed.id.to_hex(), back.id.to_hex(), refused.id.to_hex()]})])
            .await;
        assert!(ids.contains(&missed.id.to_hex()) && ids.contains(&back.id.to_hex()));
        assert!(!ids.contains(&refused.id.to_hex()), "an event refused with error: was stored");
    });
}

#[test]
fn migrate_to_postgres_carries_every_event_member_group_setting_and_audit_entry() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (pg, db) = rt.block_on(database());
    let dir = tempfile::tempdir().unwrap();
    let admin = [("HEARTH_ADMIN__TOKEN", "t"), ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "100000")];
    let (alice, bob, carol) = (keys(1), keys(2), keys(3));
    let (mut running, addr) = start_with(dir.path(), &admin);
    let ws = format!("ws://{addr}");
    let admin_call = |method: reqwest::Method, path: String| {
        let url = format!("http://{addr}{path}");
        web().request(method, url).bearer_auth("t").json(&json!({})).send()
    };
    let mut before: Vec<String> = rt.block_on(async {
        let mut c = Client::connect(&ws).await;
        assert_eq!(c.auth(&alice, &ws).await[2], true);
        let note = sign(&alice, now() - 10, 1, &[], "carried over");
        let gone = sign(&alice, now() - 9, 1, &[], "deleted before the move");
        let profile = sign(&alice, now() - 8, 0, &[], r#"{"name":"alice"}"#);
        for e in [&note, &gone, &profile] {
            assert_ok(&c.publish(e).await, &e.id.to_hex(), true, "");
        }
        let deletion = sign(&alice, now() - 7, 5, &[&["e", &gone.id.to_hex()]], "");
        assert_ok(&c.publish(&deletion).await, &deletion.id.to_hex(), true, "");
        for e in [
            to_group(&alice, 9007, "club", &[], ""),
            to_group(&alice, 9002, "club", &[&["name", "Club"], &["closed"], &["restricted"]], ""),
            to_group(&alice, 9000, "club", &[&["p", &bob.public_key().to_hex()]], ""),
        ] {
            assert_ok(&c.publish(&e).await, &e.id.to_hex(), true, "");
        }
        // Members of the relay (and audit entries), by the admin API: from now on only they write.
        for who in [&bob, &carol] {
            let put = admin_call(reqwest::Method::PUT, format!("/admin/v1/members/{}", who.public_key().to_hex()));
            assert_eq!(put.await.unwrap().status(), 200);
        }
        c.req_ids("all", vec![json!({})]).await
    });
    assert_eq!(sigterm(&mut running).code(), Some(0));
    let out = hearth()
        .args(["migrate", "--to", "postgres"])
        .env("HEARTH_STORAGE__DATA_DIR", dir.path().join("data"))
        .env("HEARTH_STORAGE__POSTGRES_URL", &db)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let moved: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(moved["events"], moved["stored"], "{moved}");
    assert!(moved["settings"].as_u64().unwrap() >= 1 && moved["audit"].as_u64().unwrap() >= 1, "{moved}");
    // Into a database that holds events already: refused, naming the fix.
    let again = hearth()
        .args(["migrate", "--to", "postgres"])
        .env("HEARTH_STORAGE__DATA_DIR", dir.path().join("data"))
        .env("HEARTH_STORAGE__POSTGRES_URL", &db)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("move into an empty database"));
    let pg_env = [admin[0], admin[1], ("HEARTH_STORAGE__BACKEND", "postgres"), ("HEARTH_STORAGE__POSTGRES_URL", &db)];
    // `hearth export` reads the configured backend: every event, from PostgreSQL.
    let exported =
        hearth().arg("export").env("HEARTH_STORAGE__DATA_DIR", dir.path().join("data")).envs(pg_env).output().unwrap();
    assert_eq!(exported.status.code(), Some(0), "{}", String::from_utf8_lossy(&exported.stderr));
    assert_eq!(String::from_utf8_lossy(&exported.stdout).lines().count(), before.len());
    let (mut running, addr) = start_with(dir.path(), &pg_env);
    let ws = format!("ws://{addr}");
    rt.block_on(async {
        let mut c = Client::connect(&ws).await;
        let mut after = c.req_ids("all", vec![json!({})]).await;
        after.sort();
        before.sort();
        assert_eq!(after, before, "the events served after the move");
        // The group's member (a member of the relay) still writes; a stranger does not.
        let mut b = Client::connect(&ws).await;
        assert_eq!(b.auth(&bob, &ws).await[2], true);
        let said = to_group(&bob, 9, "club", &[], "still in");
        assert_ok(&b.publish(&said).await, &said.id.to_hex(), true, "");
        let stranger = sign(&keys(4), now(), 1, &[], "let me in");
        let refused =
            json!(["OK", stranger.id.to_hex(), false, "restricted: only members of this relay may publish here"]);
        assert_eq!(Client::connect(&ws).await.publish(&stranger).await, refused);
        let get = |path: &str| {
            let call = web().get(format!("http://{addr}{path}")).bearer_auth("t").send();
            async move { call.await.unwrap().json::<Value>().await.unwrap() }
        };
        let members = get("/admin/v1/members").await.to_string();
        assert!(members.contains(&carol.public_key().to_hex()), "{members}");
        let audit = get("/admin/v1/audit").await.to_string();
        assert!(audit.contains(&carol.public_key().to_hex()), "{audit}");
    });
    assert_eq!(sigterm(&mut running).code(), Some(0));
    // `hearth check` of the database: clean; then a row whose JSON is damaged and a deleted
    // event put back behind the store's back are found, and --repair removes them.
    let check = |repair: bool| {
        let mut command = hearth();
        command.arg("check").env("HEARTH_STORAGE__DATA_DIR", dir.path().join("data")).envs(pg_env);
        if repair {
            command.arg("--repair");
        }
        let out = command.output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (code, report) = check(false);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("\"problems\":0"), "{report}");
    rt.block_on(async {
        let client = pg.connect("relay").await.unwrap();
        let victim = hex::decode(&before[0]).unwrap();
        client.execute("UPDATE events SET json = 'not json' WHERE id = $1", &[&victim]).await.unwrap();
        let deleted = hex::decode(&before[1]).unwrap();
        let author: Vec<u8> =
            client.query_one("SELECT pubkey FROM events WHERE id = $1", &[&deleted]).await.unwrap().get(0);
        client.execute("INSERT INTO tombstones (id, deleter) VALUES ($1, $2)", &[&deleted, &author]).await.unwrap();
    });
    let (code, report) = check(false);
    assert_eq!(code, Some(1), "{report}");
    assert!(report.contains("unreadable_record") && report.contains("deleted_event_stored"), "{report}");
    let (code, report) = check(true);
    assert_eq!(code, Some(0), "{report}");
    assert!(report.contains("\"remaining\":0"), "{report}");
    assert_eq!(check(false).0, Some(0));
}

#[test]
fn the_cluster_example_configurations_load_with_postgres_and_redis() {
    for node in ["a", "b"] {
        let path = format!("{}/deploy/cluster/node-{node}.toml", env!("CARGO_MANIFEST_DIR"));
        let config = hearth::config::Config::load(Some(std::path::Path::new(&path)), &Default::default()).unwrap();
        assert_eq!(config.storage.backend, hearth::config::StorageBackend::Postgres, "{path}");
        assert_eq!(config.limits.backend, hearth::config::LimiterBackend::Redis, "{path}");
        assert_eq!(config.node.name, format!("node-{node}"));
    }
}

#[test]
fn a_private_message_crossing_nodes_reaches_its_recipient_and_no_stranger() {
    let Cluster { rt, a, b, pg: _pg, redis: _redis } = cluster();
    rt.block_on(async {
        let (alice, bob, mallory) = (keys(1), keys(2), keys(3));
        let filter = json!({"kinds": [1, 4, 1059]});
        // Bob (authenticated) and a stranger (authenticated as someone else) and an anonymous
        // reader, all on node B.
        let mut readers = Vec::new();
        for who in [Some(&bob), Some(&mallory), None] {
            let mut c = Client::connect(&b.ws()).await;
            if let Some(k) = who {
                assert_eq!(c.auth(k, &b.ws()).await[2], true);
            }
            subscribe(&mut c, "live", filter.clone()).await;
            readers.push(c);
        }
        let mut on_a = Client::connect(&a.ws()).await;
        assert_eq!(on_a.auth(&alice, &a.ws()).await[2], true);
        let bob_hex = bob.public_key().to_hex();
        let to_bob: &[&[&str]] = &[&["p", &bob_hex]];
        let dm = sign(&alice, now(), 4, to_bob, "for bob only");
        let wrap = sign(&keys(9), now(), 1059, to_bob, "sealed for bob");
        let note = sign(&alice, now(), 1, &[], "for everyone, after the private ones");
        for e in [&dm, &wrap, &note] {
            assert_ok(&on_a.publish(e).await, &e.id.to_hex(), true, "");
        }
        // Bob gets all three, in order; the others only the note (it came last from node A, so
        // nothing private is still on its way to them).
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push(next_event(&mut readers[0], "live").await[2]["id"].as_str().unwrap().to_string());
        }
        assert_eq!(got, vec![dm.id.to_hex(), wrap.id.to_hex(), note.id.to_hex()]);
        for reader in &mut readers[1..] {
            assert_eq!(next_event(reader, "live").await[2]["id"], json!(note.id.to_hex()));
        }
        // And B's stored answers hold the same line.
        let mut stranger = Client::connect(&b.ws()).await;
        assert_eq!(stranger.auth(&mallory, &b.ws()).await[2], true);
        assert_eq!(stranger.req_ids("s", vec![filter.clone()]).await, vec![note.id.to_hex()]);
    });
}
