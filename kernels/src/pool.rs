//! 2-D pooling over `[batch, channels, h, w]`: average, max (with the flat index `h·W + w` of
//! each maximum) and adaptive average, with their backward passes.
//!
//! Inputs are strided views with an element offset; outputs are contiguous. Backward passes
//! are gathers: one unit per input element sums the gradients of the windows that cover it, so
//! they need no atomics and are deterministic (max pooling's first element of each plane,
//! which windows with no maximum also point at, is a per-plane cube reduction).
use cubecl::prelude::*;

use crate::reduce::{Acc, ReduceOp, cube_merge};
use crate::strided::{offset4, umax, umin};

/// Window geometry of a pooling (per axis: kernel, stride, padding, dilation).
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct PoolParams {
    pub kernel_h: usize,
    pub kernel_w: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    pub dil_h: usize,
    pub dil_w: usize,
}

/// Coordinates of an element of a contiguous `[b, c, h, w]` tensor (`bc = b·C + c`).
#[derive(CubeType, Clone, Copy)]
pub struct Pixel {
    pub bc: usize,
    pub b: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
}

#[cube]
fn pixel<T: CubePrimitive>(t: &Tensor<T>, pos: usize) -> Pixel {
    let w = pos % t.shape(3);
    let h = (pos / t.shape(3)) % t.shape(2);
    let bc = pos / (t.shape(3) * t.shape(2));
    Pixel { bc, b: bc / t.shape(1), c: bc % t.shape(1), h, w }
}


/// Number of window positions that count towards the average of window `(oh, ow)`: those
/// inside the padded input (`count_include_pad`) or inside the input itself.
#[cube]
// cubecl declares a runtime variable at its first `let mut`; every branch assigns it.
#[allow(unused_assignments)]
fn avg_count(oh: usize, ow: usize, in_h: usize, in_w: usize, p: PoolParams, #[comptime] include_pad: bool) -> usize {
    let h0 = oh * p.stride_h;
    let w0 = ow * p.stride_w;
    let mut rows = 0;
    let mut cols = 0;
    if include_pad {
        let padded_h = in_h + 2 * p.pad_h;
        let padded_w = in_w + 2 * p.pad_w;
        rows = select(h0 < padded_h, umin(h0 + p.kernel_h, padded_h) - h0, 0);
        cols = select(w0 < padded_w, umin(w0 + p.kernel_w, padded_w) - w0, 0);
    } else {
        let h_lo = umax(h0, p.pad_h);
        let h_hi = umin(h0 + p.kernel_h, in_h + p.pad_h);
        let w_lo = umax(w0, p.pad_w);
        let w_hi = umin(w0 + p.kernel_w, in_w + p.pad_w);
        rows = select(h_hi > h_lo, h_hi - h_lo, 0);
        cols = select(w_hi > w_lo, w_hi - w_lo, 0);
    }
    rows * cols
}

/// Average pooling (no dilation), one unit per output element.
#[cube(launch_unchecked)]
pub fn avg_pool2d<T: Float, A: Float>(
    x: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    p: PoolParams,
    #[comptime] include_pad: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let o = pixel::<T>(output, ABSOLUTE_POS);
    let (in_h, in_w) = (x.shape(2), x.shape(3));
    let mut sum = A::new(0.0);
    for kh in 0..p.kernel_h {
        let ih = o.h * p.stride_h + kh;
        for kw in 0..p.kernel_w {
            let iw = o.w * p.stride_w + kw;
            if ih >= p.pad_h && ih - p.pad_h < in_h && iw >= p.pad_w && iw - p.pad_w < in_w {
                sum += A::cast_from(x[x_offset + offset4::<T>(x, o.b, o.c, ih - p.pad_h, iw - p.pad_w)]);
            }
        }
    }
    let count = avg_count(o.h, o.w, in_h, in_w, p, include_pad);
    output[ABSOLUTE_POS] = T::cast_from(sum / A::cast_from(count));
}

/// Gradient of [`avg_pool2d`](fn@avg_pool2d): `output` is the input gradient `[b, c, in_h, in_w]`.
#[cube(launch_unchecked)]
pub fn avg_pool2d_backward<T: Float, A: Float>(
    grad: &Tensor<T>,
    output: &mut Tensor<T>,
    grad_offset: usize,
    p: PoolParams,
    #[comptime] include_pad: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let i = pixel::<T>(output, ABSOLUTE_POS);
    let (in_h, in_w) = (output.shape(2), output.shape(3));
    let (out_h, out_w) = (grad.shape(2), grad.shape(3));
    // Windows `o` with `o·s <= i + pad < o·s + k`.
    let hp = i.h + p.pad_h;
    let wp = i.w + p.pad_w;
    let oh_lo = select(hp + 1 > p.kernel_h, (hp + 1 - p.kernel_h).div_ceil(p.stride_h), 0);
    let oh_hi = umin(hp / p.stride_h + 1, out_h);
    let ow_lo = select(wp + 1 > p.kernel_w, (wp + 1 - p.kernel_w).div_ceil(p.stride_w), 0);
    let ow_hi = umin(wp / p.stride_w + 1, out_w);
    let mut sum = A::new(0.0);
    for oh in oh_lo..oh_hi {
        for ow in ow_lo..ow_hi {
            let count = avg_count(oh, ow, in_h, in_w, p, include_pad);
            let g = A::cast_from(grad[grad_offset + offset4::<T>(grad, i.b, i.c, oh, ow)]);
            sum += g / A::cast_from(count);
        }
    }
    output[ABSOLUTE_POS] = T::cast_from(sum);
}

