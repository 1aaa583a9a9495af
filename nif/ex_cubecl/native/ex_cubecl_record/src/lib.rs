//! Burn 0.21's record files, read and written without burn-core: the files of
//! `NamedMpkFileRecorder<FullPrecisionSettings>` (`Module::save_file` / `load_file`), as the
//! NIF (`ex_cubecl_nif`'s `record_load` / `record_save`) hands them to Elixir, so that one
//! set of weights serves Rust and Elixir.
//!
//! - [`format`](mod@format): the layout (metadata, nested module maps, `ParamSerde`, `TensorData`), and
//!   what Burn writes for modules without parameters; `decode.rs` reads it, `encode.rs`
//!   writes it.
//! - [`mpk`]: the MessagePack underneath.
//! - [`replace_file`]: a file replaced atomically (temporary file in the same folder, `fsync`,
//!   rename, folder `fsync`): the one way the NIF and the Rust job write records.
//! - here: the files, read whole and written with [`replace_file`].
#![warn(missing_docs)]

mod decode;
mod encode;
pub mod format;
pub mod mpk;
mod replace;

use std::path::Path;

pub use format::{Metadata, Record};
pub use replace::replace_file;

/// The record in the file at `path`; an error says what is wrong with it, path first.
pub fn read_file(path: &Path) -> Result<Record, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {}", path.display(), io_reason(&e)))?;
    format::decode(&bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes `record` to `path` atomically ([`replace_file`]): a crash or a failed write leaves
/// the old file or the new one, never a half-written one.
pub fn write_file(path: &Path, record: &Record) -> Result<(), String> {
    let bytes = format::encode(record).map_err(|e| format!("{}: {e}", path.display()))?;
    replace_file(path, |tmp| std::fs::write(tmp, &bytes).map_err(|e| io_reason(&e)))
}

fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}
