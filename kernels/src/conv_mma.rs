//! The convolution and the transposed convolution as an implicit GEMM on the matrix units' own
//! instructions (cubecl's manual MMA, CUDA's `mma.sync`): f16 and bf16 on m16n8k16, f32
//! rounded to TF32 on m16n8k8. Per group, `out[co, p] = Σ_k w[co, k] · cols[p, k]`, where `p` runs over
//! the output pixels of every batch entry and `k = tap · cin_g + ci` over the group's kernel
//! taps and input channels. It is the matrix product of [`crate::matmul::mma`] with both
//! operands K-major: the weight is the contiguous `[c_out, taps · cin_g]` matrix, and the
//! column matrix is never stored: the input comes channels-last (`[b, d, h, w, c]`,
//! contiguous), so a 16-byte chunk of a column row is 8 (f16, bf16) or 4 (f32) consecutive channels
//! of one input pixel, which each cube gathers by asynchronous copies straight into the
//! staged slice (zero-filled in the padding, past the pixels and past K).
//!
//! The staging, the `cp.async` pipeline (`stages` slices in flight, one barrier per stage) and
//! the products are the matrix product's ([`multiply_staged`](fn@multiply_staged)); the gather
//! (`ColumnSlices`) and the epilogue (bias, `[b, c_out, d, h, w]` output) are this file's. A unit
//! copies the same chunk column of every row it stages, so it decodes its pixels once and
//! its slice's kernel tap once per slice.
//!
//! Split K: where the output tiles fill less than a wave, the launcher splits K's slices into
//! `splits` runs of `split_len` and gives each run cubes of its own (split-K); each writes its
//! f32 partial sum, without the bias, into its own copy of the output, and
//! [`crate::split_sum`] adds them in order, with the bias, into the output.
use cubecl::prelude::barrier::copy_async_checked;
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::conv::{ConvParams, Tap, axis_base, axis_tap};
use crate::matmul::mma::MmaTile;
use crate::matmul::pipeline::{StageSlices, StageSlicesExpand, multiply_staged, plane_origin};
use crate::strided::umin;
use crate::tensor_core::{Pair, Swizzle, copy_tile, swizzle};

