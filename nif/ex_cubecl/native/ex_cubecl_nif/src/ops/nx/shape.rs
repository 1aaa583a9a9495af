//! Shape and layout entries: reshape, broadcast, transpose, pad, reverse, casts, joins,
//! slices, select, clip, copies and batches.
use burn_backend::{DType, Slice, TensorMetadata};
use crate::ops::Extension;

use super::Out;
use super::any::{self, BOOL};
use super::elementwise;
use crate::dtype::{Class, class, name};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &[
    "reshape", "broadcast", "transpose", "pad", "reverse", "as_type", "bitcast", "concatenate", "stack", "slice",
    "put_slice", "select", "clip", "copy",
];

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let n = inputs.len();
    let mut it = inputs.into_iter();
    let mut next = || it.next().ok_or_else(|| NifError::new(op, format!("missing an input ({n} given)"), out.describe()));
    let empty = out.shape.contains(&0);
    Ok(match op {
        "reshape" => any::reshape(next()?, &out.shape),
        "transpose" => any::permute(next()?, &axes(op, opts, "axes")?),
        "reverse" => any::flip(next()?, &axes(op, opts, "axes")?),
        "copy" => next()?,
        "as_type" => as_type::<B>(op, next()?, out.dtype)?,
        "bitcast" => bitcast::<B>(op, next()?, out)?,
        "broadcast" => broadcast::<B>(op, next()?, out, opts)?,
        _ if empty => {
            let first = next()?;
            any::full::<B>(&out.shape, out.dtype, 0.0, &first.device())
        }
        "pad" => {
            let (t, value) = (next()?, next()?);
            pad::<B>(op, t, value, out, &opts.ints(op, "config", None)?)?
        }
        "concatenate" | "stack" => {
            let mut parts = Vec::new();
            while let Ok(p) = next() {
                parts.push(p);
            }
            join::<B>(op, parts, out, opts)?
        }
        "slice" => {
            let t = next()?;
            let mut dynamic = Vec::new();
            while let Ok(p) = next() {
                dynamic.push(p);
            }
            slice::<B>(op, t, dynamic, out, opts)?
        }
        "put_slice" => {
            let (t, values) = (next()?, next()?);
            let mut dynamic = Vec::new();
            while let Ok(p) = next() {
                dynamic.push(p);
            }
            put_slice::<B>(op, t, values, dynamic, out, opts)?
        }
        "select" => {
            let (pred, on_true, on_false) = (next()?, next()?, next()?);
            let pred = any::nonzero(any::broadcast_to(op, pred, &out.shape)?);
            let on_true = any::broadcast_to(op, any::cast(op, on_true, out.dtype)?, &out.shape)?;
            let on_false = any::broadcast_to(op, any::cast(op, on_false, out.dtype)?, &out.shape)?;
            any::select_where(pred, on_true, on_false)
        }
        _ => {
            // clip: max(t, lo) then min(_, hi), NaN propagating as Nx's max and min.
            let (t, lo, hi) = (next()?, next()?, next()?);
            let raised = elementwise::binary::<B>("max", t, lo, out, out.dtype)?;
            elementwise::binary::<B>("min", raised, hi, out, out.dtype)?
        }
    })
}

/// Axis list option `key` (non-negative, as Nx gives them).
pub fn axes(op: &str, opts: &Opts, key: &str) -> NifResult<Vec<usize>> {
    super::super::sizes(op, opts, key, Some(vec![]))
}

/// Nx's `as_type`: integers wrap; floats to integers truncate and wrap (through s64), NaN
/// becomes 0 and the infinities the type's extremes.
pub fn as_type<B: Extension>(op: &str, t: Prim<B>, dtype: DType) -> NifResult<Prim<B>> {
    use burn_backend::Scalar;
    if class(t.dtype()) != Class::Float || class(dtype) != Class::Int {
        return any::cast(op, t, dtype);
    }
    let (lo, hi) = int_range(dtype);
    let device = t.device();
    let x = any::float::<B>(t);
    let shape = x.shape().to_vec();
    let nan = B::float_is_nan(x.clone(), BOOL);
    let up = B::float_equal_elem(x.clone(), Scalar::Float(f64::INFINITY), BOOL);
    let down = B::float_equal_elem(x.clone(), Scalar::Float(f64::NEG_INFINITY), BOOL);
    let finite = B::float_mask_fill(x, B::bool_or(nan, B::bool_or(up.clone(), down.clone())), Scalar::Float(0.0));
    let wide = any::cast(op, Prim::Float(finite), DType::I64)?;
    let ints = any::cast(op, wide, dtype)?;
    let ints = any::select_where(up, any::full_int::<B>(&shape, dtype, hi, &device), ints);
    Ok(any::select_where(down, any::full_int::<B>(&shape, dtype, lo, &device), ints))
}

