//! Convolutions without shared memory or barriers, for devices that run cubes on CPU cores
//! (Mesa's lavapipe), where a barrier suspends and resumes every group of units and the
//! shared-memory GEMMs (`conv_gemm`, `conv_weight_gemm`) cost more in barriers than in
//! arithmetic. Each unit computes a small block of outputs in registers and reads its inputs
//! straight from memory (the CPU's caches do what shared memory does on a GPU); kernel taps
//! are walked as nested loops and channels innermost, so the only divisions are per tap and
//! pixel, not per product.
use cubecl::prelude::*;

use crate::conv::{ConvParams, axis_base, axis_tap};
use crate::strided::{offset5, umin};

/// The convolution (or transposed convolution, `transposed`) as in `conv_gemm`: `x`
/// `[b, c_in, d, h, w]`, `weight` `[c_out, c_in / groups, kd, kh, kw]` (for a transposed
/// convolution, the convolution weight it acts as), strided with offsets; `output` contiguous.
/// Unit `ABSOLUTE_POS` computes `unit_n` channels × `unit_m` consecutive pixels (of the
/// flattened batch and spatial positions); units run over `(group, channel block, pixel
/// block)`, pixel blocks fastest.
#[cube(launch_unchecked)]
pub fn conv_direct<T: Float, A: Float>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    weight_offset: usize,
    bias_offset: usize,
    params: ConvParams,
    num_units: usize,
    #[comptime] has_bias: bool,
    #[comptime] transposed: bool,
    #[comptime] unit_n: usize,
    #[comptime] unit_m: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_units {
        terminate!();
    }
    let (od, oh, ow) = (output.shape(2), output.shape(3), output.shape(4));
    let spatial = od * oh * ow;
    let pixels = output.shape(0) * spatial;
    let c_out = output.shape(1);
    let cout_g = c_out / params.groups;
    let cin_g = weight.shape(1);
    let blocks_m = pixels.div_ceil(unit_m);
    let blocks_n = cout_g.div_ceil(unit_n);
    let m0 = (ABSOLUTE_POS % blocks_m) * unit_m;
    let n0 = ((ABSOLUTE_POS / blocks_m) % blocks_n) * unit_n;
    let group = ABSOLUTE_POS / (blocks_m * blocks_n);
    let co_base = group * cout_g;

    // Per pixel: where its batch entry's group starts in x, and its axis bases.
    let mut x_at = Array::<usize>::new(unit_m);
    let mut base_d = Array::<usize>::new(unit_m);
    let mut base_h = Array::<usize>::new(unit_m);
    let mut base_w = Array::<usize>::new(unit_m);
    let mut valid = Array::<bool>::new(unit_m);
    #[unroll]
    for j in 0..unit_m {
        let m = m0 + j;
        let s = m % spatial;
        valid[j] = m < pixels;
        x_at[j] = x_offset + (m / spatial) * x.stride(0) + group * cin_g * x.stride(1);
        base_d[j] = axis_base(s / (oh * ow), params.stride_d, params.pad_d, transposed);
        base_h[j] = axis_base((s / ow) % oh, params.stride_h, params.pad_h, transposed);
        base_w[j] = axis_base(s % ow, params.stride_w, params.pad_w, transposed);
    }
    let mut acc = Array::<A>::new(unit_n * unit_m);
    #[unroll]
    for i in 0..unit_n * unit_m {
        acc[i] = A::new(0.0);
    }
    let mut tap_at = Array::<usize>::new(unit_m);
    let mut inside = Array::<bool>::new(unit_m);
    let mut w = Array::<A>::new(unit_n);

    for kd in 0..weight.shape(2) {
        for kh in 0..weight.shape(3) {
            for kw in 0..weight.shape(4) {
                #[unroll]
                for j in 0..unit_m {
                    let td = axis_tap(base_d[j], kd, params.stride_d, params.dil_d, params.pad_d, x.shape(2), transposed);
                    let th = axis_tap(base_h[j], kh, params.stride_h, params.dil_h, params.pad_h, x.shape(3), transposed);
                    let tw = axis_tap(base_w[j], kw, params.stride_w, params.dil_w, params.pad_w, x.shape(4), transposed);
                    inside[j] = valid[j] && td.inside && th.inside && tw.inside;
                    tap_at[j] = x_at[j] + td.pos * x.stride(2) + th.pos * x.stride(3) + tw.pos * x.stride(4);
                }
                for ci in 0..cin_g {
                    #[unroll]
                    for i in 0..unit_n {
                        let n = n0 + i;
                        let mut value = A::new(0.0);
                        if n < cout_g {
                            value = A::cast_from(weight[weight_offset + offset5::<T>(weight, co_base + n, ci, kd, kh, kw)]);
                        }
                        w[i] = value;
                    }
                    #[unroll]
                    for j in 0..unit_m {
                        let mut value = A::new(0.0);
                        if inside[j] {
                            value = A::cast_from(x[tap_at[j] + ci * x.stride(1)]);
                        }
                        #[unroll]
                        for i in 0..unit_n {
                            acc[i * unit_m + j] += w[i] * value;
                        }
                    }
                }
            }
        }
    }

    #[unroll]
    for i in 0..unit_n {
        let n = n0 + i;
        if n < cout_g {
            let co = co_base + n;
            let mut shift = A::new(0.0);
            if has_bias {
                shift = A::cast_from(bias[bias_offset + co * bias.stride(0)]);
            }
            #[unroll]
            for j in 0..unit_m {
                let m = m0 + j;
                if m < pixels {
                    output[((m / spatial) * c_out + co) * spatial + m % spatial] = T::cast_from(acc[i * unit_m + j] + shift);
                }
            }
        }
    }
}

