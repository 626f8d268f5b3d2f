//! A real PostgreSQL for a test: [`Postgres::start`] runs Debian's (or any) `postgres` on a
//! free port of 127.0.0.1 with a temporary directory, and [`Postgres::database`] gives each
//! relay a database of its own.
//!
//! A partition test runs it inside a network namespace of its own
//! ([`Postgres::start_in_namespace`]), each node reaching it through a link the test can cut.
//!
//! Owns finding the server's programs (`HEARTH_PG_BIN`, else `pg_config --bindir`, else the
//! newest `/usr/lib/postgresql/*/bin`), one `initdb` per test process (each server starts from a
//! copy of it), running the server as the `postgres` user when the test runs as root (PostgreSQL
//! refuses root), and its end: the server runs under a shell that stops it the moment the test
//! process lets go of its standard input — on drop, and equally when the test process dies —
//! so no server outlives its test. Nor does its data outlive a run that was killed: each scratch
//! directory names its process, and the next start removes those whose process is gone.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long the server may take to accept connections.
const READY: Duration = Duration::from_secs(60);

/// A test's server's `shared_buffers`, MiB (a benchmark asks for more: [`Postgres::start_tuned`]).
const TEST_BUFFERS_MB: u32 = 16;

/// A PostgreSQL server for a test; stopped when dropped.
pub struct Postgres {
    port: u16,
    /// The network namespace it runs in (a partition test's), else this process's.
    netns: Option<String>,
    /// The address it is reached at.
    host: String,
    fsync: bool,
    buffers_mb: u32,
    child: Child,
    /// Held open until the drop: the shell stops the server when it closes.
    stdin: Option<ChildStdin>,
    /// The socket directory (and, unless [`Postgres::start_on`] placed it, the data's parent).
    dir: tempfile::TempDir,
    /// The data directory.
    data: PathBuf,
}

/// The programs and the `initdb` every server of this process copies.
struct Template {
    bin: PathBuf,
    dir: tempfile::TempDir,
    /// The user the server runs as (`postgres` when the test runs as root).
    user: Option<String>,
}

static TEMPLATE: OnceLock<Result<Template, String>> = OnceLock::new();

impl Postgres {
    /// Starts a server with fsync on (a durability test's) or off (every other test's: a test
    /// database lives no longer than its process).
    pub async fn start(fsync: bool) -> Result<Postgres, String> {
        Postgres::start_tuned(fsync, TEST_BUFFERS_MB).await
    }

    /// [`Postgres::start`] with `shared_buffers` of `buffers_mb` MiB (a benchmark's: a test's
    /// server keeps 16); a benchmark's also has 8 GB of `max_wal_size`, as the book's
    /// cluster chapter advises a busy relay's server.
    pub async fn start_tuned(fsync: bool, buffers_mb: u32) -> Result<Postgres, String> {
        Postgres::start_in(None, fsync, buffers_mb, None).await
    }

    /// [`Postgres::start`] inside the network namespace `netns` (which the caller made, as root),
    /// listening on all of its addresses and reached at `host`, one of them (a partition
    /// test's).
    pub async fn start_in_namespace(netns: &str, host: &str) -> Result<Postgres, String> {
        Postgres::start_in(None, false, TEST_BUFFERS_MB, Some((netns.to_string(), host.to_string()))).await
    }

    /// [`Postgres::start`] with its data in `parent/pgdata` (a power-cut test's lossy disk),
    /// fsync on.
    pub async fn start_on(parent: &Path) -> Result<Postgres, String> {
        Postgres::start_in(Some(parent), true, TEST_BUFFERS_MB, None).await
    }