/// The smallest and largest value of integer `dtype`.
pub fn int_range(dtype: DType) -> (i128, i128) {
    let bits = dtype.size() as u32 * 8;
    match dtype {
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => (0, (1i128 << bits) - 1),
        _ => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
    }
}

/// The bits of `t` read as `out`'s type (same width), on the device: the same buffer with
/// another dtype.
fn bitcast<B: Extension>(op: &str, t: Prim<B>, out: &Out) -> NifResult<Prim<B>> {
    if t.dtype().size() != out.dtype.size() || matches!(t, Prim::Quant(_)) {
        return Err(NifError::new(op, "bitcast keeps the width", format!("{} to {}", t.describe(), name(out.dtype))));
    }
    Ok(any::reshape(B::bitcast(t, out.dtype), &out.shape))
}

/// Nx's broadcast: `t`'s dimension `k` becomes output axis `axes[k]`.
fn broadcast<B: Extension>(op: &str, t: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let axes = axes(op, opts, "axes")?;
    let dims = t.shape().to_vec();
    if axes.len() != dims.len() || axes.iter().any(|&a| a >= out.shape.len()) {
        return Err(NifError::new(op, format!("axes {axes:?} don't fit {} into {:?}", t.describe(), out.shape), ""));
    }
    // Dimensions in output order, then each at its axis with 1 elsewhere.
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by_key(|&k| axes[k]);
    let t = any::permute(t, &order);
    let mut shape = vec![1; out.shape.len()];
    for &k in &order {
        shape[axes[k]] = dims[k];
    }
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, t.dtype(), 0.0, &t.device()));
    }
    Ok(any::expand(any::reshape(t, &shape), &out.shape))
}

/// Nx's pad: per axis `lo`, `hi` (negative: cut) and `interior` (between elements).
pub fn pad<B: Extension>(op: &str, t: Prim<B>, value: Prim<B>, out: &Out, config: &[i64]) -> NifResult<Prim<B>> {
    let dims = t.shape().to_vec();
    if config.len() != 3 * dims.len() {
        return Err(NifError::new(op, "the padding config needs {lo, hi, interior} per axis", format!("{} and {config:?}", t.describe())));
    }
    if config.iter().all(|&c| c == 0) {
        return any::cast(op, t, out.dtype);
    }
    let t = any::cast(op, t, out.dtype)?;
    let value = any::cast(op, value, out.dtype)?;
    // First with the positive edges and the interior, then cut the negative edges.
    let mut grown = Vec::new();
    let mut place = Vec::new();
    let mut cut = Vec::new();
    for (i, &d) in dims.iter().enumerate() {
        let (lo, hi, interior) = (config[3 * i], config[3 * i + 1], config[3 * i + 2] as usize);
        let inner = d + d.saturating_sub(1) * interior;
        let size = lo.max(0) as usize + inner + hi.max(0) as usize;
        grown.push(size);
        place.push(any::range(lo.max(0) as usize, d, interior + 1));
        let start = (-lo).max(0) as usize;
        cut.push(Slice::new(start as isize, Some((size as i64 - (-hi).max(0)) as isize), 1));
    }
    // The value over the grown shape with the tensor placed in it: two launches (the value
    // copied out over the grown shape, then the tensor into its places).
    let filled = any::expand(any::reshape(value, &vec![1; dims.len()]), &grown);
    let grown_padded = if dims.contains(&0) { filled } else { any::slice_assign(filled, &place, t) };
    Ok(any::slice(grown_padded, &cut))
}

