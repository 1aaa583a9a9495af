//! Files replaced atomically: a crash (a killed process, a lost machine) at any moment leaves
//! the old complete file or the new complete one at the path, never a torn one.
//!
//! The new contents go to a temporary file in the same folder (a rename is atomic only within
//! one file system), which is flushed to disk (`fsync`) before it is renamed over the path;
//! then the folder is flushed, so that the rename itself survives a power loss. A temporary
//! file is named `.<name>.<pid>.<n>.tmp.<extension>` (hidden, and with the target's extension,
//! which writers such as Burn's recorders set themselves); one left by a crash is never read
//! in place of the file.
use std::fmt::Display;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Replaces the file at `path` with what `write` writes to the temporary path it is given (see
/// the [module docs](self)). On an error the temporary file is removed and `path` is left as
/// it was; the error names `path`.
pub fn replace_file<E: Display>(path: &Path, write: impl FnOnce(&Path) -> Result<(), E>) -> Result<(), String> {
    let tmp = temp_path(path);
    let fail = |why: String| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {why}", path.display())
    };
    write(&tmp).map_err(|e| fail(e.to_string()))?;
    let flushed = File::open(&tmp)
        .and_then(|f| f.sync_all())
        .and_then(|()| std::fs::rename(&tmp, path));
    flushed.map_err(|e| fail(super::io_reason(&e)))?;
    sync_folder(path).map_err(|e| format!("{}: syncing its folder: {}", path.display(), super::io_reason(&e)))
}

/// Flushes the folder of `path` (its entries: a rename into it). Where folders can't be opened
/// (not on Unix), there is nothing to flush.
fn sync_folder(path: &Path) -> std::io::Result<()> {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if cfg!(unix) { File::open(folder)?.sync_all() } else { Ok(()) }
}

/// `.<name>.<pid>.<n>.tmp.<ext>` beside `path`: unique per process and call.
fn temp_path(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    let stem = path.file_stem().map(|s| s.to_string_lossy()).unwrap_or_default();
    let ext = path.extension().map(|e| format!(".{}", e.to_string_lossy())).unwrap_or_default();
    path.with_file_name(format!(".{stem}.{}.{n}.tmp{ext}", std::process::id()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_cleans_up() {
        let dir = std::env::temp_dir().join(format!("ex_cubecl_replace_{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.mpk");
        replace_file(&path, |tmp| {
            assert_eq!(tmp.parent(), path.parent(), "the temporary file is in the target's folder");
            assert_eq!(tmp.extension().unwrap(), "mpk", "and keeps its extension");
            std::fs::write(tmp, b"one")
        })
        .unwrap();
        replace_file(&path, |tmp| std::fs::write(tmp, b"two")).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // A failed write leaves the old file and no temporary one.
        let err = replace_file(&path, |tmp| {
            std::fs::write(tmp, b"torn").unwrap();
            Err("disk full")
        })
        .unwrap_err();
        assert!(err.contains("model.mpk: disk full"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(left, vec![std::ffi::OsString::from("model.mpk")]);
        // A folder that doesn't exist: an error naming the path.
        let missing = dir.join("no/such/folder/x.mpk");
        assert!(replace_file(&missing, |tmp| std::fs::write(tmp, b"x")).unwrap_err().contains("no/such/folder/x.mpk"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
