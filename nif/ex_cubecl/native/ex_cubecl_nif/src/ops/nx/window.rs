//! Window entries: sums, products, maxima and minima over windows with padding, strides and
//! dilations; `window_reduce` with one of Nx's associative ops; and the window scatters.
//! Each is a fold over the window's offsets, one strided view of the padded input per offset;
//! a float fold runs as one fused launch over those views (where no input is on Burn's tape,
//! whose ops must stay differentiable), bit for bit what the chain of launches gives.
use burn_backend::{DType, Shape, Slice};
use ex_cubecl::launch::fused::{BinaryFloatOp, CompareOp, FusedOp};

use crate::ops::Extension;

use super::Out;
use super::any;
use super::elementwise::binary;
use super::shape::int_range;
use crate::dtype::{Class, class};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &["window_sum", "window_product", "window_max", "window_min", "window_reduce", "window_scatter_max", "window_scatter_min"];

struct Window {
    dims: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// `{lo, hi, 0}` per axis, as `pad` takes it.
    padding: Vec<i64>,
}

impl Window {
    fn from(op: &str, opts: &Opts) -> NifResult<Self> {
        let dims = super::super::sizes(op, opts, "window", None)?;
        let pairs = opts.ints(op, "padding", None)?;
        let padding = pairs.chunks(2).flat_map(|p| [p[0], p[1], 0]).collect();
        Ok(Window {
            strides: super::super::sizes(op, opts, "strides", None)?,
            dilations: super::super::sizes(op, opts, "dilations", None)?,
            dims,
            padding,
        })
    }

    /// Every offset of the window, in row-major order.
    fn offsets(&self) -> Vec<Vec<usize>> {
        let mut all = vec![vec![]];
        for &d in &self.dims {
            all = all.into_iter().flat_map(|o: Vec<usize>| (0..d).map(move |i| [o.clone(), vec![i]].concat())).collect();
        }
        all
    }

    /// The view of the padded input that offset `w` of every window reads, `out` elements.
    fn view(&self, w: &[usize], out: &[usize]) -> Vec<Slice> {
        (0..w.len()).map(|i| any::range(w[i] * self.dilations[i], out[i], self.strides[i])).collect()
    }
}

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let n = inputs.len();
    let mut it = inputs.into_iter();
    let mut next = || it.next().ok_or_else(|| NifError::new(op, format!("missing an input ({n} given)"), out.describe()));
    let t = next()?;
    let device = t.device();
    let window = Window::from(op, opts)?;
    if op.starts_with("window_scatter") {
        let (source, init) = (next()?, next()?);
        return scatter::<B>(op, t, source, init, out, &window);
    }
    let (fold, pad_value) = match op {
        "window_reduce" => {
            let acc = next()?;
            let with = opts.name(op, "op", None)?;
            if !["add", "multiply", "max", "min"].contains(&with.as_str()) {
                return Err(NifError::new(op, format!("can't reduce windows with {with} on the device"), out.describe()));
            }
            (with, any::cast(op, acc, out.dtype)?)
        }
        "window_sum" => ("add".to_string(), scalar::<B>(out.dtype, Identity::Zero, &device)),
        "window_product" => ("multiply".to_string(), scalar::<B>(out.dtype, Identity::One, &device)),
        "window_max" => ("max".to_string(), scalar::<B>(out.dtype, Identity::Lowest, &device)),
        _ => ("min".to_string(), scalar::<B>(out.dtype, Identity::Highest, &device)),
    };
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &device));
    }
    let t = any::cast(op, t, out.dtype)?;
    let padded_shape: Vec<usize> = t.shape().iter().enumerate().map(|(i, &d)| (d as i64 + window.padding[3 * i] + window.padding[3 * i + 1]) as usize).collect();
    let padded = super::shape::pad::<B>(op, t, pad_value.clone(), &Out { dtype: out.dtype, shape: padded_shape }, &window.padding)?;
    let r = fold_views::<B>(op, &fold, padded, &window, out)?;
    if op == "window_reduce" {
        return binary::<B>(&fold, r, pad_value, out, out.dtype);
    }
    Ok(r)
}

