//! The convolution's implicit GEMM of [`crate::conv_mma`] (f16 / bf16) with both operands
//! loaded by Hopper's Tensor Memory Accelerator, the column matrix in its im2col mode (CUDA
//! compute capability 9.0 and later).
//!
//! The input is an im2col tensor map over the channels-last input (`[b, w, c]`, `[b, h, w,
//! c]` or `[b, d, h, w, c]` for 1 to 3 spatial dimensions): its pixel box is the range of the
//! kernel's first tap over the output pixels (from `-padding` to `padding - dilation · (k -
//! 1)` past the input's last pixel), walked with the convolution's strides, and one load
//! brings `block_n` consecutive output pixels (wrapping over rows and batch entries, zeros in
//! the padding and past the last batch entry) of `BOX_INNER` channels, all shifted by one
//! kernel tap's offsets. A K slice of [`BOX_INNER`] columns is then exactly one tap and 64
//! channels of it (the launcher requires `cin_g` to be a multiple of 64): one im2col load per
//! slice, landing as the K-major box [`boxed_chunk`](fn@crate::tensor_core::boxed_chunk)
//! describes. The weight comes as a tiled map over the `[c_out, taps · cin_g]` matrix, one
//! `[block_m, BOX_INNER]` box per slice, as [`crate::matmul::tma`]'s K-major `lhs`.
//!
//! The ring (`full` and `empty` barriers, unit 0 the producer) and the products are
//! [`crate::matmul::tma`]'s; the epilogue (bias, `[b, c_out, d, h, w]` output, split-K
//! partials) is [`crate::conv_mma`]'s.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use crate::conv::ConvParams;
use crate::conv_cmma::ConvKernel;
use crate::conv_mma::{OutputAt, write_output};
use crate::matmul::mma::{MmaTile, multiply_slice};
use crate::matmul::pipeline::plane_origin;
use crate::strided::umin;
use crate::tensor_core::{BOX_INNER, zero_accumulators};