/// `output = conv(x, weight) + bias` (or the transposed convolution's gather, `transposed`);
/// see the module docs. `x` is the channels-last input `[b, d, h, w, c_in]`, `weight` the
/// contiguous `[c_out, taps · cin_g]` matrix in `(tap, ci)` order, both read in chunks of
/// `NV` (`tile.chunk()` elements); `output` `[b, c_out, od, oh, ow]` is contiguous and written
/// in vectors of `NO` (1 or 2). Cubes are numbered over `(split, group, channel tile, pixel
/// tile)`, pixel tiles fastest; split `s` runs K slices `s · split_len ..` (at most
/// `split_len` of them) and writes to `output`'s batch entries `s · b ..`: `output` is `[splits
/// · b, c_out, od, oh, ow]` of `O` (`T` unsplit; f32 partial sums, with no bias, split). `tile`
/// is the product's (`block_m` channels, `block_n` pixels), both operands K-major.
///
/// The launcher guarantees: a device with `mma.sync` for `F` (as [`crate::matmul::mma`]
/// needs), `NV` dividing `cin_g`, the tile's rules of that kernel, the cube's units a multiple
/// of the chunks per staged row, `NO` dividing `od · oh · ow`, and every split starting
/// before K's last slice.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn conv_mma<T: Float, F: Float, O: Float, NV: Size, NO: Size>(
    x: &Tensor<Vector<T, NV>>,
    weight: &Tensor<Vector<T, NV>>,
    bias: &Tensor<T>,
    output: &mut Tensor<Vector<O, NO>>,
    bias_offset: usize,
    params: ConvParams,
    taps: TapDivisors,
    split_len: usize,
    num_cubes: usize,
    #[comptime] tile: MmaTile,
    #[comptime] has_bias: bool,
    #[comptime] transposed: bool,
    #[comptime] unit_stride: bool,
    #[define(T, F, O)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let cpr = comptime!(tile.b_cpr());
    let plane_m = comptime!(tile.block_m / tile.warps_m);
    let plane_n = comptime!(tile.block_n / tile.warps_n);

    let c_out = output.shape(1);
    let (od, oh, ow) = (output.shape(2), output.shape(3), output.shape(4));
    let spatial = od * oh * ow;
    let pixels = x.shape(0) * spatial;
    let cout_g = c_out / params.groups;
    let k_total = weight.shape(1);
    let cin_g = x.shape(4) / params.groups;

    let tiles_pix = pixels.div_ceil(tile.block_n);
    let tiles_co = cout_g.div_ceil(tile.block_m);
    let pix0 = (CUBE_POS % tiles_pix) * tile.block_n;
    let co0 = ((CUBE_POS / tiles_pix) % tiles_co) * tile.block_m;
    let group = (CUBE_POS / (tiles_pix * tiles_co)) % params.groups;
    let split = CUBE_POS / (tiles_pix * tiles_co * params.groups);
    let first = split * split_len;
    let num_k = umin(split_len, k_total.div_ceil(tile.block_k) - first);
    let co_base = group * cout_g;
    let unit = UNIT_POS as usize;

    // The pixels whose column rows this unit stages: rows `unit / cpr + l · rows_per_pass`.
    let rows_per_pass = comptime!(tile.units() / cpr);
    let mut pix = Sequence::<PixelAt>::new();
    #[unroll]
    for l in 0..comptime!(tile.block_n / rows_per_pass) {
        let p = pix0 + unit / cpr + l * rows_per_pass;
        pix.push(pixel_at(x, p, pixels, spatial, oh, ow, group * cin_g, &params, transposed));
    }
    let slices = ColumnSlices { pix, first, weight_at: co_base * k_total, co0, cout_g, k_total, params, taps, transposed, unit_stride };
    let (warp_row, warp_col) = plane_origin(unit, tile);
    let acc = multiply_staged::<T, F, NV, ColumnSlices>(&slices, weight, x, num_k, unit, warp_row, warp_col, tile);

    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, comptime!(tile.mma_k()));
    let at = OutputAt { base: split * pixels * c_out, co_base, co0: co0 + warp_row, pix0: pix0 + warp_col, cout_g, c_out, spatial, pixels };
    write_output::<T, F, O, NO>(&def, output, bias, &acc, bias_offset, &at, unit % 32, plane_m, plane_n, has_bias);
}

/// The implicit GEMM's operands: the weight matrix (its group's rows from element
/// `weight_at`, the cube's from row `co0` of `cout_g`, `k_total` columns) and the column
/// matrix, gathered from the input at the unit's pixels `pix` ([`gather_columns`]); the
/// cube's K slices start at slice `first`.
#[derive(CubeType)]
struct ColumnSlices {
    pix: Sequence<PixelAt>,
    first: usize,
    weight_at: usize,
    co0: usize,
    cout_g: usize,
    k_total: usize,
    params: ConvParams,
    taps: TapDivisors,
    #[cube(comptime)]
    transposed: bool,
    #[cube(comptime)]
    unit_stride: bool,
}

#[cube]
impl<T: Float, NV: Size> StageSlices<T, NV> for ColumnSlices {
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
        let k0 = (self.first + slice) * tile.block_k;
        let (cpr, units) = comptime!((tile.a_cpr(), tile.units()));
        let pattern = comptime!(Swizzle::of(tile.tf32, true));
        copy_tile::<T, NV>(a, smem_a, self.weight_at, self.co0, k0, self.k_total, self.cout_g, self.k_total, comptime!(stage * tile.stage_a()), unit, tile.block_m, cpr, units, pattern);
        gather_columns::<T, NV>(b, smem_b, &self.pix, k0, self.k_total, &self.params, &self.taps, comptime!(stage * tile.stage_b()), unit, tile.block_n, cpr, units, pattern, self.transposed, self.unit_stride);
    }
}

