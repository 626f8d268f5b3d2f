//! Several nodes on one Redis (`limits.backend = "redis"`): the real `hearth` binary, twice,
//! against a real `redis-server` each test starts on its own port in its own temporary directory
//! (`tests/redis/install.sh` installs Debian's package when it is missing). One quota across
//! nodes, live tuning seen by every node, the shared IP ceiling, and Redis going away and coming
//! back under both `limits.redis_unavailable` modes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;

/// A `redis-server` of one test's own.
pub(crate) struct Redis {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
}

fn install_redis() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/redis/install.sh");
        let status = Command::new("bash").arg(script).status().unwrap();
        assert!(status.success(), "tests/redis/install.sh could not install redis-server");
    });
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// True when a Redis answers PING on `port`.
fn pong(port: u16) -> bool {
    let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = tcp.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reply = [0u8; 7];
    tcp.write_all(b"PING\r\n").is_ok() && tcp.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n"
}

impl Redis {
    pub(crate) fn start() -> Redis {
        install_redis();
        let mut redis = Redis { child: None, port: free_port(), dir: tempfile::tempdir().unwrap() };
        redis.run();
        redis
    }

    /// Starts it (again) on its port, with nothing saved: a restart loses what it held.
    pub(crate) fn run(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let begin = Instant::now();
        while !pong(self.port) {
            assert!(begin.elapsed() < Duration::from_secs(10), "redis-server did not answer on {}", self.port);
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `kill -9`.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One node: the binary with the Redis backend, its own data directory, admin token `t`.
pub(crate) struct Node {
    pub(crate) running: Running,
    pub(crate) addr: String,
    _dir: tempfile::TempDir,
}

pub(crate) fn node_at(url: &str, name: &str, env: &[(&str, &str)]) -> Node {
    let dir = tempfile::tempdir().unwrap();
    let mut all =
        vec![("HEARTH_LIMITS__BACKEND", "redis"), ("HEARTH_LIMITS__REDIS_URL", url), ("HEARTH_NODE__NAME", name)];
    all.push(("HEARTH_ADMIN__TOKEN", "t"));
    // A loaded CI machine can take longer than the default 50 ms for one call, which would send
    // an admission to the node's own limiter and spoil an exact count; a killed Redis still
    // fails at once (the connection is refused).
    all.push(("HEARTH_LIMITS__REDIS_TIMEOUT_MS", "2000"));
    all.extend_from_slice(env);
    let (running, addr) = start_with(dir.path(), &all);
    Node { running, addr, _dir: dir }
}

fn node(redis: &Redis, name: &str, env: &[(&str, &str)]) -> Node {
    node_at(&redis.url(), name, env)
}

impl Node {
    pub(crate) fn ws(&self) -> String {
        format!("ws://{}", self.addr)
    }

    pub(crate) async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value, Option<String>) {
        let url = format!("http://{}{path}", self.addr);
        let (status, body, headers) = http_with_headers(&url, method, body, Some("t"), None).await;
        let retry = headers.get("retry-after").map(|v| v.to_str().unwrap().to_string());
        (status.as_u16(), body, retry)
    }

    async fn get(&self, path: &str) -> Value {
        let (status, body, _) = self.call(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "{path}: {body}");
        body
    }

    async fn redis_up(&self) -> bool {
        self.get("/admin/v1/relay").await["limiter"]["redis"]["up"] == true
    }

    /// The stored event `id`, by a REQ.
    async fn has(&self, id: &str) -> bool {
        let mut c = Client::connect(&self.ws()).await;
        c.req_ids("has", vec![json!({"ids": [id]})]).await == vec![id.to_string()]
    }
}

/// The seconds of a `…; retry in Ns` hint.
fn hinted_secs(frame: &Value) -> u64 {
    let msg = frame[3].as_str().unwrap();
    msg.rsplit_once("retry in ")
        .and_then(|(_, s)| s.trim_end_matches('s').parse().ok())
        .unwrap_or_else(|| panic!("{frame}"))
}

#[test]
fn a_client_alternating_between_two_nodes_gets_one_quota_and_truthful_hints_on_both() {
    let redis = Redis::start();
    // messages: 10 at once, one more every 6 s, whichever node bills.
    let env = [("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1000"), ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "10")];
    let (a, b) = (node(&redis, "node-a", &env), node(&redis, "node-b", &env));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut clients = [Client::connect(&a.ws()).await, Client::connect(&b.ws()).await];
        let alice = keys(1);
        let mut refused = Vec::new();
        for i in 0..20u64 {
            let e = sign(&alice, now() - 100 + i, 1, &[], &format!("note {i}"));
            let frame = clients[(i % 2) as usize].publish(&e).await;
            if i < 10 {
                assert_ok(&frame, &e.id.to_hex(), true, "");
            } else {
                assert_ok(&frame, &e.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in ");
                refused.push((i, e, frame));
            }
        }
        // The same answer from either node: ten refusals of the one shared bucket.
        for n in [&a, &b] {
            let usage = n.get("/admin/v1/usage/ip/127.0.0.1").await;
            assert_eq!(usage["refusals"]["messages"], 10, "{usage}");
        }
        // The hint B gave is good on A: wait it, and the next one is admitted there.
        let (i, e, frame) = refused.pop().unwrap();
        assert_eq!(i % 2, 1, "the last refusal was B's");
        let wait = hinted_secs(&frame);
        assert!((1..=6).contains(&wait), "{frame}");
        tokio::time::sleep(Duration::from_secs(wait)).await;
        assert_ok(&clients[0].publish(&e).await, &e.id.to_hex(), true, "");
        assert!(a.has(&e.id.to_hex()).await && !b.has(&e.id.to_hex()).await, "each node keeps its own store");
    });
}

