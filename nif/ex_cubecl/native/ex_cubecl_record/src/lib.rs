//! Burn 0.21's record files, read and written without burn-core: the files of
//! `NamedMpkFileRecorder<FullPrecisionSettings>` (`Module::save_file` / `load_file`), as the
//! NIF (`ex_cubecl_nif`'s `record_load` / `record_save`) hands them to Elixir, so that one
//! set of weights serves Rust and Elixir.
//!
//! - [`format`](mod@format): the layout (metadata, nested module maps, `ParamSerde`, `TensorData`), and
//!   what Burn writes for modules without parameters; `decode.rs` reads it, `encode.rs`
//!   writes it.
//! - [`mpk`]: the MessagePack underneath.
//! - here: the files, read whole and written through a temporary file renamed into place.
#![warn(missing_docs)]

mod decode;
mod encode;
pub mod format;
pub mod mpk;

use std::io::Write;
use std::path::{Path, PathBuf};

pub use format::{Metadata, Record};

/// The record in the file at `path`; an error says what is wrong with it, path first.
pub fn read_file(path: &Path) -> Result<Record, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), io_reason(&e)))?;
    format::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `record` to `path` through a temporary file beside it, renamed over `path` once
/// complete and flushed to disk: a failed write leaves nothing half-written at `path`.
pub fn write_file(path: &Path, record: &Record) -> Result<(), String> {
    let bytes = format::encode(record).map_err(|e| format!("{}: {e}", path.display()))?;
    let tmp = temp_path(path);
    let written = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(&bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    written.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        format!("{}: {}", path.display(), io_reason(&e))
    })
}

/// `path` with `.<pid>.<n>.tmp` appended: unique per process and call.
fn temp_path(path: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".{}.{}.tmp", std::process::id(), N.fetch_add(1, Ordering::Relaxed)));
    PathBuf::from(name)
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