/// The weight gradient as in `conv_weight_gemm` (same `outer`, `inner` and `partial` rows),
/// with the reduction split by batch entries: unit `ABSOLUTE_POS` sums `unit_r` outer
/// channels × `unit_c` consecutive weight columns over batch entries `split · split_len ..`,
/// walking the outer pixels as nested loops. Units run over `(split, group, row block,
/// column block)`, column blocks fastest.
#[cube(launch_unchecked)]
pub fn conv_weight_direct<T: Float, A: Float, O: Float>(
    outer: &Tensor<T>,
    inner: &Tensor<T>,
    partial: &mut Tensor<O>,
    outer_offset: usize,
    inner_offset: usize,
    params: ConvParams,
    kd: usize,
    kh: usize,
    kw: usize,
    split_len: usize,
    num_units: usize,
    #[comptime] unit_r: usize,
    #[comptime] unit_c: usize,
    #[define(T, A, O)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= num_units {
        terminate!();
    }
    let outer_c = outer.shape(1);
    let outer_g = outer_c / params.groups;
    let inner_g = inner.shape(1) / params.groups;
    let taps = kd * kh * kw;
    let n_cols = inner_g * taps;
    let blocks_c = n_cols.div_ceil(unit_c);
    let blocks_r = outer_g.div_ceil(unit_r);
    let c0 = (ABSOLUTE_POS % blocks_c) * unit_c;
    let r0 = ((ABSOLUTE_POS / blocks_c) % blocks_r) * unit_r;
    let group = (ABSOLUTE_POS / (blocks_c * blocks_r)) % params.groups;
    let split = ABSOLUTE_POS / (blocks_c * blocks_r * params.groups);
    let outer_r = outer_offset + (group * outer_g + r0) * outer.stride(1);
    let rows = umin(outer_g - r0, unit_r);

    // Per column: its taps along each axis and its inner channel's offset.
    let mut tap_d = Array::<usize>::new(unit_c);
    let mut tap_h = Array::<usize>::new(unit_c);
    let mut tap_w = Array::<usize>::new(unit_c);
    let mut inner_c = Array::<usize>::new(unit_c);
    #[unroll]
    for j in 0..unit_c {
        let col = umin(c0 + j, n_cols - 1);
        let tap = col % taps;
        tap_d[j] = tap / (kh * kw);
        tap_h[j] = (tap / kw) % kh;
        tap_w[j] = tap % kw;
        inner_c[j] = inner_offset + (group * inner_g + col / taps) * inner.stride(1);
    }
    let mut acc = Array::<A>::new(unit_r * unit_c);
    #[unroll]
    for i in 0..unit_r * unit_c {
        acc[i] = A::new(0.0);
    }
    let mut o = Array::<A>::new(unit_r);
    let mut v = Array::<A>::new(unit_c);
    let b_end = umin(outer.shape(0), (split + 1) * split_len);
    for b in split * split_len..b_end {
        for pd in 0..outer.shape(2) {
            for ph in 0..outer.shape(3) {
                for pw in 0..outer.shape(4) {
                    let at = outer_r + b * outer.stride(0) + pd * outer.stride(2) + ph * outer.stride(3) + pw * outer.stride(4);
                    #[unroll]
                    for i in 0..unit_r {
                        o[i] = select(i < rows, A::cast_from(outer[at + select(i < rows, i, 0) * outer.stride(1)]), A::new(0.0));
                    }
                    #[unroll]
                    for j in 0..unit_c {
                        let td = axis_tap(pd * params.stride_d, tap_d[j], params.stride_d, params.dil_d, params.pad_d, inner.shape(2), false);
                        let th = axis_tap(ph * params.stride_h, tap_h[j], params.stride_h, params.dil_h, params.pad_h, inner.shape(3), false);
                        let tw = axis_tap(pw * params.stride_w, tap_w[j], params.stride_w, params.dil_w, params.pad_w, inner.shape(4), false);
                        let i = inner_c[j] + b * inner.stride(0) + td.pos * inner.stride(2) + th.pos * inner.stride(3) + tw.pos * inner.stride(4);
                        v[j] = select(td.inside && th.inside && tw.inside, A::cast_from(inner[i]), A::new(0.0));
                    }
                    #[unroll]
                    for i in 0..unit_r {
                        #[unroll]
                        for j in 0..unit_c {
                            acc[i * unit_c + j] += o[i] * v[j];
                        }
                    }
                }
            }
        }
    }
    #[unroll]
    for i in 0..unit_r {
        #[unroll]
        for j in 0..unit_c {
            if i < rows && c0 + j < n_cols {
                partial[(split * outer_c + group * outer_g + r0 + i) * n_cols + c0 + j] = O::cast_from(acc[i * unit_c + j]);
            }
        }
    }
}