/// `concatenate` (along `axis`) or `stack` (a new `axis`), in the output's type.
fn join<B: Extension>(op: &str, parts: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let axis = opts.int(op, "axis", None)? as usize;
    let mut cast = Vec::with_capacity(parts.len());
    for p in parts {
        let p = any::cast(op, p, out.dtype)?;
        let p = if op == "stack" {
            let mut shape = p.shape().to_vec();
            shape.insert(axis, 1);
            any::reshape(p, &shape)
        } else {
            p
        };
        if p.shape()[axis] > 0 {
            cast.push(p);
        }
    }
    Ok(any::cat(cast, axis))
}

/// Start indices: the static ones, with dynamic ones (scalar tensors) read from the device,
/// each clamped so that a window of `len` fits, as Nx does.
fn starts<B: Extension>(op: &str, opts: &Opts, dynamic: Vec<Prim<B>>, dims: &[usize], lens: &[usize]) -> NifResult<Vec<usize>> {
    let given = opts.ints(op, "starts", None)?;
    let mut dynamic = dynamic.into_iter();
    given
        .iter()
        .enumerate()
        .map(|(i, &s)| {
            let s = if s < 0 {
                let p = dynamic.next().ok_or_else(|| NifError::new(op, "a dynamic start index is missing", format!("starts {given:?}")))?;
                scalar_i64::<B>(op, p)?
            } else {
                s
            };
            Ok(s.clamp(0, (dims[i] as i64 - lens[i] as i64).max(0)) as usize)
        })
        .collect()
}

/// The value of a scalar tensor (a device read).
fn scalar_i64<B: Extension>(op: &str, p: Prim<B>) -> NifResult<i64> {
    let p = any::cast(op, p, DType::I64)?;
    let bytes = crate::buffer::read_prim::<B>(op, p)?;
    let first: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or_else(|| NifError::new(op, "a start index must be a scalar", ""))?;
    Ok(i64::from_ne_bytes(first))
}

fn slice<B: Extension>(op: &str, t: Prim<B>, dynamic: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let dims = t.shape().to_vec();
    let lens = super::super::sizes(op, opts, "lengths", None)?;
    let strides = super::super::sizes(op, opts, "strides", None)?;
    let starts = starts::<B>(op, opts, dynamic, &dims, &lens)?;
    let ranges: Vec<Slice> = (0..dims.len()).map(|i| any::range(starts[i], out.shape[i], strides[i])).collect();
    Ok(any::slice(t, &ranges))
}

fn put_slice<B: Extension>(op: &str, t: Prim<B>, values: Prim<B>, dynamic: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let dims = t.shape().to_vec();
    let lens = values.shape().to_vec();
    let starts = starts::<B>(op, opts, dynamic, &dims, &lens)?;
    let ranges: Vec<Slice> = (0..dims.len()).map(|i| any::range(starts[i], lens[i], 1)).collect();
    let t = any::cast(op, t, out.dtype)?;
    let values = any::cast(op, values, out.dtype)?;
    if lens.contains(&0) {
        return Ok(t);
    }
    Ok(any::slice_assign(t, &ranges, values))
}

/// Batches of `out`'s shape along axis 0; with `leftover: :repeat` the last batch wraps
/// around to the first rows.
pub fn to_batched<B: Extension>(inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let op = "to_batched";
    let [t] = <[Prim<B>; 1]>::try_from(inputs).map_err(|_| NifError::new(op, "takes one tensor", out.describe()))?;
    let n = t.shape()[0];
    let b = out.shape[0];
    let repeat = opts.name(op, "leftover", Some("discard"))? == "repeat";
    let full = n / b;
    let mut batches: Vec<Prim<B>> = (0..full).map(|i| any::slice(t.clone(), &[any::range(i * b, b, 1)])).collect();
    if repeat && n % b != 0 {
        let rest = any::slice(t.clone(), &[any::range(full * b, n % b, 1)]);
        let wrap = any::slice(t, &[any::range(0, b - n % b, 1)]);
        batches.push(any::cat(vec![rest, wrap], 0));
    }
    Ok(batches)
}
