//! The `hearth` binary: without a subcommand it loads the configuration, binds, and runs the
//! relay until SIGINT/SIGTERM; with one it is a client (see `hearth --help`).

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

mod offline;
use offline::{Offline, offline};

/// jemalloc, with the background purge thread `.cargo/config.toml` configures, gives the memory
/// of closed connections back to the system within seconds; glibc's malloc kept all of it in its
/// arenas after a flood of sockets closed. Only the binary sets it: a crate that embeds the
/// relay keeps its own allocator.
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// hearth: a self-contained Nostr relay (run without a subcommand), and a client for it.
#[derive(Parser, Debug)]
#[command(
    version,
    about,
    after_help = "Without a subcommand, hearth runs the relay: `hearth --config relay.toml` (or `hearth` alone: \
                  ./relay.toml when present, else the built-in defaults; HEARTH_<SECTION>__<KEY> variables \
                  override either). Stop it with Ctrl-C or SIGTERM."
)]
struct Cli {
    /// Configuration file (default: ./relay.toml when present, else the built-in defaults).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(clap::Subcommand, Debug)]
enum Command {
    /// Print a new key pair as JSON.
    Keygen,
    /// Publish one event (--content) or JSON lines from stdin: complete signed events as they
    /// are, {"kind","content","tags"} drafts signed with the key.
    Publish {
        #[command(flatten)]
        to: Target,
        /// Kind of the event given with --content.
        #[arg(long, default_value_t = 1)]
        kind: u16,
        /// Content of a single event; without it, events are read from stdin.
        #[arg(long)]
        content: Option<String>,
        /// A tag for the --content event, as name=value (repeatable).
        #[arg(long = "tag")]
        tags: Vec<String>,
    },
    /// Print stored events matching a filter as JSON lines.
    Req(Query),
    /// Write every stored event (or those matching --filter) as JSON lines to stdout, oldest
    /// first. Reads the data directory of the configuration; the relay must not be running.
    Export {
        /// A NIP-01 filter as JSON.
        #[arg(long)]
        filter: Option<String>,
        /// Also copy every media blob (and who uploaded it) into this folder.
        #[arg(long)]
        media: Option<PathBuf>,
    },
    /// Reconcile with another NIP-77 relay (negentropy) and move what one has and the other
    /// lacks; prints a summary line. Offline on the data directory, or through the running
    /// relay's admin API (--local, else the configured address, with admin.token).
    Sync {
        /// The peer's ws:// or wss:// URL.
        peer: String,
        /// The running relay to sync, by its WebSocket URL (default: the configured address
        /// when a relay holds the data directory).
        #[arg(long)]
        local: Option<String>,
        /// A NIP-01 filter as JSON: the events to reconcile (default: every event).
        #[arg(long)]
        filter: Option<String>,
        /// down (fetch what the peer has), up (publish what it lacks) or both.
        #[arg(long, default_value = "down")]
        direction: hearth::config::Direction,
        /// Only count what would move.
        #[arg(long)]
        dry_run: bool,
        /// Copy a members-only relay's events even into a relay anyone reads (refused without).
        #[arg(long)]
        allow_public: bool,
    },
    /// Store JSON lines of signed events (--file, else stdin) by the publish rules, without
    /// quotas; prints a summary line. The relay must not be running.
    Import {
        /// The JSON-lines file (default: stdin).
        #[arg(long)]
        file: Option<PathBuf>,
        /// Also take the blobs `hearth export --media` wrote to this folder (hashes checked).
        #[arg(long)]
        media: Option<PathBuf>,
    },
    /// Write the whole community (events, media, members, invites, bans, settings, the audit
    /// log, the relay's key) into DIR, a new folder; prints the manifest. Offline on the
    /// configured data directory, or from a running relay with --relay (and admin.token).
    Backup {
        /// The folder to write (must not exist yet, or be empty).
        dir: PathBuf,
        /// The running relay to back up, e.g. http://127.0.0.1:7777 (its admin API, with
        /// admin.token); without it the relay must not be running.
        #[arg(long, value_name = "HTTP_URL")]
        relay: Option<String>,
    },
    /// Bring a backup folder (`hearth backup`) back into the configured data directory, which
    /// must be empty: the same relay key, members, settings, audit log, events and media.
    /// Prints {"relay_pubkey","events","stored","settings","audit","uploads"}.
    Restore {
        /// The backup folder.
        dir: PathBuf,
    },
    /// Rewrite the event log without the space of replaced, deleted and expired events; prints
    /// {"before_bytes","after_bytes","seconds"}. The relay must not be running.
    Compact,
    /// Check the data directory without changing it: frames against their CRCs, the catalogue
    /// against the records, replaceable versions, tombstones. One JSON line per problem, then a
    /// summary; exit 0 when clean, 1 otherwise. The relay must not be running.
    Check {
        /// Mend what is found (drop damaged and inconsistent entries, compact), then check
        /// again: exit 0 when the store is consistent afterwards.
        #[arg(long)]
        repair: bool,
    },
    /// Carry a data directory of an older layout over to today's: its events are written out
    /// (migration.jsonl in the data directory) and imported by today's rules; prints
    /// {"from","to","carried","import"}. Run it again if it was cut off. Back the directory up
    /// first: an older hearth cannot read it afterwards. The relay must not be running.
    Migrate {
        /// Move the embedded store into the PostgreSQL database `storage.postgres_url` names
        /// (which must hold no event): every event, setting, member, group and audit entry.
        /// Prints {"events","stored","settings","audit","media"}. Then set storage.backend.
        #[arg(long, value_name = "BACKEND", value_parser = ["postgres"])]
        to: Option<String>,
    },
    /// Rebuild the NIP-50 search index (data/search) from the stored events; prints
    /// {"events","seconds"}. The relay must not be running.
    SearchReindex,
    /// A throwaway relay for local development: 127.0.0.1:7777, a temporary data directory
    /// removed on exit, quotas off, the admin API on with a random token, every frame in and out
    /// logged on stderr. Prints one ready line {"ws","http","admin_token","data_dir"} on stdout.
    Dev {
        /// The port on 127.0.0.1 (0: any free port; the ready line names it).
        #[arg(long, default_value_t = hearth::dev::DEFAULT_PORT)]
        port: u16,
        /// Keep the data in DIR (created if missing) instead of a temporary directory.
        #[arg(long, value_name = "DIR")]
        data: Option<PathBuf>,
        /// Bill and refuse by the configured quotas, as production does.
        #[arg(long)]
        limits: bool,
        /// Do not log frames.
        #[arg(long)]
        quiet: bool,
        /// JSON lines of signed events to store (by the import rules) before it is ready.
        #[arg(long, value_name = "FILE")]
        seed: Option<PathBuf>,
    },
    /// Print how many stored events match a filter (NIP-45).
    Count(Query),
}

/// The relay a client subcommand talks to, over which transport, with which key.
#[derive(clap::Args, Debug)]
struct Target {
    /// Relay URL, e.g. ws://127.0.0.1:7777
    #[arg(long)]
    relay: String,
    /// Use the REST API (POST /api/v1/events, /query, /count) instead of the WebSocket.
    #[arg(long)]
    rest: bool,
    #[command(flatten)]
    key: hearth::cli::KeyArgs,
}

/// What `req` and `count` ask, and where.
#[derive(clap::Args, Debug)]
struct Query {
    #[command(flatten)]
    to: Target,
    /// A NIP-01 filter as JSON.
    filter: String,
}

/// A subcommand: a client of a running relay, or an offline operation on the data directory of
/// the configuration (`config`).
async fn subcommand(command: Command, config: Option<&std::path::Path>) -> ExitCode {
    let load = |k: &hearth::cli::KeyArgs| match k.load() {
        Ok(keys) => Ok(keys),
        Err(e) => {
            eprintln!("hearth: {e}");
            Err(ExitCode::from(hearth::cli::INVALID))
        }
    };
    let code = match command {
        Command::Keygen => hearth::cli::keygen(),
        Command::Publish { to: Target { relay, rest, key }, kind, content, tags } => match load(&key) {
            Ok(keys) => hearth::cli::publish(&relay, rest, keys, kind, content, tags).await,
            Err(code) => return code,
        },
        Command::Req(Query { to: Target { relay, rest, key }, filter }) => match load(&key) {
            Ok(keys) => hearth::cli::req(&relay, rest, keys, &filter).await,
            Err(code) => return code,
        },
        Command::Count(Query { to: Target { relay, rest, key }, filter }) => match load(&key) {
            Ok(keys) => hearth::cli::count(&relay, rest, keys, &filter).await,
            Err(code) => return code,
        },
        Command::Dev { port, data, limits, quiet, seed } => {
            let options = hearth::dev::DevOptions { port, data, limits, quiet, seed };
            return dev(options, config).await;
        }
        Command::Export { filter, media } => return offline(Offline::Export { filter, media }, config).await,
        Command::Import { file, media } => return offline(Offline::Import { file, media }, config).await,
        Command::Sync { peer, local, filter, direction, dry_run, allow_public } => {
            let sync = Offline::Sync { peer, local, filter, direction, dry_run, allow_public };
            return offline(sync, config).await;
        }
        Command::Compact => return offline(Offline::Compact, config).await,
        Command::Backup { dir, relay } => return offline(Offline::Backup { dir, relay }, config).await,
        Command::Restore { dir } => return offline(Offline::Restore { dir }, config).await,
        Command::Migrate { to } => {
            return offline(if to.is_some() { Offline::ToPostgres } else { Offline::Migrate }, config).await;
        }
        Command::SearchReindex => return offline(Offline::SearchReindex, config).await,
        Command::Check { repair } => return offline(Offline::Check { repair }, config).await,
    };
    ExitCode::from(code)
}

/// The relay's configuration: `--config`, else `./relay.toml` or the defaults, under `HEARTH_…`.
pub(crate) fn load_config(path: Option<&std::path::Path>) -> Result<hearth::config::Config, ExitCode> {
    let env: HashMap<String, String> = std::env::vars().collect();
    hearth::config::Config::load(path, &env).map_err(|e| {
        eprintln!("hearth: {e}");
        ExitCode::from(2)
    })
}

/// `hearth dev` on the configuration, until SIGINT/SIGTERM.
async fn dev(options: hearth::dev::DevOptions, config: Option<&std::path::Path>) -> ExitCode {
    let config = match load_config(config) {
        Ok(config) => config,
        Err(code) => return code,
    };
    let shutdown = match shutdown_signal() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hearth: cannot install the SIGINT/SIGTERM handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    ExitCode::from(hearth::dev::run(options, config, shutdown).await)
}

/// Blocking-pool threads per core. The pool runs store reads and syncs (signature checks run on
/// each connection's own task); tokio's default of 512 threads let a pipelined ingest grow it to
/// hundreds of threads on two cores, each with its own stack and malloc arena.
const BLOCKING_THREADS_PER_CORE: usize = 4;

/// jemalloc's own count of the heap, for `/metrics` (its statistics are cached until the epoch
/// is advanced).
fn jemalloc_heap() -> Option<hearth::Heap> {
    use tikv_jemalloc_ctl::{epoch, stats};
    epoch::advance().ok()?;
    Some(hearth::Heap {
        allocated: stats::allocated::read().ok()? as u64,
        resident: stats::resident::read().ok()? as u64,
    })
}

fn main() -> ExitCode {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(cores * BLOCKING_THREADS_PER_CORE)
        .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run()),
        Err(e) => {
            eprintln!("hearth: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    if let Some(command) = cli.command {
        return subcommand(command, cli.config.as_deref()).await;
    }
    let config = match load_config(cli.config.as_deref()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let addr = config.server.bind;
    hearth::cli::raise_fd_limit(config.server.max_connections);
    let shutdown = match shutdown_signal() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("hearth: cannot install the SIGINT/SIGTERM handlers: {e}");
            return ExitCode::FAILURE;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("hearth: cannot listen on {addr}: {e}");
            return ExitCode::from(2);
        }
    };
    hearth::report_heap_with(jemalloc_heap);
    match hearth::run(listener, config, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hearth: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Installs the SIGINT and SIGTERM handlers now and returns a future that resolves on either.
///
/// They must be in place before the relay says it is listening: a supervisor may send SIGTERM
/// the moment it sees that line, and a handler installed lazily, on the future's first poll,
/// could still be missing then, so the signal's default action would kill the relay without
/// its shutdown flush.
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()> + Send + 'static> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut interrupt = signal(SignalKind::interrupt())?;
        Ok(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = interrupt.recv() => {}
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
        })
    }
}