#[test]
fn a_change_on_one_node_holds_on_the_other_and_each_audits_its_own_name() {
    let redis = Redis::start();
    let env = [("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1000"), ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "100")];
    let (a, b) = (node(&redis, "node-a", &env), node(&redis, "node-b", &env));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (status, body, _) =
            a.call(reqwest::Method::PATCH, "/admin/v1/limits", Some(json!({"human": {"messages_per_min": 3}}))).await;
        assert_eq!(status, 200, "{body}");
        poll("node B to take node A's limit", STEP, async || {
            let limits = b.get("/admin/v1/limits").await;
            let human = &limits["human"]["messages_per_min"];
            if *human == json!({"value": 3, "source": "admin"}) { Ok(()) } else { Err(human.to_string()) }
        })
        .await;
        let mut on_b = Client::connect(&b.ws()).await;
        let alice = keys(1);
        for i in 0..4u64 {
            let e = sign(&alice, now() - 10 + i, 1, &[], &format!("b {i}"));
            let frame = on_b.publish(&e).await;
            match i {
                0..3 => assert_ok(&frame, &e.id.to_hex(), true, ""),
                _ => assert_ok(&frame, &e.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in "),
            }
        }
        // Back to the configured values on A: B follows that too.
        let (status, _, _) = a.call(reqwest::Method::DELETE, "/admin/v1/limits/overrides", None).await;
        assert_eq!(status, 200);
        poll("node B to drop the override", STEP, async || {
            let human = b.get("/admin/v1/limits").await["human"]["messages_per_min"].clone();
            if human == json!({"value": 100, "source": "env"}) { Ok(()) } else { Err(human.to_string()) }
        })
        .await;
        // A ban on B refuses on A.
        let spammer = keys(9);
        let ban = json!({"method": "banpubkey", "params": [spammer.public_key().to_hex(), "spam"]});
        let (status, body, _) = b.call(reqwest::Method::POST, "/admin/v1/rpc", Some(ban)).await;
        assert_eq!((status, &body["result"]), (200, &json!(true)), "{body}");
        let mut on_a = Client::connect_from(&a.ws(), std::net::IpAddr::from([127, 0, 0, 2])).await;
        let mut tries = 0;
        poll("node A to refuse the key banned on B", STEP, async || {
            tries += 1;
            let e = sign(&spammer, now(), 1, &[], &format!("buy now {tries}"));
            let frame = on_a.publish(&e).await;
            if frame[2] == false {
                assert_ok(&frame, &e.id.to_hex(), false, "blocked: this pubkey is banned from this relay");
                Ok(())
            } else {
                Err(frame.to_string())
            }
        })
        .await;
        // Each node's audit log names the node the change was made on.
        let entry = |audit: Value, action: &str| {
            audit["entries"].as_array().unwrap().iter().find(|e| e["action"] == action).cloned().unwrap()
        };
        let on_a = entry(a.get("/admin/v1/audit").await, "limits.set");
        assert_eq!(
            (&on_a["node"], &on_a["target"], &on_a["new"]),
            (&json!("node-a"), &json!("human.messages_per_min"), &json!(3))
        );
        let on_b = entry(b.get("/admin/v1/audit").await, "banpubkey");
        assert_eq!(on_b["node"], "node-b", "{on_b}");
    });
}

