//! Test harness: a real hearth on 127.0.0.1:0 with a temporary data directory, and a real
//! WebSocket client. Every network await has a timeout.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)] // test helpers: a failure is a test failure

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use hearth::config::Config;
use hearth::limiter::{Limiter, ManualClock};
use hearth::protocol::{Event, Keys, Kind, Timestamp};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

mod process;
#[allow(unused_imports)] // the ops binary starts processes; the it binary does not
pub use process::*;

/// The address a `hearth` child process (its stderr piped) logs `listening on <addr>` for; the
/// rest of its log is drained from then on, so the child never blocks on a full pipe.
pub fn listening_addr(child: &mut std::process::Child) -> String {
    use std::io::BufRead;
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let mut lines = std::io::BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("hearth exited before listening").unwrap();
        if let Some(i) = line.find("listening on ") {
            break line[i + "listening on ".len()..].trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines {});
    addr
}

/// The NIP-11 document served at `url`.
pub async fn nip11_at(url: &str) -> Value {
    let response = web().get(url).header("Accept", "application/nostr+json").timeout(STEP).send();
    tokio::time::timeout(STEP, response).await.unwrap().unwrap().json().await.unwrap()
}

/// How long any single network step may take.
pub const STEP: Duration = Duration::from_secs(10);

/// The HTTP client of every test: each request ends within six [`STEP`]s, body included (a
/// hang guard long enough for a large upload on a loaded machine, never a timing assertion).
pub fn web() -> reqwest::Client {
    reqwest::Client::builder().timeout(6 * STEP).build().unwrap()
}

/// A plain GET with [`web`].
pub async fn web_get(url: impl reqwest::IntoUrl) -> reqwest::Result<reqwest::Response> {
    web().get(url).send().await
}

/// The one way these tests wait for something: `check` is asked every 20 ms until it answers
/// `Ok`, whose value is returned; past `within` the test fails naming `what` and the last answer
/// `check` explained itself with (its `Err`). Never a fixed sleep, never a wall-clock assertion:
/// `within` only tells a hang from a slow machine.
pub async fn poll<T>(what: &str, within: Duration, mut check: impl AsyncFnMut() -> Result<T, String>) -> T {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let last = match check().await {
            Ok(done) => return done,
            Err(last) => last,
        };
        assert!(tokio::time::Instant::now() < deadline, "timed out after {within:?} waiting for {what}; last: {last}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A running relay: [`hearth::testing::TestRelay`] (the API other crates' tests use, so it is
/// exercised by every test here) with the production limits as its defaults, and the helpers
/// these tests share.
pub struct TestRelay {
    pub addr: SocketAddr,
    /// Where the admin API listens when `admin.bind` is set.
    pub admin_addr: Option<SocketAddr>,
    /// The limiter's clock: tests advance it instead of sleeping (unused on the real clock).
    pub clock: Arc<ManualClock>,
    /// The relay's limiter.
    pub limiter: Arc<Limiter>,
    relay: Option<hearth::testing::TestRelay>,
}

impl TestRelay {
    /// Starts a relay with default configuration, adjusted by `tweak`.
    pub async fn start(tweak: impl FnOnce(&mut Config)) -> TestRelay {
        let dir = tempfile::tempdir().unwrap();
        Self::start_in(dir, tweak).await
    }

    /// Starts a relay whose limiter uses the real clock (for clients that really wait).
    pub async fn start_real_clock(tweak: impl FnOnce(&mut Config)) -> TestRelay {
        Self::start_inner(tempfile::tempdir().unwrap(), tweak, true).await
    }

    /// Starts a relay on an existing data directory.
    pub async fn start_in(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config)) -> TestRelay {
        Self::start_inner(dir, tweak, false).await
    }

    async fn start_inner(dir: tempfile::TempDir, tweak: impl FnOnce(&mut Config), real_clock: bool) -> TestRelay {
        let postgres = match backend() {
            Backend::Sled => None,
            Backend::Postgres => Some(database_for(&dir.path().join("data")).await),
        };
        let tweak = move |c: &mut Config| {
            if let Some(url) = postgres {
                c.storage.backend = hearth::config::StorageBackend::Postgres;
                c.storage.postgres_url = url;
            }
            tweak(c)
        };
        let options = hearth::testing::Options {
            limits: Some(Config::default().limits),
            manual_clock: !real_clock,
            dir: Some(dir),
            ..Default::default()
        };
        let relay = hearth::testing::TestRelay::start_configured(options, tweak).await.unwrap();
        TestRelay {
            addr: relay.addr(),
            admin_addr: relay.admin_addr(),
            clock: relay.clock().cloned().unwrap_or_else(|| Arc::new(ManualClock::new())),
            limiter: relay.limiter().clone(),
            relay: Some(relay),
        }
    }

    /// Stops the relay gracefully and waits for it; returns the data directory.
    pub async fn stop(mut self) -> tempfile::TempDir {
        let relay = self.relay.take().unwrap();
        tokio::time::timeout(STEP, relay.stop()).await.unwrap().unwrap()
    }

    pub fn data_dir(&self) -> PathBuf {
        self.relay.as_ref().unwrap().data_dir()
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/", self.addr)
    }

    pub fn http_url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// The NIP-11 document.
    pub async fn nip11(&self) -> Value {
        nip11_at(&self.http_url("/")).await
    }

    pub async fn connect(&self) -> Client {
        Client::connect(&self.ws_url()).await
    }
}

/// The store a test relay runs on: `HEARTH_TEST_BACKEND=postgres` runs every relay of the test
/// process on PostgreSQL (one server for the process, a database per data directory, so that a
/// relay restarted on its directory finds its events); anything else, the embedded store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sled,
    Postgres,
}

