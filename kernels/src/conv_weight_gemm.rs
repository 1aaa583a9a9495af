//! The weight gradient of a convolution or a transposed convolution as an implicit GEMM whose
//! reduction is split across cubes. Per group,
//! `grad_w[i0, c] = Σ_p outer[p, i0] · cols[p, c]`, where `p` runs over the batch entries and
//! pixels of `outer`, `c = i1 · taps + tap` over the weight's (inner channel, kernel tap) pairs,
//! and `cols[p, c]` is `inner[b, group · inner_g + i1]` at the input position tap `tap` of
//! pixel `p` reads in a convolution (0 in the padding), gathered and never stored. For a
//! convolution `outer` is the output gradient and `inner` the input; for a transposed
//! convolution `outer` is the input and `inner` the output gradient (input pixel `i` of a
//! transposed convolution lands, through tap `k`, on `i · s - pad + k · dil`: the same gather).
//!
//! A cube computes a `block_r` (outer channels) × `block_c` (columns) tile over one range of
//! pixels, `split_len` long (a multiple of `block_k`), walked in slices of `block_k` staged in
//! shared memory; `(block_r / unit_r) × (block_c / unit_c)` units each hold `unit_r × unit_c`
//! accumulators in registers. Every unit stages one pixel of each slice (consecutive units,
//! consecutive pixels: coalesced reads of both tensors), so it decodes one pixel per slice.
//! Each cube writes its sums to row `split` of `partial` (`[splits, weight elements]`,
//! contiguous), which the launcher then sums over the splits; with one split, `partial` is the
//! gradient itself.
use cubecl::prelude::*;

use crate::conv::{ConvParams, axis_tap};
use crate::conv_cmma::ConvKernel;
use crate::strided::umin;

/// `outer` `[b, outer_c, od, oh, ow]` and `inner` `[b, inner_c, d, h, w]` are strided views
/// with offsets; the weight is `[outer_c, inner_c / groups, kd, kh, kw]` (`kernel`). Cubes are
/// numbered over `(split, group, row tile, column tile)`, column tiles fastest.
///
/// The launcher guarantees: `block_k` divides the unit count, which divides `block_k ·
/// block_r` and `block_k · block_c`; every split starts before the last pixel (or there is
/// one split).
#[cube(launch_unchecked)]
pub fn conv_weight_gemm<T: Float, A: Float, O: Float>(
    outer: &Tensor<T>,
    inner: &Tensor<T>,
    partial: &mut Tensor<O>,
    outer_offset: usize,
    inner_offset: usize,
    params: ConvParams,
    kernel: ConvKernel,
    split_len: usize,
    num_cubes: usize,
    #[comptime] block_r: usize,
    #[comptime] block_c: usize,
    #[comptime] block_k: usize,
    #[comptime] unit_r: usize,
    #[comptime] unit_c: usize,
    #[define(T, A, O)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let cols_of_units = comptime!(block_c / unit_c);
    let rows_of_units = comptime!(block_r / unit_r);
    let units = comptime!(cols_of_units * rows_of_units);
    let step = comptime!(units / block_k);
    let a_loads = comptime!(block_r / step);
    let b_loads = comptime!(block_c / step);
    // Shared rows padded by one element: the stores of consecutive pixels hit distinct banks.
    let lda = comptime!(block_r + 1);
    let ldb = comptime!(block_c + 1);

    let tile = weight_grad_tile::<T>(outer, inner, &params, &kernel, split_len, block_r, block_c);
    let unit = UNIT_POS as usize;
    let tx = unit % cols_of_units;
    let ty = unit / cols_of_units;
    let kk = unit % block_k;
    let lane0 = unit / block_k;

    let mut tile_a = SharedMemory::<A>::new(comptime!(block_k * lda));
    let mut tile_b = SharedMemory::<A>::new(comptime!(block_k * ldb));
    let mut regs_a = Array::<A>::new(a_loads);
    let mut regs_b = Array::<A>::new(b_loads);
    let mut acc = Array::<A>::new(unit_r * unit_c);
    #[unroll]
    for i in 0..unit_r * unit_c {
        acc[i] = A::new(0.0);
    }
    let mut a = Array::<A>::new(unit_r);
    let mut b = Array::<A>::new(unit_c);
    let columns = gather_columns::<T>(inner, &tile, &kernel, lane0, step, b_loads);

    for t in 0..tile.slices(block_k) {
        load_pixel::<T, A>(outer, inner, &mut regs_a, &mut regs_b, &tile, &columns, &params, outer_offset, inner_offset, tile.p_begin + t * block_k + kk, lane0, step, a_loads, b_loads);
        #[unroll]
        for l in 0..a_loads {
            tile_a[kk * lda + lane0 + l * step] = regs_a[l];
        }
        #[unroll]
        for l in 0..b_loads {
            tile_b[kk * ldb + lane0 + l * step] = regs_b[l];
        }
        sync_cube();

        #[unroll]
        for k in 0..block_k {
            #[unroll]
            for i in 0..unit_r {
                a[i] = tile_a[k * lda + ty + i * rows_of_units];
            }
            #[unroll]
            for j in 0..unit_c {
                b[j] = tile_b[k * ldb + tx + j * cols_of_units];
            }
            #[unroll]
            for i in 0..unit_r {
                #[unroll]
                for j in 0..unit_c {
                    acc[i * unit_c + j] += a[i] * b[j];
                }
            }
        }
        sync_cube();
    }

    #[unroll]
    for i in 0..unit_r {
        #[unroll]
        for j in 0..unit_c {
            tile.write::<O>(partial, ty + i * rows_of_units, tx + j * cols_of_units, O::cast_from(acc[i * unit_c + j]));
        }
    }
}

