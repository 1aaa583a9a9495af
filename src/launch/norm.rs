//! Fused layer normalisation over the last dimension.
use cubecl::Runtime;
use ex_cubecl_kernels::norm::layer_norm as layer_norm_kernel;

use super::conv::check_float;
use super::{accumulator, accumulator_dtype, float_arg};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// `(x - mean) / sqrt(var + epsilon) · gamma + beta` over the last dimension of `x`.
pub fn layer_norm<R: Runtime>(x: CubeTensor<R>, gamma: CubeTensor<R>, beta: Option<CubeTensor<R>>, epsilon: f64) -> CubeTensor<R> {
    let op = "layer_norm";
    let mut all = vec![("x", &x), ("gamma", &gamma)];
    all.extend(beta.as_ref().map(|b| ("beta", b)));
    check_float(op, &all);
    // bf16 held as bits (x, gamma and beta share the dtype) is read and written as its bits
    // and computed in f32 (see `super::bf16`).
    let bits = x.bf16_bits();
    let d = *x.dims().last().unwrap_or_else(|| panic!("ex_cubecl: {op}: x must have rank >= 1, got a scalar ({:?})", x.dtype));
    for (name, t) in &all[1..] {
        if t.dims() != [d] {
            panic!("ex_cubecl: {op}: {name} must have shape [{d}] for x {:?}, got {:?} ({:?})", x.dims(), t.dims(), t.dtype);
        }
    }
    let out = CubeTensor::empty(&x.client, &x.device, x.layout.shape.clone(), x.dtype);
    let rows = if d == 0 { 0 } else { x.num_elements() / d };
    let has_beta = beta.is_some();
    let beta_ref = beta.unwrap_or_else(|| gamma.clone());
    let eps = float_arg(epsilon, accumulator_dtype(x.dtype));
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(rows), move |client, count, dim| {
        // SAFETY: the kernel guards `row < rows`; rows lie inside x and the output.
        unsafe {
            layer_norm_kernel::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), gamma.as_arg(), beta_ref.as_arg(), o.as_arg(), x.layout.offset,
                gamma.layout.offset, beta_ref.layout.offset, eps, rows, has_beta, bits, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

