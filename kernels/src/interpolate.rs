//! 2-D resampling of `[batch, channels, h, w]`: nearest, bilinear, bicubic (a = -0.75) and
//! Lanczos3, with or without aligned corners, and the backward pass of each.
//!
//! Every mode is separable: an output row reads a few input rows ("taps") with weights, and
//! the same for columns. The forward pass sums taps; the backward pass is a gather: each input
//! element visits the output rows and columns whose taps can reach it and recomputes the
//! forward weights, so it needs no atomics and matches the forward pass exactly.
use cubecl::prelude::*;

use crate::strided::{clamp_index, offset4, umax, umin};

/// A resampling mode.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum InterpolateKind {
    Nearest,
    Bilinear,
    Bicubic,
    Lanczos3,
}

fn taps(kind: InterpolateKind) -> usize {
    match kind {
        InterpolateKind::Nearest => 1,
        InterpolateKind::Bilinear => 2,
        InterpolateKind::Bicubic => 4,
        InterpolateKind::Lanczos3 => 6,
    }
}

/// The source coordinate of output coordinate `o` (of `out`) over `size` input positions.
#[cube]
fn source_coord<A: Float>(o: usize, out: usize, size: usize, #[comptime] align_corners: bool) -> A {
    if align_corners {
        let span = umax(out, 2) - 1;
        A::cast_from(o) * (A::cast_from(size - 1) / A::cast_from(span))
    } else {
        (A::cast_from(o) + A::new(0.5)) * (A::cast_from(size) / A::cast_from(out)) - A::new(0.5)
    }
}

/// One tap of output coordinate `o`: an input position and its weight (before
/// normalisation). `valid` is false for Lanczos taps outside the input.
#[derive(CubeType, Clone, Copy)]
pub struct Weighted<A: Float> {
    pub pos: usize,
    pub weight: A,
    pub valid: bool,
}

#[cube]
fn cubic_near<A: Float>(x: A) -> A {
    // ((a + 2)x - (a + 3))x² + 1 with a = -0.75
    (A::new(1.25) * x - A::new(2.25)) * x * x + A::new(1.0)
}

#[cube]
fn cubic_far<A: Float>(x: A) -> A {
    // ((a x - 5a)x + 8a)x - 4a with a = -0.75
    ((A::new(-0.75) * x + A::new(3.75)) * x - A::new(6.0)) * x + A::new(3.0)
}

#[cube]
fn lanczos3<A: Float>(x: A) -> A {
    let pi = A::cast_from(core::f64::consts::PI);
    let px = pi * x;
    let px3 = px / A::new(3.0);
    let safe = select(x == A::new(0.0), A::new(1.0), px * px3);
    let w = crate::math::sin_bounded::<A>(px) * crate::math::sin_bounded::<A>(px3) / safe;
    select(x == A::new(0.0), A::new(1.0), select(A::abs(x) >= A::new(3.0), A::new(0.0), w))
}

