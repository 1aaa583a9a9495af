//! Media I/O: image and audio files decoded into device tensors and encoded from them
//! (`ExCubecl.Media`, `ExCubecl.Audio`). Decoding and encoding run on the host in well-kept
//! crates (`image`, `symphonia`; WAV written in `audio_io.rs`); the pixels and samples are then
//! uploaded once. The device side (u8 to float, resize, normalise, colour, resampling...) is
//! the op table's `image_*` and `audio_*` kernels (`ops/image.rs`, `ops/audio.rs`).
//!
//! NIFs (dirty IO schedulers: they decode whole files):
//! - `image_decode(data, channels, device, label)`: `{ref, [h, w, c]}`, `u8`.
//! - `image_decode_frames(data, channels, device, label)`: `{ref, [n, h, w, c]}`, `u8`.
//! - `image_encode(tensor, format, quality, label)`: the file's bytes, from `[h, w, c]` `u8`
//!   or float (0.0..1.0, rounded and clamped).
//! - `audio_decode(data, extension, device, label)`: `{ref, [frames, channels], rate}`, `f32`.
//! - `audio_encode(tensor, rate, float, label)`: a WAV file of `[frames, channels]` samples.
//!
//! `label` (a path, or `"binary"`) starts every error's details.
pub mod audio_io;
pub mod image_io;
pub mod video;

use burn_backend::DType;
use rustler::{Binary, Env, NewBinary};

use crate::buffer;
use crate::device::Dev;
use crate::error::{NifError, NifResult, guard};
use crate::tensor::{TensorRef, wrap};

fn channels_opt(op: &str, channels: Option<usize>, label: &str) -> NifResult<Option<usize>> {
    match channels {
        None | Some(1..=4) => Ok(channels),
        Some(c) => Err(NifError::new(op, format!("channels must be 1 to 4, got {c}"), label)),
    }
}

fn binary<'a>(env: Env<'a>, bytes: &[u8]) -> Binary<'a> {
    let mut out = NewBinary::new(env, bytes.len());
    out.as_mut_slice().copy_from_slice(bytes);
    out.into()
}

#[rustler::nif(schedule = "DirtyIo")]
fn image_decode(data: Binary, channels: Option<usize>, device: String, label: String) -> NifResult<(TensorRef, Vec<usize>)> {
    let op = "image_decode";
    guard(op, || {
        let channels = channels_opt(op, channels, &label)?;
        let device = Dev::parse(op, &device)?;
        let p = image_io::decode(data.as_slice(), channels).map_err(|e| NifError::new(op, e, label.clone()))?;
        let shape = p.shape.to_vec();
        Ok((wrap(buffer::upload(op, p.data, shape.clone(), DType::U8, &device)?), shape))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn image_decode_frames(data: Binary, channels: Option<usize>, device: String, label: String) -> NifResult<(TensorRef, Vec<usize>)> {
    let op = "image_decode_frames";
    guard(op, || {
        let channels = channels_opt(op, channels, &label)?;
        let device = Dev::parse(op, &device)?;
        let (n, p) = image_io::decode_frames(data.as_slice(), channels).map_err(|e| NifError::new(op, e, label.clone()))?;
        let shape = vec![n, p.shape[0], p.shape[1], p.shape[2]];
        Ok((wrap(buffer::upload(op, p.data, shape.clone(), DType::U8, &device)?), shape))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn image_encode<'a>(env: Env<'a>, tensor: TensorRef, format: String, quality: u8, label: String) -> NifResult<Binary<'a>> {
    let op = "image_encode";
    let bytes = guard(op, || {
        let prim = tensor.get(op)?;
        let (shape, dtype) = (prim.shape(), prim.dtype());
        let dims = shape.as_slice();
        if dims.len() != 3 {
            return Err(NifError::new(op, "takes an image [height, width, channels]", format!("{label}: {}", prim.describe())));
        }
        let format = image_io::format(&format).map_err(|e| NifError::new(op, e, label.clone()))?;
        let raw = buffer::read(op, prim.clone())?;
        let pixels = match dtype {
            DType::U8 => raw,
            DType::F32 => raw
                .chunks_exact(4)
                .map(|b| (f32::from_ne_bytes([b[0], b[1], b[2], b[3]]) * 255.0).round().clamp(0.0, 255.0) as u8)
                .collect(),
            _ => {
                return Err(NifError::new(op, "takes u8 (0..255) or f32 (0.0..1.0) pixels", format!("{label}: {}", prim.describe())));
            }
        };
        image_io::encode(&pixels, [dims[0], dims[1], dims[2]], format, quality)
            .map_err(|e| NifError::new(op, e, format!("{label}: {}", prim.describe())))
    })?;
    Ok(binary(env, &bytes))
}

#[rustler::nif(schedule = "DirtyIo")]
fn audio_decode(data: Binary, extension: Option<String>, device: String, label: String) -> NifResult<(TensorRef, Vec<usize>, u32)> {
    let op = "audio_decode";
    guard(op, || {
        let device = Dev::parse(op, &device)?;
        let s = audio_io::decode(data.as_slice().to_vec(), extension.as_deref()).map_err(|e| NifError::new(op, e, label.clone()))?;
        let shape = vec![s.data.len() / s.channels, s.channels];
        let bytes = s.data.iter().flat_map(|v| v.to_ne_bytes()).collect();
        Ok((wrap(buffer::upload(op, bytes, shape.clone(), DType::F32, &device)?), shape, s.rate))
    })
}

#[rustler::nif(schedule = "DirtyIo")]
fn audio_encode<'a>(env: Env<'a>, tensor: TensorRef, rate: u32, float: bool, label: String) -> NifResult<Binary<'a>> {
    let op = "audio_encode";
    let bytes = guard(op, || {
        let prim = tensor.get(op)?;
        let shape = prim.shape();
        if shape.num_dims() != 2 || prim.dtype() != DType::F32 {
            return Err(NifError::new(op, "takes f32 samples [frames, channels]", format!("{label}: {}", prim.describe())));
        }
        let channels = shape[1];
        let raw = buffer::read(op, prim)?;
        let samples: Vec<f32> = raw.chunks_exact(4).map(|b| f32::from_ne_bytes([b[0], b[1], b[2], b[3]])).collect();
        audio_io::encode_wav(&samples, channels, rate, float).map_err(|e| NifError::new(op, e, label.clone()))
    })?;
    Ok(binary(env, &bytes))
}
