//! Network partitions between the nodes and what they share: two `hearth` nodes, their
//! PostgreSQL or their Redis in a network namespace the test makes itself (`ip netns` and a veth
//! pair per node, so that one node's link is cut while the other's holds), cut and healed while
//! clients publish and read. A cut is a blackhole route at both ends of the link: packets vanish,
//! nothing is reset or refused, as on a real partition, and what TCP was retransmitting arrives
//! once the routes go. A second of latency is a relay in the test that holds each byte from the
//! node for a second before passing it on: this kernel has no `sch_netem` (`tc qdisc … netem` is
//! "Specified qdisc kind is unknown"), so `tc` cannot delay.
//!
//! Needs root and iproute2 (`ip`, installed by `tests/netns/install.sh` when missing): without
//! root each test says so and fails.

use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::cluster::Node;
use super::nodes::{pg_node as node, subscribe};
use crate::common::*;
use hearth::testing::postgres::Postgres;

/// How long a cut may take to show: PostgreSQL calls give up after 10 s of silence, Redis
/// calls after `limits.redis_timeout_ms` (2 s here).
const CUT: Duration = Duration::from_secs(40);

fn run(args: &[&str]) {
    let out = Command::new(args[0]).args(&args[1..]).output();
    match out {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("{args:?}: {}", String::from_utf8_lossy(&out.stderr)),
        Err(e) => panic!("{args:?}: {e} (these tests need root and iproute2: apt-get install iproute2)"),
    }
}

/// These tests make network namespaces: root and iproute2, or a clear failure.
fn require_root_and_ip() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    assert!(root, "the partition tests make network namespaces: run them as root");
    let install = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/netns/install.sh");
    let installed = Command::new("bash").arg(install).status().is_ok_and(|s| s.success());
    let found = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    assert!(installed && found, "the partition tests need `ip` ({install} could not install iproute2)");
}

/// One veth pair: the host's end and the namespace's, each with its address.
struct Link {
    host_if: String,
    host_ip: String,
    ns_ip: String,
}

/// A network namespace of the test's own, reached from the host through one link per node;
/// removed (its links with it) when dropped.
struct Namespace {
    name: String,
    links: Vec<Link>,
}

impl Namespace {
    fn new(links: usize) -> Namespace {
        require_root_and_ip();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed) % 100;
        let pid = std::process::id();
        let name = format!("hearth-{pid}-{n}");
        run(&["ip", "netns", "add", &name]);
        let ns = Namespace { name, links: Vec::new() };
        ns.exec(&["ip", "link", "set", "lo", "up"]);
        let mut ns = ns;
        for i in 0..links {
            let tag = format!("{:05}{n:02}{i}", pid % 100_000);
            let (host_if, ns_if) = (format!("hh{tag}"), format!("hn{tag}"));
            let net = format!("10.{}.{}.{}", 100 + n, pid % 250, 4 * i);
            let base: Vec<&str> = net.rsplitn(2, '.').collect();
            let (host_ip, ns_ip) = (format!("{}.{}", base[1], 4 * i + 1), format!("{}.{}", base[1], 4 * i + 2));
            run(&["ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if]);
            run(&["ip", "link", "set", &ns_if, "netns", &ns.name]);
            run(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
            run(&["ip", "link", "set", &host_if, "up"]);
            ns.exec(&["ip", "addr", "add", &format!("{ns_ip}/30"), "dev", &ns_if]);
            ns.exec(&["ip", "link", "set", &ns_if, "up"]);
            ns.links.push(Link { host_if, host_ip, ns_ip });
        }
        ns
    }

    fn exec(&self, args: &[&str]) {
        let mut all = vec!["ip", "netns", "exec", &self.name];
        all.extend_from_slice(args);
        run(&all);
    }

    /// The address of the namespace on link `i`.
    fn ip(&self, i: usize) -> &str {
        &self.links[i].ns_ip
    }

    /// Link `i` loses every packet, both ways.
    fn cut(&self, i: usize) {
        let link = &self.links[i];
        run(&["ip", "route", "add", "blackhole", &format!("{}/32", link.ns_ip)]);
        self.exec(&["ip", "route", "add", "blackhole", &format!("{}/32", link.host_ip)]);
    }

    /// Link `i` carries everything again, at once.
    fn heal(&self, i: usize) {
        let link = &self.links[i];
        run(&["ip", "route", "del", "blackhole", &format!("{}/32", link.ns_ip)]);
        self.exec(&["ip", "route", "del", "blackhole", &format!("{}/32", link.host_ip)]);
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.name]).output();
        for link in &self.links {
            let _ = Command::new("ip").args(["link", "del", &link.host_if]).output();
            let _ = Command::new("ip").args(["route", "del", "blackhole", &format!("{}/32", link.ns_ip)]).output();
        }
    }
}

