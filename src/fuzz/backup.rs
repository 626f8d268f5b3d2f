//! The fuzz entry point of `hearth restore`: a backup folder whose every file is the fuzzer's.

use std::sync::OnceLock;

use crate::backup::folder::{AUDIT, EVENTS, KEY, MANIFEST, MEDIA, RECORDS, SETTINGS};
use crate::config::Config;

use super::input::{Scratch, text};

fn runtime() -> Option<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_all().build().ok()).as_ref()
}

/// The files of a backup folder, split at NULs: the manifest, `relay.key`, the settings, the
/// audit log, the events, the media records, one media file's name and its bytes. Restored into
/// an empty data directory: refused or restored, never a panic, and nothing written beside the
/// data directory (a media name with `../` in it included).
pub fn backup_restore(data: &[u8]) {
    let Some(text) = text(data) else { return };
    let mut parts = text.split('\0');
    let mut next = || parts.next().unwrap_or("");
    let (manifest, key, settings, audit, events, records, name, blob) =
        (next(), next(), next(), next(), next(), next(), next(), next());
    let Some(scratch) = Scratch::new() else { return };
    let (folder, data_dir) = (scratch.0.join("backup"), scratch.0.join("data"));
    let media = folder.join(MEDIA);
    let written = std::fs::create_dir_all(&media).is_ok()
        && [(MANIFEST, manifest), (KEY, key), (SETTINGS, settings), (AUDIT, audit), (EVENTS, events)]
            .iter()
            .all(|(file, contents)| std::fs::write(folder.join(file), contents).is_ok())
        && std::fs::write(media.join(RECORDS), records).is_ok();
    if !written {
        return;
    }
    // A file name of the fuzzer's, but only inside the folder: what restore does with names is
    // the point, not what this harness writes.
    if !name.is_empty() && !name.contains(['/', '\\']) && name != "." && name != ".." {
        let _ = std::fs::write(media.join(name), blob);
    }
    let mut config = Config::default();
    config.storage.data_dir = data_dir;
    config.storage.search = false;
    let Some(runtime) = runtime() else { return };
    let _ = runtime.block_on(crate::offline::restore(config, &folder));
    let mut beside: Vec<String> = std::fs::read_dir(&scratch.0)
        .map(|dir| dir.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect())
        .unwrap_or_default();
    beside.retain(|n| n != "backup" && n != "data");
    assert!(beside.is_empty(), "restore wrote beside the data directory: {beside:?}");
}
