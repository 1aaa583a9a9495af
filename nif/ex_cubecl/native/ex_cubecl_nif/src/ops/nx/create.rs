//! Creation: `constant`, `eye` and `iota`, made on the device.
use burn_backend::{DType, IntDType};
use crate::ops::Extension;

use super::Out;
use super::any::{self, BOOL};
use crate::dtype::{Class, class};
use crate::error::NifResult;
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

pub fn run<B: Extension>(op: &str, out: &Out, opts: &Opts, device: &B::Device) -> NifResult<Prim<B>> {
    match op {
        "constant" => constant::<B>(op, out, opts, device),
        "eye" => eye::<B>(op, out, device),
        _ => iota::<B>(op, out, opts, device),
    }
}

/// `value` everywhere: integers exactly (wrapped to the type's width), floats rounded to
/// the type, `:nan` and the infinities as such.
fn constant<B: Extension>(op: &str, out: &Out, opts: &Opts, device: &B::Device) -> NifResult<Prim<B>> {
    Ok(match (class(out.dtype), opts.get("value")) {
        (Class::Int, Some(OptVal::Int(v))) => any::full_int::<B>(&out.shape, out.dtype, *v, device),
        (Class::Int, _) => any::full_int::<B>(&out.shape, out.dtype, opts.float(op, "value", None)? as i128, device),
        _ => any::full::<B>(&out.shape, out.dtype, opts.float(op, "value", None)?, device),
    })
}

/// Ones on the diagonal of the last two axes.
fn eye<B: Extension>(op: &str, out: &Out, device: &B::Device) -> NifResult<Prim<B>> {
    let r = out.shape.len();
    let (m, n) = (out.shape[r - 2], out.shape[r - 1]);
    let rows = B::int_reshape(B::int_arange(0..m as i64, device, IntDType::I32), [m, 1].into());
    let cols = B::int_reshape(B::int_arange(0..n as i64, device, IntDType::I32), [1, n].into());
    let rows = B::int_expand(rows, [m, n].into());
    let cols = B::int_expand(cols, [m, n].into());
    let diagonal = any::from_bool::<B>(op, B::int_equal(rows, cols, BOOL), out.dtype)?;
    let mut batched = vec![1; r - 2];
    batched.extend([m, n]);
    Ok(any::expand(any::reshape(diagonal, &batched), &out.shape))
}

/// Counts along `axis` (or over the flattened tensor with `flat`).
fn iota<B: Extension>(op: &str, out: &Out, opts: &Opts, device: &B::Device) -> NifResult<Prim<B>> {
    let rank = out.shape.len();
    let flat = opts.bool(op, "flat", false)? || rank == 0;
    let n = if flat { any::numel(&out.shape) } else { out.shape[super::super::axis(op, opts, "axis", rank, None)?] };
    let wide = if matches!(out.dtype, DType::I64 | DType::U64 | DType::F64) { IntDType::I64 } else { IntDType::I32 };
    let counts = any::cast::<B>(op, Prim::Int(B::int_arange(0..n as i64, device, wide)), out.dtype)?;
    if flat {
        return Ok(any::reshape(counts, &out.shape));
    }
    let axis = super::super::axis(op, opts, "axis", rank, None)?;
    let mut shape = vec![1; rank];
    shape[axis] = n;
    Ok(any::expand(any::reshape(counts, &shape), &out.shape))
}