/// Divisors that take a column `k = tap · cin_g + ci` apart: the group's input channels
/// (`cin_g`), and the kernel's width and height (a tap is `(kd · kh + i) · kw + j`), as
/// multiplications: every unit decodes its column once per slice.
#[derive(CubeLaunch, CubeType)]
pub struct TapDivisors {
    pub channels: FastDivmod<usize>,
    pub kw: FastDivmod<usize>,
    pub kh: FastDivmod<usize>,
}

/// One output pixel's place in the gather: whether it exists, its batch entry's and group's
/// first input element, and its [`axis_base`](fn@axis_base) along each axis.
#[derive(CubeType, Clone, Copy)]
pub struct PixelAt {
    pub ok: bool,
    pub x_base: usize,
    pub base_d: usize,
    pub base_h: usize,
    pub base_w: usize,
}

#[cube]
#[allow(clippy::too_many_arguments)]
fn pixel_at<T: Float, NV: Size>(
    x: &Tensor<Vector<T, NV>>,
    p: usize,
    pixels: usize,
    spatial: usize,
    oh: usize,
    ow: usize,
    channel0: usize,
    params: &ConvParams,
    #[comptime] transposed: bool,
) -> PixelAt {
    let s = p % spatial;
    PixelAt {
        ok: p < pixels,
        x_base: (p / spatial) * x.stride(0) + channel0,
        base_d: axis_base(s / (oh * ow), params.stride_d, params.pad_d, transposed),
        base_h: axis_base(s / ow % oh, params.stride_h, params.pad_h, transposed),
        base_w: axis_base(s % ow, params.stride_w, params.pad_w, transposed),
    }
}

/// Starts the asynchronous copies of the column slice `k0..k0 + block_k`: row `r` (pixel
/// `pix0 + r`) and chunk `c` hold channels `ci..ci + chunk` of tap `tap` (`k0 + c · chunk =
/// tap · cin_g + ci`), landing at chunk `dst + r · cpr + swizzle(r, c)`; zero-filled in the
/// padding, past the pixels and past K. Each unit copies chunk `unit % cpr` of the rows of
/// `pix`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn gather_columns<T: Float, NV: Size>(
    x: &Tensor<Vector<T, NV>>,
    smem: &mut SharedMemory<Vector<T, NV>>,
    pix: &Sequence<PixelAt>,
    k0: usize,
    k_total: usize,
    params: &ConvParams,
    taps: &TapDivisors,
    #[comptime] dst: usize,
    unit: usize,
    #[comptime] rows: usize,
    #[comptime] cpr: usize,
    #[comptime] units: usize,
    #[comptime] pattern: Swizzle,
    #[comptime] transposed: bool,
    #[comptime] unit_stride: bool,
) {
    let nv = x.vector_size();
    let rows_per_pass = comptime!(units / cpr);
    let c = unit % cpr;
    let k = k0 + c * nv;
    let k_ok = k < k_total;
    let (tap, ci) = taps.channels.div_mod(k);
    let (rows_of_taps, kw) = taps.kw.div_mod(tap);
    let (kd, kh) = taps.kh.div_mod(rows_of_taps);
    #[unroll]
    for l in 0..comptime!(rows / rows_per_pass) {
        let p = pix.index(l);
        let td = tap_of(p.base_d, kd, params.stride_d, params.dil_d, params.pad_d, x.shape(1), transposed, unit_stride);
        let th = tap_of(p.base_h, kh, params.stride_h, params.dil_h, params.pad_h, x.shape(2), transposed, unit_stride);
        let tw = tap_of(p.base_w, kw, params.stride_w, params.dil_w, params.pad_w, x.shape(3), transposed, unit_stride);
        let inside = k_ok && p.ok && td.inside && th.inside && tw.inside;
        // Chunks outside read nothing (length 0) from the input's first chunk.
        let mut at = 0;
        if inside {
            at = (p.x_base + td.pos * x.stride(1) + th.pos * x.stride(2) + tw.pos * x.stride(3) + ci) / nv;
        }
        let r = unit / cpr + l * rows_per_pass;
        let to = dst + r * cpr + swizzle(r, c, cpr, pattern);
        copy_async_checked(&x.slice(at, at + usize::cast_from(inside)), &mut smem.slice_mut(to, to + 1), comptime!(nv as u32));
    }
}

