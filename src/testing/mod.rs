//! A real hearth inside other projects' tests: [`TestRelay::start`] binds `127.0.0.1:0` with a
//! temporary data directory and gives back its URLs; dropping it shuts the relay down and removes
//! the directory.
//!
//! Owns nothing of the relay itself: it is the same [`Relay`] the binary serves (protocol, store,
//! limiter), configured for a test. Quotas are off unless [`Options::limits`] says otherwise, and
//! the limiter can run on a [`ManualClock`] so that a test of a client's back-off moves time
//! instead of sleeping.
//!
//! ```
//! use hearth::testing::{Options, TestRelay};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let relay = TestRelay::start(Options::default()).await?;
//! let keys = hearth::protocol::Keys::from_bytes([7; 32])?;
//! let note = keys.sign(hearth::protocol::Timestamp::now(), hearth::protocol::Kind(1), vec![], "hello");
//!
//! // The client under test: here hearth's own, over WebSocket.
//! let client = hearth::client::Session::connect(&relay.ws_url(), None, Default::default()).await?;
//! assert_eq!(client.publish(note.clone()).await?, "");
//! let stored = client.fetch(vec![serde_json::from_str(r#"{"kinds":[1]}"#)?]).await?;
//! assert_eq!(stored[0]["id"], note.id.to_hex());
//! # Ok(())
//! # }
//! ```

use std::io::Cursor;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::config::{Config, LimitsConfig};
use crate::limiter::{Clock, Limiter, ManualClock, SystemClock};
use crate::offline::ImportSummary;
use crate::protocol::Event;
use crate::relay::{Relay, RunError};

pub mod garage;
pub mod postgres;

/// The data directory's name inside the temporary directory: beside it a test may keep files
/// of its own.
const DATA: &str = "data";

/// How a [`TestRelay`] is set up. The defaults: quotas off, no auth required, no admin API, no
/// seed events, the real clock, a fresh temporary directory.
#[derive(Debug, Default)]
pub struct Options {
    /// `None`: quotas off. `Some(limits)`: on, with these values (`LimitsConfig::default()` is
    /// the production defaults of `relay.toml`).
    pub limits: Option<LimitsConfig>,
    /// NIP-42 auth required before REQ, COUNT and EVENT (and NIP-98 for REST).
    pub auth_required: bool,
    /// Turns the admin API on (`/admin/v1/…`, NIP-86) with this bearer token.
    pub admin_token: Option<String>,
    /// Events stored before the relay serves, by the publish rules without quotas (the path of
    /// `hearth import`).
    pub seed: Vec<Event>,
    /// The limiter runs on a [`ManualClock`] that only [`TestRelay::advance`] moves.
    pub manual_clock: bool,
    /// The data directory: one a stopped relay gave back ([`TestRelay::stop`]), else a fresh one.
    pub dir: Option<tempfile::TempDir>,
}

/// A running relay for a test.
pub struct TestRelay {
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    admin_token: Option<String>,
    clock: Option<Arc<ManualClock>>,
    limiter: Arc<Limiter>,
    seeded: Option<ImportSummary>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), RunError>>>,
    dir: Option<tempfile::TempDir>,
}

impl TestRelay {
    /// Starts a relay set up by `options`.
    pub async fn start(options: Options) -> Result<TestRelay, RunError> {
        TestRelay::start_configured(options, |_| {}).await
    }

