//! A real Garage (the self-hosted S3-compatible object store) for a test: [`Garage::start`] runs
//! one node on free ports of 127.0.0.1 with a temporary directory, lays it out, makes a bucket and
//! a key allowed on it, and [`Garage::configure`] points a relay's `[media]` at it.
//!
//! Owns the node's configuration file (SQLite metadata, one replica), its start and its end: the
//! server runs under a shell that kills it the moment the test process lets go of its standard
//! input — on drop, on [`Garage::kill`], and equally when the test process dies — so no server
//! outlives its test. The binary is the caller's (`tests/garage/install.sh` builds it once per
//! machine).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

use super::postgres::free_port;
use crate::config::{MediaConfig, MediaStore, Secret};

/// How long the node may take to answer its command line.
const READY: Duration = Duration::from_secs(60);
/// The bucket every test's relays share.
pub const BUCKET: &str = "hearth-media";
/// The region the node signs for.
pub const REGION: &str = "garage";

/// A Garage node for a test; stopped when dropped.
pub struct Garage {
    bin: PathBuf,
    dir: tempfile::TempDir,
    s3_port: u16,
    child: Child,
    /// Held open until the drop: the shell kills the server when it closes.
    stdin: Option<ChildStdin>,
    key_id: String,
    secret: String,
}

impl Garage {
    /// Starts a node with the binary `bin`, a bucket [`BUCKET`] and a key allowed to read and
    /// write it.
    pub async fn start(bin: &Path) -> Result<Garage, String> {
        let dir = tempfile::Builder::new().prefix("hearth-garage-").tempdir().map_err(|e| e.to_string())?;
        let (rpc_port, s3_port) = (free_port()?, free_port()?);
        let mut secret = [0u8; 32];
        getrandom::fill(&mut secret).map_err(|e| e.to_string())?;
        let config = format!(
            "metadata_dir = \"{meta}\"\ndata_dir = \"{data}\"\ndb_engine = \"sqlite\"\nreplication_factor = 1\n\
             rpc_bind_addr = \"127.0.0.1:{rpc_port}\"\nrpc_public_addr = \"127.0.0.1:{rpc_port}\"\n\
             rpc_secret = \"{secret}\"\n\n[s3_api]\ns3_region = \"{REGION}\"\napi_bind_addr = \"127.0.0.1:{s3_port}\"\n\
             root_domain = \".s3.garage.localhost\"\n",
            meta = dir.path().join("meta").display(),
            data = dir.path().join("data").display(),
            secret = hex::encode(secret),
        );
        std::fs::write(dir.path().join("garage.toml"), config).map_err(|e| e.to_string())?;
        let (child, stdin) = serve(bin, dir.path())?;
        let mut garage =
            Garage { bin: bin.to_path_buf(), dir, s3_port, child, stdin, key_id: String::new(), secret: String::new() };
        let id = garage.ready().await?;
        let node = id.split('@').next().unwrap_or_default().to_string();
        garage.cli(&["layout", "assign", "-z", "dc1", "-c", "1G", &node])?;
        garage.cli(&["layout", "apply", "--version", "1"])?;
        garage.cli(&["bucket", "create", BUCKET])?;
        let created = garage.cli(&["key", "create", "hearth-test"])?;
        let field = |name: &str| {
            created
                .lines()
                .find_map(|l| l.trim().strip_prefix(name).map(|v| v.trim().to_string()))
                .ok_or_else(|| format!("garage key create printed no {name}: {created}"))
        };
        garage.key_id = field("Key ID:")?;
        garage.secret = field("Secret key:")?;
        garage.cli(&["bucket", "allow", "--read", "--write", "--owner", BUCKET, "--key", "hearth-test"])?;
        Ok(garage)
    }

    /// `http://127.0.0.1:<port>`: its S3 API.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.s3_port)
    }

    /// The access key's secret (a test checks that no log or API shows it).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    /// Points `media` at this node's bucket (`media.store = "s3"`).
    pub fn configure(&self, media: &mut MediaConfig) {
        media.store = MediaStore::S3;
        media.s3_endpoint = self.endpoint();
        media.s3_bucket = BUCKET.to_string();
        media.s3_region = REGION.to_string();
        media.s3_access_key_id = self.key_id.clone();
        media.s3_secret_access_key = Secret(self.secret.clone());
    }

    /// Stops the node at once (as a crash or a cut cable would look to the relay) and waits for it.
    pub fn kill(&mut self) {
        self.stdin.take();
        let _ = self.child.wait();
    }

    /// Starts the node again on the same ports and data after [`Garage::kill`].
    pub async fn restart(&mut self) -> Result<(), String> {
        (self.child, self.stdin) = serve(&self.bin, self.dir.path())?;
        self.ready().await.map(drop)
    }

    /// Waits until the node answers its command line; its `<id>@<address>`.
    async fn ready(&self) -> Result<String, String> {
        let started = Instant::now();
        loop {
            match self.cli(&["node", "id", "-q"]) {
                Ok(id) => {
                    // The S3 port takes connections a moment after the RPC one answers.
                    if std::net::TcpStream::connect(("127.0.0.1", self.s3_port)).is_ok() {
                        return Ok(id.trim().to_string());
                    }
                }
                Err(e) if started.elapsed() > READY => return Err(format!("garage did not start: {e}")),
                Err(_) => {}
            }
            if started.elapsed() > READY {
                return Err("garage's S3 port never opened".into());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Runs `garage -c <config> <args>`; its standard output.
    fn cli(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.bin)
            .arg("-c")
            .arg(self.dir.path().join("garage.toml"))
            .args(args)
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", self.bin.display()))?;
        if !out.status.success() {
            return Err(format!("garage {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

impl Drop for Garage {
    fn drop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"\n");
        }
        let _ = self.child.wait();
    }
}

/// Runs `garage server` on the configuration in `dir`, under the shell that kills it once its
/// standard input closes.
fn serve(bin: &Path, dir: &Path) -> Result<(Child, Option<ChildStdin>), String> {
    let server = format!("'{}' -c '{}' server", bin.display(), dir.join("garage.toml").display());
    let script = format!("{server} >'{}' 2>&1 & pid=$!; read _; kill -9 $pid; wait $pid", dir.join("log").display());
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start garage: {e}"))?;
    let stdin = child.stdin.take();
    Ok((child, stdin))
}