pub fn backend() -> Backend {
    match std::env::var("HEARTH_TEST_BACKEND").as_deref() {
        Ok("postgres") => Backend::Postgres,
        _ => Backend::Sled,
    }
}

/// Installs Debian's PostgreSQL when its programs are missing (`tests/postgres/install.sh`).
pub fn install_postgres() {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/postgres/install.sh");
        let status = std::process::Command::new("bash").arg(script).status().unwrap();
        assert!(status.success(), "tests/postgres/install.sh could not install postgresql");
    });
}

/// Garage's binary, built once per machine when missing (`tests/garage/install.sh`: minutes on a
/// fresh machine, kept in `~/.cache/hearth-tools` after).
#[allow(dead_code)] // the ops binary runs Garage; the it binary does not
pub fn install_garage() -> PathBuf {
    static BIN: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BIN.get_or_init(|| {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/garage/install.sh");
        let out =
            std::process::Command::new("bash").arg(script).stderr(std::process::Stdio::inherit()).output().unwrap();
        assert!(out.status.success(), "tests/garage/install.sh could not build Garage");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
    .clone()
}

/// The PostgreSQL server of this test process (`HEARTH_TEST_BACKEND=postgres`).
pub async fn postgres() -> &'static hearth::testing::postgres::Postgres {
    install_postgres();
    static SERVER: tokio::sync::OnceCell<hearth::testing::postgres::Postgres> = tokio::sync::OnceCell::const_new();
    SERVER.get_or_init(|| async { hearth::testing::postgres::Postgres::start(false).await.unwrap() }).await
}

/// The URL of the database of the relay whose data directory is `dir`.
pub async fn database_for(dir: &std::path::Path) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(dir.to_string_lossy().as_bytes());
    postgres().await.database(&format!("h{}", hex::encode(&hash[..8]))).await.unwrap()
}

/// A WebSocket client speaking raw JSON frames.
pub struct Client {
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    /// The NIP-42 challenge the relay sent on connect.
    pub challenge: String,
}

