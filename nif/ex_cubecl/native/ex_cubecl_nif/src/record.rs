//! Burn's record files, read and written by the NIF: the files of
//! `NamedMpkFileRecorder<FullPrecisionSettings>` (`Module::save_file` / `load_file`), so that
//! one set of weights serves Rust and Elixir. The crate `ex_cubecl_record` holds the format
//! and the file handling (without rustler, so that Rust tests link it); this file the NIFs:
//!
//! - `record_load(path, device)`: `{:ok, {metadata, [{name, ref, shape, dtype}]}}`, every
//!   parameter of the record's item by dotted path, in the file's order, as recorded (f32,
//!   f64, f16, bf16, ints; bools as u8), made on `device`; `metadata` a map of Burn's five
//!   strings.
//! - `record_save(path, metadata | nil, [{name, tensor}])`: `{:ok, path}`; the file Burn's
//!   recorder writes for a module with these parameters (`nil`: Burn's own metadata; a map
//!   overrides some of its fields). It replaces `path` atomically
//!   (`ex_cubecl_record::replace_file`: a temporary file in the same folder, flushed, renamed
//!   over `path`, the folder flushed), so a failed save or a crash leaves the old file or the
//!   new one, never a half-written one.
//! - `file_replace(path, data)`: `{:ok, true}`; any file replaced atomically the same way
//!   (`ExBurn.AtomicFile`: the BEAM's own file functions can't flush a folder).
use std::collections::HashMap;
use std::path::Path;

use burn_backend::{BoolStore, DType, Shape, TensorData};
use ex_cubecl_record::{Metadata, Record, format, read_file, replace_file, write_file};
use rustler::Binary;

use crate::buffer;
use crate::device::Dev;
use crate::dtype;
use crate::error::{NifError, NifResult, guard};
use crate::tensor::{TensorRef, wrap};

/// The record at `path` with its parameters on `device`: `{metadata, [{name, ref, shape,
/// dtype}]}`.
#[rustler::nif(schedule = "DirtyIo")]
fn record_load(
    path: String,
    device: String,
) -> NifResult<(HashMap<String, String>, Vec<(String, TensorRef, Vec<usize>, &'static str)>)> {
    let op = "record_load";
    guard(op, || {
        let device = Dev::parse(op, &device)?;
        let record = read_file(Path::new(&path)).map_err(|e| NifError::new(op, e, path.clone()))?;
        let metadata = record.metadata.fields().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let params = record
            .params
            .into_iter()
            .map(|(name, data)| {
                let shape = data.shape.as_slice().to_vec();
                // Nx has no bool type: Burn's bools come as u8 (0 or 1), as Nx's predicates.
                let dtype = if let DType::Bool(_) = data.dtype { DType::U8 } else { data.dtype };
                let prim = buffer::upload(op, data.into_bytes().to_vec(), shape.clone(), dtype, &device)
                    .map_err(|e| NifError::new(op, format!("{path}: parameter {name:?}: {}", e.reason), e.details))?;
                Ok((name, wrap(prim), shape, dtype::name(dtype)))
            })
            .collect::<NifResult<Vec<_>>>()?;
        Ok((metadata, params))
    })
}

/// Writes `params` (`[{name, tensor}]`) to `path` as Burn's recorder would; `metadata`
/// (string keys) overrides fields of Burn's own. Gives the path.
#[rustler::nif(schedule = "DirtyIo")]
fn record_save(
    path: String,
    metadata: Option<HashMap<String, String>>,
    params: Vec<(String, TensorRef)>,
) -> NifResult<String> {
    let op = "record_save";
    guard(op, || {
        let mut meta = Metadata::burn();
        for (key, value) in metadata.unwrap_or_default() {
            meta.set(&key, value).map_err(|e| NifError::new(op, format!("{path}: {e}"), path.clone()))?;
        }
        let params = params
            .into_iter()
            .map(|(name, tensor)| {
                let prim = tensor.get(op)?;
                let (shape, dtype) = (prim.shape(), prim.dtype());
                if matches!(dtype, DType::QFloat(_)) || format::dtype_name(dtype) == "unsupported" {
                    return Err(NifError::new(
                        op,
                        format!("{path}: parameter {name:?}: a record can't hold dtype {}", dtype::name(dtype)),
                        prim.describe(),
                    ));
                }
                let bytes = buffer::read(op, prim)?;
                let dtype = if let DType::Bool(_) = dtype { DType::Bool(BoolStore::Native) } else { dtype };
                Ok((name, TensorData::from_bytes_vec(bytes, Shape::from(shape.as_slice().to_vec()), dtype)))
            })
            .collect::<NifResult<Vec<_>>>()?;
        write_file(Path::new(&path), &Record { metadata: meta, params })
            .map_err(|e| NifError::new(op, e, path.clone()))?;
        Ok(path)
    })
}

/// Replaces the file at `path` with `data` atomically (`replace_file`: a temporary file in
/// the same folder, flushed, renamed over `path`, the folder flushed).
#[rustler::nif(schedule = "DirtyIo")]
fn file_replace(path: String, data: Binary) -> NifResult<bool> {
    let op = "file_replace";
    guard(op, || {
        replace_file(Path::new(&path), |tmp| std::fs::write(tmp, data.as_slice()))
            .map(|()| true)
            .map_err(|e| NifError::new(op, e, format!("{} bytes", data.len())))
    })
}