/// A relay on 127.0.0.1 to `target` that holds every byte from its client for `delay` before
/// passing it on (the answers come back at once): a link with that much latency. Its tasks end
/// with the runtime.
async fn delayed(target: String, delay: Duration) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = tokio::net::TcpStream::connect(&target).await else { continue };
            let (mut from_client, mut to_client) = client.into_split();
            let (mut from_server, mut to_server) = server.into_split();
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(tokio::time::Instant, Vec<u8>)>();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                while let Ok(n) = from_client.read(&mut buf).await {
                    if n == 0 || tx.send((tokio::time::Instant::now() + delay, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                while let Some((due, bytes)) = rx.recv().await {
                    tokio::time::sleep_until(due).await;
                    if to_server.write_all(&bytes).await.is_err() {
                        break;
                    }
                }
            });
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_server, &mut to_client).await;
            });
        }
    });
    addr
}

/// A `redis-server` in a namespace, on all of its addresses; killed when dropped.
struct NsRedis {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl NsRedis {
    fn start(ns: &Namespace) -> NsRedis {
        let install = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis/install.sh");
        assert!(Command::new("bash").arg(install).status().unwrap().success(), "{install}");
        let dir = tempfile::tempdir().unwrap();
        let port = 6379;
        let child = Command::new("ip")
            .args(["netns", "exec", &ns.name, "redis-server", "--port", &port.to_string(), "--bind", "0.0.0.0"])
            .args(["--protected-mode", "no", "--save", "", "--appendonly", "no"])
            // A subscriber that cannot take what it is sent is dropped soon (Redis's default
            // allows 8 MB for a minute): a partition that outlasts the buffer ends the node's
            // subscription, and the node must notice and catch up from the store.
            .args(["--client-output-buffer-limit", "pubsub 16kb 8kb 1", "--dir"])
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let redis = NsRedis { child, port, _dir: dir };
        let begin = Instant::now();
        while std::net::TcpStream::connect((ns.ip(0), port)).is_err() {
            assert!(begin.elapsed() < STEP, "redis-server did not listen in {}", ns.name);
            std::thread::sleep(Duration::from_millis(20));
        }
        redis
    }

    fn url(&self, ip: &str) -> String {
        format!("redis://{ip}:{}/0", self.port)
    }
}

impl Drop for NsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ids of the EVENT frames of `sub`, in order, until `last` arrives (within `within`).
async fn events_until(c: &mut Client, sub: &str, last: &str, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut ids = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let frame = c.recv_within(left).await.unwrap_or_else(|| panic!("{last} did not arrive; got {ids:?}"));
        if frame[0] == "EVENT" && frame[1] == sub {
            let id = frame[2]["id"].as_str().unwrap().to_string();
            ids.push(id.clone());
            if id == last {
                return ids;
            }
        }
    }
}

/// Two nodes of one relay on one PostgreSQL and one Redis, one of the two in a namespace of the
/// test's own, each node over its own link; fields drop in order, the nodes first.
struct Apart {
    a: Node,
    b: Node,
    rt: tokio::runtime::Runtime,
    _services: (Postgres, Option<super::cluster::Redis>, Option<NsRedis>),
    ns: Namespace,
}

/// Redis in the namespace (link 0 node A's, link 1 node B's), PostgreSQL on this host.
fn redis_apart() -> Apart {
    install_postgres();
    let ns = Namespace::new(2);
    let redis = NsRedis::start(&ns);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pg = rt.block_on(Postgres::start(false)).unwrap();
    let db = rt.block_on(pg.database("relay")).unwrap();
    let (a, b) = (node(&redis.url(ns.ip(0)), &db, "node-a"), node(&redis.url(ns.ip(1)), &db, "node-b"));
    Apart { a, b, rt, _services: (pg, None, Some(redis)), ns }
}

