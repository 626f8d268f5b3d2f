//! `hearth-bench`: drives a running hearth over loopback and measures it.
//!
//! Subcommands print one JSON line of results (stdout) and a readable summary (stderr):
//! `gen` pre-signs events to a file (signing is never timed), `ingest`, `rtt`, `query` and
//! `fanout` drive a relay at `--relay`, `bound` measures the physical limits in-process
//! (validation rate, one fsync), `idle` holds thousands of idle sockets on a release relay,
//! `subs` a chat client's subscriptions on each of a thousand,
//! `scale` measures one store size (memory, start-up, queries), `sync` one NIP-77 round, `suite` starts the release
//! `hearth` binary and runs everything,
//! and `smoke` runs everything in seconds against an in-process relay (CI, so the bench never
//! rots).

mod drive;
mod lossy;
mod stats;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(about = "Benchmarks for the hearth relay")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Pre-sign kind-1 events to a JSON-lines file.
    Gen {
        #[arg(long, default_value_t = 200_000)]
        count: usize,
        #[arg(long, default_value = "bench-events.jsonl")]
        out: PathBuf,
        /// This share of the events (percent) as kind 4 direct messages to their `p` pubkey, for
        /// the private kinds' read restriction in the mix.
        #[arg(long, default_value_t = 0)]
        private_percent: u64,
    },
    /// Publish a file over C connections with W EVENTs in flight each.
    Ingest {
        #[arg(long)]
        relay: String,
        #[arg(long, default_value = "bench-events.jsonl")]
        file: PathBuf,
        #[arg(long, default_value_t = 4)]
        conns: usize,
        #[arg(long, default_value_t = 256)]
        inflight: usize,
    },
    /// Q REQs of mixed shapes, one at a time; latency to EOSE; counts checked against the file.
    Query {
        #[arg(long)]
        relay: String,
        #[arg(long, default_value = "bench-events.jsonl")]
        file: PathBuf,
        #[arg(long, default_value_t = 400)]
        queries: usize,
        /// The relay's data directory: its files are read once, after the passes over `file`
        /// and before the timed queries, so that the mix meets a warm page cache.
        #[arg(long)]
        warm: Option<PathBuf>,
    },
    /// N WebSocket pings, one at a time: the transport's round trip, the floor of a 1 × 1 ingest.
    Rtt {
        #[arg(long)]
        relay: String,
        #[arg(long, default_value_t = 2000)]
        pings: usize,
    },
    /// A public chat's busy hour on any relay (NIP-28 rooms: every relay serves them): rooms
    /// with history, members opening their rooms at once (REQ to EOSE), then live messages timed
    /// to every member of their room.
    Chat {
        #[arg(long)]
        relay: String,
        #[arg(long, default_value_t = 50)]
        channels: usize,
        #[arg(long, default_value_t = 500)]
        members: usize,
        #[arg(long, default_value_t = 4)]
        rooms_each: usize,
        #[arg(long, default_value_t = 200)]
        history: usize,
        #[arg(long, default_value_t = 1000)]
        messages: usize,
        #[arg(long, default_value_t = 50)]
        rate: u64,
    },
    /// S subscribers, then E events at R per second; delivery latency and completeness.
    Fanout {
        #[arg(long)]
        relay: String,
        #[arg(long, default_value_t = 500)]
        subs: usize,
        #[arg(long, default_value_t = 200)]
        events: usize,
        #[arg(long, default_value_t = 100)]
        rate: u64,
    },
    /// Single-thread validation rate and one fsync's latency in `--dir`.
    Bound {
        #[arg(long, default_value = "bench-events.jsonl")]
        file: PathBuf,
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
    /// `limiter.admit` latency and the memory of N tracked principals, in-process.
    Limiter {
        #[arg(long, default_value_t = 1_000_000)]
        principals: u32,
    },
    /// Starts the release `hearth` beside this binary and holds N idle WebSockets on it: memory
    /// per socket, a fresh client's latency beside them, memory returned after they close.
    Idle {
        #[arg(long, default_value_t = 10_000)]
        conns: usize,
    },
    /// Starts the release `hearth` beside this binary, holds N WebSockets with --subs
    /// subscriptions each (a chat client's `#h` channels): memory per subscription, the RSS of
    /// them all, a fresh client's latency beside them.
    Subs {
        #[arg(long, default_value_t = 1_000)]
        conns: usize,
        #[arg(long, default_value_t = 200)]
        subs: usize,
    },
    /// NIP-29 on the release `hearth`: --groups groups of --members members online, each
    /// subscribed to its group; --messages messages at --rate a second (fan-out p50/p99 beside
    /// the plain fan-out), a member added beside a message, and a start-up on --startup-groups
    /// groups of ten moderation events each.
    Groups {
        #[arg(long, default_value_t = 1_000)]
        groups: usize,
        #[arg(long, default_value_t = 20)]
        members: usize,
        #[arg(long, default_value_t = 2_000)]
        messages: usize,
        #[arg(long, default_value_t = 200)]
        rate: u64,
        #[arg(long, default_value_t = 10_000)]
        startup_groups: usize,
    },
    /// The media server (Blossom) on the release `hearth`: a --size-mb upload and its download
    /// beside `dd`'s sequential write and read in the same run, the relay's RSS during the
    /// upload, and --concurrent uploads of --each-mb at once.
    Media {
        #[arg(long, default_value_t = 1_024)]
        size_mb: u64,
        #[arg(long, default_value_t = 100)]
        concurrent: usize,
        #[arg(long, default_value_t = 1)]
        each_mb: u64,
    },
    /// NIP-62 on the release `hearth`: --theirs events of one key among --events others' (--file,
    /// generated when missing); the time its request to vanish takes, and the query mix p50/p99
    /// during it beside without.
    Vanish {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value_t = 100_000)]
        theirs: usize,
        #[arg(long, default_value = "scale.jsonl")]
        file: PathBuf,
    },
    /// One store size, on the release `hearth`: ingest (rate beside one core's validation rate,
    /// peak RSS), start-up after a clean stop and after kill -9, the query mix and the RSS after
    /// it. Generates --file with --events events when it does not exist.
    Scale {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value = "scale-events.jsonl")]
        file: PathBuf,
    },
    /// On the release `hearth`: --file ingested (generated with --events events when it does not
    /// exist), then a compaction asked for --delay-ms into an ingest of a fifth as many new events:
    /// how long it stopped writes, and the ingest's OK p99 and longest OK meanwhile.
    Compact {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value = "scale-events.jsonl")]
        file: PathBuf,
        #[arg(long, default_value_t = 3000)]
        delay_ms: u64,
    },
    /// Two release relays' stores of --file (generated with --events events when it does not
    /// exist) less a different 0.5 % each: one `hearth sync` dry run (the exchange), one round both
    /// ways; time, bytes on the wire beside the ids alone, peak RSS of both sides.
    Sync {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value = "scale-events.jsonl")]
        file: PathBuf,
    },
    /// NIP-50 on release relays: --file (generated with real-looking text, --events events, when
    /// it does not exist) ingested with the search index on and off, the index rebuilt
    /// (`hearth search-reindex`), two-word queries timed warm; disk and RSS of each, fan-out to
    /// 500 subscribers on each. The ingests alternate in --pairs pairs; the ratio is their median.
    Search {
        #[arg(long, default_value_t = 1_000_000)]
        events: usize,
        #[arg(long, default_value = "search-events.jsonl")]
        file: PathBuf,
        #[arg(long, default_value_t = 3)]
        pairs: usize,
    },
    /// The Redis limiter backend beside the memory one: admission p50/p99 in-process, the
    /// admissions per second one Redis sustains, and the 4 × 256 ingest of --file (generated with
    /// --events events when it does not exist) with each backend. Starts its own redis-server.
    Cluster {
        #[arg(long, default_value_t = 200_000)]
        events: usize,
        #[arg(long, default_value = "cluster-events.jsonl")]
        file: PathBuf,
    },
    /// The PostgreSQL store beside the embedded one: ingest, the query mix and a fan-out on each,
    /// ingest over two nodes on one PostgreSQL, and the cross-node delivery latency (Redis).
    Postgres {
        #[arg(long, default_value_t = 100_000)]
        events: usize,
        #[arg(long, default_value = "postgres-events.jsonl")]
        file: PathBuf,
        /// The server's `shared_buffers`, in MB (the cluster chapter's advice for a busy relay
        /// is a quarter of the machine's memory); at least 64, above a test server's.
        #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(64..))]
        pg_buffers_mb: u32,
    },
    /// Kills the `hearth` beside this binary with SIGKILL at seeded random moments while three
    /// clients publish notes, profile versions and deletions (a third of the kills a moment
    /// after a SIGTERM, into the stop); after each restart checks that
    /// everything acknowledged is served as acknowledged, and that it started within 10 s.
    Crash {
        #[arg(long, default_value_t = 1000)]
        kills: usize,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Each kill is a power cut: the relay's data directory is on the lossy filesystem (see
        /// `lossy`), which loses at each kill whatever had been written and not synced.
        #[arg(long)]
        power_cut: bool,
        /// The relay's store is a PostgreSQL the run starts (fsync on), killed with the relay
        /// each time (an immediate shutdown); with --power-cut its data is on a lossy disk too.
        #[arg(long)]
        postgres: bool,
        /// Seconds a start may take before the run fails as hung (the report gives the slowest).
        #[arg(long, default_value_t = 10)]
        start_deadline_secs: u64,
    },
    /// Mounts on MOUNT a FUSE filesystem over BACKING that keeps every write in memory until its
    /// file is synced, and serves it until killed (a power cut) or until its standard input ends
    /// (it unmounts). Needs root and /dev/fuse.
    Lossy { backing: PathBuf, mount: PathBuf },
    /// Starts the release `hearth` binary beside this one and runs everything.
    Suite {
        #[arg(long, default_value_t = 200_000)]
        count: usize,
        #[arg(long, default_value = "bench-events.jsonl")]
        file: PathBuf,
    },
    /// Everything at a tiny size against an in-process relay: a check that the bench works.
    Smoke,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Gen { count, out, private_percent } => drive::gen_file_with(count, &out, private_percent).map(|r| vec![r]),
        Cmd::Ingest { relay, file, conns, inflight } => {
            drive::ingest(&relay, &file, conns, inflight).await.map(|r| vec![r])
        }
        Cmd::Query { relay, file, queries, warm } => {
            drive::query(&relay, &file, queries, warm.as_deref()).await.map(|r| vec![r])
        }
        Cmd::Chat { relay, channels, members, rooms_each, history, messages, rate } => {
            let chat = drive::Chat { channels, members, rooms_each, history, messages, rate };
            drive::chat(&relay, chat).await.map(|r| vec![r])
        }
        Cmd::Rtt { relay, pings } => drive::rtt(&relay, pings).await.map(|r| vec![r]),
        Cmd::Fanout { relay, subs, events, rate } => drive::fanout(&relay, subs, events, rate).await.map(|r| vec![r]),
        Cmd::Bound { file, dir } => drive::bound(&file, &dir).map(|r| vec![r]),
        Cmd::Limiter { principals } => drive::limiter(principals).map(|r| vec![r]),
        Cmd::Idle { conns } => drive::idle(conns).await.map(|r| vec![r]),
        Cmd::Subs { conns, subs } => drive::subs(conns, subs).await.map(|r| vec![r]),
        Cmd::Groups { groups, members, messages, rate, startup_groups } => {
            drive::groups(groups, members, messages, rate, startup_groups).await
        }
        Cmd::Vanish { events, theirs, file } => drive::vanish(events, theirs, &file).await,
        Cmd::Media { size_mb, concurrent, each_mb } => drive::media(size_mb, concurrent, each_mb).await,
        Cmd::Scale { events, file } => drive::scale(events, &file).await,
        Cmd::Compact { events, file, delay_ms } => drive::compact_under_ingest(events, &file, delay_ms).await,
        Cmd::Sync { events, file } => drive::sync(events, &file).await,
        Cmd::Search { events, file, pairs } => drive::search(events, &file, pairs).await,
        Cmd::Cluster { events, file } => drive::cluster(events, &file).await,
        Cmd::Postgres { events, file, pg_buffers_mb } => drive::postgres(events, &file, pg_buffers_mb).await,
        Cmd::Crash { kills, seed, power_cut, postgres, start_deadline_secs } => {
            let start_deadline = std::time::Duration::from_secs(start_deadline_secs);
            drive::crash(drive::Kills { kills, seed, power_cut, postgres, start_deadline }).await
        }
        Cmd::Lossy { backing, mount } => lossy::serve(&backing, &mount).map(|()| vec![]),
        Cmd::Suite { count, file } => drive::suite(count, &file).await,
        Cmd::Smoke => drive::smoke().await,
    };
    match result {
        Ok(reports) => {
            for r in reports {
                println!("{}", r.json);
                eprintln!("{}", r.summary);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("hearth-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
