//! The weight gradient of both convolutions on the matrix units' own instructions (cubecl's
//! manual MMA, CUDA's `mma.sync`; f16 and bf16 on m16n8k16, f32 rounded to TF32 on m16n8k8): the GEMM
//! of `conv_weight_gemm`, `grad_w[i0, (tap, i1)] = Σ_p outer[p, i0] · cols[p, (tap, i1)]`,
//! with the pixels split across cubes, as the matrix product of [`crate::matmul::mma`] whose K
//! is the pixels. Both tensors come channels-last (`[b, d, h, w, c]`, contiguous), so a
//! 16-byte chunk is 8 (f16, bf16) or 4 (f32) consecutive channels of one pixel: the outer tensor's
//! slice is an M-major operand staged by plain chunk copies, and the columns are an N-major
//! operand (column `n = tap · inner_g + i1`) gathered by asynchronous copies straight into the
//! staged slice, zero in the padding, past the split and past the columns. `ldmatrix`
//! transposes both (f16); TF32 fragments are read element by element.
//!
//! A unit gathers the same chunk column of every row it stages, so its kernel tap and channel
//! are decoded once; its pixels once per slice. Each cube writes its sums, in the weight's own
//! `[outer_c, inner_g, kd, kh, kw]` order, to row `split` of `partial`
//! (`[splits, weight elements]`), which the launcher sums over the splits.
use cubecl::prelude::barrier::copy_async_checked;
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::conv::{ConvParams, axis_tap};
use crate::conv_cmma::ConvKernel;
use crate::matmul::mma::MmaTile;
use crate::matmul::pipeline::{StageSlices, StageSlicesExpand, multiply_staged, plane_origin};
use crate::strided::umin;
use crate::tensor_core::{Swizzle, copy_tile, swizzle};