/// PostgreSQL in the namespace (link 0 node A's, through a relay holding each of A's bytes for
/// `latency` when given; link 1 node B's), Redis on this host.
fn postgres_apart(latency: Option<Duration>) -> Apart {
    install_postgres();
    let ns = Namespace::new(2);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pg = rt.block_on(Postgres::start_in_namespace(&ns.name, ns.ip(0))).unwrap();
    rt.block_on(pg.database("relay")).unwrap();
    let redis = super::cluster::Redis::start();
    let url_a = match latency {
        Some(latency) => {
            let slow = rt.block_on(delayed(format!("{}:{}", ns.ip(0), pg.port()), latency));
            format!("postgres://hearth@{slow}/relay")
        }
        None => pg.url_at(ns.ip(0), "relay"),
    };
    let (a, b) = (node(&redis.url(), &url_a, "node-a"), node(&redis.url(), &pg.url_at(ns.ip(1), "relay"), "node-b"));
    Apart { a, b, rt, _services: (pg, Some(redis), None), ns }
}

#[test]
fn a_node_cut_from_redis_catches_up_once_healed_without_a_duplicate_and_bills_locally_meanwhile() {
    let Apart { a, b, rt, ns, .. } = &redis_apart();
    rt.block_on(async {
        let (alice, bob) = (keys(1), keys(2));
        let mut on_b = Client::connect(&b.ws()).await;
        subscribe(&mut on_b, "live", json!({"kinds": [1]})).await;
        let (mut on_a, mut writer_b) = (Client::connect(&a.ws()).await, Client::connect(&b.ws()).await);
        ns.cut(1);
        let mut sent = Vec::new();
        // More than the kernel's send buffer and Redis's output limit for B's subscription.
        for n in 0..150 {
            let missed = sign(
                &alice,
                now(),
                1,
                &[],
                &format!("sent on A while B is cut off from Redis, {n}: {}", "x".repeat(300)),
            );
            assert_ok(&on_a.publish(&missed).await, &missed.id.to_hex(), true, "");
            sent.push(missed.id.to_hex());
        }
        // B bills its own writes while it cannot reach Redis (`limits.redis_unavailable =
        // "local"`, the default), and says so.
        let own = sign(&bob, now(), 1, &[], "sent on B while it is cut off");
        assert_ok(&writer_b.publish(&own).await, &own.id.to_hex(), true, "");
        sent.push(own.id.to_hex());
        poll("node B to see Redis gone", CUT, async || {
            let (status, body, _) = b.call(reqwest::Method::GET, "/admin/v1/relay", None).await;
            if status == 200 && body["limiter"]["redis"]["up"] == false { Ok(()) } else { Err(body.to_string()) }
        })
        .await;
        ns.heal(1);
        // Once healed, live delivery resumes: the sentinel comes, and before it every event sent
        // during the cut, each once.
        let sentinel = poll("a note from A to reach B live", CUT, async || {
            let note = sign(&alice, now(), 1, &[], "after the heal");
            assert_ok(&on_a.publish(&note).await, &note.id.to_hex(), true, "");
            Ok::<_, String>(note.id.to_hex())
        })
        .await;
        let got = events_until(&mut on_b, "live", &sentinel, CUT).await;
        for id in &sent {
            assert_eq!(got.iter().filter(|g| *g == id).count(), 1, "{id} in {got:?}");
        }
        let mut unique = got.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), got.len(), "an event delivered twice: {got:?}");
    });
}

#[test]
fn a_node_cut_from_postgres_refuses_with_error_never_ok_and_takes_writes_again_once_healed() {
    let Apart { a, b, rt, ns, .. } = &postgres_apart(None);
    rt.block_on(async {
        let alice = keys(1);
        let (mut on_a, mut on_b) = (Client::connect(&a.ws()).await, Client::connect(&b.ws()).await);
        let before = sign(&alice, now(), 1, &[], "before the cut");
        assert_ok(&on_a.publish(&before).await, &before.id.to_hex(), true, "");
        ns.cut(0);
        let refused = sign(&alice, now(), 1, &[], "while A cannot reach PostgreSQL");
        on_a.send(json!(["EVENT", refused])).await;
        let frame = on_a.recv_within(CUT).await.expect("the write hung: no answer");
        assert_eq!(frame[2], false, "{frame}");
        assert!(frame[3].as_str().unwrap().starts_with("error: "), "{frame}");
        // B's own link holds: it writes and reads meanwhile.
        let on_other = sign(&alice, now(), 1, &[], "on B during A's cut");
        assert_ok(&on_b.publish(&on_other).await, &on_other.id.to_hex(), true, "");
        ns.heal(0);
        // Without a restart: each probe on a connection of its own, as a client that gave up on a
        // silent one would open.
        let started = Instant::now();
        let mut probes = 0;
        poll("node A to take writes again", CUT, async || {
            probes += 1;
            let probe = sign(&alice, now(), 1, &[], &format!("probe {probes}"));
            let mut c = Client::connect(&a.ws()).await;
            c.send(json!(["EVENT", probe])).await;
            let frame = c.recv_within(STEP).await;
            eprintln!("probe {probes} at {:?}: {frame:?}", started.elapsed());
            match frame {
                Some(frame) if frame[2] == true => Ok(()),
                other => Err(format!("{other:?}")),
            }
        })
        .await;
        let mut reader = Client::connect(&b.ws()).await;
        let wanted = [before.id.to_hex(), refused.id.to_hex(), on_other.id.to_hex()];
        let ids = reader.req_ids("r", vec![json!({"ids": wanted})]).await;
        assert!(ids.contains(&before.id.to_hex()) && ids.contains(&on_other.id.to_hex()), "{ids:?}");
        assert!(!ids.contains(&refused.id.to_hex()), "an event answered error: was stored");
    });
}

