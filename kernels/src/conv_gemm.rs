//! The convolution and the transposed convolution as an implicit GEMM: per group,
//! `out[co, m] = Σ_k w[co, k] · cols[k, m]` where `m` runs over the output pixels of every
//! batch entry (`b, od, oh, ow`) and `k` over the group's input channels and kernel taps
//! (`ci, kd, kh, kw`). The column matrix is never stored: each cube gathers its slice from
//! `x` straight into shared memory, through [`axis_tap`](fn@axis_tap) (which is where the two kinds
//! differ; a transposed convolution's weight comes as the convolution weight it acts as).
//!
//! A cube computes a `block_n` (output channels) × `block_m` (pixels) tile with
//! `(block_n / unit_n) × (block_m / unit_m)` units, each holding `unit_n × unit_m`
//! accumulators in registers. Units are laid out with pixels fastest, so that the output
//! writes and the gathers of stride-1 convolutions are coalesced.
use cubecl::prelude::*;

use crate::strided::offset5;

use crate::conv::{ConvParams, axis_base, axis_tap};

/// `x` `[b, c_in, d, h, w]` and `weight` `[c_out, c_in / groups, kd, kh, kw]` are strided
/// views with offsets (for a transposed convolution, `weight[co, ci]` is the transposed
/// weight's `[group · cin_g + ci, co mod cout_g]`); `output` `[b, c_out, od, oh, ow]` is
/// contiguous. Cubes are numbered over `(group, channel tile, pixel tile)`.
#[cube(launch_unchecked)]
pub fn conv_gemm<T: Float, A: Float>(
    x: &Tensor<T>,
    weight: &Tensor<T>,
    bias: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    weight_offset: usize,
    bias_offset: usize,
    params: ConvParams,
    num_cubes: usize,
    #[comptime] has_bias: bool,
    #[comptime] transposed: bool,
    #[comptime] block_n: usize,
    #[comptime] block_m: usize,
    #[comptime] block_k: usize,
    #[comptime] unit_n: usize,
    #[comptime] unit_m: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let cols_of_units = comptime!(block_m / unit_m);
    let rows_of_units = comptime!(block_n / unit_n);
    let units = comptime!(cols_of_units * rows_of_units);

    let (od, oh, ow) = (output.shape(2), output.shape(3), output.shape(4));
    let spatial = od * oh * ow;
    let m_total = output.shape(0) * spatial;
    let cout_g = output.shape(1) / params.groups;
    let cin_g = weight.shape(1);
    let (kd, kh, kw) = (weight.shape(2), weight.shape(3), weight.shape(4));
    let taps = kd * kh * kw;
    let k_total = cin_g * taps;
    let (xd, xh, xw) = (x.shape(2), x.shape(3), x.shape(4));

    let tiles_m = m_total.div_ceil(block_m);
    let tiles_n = cout_g.div_ceil(block_n);
    let tile_m = CUBE_POS % tiles_m;
    let tile_n = (CUBE_POS / tiles_m) % tiles_n;
    let group = CUBE_POS / (tiles_m * tiles_n);
    let n0 = tile_n * block_n;
    let m0 = tile_m * block_m;
    let c_base = group * cin_g;
    let co_base = group * cout_g;

    let unit = UNIT_POS as usize;
    let tx = unit % cols_of_units;
    let ty = unit / cols_of_units;

    // The pixel this unit gathers for (fixed over the K loop) and its first K row.
    let gather_col = unit % block_m;
    let gather_row0 = unit / block_m;
    let gather_rows = comptime!(units / block_m);
    let gm = m0 + gather_col;
    let pixel_ok = gm < m_total;
    let gb = gm / spatial;
    let gs = gm % spatial;
    let base_d = axis_base(gs / (oh * ow), params.stride_d, params.pad_d, transposed);
    let base_h = axis_base((gs / ow) % oh, params.stride_h, params.pad_h, transposed);
    let base_w = axis_base(gs % ow, params.stride_w, params.pad_w, transposed);
    // Weight loads: consecutive units along K (contiguous in a dense weight).
    let w_loads = comptime!(block_n * block_k / units);
    let x_loads = comptime!(block_k / gather_rows);

    let mut tile_w = SharedMemory::<A>::new(block_k * block_n);
    let mut tile_x = SharedMemory::<A>::new(block_k * block_m);
    let mut acc = Array::<A>::new(unit_n * unit_m);
    #[unroll]
    for i in 0..unit_n * unit_m {
        acc[i] = A::new(0.0);
    }
    let mut a = Array::<A>::new(unit_n);
    let mut b = Array::<A>::new(unit_m);

    for t in 0..k_total.div_ceil(block_k) {
        let k0 = t * block_k;
        #[unroll]
        for l in 0..w_loads {
            let v = unit + l * units;
            let row = v / block_k;
            let kk = v % block_k;
            let n = n0 + row;
            let k = k0 + kk;
            let mut value = A::new(0.0);
            if n < cout_g && k < k_total {
                let ci = k / taps;
                let r = k % taps;
                let i = weight_offset + offset5::<T>(weight, co_base + n, ci, r / (kh * kw), (r / kw) % kh, r % kw);
                value = A::cast_from(weight[i]);
            }
            tile_w[kk * block_n + row] = value;
        }
        #[unroll]
        for l in 0..x_loads {
            let kk = gather_row0 + l * gather_rows;
            let k = k0 + kk;
            let mut value = A::new(0.0);
            if pixel_ok && k < k_total {
                let ci = k / taps;
                let r = k % taps;
                let td = axis_tap(base_d, r / (kh * kw), params.stride_d, params.dil_d, params.pad_d, xd, transposed);
                let th = axis_tap(base_h, (r / kw) % kh, params.stride_h, params.dil_h, params.pad_h, xh, transposed);
                let tw = axis_tap(base_w, r % kw, params.stride_w, params.dil_w, params.pad_w, xw, transposed);
                if td.inside && th.inside && tw.inside {
                    let i = x_offset + offset5::<T>(x, gb, c_base + ci, td.pos, th.pos, tw.pos);
                    value = A::cast_from(x[i]);
                }
            }
            tile_x[kk * block_m + gather_col] = value;
        }
        sync_cube();

        #[unroll]
        for kk in 0..block_k {
            #[unroll]
            for i in 0..unit_n {
                a[i] = tile_w[kk * block_n + ty + i * rows_of_units];
            }
            #[unroll]
            for j in 0..unit_m {
                b[j] = tile_x[kk * block_m + tx + j * cols_of_units];
            }
            #[unroll]
            for i in 0..unit_n {
                #[unroll]
                for j in 0..unit_m {
                    acc[i * unit_m + j] += a[i] * b[j];
                }
            }
        }
        sync_cube();
    }

    let c_out = output.shape(1);
    #[unroll]
    for i in 0..unit_n {
        let n = n0 + ty + i * rows_of_units;
        if n < cout_g {
            let co = co_base + n;
            let mut shift = A::new(0.0);
            if has_bias {
                shift = A::cast_from(bias[bias_offset + co * bias.stride(0)]);
            }
            #[unroll]
            for j in 0..unit_m {
                let m = m0 + tx + j * cols_of_units;
                if m < m_total {
                    let ob = m / spatial;
                    output[(ob * c_out + co) * spatial + m % spatial] = T::cast_from(acc[i * unit_m + j] + shift);
                }
            }
        }
    }
}