/// The weight gradient's partial sums; see the module docs. `outer` `[b, od, oh, ow, outer_c]`
/// and `inner` `[b, d, h, w, inner_c]` are contiguous and read in chunks of `NV`
/// (`tile.chunk()` elements); the weight is `[outer_c, inner_c / groups, kd, kh, kw]`
/// (`kernel`). `tile` is the product's (`block_m` outer channels, `block_n` columns, `block_k`
/// pixels), both operands not K-major. Cubes are numbered over `(split, group, row tile,
/// column tile)`, column tiles fastest; a split is `split_len` pixels.
///
/// The launcher guarantees: a device with `mma.sync` for `F`, `NV` dividing both tensors'
/// channels per group, the tile's rules of [`crate::matmul::mma`], the cube's units a multiple
/// of the chunks per staged column row, `split_len` a multiple of `block_k`, and every split
/// starting before the last pixel.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn conv_weight_mma<T: Float, F: Float, O: Float, NV: Size>(
    outer: &Tensor<Vector<T, NV>>,
    inner: &Tensor<Vector<T, NV>>,
    partial: &mut Tensor<O>,
    params: ConvParams,
    kernel: ConvKernel,
    split_len: usize,
    num_cubes: usize,
    pixels_of: PixelDivisors,
    #[comptime] tile: MmaTile,
    #[define(T, F, O)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let chunk = comptime!(tile.chunk());
    let b_cpr = comptime!(tile.b_cpr());
    let plane_m = comptime!(tile.block_m / tile.warps_m);
    let plane_n = comptime!(tile.block_n / tile.warps_n);

    let outer_c = outer.shape(4);
    let outer_g = outer_c / params.groups;
    let inner_g = inner.shape(4) / params.groups;
    let taps = kernel.kd * kernel.kh * kernel.kw;
    let n_cols = taps * inner_g;
    let pixels = outer.shape(0) * outer.shape(1) * outer.shape(2) * outer.shape(3);
    let tiles_n = n_cols.div_ceil(tile.block_n);
    let tiles_m = outer_g.div_ceil(tile.block_m);
    let tiles = params.groups * tiles_m * tiles_n;
    let split = CUBE_POS / tiles;
    let group = (CUBE_POS % tiles) / (tiles_m * tiles_n);
    let r0 = ((CUBE_POS / tiles_n) % tiles_m) * tile.block_m;
    let c0 = (CUBE_POS % tiles_n) * tile.block_n;
    let p_begin = split * split_len;
    let p_end = umin(pixels, p_begin + split_len);
    let unit = UNIT_POS as usize;

    // This unit's column of the gather, fixed over the pixels.
    let n = c0 + (unit % b_cpr) * chunk;
    let tap = n / inner_g;
    let column = GatherColumn {
        ok: n < n_cols,
        channel: group * inner_g + n % inner_g,
        kd: tap / (kernel.kh * kernel.kw),
        kh: (tap / kernel.kw) % kernel.kh,
        kw: tap % kernel.kw,
    };
    let group_at = group * outer_g;
    let slices = PixelSlices { group_at, r0, outer_c, outer_g, p_begin, p_end, column, params, pixels_of };
    let (warp_row, warp_col) = plane_origin(unit, tile);
    let num_k = (p_end - p_begin).div_ceil(tile.block_k);
    let acc = multiply_staged::<T, F, NV, PixelSlices>(&slices, outer, inner, num_k, unit, warp_row, warp_col, tile);

    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, comptime!(tile.mma_k()));
    let lane = unit % 32;
    // Row `co` and column `n = tap · inner_g + i1` go to weight element `(co, i1, tap)`.
    let row0 = group_at + r0 + warp_row;
    let frags_n = comptime!(plane_n / 8);
    let vectors = def.vectors_per_lane(cmma::MatrixIdent::Accumulator);
    let width = def.vector_size(cmma::MatrixIdent::Accumulator);
    let split_at = split * outer_c * n_cols;
    #[unroll]
    for i in 0..plane_m / 16 {
        #[unroll]
        for j in 0..frags_n {
            let frag = acc.index(i * frags_n + j);
            #[unroll]
            for v in 0..vectors {
                let (r, c) = def.position_of_nth(lane as u32, comptime!((v * width) as u32), cmma::MatrixIdent::Accumulator);
                let row = r0 + warp_row + i * 16 + r as usize;
                #[unroll]
                for e in 0..width {
                    let col = c0 + warp_col + j * 8 + c as usize + e;
                    if row < outer_g && col < n_cols {
                        let at = (row0 + i * 16 + r as usize) * n_cols + (col % inner_g) * taps + col / inner_g;
                        partial[split_at + at] = O::cast_from(frag[v][e]);
                    }
                }
            }
        }
    }
}

/// The weight gradient's operands over the pixels `p_begin..p_end`: the outer tensor's
/// channels `group_at + r0..` (of `outer_g` in the group, `outer_c` in all), and the unit's
/// gather `column` of the inner tensor ([`gather_pixels`]).
#[derive(CubeType)]
struct PixelSlices {
    group_at: usize,
    r0: usize,
    outer_c: usize,
    outer_g: usize,
    p_begin: usize,
    p_end: usize,
    column: GatherColumn,
    params: ConvParams,
    pixels_of: PixelDivisors,
}

#[cube]
impl<T: Float, NV: Size> StageSlices<T, NV> for PixelSlices {
    fn copy_slice(
        &self,
        a: &Tensor<Vector<T, NV>>,
        b: &Tensor<Vector<T, NV>>,
        smem_a: &mut SharedMemory<Vector<T, NV>>,
        smem_b: &mut SharedMemory<Vector<T, NV>>,
        slice: usize,
        #[comptime] stage: usize,
        unit: usize,
        #[comptime] tile: MmaTile,
    ) {
        let p0 = self.p_begin + slice * tile.block_k;
        let units = comptime!(tile.units());
        let pattern = comptime!(Swizzle::of(tile.tf32, false));
        copy_tile::<T, NV>(a, smem_a, self.group_at, p0, self.r0, self.outer_c, self.p_end, self.outer_g, comptime!(stage * tile.stage_a()), unit, tile.block_k, comptime!(tile.a_cpr()), units, pattern);
        gather_pixels::<T, NV>(b, smem_b, &self.column, &self.params, &self.pixels_of, p0, self.p_end, comptime!(stage * tile.stage_b()), unit, tile.block_k, comptime!(tile.b_cpr()), units, pattern);
    }
}

