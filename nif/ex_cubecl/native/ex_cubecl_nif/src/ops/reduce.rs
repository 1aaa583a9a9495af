//! Reductions (over one axis, which stays with size 1, or over everything, giving shape
//! `[1]`) and cumulative scans.
use burn_backend::{Backend, BoolStore, IntDType};

use super::{axis, take};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let [x] = take::<B, 1>(op, inputs)?;
    let rank = x.shape().num_dims();
    let desc = x.describe();
    let wrong = || NifError::new(op, "does not take this dtype", desc.clone());
    let scan = op.starts_with("cum");
    if (scan || op.starts_with("arg")) && !opts.has("axis") {
        return Err(NifError::new(op, "option axis is required", desc));
    }
    let dim = if opts.has("axis") {
        Some(axis(op, opts, "axis", rank, None)?)
    } else {
        None
    };
    if x.shape().num_elements() == 0 && dim.is_none() && matches!(op, "max" | "min") {
        return Err(NifError::new(
            op,
            "the tensor is empty: it has no max or min",
            desc,
        ));
    }
    let index = IntDType::I64;
    let out = match (x, dim) {
        (Prim::Float(t), Some(d)) => match op {
            "sum" => Prim::Float(B::float_sum_dim(t, d)),
            "mean" => Prim::Float(B::float_mean_dim(t, d)),
            "prod" => Prim::Float(B::float_prod_dim(t, d)),
            "max" => Prim::Float(B::float_max_dim(t, d)),
            "min" => Prim::Float(B::float_min_dim(t, d)),
            "argmax" => Prim::Int(B::float_argmax(t, d, index)),
            "argmin" => Prim::Int(B::float_argmin(t, d, index)),
            "any" => Prim::Bool(B::float_any_dim(t, d, BoolStore::Native)),
            "all" => Prim::Bool(B::float_all_dim(t, d, BoolStore::Native)),
            "cumsum" => Prim::Float(B::float_cumsum(t, d)),
            "cumprod" => Prim::Float(B::float_cumprod(t, d)),
            "cummax" => Prim::Float(B::float_cummax(t, d)),
            "cummin" => Prim::Float(B::float_cummin(t, d)),
            _ => return Err(wrong()),
        },
        (Prim::Float(t), None) => match op {
            "sum" => Prim::Float(B::float_sum(t)),
            "mean" => Prim::Float(B::float_mean(t)),
            "prod" => Prim::Float(B::float_prod(t)),
            "max" => Prim::Float(B::float_max(t)),
            "min" => Prim::Float(B::float_min(t)),
            "any" => Prim::Bool(B::float_any(t, BoolStore::Native)),
            "all" => Prim::Bool(B::float_all(t, BoolStore::Native)),
            _ => return Err(wrong()),
        },
        (Prim::Int(t), Some(d)) => match op {
            "sum" => Prim::Int(B::int_sum_dim(t, d)),
            "mean" => Prim::Int(B::int_mean_dim(t, d)),
            "prod" => Prim::Int(B::int_prod_dim(t, d)),
            "max" => Prim::Int(B::int_max_dim(t, d)),
            "min" => Prim::Int(B::int_min_dim(t, d)),
            "argmax" => Prim::Int(B::int_argmax(t, d)),
            "argmin" => Prim::Int(B::int_argmin(t, d)),
            "any" => Prim::Bool(B::int_any_dim(t, d, BoolStore::Native)),
            "all" => Prim::Bool(B::int_all_dim(t, d, BoolStore::Native)),
            "cumsum" => Prim::Int(B::int_cumsum(t, d)),
            "cumprod" => Prim::Int(B::int_cumprod(t, d)),
            "cummax" => Prim::Int(B::int_cummax(t, d)),
            "cummin" => Prim::Int(B::int_cummin(t, d)),
            _ => return Err(wrong()),
        },
        (Prim::Int(t), None) => match op {
            "sum" => Prim::Int(B::int_sum(t)),
            "mean" => Prim::Int(B::int_mean(t)),
            "prod" => Prim::Int(B::int_prod(t)),
            "max" => Prim::Int(B::int_max(t)),
            "min" => Prim::Int(B::int_min(t)),
            "any" => Prim::Bool(B::int_any(t, BoolStore::Native)),
            "all" => Prim::Bool(B::int_all(t, BoolStore::Native)),
            _ => return Err(wrong()),
        },
        (Prim::Bool(t), Some(d)) => match op {
            "any" => Prim::Bool(B::bool_any_dim(t, d)),
            "all" => Prim::Bool(B::bool_all_dim(t, d)),
            _ => return Err(wrong()),
        },
        (Prim::Bool(t), None) => match op {
            "any" => Prim::Bool(B::bool_any(t)),
            "all" => Prim::Bool(B::bool_all(t)),
            _ => return Err(wrong()),
        },
        (Prim::Quant(_), _) => unreachable!("quantized inputs are refused in ops::run"),
    };
    Ok(vec![out])
}
