//! The backend's ops on primitives of any class (float, int or bool), and Nx's broadcasting:
//! the building blocks of the Nx entries.
use burn_backend::tensor::{BoolTensor, IndexingUpdateOp, IntTensor};
use crate::ops::Extension;
use burn_backend::{BoolStore, DType, IntDType, Scalar, Shape, Slice};

use crate::dtype::{Class, class, int_scalar};
use crate::error::{NifError, NifResult};
use crate::tensor::Prim;

/// Bools made by comparisons.
pub const BOOL: BoolStore = BoolStore::Native;

pub fn reshape<B: Extension>(p: Prim<B>, shape: &[usize]) -> Prim<B> {
    if p.shape().as_slice() == shape {
        return p;
    }
    let s = Shape::from(shape.to_vec());
    each_kind!(p, |t| B::float_reshape(t, s.clone()), B::int_reshape(t, s.clone()), B::bool_reshape(t, s.clone()))
}

pub fn permute<B: Extension>(p: Prim<B>, axes: &[usize]) -> Prim<B> {
    if axes.iter().enumerate().all(|(i, &a)| i == a) {
        return p;
    }
    each_kind!(p, |t| B::float_permute(t, axes), B::int_permute(t, axes), B::bool_permute(t, axes))
}

pub fn expand<B: Extension>(p: Prim<B>, shape: &[usize]) -> Prim<B> {
    if p.shape().as_slice() == shape {
        return p;
    }
    let s = Shape::from(shape.to_vec());
    each_kind!(p, |t| B::float_expand(t, s.clone()), B::int_expand(t, s.clone()), B::bool_expand(t, s.clone()))
}

pub fn flip<B: Extension>(p: Prim<B>, axes: &[usize]) -> Prim<B> {
    if axes.is_empty() {
        return p;
    }
    each_kind!(p, |t| B::float_flip(t, axes), B::int_flip(t, axes), B::bool_flip(t, axes))
}

pub fn slice<B: Extension>(p: Prim<B>, s: &[Slice]) -> Prim<B> {
    each_kind!(p, |t| B::float_slice(t, s), B::int_slice(t, s), B::bool_slice(t, s))
}

/// `p` with the region `s` replaced by `v` (of `p`'s class).
pub fn slice_assign<B: Extension>(p: Prim<B>, s: &[Slice], v: Prim<B>) -> Prim<B> {
    match (p, v) {
        (Prim::Float(t), Prim::Float(v)) => Prim::Float(B::float_slice_assign(t, s, v)),
        (Prim::Int(t), Prim::Int(v)) => Prim::Int(B::int_slice_assign(t, s, v)),
        (Prim::Bool(t), Prim::Bool(v)) => Prim::Bool(B::bool_slice_assign(t, s, v)),
        _ => unreachable!("slice_assign: the caller casts the value to the tensor's dtype"),
    }
}

/// Concatenation along `dim` of primitives of one dtype.
pub fn cat<B: Extension>(ps: Vec<Prim<B>>, dim: usize) -> Prim<B> {
    if ps.len() == 1 {
        return ps.into_iter().next().unwrap();
    }
    match &ps[0] {
        Prim::Float(_) => Prim::Float(B::float_cat(ps.into_iter().map(float).collect(), dim)),
        Prim::Int(_) => Prim::Int(B::int_cat(ps.into_iter().map(int).collect(), dim)),
        Prim::Bool(_) => Prim::Bool(B::bool_cat(ps.into_iter().map(boolean).collect(), dim)),
        Prim::Quant(_) => unreachable!("quantized inputs are refused in ops::run"),
    }
}

/// `mask ? t : f` for `t` and `f` of one dtype and the mask's shape.
pub fn select_where<B: Extension>(mask: BoolTensor<B>, t: Prim<B>, f: Prim<B>) -> Prim<B> {
    match (t, f) {
        (Prim::Float(t), Prim::Float(f)) => Prim::Float(B::float_mask_where(f, mask, t)),
        (Prim::Int(t), Prim::Int(f)) => Prim::Int(B::int_mask_where(f, mask, t)),
        (Prim::Bool(t), Prim::Bool(f)) => Prim::Bool(B::bool_mask_where(f, mask, t)),
        _ => unreachable!("select_where: the caller casts both sides to one dtype"),
    }
}

pub fn gather_nd<B: Extension>(p: Prim<B>, idx: IntTensor<B>) -> Prim<B> {
    each_kind!(p, |t| B::float_gather_nd(t, idx), B::int_gather_nd(t, idx), B::int_not_equal_elem(B::int_gather_nd(B::bool_into_int(t, IntDType::U8), idx), Scalar::Int(0), BOOL))
}

pub fn scatter_nd<B: Extension>(p: Prim<B>, idx: IntTensor<B>, v: Prim<B>, op: IndexingUpdateOp) -> Prim<B> {
    match (p, v) {
        (Prim::Float(t), Prim::Float(v)) => Prim::Float(B::float_scatter_nd(t, idx, v, op)),
        (Prim::Int(t), Prim::Int(v)) => Prim::Int(B::int_scatter_nd(t, idx, v, op)),
        (Prim::Bool(t), Prim::Bool(v)) => {
            let (t, v) = (B::bool_into_int(t, IntDType::U8), B::bool_into_int(v, IntDType::U8));
            Prim::Bool(B::int_not_equal_elem(B::int_scatter_nd(t, idx, v, op), Scalar::Int(0), BOOL))
        }
        _ => unreachable!("scatter_nd: the caller casts the updates to the tensor's dtype"),
    }
}