/// Max pooling with dilation, one unit per output element; the window's size is comptime
/// (`kernel_h` × `kernel_w`, unrolled up to 64 positions; `p.kernel_*` are not read) and its
/// rows are checked against the input once each. Padding never wins; ties keep the first position;
/// NaN never wins; a window with nothing above `neg_inf` gives `neg_inf` and index 0. With
/// `with_indices`, `indices` gets the flat position `h·W + w` of each maximum.
#[cube(launch_unchecked)]
pub fn max_pool2d<T: Float, I: Int>(
    x: &Tensor<T>,
    output: &mut Tensor<T>,
    indices: &mut Tensor<I>,
    x_offset: usize,
    neg_inf: InputScalar,
    p: PoolParams,
    #[comptime] kernel_h: usize,
    #[comptime] kernel_w: usize,
    #[comptime] with_indices: bool,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let o = pixel::<T>(output, ABSOLUTE_POS);
    let (in_h, in_w) = (x.shape(2), x.shape(3));
    let plane = x_offset + o.b * x.stride(0) + o.c * x.stride(1);
    // The window's first row and column in padded coordinates.
    let h0 = o.h * p.stride_h;
    let w0 = o.w * p.stride_w;
    let mut best = neg_inf.get::<T>();
    let mut index = 0;
    let unroll = comptime!(kernel_h * kernel_w <= 64);
    #[unroll(unroll)]
    for kh in 0..kernel_h {
        let ih = h0 + kh * p.dil_h;
        let row_inside = ih >= p.pad_h && ih - p.pad_h < in_h;
        // Wraps where the row is outside, and is then never used.
        let row = ih - p.pad_h;
        #[unroll(unroll)]
        for kw in 0..kernel_w {
            let iw = w0 + kw * p.dil_w;
            if row_inside && iw >= p.pad_w && iw - p.pad_w < in_w {
                let col = iw - p.pad_w;
                let v = x[plane + row * x.stride(2) + col * x.stride(3)];
                if v > best {
                    best = v;
                    index = row * in_w + col;
                }
            }
        }
    }
    output[ABSOLUTE_POS] = best;
    if with_indices {
        indices[ABSOLUTE_POS] = I::cast_from(index);
    }
}

/// Gradient of [`max_pool2d`](fn@max_pool2d) at every input element but each plane's first
/// (`h = w = 0`): the sum of the gradients of the windows that cover it and whose recorded
/// index is this element. The first element is [`max_pool2d_backward_first`]'s: a window with
/// no maximum records index 0 whether or not it covers that element.
#[cube(launch_unchecked)]
pub fn max_pool2d_backward<T: Float, I: Int, A: Float>(
    grad: &Tensor<T>,
    indices: &Tensor<I>,
    output: &mut Tensor<T>,
    grad_offset: usize,
    indices_offset: usize,
    p: PoolParams,
    #[define(T, I, A)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let i = pixel::<T>(output, ABSOLUTE_POS);
    let in_w = output.shape(3);
    let me = i.h * in_w + i.w;
    if me == 0 {
        terminate!();
    }
    let (out_h, out_w) = (grad.shape(2), grad.shape(3));
    let hp = i.h + p.pad_h;
    let wp = i.w + p.pad_w;
    let mut sum = A::new(0.0);
    for kh in 0..p.kernel_h {
        let reach_h = kh * p.dil_h;
        let nh = select(hp >= reach_h, hp - reach_h, 0);
        let oh = nh / p.stride_h;
        if hp >= reach_h && nh % p.stride_h == 0 && oh < out_h {
            for kw in 0..p.kernel_w {
                let reach_w = kw * p.dil_w;
                let nw = select(wp >= reach_w, wp - reach_w, 0);
                let ow = nw / p.stride_w;
                if wp >= reach_w && nw % p.stride_w == 0 && ow < out_w {
                    let idx = indices[indices_offset + offset4::<I>(indices, i.b, i.c, oh, ow)];
                    if usize::cast_from(idx) == me {
                        sum += A::cast_from(grad[grad_offset + offset4::<T>(grad, i.b, i.c, oh, ow)]);
                    }
                }
            }
        }
    }
    output[ABSOLUTE_POS] = T::cast_from(sum);
}

