//! `hearth dev`: a throwaway relay for local development that shows every frame.
//!
//! Owns what differs from the production start: `127.0.0.1` on a chosen port, a temporary data
//! directory removed on exit (unless `--data`), quotas off (unless `--limits`), the admin API on
//! with a random token, seed events loaded by the import path before it is ready, the frame log
//! ([`FrameLog`]) on stderr, and one ready line on stdout. Everything else is the real relay.

use std::future::Future;
use std::io::{IsTerminal, Write};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use crate::config::Config;
pub use crate::frame_log::FrameLog;
use crate::limiter::SystemClock;
use crate::relay::Relay;

/// `hearth dev`'s port when none is given.
pub const DEFAULT_PORT: u16 = 7777;

/// Exit code: the relay ran and stopped.
pub const OK: u8 = 0;
/// Exit code: it could not start (the port is taken, a bad setting, an unreadable seed file).
pub const UNUSABLE: u8 = 2;

/// What `hearth dev` was asked for.
#[derive(Clone, Debug, Default)]
pub struct DevOptions {
    /// The port on 127.0.0.1 (0 = any free one).
    pub port: u16,
    /// Keep the data here instead of in a temporary directory removed on exit.
    pub data: Option<PathBuf>,
    /// Bill and refuse by the configured quotas (off by default).
    pub limits: bool,
    /// No frame log.
    pub quiet: bool,
    /// JSON lines of signed events stored before the relay is ready.
    pub seed: Option<PathBuf>,
}

/// The line printed on stdout once the relay is ready.
#[derive(Debug, Serialize)]
struct Ready<'a> {
    ws: String,
    http: String,
    admin_token: &'a str,
    data_dir: String,
}

/// Runs the development relay on `config` (the usual configuration, under `options`) until
/// `shutdown` resolves.
pub async fn run(options: DevOptions, mut config: Config, shutdown: impl Future<Output = ()> + Send + 'static) -> u8 {
    match serve(options, &mut config, shutdown).await {
        Ok(()) => OK,
        Err(e) => {
            eprintln!("hearth dev: {e}");
            UNUSABLE
        }
    }
}

async fn serve(
    options: DevOptions,
    config: &mut Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), String> {
    // `temp` is held to the end: dropping it removes the directory, after the relay has stopped.
    let (temp, data_dir) = match &options.data {
        Some(dir) => (None, dir.clone()),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("hearth-dev-")
                .tempdir()
                .map_err(|e| format!("cannot make a temporary directory: {e}"))?;
            let path = temp.path().to_path_buf();
            (Some(temp), path)
        }
    };
    config.server.bind = SocketAddr::from(([127, 0, 0, 1], options.port));
    config.storage.data_dir = data_dir.clone();
    config.limits.enabled = options.limits;
    config.admin.token = random_token()?;
    config.admin.bind = None;
    config.validate().map_err(|e| e.to_string())?;
    let bind = config.server.bind;
    let listener = tokio::net::TcpListener::bind(bind).await.map_err(|e| format!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let token = config.admin.token.clone();
    let relay = Relay::open(config.clone(), Arc::new(SystemClock::default())).map_err(|e| e.to_string())?;
    if !options.quiet {
        relay.log_frames(FrameLog::new(std::io::stderr().is_terminal()));
    }
    if let Some(path) = &options.seed {
        let file = std::fs::File::open(path).map_err(|e| format!("--seed {}: {e}", path.display()))?;
        let summary = relay.import(Box::new(std::io::BufReader::new(file))).await.map_err(|e| e.to_string())?;
        eprintln!(
            "hearth dev: seeded {} of {} events from {} {}",
            summary.stored,
            summary.read,
            path.display(),
            serde_json::to_string(&summary).unwrap_or_default()
        );
    }
    let ready = Ready {
        ws: format!("ws://{addr}"),
        http: format!("http://{addr}"),
        admin_token: &token,
        data_dir: data_dir.display().to_string(),
    };
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", serde_json::to_string(&ready).map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
    out.flush().map_err(|e| e.to_string())?;
    drop(out);
    relay.serve(listener, None, shutdown).await.map_err(|e| e.to_string())?;
    drop(temp);
    Ok(())
}

/// 32 random bytes as hex: the admin token of one run.
fn random_token() -> Result<String, String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| format!("no randomness for the admin token: {e}"))?;
    Ok(hex::encode(bytes))
}
