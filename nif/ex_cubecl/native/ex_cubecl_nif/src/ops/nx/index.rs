//! Indexing entries: gather and the indexed updates over `axes`, take, take_along_axis,
//! sort, argsort and top_k. Indices are clamped into range (a device never reads out of
//! bounds).
use burn_backend::tensor::{IndexingUpdateOp, IntTensor};
use crate::ops::Extension;
use burn_backend::{DType, IntDType, Scalar, TensorMetadata};

use super::Out;
use super::any;
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &["gather", "indexed_add", "indexed_put", "take", "take_along_axis", "sort", "argsort"];

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let n = inputs.len();
    let mut it = inputs.into_iter();
    let mut next = || it.next().ok_or_else(|| NifError::new(op, format!("missing an input ({n} given)"), out.describe()));
    let t = next()?;
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &t.device()));
    }
    match op {
        "sort" | "argsort" => sort::<B>(op, t, out, opts),
        "take" | "take_along_axis" => {
            let idx = next()?;
            let axis = opts.int(op, "axis", None)? as usize;
            let dim = t.shape()[axis];
            let idx = clamp::<B>(op, idx, &[dim])?;
            let t = any::cast(op, t, out.dtype)?;
            if op == "take" {
                let len = idx.shape().num_elements();
                let flat = B::int_reshape(idx, [len].into());
                Ok(any::reshape(any::select(t, axis, flat), &out.shape))
            } else {
                Ok(any::gather(t, axis, idx))
            }
        }
        _ => {
            let idx = next()?;
            let dims = t.shape().to_vec();
            let axes = super::shape::axes(op, opts, "axes")?;
            let axes = if axes.is_empty() { (0..idx.shape().as_slice().last().copied().unwrap_or(0)).collect() } else { axes };
            let perm: Vec<usize> = axes.iter().copied().chain((0..dims.len()).filter(|a| !axes.contains(a))).collect();
            let limits: Vec<usize> = axes.iter().map(|&a| dims[a]).collect();
            let idx = clamp::<B>(op, idx, &limits)?;
            let t = any::permute(any::cast(op, t, out.dtype)?, &perm);
            if op == "gather" {
                return Ok(any::gather_nd(t, idx));
            }
            let updates = any::cast(op, next()?, out.dtype)?;
            let how = if op == "indexed_add" { IndexingUpdateOp::Add } else { IndexingUpdateOp::Assign };
            let r = any::scatter_nd(t, idx, updates, how);
            let mut inverse = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inverse[p] = i;
            }
            Ok(any::permute(r, &inverse))
        }
    }
}

/// Integer indices as i64, each last-axis component `j` clamped to `0..limits[j]` (one limit:
/// every element).
fn clamp<B: Extension>(op: &str, idx: Prim<B>, limits: &[usize]) -> NifResult<IntTensor<B>> {
    let idx = any::int::<B>(any::cast(op, idx, DType::I64)?);
    let idx = B::int_clamp_min(idx, Scalar::Int(0));
    if let [limit] = limits {
        return Ok(B::int_clamp_max(idx, Scalar::Int(*limit as i64 - 1)));
    }
    let shape = idx.shape();
    let device = B::int_device(&idx);
    let mut top = vec![1; shape.num_dims()];
    *top.last_mut().unwrap() = limits.len();
    let limit = any::indices::<B>(limits.iter().map(|&l| l as i64 - 1).collect(), &top, &device);
    let limit = B::int_expand(limit, shape);
    let over = B::int_greater(idx.clone(), limit.clone(), any::BOOL);
    Ok(B::int_mask_where(idx, over, limit))
}

fn sort<B: Extension>(op: &str, t: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let rank = t.shape().num_dims();
    if rank == 0 {
        return if op == "sort" { Ok(t) } else { Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &t.device())) };
    }
    let axis = super::super::resolve_axis(op, opts.int(op, "axis", Some(-1))?, rank)?;
    let desc = opts.bool(op, "descending", false)?;
    Ok(match (op, t) {
        ("sort", Prim::Float(x)) => Prim::Float(B::float_sort(x, axis, desc)),
        ("sort", Prim::Int(x)) => Prim::Int(B::int_sort(x, axis, desc)),
        (_, Prim::Float(x)) => any::cast(op, Prim::Int(B::float_argsort(x, axis, desc, IntDType::I64)), out.dtype)?,
        (_, Prim::Int(x)) => any::cast(op, Prim::Int(B::int_argsort(x, axis, desc)), out.dtype)?,
        (_, other) => return Err(NifError::new(op, "takes numbers", other.describe())),
    })
}

/// The `k` largest values along the last axis (NaN largest, ties in index order) and their
/// indices in `index_type`: the first `k` of a descending argsort.
pub fn top_k<B: Extension>(inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let op = "top_k";
    let [t] = <[Prim<B>; 1]>::try_from(inputs).map_err(|_| NifError::new(op, "takes one tensor", out.describe()))?;
    let index_type = super::super::dtype_opt(op, opts, "index_type", Some("s64"))?;
    let k = opts.int(op, "k", None)? as usize;
    let dims = t.shape().to_vec();
    let axis = dims.len() - 1;
    let order = match t.clone() {
        Prim::Float(x) => B::float_argsort(x, axis, true, IntDType::I64),
        Prim::Int(x) => B::int_argsort(x, axis, true),
        other => return Err(NifError::new(op, "takes numbers", other.describe())),
    };
    let first: Vec<burn_backend::Slice> = dims.iter().enumerate().map(|(i, &d)| any::range(0, if i == axis { k } else { d }, 1)).collect();
    let indices = any::int::<B>(any::slice(Prim::Int(order), &first));
    let values = any::gather(t, axis, indices.clone());
    Ok(vec![any::cast(op, values, out.dtype)?, any::cast(op, Prim::Int(indices), index_type)?])
}
