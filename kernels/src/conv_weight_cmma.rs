//! The weight gradient of both convolutions on tensor cores (cubecl's `cmma`): the GEMM of
//! `conv_weight_gemm` (same tiles, splits, loads and `partial` rows), with `warps_r ×
//! warps_c` planes of 32 units holding the cube's `block_r` × `block_c` tile as 16 × 16 f32
//! accumulator fragments, multiplied by the matmul's [`multiply_slice`](fn@multiply_slice). Pixel slices are
//! double-buffered through registers as in `conv_cmma`: the units load slice `t + 1` while the
//! planes multiply slice `t`, then store it into the other buffer converted to the matrix
//! units' operand type `M`. Shared rows are padded by 16 bytes.
use cubecl::prelude::*;

use crate::conv::ConvParams;
use crate::conv_cmma::ConvKernel;
use crate::conv_weight_gemm::{WeightGradTile, gather_columns, load_pixel, weight_grad_tile};
use crate::matmul::cmma::multiply_slice;

/// Alignment of the shared-memory tiles, in bytes (fragment loads need 32).
const SMEM_ALIGN: usize = 128;
/// Rows and columns of a matrix-unit fragment.
const FRAG: usize = 16;

/// Arguments as for `conv_weight_gemm`; `frag_k` is the K size of one matrix instruction and
/// `pad` 16 bytes in elements of `M`. The launcher guarantees: 32 units per plane,
/// `16 · warps_r` divides `block_r`, `16 · warps_c` divides `block_c`, `frag_k` divides
/// `block_k`, `block_k` divides the unit count, which divides `block_k · block_r` and
/// `block_k · block_c`.
#[cube(launch_unchecked)]
pub fn conv_weight_cmma<T: Float, M: Float, O: Float>(
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
    #[comptime] warps_r: usize,
    #[comptime] warps_c: usize,
    #[comptime] frag_k: usize,
    #[comptime] pad: usize,
    #[define(T, M, O)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let units = comptime!(warps_r * warps_c * 32);
    let frags_r = comptime!(block_r / (warps_r * 16));
    let frags_c = comptime!(block_c / (warps_c * 16));
    let step = comptime!(units / block_k);
    let a_loads = comptime!(block_r / step);
    let b_loads = comptime!(block_c / step);
    let lda = comptime!(block_k + pad);
    let ldb = comptime!(block_c + pad);
    let stage_a = comptime!(block_r * lda);
    let stage_b = comptime!(block_k * ldb);

    let tile = weight_grad_tile::<T>(outer, inner, &params, &kernel, split_len, block_r, block_c);
    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let lane = unit % 32;
    let warp_r = (warp / warps_c) * (frags_r * 16);
    let warp_c = (warp % warps_c) * (frags_c * 16);
    let kk = unit % block_k;
    let lane0 = unit / block_k;

    let mut smem_a = SharedMemory::<M>::new_aligned(comptime!(2 * stage_a), comptime!(SMEM_ALIGN));
    let mut smem_b = SharedMemory::<M>::new_aligned(comptime!(2 * stage_b), comptime!(SMEM_ALIGN));
    let mut regs_a = Array::<T>::new(a_loads);
    let mut regs_b = Array::<T>::new(b_loads);

    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _f in 0..frags_r * frags_c {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            comptime!(FRAG),
            comptime!(FRAG),
            frag_k,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }

    let slices = tile.slices(block_k);
    let columns = gather_columns::<T>(inner, &tile, &kernel, lane0, step, b_loads);
    load_pixel::<T, T>(outer, inner, &mut regs_a, &mut regs_b, &tile, &columns, &params, outer_offset, inner_offset, tile.p_begin + kk, lane0, step, a_loads, b_loads);
    store_pixel::<T, M>(&mut smem_a, &mut smem_b, &regs_a, &regs_b, 0, kk, lane0, step, a_loads, b_loads, lda, ldb, stage_a, stage_b);
    sync_cube();

    for t in 0..slices {
        let stage = t % 2;
        let more = t + 1 < slices;
        if more {
            let p = tile.p_begin + (t + 1) * block_k + kk;
            load_pixel::<T, T>(outer, inner, &mut regs_a, &mut regs_b, &tile, &columns, &params, outer_offset, inner_offset, p, lane0, step, a_loads, b_loads);
        }

        multiply_slice::<M, M, M>(
            &smem_a, &smem_b, &acc, stage * stage_a, stage * stage_b, warp_r, warp_c, lda, ldb, 1usize, 1usize,
            frags_r, frags_c, block_k, frag_k,
        );

        if more {
            store_pixel::<T, M>(&mut smem_a, &mut smem_b, &regs_a, &regs_b, 1 - stage, kk, lane0, step, a_loads, b_loads, lda, ldb, stage_a, stage_b);
        }
        sync_cube();
    }

    write_tile::<O>(partial, &tile, &acc, warp_r, warp_c, warp, lane, units, frags_r, frags_c);
}

/// Stores the registers of [`load_pixel`] into buffer `stage`: column `kk` of the outer
/// slice (`block_r` rows of `lda`) and row `kk` of the gathered slice (`block_k` rows of
/// `ldb`), converted to `M`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_pixel<T: Float, M: Float>(
    smem_a: &mut SharedMemory<M>,
    smem_b: &mut SharedMemory<M>,
    regs_a: &Array<T>,
    regs_b: &Array<T>,
    stage: usize,
    kk: usize,
    lane0: usize,
    #[comptime] step: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
    #[comptime] lda: usize,
    #[comptime] ldb: usize,
    #[comptime] stage_a: usize,
    #[comptime] stage_b: usize,
) {
    #[unroll]
    for l in 0..a_loads {
        smem_a[stage * stage_a + (lane0 + l * step) * lda + kk] = M::cast_from(regs_a[l]);
    }
    #[unroll]
    for l in 0..b_loads {
        smem_b[stage * stage_b + kk * ldb + lane0 + l * step] = M::cast_from(regs_b[l]);
    }
}

/// Writes the plane's fragments into the split's row of `partial`, each through the plane's
/// own 16 × 16 staging area in shared memory (each unit then writes 8 elements of one row).
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_tile<O: Float>(
    partial: &mut Tensor<O>,
    tile: &WeightGradTile,
    acc: &Sequence<cmma::Matrix<f32>>,
    warp_r: usize,
    warp_c: usize,
    warp: usize,
    lane: usize,
    #[comptime] units: usize,
    #[comptime] frags_r: usize,
    #[comptime] frags_c: usize,
) {
    let mut staging = SharedMemory::<f32>::new_aligned(comptime!(units * 8), comptime!(SMEM_ALIGN));
    let area = warp * 256;
    let sub_row = lane / 2;
    let sub_col = (lane % 2) * 8;
    #[unroll]
    for i in 0..frags_r {
        #[unroll]
        for j in 0..frags_c {
            cmma::store(
                &mut staging.slice_mut(area, area + 256),
                acc.index(i * frags_c + j),
                16u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_plane();
            #[unroll]
            for e in 0..8 {
                let value = O::cast_from(staging[area + sub_row * 16 + sub_col + e]);
                tile.write::<O>(partial, warp_r + i * 16 + sub_row, warp_c + j * 16 + sub_col + e, value);
            }
            sync_plane();
        }
    }
}
