//! Layout kernels: views (reshape, permute, transpose, slice, expand, flip) that change the
//! layout and not the data, and copies (repeat, cat).
use burn_backend::{Backend, Shape, Slice};

use super::{axis, resolve_axis, same_dtype, sizes, take};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    if op == "cat" {
        return cat::<B>(op, inputs, opts);
    }
    let [x] = take::<B, 1>(op, inputs)?;
    let shape = x.shape();
    let rank = shape.num_dims();
    let desc = x.describe();
    let out = match op {
        "reshape" => {
            let new = sizes(op, opts, "shape", None)?;
            if new.iter().product::<usize>() != shape.num_elements() {
                return Err(NifError::new(
                    op,
                    format!("shape {new:?} has another number of elements"),
                    desc,
                ));
            }
            let s = Shape::from(new);
            each_kind!(
                x,
                |t| B::float_reshape(t, s.clone()),
                B::int_reshape(t, s.clone()),
                B::bool_reshape(t, s.clone())
            )
        }
        "permute" | "flip" | "transpose" => {
            let axes: Vec<usize> = opts
                .ints(op, "axes", None)?
                .into_iter()
                .map(|a| resolve_axis(op, a, rank))
                .collect::<NifResult<_>>()?;
            let mut sorted = axes.clone();
            sorted.sort();
            sorted.dedup();
            let valid = match op {
                "permute" => sorted.len() == rank && axes.len() == rank,
                "transpose" => axes.len() == 2 && sorted.len() == 2,
                _ => sorted.len() == axes.len(),
            };
            if !valid {
                return Err(NifError::new(
                    op,
                    format!(
                        "axes {axes:?} are not valid for rank {rank} (permute: each axis once; transpose: two axes; flip: distinct axes)"
                    ),
                    desc,
                ));
            }
            match op {
                "permute" => each_kind!(
                    x,
                    |t| B::float_permute(t, &axes),
                    B::int_permute(t, &axes),
                    B::bool_permute(t, &axes)
                ),
                "flip" => each_kind!(
                    x,
                    |t| B::float_flip(t, &axes),
                    B::int_flip(t, &axes),
                    B::bool_flip(t, &axes)
                ),
                _ => {
                    let (a, b) = (axes[0], axes[1]);
                    each_kind!(
                        x,
                        |t| B::float_swap_dims(t, a, b),
                        B::int_swap_dims(t, a, b),
                        B::bool_swap_dims(t, a, b)
                    )
                }
            }
        }
        "slice" => {
            let start = opts.ints(op, "start", Some(vec![0; rank]))?;
            let stop = opts.ints(op, "stop", Some(shape.iter().map(|&d| d as i64).collect()))?;
            let step = opts.ints(op, "step", Some(vec![1; rank]))?;
            if start.len() != rank || stop.len() != rank || step.len() != rank || step.contains(&0)
            {
                return Err(NifError::new(
                    op,
                    "start, stop and step need one entry per axis, steps not 0",
                    format!("{desc}: start {start:?}, stop {stop:?}, step {step:?}"),
                ));
            }
            let slices: Vec<Slice> = (0..rank)
                .map(|i| {
                    let d = shape[i] as i64;
                    let clamp = |v: i64| if v < 0 { (v + d).max(0) } else { v.min(d) };
                    let (a, b) = (clamp(start[i]), clamp(stop[i]).max(clamp(start[i])));
                    Slice::new(a as isize, Some(b as isize), step[i] as isize)
                })
                .collect();
            each_kind!(
                x,
                |t| B::float_slice(t, &slices),
                B::int_slice(t, &slices),
                B::bool_slice(t, &slices)
            )
        }
        "expand" => {
            let new = sizes(op, opts, "shape", None)?;
            let ok = new.len() >= rank
                && shape
                    .iter()
                    .rev()
                    .zip(new.iter().rev())
                    .all(|(&a, &b)| a == b || a == 1);
            if !ok {
                return Err(NifError::new(
                    op,
                    format!("cannot expand to {new:?} (each dimension must match or be 1)"),
                    desc,
                ));
            }
            let s = Shape::from(new);
            each_kind!(
                x,
                |t| B::float_expand(t, s.clone()),
                B::int_expand(t, s.clone()),
                B::bool_expand(t, s.clone())
            )
        }
        "repeat" => {
            let dim = axis(op, opts, "axis", rank, None)?;
            let times = sizes(op, opts, "times", None)?;
            let times = *times
                .first()
                .ok_or_else(|| NifError::new(op, "option times is empty", desc.clone()))?;
            each_kind!(
                x,
                |t| B::float_repeat_dim(t, dim, times),
                B::int_repeat_dim(t, dim, times),
                B::bool_repeat_dim(t, dim, times)
            )
        }
        _ => return Err(NifError::new(op, "is not a layout kernel", desc)),
    };
    Ok(vec![out])
}

fn cat<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let first = inputs
        .first()
        .ok_or_else(|| NifError::new(op, "needs at least one input", ""))?
        .clone();
    let rank = first.shape().num_dims();
    let dim = axis(op, opts, "axis", rank, None)?;
    for x in &inputs {
        same_dtype(op, &first, x)?;
        let (a, b) = (first.shape(), x.shape());
        if b.num_dims() != rank || (0..rank).any(|i| i != dim && a[i] != b[i]) {
            return Err(NifError::new(
                op,
                format!("shapes differ outside axis {dim}"),
                format!("{} and {}", first.describe(), x.describe()),
            ));
        }
    }
    let out = match first {
        Prim::Float(_) => Prim::Float(B::float_cat(
            inputs
                .into_iter()
                .map(|p| super::float(op, p))
                .collect::<NifResult<_>>()?,
            dim,
        )),
        Prim::Int(_) => Prim::Int(B::int_cat(
            inputs
                .into_iter()
                .map(|p| super::int(op, p))
                .collect::<NifResult<_>>()?,
            dim,
        )),
        Prim::Bool(_) => Prim::Bool(B::bool_cat(
            inputs
                .into_iter()
                .map(|p| super::boolean(op, p))
                .collect::<NifResult<_>>()?,
            dim,
        )),
        Prim::Quant(_) => unreachable!("quantized inputs are refused in ops::run"),
    };
    Ok(vec![out])
}
