//! Tensors made on the device from options alone: constants, ranges and random draws.
//!
//! Sizes are checked against the device's largest buffer before anything is made (a host
//! allocation of that size would abort the VM; Burn's default `float_full`, which
//! `Autodiff` uses, fills on the host). The NIF runs these on the inner backend, which fills
//! on the device.
use burn_backend::{Backend, Distribution, Scalar, Shape};

use super::{computes, dtype_opt, sizes, take};
use crate::dtype::{Class, class, int_scalar};
use crate::error::{NifError, NifResult};
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

pub fn run<B: Backend>(
    op: &str,
    inputs: Vec<Prim<B>>,
    opts: &Opts,
    device: &B::Device,
    max_bytes: u64,
) -> NifResult<Vec<Prim<B>>> {
    let [] = take::<B, 0>(op, inputs)?;
    let out = match op {
        "arange" => {
            let dtype = dtype_opt(op, opts, "dtype", Some("s32"))?;
            let (start, stop, step) = (
                opts.int(op, "start", Some(0))?,
                opts.int(op, "stop", None)?,
                opts.int(op, "step", Some(1))?,
            );
            if step <= 0 || class(dtype) != Class::Int {
                return Err(NifError::new(
                    op,
                    "needs an int dtype and a positive step",
                    format!("start {start}, stop {stop}, step {step}, dtype {dtype:?}"),
                ));
            }
            computes::<B>(op, dtype, device)?;
            let len = ((stop.max(start) - start) as u64).div_ceil(step as u64) as usize;
            check_size(op, &[len], dtype, max_bytes)?;
            Prim::Int(B::int_arange_step(
                start..stop.max(start),
                step as usize,
                device,
                dtype.into(),
            ))
        }
        _ => {
            let dims = sizes(op, opts, "shape", None)?;
            let default_dtype = if op.starts_with("random") {
                Some("f32")
            } else {
                None
            };
            let dtype = dtype_opt(op, opts, "dtype", default_dtype)?;
            check_size(op, &dims, dtype, max_bytes)?;
            computes::<B>(op, dtype, device)?;
            let shape = Shape::from(dims);
            match op {
                "zeros" | "ones" | "full" => {
                    let value = match (op, opts.get("value")) {
                        ("zeros", _) => Fill::Int(0),
                        ("ones", _) => Fill::Int(1),
                        (_, Some(OptVal::Int(v))) => Fill::Int(*v),
                        _ => Fill::Float(opts.float(op, "value", None)?),
                    };
                    full::<B>(shape, value, dtype, device)
                }
                _ => {
                    let distribution = match op {
                        "random_uniform" => Distribution::Uniform(
                            opts.float(op, "low", Some(0.0))?,
                            opts.float(op, "high", Some(1.0))?,
                        ),
                        "random_normal" => Distribution::Normal(
                            opts.float(op, "mean", Some(0.0))?,
                            opts.float(op, "std", Some(1.0))?,
                        ),
                        _ => Distribution::Bernoulli(opts.float(op, "prob", Some(0.5))?),
                    };
                    match class(dtype) {
                        Class::Float => {
                            Prim::Float(B::float_random(shape, distribution, device, dtype.into()))
                        }
                        Class::Int => {
                            Prim::Int(B::int_random(shape, distribution, device, dtype.into()))
                        }
                        Class::Bool => {
                            return Err(NifError::new(
                                op,
                                "random draws need a float or int dtype",
                                "bool",
                            ));
                        }
                    }
                }
            }
        }
    };
    Ok(vec![out])
}

/// Fails when `dims` of `dtype` need more bytes than the device's largest buffer.
fn check_size(
    op: &str,
    dims: &[usize],
    dtype: burn_backend::DType,
    max_bytes: u64,
) -> NifResult<()> {
    let bytes = dims
        .iter()
        .try_fold(dtype.size() as u64, |acc, &d| acc.checked_mul(d as u64));
    match bytes {
        Some(b) if b <= max_bytes => Ok(()),
        _ => Err(NifError::new(
            op,
            format!(
                "a tensor of shape {dims:?} and dtype {} needs {} bytes, more than the largest buffer the device takes ({max_bytes} bytes)",
                crate::dtype::name(dtype),
                bytes.map_or("over 2^64".into(), |b| b.to_string())
            ),
            format!("shape {dims:?}"),
        )),
    }
}

/// A fill value: integers stay exact (a u64 constant may exceed i64), floats as given.
enum Fill {
    Int(i128),
    Float(f64),
}

/// A tensor of `shape` filled with `value`; an integer dtype takes it wrapped to its width
/// (floats truncated first), as Nx does.
fn full<B: Backend>(
    shape: Shape,
    value: Fill,
    dtype: burn_backend::DType,
    device: &B::Device,
) -> Prim<B> {
    let (int, float) = match value {
        Fill::Int(v) => (v, v as f64),
        Fill::Float(v) => (v as i128, v),
    };
    match class(dtype) {
        Class::Float => Prim::Float(B::float_full(
            shape,
            Scalar::Float(float),
            device,
            dtype.into(),
        )),
        Class::Int => Prim::Int(B::int_full(shape, int_scalar(dtype, int), device, dtype.into())),
        Class::Bool if float != 0.0 => Prim::Bool(B::bool_ones(shape, device, dtype.into())),
        Class::Bool => Prim::Bool(B::bool_zeros(shape, device, dtype.into())),
    }
}
