//! Nx's callbacks as entries of the op table (`nx_<callback>`): each runs one `Nx.Backend`
//! callback with Nx's semantics on the backend's ops, in one NIF call. `ExBurn.Backend` is a
//! thin map from callbacks to these entries.
//!
//! Every entry takes options `type` (the output's Nx type name) and `shape` (its shape), as
//! Nx computed them: the entries cast inputs to the type Nx promotes to and broadcast them as
//! Nx does, so that the result is what `Nx.BinaryBackend` gives (integers wrap, NaN
//! propagates through max and min, `remainder` takes the dividend's sign, ...).
use burn_backend::{DType};
use crate::ops::Extension;

use crate::dtype::name;
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

mod any;
mod complex;
mod create;
mod decompose;
mod elementwise;
mod fused;
mod index;
mod linalg;
mod narrow;
mod reduce;
mod shape;
mod window;

/// The output Nx described: its dtype and shape.
pub struct Out {
    pub dtype: DType,
    pub shape: Vec<usize>,
}

impl Out {
    pub fn describe(&self) -> String {
        format!("{:?} {}", self.shape, name(self.dtype))
    }
}

/// Runs Nx entry `op` (`nx_<callback>`).
pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts, device: &B::Device, max_bytes: u64) -> NifResult<Vec<Prim<B>>> {
    let shape = super::sizes(op, opts, "shape", None)?;
    // A complex result is described by its parts' dtype (f32 for c64, f64 for c128), a narrow
    // one by the dtype it computes in.
    let part = complex::part_of(&opts.name(op, "type", None)?);
    let complex_out = part.is_some();
    let out = match part {
        Some(dtype) => Out { dtype, shape },
        None => Out { dtype: narrow::dtype_opt(op, opts, "type")?, shape },
    };
    super::computes::<B>(op, out.dtype, device)?;
    let lanes = if complex_out { 2 } else { 1 };
    let bytes = out.shape.iter().try_fold(lanes * crate::dtype::host_size(out.dtype) as u64, |a, &d| a.checked_mul(d as u64));
    if bytes.is_none_or(|b| b > max_bytes) {
        return Err(NifError::new(op, format!("the result needs more than the device's largest buffer ({max_bytes} bytes)"), out.describe()));
    }
    let inputs = narrow::decode_inputs::<B>(op, opts, inputs)?;
    for p in &inputs {
        super::computes::<B>(op, p.dtype(), device)?;
    }
    let callback = op.strip_prefix("nx_").unwrap_or(op);
    let flags = complex::flags(op, opts, inputs.len())?;
    // irfft of a real spectrum (its imaginary part zero) gives a real result, too.
    let results = if complex_out || flags.contains(&true) || callback == "irfft" {
        complex::run::<B>(callback, inputs, &flags, &out, complex_out, opts, device)
    } else {
        dispatch::<B>(callback, inputs, &out, opts, device)
    }
    .and_then(|results| narrow::encode_outputs::<B>(op, opts, results))
    .map_err(|e| NifError::new(op, e.reason, e.details))?;
    let mut want = out.shape.clone();
    if complex_out {
        want.push(2);
    }
    // `type` and `shape` describe the first result (the decompositions give more than one).
    if let Some(bad) = results.iter().take(1).find(|r| r.shape().as_slice() != want.as_slice()) {
        return Err(NifError::new(op, "internal: the result's shape differs from Nx's", format!("got {}, Nx expects {}", bad.describe(), out.describe())));
    }
    Ok(results)
}

/// Callback `callback` on real tensors.
pub fn dispatch<B: Extension>(callback: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts, device: &B::Device) -> NifResult<Vec<Prim<B>>> {
    Ok(match callback {
        "constant" | "eye" | "iota" => vec![create::run::<B>(callback, out, opts, device)?],
        "to_batched" => shape::to_batched::<B>(inputs, out, opts)?,
        "fused" => fused::run::<B>(inputs, out, opts)?,
        "top_k" => index::top_k::<B>(inputs, out, opts)?,
        c if decompose::NAMES.contains(&c) => decompose::run::<B>(c, inputs, out, opts)?,
        c if shape::NAMES.contains(&c) => vec![shape::run::<B>(c, inputs, out, opts)?],
        c if index::NAMES.contains(&c) => vec![index::run::<B>(c, inputs, out, opts)?],
        c if reduce::NAMES.contains(&c) => vec![reduce::run::<B>(c, inputs, out, opts)?],
        c if window::NAMES.contains(&c) => vec![window::run::<B>(c, inputs, out, opts)?],
        c if linalg::NAMES.contains(&c) => vec![linalg::run::<B>(c, inputs, out, opts)?],
        c => vec![elementwise::run::<B>(c, inputs, out, opts)?],
    })
}
