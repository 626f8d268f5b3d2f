//! The backup folder: the parts of a backup written into files an operator can read, and read
//! back by `hearth restore`.
//!
//! Owns the folder's layout:
//! - `relay.key`: the relay's secret key, hex, readable by its owner only;
//! - `settings.jsonl`: one settings document a line (`{"setting": {"name", "json"}}`, or
//!   `"base64"` for one that is not JSON);
//! - `audit.jsonl`: the audit log, oldest first;
//! - `events.jsonl`: every event, oldest first (the lines `hearth export` writes, which
//!   `hearth import` also takes);
//! - `media/`: one file a blob named by its SHA-256, and `records.jsonl` (the folder
//!   `hearth export --media` writes);
//! - `manifest.json`, written last, so a folder without it is an incomplete backup.
//!
//! Every file is synced before the manifest is written.

use std::fs::File;
use std::io::{BufRead, BufWriter, Write};
use std::path::{Path, PathBuf};

use base64::Engine;

use super::{BackupError, FORMAT, Manifest, Part};

/// The files of a backup folder.
pub const MANIFEST: &str = "manifest.json";
/// The relay's key.
pub const KEY: &str = "relay.key";
/// The settings documents.
pub const SETTINGS: &str = "settings.jsonl";
/// The audit log.
pub const AUDIT: &str = "audit.jsonl";
/// The events.
pub const EVENTS: &str = "events.jsonl";
/// The blobs' folder.
pub const MEDIA: &str = "media";
/// The blobs' records, in `MEDIA`.
pub const RECORDS: &str = "records.jsonl";

/// A backup folder being written, part by part.
pub struct Writer {
    dir: PathBuf,
    settings: BufWriter<File>,
    audit: BufWriter<File>,
    events: BufWriter<File>,
    records: BufWriter<File>,
    /// The blob being written: its final path, and the file being filled beside it.
    blob: Option<(PathBuf, BufWriter<File>)>,
    key: bool,
}

fn create(path: &Path) -> Result<BufWriter<File>, BackupError> {
    Ok(BufWriter::new(File::create(path)?))
}

fn line(out: &mut BufWriter<File>, value: &impl serde::Serialize) -> Result<(), BackupError> {
    serde_json::to_writer(&mut *out, value).map_err(|e| BackupError::Io(e.into()))?;
    out.write_all(b"\n")?;
    Ok(())
}

fn sync(out: BufWriter<File>) -> Result<(), BackupError> {
    out.into_inner().map_err(|e| BackupError::Io(e.into_error()))?.sync_all()?;
    Ok(())
}

impl Writer {
    /// Starts a backup in `dir`, which must not exist yet or be empty (a backup is never written
    /// over another).
    pub fn create(dir: &Path) -> Result<Writer, BackupError> {
        if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
            return Err(BackupError::Format(format!(
                "{} is not empty: give a new folder for each backup (e.g. backups/$(date +%F))",
                dir.display()
            )));
        }
        std::fs::create_dir_all(dir.join(MEDIA))?;
        Ok(Writer {
            dir: dir.to_path_buf(),
            settings: create(&dir.join(SETTINGS))?,
            audit: create(&dir.join(AUDIT))?,
            events: create(&dir.join(EVENTS))?,
            records: create(&dir.join(MEDIA).join(RECORDS))?,
            blob: None,
            key: false,
        })
    }

    /// Takes the next part; on [`Part::End`] the folder is complete and synced, and its manifest
    /// is returned.
    pub fn take(&mut self, part: Part) -> Result<Option<Manifest>, BackupError> {
        match part {
            Part::Key(secret) => {
                let keys = crate::protocol::Keys::parse(&secret)
                    .map_err(|e| BackupError::Format(format!("the relay's key in the backup: {e}")))?;
                crate::identity::keep(&self.dir.join(KEY), &keys).map_err(|e| BackupError::Format(e.to_string()))?;
                self.key = true;
            }
            setting @ Part::Setting { .. } => line(&mut self.settings, &setting)?,
            Part::Audit(entry) => {
                self.audit.write_all(entry.get().as_bytes())?;
                self.audit.write_all(b"\n")?;
            }
            Part::Event(event) => {
                self.events.write_all(event.get().as_bytes())?;
                self.events.write_all(b"\n")?;
            }
            Part::Blob { sha256, records } => {
                self.close_blob()?;
                if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(BackupError::Format(format!("a blob named {sha256:?} is not a SHA-256")));
                }
                for record in &records {
                    line(&mut self.records, record)?;
                }
                let path = self.dir.join(MEDIA).join(&sha256);
                self.blob = Some((path.clone(), create(&path.with_extension("partial"))?));
            }
            Part::BlobData(data) => {
                let Some((_, out)) = self.blob.as_mut() else {
                    return Err(BackupError::Format("blob data before any blob".into()));
                };
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .map_err(|e| BackupError::Format(format!("a blob's data is not base64: {e}")))?;
                out.write_all(&bytes)?;
            }
            Part::End(manifest) => {
                self.close_blob()?;
                return self.finish(manifest).map(Some);
            }
        }
        Ok(None)
    }

    fn close_blob(&mut self) -> Result<(), BackupError> {
        if let Some((path, out)) = self.blob.take() {
            sync(out)?;
            std::fs::rename(path.with_extension("partial"), path)?;
        }
        Ok(())
    }

    fn finish(&mut self, manifest: Manifest) -> Result<Manifest, BackupError> {
        if !self.key {
            return Err(BackupError::Format("the backup ended without the relay's key".into()));
        }
        for out in [&mut self.settings, &mut self.audit, &mut self.events, &mut self.records] {
            out.flush()?;
            out.get_ref().sync_all()?;
        }
        let partial = self.dir.join("manifest.json.partial");
        let text = serde_json::to_vec_pretty(&manifest).map_err(|e| BackupError::Io(e.into()))?;
        let mut file = File::create(&partial)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&partial, self.dir.join(MANIFEST))?;
        for dir in [self.dir.join(MEDIA), self.dir.clone()] {
            File::open(dir)?.sync_all()?;
        }
        Ok(manifest)
    }
}

