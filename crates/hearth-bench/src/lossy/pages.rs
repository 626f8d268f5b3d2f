//! What a file of the lossy filesystem holds that its backing file does not yet: the pages
//! written since its last sync and its length, as a kernel's page cache holds them. A sync writes
//! them to the backing file; a power cut drops them.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// The unit of what is kept: a page.
const PAGE: u64 = 4096;

/// The unsynced part of one file.
pub(super) struct Dirty {
    /// Pages written since the last sync, whole, by index.
    pages: BTreeMap<u64, Vec<u8>>,
    /// The file's length as its programs see it.
    len: u64,
    /// The backing file's bytes below this offset are still the file's; past it (a truncation
    /// not yet synced) they read as zeros. Never more than `len`.
    valid: u64,
}

impl Dirty {
    /// Nothing unsynced yet over a backing file of `backing_len` bytes.
    pub(super) fn new(backing_len: u64) -> Dirty {
        Dirty { pages: BTreeMap::new(), len: backing_len, valid: backing_len }
    }

    /// The file's length as its programs see it.
    pub(super) fn len(&self) -> u64 {
        self.len
    }

    /// Page `index` as the file holds it now.
    fn page(&self, backing: &File, index: u64) -> io::Result<Vec<u8>> {
        if let Some(page) = self.pages.get(&index) {
            return Ok(page.clone());
        }
        let mut page = vec![0; PAGE as usize];
        let start = index * PAGE;
        let valid = self.valid.saturating_sub(start).min(PAGE) as usize;
        read_full(backing, &mut page[..valid], start)?;
        Ok(page)
    }

    /// Up to `size` bytes from `offset`.
    pub(super) fn read(&self, backing: &File, offset: u64, size: u32) -> io::Result<Vec<u8>> {
        let end = offset.saturating_add(u64::from(size)).min(self.len);
        let mut out = Vec::with_capacity(end.saturating_sub(offset) as usize);
        let mut at = offset;
        while at < end {
            let index = at / PAGE;
            let page = self.page(backing, index)?;
            let from = (at - index * PAGE) as usize;
            let to = (end - index * PAGE).min(PAGE) as usize;
            out.extend_from_slice(&page[from..to]);
            at = index * PAGE + to as u64;
        }
        Ok(out)
    }

    /// `data` written at `offset`.
    pub(super) fn write(&mut self, backing: &File, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let index = at / PAGE;
            let mut page = self.page(backing, index)?;
            let from = (at - index * PAGE) as usize;
            let n = (PAGE as usize - from).min(data.len() - done);
            page[from..from + n].copy_from_slice(&data[done..done + n]);
            self.pages.insert(index, page);
            done += n;
        }
        self.len = self.len.max(offset + data.len() as u64);
        Ok(())
    }

    /// The file cut (or extended with zeros) to `size` bytes.
    pub(super) fn truncate(&mut self, size: u64) {
        if size < self.len {
            let first_gone = size.div_ceil(PAGE);
            self.pages.retain(|index, _| *index < first_gone);
            if let Some(page) = self.pages.get_mut(&(size / PAGE)) {
                page[(size % PAGE) as usize..].fill(0);
            }
            self.valid = self.valid.min(size);
        }
        self.len = size;
    }

    /// Makes the backing file what the file holds now (a sync).
    pub(super) fn write_back(self, backing: &File) -> io::Result<()> {
        if backing.metadata()?.len() > self.valid {
            backing.set_len(self.valid)?;
        }
        for (index, page) in &self.pages {
            let start = index * PAGE;
            let n = self.len.saturating_sub(start).min(PAGE) as usize;
            backing.write_all_at(&page[..n], start)?;
        }
        backing.set_len(self.len)
    }
}

/// Fills `buf` from `offset`, zeros past the end of the file.
pub(super) fn read_full(file: &File, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    buf[done..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backing(bytes: &[u8]) -> (tempfile::TempDir, File) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, bytes).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        (dir, file)
    }

    fn on_disk(file: &File) -> Vec<u8> {
        let mut buf = vec![0; file.metadata().unwrap().len() as usize];
        read_full(file, &mut buf, 0).unwrap();
        buf
    }

    #[test]
    fn writes_are_seen_at_once_and_reach_the_backing_file_only_when_written_back() {
        let old: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let (_dir, file) = backing(&old);
        let mut dirty = Dirty::new(old.len() as u64);
        dirty.write(&file, 4090, b"across a page edge").unwrap();
        dirty.write(&file, 12_000, b"past the end").unwrap();
        let mut want = old.clone();
        want[4090..4108].copy_from_slice(b"across a page edge");
        want.resize(12_000, 0);
        want.extend_from_slice(b"past the end");
        assert_eq!(dirty.len(), want.len() as u64);
        assert_eq!(dirty.read(&file, 0, 20_000).unwrap(), want);
        assert_eq!(dirty.read(&file, 4095, 3).unwrap(), b"s a");
        // Nothing reached the backing file: a power cut now finds the old bytes.
        assert_eq!(on_disk(&file), old);
        dirty.write_back(&file).unwrap();
        assert_eq!(on_disk(&file), want);
    }

    #[test]
    fn a_truncation_is_pending_until_written_back_and_what_it_cut_reads_as_zeros() {
        let (_dir, file) = backing(&[7u8; 9000]);
        let mut dirty = Dirty::new(9000);
        dirty.write(&file, 100, b"kept").unwrap();
        dirty.truncate(50);
        dirty.truncate(8200);
        let mut want = vec![7u8; 50];
        want.resize(8200, 0);
        assert_eq!(dirty.read(&file, 0, 10_000).unwrap(), want);
        assert_eq!(on_disk(&file), vec![7u8; 9000]);
        dirty.write_back(&file).unwrap();
        assert_eq!(on_disk(&file), want);
    }
}
