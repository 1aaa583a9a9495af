//! Reductions (over a list of axes), arg-reductions with Nx's tie break, `reduce` with one of
//! Nx's associative ops, and the cumulative blocks.
use burn_backend::tensor::IntTensor;
use crate::ops::Extension;
use burn_backend::{IntDType, Scalar};

use super::Out;
use super::any::{self, BOOL};
use super::shape::{axes, int_range};
use crate::dtype::{Class, class};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &[
    "sum", "product", "reduce_max", "reduce_min", "all", "any", "reduce", "argmax", "argmin", "cumulative_sum",
    "cumulative_product", "cumulative_max", "cumulative_min",
];

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let mut it = inputs.into_iter();
    let t = it.next().ok_or_else(|| NifError::new(op, "takes a tensor", out.describe()))?;
    match op {
        "argmax" | "argmin" => arg::<B>(op, t, out, opts),
        "reduce" => {
            let acc = it.next().ok_or_else(|| NifError::new(op, "takes a tensor and an accumulator", out.describe()))?;
            let with = opts.name(op, "op", None)?;
            let reducer = match with.as_str() {
                "add" => "sum",
                "multiply" => "product",
                "max" => "reduce_max",
                "min" => "reduce_min",
                "logical_and" => "all",
                "logical_or" => "any",
                other => return Err(NifError::new(op, format!("can't reduce with {other} on the device"), out.describe())),
            };
            let r = reduce::<B>(reducer, t, out, &axes(op, opts, "axes")?)?;
            super::elementwise::binary::<B>(&with, r, acc, out, out.dtype)
        }
        c if c.starts_with("cumulative_") => cumulative::<B>(op, t, out, opts),
        _ => reduce::<B>(op, t, out, &axes(op, opts, "axes")?),
    }
}

/// Reduction `op` of `t` over `axes`, shaped as `out` (with or without the reduced axes).
pub fn reduce<B: Extension>(op: &str, t: Prim<B>, out: &Out, axes: &[usize]) -> NifResult<Prim<B>> {
    let device = t.device();
    if t.shape().iter().product::<usize>() == 0 || out.shape.contains(&0) {
        return Ok(identity::<B>(op, out, &device));
    }
    if matches!(op, "all" | "any") {
        let mut b = any::nonzero(t);
        for &a in axes {
            b = if op == "all" { B::bool_all_dim(b, a) } else { B::bool_any_dim(b, a) };
        }
        return Ok(any::reshape(any::from_bool::<B>(op, b, out.dtype)?, &out.shape));
    }
    let t = any::cast(op, t, out.dtype)?;
    if matches!(t, Prim::Bool(_) | Prim::Quant(_)) {
        return Err(NifError::new(op, "takes numbers", t.describe()));
    }
    let along = |p: Prim<B>, a: usize| match p {
        Prim::Float(x) => Prim::Float(match op {
            "sum" => B::float_sum_dim(x, a),
            "product" => B::float_prod_dim(x, a),
            "reduce_max" => B::float_extreme_dim_nan(x, a, true),
            _ => B::float_extreme_dim_nan(x, a, false),
        }),
        Prim::Int(x) => Prim::Int(match op {
            "sum" => B::int_sum_dim(x, a),
            "product" => B::int_prod_dim(x, a),
            "reduce_max" => B::int_max_dim(x, a),
            _ => B::int_min_dim(x, a),
        }),
        other => other,
    };
    Ok(any::reshape(over_runs::<B>(t, axes, along), &out.shape))
}

/// `t` reduced by `along` over `axes`, keeping them as axes of size 1: each run of adjacent
/// axes as one merged axis (one launch where `t` is contiguous; a copy first where it is
/// not, still fewer launches than one per axis).
fn over_runs<B: Extension>(t: Prim<B>, axes: &[usize], along: impl Fn(Prim<B>, usize) -> Prim<B>) -> Prim<B> {
    let mut sorted = axes.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for a in sorted {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == a => *end = a,
            _ => runs.push((a, a)),
        }
    }
    runs.into_iter().fold(t, |t, (start, end)| {
        if start == end {
            return along(t, start);
        }
        let dims = t.shape().to_vec();
        let merged: Vec<usize> = [&dims[..start], &[dims[start..=end].iter().product()], &dims[end + 1..]].concat();
        let kept: Vec<usize> = dims.iter().enumerate().map(|(i, &d)| if (start..=end).contains(&i) { 1 } else { d }).collect();
        any::reshape(along(any::reshape(t, &merged), start), &kept)
    })
}

