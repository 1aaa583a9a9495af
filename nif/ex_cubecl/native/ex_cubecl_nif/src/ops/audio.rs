//! Audio on the device (`ExCubecl.Audio`): samples are `[frames, channels]` float tensors.
use burn_backend::ops::{InterpolateMode, InterpolateOptions};
use burn_backend::{Backend, Shape, TensorMetadata};

use super::{float, take};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let [x] = take::<B, 1>(op, inputs)?;
    match op {
        "audio_resample" => Ok(vec![Prim::Float(resample::<B>(op, float(op, x)?, opts)?)]),
        _ => Err(NifError::new(op, "is not an audio kernel", x.describe())),
    }
}

/// Resamples `[frames, channels]` from rate `from` to rate `to`: `round(frames * to / from)`
/// frames, each the linear interpolation of the input at its centre (the bilinear interpolate
/// kernel over a `[1, channels, frames, 1]` view, half-pixel centres). No low-pass filter:
/// downsampling aliases what lies above the new Nyquist frequency.
fn resample<B: Backend>(op: &str, t: B::FloatTensorPrimitive, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let shape = t.shape();
    if shape.num_dims() != 2 || shape[0] == 0 {
        return Err(NifError::new(op, "takes samples [frames, channels], at least one frame", format!("{:?}", shape.as_slice())));
    }
    let (from, to) = (opts.int(op, "from", None)?, opts.int(op, "to", None)?);
    if from < 1 || to < 1 {
        return Err(NifError::new(op, "rates must be positive", format!("from {from}, to {to}")));
    }
    let (frames, channels) = (shape[0], shape[1]);
    if from == to {
        return Ok(t);
    }
    let out = ((frames as u128 * to as u128 + from as u128 / 2) / from as u128).max(1) as usize;
    let t = B::float_reshape(B::float_permute(t, &[1, 0]), Shape::from(vec![1, channels, frames, 1]));
    let t = B::interpolate(t, [out, 1], InterpolateOptions { mode: InterpolateMode::Bilinear, align_corners: false });
    Ok(B::float_permute(B::float_reshape(t, Shape::from(vec![channels, out])), &[1, 0]))
}