    async fn start_in(
        parent: Option<&Path>,
        fsync: bool,
        buffers_mb: u32,
        place: Option<(String, String)>,
    ) -> Result<Postgres, String> {
        let template = TEMPLATE.get_or_init(template).as_ref().map_err(Clone::clone)?;
        let dir = scratch().map_err(|e| e.to_string())?;
        let parent = parent.unwrap_or(dir.path());
        let data = parent.join("pgdata");
        let copied = Command::new("cp").arg("-a").arg(template.dir.path().join("pgdata")).arg(&data).status();
        if !copied.is_ok_and(|s| s.success()) {
            return Err("cannot copy the template database directory".into());
        }
        if place.is_some() {
            // Reached over its namespace's links, not loopback: trusted from any address, as the
            // template trusts loopback (the namespace is the test's alone).
            let hba = data.join("pg_hba.conf");
            let mut rules = std::fs::read_to_string(&hba).map_err(|e| format!("{}: {e}", hba.display()))?;
            rules.push_str("\nhost all all 0.0.0.0/0 trust\n");
            std::fs::write(&hba, rules).map_err(|e| format!("{}: {e}", hba.display()))?;
        }
        own(dir.path(), template.user.as_deref())?;
        own(parent, template.user.as_deref())?;
        // The copy made durable, as initdb's own would be: a power-cut test's disk loses what
        // was not synced, and a cluster without its PG_VERSION does not start.
        sync_tree(&data).map_err(|e| format!("cannot sync the copied database directory: {e}"))?;
        let port = free_port()?;
        let (netns, host) = match place {
            Some((netns, host)) => (Some(netns), host),
            None => (None, "127.0.0.1".to_string()),
        };
        let (child, stdin) = serve(template, netns.as_deref(), dir.path(), &data, port, (fsync, buffers_mb))?;
        let server = Postgres { port, netns, host, fsync, buffers_mb, child, stdin, dir, data };
        server.ready().await?;
        Ok(server)
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL of database `name` (made by [`Postgres::database`]).
    pub fn url(&self, name: &str) -> String {
        self.url_at(&self.host, name)
    }

    /// The URL of database `name` through another of the server's addresses (in a namespace,
    /// each node's own link).
    pub fn url_at(&self, host: &str, name: &str) -> String {
        format!("postgres://hearth@{host}:{}/{name}", self.port)
    }

    /// Creates database `name` unless it exists; its URL.
    pub async fn database(&self, name: &str) -> Result<String, String> {
        let client = self.connect("postgres").await?;
        let exists = client.query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name]).await;
        if exists.map_err(|e| e.to_string())?.is_none() {
            let create = format!("CREATE DATABASE \"{}\"", name.replace('"', ""));
            client.batch_execute(&create).await.map_err(|e| e.to_string())?;
        }
        Ok(self.url(name))
    }

    /// A client of database `name`.
    pub async fn connect(&self, name: &str) -> Result<tokio_postgres::Client, String> {
        let (client, connection) =
            tokio_postgres::connect(&self.url(name), tokio_postgres::NoTls).await.map_err(|e| e.to_string())?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(client)
    }

    /// Stops the server at once (as a crash would) and waits for it.
    pub fn kill(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }

    /// Starts the server again on the same port and data after [`Postgres::kill`].
    pub async fn restart(&mut self) -> Result<(), String> {
        let template = TEMPLATE.get_or_init(template).as_ref().map_err(Clone::clone)?;
        let tuning = (self.fsync, self.buffers_mb);
        (self.child, self.stdin) =
            serve(template, self.netns.as_deref(), self.dir.path(), &self.data, self.port, tuning)?;
        self.ready().await
    }

    /// Waits until the server accepts a connection.
    async fn ready(&self) -> Result<(), String> {
        let started = Instant::now();
        loop {
            match self.connect("postgres").await {
                Ok(_) => return Ok(()),
                Err(e) if started.elapsed() > READY => return Err(format!("postgres did not start: {e}")),
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

/// Runs the server of `data` on `port` (in `netns`, on all its addresses, when given), its
/// socket in `dir`, under the shell that stops it (an immediate shutdown) once its standard input
/// closes.
fn serve(
    template: &Template,
    netns: Option<&str>,
    dir: &Path,
    data: &Path,
    port: u16,
    (fsync, buffers_mb): (bool, u32),
) -> Result<(Child, Option<ChildStdin>), String> {
    let fsync = if fsync { "on" } else { "off" };
    let wal = wal_for(buffers_mb);
    let listen = if netns.is_some() { "'*'" } else { "127.0.0.1" };
    let server = format!(
        "{} -D {} -p {port} -k {} -c listen_addresses={listen} -c fsync={fsync} -c max_connections=200 \
         -c shared_buffers={buffers_mb}MB -c max_wal_size={wal} -c log_min_messages=fatal",
        template.bin.join("postgres").display(),
        data.display(),
        dir.display(),
    );
    let script = format!("{server} & pid=$!; read _; kill -QUIT $pid; wait $pid");
    let mut command = match netns {
        Some(netns) => {
            let mut command = Command::new("ip");
            command.args(["netns", "exec", netns]);
            if let Some(user) = template.user.as_deref() {
                command.args(["runuser", "-u", user, "--"]);
            }
            command.arg("sh");
            command
        }
        None => as_user(template.user.as_deref(), "sh"),
    };
    command.arg("-c").arg(script).stdin(Stdio::piped()).stdout(Stdio::null()).stderr(Stdio::null());
    let mut child = command.spawn().map_err(|e| format!("cannot start postgres: {e}"))?;
    let stdin = child.stdin.take();
    Ok((child, stdin))
}

/// The `max_wal_size` of a server with `buffers_mb` of shared buffers: a benchmark's (more than a
/// test's [`TEST_BUFFERS_MB`]) is set up as the book's cluster chapter sets up a busy relay's,
/// 8 GB, so that its checkpoints come by time, not every gigabyte of WAL (each rewrites whole
/// pages into the WAL again: 8.9 GB of WAL for 1M events against 3.0 GB); a test's keeps
/// PostgreSQL's 1 GB.
fn wal_for(buffers_mb: u32) -> &'static str {
    if buffers_mb > TEST_BUFFERS_MB { "8GB" } else { "1GB" }
}

/// Finds the programs and runs `initdb` once.
fn template() -> Result<Template, String> {
    let bin = bin_dir().ok_or(
        "PostgreSQL's programs are not installed: `apt-get install postgresql` (or set HEARTH_PG_BIN to their directory)",
    )?;
    let user = is_root().then(|| "postgres".to_string());
    sweep();
    let dir = scratch().map_err(|e| e.to_string())?;
    own(dir.path(), user.as_deref())?;
    let data = dir.path().join("pgdata");
    let mut initdb = as_user(user.as_deref(), &bin.join("initdb").to_string_lossy());
    initdb.args(["-A", "trust", "-U", "hearth", "-E", "UTF8", "--locale=C", "--no-sync", "-D"]).arg(&data);
    let out = initdb.output().map_err(|e| format!("cannot run initdb: {e}"))?;
    if !out.status.success() {
        return Err(format!("initdb failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(Template { bin, dir, user })
}

/// What this module's scratch directories are named after.
const SCRATCH: &str = "hearth-pg-";

/// A scratch directory, with the process that owns it written in it (`owner.pid`), so that
/// [`sweep`] can tell it is left over.
fn scratch() -> std::io::Result<tempfile::TempDir> {
    let dir = tempfile::Builder::new().prefix(SCRATCH).tempdir()?;
    std::fs::write(dir.path().join("owner.pid"), std::process::id().to_string())?;
    Ok(dir)
}

/// Removes the scratch directories whose process is gone: a run killed (a benchmark's timeout,
/// a `kill -9`) drops nothing, and each of its servers' data would otherwise stay behind, up to
/// gigabytes a benchmark. Its server stopped when that process died (see [`serve`]).
fn sweep() {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(SCRATCH) {
            continue;
        }
        let owner = std::fs::read_to_string(path.join("owner.pid")).ok().and_then(|pid| pid.trim().parse::<u32>().ok());
        if owner.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(&path);
        }
    }
}

fn bin_dir() -> Option<PathBuf> {
    if let Ok(dir) = std::env::var("HEARTH_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let from_config = Command::new("pg_config").arg("--bindir").output().ok().filter(|o| o.status.success());
    if let Some(out) = from_config {
        let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        if dir.join("initdb").exists() {
            return Some(dir);
        }
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_string_lossy().parse().ok()?, e.path().join("bin"))))
        .filter(|(_, bin): &(u32, PathBuf)| bin.join("initdb").exists())
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// `program` run as `user` (when the test runs as root), else as this process's user.
fn as_user(user: Option<&str>, program: &str) -> Command {
    match user {
        Some(user) => {
            let mut command = Command::new("runuser");
            command.args(["-u", user, "--", program]);
            command
        }
        None => Command::new(program),
    }
}

/// Gives `dir` (recursively) to `user`.
fn own(dir: &Path, user: Option<&str>) -> Result<(), String> {
    let Some(user) = user else { return Ok(()) };
    let status = Command::new("chown").arg("-R").arg(format!("{user}:")).arg(dir).status();
    match status {
        Ok(s) if s.success() => Ok(()),
        _ => Err(format!("cannot give {} to the {user} user", dir.display())),
    }
}

/// Syncs every file and directory under `dir`, and `dir` itself.
fn sync_tree(dir: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            sync_tree(&path)?;
        } else {
            std::fs::File::open(&path)?.sync_all()?;
        }
    }
    std::fs::File::open(dir)?.sync_all()
}

pub(super) fn free_port() -> Result<u16, String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
    Ok(listener.local_addr().map_err(|e| e.to_string())?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory whose process is gone is removed by the next start; this process's
    /// own is kept.
    #[test]
    fn a_killed_run_leaves_no_scratch_directory_behind() {
        let mut gone = Command::new("true").spawn().unwrap();
        let dead = gone.id();
        gone.wait().unwrap();
        let left = tempfile::Builder::new().prefix(SCRATCH).tempdir().unwrap().keep();
        std::fs::write(left.join("owner.pid"), dead.to_string()).unwrap();
        std::fs::create_dir(left.join("pgdata")).unwrap();
        let mine = scratch().unwrap();
        sweep();
        let kept = mine.path().exists();
        let removed = !left.exists();
        let _ = std::fs::remove_dir_all(&left);
        assert!(removed, "{} outlived its process", left.display());
        assert!(kept, "a live process's scratch directory was removed");
    }
}
