//! The `hearth` binary: loads the configuration, binds, and runs the relay until SIGINT/SIGTERM.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// hearth: a self-contained Nostr relay.
#[derive(Parser, Debug)]
#[command(version, about)]
struct Cli {
    /// Configuration file (default: ./relay.toml when present, else the built-in defaults).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
}

#[tokio::main]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let env: HashMap<String, String> = std::env::vars().collect();
    let config = match hearth::config::Config::load(cli.config.as_deref(), &env) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("hearth: {e}");
            return ExitCode::from(2);
        }
    };
    let addr = match config.server.bind_addr() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("hearth: {e}");
            return ExitCode::from(2);
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("hearth: cannot listen on {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    match hearth::run(listener, config, shutdown_signal()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hearth: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
