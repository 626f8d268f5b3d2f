//! `lossy`: the filesystem of the power-cut runs, and the handle that mounts and cuts it.
//!
//! A FUSE filesystem over a backing directory that keeps every write in memory until its file
//! is synced (`fsync`/`fdatasync`, or each write of a file opened `O_SYNC`/`O_DSYNC`), as a
//! kernel's page cache does, and then writes it to the backing directory. It runs in a process
//! of its own (`hearth-bench lossy`); killing that process is the power cut: what was written
//! and not synced is gone with it, what was synced is on the backing directory, and the next
//! mount serves exactly that. Directory operations (create, rename, unlink, mkdir, chmod, chown)
//! reach the backing directory at once: the model is a disk whose metadata is journaled
//! synchronously and whose file contents are not, so a program that renames a file it never
//! synced finds it short after the cut, and a truncation not synced is undone.
//!
//! Why a filesystem rather than hooks in the relay: it takes away what every program on it had
//! not synced — the event log, sled's pages, the search index, the media blobs, PostgreSQL's
//! WAL and heap — without the relay's help, so a write path that forgets its sync loses data
//! here whoever wrote it.

mod fs;
mod inodes;
mod pages;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::drive::Res;

/// What the serving process prints once the filesystem is mounted.
const MOUNTED: &str = "mounted";

/// Mounts the filesystem of `backing` on `mount` and serves it until this process is killed
/// (`hearth-bench lossy`), or until its standard input ends — the process that started it is
/// gone — when it unmounts itself, so no mount outlives a test that died.
pub(crate) fn serve(backing: &Path, mount: &Path) -> Res<()> {
    let fs = inodes::Lossy::new(backing.to_path_buf()).map_err(|e| format!("{}: {e}", backing.display()))?;
    let mut config = fuser::Config::default();
    config.mount_options =
        vec![fuser::MountOption::FSName("hearth-lossy".into()), fuser::MountOption::DefaultPermissions];
    config.acl = fuser::SessionACL::All;
    config.n_threads = Some(2);
    let session = fuser::Session::new(fs, mount, &config).map_err(|e| {
        format!("cannot mount a FUSE filesystem on {} ({e}): this needs /dev/fuse and root", mount.display())
    })?;
    let mounted = mount.to_path_buf();
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        let _ = Command::new("umount").arg("-l").arg(&mounted).status();
        std::process::exit(0);
    });
    println!("{MOUNTED}");
    session.run().map_err(|e| format!("the lossy filesystem stopped: {e}"))
}

/// A lossy filesystem mounted by a child process; dropped, it is cut and unmounted.
pub(crate) struct Mounted {
    child: Option<Child>,
    mount: PathBuf,
}

/// How long a mount may take.
const MOUNT_DEADLINE: Duration = Duration::from_secs(30);

impl Mounted {
    /// Mounts `backing` on `mount` (both made if missing) through `hearth-bench lossy`.
    pub(crate) fn mount(backing: &Path, mount: &Path) -> Res<Mounted> {
        std::fs::create_dir_all(backing).map_err(|e| format!("{}: {e}", backing.display()))?;
        std::fs::create_dir_all(mount).map_err(|e| format!("{}: {e}", mount.display()))?;
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut child = Command::new(exe)
            .arg("lossy")
            .arg(backing)
            .arg(mount)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("cannot start the lossy filesystem: {e}"))?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let first = BufReader::new(stdout).lines().next();
            let _ = tx.send(first.and_then(Result::ok));
        });
        let mounted = Mounted { child: Some(child), mount: mount.to_path_buf() };
        match rx.recv_timeout(MOUNT_DEADLINE) {
            Ok(Some(line)) if line == MOUNTED => Ok(mounted),
            // Its own error is on this process's standard error.
            _ => Err(format!("the lossy filesystem did not mount on {}", mount.display())),
        }
    }

    /// The power cut: the filesystem's process is killed with what it had not synced, and the
    /// mount taken away (every program on it must have been stopped first).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = Command::new("umount").arg("-l").arg(&self.mount).stderr(Stdio::null()).status();
        }
    }

    /// The power cut ([`Mounted::stop`]), then the same backing directory mounted again: the
    /// disk as the cut left it.
    pub(crate) fn cut_and_remount(mut self, backing: &Path) -> Res<Mounted> {
        self.stop();
        Mounted::mount(backing, &self.mount)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        self.stop();
    }
}