/// `output = conv(x, weight) + bias` with TMA loads; see the module docs. `x` is the im2col
/// map over the channels-last input with `dims` spatial dimensions (1 to 3; pixels per column
/// `tile.block_n`, [`BOX_INNER`] channels per pixel, the convolution's strides as element
/// strides, 128-byte swizzle), `weight` the tiled map over the `[c_out, taps · cin_g]` matrix
/// (boxes `[tile.block_m, BOX_INNER]`, 128-byte swizzle); `kernel` the lifted kernel's
/// extents, `cin_g` the group's input channels, `batch` the input's batch entries. `output`
/// `[b, c_out, od, oh, ow]` (lifted) is contiguous, written in vectors of `NO` (1 or 2). Cubes
/// and split K as [`conv_mma`](fn@crate::conv_mma::conv_mma)'s: numbered over `(split, group,
/// channel tile, pixel tile)`, split `s` running K slices `s · split_len ..` into `output`'s
/// batch entries `s · b ..` (f32 partial sums without the bias); the launcher runs it unsplit
/// for now (split-K has not run on a device).
///
/// The launcher guarantees: a device with TMA, `mma.sync` m16n8k16 and `ldmatrix` for `T`,
/// 32-unit planes; `cin_g` a multiple of [`BOX_INNER`], `tile.block_k` = [`BOX_INNER`], both
/// operands K-major, `block_m` and `block_n` powers of two of at most 256, `16 * warps_m`
/// dividing `block_m` and `16 * warps_n` dividing `block_n`; not `tile.tf32`; `NO` divides `od ·
/// oh · ow`; every split starts before K's last slice.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn conv_mma_tma<T: Float, O: Float, NV: Size, NO: Size>(
    x: &TensorMap<T, Im2col>,
    weight: &TensorMap<T, Tiled>,
    bias: &Tensor<T>,
    output: &mut Tensor<Vector<O, NO>>,
    bias_offset: usize,
    params: ConvParams,
    kernel: ConvKernel,
    cin_g: usize,
    batch: usize,
    split_len: usize,
    num_cubes: usize,
    #[comptime] tile: MmaTile,
    #[comptime] has_bias: bool,
    #[comptime] dims: usize,
    #[define(T, O)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let c_out = output.shape(1);
    let (od, oh, ow) = (output.shape(2), output.shape(3), output.shape(4));
    let spatial = od * oh * ow;
    let pixels = batch * spatial;
    let k_total = kernel.kd * kernel.kh * kernel.kw * cin_g;
    let cout_g = c_out / params.groups;

    // Pixel and channel tiles, group and split: as conv_mma's.
    let tiles_co = cout_g.div_ceil(tile.block_m);
    let tiles_pix = pixels.div_ceil(tile.block_n);
    let pix0 = (CUBE_POS % tiles_pix) * tile.block_n;
    let co0 = ((CUBE_POS / tiles_pix) % tiles_co) * tile.block_m;
    let group = (CUBE_POS / (tiles_pix * tiles_co)) % params.groups;
    let split = CUBE_POS / (tiles_pix * tiles_co * params.groups);
    let first = split * split_len;
    let num_k = umin(split_len, k_total.div_ceil(tile.block_k) - first);
    let co_base = group * cout_g;

    // The column's first pixel: its batch entry, and where the kernel's first tap reads it.
    let s = pix0 % spatial;
    let start = ColumnStart {
        n: (pix0 / spatial) as i32,
        d: ((s / (oh * ow)) * params.stride_d) as i32 - params.pad_d as i32,
        h: ((s / ow % oh) * params.stride_h) as i32 - params.pad_h as i32,
        w: ((s % ow) * params.stride_w) as i32 - params.pad_w as i32,
        channel0: group * cin_g,
        row: (co_base + co0) as i32,
    };

    let stages = tile.stages;
    let stage_a = comptime!(tile.stage_a());
    let stage_b = comptime!(tile.stage_b());
    let stage_bytes = comptime!(((tile.stage_a() + tile.stage_b()) * 16) as u32);
    let unit = UNIT_POS as usize;
    let lane = unit % 32;
    let (warp_row, warp_col) = plane_origin(unit, tile);

    // Boxes start on 1024-byte boundaries, as the 128-byte swizzle needs.
    let mut smem_a = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(stages * stage_a), 1024usize);
    let mut smem_b = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(stages * stage_b), 1024usize);
    let mut full = Sequence::<Shared<Barrier>>::new();
    let mut empty = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _s in 0..stages {
        full.push(Barrier::shared(1u32, UNIT_POS == 0));
        empty.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }
    // The barriers' initialisation, visible to the TMA unit.
    sync_async_proxy_shared();

    // Prologue: slices 0 .. stages in flight.
    if unit == 0 {
        #[unroll]
        for s in 0..stages {
            if s < num_k {
                let _token = full.index(s).arrive_and_expect_tx(1u32, stage_bytes);
                load_slice::<T, NV>(x, weight, &mut smem_a, &mut smem_b, full.index(s), &start, first + s, cin_g, &kernel, &params, s, tile, dims);
            }
        }
    }

    let def = cmma::MmaDefinition::<T, T, f32>::new(16usize, 8usize, 16usize);
    let mut acc = zero_accumulators(&def, comptime!(tile.fragments()));
    for t0 in range_stepped(0, num_k, stages) {
        // The round: slice t of stage s is the stage's (t0 / stages)-th, its barriers' phase.
        let phase = ((t0 / stages) % 2) as u32;
        #[unroll]
        for s in 0..stages {
            let t = t0 + s;
            if t < num_k {
                full.index(s).wait_parity(phase);
                multiply_slice::<T, NV>(&def, &smem_a, &smem_b, &mut acc, s * stage_a, s * stage_b, warp_row, warp_col, lane, tile, true);
                let _done = empty.index(s).arrive();
                let next = t + stages;
                if unit == 0 && next < num_k {
                    // Every unit is done with slice t: its stage takes slice t + stages.
                    empty.index(s).wait_parity(phase);
                    let _token = full.index(s).arrive_and_expect_tx(1u32, stage_bytes);
                    load_slice::<T, NV>(x, weight, &mut smem_a, &mut smem_b, full.index(s), &start, first + next, cin_g, &kernel, &params, s, tile, dims);
                }
            }
        }
    }

    let at = OutputAt { base: split * pixels * c_out, co_base, co0: co0 + warp_row, pix0: pix0 + warp_col, cout_g, c_out, spatial, pixels };
    write_output::<T, T, O, NO>(
        &def,
        output,
        bias,
        &acc,
        bias_offset,
        &at,
        lane,
        comptime!(tile.block_m / tile.warps_m),
        comptime!(tile.block_n / tile.warps_n),
        has_bias,
    );
}