/// The rows `idx` (1-d) of `p` along `dim`.
pub fn select<B: Extension>(p: Prim<B>, dim: usize, idx: IntTensor<B>) -> Prim<B> {
    each_kind!(p, |t| B::float_select(t, dim, idx), B::int_select(t, dim, idx), B::bool_select(t, dim, idx))
}

/// Elements of `p` along `dim` at `idx` (of the output's shape).
pub fn gather<B: Extension>(p: Prim<B>, dim: usize, idx: IntTensor<B>) -> Prim<B> {
    each_kind!(p, |t| B::float_gather(dim, t, idx), B::int_gather(dim, t, idx), B::bool_gather(dim, t, idx))
}

/// A tensor of `shape` and `dtype` filled with `value` (floats) or `int` (integers, exact).
pub fn full<B: Extension>(shape: &[usize], dtype: DType, value: f64, device: &B::Device) -> Prim<B> {
    let s = Shape::from(shape.to_vec());
    match class(dtype) {
        Class::Float => Prim::Float(B::float_full(s, Scalar::Float(value), device, dtype.into())),
        Class::Int => Prim::Int(B::int_full(s, int_scalar(dtype, value as i128), device, dtype.into())),
        Class::Bool => Prim::Bool(if value != 0.0 { B::bool_ones(s, device, dtype.into()) } else { B::bool_zeros(s, device, dtype.into()) }),
    }
}

/// An integer tensor of `shape` filled with `value`, exact for every width.
pub fn full_int<B: Extension>(shape: &[usize], dtype: DType, value: i128, device: &B::Device) -> Prim<B> {
    Prim::Int(B::int_full(Shape::from(shape.to_vec()), int_scalar(dtype, value), device, dtype.into()))
}

/// `p` as `dtype` (bools are 0 and 1, floats to integers truncate, integers wrap as Rust's `as`:
/// the backend's cast sign-extends a signed value going to a wider unsigned type).
pub fn cast<B: Extension>(op: &str, p: Prim<B>, dtype: DType) -> NifResult<Prim<B>> {
    if p.dtype() == dtype {
        return Ok(p);
    }
    crate::ops::elementwise::cast(op, p, dtype)
}

/// Where `p` is not zero.
pub fn nonzero<B: Extension>(p: Prim<B>) -> BoolTensor<B> {
    match p {
        Prim::Float(t) => B::float_not_equal_elem(t, Scalar::Float(0.0), BOOL),
        Prim::Int(t) => B::int_not_equal_elem(t, Scalar::Int(0), BOOL),
        Prim::Bool(t) => t,
        Prim::Quant(_) => unreachable!("quantized inputs are refused in ops::run"),
    }
}

/// A bool tensor as Nx's `u8` (or another `dtype`).
pub fn from_bool<B: Extension>(op: &str, b: BoolTensor<B>, dtype: DType) -> NifResult<Prim<B>> {
    cast(op, Prim::Bool(b), dtype)
}

/// `p` broadcast to `shape` as Nx does: dimensions aligned at the end, each equal or 1.
pub fn broadcast_to<B: Extension>(op: &str, p: Prim<B>, shape: &[usize]) -> NifResult<Prim<B>> {
    let from = p.shape().as_slice().to_vec();
    if from.as_slice() == shape {
        return Ok(p);
    }
    if from.len() > shape.len() {
        return Err(NifError::new(op, format!("can't broadcast shape {from:?} to {shape:?}"), p.describe()));
    }
    let mut padded = vec![1; shape.len() - from.len()];
    padded.extend_from_slice(&from);
    if padded.iter().zip(shape).any(|(&a, &b)| a != b && a != 1) {
        return Err(NifError::new(op, format!("can't broadcast shape {from:?} to {shape:?}"), p.describe()));
    }
    if shape.iter().any(|&d| d == 0) {
        // A size-0 result: nothing to read, make it directly.
        return Ok(empty_like::<B>(&p, shape));
    }
    Ok(expand(reshape(p, &padded), shape))
}

/// A tensor of `shape` with `p`'s dtype and device (used for size-0 results).
pub fn empty_like<B: Extension>(p: &Prim<B>, shape: &[usize]) -> Prim<B> {
    full::<B>(shape, p.dtype(), 0.0, &p.device())
}

pub fn float<B: Extension>(p: Prim<B>) -> B::FloatTensorPrimitive {
    match p {
        Prim::Float(t) => t,
        other => unreachable!("expected a float primitive, got {}", other.describe()),
    }
}

pub fn int<B: Extension>(p: Prim<B>) -> B::IntTensorPrimitive {
    match p {
        Prim::Int(t) => t,
        other => unreachable!("expected an int primitive, got {}", other.describe()),
    }
}

pub fn boolean<B: Extension>(p: Prim<B>) -> B::BoolTensorPrimitive {
    match p {
        Prim::Bool(t) => t,
        other => unreachable!("expected a bool primitive, got {}", other.describe()),
    }
}

/// An int64 index tensor from host values.
pub fn indices<B: Extension>(values: Vec<i64>, shape: &[usize], device: &B::Device) -> IntTensor<B> {
    let data = burn_backend::TensorData::new(values, Shape::from(shape.to_vec()));
    B::int_from_data(data, device)
}

/// The number of elements of `shape`.
pub fn numel(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// `Slice` of `start..start + len` with `step`.
pub fn range(start: usize, len: usize, step: usize) -> Slice {
    let end = start + if len == 0 { 0 } else { (len - 1) * step + 1 };
    Slice::new(start as isize, Some(end as isize), step as isize)
}
