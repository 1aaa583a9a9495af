//! 2-D resampling (nearest, bilinear, bicubic, Lanczos3) and its backward pass.
use burn_backend::Shape;
use burn_backend::ops::{InterpolateMode, InterpolateOptions};
use cubecl::Runtime;
use ex_cubecl_kernels::interpolate::{InterpolateKind, interpolate as forward_kernel, interpolate_backward as backward_kernel};

use super::accumulator;
use super::conv::{check_float, check_rank};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

fn kind(mode: &InterpolateMode) -> InterpolateKind {
    match mode {
        InterpolateMode::Nearest => InterpolateKind::Nearest,
        InterpolateMode::Bilinear => InterpolateKind::Bilinear,
        InterpolateMode::Bicubic => InterpolateKind::Bicubic,
        InterpolateMode::Lanczos3 => InterpolateKind::Lanczos3,
    }
}

fn check<R: Runtime>(op: &str, x: &CubeTensor<R>, output_size: [usize; 2]) {
    check_rank(op, "x", x, 4);
    check_float(op, &[("x", x)]);
    let d = x.dims();
    let has_work = d[0] * d[1] * output_size[0] * output_size[1] > 0;
    if has_work && (d[2] == 0 || d[3] == 0) {
        panic!("ex_cubecl: {op}: cannot resample x {d:?} (no pixels) to {output_size:?}");
    }
}

/// Resamples `x` `[b, c, h, w]` to `[b, c, output_size..]`.
pub fn interpolate<R: Runtime>(x: CubeTensor<R>, output_size: [usize; 2], options: &InterpolateOptions) -> CubeTensor<R> {
    let op = "interpolate";
    check(op, &x, output_size);
    if x.bf16_bits() {
        return super::bf16::map(x, |x| interpolate(x, output_size, options));
    }
    let d = x.dims();
    let out = CubeTensor::empty(&x.client, &x.device, Shape::new([d[0], d[1], output_size[0], output_size[1]]), x.dtype);
    let (o, mode, align) = (out.clone(), kind(&options.mode), options.align_corners);
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; taps are clamped into x.
        unsafe {
            forward_kernel::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), o.as_arg(), x.layout.offset, mode,
                align, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

/// Gradient of [`interpolate`] with respect to `x`.
pub fn interpolate_backward<R: Runtime>(
    x: CubeTensor<R>,
    grad: CubeTensor<R>,
    output_size: [usize; 2],
    options: &InterpolateOptions,
) -> CubeTensor<R> {
    let op = "interpolate_backward";
    check(op, &x, output_size);
    check_float(op, &[("x", &x), ("grad", &grad)]);
    if x.bf16_bits() {
        return super::bf16::map2(op, x, grad, |x, grad| interpolate_backward(x, grad, output_size, options));
    }
    let d = x.dims();
    if grad.dims() != [d[0], d[1], output_size[0], output_size[1]] {
        panic!("ex_cubecl: {op}: grad {:?} must be x {d:?} resampled to {output_size:?}", grad.dims());
    }
    let out = CubeTensor::empty(&x.client, &x.device, x.layout.shape.clone(), x.dtype);
    let (o, mode, align) = (out.clone(), kind(&options.mode), options.align_corners);
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; visited outputs are clipped
        // to the gradient's extent.
        unsafe {
            backward_kernel::launch_unchecked::<R>(
                client, count, dim, grad.as_arg(), o.as_arg(), grad.layout.offset, mode,
                align, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}