/// Divisors that take an outer pixel apart: its batch entry and offset within it (`spatial` =
/// `od · oh · ow`), that offset's depth and place in the plane (`plane` = `oh · ow`), and the
/// place's row and column (`row` = `ow`).
#[derive(CubeLaunch, CubeType)]
pub struct PixelDivisors {
    pub spatial: FastDivmod<usize>,
    pub plane: FastDivmod<usize>,
    pub row: FastDivmod<usize>,
}

/// The gather column a unit copies at every pixel: whether it is a column of the weight, its
/// channel in `inner` (its group's and its own), and its kernel tap along each axis.
#[derive(CubeType, Clone, Copy)]
pub struct GatherColumn {
    pub ok: bool,
    pub channel: usize,
    pub kd: usize,
    pub kh: usize,
    pub kw: usize,
}

/// Starts the asynchronous copies of the columns at pixels `p0..p0 + rows`: row `r` (pixel
/// `p0 + r` of `outer`) and chunk `c` hold the chunk of `inner` that the unit's column reads at
/// that pixel (a convolution's gather), landing at chunk `dst + r · cpr + swizzle(r, c)`;
/// zero-filled in the padding, from `p_end` on and past the columns. Each unit copies chunk
/// `unit % cpr` of its rows.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gather_pixels<T: Float, NV: Size>(
    inner: &Tensor<Vector<T, NV>>,
    smem: &mut SharedMemory<Vector<T, NV>>,
    column: &GatherColumn,
    params: &ConvParams,
    pixels_of: &PixelDivisors,
    p0: usize,
    p_end: usize,
    #[comptime] dst: usize,
    unit: usize,
    #[comptime] rows: usize,
    #[comptime] cpr: usize,
    #[comptime] units: usize,
    #[comptime] pattern: Swizzle,
) {
    let nv = inner.vector_size();
    let rows_per_pass = comptime!(units / cpr);
    let c = unit % cpr;
    #[unroll]
    for l in 0..comptime!(rows / rows_per_pass) {
        let r = unit / cpr + l * rows_per_pass;
        let p = p0 + r;
        let (b, s) = pixels_of.spatial.div_mod(p);
        let (d, hw) = pixels_of.plane.div_mod(s);
        let (h, w) = pixels_of.row.div_mod(hw);
        let td = axis_tap(d * params.stride_d, column.kd, params.stride_d, params.dil_d, params.pad_d, inner.shape(1), false);
        let th = axis_tap(h * params.stride_h, column.kh, params.stride_h, params.dil_h, params.pad_h, inner.shape(2), false);
        let tw = axis_tap(w * params.stride_w, column.kw, params.stride_w, params.dil_w, params.pad_w, inner.shape(3), false);
        let inside = column.ok && p < p_end && td.inside && th.inside && tw.inside;
        // Chunks outside read nothing (length 0) from the input's first chunk.
        let mut at = 0;
        if inside {
            at = (b * inner.stride(0) + td.pos * inner.stride(1) + th.pos * inner.stride(2) + tw.pos * inner.stride(3) + column.channel) / nv;
        }
        let to = dst + r * cpr + swizzle(r, c, cpr, pattern);
        copy_async_checked(&inner.slice(at, at + usize::cast_from(inside)), &mut smem.slice_mut(to, to + 1), comptime!(nv as u32));
    }
}
