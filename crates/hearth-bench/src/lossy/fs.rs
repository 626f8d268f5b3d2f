//! The lossy filesystem's answers to the kernel: a FUSE passthrough to a backing directory whose
//! file contents reach that directory only when synced ([`super::pages::Dirty`] holds the rest).
//! Directory operations, ownership and modes are applied to the backing directory at once;
//! times are not kept (nothing the power-cut runs start reads them).

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fuser::{
    Errno, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    Request, TimeOrNow, WriteFlags,
};

use super::inodes::{Lossy, O_EXCL, Open, TTL, errno, own};
use super::pages::read_full;

/// Replies with `result`'s value through `ok`, or its error.
macro_rules! answer {
    ($reply:expr, $result:expr, $ok:expr) => {
        match $result {
            Ok(v) => $ok($reply, v),
            Err(e) => $reply.error(e),
        }
    };
}

impl Filesystem for Lossy {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let mut state = self.state();
        let got = Lossy::child(&state, parent, name).and_then(|path| self.entry(&mut state, path));
        answer!(reply, got, |r: ReplyEntry, a| r.entry(&TTL, &a, Generation(0)));
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        let got = self.getattr_of(&self.state(), ino.0);
        answer!(reply, got, |r: ReplyAttr, a| r.attr(&TTL, &a));
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut state = self.state();
        let set = (|| {
            // By name (a file removed while open has none, and is only ever truncated).
            let path = || state.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT);
            if let Some(mode) = mode {
                std::fs::set_permissions(path()?, std::fs::Permissions::from_mode(mode & 0o7777)).map_err(errno)?;
            }
            if uid.is_some() || gid.is_some() {
                std::os::unix::fs::lchown(path()?, uid, gid).map_err(errno)?;
            }
            if let Some(size) = size {
                Lossy::open(&mut state, ino.0)?.dirty().map_err(errno)?.0.truncate(size);
            }
            self.getattr_of(&state, ino.0)
        })();
        answer!(reply, set, |r: ReplyAttr, a| r.attr(&TTL, &a));
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let state = self.state();
        let got = state.paths.get(&ino.0).ok_or(Errno::ENOENT).and_then(|p| std::fs::read_link(p).map_err(errno));
        answer!(reply, got, |r: ReplyData, t: PathBuf| r.data(t.as_os_str().as_encoded_bytes()));
    }

    fn mkdir(&self, req: &Request, parent: INodeNo, name: &OsStr, mode: u32, umask: u32, reply: ReplyEntry) {
        let mut state = self.state();
        let made = Lossy::child(&state, parent, name).and_then(|path| {
            std::fs::create_dir(&path).map_err(errno)?;
            own(&path, mode & !umask, req)?;
            self.entry(&mut state, path)
        });
        answer!(reply, made, |r: ReplyEntry, a| r.entry(&TTL, &a, Generation(0)));
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let gone = Lossy::child(&state, parent, name).and_then(|path| {
            let ino = self.ino(&std::fs::symlink_metadata(&path).map_err(errno)?);
            std::fs::remove_file(&path).map_err(errno)?;
            if state.paths.get(&ino) == Some(&path) {
                state.paths.remove(&ino);
            }
            Lossy::drop_if_gone(&mut state, ino);
            Ok(())
        });
        answer!(reply, gone, |r: ReplyEmpty, ()| r.ok());
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let mut state = self.state();
        let gone = Lossy::child(&state, parent, name).and_then(|path| {
            std::fs::remove_dir(&path).map_err(errno)?;
            state.paths.retain(|_, p| *p != path);
            Ok(())
        });
        answer!(reply, gone, |r: ReplyEmpty, ()| r.ok());
    }

    fn symlink(&self, req: &Request, parent: INodeNo, link_name: &OsStr, target: &Path, reply: ReplyEntry) {
        let mut state = self.state();
        let made = Lossy::child(&state, parent, link_name).and_then(|path| {
            std::os::unix::fs::symlink(target, &path).map_err(errno)?;
            std::os::unix::fs::lchown(&path, Some(req.uid()), Some(req.gid())).map_err(errno)?;
            self.entry(&mut state, path)
        });
        answer!(reply, made, |r: ReplyEntry, a| r.entry(&TTL, &a, Generation(0)));
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        let moved = (|| {
            if flags.bits() != 0 {
                return Err(Errno::EINVAL);
            }
            let (from, to) = (Lossy::child(&state, parent, name)?, Lossy::child(&state, newparent, newname)?);
            let replaced = std::fs::symlink_metadata(&to).ok().map(|m| self.ino(&m));
            std::fs::rename(&from, &to).map_err(errno)?;
            for path in state.paths.values_mut() {
                if let Ok(rest) = path.strip_prefix(&from) {
                    *path = if rest.as_os_str().is_empty() { to.clone() } else { to.join(rest) };
                }
            }
            if let Some(ino) = replaced {
                Lossy::drop_if_gone(&mut state, ino);
            }
            Ok(())
        })();
        answer!(reply, moved, |r: ReplyEmpty, ()| r.ok());
    }

    fn link(&self, _req: &Request, ino: INodeNo, newparent: INodeNo, newname: &OsStr, reply: ReplyEntry) {
        let state = self.state();
        let made = (|| {
            let from = state.paths.get(&ino.0).cloned().ok_or(Errno::ENOENT)?;
            let to = Lossy::child(&state, newparent, newname)?;
            std::fs::hard_link(&from, &to).map_err(errno)?;
            let attr = self.getattr_of(&state, ino.0)?;
            Ok(attr)
        })();
        answer!(reply, made, |r: ReplyEntry, a| r.entry(&TTL, &a, Generation(0)));
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let opened = Lossy::handle(&mut self.state(), ino.0, flags.0);
        answer!(reply, opened, |r: ReplyOpen, fh| r.opened(FileHandle(fh), FopenFlags::empty()));
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let mut state = self.state();
        let got = Lossy::open(&mut state, ino.0).and_then(|open| match &open.dirty {
            Some(dirty) => dirty.read(&open.file, offset, size).map_err(errno),
            None => {
                let len = open.file.metadata().map_err(errno)?.len();
                let mut buf = vec![0; len.saturating_sub(offset).min(u64::from(size)) as usize];
                read_full(&open.file, &mut buf, offset).map_err(errno)?;
                Ok(buf)
            }
        });
        answer!(reply, got, |r: ReplyData, d: Vec<u8>| r.data(&d));
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let mut state = self.state();
        let synced = state.handles.get(&fh.0).copied().unwrap_or(false);
        let wrote = Lossy::open(&mut state, ino.0).and_then(|open| {
            let (dirty, file) = open.dirty().map_err(errno)?;
            dirty.write(file, offset, data).map_err(errno)?;
            if synced {
                open.sync().map_err(errno)?;
            }
            Ok(data.len() as u32)
        });
        answer!(reply, wrote, |r: ReplyWrite, n| r.written(n));
    }

    fn flush(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _lock_owner: LockOwner, reply: ReplyEmpty) {
        // A close is not a sync: what it leaves unsynced stays in "memory".
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut state = self.state();
        state.handles.remove(&fh.0);
        if let Some(open) = state.files.get_mut(&ino.0) {
            open.handles = open.handles.saturating_sub(1);
            if open.handles == 0 && open.dirty.is_none() {
                state.files.remove(&ino.0);
            }
        }
        Lossy::drop_if_gone(&mut state, ino.0);
        reply.ok();
    }

    fn fsync(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        let mut state = self.state();
        let synced = match state.files.get_mut(&ino.0) {
            Some(open) => open.sync().map_err(errno),
            None => Ok(()),
        };
        answer!(reply, synced, |r: ReplyEmpty, ()| r.ok());
    }

    fn readdir(&self, _req: &Request, ino: INodeNo, _fh: FileHandle, offset: u64, mut reply: ReplyDirectory) {
        let state = self.state();
        let listed = (|| {
            let path = state.paths.get(&ino.0).ok_or(Errno::ENOENT)?;
            let mut entries = vec![(ino.0, FileType::Directory, ".".into()), (ino.0, FileType::Directory, "..".into())];
            let mut names = Vec::new();
            for entry in std::fs::read_dir(path).map_err(errno)? {
                let entry = entry.map_err(errno)?;
                let Ok(meta) = entry.metadata() else { continue };
                let kind = FileType::from_std(meta.file_type()).unwrap_or(FileType::RegularFile);
                names.push((self.ino(&meta), kind, entry.file_name()));
            }
            names.sort_by(|a, b| a.2.cmp(&b.2));
            entries.extend(names);
            Ok(entries)
        })();
        match listed {
            Ok(entries) => {
                for (i, (ino, kind, name)) in entries.into_iter().enumerate().skip(offset as usize) {
                    if reply.add(INodeNo(ino), i as u64 + 1, kind, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn fsyncdir(&self, _req: &Request, _ino: INodeNo, _fh: FileHandle, _datasync: bool, reply: ReplyEmpty) {
        // Directory operations reached the backing directory when they were made.
        reply.ok();
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        match rustix::fs::statvfs(&self.backing) {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(Errno::from_i32(e.raw_os_error())),
        }
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        // The kernel checks permissions itself (default_permissions).
        reply.ok();
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let mut state = self.state();
        let made = (|| {
            let path = Lossy::child(&state, parent, name)?;
            let mut options = OpenOptions::new();
            options.read(true).write(true).mode(mode & !umask & 0o7777);
            if flags & O_EXCL != 0 {
                options.create_new(true)
            } else {
                options.create(true)
            };
            let file = options.open(&path).map_err(errno)?;
            own(&path, mode & !umask, req)?;
            let attr = self.entry(&mut state, path)?;
            state.files.entry(attr.ino.0).or_insert(Open { file, dirty: None, handles: 0 });
            let fh = Lossy::handle(&mut state, attr.ino.0, flags)?;
            Ok((attr, fh))
        })();
        answer!(reply, made, |r: ReplyCreate, (a, fh)| r.created(
            &TTL,
            &a,
            Generation(0),
            FileHandle(fh),
            FopenFlags::empty()
        ));
    }
}