/// The value of a reduction over nothing.
fn identity<B: Extension>(op: &str, out: &Out, device: &B::Device) -> Prim<B> {
    let int = class(out.dtype) == Class::Int;
    let (lo, hi) = if int { int_range(out.dtype) } else { (0, 0) };
    match op {
        "product" | "all" => any::full::<B>(&out.shape, out.dtype, 1.0, device),
        "reduce_max" if int => any::full_int::<B>(&out.shape, out.dtype, lo, device),
        "reduce_min" if int => any::full_int::<B>(&out.shape, out.dtype, hi, device),
        "reduce_max" => any::full::<B>(&out.shape, out.dtype, f64::NEG_INFINITY, device),
        "reduce_min" => any::full::<B>(&out.shape, out.dtype, f64::INFINITY, device),
        _ => any::full::<B>(&out.shape, out.dtype, 0.0, device),
    }
}

/// argmax / argmin along `axis` (or over the flattened tensor), the first index of the
/// extreme or with `last` the last one. NaN counts as the extreme, as in Nx; of several NaNs
/// the last, whatever the tie-break, as `Nx.BinaryBackend`'s fold keeps them.
fn arg<B: Extension>(op: &str, t: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let shape = t.shape().to_vec();
    let (t, axis) = if opts.bool(op, "flat", false)? || shape.is_empty() {
        (any::reshape(t, &[shape.iter().product()]), 0)
    } else {
        let a = opts.int(op, "axis", None)?;
        (t, super::super::resolve_axis(op, a, shape.len())?)
    };
    let n = t.shape()[axis] as i64;
    let last = opts.bool(op, "last", false)?;
    // The index counted from the other end.
    let from_end = |i: IntTensor<B>| B::int_add_scalar(B::int_neg(i), Scalar::Int(n - 1));
    let max = op == "argmax";
    let idx = match t {
        Prim::Float(x) => {
            let nan = B::bool_into_int(B::float_is_nan(x.clone(), BOOL), IntDType::I32);
            let has_nan = B::int_greater_elem(B::int_max_dim(nan.clone(), axis), Scalar::Int(0), BOOL);
            let last_nan = from_end(B::int_cast(B::int_argmax(B::int_flip(nan, &[axis]), axis), IntDType::I64));
            let x = if last { B::float_flip(x, &[axis]) } else { x };
            let found = if max { B::float_argmax(x, axis, IntDType::I64) } else { B::float_argmin(x, axis, IntDType::I64) };
            let found = if last { from_end(found) } else { found };
            B::int_mask_where(found, has_nan, last_nan)
        }
        Prim::Int(x) => {
            let x = if last { B::int_flip(x, &[axis]) } else { x };
            let found = if max { B::int_argmax(x, axis) } else { B::int_argmin(x, axis) };
            if last { from_end(found) } else { found }
        }
        other => return Err(NifError::new(op, "takes numbers", other.describe())),
    };
    let idx = any::cast(op, Prim::Int(idx), out.dtype)?;
    Ok(any::reshape(idx, &out.shape))
}

/// Cumulative sums, products, maxima and minima along `axis`, optionally from the end.
fn cumulative<B: Extension>(op: &str, t: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let axis = opts.int(op, "axis", None)? as usize;
    let reverse = opts.bool(op, "reverse", false)?;
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &t.device()));
    }
    let t = any::cast(op, t, out.dtype)?;
    let t = if reverse { any::flip(t, &[axis]) } else { t };
    let r = match t {
        Prim::Float(x) => Prim::Float(match op {
            "cumulative_sum" => B::float_cumsum(x, axis),
            "cumulative_product" => B::float_cumprod(x, axis),
            "cumulative_max" => B::float_cummax(x, axis),
            _ => B::float_cummin(x, axis),
        }),
        Prim::Int(x) => Prim::Int(match op {
            "cumulative_sum" => B::int_cumsum(x, axis),
            "cumulative_product" => B::int_cumprod(x, axis),
            "cumulative_max" => B::int_cummax(x, axis),
            _ => B::int_cummin(x, axis),
        }),
        other => return Err(NifError::new(op, "takes numbers", other.describe())),
    };
    Ok(if reverse { any::flip(r, &[axis]) } else { r })
}