/// `fold` over the views of `padded` that the window's offsets read, in row-major order of the
/// offsets: `out` elements of `out`'s dtype.
fn fold_views<B: Extension>(op: &str, fold: &str, padded: Prim<B>, window: &Window, out: &Out) -> NifResult<Prim<B>> {
    let views: Vec<Prim<B>> = window.offsets().iter().map(|w| any::slice(padded.clone(), &window.view(w, &out.shape))).collect();
    let fused = |x: usize, y: usize| match fold {
        "add" => Some(FusedOp::Binary(BinaryFloatOp::Add, x, y)),
        "multiply" => Some(FusedOp::Binary(BinaryFloatOp::Mul, x, y)),
        "max" => Some(FusedOp::NanMax(x, y)),
        "min" => Some(FusedOp::NanMin(x, y)),
        _ => None,
    };
    let floats: Option<Vec<_>> = views.iter().map(|v| if let Prim::Float(t) = v { Some(t.clone()) } else { None }).collect();
    if let (false, Some(floats), Some(_)) = (B::TAPE || views.len() < 2, floats, fused(0, 0)) {
        // Register k is view k; op i writes register n + i, folding in view i + 1.
        let n = floats.len();
        let ops: Vec<FusedOp> = (1..n).filter_map(|k| fused(if k == 1 { 0 } else { n + k - 2 }, k)).collect();
        let last = n + ops.len() - 1;
        let mut r = B::float_fused(floats, Shape::from(out.shape.clone()), ops, vec![last]);
        return Ok(Prim::Float(r.remove(0)));
    }
    let mut acc: Option<Prim<B>> = None;
    for v in views {
        acc = Some(match acc {
            None => v,
            Some(a) => binary::<B>(fold, a, v, out, out.dtype)?,
        });
    }
    acc.ok_or_else(|| NifError::new(op, "the window is empty", out.describe()))
}

enum Identity {
    Zero,
    One,
    Lowest,
    Highest,
}

/// A one-element tensor of `dtype` holding an identity of a fold.
fn scalar<B: Extension>(dtype: DType, which: Identity, device: &B::Device) -> Prim<B> {
    let int = class(dtype) == Class::Int;
    let (lo, hi) = if int { int_range(dtype) } else { (0, 0) };
    match which {
        Identity::Zero => any::full::<B>(&[1], dtype, 0.0, device),
        Identity::One => any::full::<B>(&[1], dtype, 1.0, device),
        Identity::Lowest if int => any::full_int::<B>(&[1], dtype, lo, device),
        Identity::Highest if int => any::full_int::<B>(&[1], dtype, hi, device),
        Identity::Lowest => any::full::<B>(&[1], dtype, f64::NEG_INFINITY, device),
        Identity::Highest => any::full::<B>(&[1], dtype, f64::INFINITY, device),
    }
}

/// `window_scatter_max` / `_min`: `init` everywhere, plus each source value added at the
/// last maximum (minimum) of its window, the padding holding `init`, as Nx's BinaryBackend
/// selects.
fn scatter<B: Extension>(op: &str, t: Prim<B>, source: Prim<B>, init: Prim<B>, out: &Out, window: &Window) -> NifResult<Prim<B>> {
    let device = t.device();
    let is_max = op == "window_scatter_max";
    let t = any::cast(op, t, out.dtype)?;
    let source = any::cast(op, source, out.dtype)?;
    let windows = source.shape().to_vec();
    let padded_shape: Vec<usize> = t.shape().iter().enumerate().map(|(i, &d)| (d as i64 + window.padding[3 * i] + window.padding[3 * i + 1]) as usize).collect();
    let padded_out = Out { dtype: out.dtype, shape: padded_shape.clone() };
    let init = any::cast(op, init, out.dtype)?;
    let padded = super::shape::pad::<B>(op, t, init.clone(), &padded_out, &window.padding)?;
    let win_out = Out { dtype: out.dtype, shape: windows.clone() };
    let pred_out = Out { dtype: DType::U8, shape: windows.clone() };
    // The extreme of each window.
    let extreme = fold_views::<B>(op, if is_max { "max" } else { "min" }, padded.clone(), window, &win_out)?;
    // The last offset holding it takes the source value: per offset (last first), what it adds.
    let offsets: Vec<Vec<usize>> = window.offsets().into_iter().rev().collect();
    let views: Vec<Vec<Slice>> = offsets.iter().map(|w| window.view(w, &windows)).collect();
    let reads: Vec<Prim<B>> = views.iter().map(|view| any::slice(padded.clone(), view)).collect();
    let cut: Vec<Slice> = (0..padded_shape.len())
        .map(|i| any::range(window.padding[3 * i].max(0) as usize, out.shape[i], 1))
        .collect();
    // Windows that tile the padded input (as wide as their strides, undilated, none left
    // over): each element is one offset's, so the fused launch adds `init` too and each
    // offset's values are copied into their places.
    let tiled = (0..windows.len()).all(|i| window.dilations[i] == 1 && window.strides[i] == window.dims[i] && padded_shape[i] == windows[i] * window.dims[i]);
    let adds = match taken_fused::<B>(&reads, &extreme, &source, &windows, tiled.then_some(&init)) {
        Some(adds) if tiled => {
            let parts = views.into_iter().zip(adds).map(|(view, add)| (view, any::float::<B>(add))).collect();
            let result = Prim::Float(B::float_assemble(Shape::from(padded_shape), out.dtype, parts));
            return Ok(any::slice(result, &cut));
        }
        Some(adds) => adds,
        None => {
            let mut taken = any::full::<B>(&windows, DType::U8, 0.0, &device);
            let zeros = any::full::<B>(&windows, out.dtype, 0.0, &device);
            let mut adds = Vec::new();
            for v in reads {
                let hit = binary::<B>("equal", v, extreme.clone(), &pred_out, out.dtype)?;
                let fresh = binary::<B>("logical_and", hit, binary::<B>("equal", taken.clone(), any::full::<B>(&windows, DType::U8, 0.0, &device), &pred_out, DType::U8)?, &pred_out, DType::U8)?;
                taken = binary::<B>("logical_or", taken, fresh.clone(), &pred_out, DType::U8)?;
                adds.push(any::select_where(any::nonzero(fresh), source.clone(), zeros.clone()));
            }
            adds
        }
    };
    let mut result = any::full::<B>(&padded_shape, out.dtype, 0.0, &device);
    for (view, add) in views.iter().zip(adds) {
        let region = any::slice(result.clone(), view);
        let sum = binary::<B>("add", region, add, &win_out, out.dtype)?;
        result = any::slice_assign(result, view, sum);
    }
    let result = any::slice(result, &cut);
    binary::<B>("add", result, init, out, out.dtype)
}