/// Tap `t` of output coordinate `o`.
#[cube]
// cubecl declares a runtime variable at its first `let mut`; every branch assigns it.
#[allow(unused_assignments)]
fn tap<A: Float>(
    o: usize,
    out: usize,
    size: usize,
    t: usize,
    #[comptime] kind: InterpolateKind,
    #[comptime] align_corners: bool,
) -> Weighted<A> {
    let mut pos = 0;
    let mut weight = A::new(1.0);
    let mut valid = true;
    match kind {
        InterpolateKind::Nearest => {
            pos = (o * size) / out;
        }
        InterpolateKind::Bilinear => {
            let mut y = source_coord::<A>(o, out, size, align_corners);
            if !align_corners {
                let top = A::cast_from(size - 1);
                y = select(y < A::new(0.0), A::new(0.0), select(y > top, top, y));
            }
            let y0 = A::floor(y);
            let frac = y - y0;
            let i0 = usize::cast_from(y0);
            if t == 0 {
                pos = i0;
                weight = A::new(1.0) - frac;
            } else {
                pos = umin(usize::cast_from(A::ceil(y)), size - 1);
                weight = frac;
            }
        }
        InterpolateKind::Bicubic => {
            let y = source_coord::<A>(o, out, size, align_corners);
            let y0 = A::floor(y);
            let frac = y - y0;
            pos = clamp_index(i32::cast_from(y0) - 1 + i32::cast_from(t), size);
            if t == 0 {
                weight = cubic_far::<A>(frac + A::new(1.0));
            } else if t == 1 {
                weight = cubic_near::<A>(frac);
            } else if t == 2 {
                weight = cubic_near::<A>(A::new(1.0) - frac);
            } else {
                weight = cubic_far::<A>(A::new(2.0) - frac);
            }
        }
        InterpolateKind::Lanczos3 => {
            let y = source_coord::<A>(o, out, size, align_corners);
            let y0 = A::floor(y);
            let i = i32::cast_from(y0) - 2 + i32::cast_from(t);
            valid = i >= 0 && i < i32::cast_from(size);
            pos = clamp_index(i, size);
            weight = select(valid, lanczos3::<A>(y - (y0 + A::cast_from(t) - A::new(2.0))), A::new(0.0));
        }
    }
    Weighted::<A> { pos, weight, valid }
}

/// Sum of the tap weights of output coordinate `o` (Lanczos normalises by it; 1 otherwise).
#[cube]
fn tap_norm<A: Float>(
    o: usize,
    out: usize,
    size: usize,
    #[comptime] kind: InterpolateKind,
    #[comptime] align_corners: bool,
) -> A {
    let mut norm = A::new(1.0);
    if kind == InterpolateKind::Lanczos3 {
        let mut sum = A::new(0.0);
        #[unroll]
        for t in 0..comptime!(taps(kind)) {
            sum += tap::<A>(o, out, size, t, kind, align_corners).weight;
        }
        norm = select(sum == A::new(0.0), A::new(1.0), sum);
    }
    norm
}

/// The total weight of input position `i` in output coordinate `o`.
#[cube]
fn weight_of<A: Float>(
    o: usize,
    i: usize,
    out: usize,
    size: usize,
    #[comptime] kind: InterpolateKind,
    #[comptime] align_corners: bool,
) -> A {
    let mut w = A::new(0.0);
    #[unroll]
    for t in 0..comptime!(taps(kind)) {
        let tp = tap::<A>(o, out, size, t, kind, align_corners);
        if tp.valid && tp.pos == i {
            w += tp.weight;
        }
    }
    w / tap_norm::<A>(o, out, size, kind, align_corners)
}

/// The output coordinates whose taps may reach input position `i`: `[lo, hi)`.
#[derive(CubeType, Clone, Copy)]
pub struct Reach {
    pub lo: usize,
    pub hi: usize,
}

#[cube]
// cubecl declares a runtime variable at its first `let mut`; every branch assigns it.
#[allow(unused_assignments)]
fn reach<A: Float>(i: usize, out: usize, size: usize, #[comptime] kind: InterpolateKind, #[comptime] align_corners: bool) -> Reach {
    let mut lo = 0;
    let mut hi = out;
    if kind == InterpolateKind::Nearest {
        // ⌊o·size/out⌋ == i  ⟺  o ∈ [⌈i·out/size⌉, ⌈(i+1)·out/size⌉)
        lo = (i * out).div_ceil(size);
        hi = umin(((i + 1) * out).div_ceil(size), out);
    } else {
        // Every tap lies within 3 positions of the source coordinate (edge clamping included:
        // source coordinates never leave [-0.5, size - 0.5]); one more output on each side.
        let lo_src = A::cast_from(i) - A::new(3.0);
        let hi_src = A::cast_from(i) + A::new(3.0);
        let mut lo_f = A::new(0.0);
        let mut hi_f = A::cast_from(out);
        if align_corners {
            let span = umax(out, 2) - 1;
            let ratio = A::cast_from(size - 1) / A::cast_from(span);
            if ratio > A::new(0.0) {
                lo_f = lo_src / ratio;
                hi_f = hi_src / ratio;
            }
        } else {
            let scale = A::cast_from(out) / A::cast_from(size);
            lo_f = (lo_src + A::new(0.5)) * scale - A::new(0.5);
            hi_f = (hi_src + A::new(0.5)) * scale - A::new(0.5);
        }
        let lo_i = i32::cast_from(A::floor(lo_f)) - 1;
        let hi_i = i32::cast_from(A::ceil(hi_f)) + 2;
        lo = usize::cast_from(select(lo_i < 0, 0, lo_i));
        hi = umin(usize::cast_from(select(hi_i < 0, 0, hi_i)), out);
    }
    Reach { lo, hi }
}


