//! 2-D pooling (average, max with and without indices, adaptive average) and its backward
//! passes. 1-D pooling is 2-D pooling over `[b, c, 1, l]`.
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::pool::{
    PoolParamsLaunch, adaptive_avg_pool2d as adaptive_kernel, adaptive_avg_pool2d_backward as adaptive_backward_kernel,
    avg_pool2d as avg_kernel, avg_pool2d_backward as avg_backward_kernel, max_pool2d as max_kernel,
    max_pool2d_backward as max_backward_kernel, max_pool2d_backward_first as max_backward_first_kernel,
};

use super::bf16;
use super::conv::{check_float, check_rank};
use super::{accumulator, float_arg};
use crate::runtime::{Geometry, launch, storage_type};
use crate::tensor::CubeTensor;

/// A pooling window: kernel, stride, padding and dilation per axis, and the rounding mode.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    /// Kernel size.
    pub kernel: [usize; 2],
    /// Stride.
    pub stride: [usize; 2],
    /// Padding on both sides.
    pub padding: [usize; 2],
    /// Dilation (1 for average pooling).
    pub dilation: [usize; 2],
    /// Round the output size up (the last window may start in the padding's shadow).
    pub ceil_mode: bool,
}

impl Window {
    fn arg<R: Runtime>(&self) -> PoolParamsLaunch<R> {
        PoolParamsLaunch::new(
            self.kernel[0], self.kernel[1], self.stride[0], self.stride[1], self.padding[0], self.padding[1],
            self.dilation[0], self.dilation[1],
        )
    }

    /// The pooled shape of `x`, or a panic naming the op when the window does not fit.
    fn output_shape<R: Runtime>(&self, op: &str, x: &CubeTensor<R>) -> Shape {
        check_rank(op, "x", x, 4);
        check_float(op, &[("x", x)]);
        let d = x.dims();
        if self.kernel.contains(&0) || self.stride.contains(&0) || self.dilation.contains(&0) {
            panic!("ex_cubecl: {op}: kernel {:?}, stride {:?} and dilation {:?} must be non-zero (x {d:?})", self.kernel, self.stride, self.dilation);
        }
        let out = |axis: usize| {
            let span = self.dilation[axis] * (self.kernel[axis] - 1) + 1;
            let padded = d[axis + 2] + 2 * self.padding[axis];
            if span > padded {
                panic!(
                    "ex_cubecl: {op}: window {:?} (dilation {:?}, padding {:?}) is larger than the padded input {d:?}",
                    self.kernel, self.dilation, self.padding
                );
            }
            let steps = padded - span;
            // Burn's rule: with `ceil_mode` a last, partial window is kept.
            if self.ceil_mode { steps.div_ceil(self.stride[axis]) + 1 } else { steps / self.stride[axis] + 1 }
        };
        Shape::new([d[0], d[1], out(0), out(1)])
    }
}

/// Average pooling.
pub fn avg_pool2d<R: Runtime>(x: CubeTensor<R>, window: Window, count_include_pad: bool) -> CubeTensor<R> {
    if x.bf16_bits() {
        return bf16::map(x, |x| avg_pool2d(x, window, count_include_pad));
    }
    let op = "avg_pool2d";
    let out = CubeTensor::empty(&x.client, &x.device, window.output_shape(op, &x), x.dtype);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()` and reads only inside x.
        unsafe {
            avg_kernel::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), o.as_arg(), x.layout.offset, window.arg(), count_include_pad,
                [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

/// Gradient of [`avg_pool2d`] with respect to `x`.
pub fn avg_pool2d_backward<R: Runtime>(x: CubeTensor<R>, grad: CubeTensor<R>, window: Window, count_include_pad: bool) -> CubeTensor<R> {
    let op = "avg_pool2d_backward";
    if bf16::any(&[&x, &grad]) {
        return bf16::map2(op, x, grad, |x, grad| avg_pool2d_backward(x, grad, window, count_include_pad));
    }
    check_grad(op, &x, &grad, window);
    let out = CubeTensor::empty(&x.client, &x.device, x.layout.shape.clone(), x.dtype);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; window ranges are clipped to
        // the gradient's extent.
        unsafe {
            avg_backward_kernel::launch_unchecked::<R>(
                client, count, dim, grad.as_arg(), o.as_arg(), grad.layout.offset, window.arg(), count_include_pad,
                [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

/// Max pooling; with `index_dtype`, also the flat index `h·W + w` of every maximum.
pub fn max_pool2d<R: Runtime>(x: CubeTensor<R>, window: Window, index_dtype: Option<DType>) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    if x.bf16_bits() {
        let (values, indices) = max_pool2d(bf16::widen(x), window, index_dtype);
        return (bf16::narrow(values, DType::BF16), indices);
    }
    let op = if index_dtype.is_some() { "max_pool2d_with_indices" } else { "max_pool2d" };
    let shape = window.output_shape(op, &x);
    let out = CubeTensor::empty(&x.client, &x.device, shape.clone(), x.dtype);
    let indices = index_dtype.map(|dtype| CubeTensor::empty(&x.client, &x.device, shape, dtype));
    let index_storage = storage_type(index_dtype.unwrap_or(DType::I32));
    let neg_inf = float_arg(f64::NEG_INFINITY, x.dtype);
    let (o, written) = (out.clone(), indices.clone());
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        let idx = written.as_ref().unwrap_or(&o);
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()` and reads only inside x;
        // `indices` is written only when it exists.
        unsafe {
            max_kernel::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), o.as_arg(), idx.as_arg(), x.layout.offset, neg_inf, window.arg(),
                window.kernel[0], window.kernel[1], written.is_some(), [x.storage(), index_storage],
            )
        }
    });
    (out, indices)
}