/// [`axis_tap`], without its division where a transposed convolution's strides are all 1
/// (`unit_stride`): a convolution's input gradient at stride 1 took 1.45x the convolution's
/// time with it (H200).
#[cube]
#[allow(clippy::too_many_arguments)]
fn tap_of(base: usize, k: usize, stride: usize, dil: usize, pad: usize, size: usize, #[comptime] transposed: bool, #[comptime] unit_stride: bool) -> Tap {
    if transposed && unit_stride {
        let reach = k * dil;
        let inside = base >= reach && base - reach < size;
        Tap { pos: select(inside, base - reach, 0), inside }
    } else {
        axis_tap(base, k, stride, dil, pad, size, transposed)
    }
}

/// Where a plane's part of the output lies: its split's first element, its group's first
/// channel, its first channel and pixel, and the extents that bound the writes.
#[derive(CubeType, Clone, Copy)]
pub struct OutputAt {
    pub base: usize,
    pub co_base: usize,
    pub co0: usize,
    pub pix0: usize,
    pub cout_g: usize,
    pub c_out: usize,
    pub spatial: usize,
    pub pixels: usize,
}

/// Writes the plane's accumulators plus the bias, converted to `O`, to the output
/// `[b, c_out, spatial]` from element `base`: accumulator row `co`, column `p` goes to channel `co_base + co` of
/// pixel `p`'s batch entry, in vectors of `NO` consecutive pixels (which `NO` dividing the
/// spatial size keeps in one batch entry); channels past the group's and pixels past the last
/// are skipped.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_output<T: Float, F: Float, O: Float, NO: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    output: &mut Tensor<Vector<O, NO>>,
    bias: &Tensor<T>,
    acc: &Sequence<Array<Vector<f32, Pair>>>,
    bias_offset: usize,
    at: &OutputAt,
    lane: usize,
    #[comptime] plane_m: usize,
    #[comptime] plane_n: usize,
    #[comptime] has_bias: bool,
) {
    let no = output.vector_size();
    let frags_n = comptime!(plane_n / 8);
    let vectors = def.vectors_per_lane(cmma::MatrixIdent::Accumulator);
    let width = def.vector_size(cmma::MatrixIdent::Accumulator);
    #[unroll]
    for i in 0..plane_m / 16 {
        #[unroll]
        for v in 0..vectors {
            let (r, c) = def.position_of_nth(lane as u32, comptime!((v * width) as u32), cmma::MatrixIdent::Accumulator);
            let co = at.co0 + i * 16 + r as usize;
            let mut shift = 0.0f32;
            if has_bias && co < at.cout_g {
                shift = f32::cast_from(bias[bias_offset + (at.co_base + co) * bias.stride(0)]);
            }
            #[unroll]
            for j in 0..frags_n {
                let values = acc.index(i * frags_n + j)[v];
                #[unroll]
                for w in 0..comptime!(width / no) {
                    let p = at.pix0 + j * 8 + c as usize + w * no;
                    if co < at.cout_g && p < at.pixels {
                        let mut out = Vector::<O, NO>::empty();
                        #[unroll]
                        for e in 0..no {
                            out[e] = O::cast_from(values[w * no + e] + shift);
                        }
                        let channel = (p / at.spatial) * at.c_out + at.co_base + co;
                        output[(at.base + channel * at.spatial + p % at.spatial) / no] = out;
                    }
                }
            }
        }
    }
}