/// Where a cube's column starts: the batch entry `n` of its first output pixel and the input
/// position `(d, h, w)` that the kernel's first tap reads for it (may lie in the padding),
/// the group's first input channel, and the first weight row of the cube's channel tile.
#[derive(CubeType, Clone, Copy)]
pub struct ColumnStart {
    pub n: i32,
    pub d: i32,
    pub h: i32,
    pub w: i32,
    pub channel0: usize,
    pub row: i32,
}

/// Issues the TMA loads of K slice `slice` (columns `slice · BOX_INNER ..`: kernel tap `tap`,
/// channels `ci .. ci + BOX_INNER` with `slice · BOX_INNER = tap · cin_g + ci`) into stage
/// `stage`, completing on `bar`: the weight's `[block_m, BOX_INNER]` box, and the column's
/// `block_n` pixels, shifted by the tap's offsets `(kd, kh, kw) · dilation`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_slice<T: Float, NV: Size>(
    x: &TensorMap<T, Im2col>,
    weight: &TensorMap<T, Tiled>,
    smem_a: &mut SharedMemory<Vector<T, NV>>,
    smem_b: &mut SharedMemory<Vector<T, NV>>,
    bar: &Shared<Barrier>,
    start: &ColumnStart,
    slice: usize,
    cin_g: usize,
    kernel: &ConvKernel,
    params: &ConvParams,
    #[comptime] stage: usize,
    #[comptime] tile: MmaTile,
    #[comptime] dims: usize,
) {
    let k0 = slice * BOX_INNER;
    let tap = k0 / cin_g;
    let c = (start.channel0 + k0 % cin_g) as i32;
    let kw = tap % kernel.kw;
    let kh = (tap / kernel.kw) % kernel.kh;
    let kd = tap / (kernel.kw * kernel.kh);
    let (off_d, off_h, off_w) = (u16::cast_from(kd * params.dil_d), u16::cast_from(kh * params.dil_h), u16::cast_from(kw * params.dil_w));

    let at_a = comptime!(stage * tile.stage_a());
    let mut to_a = smem_a.slice_mut(at_a, at_a + comptime!(tile.stage_a()));
    bar.tma_load_2d(weight, &mut to_a, start.row, k0 as i32);

    let at_b = comptime!(stage * tile.stage_b());
    let mut to_b = smem_b.slice_mut(at_b, at_b + comptime!(tile.stage_b()));
    if comptime!(dims == 1) {
        bar.tma_load_im2col_3d(x, &mut to_b, start.n, start.w, c, off_w);
    } else if comptime!(dims == 2) {
        bar.tma_load_im2col_4d(x, &mut to_b, start.n, start.h, start.w, c, off_h, off_w);
    } else {
        bar.tma_load_im2col_5d(x, &mut to_b, start.n, start.d, start.h, start.w, c, off_d, off_h, off_w);
    }
}