/// Gradient of [`max_pool2d`] with respect to `x`, routed through the recorded indices.
pub fn max_pool2d_backward<R: Runtime>(x: CubeTensor<R>, grad: CubeTensor<R>, indices: CubeTensor<R>, window: Window) -> CubeTensor<R> {
    let op = "max_pool2d_with_indices_backward";
    if bf16::any(&[&x, &grad]) {
        return bf16::map2(op, x, grad, |x, grad| max_pool2d_backward(x, grad, indices, window));
    }
    check_grad(op, &x, &grad, window);
    if indices.dims() != grad.dims() || !indices.dtype.is_int() {
        panic!("ex_cubecl: {op}: indices {:?} ({:?}) must be ints shaped like the gradient {:?}", indices.dims(), indices.dtype, grad.dims());
    }
    let out = CubeTensor::empty(&x.client, &x.device, x.layout.shape.clone(), x.dtype);
    let dtypes = [x.storage(), indices.storage(), accumulator(x.dtype)];
    let (o, g, idx) = (out.clone(), grad.clone(), indices.clone());
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; window positions are
        // checked against the gradient's extent before reading it or the indices.
        unsafe {
            max_backward_kernel::launch_unchecked::<R>(
                client, count, dim, g.as_arg(), idx.as_arg(), o.as_arg(), g.layout.offset, idx.layout.offset,
                window.arg(), dtypes,
            )
        }
    });
    // Each plane's first element, which also gets the windows that found no maximum.
    let planes = x.dims()[0] * x.dims()[1];
    let geometry = Geometry::Cubes { count: planes, dim: CubeDim::new_1d(FIRST_CUBE as u32) };
    let o = out.clone();
    launch(&out.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past the last plane leave before any access; every window read is
        // inside the gradient and the indices, and the one write is the plane's first element.
        unsafe {
            max_backward_first_kernel::launch_unchecked::<R>(
                client, count, dim, grad.as_arg(), indices.as_arg(), o.as_arg(), grad.layout.offset,
                indices.layout.offset, FIRST_CUBE, dtypes,
            )
        }
    });
    out
}

/// Units per cube of the max-pooling gradient's per-plane reduction (a power of two).
const FIRST_CUBE: usize = 256;

/// Adaptive average pooling to `output_size`.
pub fn adaptive_avg_pool2d<R: Runtime>(x: CubeTensor<R>, output_size: [usize; 2]) -> CubeTensor<R> {
    if x.bf16_bits() {
        return bf16::map(x, |x| adaptive_avg_pool2d(x, output_size));
    }
    let op = "adaptive_avg_pool2d";
    check_rank(op, "x", &x, 4);
    check_float(op, &[("x", &x)]);
    let d = x.dims();
    let empty_window = (d[2] == 0 && output_size[0] > 0) || (d[3] == 0 && output_size[1] > 0);
    if empty_window && d[0] * d[1] > 0 {
        panic!("ex_cubecl: {op}: cannot pool x {d:?} to {output_size:?}: the input has no positions");
    }
    let out = CubeTensor::empty(&x.client, &x.device, Shape::new([d[0], d[1], output_size[0], output_size[1]]), x.dtype);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; windows lie inside x.
        unsafe {
            adaptive_kernel::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), o.as_arg(), x.layout.offset, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

/// Gradient of [`adaptive_avg_pool2d`] with respect to `x`.
pub fn adaptive_avg_pool2d_backward<R: Runtime>(x: CubeTensor<R>, grad: CubeTensor<R>) -> CubeTensor<R> {
    let op = "adaptive_avg_pool2d_backward";
    if bf16::any(&[&x, &grad]) {
        return bf16::map2(op, x, grad, adaptive_avg_pool2d_backward);
    }
    check_rank(op, "x", &x, 4);
    check_rank(op, "grad", &grad, 4);
    check_float(op, &[("x", &x), ("grad", &grad)]);
    if x.dims()[..2] != grad.dims()[..2] {
        panic!("ex_cubecl: {op}: grad {:?} does not match x {:?}", grad.dims(), x.dims());
    }
    let out = CubeTensor::empty(&x.client, &x.device, x.layout.shape.clone(), x.dtype);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; window ranges are clipped
        // to the gradient's extent.
        unsafe {
            adaptive_backward_kernel::launch_unchecked::<R>(
                client, count, dim, grad.as_arg(), o.as_arg(), grad.layout.offset, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

fn check_grad<R: Runtime>(op: &str, x: &CubeTensor<R>, grad: &CubeTensor<R>, window: Window) {
    check_rank(op, "grad", grad, 4);
    check_float(op, &[("x", x), ("grad", grad)]);
    let expected = window.output_shape(op, x);
    if grad.layout.shape != expected {
        panic!("ex_cubecl: {op}: grad {:?} does not match the pooled shape {:?} of x {:?}", grad.dims(), expected.as_slice(), x.dims());
    }
}