impl Client {
    /// Connects from the source address `from` (loopback has a whole /8: 127.0.0.x are
    /// distinct clients to the relay) and takes the NIP-42 challenge.
    pub async fn connect_from(url: &str, from: std::net::IpAddr) -> Client {
        let addr: SocketAddr = url.trim_start_matches("ws://").trim_end_matches('/').parse().unwrap();
        let tcp = tcp_from(addr, from).await;
        let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::client_async(url, MaybeTlsStream::Plain(tcp)))
            .await
            .unwrap()
            .unwrap();
        Client::greeted(ws).await
    }

    /// Connects to the relay at `url` and takes its NIP-42 challenge.
    pub async fn connect(url: &str) -> Client {
        let (ws, _) = tokio::time::timeout(STEP, tokio_tungstenite::connect_async_with_config(url, None, true))
            .await
            .unwrap()
            .unwrap();
        Client::greeted(ws).await
    }

    async fn greeted(ws: WebSocketStream<MaybeTlsStream<TcpStream>>) -> Client {
        let mut client = Client { ws, challenge: String::new() };
        // NIP-42: the relay opens with its challenge.
        let first = client.recv().await;
        assert_eq!(first[0], "AUTH", "{first}");
        client.challenge = first[1].as_str().unwrap().to_string();
        client
    }

    /// Answers the relay's challenge as `keys`; returns the OK frame.
    pub async fn auth(&mut self, keys: &Keys, relay_url: &str) -> Value {
        let event = keys.sign(
            Timestamp::now(),
            Kind(22242),
            vec![vec!["relay".into(), relay_url.into()], vec!["challenge".into(), self.challenge.clone()]],
            "",
        );
        self.send(json!(["AUTH", event])).await;
        self.recv().await
    }

    pub async fn send_text(&mut self, text: &str) {
        tokio::time::timeout(STEP, self.ws.send(Message::text(text.to_string()))).await.unwrap().unwrap();
    }

    pub async fn send(&mut self, frame: Value) {
        self.send_text(&frame.to_string()).await;
    }

    /// The next text frame, parsed.
    pub async fn recv(&mut self) -> Value {
        self.recv_within(STEP).await.expect("timed out waiting for a frame")
    }

    /// Asserts that nothing was sent to this connection before a barrier: a COUNT whose answer
    /// (a COUNT, or a CLOSED when it is refused) comes after every frame the relay had produced
    /// for this connection before it read the COUNT (queued live events go out before the next
    /// frame is read). No timer: a slow machine cannot make it pass vacuously.
    pub async fn assert_nothing_before_barrier(&mut self, why: &str) {
        self.send(json!(["COUNT", "barrier", {"kinds": [65535]}])).await;
        let mut before = Vec::new();
        loop {
            let f = self.recv().await;
            if f[1] == "barrier" && (f[0] == "COUNT" || f[0] == "CLOSED") {
                break;
            }
            before.push(f);
        }
        assert!(before.is_empty(), "{why}: {before:?}");
    }

    /// Reads every frame until a barrier COUNT is answered (after a flood whose answers the
    /// caller does not count).
    pub async fn assert_nothing_before_barrier_or_flood(&mut self) {
        self.send(json!(["COUNT", "barrier", {"kinds": [65535]}])).await;
        loop {
            let f = self.recv().await;
            if f[1] == "barrier" && (f[0] == "COUNT" || f[0] == "CLOSED") {
                return;
            }
        }
    }

    /// The next frame, or None if nothing arrives within `wait`.
    pub async fn recv_within(&mut self, wait: Duration) -> Option<Value> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            let msg = tokio::time::timeout_at(deadline, self.ws.next()).await.ok()?;
            match msg.expect("connection closed").expect("read failed") {
                Message::Text(t) => return Some(serde_json::from_str(&t).unwrap()),
                Message::Close(_) => panic!("connection closed by relay"),
                _ => continue,
            }
        }
    }

    /// Sends an EVENT and returns its OK frame.
    pub async fn publish(&mut self, event: &Event) -> Value {
        self.send(json!(["EVENT", event])).await;
        self.recv().await
    }

    /// Sends a raw EVENT text and returns the next frame.
    pub async fn publish_raw(&mut self, event_json: &str) -> Value {
        self.send_text(&format!("[\"EVENT\",{event_json}]")).await;
        self.recv().await
    }

    /// Sends a REQ and collects events until EOSE; returns the event objects.
    pub async fn req(&mut self, sub: &str, filters: Vec<Value>) -> Vec<Value> {
        let mut frame = vec![json!("REQ"), json!(sub)];
        frame.extend(filters);
        self.send(Value::Array(frame)).await;
        let mut events = Vec::new();
        loop {
            let msg = self.recv().await;
            match msg[0].as_str() {
                Some("EVENT") if msg[1] == sub => events.push(msg[2].clone()),
                Some("EOSE") if msg[1] == sub => return events,
                _ => panic!("unexpected frame during REQ {sub}: {msg}"),
            }
        }
    }

    /// Ids of the events a REQ returns.
    pub async fn req_ids(&mut self, sub: &str, filters: Vec<Value>) -> Vec<String> {
        self.req(sub, filters).await.iter().map(|e| e["id"].as_str().unwrap().to_string()).collect()
    }
}

/// A TCP connection to `addr` from the source address `from`.
pub async fn tcp_from(addr: SocketAddr, from: std::net::IpAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::new(from, 0)).unwrap();
    tokio::time::timeout(STEP, socket.connect(addr)).await.unwrap().unwrap()
}

/// A deterministic test key.
pub fn keys(n: u8) -> Keys {
    Keys::from_bytes([n; 32]).unwrap()
}

pub fn now() -> u64 {
    Timestamp::now().0
}

/// Signs a kind/content/tags event at `at`.
pub fn sign(keys: &Keys, at: u64, kind: u16, tags: &[&[&str]], content: &str) -> Event {
    let tags = tags.iter().map(|t| t.iter().map(|s| s.to_string()).collect()).collect();
    keys.sign(Timestamp(at), Kind(kind), tags, content)
}

/// The ids of events as a relay sent them (EVENT frames' events, a REST answer's `events`).
pub fn ids(events: &[Value]) -> Vec<String> {
    events.iter().map(|e| e["id"].as_str().unwrap().to_string()).collect()
}