    /// Starts a relay set up by `options`, then by `configure`, which may change any setting of
    /// `relay.toml` but the data directory (`server.bind` starts as `127.0.0.1:0`).
    pub async fn start_configured(
        options: Options,
        configure: impl FnOnce(&mut Config),
    ) -> Result<TestRelay, RunError> {
        let dir = match options.dir {
            Some(dir) => dir,
            None => tempfile::tempdir()?,
        };
        let mut config = Config::default();
        config.server.bind = SocketAddr::from(([127, 0, 0, 1], 0));
        config.limits = options.limits.unwrap_or(LimitsConfig { enabled: false, ..LimitsConfig::default() });
        config.auth.required = options.auth_required;
        if let Some(token) = &options.admin_token {
            config.admin.token = token.clone();
        }
        configure(&mut config);
        config.storage.data_dir = dir.path().join(DATA);
        config.validate()?;
        let listener = tokio::net::TcpListener::bind(config.server.bind).await?;
        let addr = listener.local_addr()?;
        let admin_listener = match config.admin.bind {
            None => None,
            Some(bind) => Some(tokio::net::TcpListener::bind(bind).await?),
        };
        let admin_addr = admin_listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let manual = options.manual_clock.then(|| Arc::new(ManualClock::new()));
        let clock: Arc<dyn Clock> = match &manual {
            Some(clock) => clock.clone(),
            None => Arc::new(SystemClock::default()),
        };
        let admin_token = config.admin.enabled().then(|| config.admin.token.clone()).filter(|t| !t.is_empty());
        let relay = Relay::open(config, clock)?;
        let seeded = if options.seed.is_empty() {
            None
        } else {
            let mut lines = Vec::new();
            for event in &options.seed {
                lines.extend_from_slice(event.to_json().map_err(std::io::Error::other)?.as_bytes());
                lines.push(b'\n');
            }
            let summary = relay.import(Box::new(Cursor::new(lines))).await.map_err(std::io::Error::other)?;
            Some(summary)
        };
        let limiter = relay.limiter();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(relay.serve(listener, admin_listener, async move {
            let _ = stopped.await;
        }));
        Ok(TestRelay {
            addr,
            admin_addr,
            admin_token,
            clock: manual,
            limiter,
            seeded,
            stop: Some(stop),
            task: Some(task),
            dir: Some(dir),
        })
    }

    /// `ws://127.0.0.1:<port>`
    pub fn ws_url(&self) -> String {
        format!("ws://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>`: NIP-11, the REST API, `/metrics`, and the admin API unless it
    /// has a port of its own.
    pub fn http_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The address the relay listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where the admin API listens when `admin.bind` was set.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The admin API's bearer token, when it is on.
    pub fn admin_token(&self) -> Option<&str> {
        self.admin_token.as_deref()
    }

    /// The data directory (`data` inside the temporary directory).
    pub fn data_dir(&self) -> PathBuf {
        self.dir.as_ref().map(|d| d.path().join(DATA)).unwrap_or_default()
    }

    /// What storing the seed events did.
    pub fn seeded(&self) -> Option<&ImportSummary> {
        self.seeded.as_ref()
    }

    /// The relay's limiter: usage reports, and limits tuned live.
    pub fn limiter(&self) -> &Arc<Limiter> {
        &self.limiter
    }

    /// The limiter's manual clock, when [`Options::manual_clock`] was set.
    pub fn clock(&self) -> Option<&Arc<ManualClock>> {
        self.clock.as_ref()
    }

    /// Moves the limiter's manual clock on by `by` (nothing on the real clock).
    pub fn advance(&self, by: Duration) {
        if let Some(clock) = &self.clock {
            clock.advance(by);
        }
    }

    /// Stops the relay gracefully (every acknowledged event flushed) and gives back the temporary
    /// directory that holds the data directory, to start another relay on it ([`Options::dir`])
    /// or to look inside.
    pub async fn stop(mut self) -> Result<tempfile::TempDir, RunError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            task.await.map_err(std::io::Error::other)??;
        }
        self.dir.take().ok_or_else(|| RunError::Io(std::io::Error::other("the relay has no directory")))
    }
}

impl Drop for TestRelay {
    /// Stops the relay and removes the directory once it has stopped: in the background while the
    /// runtime runs, else when the runtime drops the relay's task.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let (task, dir) = (self.task.take(), self.dir.take());
        if let (Some(task), Ok(runtime)) = (task, tokio::runtime::Handle::try_current()) {
            runtime.spawn(async move {
                let _ = task.await;
                drop(dir);
            });
        }
    }
}