/// One cube's part of the weight gradient: its group, its tile's first outer channel `r0` and
/// column `c0`, the pixels `p_begin..p_end` of its split, and what its loads need.
#[derive(CubeType, Clone, Copy)]
pub struct WeightGradTile {
    pub split: usize,
    pub group: usize,
    pub r0: usize,
    pub c0: usize,
    pub p_begin: usize,
    pub p_end: usize,
    /// Outer channels, in all and per group.
    pub outer_c: usize,
    pub outer_g: usize,
    /// Columns of the weight matrix: inner channels per group × taps.
    pub n_cols: usize,
    pub taps: usize,
}

#[cube]
impl WeightGradTile {
    /// Slices of `block_k` pixels in the split.
    pub fn slices(&self, #[comptime] block_k: usize) -> usize {
        select(self.p_end > self.p_begin, self.p_end - self.p_begin, 0).div_ceil(block_k)
    }

    /// Writes `value` at row `r` and column `c` of the tile into the split's row of `partial`,
    /// if that lies inside the group's channels and the weight's columns.
    pub fn write<O: Float>(&self, partial: &mut Tensor<O>, r: usize, c: usize, value: O) {
        let row = self.r0 + r;
        let col = self.c0 + c;
        if row < self.outer_g && col < self.n_cols {
            partial[(self.split * self.outer_c + self.group * self.outer_g + row) * self.n_cols + col] = value;
        }
    }
}

/// The tile of cube `CUBE_POS`: cubes run over `(split, group, row tile, column tile)`,
/// column tiles fastest.
#[cube]
pub fn weight_grad_tile<T: Float>(
    outer: &Tensor<T>,
    inner: &Tensor<T>,
    params: &ConvParams,
    kernel: &ConvKernel,
    split_len: usize,
    #[comptime] block_r: usize,
    #[comptime] block_c: usize,
) -> WeightGradTile {
    let outer_g = outer.shape(1) / params.groups;
    let taps = kernel.kd * kernel.kh * kernel.kw;
    let n_cols = (inner.shape(1) / params.groups) * taps;
    let pixels = outer.shape(0) * outer.shape(2) * outer.shape(3) * outer.shape(4);
    let tiles_c = n_cols.div_ceil(block_c);
    let tiles_r = outer_g.div_ceil(block_r);
    let tiles = params.groups * tiles_r * tiles_c;
    let tile = CUBE_POS % tiles;
    let split = CUBE_POS / tiles;
    let p_begin = split * split_len;
    WeightGradTile {
        split,
        group: tile / (tiles_c * tiles_r),
        r0: ((tile / tiles_c) % tiles_r) * block_r,
        c0: (tile % tiles_c) * block_c,
        p_begin,
        p_end: umin(pixels, p_begin + split_len),
        outer_c: outer.shape(1),
        outer_g,
        n_cols,
        taps,
    }
}

