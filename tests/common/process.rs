//! The harness's child processes: the `hearth` and `hearth-bench` binaries started for a test,
//! each killed (and waited for) when its handle drops, pass or fail.

use std::process::{Command, Stdio};

use super::listening_addr;

/// The `hearth` binary, its log level left to the test.
pub fn hearth() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_hearth"));
    cmd.env_remove("RUST_LOG");
    cmd
}

/// Kills the relay if a test fails before it stops it.
pub struct Running(pub std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `hearth` binary on `dir/data` (run in `dir`, `env` besides) and the address it listens on.
pub fn start_with(dir: &std::path::Path, env: &[(&str, &str)]) -> (Running, String) {
    start_as(hearth(), dir, env)
}

/// Starts `command` (the `hearth` binary, or a shell that execs it) as [`start_with`] does.
pub fn start_as(mut command: Command, dir: &std::path::Path, env: &[(&str, &str)]) -> (Running, String) {
    let mut child = command
        .current_dir(dir)
        .env("HEARTH_SERVER__BIND", "127.0.0.1:0")
        .env("HEARTH_STORAGE__DATA_DIR", dir.join("data"))
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let addr = listening_addr(&mut child);
    (Running(child), addr)
}

/// SIGTERM, and the exit status once it has stopped.
pub fn sigterm(running: &mut Running) -> std::process::ExitStatus {
    let status = Command::new("kill").arg("-TERM").arg(running.0.id().to_string()).status().unwrap();
    assert!(status.success());
    running.0.wait().unwrap()
}

/// The `hearth-bench` binary (the workspace's `crates/hearth-bench`: the crash loop and the
/// lossy filesystem), beside the `hearth` binary these tests run. `cargo test` at the root
/// builds both; a run of this package alone (`-p hearth`) builds it here, once, with the same
/// profile.
pub fn bench_exe() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let exe = std::path::Path::new(env!("CARGO_BIN_EXE_hearth")).with_file_name("hearth-bench");
            if !exe.exists() {
                let profile = exe.parent().and_then(|d| d.file_name()).and_then(|n| n.to_str()).unwrap_or("debug");
                let mut build = std::process::Command::new(env!("CARGO"));
                build.args(["build", "--package", "hearth-bench", "--manifest-path"]);
                build.arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"));
                if profile == "release" {
                    build.arg("--release");
                }
                assert!(build.status().unwrap().success(), "cannot build hearth-bench");
            }
            exe
        })
        .clone()
}