/// Asserts an OK frame for `id` with the given acceptance and message prefix.
pub fn assert_ok(frame: &Value, id: &str, accepted: bool, prefix: &str) {
    assert_eq!(frame[0], "OK", "{frame}");
    assert_eq!(frame[1], id, "{frame}");
    assert_eq!(frame[2], accepted, "{frame}");
    let msg = frame[3].as_str().unwrap();
    assert!(msg.starts_with(prefix), "expected {prefix:?}, got {frame}");
}

/// Quotas high enough never to refuse: for tests about something other than the limiter.
pub fn generous(c: &mut Config) {
    for tier in [&mut c.limits.human, &mut c.limits.agent, &mut c.limits.ip] {
        tier.ws_events_per_sec = 1_000_000;
        tier.ws_burst_window_secs = 10;
        tier.ws_reqs_per_sec = 1_000_000;
        tier.ws_reqs_burst_window_secs = 10;
        tier.messages_per_min = 100_000_000;
        tier.api_calls_per_min = 100_000_000;
    }
}

/// An HTTP call to `relay`: with a bearer token (`bearer`, the admin API's) and/or signed NIP-98
/// by `signer`; the status and the JSON body (`null` for an empty one; any other body that is
/// not JSON fails the test).
pub async fn http(
    relay: &TestRelay,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
    bearer: Option<&str>,
    signer: Option<&Keys>,
) -> (reqwest::StatusCode, Value) {
    http_at(&relay.http_url(path), method, body, bearer, signer).await
}

/// [`http`] at a whole URL (a relay this process did not start: the `hearth` binary's).
pub async fn http_at(
    url: &str,
    method: reqwest::Method,
    body: Option<Value>,
    bearer: Option<&str>,
    signer: Option<&Keys>,
) -> (reqwest::StatusCode, Value) {
    let (status, body, _) = http_with_headers(url, method, body, bearer, signer).await;
    (status, body)
}

/// [`http_at`], with the response's headers too (`Retry-After`, …): the one helper of the JSON
/// APIs these tests call; the others build on it.
pub async fn http_with_headers(
    url: &str,
    method: reqwest::Method,
    body: Option<Value>,
    bearer: Option<&str>,
    signer: Option<&Keys>,
) -> (reqwest::StatusCode, Value, reqwest::header::HeaderMap) {
    let text = body.as_ref().map(Value::to_string).unwrap_or_default();
    let mut headers: Vec<(&str, String)> = Vec::new();
    if body.is_some() {
        headers.push(("content-type", "application/json".into()));
    }
    if let Some(token) = bearer {
        headers.push(("authorization", format!("Bearer {token}")));
    }
    if let Some(keys) = signer {
        let request = hearth::protocol::nip98::Request { url, method: method.as_str(), body: text.as_bytes() };
        headers.push(("authorization", hearth::protocol::nip98::header(keys, &request, Timestamp::now()).unwrap()));
    }
    let headers: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let (status, headers, bytes) =
        request(url, method.clone(), &headers, body.is_some().then(|| text.into_bytes())).await;
    let text = String::from_utf8_lossy(&bytes);
    // An empty body is `null`; any other body must be JSON (a test that gets HTML or a truncated
    // body fails here, naming it).
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{method} {url}: {status}: not JSON ({e}): {text}"))
    };
    (status, body, headers)
}

/// The one HTTP request every helper here makes: `headers` as given, `body` as its bytes; the
/// status, the headers and the body's bytes. Each await has its deadline ([`STEP`]).
pub async fn request(
    url: &str,
    method: reqwest::Method,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> (reqwest::StatusCode, reqwest::header::HeaderMap, Vec<u8>) {
    let mut req = web().request(method, url);
    for (name, value) in headers {
        req = req.header(*name, *value);
    }
    if let Some(body) = body {
        req = req.body(body);
    }
    let resp = tokio::time::timeout(STEP, req.send()).await.unwrap().unwrap();
    let (status, headers) = (resp.status(), resp.headers().clone());
    let bytes = tokio::time::timeout(STEP, resp.bytes()).await.unwrap().unwrap();
    (status, headers, bytes.to_vec())
}

/// The actions of the relay's audit log, newest first (the admin API, with `token`).
pub async fn audit_actions(relay: &TestRelay, token: &str) -> Vec<String> {
    let (_, audit) = http(relay, reqwest::Method::GET, "/admin/v1/audit", None, Some(token), None).await;
    audit["entries"].as_array().unwrap().iter().filter_map(|e| e["action"].as_str().map(String::from)).collect()
}