#[test]
fn fresh_keys_from_one_address_share_its_ip_ceiling_across_nodes() {
    let redis = Redis::start();
    let env = [
        ("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1000"),
        ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "100"),
        ("HEARTH_LIMITS__IP__WS_EVENTS_PER_SEC", "1000"),
        ("HEARTH_LIMITS__IP__MESSAGES_PER_MIN", "6"),
    ];
    let (a, b) = (node(&redis, "node-a", &env), node(&redis, "node-b", &env));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut accepted = 0;
        for n in 0..12u8 {
            // A new key on a new connection each time, alternating nodes: rotation buys nothing.
            let node = if n % 2 == 0 { &a } else { &b };
            let mut c = Client::connect(&node.ws()).await;
            let k = keys(20 + n);
            let ok = c.auth(&k, &node.ws()).await;
            assert_eq!(ok[2], true, "{ok}");
            let e = sign(&k, now(), 1, &[], "rotating");
            let frame = c.publish(&e).await;
            if frame[2] == true {
                accepted += 1;
            } else {
                assert_ok(&frame, &e.id.to_hex(), false, "rate-limited: quota exceeded (messages); retry in ");
            }
        }
        assert_eq!(accepted, 6, "the address's ceiling, shared by both nodes");
        let ceiling = b.get("/admin/v1/usage/ip/127.0.0.1").await["ip_ceiling"].clone();
        assert_eq!((&ceiling["limits"]["messages"]["used"], &ceiling["tier"]), (&json!(6), &json!("ip")), "{ceiling}");
    });
}

#[test]
fn redis_killed_mid_traffic_falls_back_to_each_node_then_recovers_losing_no_acknowledged_event() {
    let mut redis = Redis::start();
    let env =
        [("HEARTH_LIMITS__HUMAN__WS_EVENTS_PER_SEC", "1000"), ("HEARTH_LIMITS__HUMAN__MESSAGES_PER_MIN", "100000")];
    let (a, b) = (node(&redis, "node-a", &env), node(&redis, "node-b", &env));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut clients = [Client::connect(&a.ws()).await, Client::connect(&b.ws()).await];
        let alice = keys(1);
        let mut acked: Vec<(usize, String)> = Vec::new();
        let mut publish = async |clients: &mut [Client; 2], i: u64| {
            let e = sign(&alice, now() - 1000 + i, 1, &[], &format!("through it all {i}"));
            let side = (i % 2) as usize;
            let frame = clients[side].publish(&e).await;
            assert_ok(&frame, &e.id.to_hex(), true, "");
            acked.push((side, e.id.to_hex()));
        };
        for i in 0..20 {
            publish(&mut clients, i).await;
        }
        redis.kill();
        // local: every node admits by its own limiter; the frames go on being answered.
        for i in 20..60 {
            publish(&mut clients, i).await;
        }
        for n in [&a, &b] {
            let relay = n.get("/admin/v1/relay").await;
            let limiter = &relay["limiter"];
            assert_eq!((&limiter["backend"], &limiter["redis_unavailable"]), (&json!("redis"), &json!("local")));
            assert_eq!(limiter["redis"]["up"], false, "{relay}");
            assert!(limiter["redis"]["reason"].as_str().unwrap().contains("Redis"), "{relay}");
        }
        let metrics = web_get(format!("http://{}/metrics", a.addr)).await.unwrap().text().await.unwrap();
        assert!(metrics.lines().any(|l| l == "hearth_redis_up 0"), "{metrics}");
        redis.run();
        poll("both nodes to reconnect to Redis", 3 * STEP, async || {
            let up = (a.redis_up().await, b.redis_up().await);
            if up == (true, true) { Ok(()) } else { Err(format!("up: {up:?}")) }
        })
        .await;
        for i in 60..80 {
            publish(&mut clients, i).await;
        }
        // The restarted Redis lost everything; the nodes gave it their shared state back, and a
        // change on one reaches the other again.
        let (status, _, _) =
            a.call(reqwest::Method::PATCH, "/admin/v1/limits", Some(json!({"agent": {"messages_per_min": 77}}))).await;
        assert_eq!(status, 200);
        poll("node B to follow node A after the restart", STEP, async || {
            let agent = b.get("/admin/v1/limits").await["agent"]["messages_per_min"].clone();
            if agent["value"] == 77 { Ok(()) } else { Err(agent.to_string()) }
        })
        .await;
        // Every acknowledged event is stored on the node that acknowledged it, and none on the
        // other (each node keeps its own store here).
        for (side, node) in [&a, &b].into_iter().enumerate() {
            let acked_here: std::collections::BTreeSet<String> =
                acked.iter().filter(|(s, _)| *s == side).map(|(_, id)| id.clone()).collect();
            let all: Vec<&String> = acked.iter().map(|(_, id)| id).collect();
            let mut c = Client::connect(&node.ws()).await;
            let held: std::collections::BTreeSet<String> =
                c.req_ids("held", vec![json!({"ids": all, "limit": 1000})]).await.into_iter().collect();
            assert_eq!(held, acked_here, "node {side}");
        }
    });
}

