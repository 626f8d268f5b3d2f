//! What the lossy filesystem knows: each inode's path, the files open or holding unsynced bytes
//! ([`Dirty`]), the open handles, and the attributes it answers with.
//!
//! Inode numbers are the backing directory's own (its root is FUSE's 1), each remembered with
//! the path it was last seen at.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, Request};

use super::pages::Dirty;

/// How long the kernel may keep an answer: every change goes through the kernel, which keeps
/// its copies up to date itself.
pub(super) const TTL: Duration = Duration::from_secs(1);

/// The filesystem over `backing`.
pub(super) struct Lossy {
    pub(super) backing: PathBuf,
    /// The backing root's inode number (FUSE's 1).
    root: u64,
    state: Mutex<State>,
}

#[derive(Default)]
pub(super) struct State {
    /// The path each inode was last seen at.
    pub(super) paths: HashMap<u64, PathBuf>,
    /// Files open now or holding unsynced bytes.
    pub(super) files: HashMap<u64, Open>,
    /// Open handles: whether each write through it is synced at once (O_SYNC, O_DSYNC).
    pub(super) handles: HashMap<u64, bool>,
    next_handle: u64,
}

/// A backing file, its unsynced part and how many handles have it open.
pub(super) struct Open {
    pub(super) file: File,
    pub(super) dirty: Option<Dirty>,
    pub(super) handles: usize,
}

impl Open {
    /// A sync: the unsynced part written to the backing file.
    pub(super) fn sync(&mut self) -> std::io::Result<()> {
        match self.dirty.take() {
            Some(dirty) => dirty.write_back(&self.file),
            None => Ok(()),
        }
    }

    /// Its unsynced part (made if there is none) and its backing file.
    pub(super) fn dirty(&mut self) -> std::io::Result<(&mut Dirty, &File)> {
        if self.dirty.is_none() {
            self.dirty = Some(Dirty::new(self.file.metadata()?.len()));
        }
        let Open { file, dirty, .. } = self;
        Ok((dirty.get_or_insert_with(|| Dirty::new(0)), file))
    }
}

pub(super) fn errno(e: std::io::Error) -> Errno {
    Errno::from(e)
}

impl Lossy {
    pub(super) fn new(backing: PathBuf) -> std::io::Result<Lossy> {
        let root = std::fs::metadata(&backing)?.ino();
        let state = State { paths: HashMap::from([(1, backing.clone())]), next_handle: 1, ..State::default() };
        Ok(Lossy { backing, root, state: Mutex::new(state) })
    }

    pub(super) fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn ino(&self, meta: &Metadata) -> u64 {
        if meta.ino() == self.root { 1 } else { meta.ino() }
    }

    fn attr(&self, meta: &Metadata, dirty: Option<&Dirty>) -> FileAttr {
        let size = dirty.map_or(meta.len(), Dirty::len);
        let at =
            |secs: i64, nanos: i64| UNIX_EPOCH + Duration::new(secs.max(0) as u64, nanos.clamp(0, 999_999_999) as u32);
        let kind = FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile);
        FileAttr {
            ino: INodeNo(self.ino(meta)),
            size,
            blocks: size.div_ceil(512),
            atime: at(meta.atime(), meta.atime_nsec()),
            mtime: at(meta.mtime(), meta.mtime_nsec()),
            ctime: at(meta.ctime(), meta.ctime_nsec()),
            crtime: SystemTime::UNIX_EPOCH,
            kind,
            perm: (meta.mode() & 0o7777) as u16,
            nlink: meta.nlink() as u32,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev() as u32,
            blksize: 4096,
            flags: 0,
        }
    }

    /// The attributes of the file at `path` (remembered as its inode's path).
    pub(super) fn entry(&self, state: &mut State, path: PathBuf) -> Result<FileAttr, Errno> {
        let meta = std::fs::symlink_metadata(&path).map_err(errno)?;
        let ino = self.ino(&meta);
        let attr = self.attr(&meta, state.files.get(&ino).and_then(|o| o.dirty.as_ref()));
        state.paths.insert(ino, path);
        Ok(attr)
    }

    pub(super) fn getattr_of(&self, state: &State, ino: u64) -> Result<FileAttr, Errno> {
        if let Some(open) = state.files.get(&ino) {
            let meta = open.file.metadata().map_err(errno)?;
            return Ok(self.attr(&meta, open.dirty.as_ref()));
        }
        let path = state.paths.get(&ino).ok_or(Errno::ENOENT)?;
        let meta = std::fs::symlink_metadata(path).map_err(errno)?;
        Ok(self.attr(&meta, None))
    }

    /// `ino`'s open backing file, opened (read and write: this runs as root) if it is not.
    pub(super) fn open(state: &mut State, ino: u64) -> Result<&mut Open, Errno> {
        if !state.files.contains_key(&ino) {
            let path = state.paths.get(&ino).ok_or(Errno::ENOENT)?;
            let file = OpenOptions::new().read(true).write(true).open(path).map_err(errno)?;
            state.files.insert(ino, Open { file, dirty: None, handles: 0 });
        }
        state.files.get_mut(&ino).ok_or(Errno::ENOENT)
    }

    pub(super) fn child(state: &State, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(state.paths.get(&parent.0).ok_or(Errno::ENOENT)?.join(name))
    }

    /// A new handle on `ino`.
    pub(super) fn handle(state: &mut State, ino: u64, flags: i32) -> Result<u64, Errno> {
        let open = Lossy::open(state, ino)?;
        open.handles += 1;
        if flags & O_TRUNC != 0 {
            open.dirty().map_err(errno)?.0.truncate(0);
        }
        let fh = state.next_handle;
        state.next_handle += 1;
        state.handles.insert(fh, flags & O_DSYNC != 0);
        Ok(fh)
    }

    /// Forgets `ino`'s file if nothing has it open and its last name is gone.
    pub(super) fn drop_if_gone(state: &mut State, ino: u64) {
        if let Some(open) = state.files.get(&ino)
            && open.handles == 0
            && open.file.metadata().is_ok_and(|m| m.nlink() == 0)
        {
            state.files.remove(&ino);
        }
    }
}

/// The open flags this filesystem reads (Linux's values): O_TRUNC, O_DSYNC (set by O_SYNC as
/// well) and O_EXCL.
pub(super) const O_TRUNC: i32 = 0o1000;
pub(super) const O_DSYNC: i32 = 0o10000;
pub(super) const O_EXCL: i32 = 0o200;

/// Gives `path` the mode asked for (whatever this process's umask) and the caller's ownership.
pub(super) fn own(path: &Path, mode: u32, req: &Request) -> Result<(), Errno> {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(errno)?;
    std::os::unix::fs::lchown(path, Some(req.uid()), Some(req.gid())).map_err(errno)
}