/// Loads pixel `p`'s values of the tile into registers, as `E`: `outer` at tile rows `lane0`,
/// `lane0 + step`, .. into `regs_a`, the gathered `inner` at tile columns `lane0`,
/// `lane0 + step`, .. (decoded once in `columns`) into `regs_b`; zeros past the split, the
/// group's channels, the weight's columns, and in the padding.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn load_pixel<T: Float, E: Float>(
    outer: &Tensor<T>,
    inner: &Tensor<T>,
    regs_a: &mut Array<E>,
    regs_b: &mut Array<E>,
    tile: &WeightGradTile,
    columns: &GatherColumns,
    params: &ConvParams,
    outer_offset: usize,
    inner_offset: usize,
    p: usize,
    lane0: usize,
    #[comptime] step: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
) {
    let (oh, ow) = (outer.shape(3), outer.shape(4));
    let spatial = outer.shape(2) * oh * ow;
    let ok = p < tile.p_end;
    let pb = p / spatial;
    let s = p % spatial;
    let (pd, ph, pw) = (s / (oh * ow), (s / ow) % oh, s % ow);
    let outer_at = outer_offset
        + pb * outer.stride(0)
        + (tile.group * tile.outer_g + tile.r0) * outer.stride(1)
        + pd * outer.stride(2)
        + ph * outer.stride(3)
        + pw * outer.stride(4);
    #[unroll]
    for l in 0..a_loads {
        let r = lane0 + l * step;
        let mut value = E::new(0.0);
        if ok && tile.r0 + r < tile.outer_g {
            value = E::cast_from(outer[outer_at + r * outer.stride(1)]);
        }
        regs_a[l] = value;
    }
    let inner_at = inner_offset + pb * inner.stride(0);
    #[unroll]
    for l in 0..b_loads {
        let col = tile.c0 + lane0 + l * step;
        let mut value = E::new(0.0);
        if ok && col < tile.n_cols {
            let td = axis_tap(pd * params.stride_d, columns.tap_d[l], params.stride_d, params.dil_d, params.pad_d, inner.shape(2), false);
            let th = axis_tap(ph * params.stride_h, columns.tap_h[l], params.stride_h, params.dil_h, params.pad_h, inner.shape(3), false);
            let tw = axis_tap(pw * params.stride_w, columns.tap_w[l], params.stride_w, params.dil_w, params.pad_w, inner.shape(4), false);
            if td.inside && th.inside && tw.inside {
                let i = inner_at + columns.channel[l] + td.pos * inner.stride(2) + th.pos * inner.stride(3) + tw.pos * inner.stride(4);
                value = E::cast_from(inner[i]);
            }
        }
        regs_b[l] = value;
    }
}

/// The gathered columns a unit loads at every pixel (tile columns `lane0`, `lane0 + step`,
/// ..), decoded once rather than at every pixel: each column's channel offset in `inner`
/// (its group's and its own) and its kernel tap along each axis.
#[derive(CubeType)]
pub struct GatherColumns {
    /// Offset of the column's channel in `inner`, in elements.
    pub channel: Array<usize>,
    /// The column's tap along depth.
    pub tap_d: Array<usize>,
    /// The column's tap along height.
    pub tap_h: Array<usize>,
    /// The column's tap along width.
    pub tap_w: Array<usize>,
}

/// Decodes the `b_loads` columns a unit gathers (see [`GatherColumns`]).
#[cube]
pub fn gather_columns<T: Float>(
    inner: &Tensor<T>,
    tile: &WeightGradTile,
    kernel: &ConvKernel,
    lane0: usize,
    #[comptime] step: usize,
    #[comptime] b_loads: usize,
) -> GatherColumns {
    let inner_g = tile.n_cols / tile.taps;
    let group_at = tile.group * inner_g * inner.stride(1);
    let mut channel = Array::<usize>::new(b_loads);
    let mut tap_d = Array::<usize>::new(b_loads);
    let mut tap_h = Array::<usize>::new(b_loads);
    let mut tap_w = Array::<usize>::new(b_loads);
    #[unroll]
    for l in 0..b_loads {
        let col = tile.c0 + lane0 + l * step;
        let tap = col % tile.taps;
        channel[l] = group_at + (col / tile.taps) * inner.stride(1);
        tap_d[l] = tap / (kernel.kh * kernel.kw);
        tap_h[l] = (tap / kernel.kw) % kernel.kh;
        tap_w[l] = tap % kernel.kw;
    }
    GatherColumns { channel, tap_d, tap_h, tap_w }
}