/// A complete backup folder, to read back.
pub struct Reader {
    /// The folder.
    pub dir: PathBuf,
    /// Its manifest.
    pub manifest: Manifest,
}

impl Reader {
    /// Opens the backup in `dir`: refused when its manifest is missing (an incomplete backup) or
    /// of another format.
    pub fn open(dir: &Path) -> Result<Reader, BackupError> {
        let text = std::fs::read(dir.join(MANIFEST)).map_err(|e| {
            BackupError::Format(format!(
                "{}: no {MANIFEST} ({e}): not a complete hearth backup (`hearth backup` writes the manifest last)",
                dir.display()
            ))
        })?;
        let manifest: Manifest = serde_json::from_slice(&text)
            .map_err(|e| BackupError::Format(format!("{}: {e}", dir.join(MANIFEST).display())))?;
        if manifest.format != FORMAT {
            return Err(BackupError::Format(format!(
                "the backup has format {}, this hearth reads {FORMAT}: restore it with hearth {}",
                manifest.format, manifest.hearth
            )));
        }
        Ok(Reader { dir: dir.to_path_buf(), manifest })
    }

    /// The relay's secret key, hex.
    pub fn key(&self) -> Result<String, BackupError> {
        Ok(std::fs::read_to_string(self.dir.join(KEY))?.trim().to_string())
    }

    /// The settings documents, as their names and stored bytes.
    pub fn settings(&self) -> Result<Vec<(String, Vec<u8>)>, BackupError> {
        let mut out = Vec::new();
        for (n, text) in lines(&self.dir.join(SETTINGS))?.into_iter().enumerate() {
            let bad = |e: String| BackupError::Format(format!("{SETTINGS} line {}: {e}", n + 1));
            match serde_json::from_str::<Part>(&text).map_err(|e| bad(e.to_string()))? {
                Part::Setting { name, json: Some(json), .. } => out.push((name, json.get().as_bytes().to_vec())),
                Part::Setting { name, base64: Some(data), .. } => {
                    let bytes =
                        base64::engine::general_purpose::STANDARD.decode(data).map_err(|e| bad(e.to_string()))?;
                    out.push((name, bytes));
                }
                _ => return Err(bad("not a settings document".into())),
            }
        }
        Ok(out)
    }

    /// The audit entries, oldest first.
    pub fn audit(&self) -> Result<Vec<Vec<u8>>, BackupError> {
        Ok(lines(&self.dir.join(AUDIT))?.into_iter().map(String::into_bytes).collect())
    }

    /// The events file, to read line by line.
    pub fn events(&self) -> Result<impl BufRead + use<>, BackupError> {
        Ok(std::io::BufReader::new(File::open(self.dir.join(EVENTS))?))
    }
}

fn lines(path: &Path) -> Result<Vec<String>, BackupError> {
    let file = std::io::BufReader::new(File::open(path)?);
    let mut out = Vec::new();
    for line in file.lines() {
        let line = line?;
        if !line.trim().is_empty() {
            out.push(line);
        }
    }
    Ok(out)
}
