//! Indexing kernels: gather / scatter along an axis, select along an axis, and sorting.
use burn_backend::{Backend, IntDType, Slice};

use super::{axis, int, same_dtype, take};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    match op {
        "gather" | "select" => {
            let [x, indices] = take::<B, 2>(op, inputs)?;
            let rank = x.shape().num_dims();
            let dim = axis(op, opts, "axis", rank, None)?;
            check_indices::<B>(op, &x, &indices, dim)?;
            let desc = x.describe();
            let idx = int(op, indices)?;
            Ok(vec![match (op, x) {
                ("gather", Prim::Float(t)) => Prim::Float(B::float_gather(dim, t, idx)),
                ("gather", Prim::Int(t)) => Prim::Int(B::int_gather(dim, t, idx)),
                ("gather", Prim::Bool(t)) => Prim::Bool(B::bool_gather(dim, t, idx)),
                (_, Prim::Float(t)) => Prim::Float(B::float_select(t, dim, idx)),
                (_, Prim::Int(t)) => Prim::Int(B::int_select(t, dim, idx)),
                (_, Prim::Bool(t)) => Prim::Bool(B::bool_select(t, dim, idx)),
                (_, Prim::Quant(_)) => unreachable!("quantized inputs are refused in ops::run"),
            }])
            .map_err(|e: NifError| NifError::new(op, e.reason, desc))
        }
        "scatter_add" | "select_add" => {
            let [x, indices, values] = take::<B, 3>(op, inputs)?;
            same_dtype(op, &x, &values)?;
            let rank = x.shape().num_dims();
            let dim = axis(op, opts, "axis", rank, None)?;
            check_indices::<B>(op, &x, &indices, dim)?;
            let idx = int(op, indices)?;
            let wrong = NifError::new(op, "takes float or int tensors", x.describe());
            Ok(vec![match (op, x, values) {
                ("scatter_add", Prim::Float(t), Prim::Float(v)) => {
                    Prim::Float(B::float_scatter_add(dim, t, idx, v))
                }
                ("scatter_add", Prim::Int(t), Prim::Int(v)) => {
                    Prim::Int(B::int_scatter_add(dim, t, idx, v))
                }
                ("select_add", Prim::Float(t), Prim::Float(v)) => {
                    Prim::Float(B::float_select_add(t, dim, idx, v))
                }
                ("select_add", Prim::Int(t), Prim::Int(v)) => {
                    Prim::Int(B::int_select_add(t, dim, idx, v))
                }
                _ => return Err(wrong),
            }])
        }
        _ => {
            let [x] = take::<B, 1>(op, inputs)?;
            let rank = x.shape().num_dims();
            let dim = axis(op, opts, "axis", rank, Some(-1))?;
            let descending = opts.bool(op, "descending", false)?;
            let n = x.shape()[dim];
            let k = if op.contains("topk") {
                let k = opts.int(op, "k", None)?;
                if k < 0 || k as usize > n {
                    return Err(NifError::new(
                        op,
                        format!("k = {k} is not in 0..={n}"),
                        x.describe(),
                    ));
                }
                k as usize
            } else {
                0
            };
            let wrong = NifError::new(op, "takes float or int tensors", x.describe());
            let index = IntDType::I64;
            Ok(vec![match (op, x) {
                ("sort", Prim::Float(t)) => Prim::Float(B::float_sort(t, dim, descending)),
                ("sort", Prim::Int(t)) => Prim::Int(B::int_sort(t, dim, descending)),
                ("argsort", Prim::Float(t)) => {
                    Prim::Int(B::float_argsort(t, dim, descending, index))
                }
                ("argsort", Prim::Int(t)) => Prim::Int(B::int_argsort(t, dim, descending)),
                // Burn's Autodiff has no topk: the first k of a descending sort (stable, so
                // ties keep their order, as the backend's own topk does).
                ("topk", Prim::Float(t)) => Prim::Float(B::float_slice(
                    B::float_sort(t, dim, true),
                    &first(rank, dim, k),
                )),
                ("topk", Prim::Int(t)) => Prim::Int(B::int_slice(
                    B::int_sort(t, dim, true),
                    &first(rank, dim, k),
                )),
                ("argtopk", Prim::Float(t)) => Prim::Int(B::float_argtopk(t, dim, k, index)),
                ("argtopk", Prim::Int(t)) => Prim::Int(B::int_argtopk(t, dim, k)),
                _ => return Err(wrong),
            }])
        }
    }
}

/// Slices keeping the first `k` entries of `dim`.
fn first(rank: usize, dim: usize, k: usize) -> Vec<Slice> {
    (0..rank)
        .map(|d| {
            if d == dim {
                Slice::new(0, Some(k as isize), 1)
            } else {
                Slice::new(0, None, 1)
            }
        })
        .collect()
}

/// Indices are ints; for gather and scatter of the input's rank, for select 1-D.
fn check_indices<B: Backend>(
    op: &str,
    x: &Prim<B>,
    indices: &Prim<B>,
    dim: usize,
) -> NifResult<()> {
    let (xr, ir) = (x.shape().num_dims(), indices.shape().num_dims());
    let rank_ok = if op.starts_with("select") {
        ir == 1
    } else {
        ir == xr
    };
    if !matches!(indices, Prim::Int(_)) || !rank_ok {
        return Err(NifError::new(
            op,
            "indices must be an int tensor (1-d for select, of the input's rank for gather and scatter)",
            format!(
                "input {}, indices {}, axis {dim}",
                x.describe(),
                indices.describe()
            ),
        ));
    }
    Ok(())
}