/// Resamples `x` to the output's spatial size, one unit per output element.
#[cube(launch_unchecked)]
pub fn interpolate<T: Float, A: Float>(
    x: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    #[comptime] kind: InterpolateKind,
    #[comptime] align_corners: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let (out_h, out_w) = (output.shape(2), output.shape(3));
    let (in_h, in_w) = (x.shape(2), x.shape(3));
    let ow = ABSOLUTE_POS % out_w;
    let oh = (ABSOLUTE_POS / out_w) % out_h;
    let bc = ABSOLUTE_POS / (out_w * out_h);
    let b = bc / output.shape(1);
    let c = bc % output.shape(1);
    let mut sum = A::new(0.0);
    #[unroll]
    for ty in 0..comptime!(taps(kind)) {
        let ry = tap::<A>(oh, out_h, in_h, ty, kind, align_corners);
        let mut row = A::new(0.0);
        #[unroll]
        for tx in 0..comptime!(taps(kind)) {
            let rx = tap::<A>(ow, out_w, in_w, tx, kind, align_corners);
            if rx.valid && ry.valid {
                row += rx.weight * A::cast_from(x[x_offset + offset4::<T>(x, b, c, ry.pos, rx.pos)]);
            }
        }
        sum += ry.weight * row;
    }
    let norm = tap_norm::<A>(oh, out_h, in_h, kind, align_corners) * tap_norm::<A>(ow, out_w, in_w, kind, align_corners);
    output[ABSOLUTE_POS] = T::cast_from(sum / norm);
}

/// Gradient of [`interpolate`](fn@interpolate): `output` is the input gradient.
#[cube(launch_unchecked)]
pub fn interpolate_backward<T: Float, A: Float>(
    grad: &Tensor<T>,
    output: &mut Tensor<T>,
    grad_offset: usize,
    #[comptime] kind: InterpolateKind,
    #[comptime] align_corners: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let (in_h, in_w) = (output.shape(2), output.shape(3));
    let (out_h, out_w) = (grad.shape(2), grad.shape(3));
    let iw = ABSOLUTE_POS % in_w;
    let ih = (ABSOLUTE_POS / in_w) % in_h;
    let bc = ABSOLUTE_POS / (in_w * in_h);
    let b = bc / output.shape(1);
    let c = bc % output.shape(1);
    let rows = reach::<A>(ih, out_h, in_h, kind, align_corners);
    let cols = reach::<A>(iw, out_w, in_w, kind, align_corners);
    let mut sum = A::new(0.0);
    for oh in rows.lo..rows.hi {
        let wy = weight_of::<A>(oh, ih, out_h, in_h, kind, align_corners);
        if !(wy == A::new(0.0)) {
            let mut row = A::new(0.0);
            for ow in cols.lo..cols.hi {
                let wx = weight_of::<A>(ow, iw, out_w, in_w, kind, align_corners);
                row += wx * A::cast_from(grad[grad_offset + offset4::<T>(grad, b, c, oh, ow)]);
            }
            sum += wy * row;
        }
    }
    output[ABSOLUTE_POS] = T::cast_from(sum);
}