#[test]
fn a_second_of_latency_to_postgres_slows_its_writes_and_stops_no_reader() {
    let Apart { a, b, rt, .. } = &postgres_apart(Some(Duration::from_secs(1)));
    rt.block_on(async {
        let alice = keys(1);
        let seed = sign(&alice, now(), 1, &[], "there before the latency");
        let mut on_a = Client::connect(&a.ws()).await;
        assert_ok(&on_a.publish(&seed).await, &seed.id.to_hex(), true, "");
        let writers: Vec<_> = (0..4u8)
            .map(|w| {
                let url = a.ws();
                tokio::spawn(async move {
                    let mut c = Client::connect(&url).await;
                    for n in 0..3 {
                        let e = sign(&keys(10 + w), now(), 1, &[], &format!("slow write {w}.{n}"));
                        assert_ok(&c.publish(&e).await, &e.id.to_hex(), true, "");
                    }
                })
            })
            .collect();
        // Meanwhile readers on both nodes are answered, each read whole.
        for (node, which) in [(&a, "A"), (&b, "B")] {
            let mut reader = Client::connect(&node.ws()).await;
            for n in 0..3 {
                let ids = reader.req_ids(&format!("r{n}"), vec![json!({"ids": [seed.id.to_hex()]})]).await;
                assert_eq!(ids, vec![seed.id.to_hex()], "read {n} on {which}");
            }
        }
        for w in writers {
            tokio::time::timeout(CUT * 2, w).await.expect("a slow writer did not finish").unwrap();
        }
    });
}

#[test]
fn two_nodes_writing_one_address_across_a_redis_partition_agree_on_the_newest_once_healed() {
    let Apart { a, b, rt, ns, .. } = &redis_apart();
    rt.block_on(async {
        let alice = keys(1);
        let (mut on_a, mut on_b) = (Client::connect(&a.ws()).await, Client::connect(&b.ws()).await);
        let mut live_a = Client::connect(&a.ws()).await;
        let filter = json!({"authors": [alice.public_key().to_hex()], "kinds": [0, 30023]});
        subscribe(&mut live_a, "live", filter.clone()).await;
        ns.cut(1);
        let at = now();
        let (profile_old, profile_new) =
            (sign(&alice, at, 0, &[], r#"{"name":"old"}"#), sign(&alice, at + 1, 0, &[], r#"{"name":"new"}"#));
        let (post_new, post_old) =
            (sign(&alice, at + 1, 30023, &[&["d", "x"]], "newer"), sign(&alice, at, 30023, &[&["d", "x"]], "older"));
        assert_ok(&on_a.publish(&profile_old).await, &profile_old.id.to_hex(), true, "");
        assert_ok(&on_b.publish(&profile_new).await, &profile_new.id.to_hex(), true, "");
        assert_ok(&on_a.publish(&post_new).await, &post_new.id.to_hex(), true, "");
        let frame = on_b.publish(&post_old).await;
        assert_eq!(frame, json!(["OK", post_old.id.to_hex(), false, "duplicate: a newer version is stored"]));
        ns.heal(1);
        // A's live subscriber hears B's newer profile once B reaches Redis again.
        let got = events_until(&mut live_a, "live", &profile_new.id.to_hex(), CUT).await;
        assert!(!got.contains(&post_old.id.to_hex()), "{got:?}");
        for node in [&a, &b] {
            let mut reader = Client::connect(&node.ws()).await;
            let ids = reader.req_ids("r", vec![filter.clone()]).await;
            let mut want = vec![profile_new.id.to_hex(), post_new.id.to_hex()];
            want.sort();
            let mut ids = ids;
            ids.sort();
            assert_eq!(ids, want, "node {}", node.addr);
        }
    });
}