/// Gradient of [`max_pool2d`](fn@max_pool2d) at each plane's first element (`h = w = 0`), the
/// one [`max_pool2d_backward`] leaves: one cube per `(b, c)` plane (`CUBE_POS`), whose
/// `cube_size` units stride over every window of the plane and sum the gradients of those
/// whose recorded index is 0 (the windows that cover the element and chose it, and the windows
/// with no maximum, wherever they lie), then merge through a shared-memory tree.
#[cube(launch_unchecked)]
pub fn max_pool2d_backward_first<T: Float, I: Int, A: Float>(
    grad: &Tensor<T>,
    indices: &Tensor<I>,
    output: &mut Tensor<T>,
    grad_offset: usize,
    indices_offset: usize,
    #[comptime] cube_size: usize,
    #[define(T, I, A)] _dtypes: [StorageType; 3],
) {
    let plane = CUBE_POS;
    // Uniform per cube: a cube past the last plane leaves as a whole, before any barrier.
    if plane >= output.shape(0) * output.shape(1) {
        terminate!();
    }
    let (b, c) = (plane / output.shape(1), plane % output.shape(1));
    let out_w = grad.shape(3);
    let windows = grad.shape(2) * out_w;
    let mut sum = A::new(0.0);
    let mut k = UNIT_POS as usize;
    while k < windows {
        let (oh, ow) = (k / out_w, k % out_w);
        let idx = indices[indices_offset + offset4::<I>(indices, b, c, oh, ow)];
        if usize::cast_from(idx) == 0 {
            sum += A::cast_from(grad[grad_offset + offset4::<T>(grad, b, c, oh, ow)]);
        }
        k += cube_size;
    }
    let total = cube_merge::<A>(Acc::<A> { value: sum, index: 0u32 }, true, comptime!(ReduceOp::Sum), cube_size);
    if UNIT_POS == 0 {
        output[offset4::<T>(output, b, c, 0, 0)] = T::cast_from(total.value);
    }
}

/// First input row of adaptive window `o` of `out` windows over `size` rows.
#[cube]
fn adaptive_start(o: usize, out: usize, size: usize) -> usize {
    (o * size) / out
}

/// One past the last input row of adaptive window `o`.
#[cube]
fn adaptive_end(o: usize, out: usize, size: usize) -> usize {
    ((o + 1) * size).div_ceil(out)
}

/// Adaptive average pooling: window `o` covers rows `[⌊o·I/O⌋, ⌈(o+1)·I/O⌉)`.
#[cube(launch_unchecked)]
pub fn adaptive_avg_pool2d<T: Float, A: Float>(
    x: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let o = pixel::<T>(output, ABSOLUTE_POS);
    let (in_h, in_w) = (x.shape(2), x.shape(3));
    let (out_h, out_w) = (output.shape(2), output.shape(3));
    let h0 = adaptive_start(o.h, out_h, in_h);
    let h1 = adaptive_end(o.h, out_h, in_h);
    let w0 = adaptive_start(o.w, out_w, in_w);
    let w1 = adaptive_end(o.w, out_w, in_w);
    let mut sum = A::new(0.0);
    for ih in h0..h1 {
        for iw in w0..w1 {
            sum += A::cast_from(x[x_offset + offset4::<T>(x, o.b, o.c, ih, iw)]);
        }
    }
    output[ABSOLUTE_POS] = T::cast_from(sum / A::cast_from((h1 - h0) * (w1 - w0)));
}

/// Gradient of [`adaptive_avg_pool2d`](fn@adaptive_avg_pool2d): input row `i` is in windows
/// `[⌊i·O/I⌋, ⌈(i+1)·O/I⌉)`.
#[cube(launch_unchecked)]
pub fn adaptive_avg_pool2d_backward<T: Float, A: Float>(
    grad: &Tensor<T>,
    output: &mut Tensor<T>,
    grad_offset: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let i = pixel::<T>(output, ABSOLUTE_POS);
    let (in_h, in_w) = (output.shape(2), output.shape(3));
    let (out_h, out_w) = (grad.shape(2), grad.shape(3));
    let oh0 = (i.h * out_h) / in_h;
    let oh1 = ((i.h + 1) * out_h).div_ceil(in_h);
    let ow0 = (i.w * out_w) / in_w;
    let ow1 = ((i.w + 1) * out_w).div_ceil(in_w);
    let mut sum = A::new(0.0);
    for oh in oh0..oh1 {
        let rows = adaptive_end(oh, out_h, in_h) - adaptive_start(oh, out_h, in_h);
        for ow in ow0..ow1 {
            let cols = adaptive_end(ow, out_w, in_w) - adaptive_start(ow, out_w, in_w);
            let g = A::cast_from(grad[grad_offset + offset4::<T>(grad, i.b, i.c, oh, ow)]);
            sum += g / A::cast_from(rows * cols);
        }
    }
    output[ABSOLUTE_POS] = T::cast_from(sum);
}