/// What each of `reads` (one view per window offset, last offset first) adds for the window
/// scatter, in one fused launch: `source` where the view holds the window's `extreme` and no
/// earlier view did, else 0; with `init`, `(0 + that) + init` (what the scatter gives where
/// that offset is the only one to add). f32 only (the program's 0 and 1 are f32 literals),
/// and not on Burn's tape; `None` where it doesn't apply.
fn taken_fused<B: Extension>(reads: &[Prim<B>], extreme: &Prim<B>, source: &Prim<B>, windows: &[usize], init: Option<&Prim<B>>) -> Option<Vec<Prim<B>>> {
    let float = |p: &Prim<B>| if let Prim::Float(t) = p { Some(t.clone()) } else { None };
    if B::TAPE || extreme.dtype() != DType::F32 || reads.is_empty() {
        return None;
    }
    let mut inputs: Vec<_> = reads.iter().map(float).collect::<Option<_>>()?;
    inputs.push(float(extreme)?);
    inputs.push(float(source)?);
    if let Some(init) = init {
        let scalar = any::reshape(init.clone(), &vec![1; windows.len()]);
        inputs.push(float(&any::expand(scalar, windows))?);
    }
    let n = inputs.len();
    let (extreme, source) = if init.is_some() { (n - 3, n - 2) } else { (n - 2, n - 1) };
    let mut ops = vec![FusedOp::Const(0f32.to_bits()), FusedOp::Const(1f32.to_bits())];
    let (zero, one) = (n, n + 1);
    let push = |ops: &mut Vec<FusedOp>, op| {
        ops.push(op);
        n + ops.len() - 1
    };
    let mut taken = zero;
    let mut outputs = Vec::new();
    for k in 0..reads.len() {
        let hit = push(&mut ops, FusedOp::Compare(CompareOp::Equal, k, extreme));
        let fresh = push(&mut ops, FusedOp::Select(taken, zero, hit));
        taken = push(&mut ops, FusedOp::Select(hit, one, taken));
        let add = push(&mut ops, FusedOp::Select(fresh, source, zero));
        outputs.push(match init {
            Some(_) => {
                let placed = push(&mut ops, FusedOp::Binary(BinaryFloatOp::Add, zero, add));
                push(&mut ops, FusedOp::Binary(BinaryFloatOp::Add, placed, n - 1))
            }
            None => add,
        });
    }
    Some(B::float_fused(inputs, Shape::from(windows.to_vec()), ops, outputs).into_iter().map(Prim::Float).collect())
}