#[test]
fn with_refuse_an_unreachable_redis_refuses_billed_frames_with_an_error_and_close_still_works() {
    // Nothing listens on this port: Redis is down from the start.
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    let n = node_at(&url, "lonely", &[("HEARTH_LIMITS__REDIS_UNAVAILABLE", "refuse")]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut c = Client::connect(&n.ws()).await;
        let e = sign(&keys(1), now(), 1, &[], "hello");
        let unavailable = "error: the relay's shared quota store is unavailable; try again shortly";
        assert_eq!(c.publish(&e).await, json!(["OK", e.id.to_hex(), false, unavailable]));
        c.send(json!(["REQ", "s", {}])).await;
        assert_eq!(c.recv().await, json!(["CLOSED", "s", unavailable]));
        c.send(json!(["CLOSE", "s"])).await;
        c.send(json!(["COUNT", "c", {}])).await;
        assert_eq!(c.recv().await, json!(["CLOSED", "c", unavailable]));
        let resp = web()
            .post(format!("http://{}/api/v1/query", n.addr))
            .header("content-type", "application/json")
            .body(json!({"filters": [{}]}).to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 503);
        assert!(resp.headers().get("retry-after").is_some());
        assert_eq!(resp.json::<Value>().await.unwrap(), json!({"error": unavailable.trim_start_matches("error: ")}));
        // A live change cannot reach the other nodes, so it is not made.
        let (status, body, retry) =
            n.call(reqwest::Method::PATCH, "/admin/v1/limits", Some(json!({"human": {"messages_per_min": 5}}))).await;
        assert_eq!(status, 503, "{body}");
        assert!(
            body["error"].as_str().unwrap().starts_with("the nodes' shared state (Redis) cannot be reached"),
            "{body}"
        );
        assert!(retry.is_some());
        assert_eq!(n.get("/admin/v1/limits").await["human"]["messages_per_min"]["source"], "default");
        let relay = n.get("/admin/v1/relay").await;
        assert_eq!((&relay["node"], &relay["limiter"]["redis"]["up"]), (&json!("lonely"), &json!(false)), "{relay}");
    });
}

#[test]
fn the_redis_backend_without_a_usable_url_stops_start_up_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    for (url, problem) in [("", "must be set"), ("http://x", "is not a Redis URL"), ("rediss://x:1", "TLS")] {
        let out = hearth()
            .current_dir(dir.path())
            .env("HEARTH_LIMITS__BACKEND", "redis")
            .env("HEARTH_LIMITS__REDIS_URL", url)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{url}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("limits.redis_url") && err.contains(problem), "{url}: {err}");
    }
}

#[test]
fn uploads_on_two_nodes_bill_one_shared_byte_quota_and_a_check_bills_nothing() {
    use hearth::protocol::blossom::{self, Verb};
    let redis = Redis::start();
    // 4 KiB a day: one KiB comes back every 21,600 s.
    let env = [("HEARTH_LIMITS__HUMAN__UPLOAD_BYTES_PER_DAY", "4096")];
    let (a, b) = (node(&redis, "node-a", &env), node(&redis, "node-b", &env));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let k = keys(1);
        let fresh = std::sync::atomic::AtomicU64::new(0);
        let auth = || {
            let n = fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            blossom::header(&k, Verb::Upload, &[], hearth::protocol::Timestamp(now()), now() + 3600 + n)
        };
        let put = |n: &Node, size: usize, byte: u8, auth: String| {
            let url = format!("http://{}/upload", n.addr);
            async move {
                let resp = web().put(url).header("authorization", auth).body(vec![byte; size]).send().await.unwrap();
                let reason =
                    resp.headers().get("x-reason").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
                (resp.status().as_u16(), reason)
            }
        };
        assert_eq!(put(&a, 3 * 1024, 1, auth()).await.0, 201);
        // B knows what A billed: a check of 2 KiB says wait, and bills nothing.
        let check = web()
            .head(format!("http://{}/upload", b.addr))
            .header("authorization", auth())
            .header("x-content-length", "2048")
            .send()
            .await
            .unwrap();
        assert_eq!(check.status().as_u16(), 429);
        let hint: u64 = check.headers()["retry-after"].to_str().unwrap().parse().unwrap();
        // Redis's clock has moved on by the time it answers: a hint of 21,600 s less that (how much
        // less is the machine's business: only an hour's worth is ruled out).
        assert!((18_000..=21_600).contains(&hint), "{hint}");
        let (status, reason) = put(&b, 2 * 1024, 2, auth()).await;
        assert_eq!(status, 429);
        let words = reason
            .strip_prefix("rate-limited: quota exceeded (upload_bytes); retry in ")
            .unwrap_or_else(|| panic!("{reason}"));
        let secs: u64 = words.trim_end_matches('s').parse().unwrap();
        assert!((18_000..=21_600).contains(&secs) && secs <= hint, "{reason} after {hint}");
        // The KiB left is taken on either node, once.
        assert_eq!(put(&b, 1024, 3, auth()).await.0, 201);
        assert_eq!(put(&a, 1024, 4, auth()).await.0, 429);
    });
}
