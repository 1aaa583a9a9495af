//! The main loop of every product on manual MMA ([`super::mma`], the implicit-GEMM
//! convolutions of [`crate::conv_mma`] and their weight gradient in
//! [`crate::conv_weight_mma`]): K is walked in slices of `block_k`, `stages` slices in flight
//! through asynchronous global-to-shared copies with one shared barrier per stage, each
//! landed slice multiplied into the plane's accumulators by [`multiply_slice`](fn@multiply_slice) (f16 / bf16)
//! or [`multiply_slice_tf32`](fn@multiply_slice_tf32). What differs between the kernels is only where a slice's
//! chunks come from: a [`StageSlices`] starts those copies.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use super::mma::{MmaTile, multiply_slice, multiply_slice_tf32};
use crate::tensor_core::{Pair, zero_accumulators};

/// Where a kernel's K slices come from.
#[cube]
pub trait StageSlices<T: Float, NV: Size> {
    /// Starts this unit's asynchronous copies of K slice `slice` of both operands (`a` into
    /// `smem_a`, `b` into `smem_b`) at stage `stage`: chunk offsets `stage · tile.stage_a()`
    /// and `stage · tile.stage_b()`, each slice laid out as `tile` says (rows along the
    /// operand's strided dimension, swizzled by `Swizzle::of`), zero-filled where the operand
    /// has no element.
    #[allow(clippy::too_many_arguments)]
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
    );
}

/// Multiplies `num_k` K slices staged by `slices` into the accumulators of this unit's plane
/// (its `warp_row`, `warp_col` part of the cube's tile, as [`multiply_slice`](fn@multiply_slice) lays them out)
/// and returns them. Every unit of the cube must call it (it waits on shared barriers).
///
/// Slice `t` lives in stage `t % stages`; the loop is unrolled by `stages` so that stages and
/// barriers are known at compile time.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn multiply_staged<T: Float, F: Float, NV: Size, S: StageSlices<T, NV>>(
    slices: &S,
    a: &Tensor<Vector<T, NV>>,
    b: &Tensor<Vector<T, NV>>,
    num_k: usize,
    unit: usize,
    warp_row: usize,
    warp_col: usize,
    #[comptime] tile: MmaTile,
) -> Sequence<Array<Vector<f32, Pair>>> {
    let stages = tile.stages;
    let stage_a = comptime!(tile.stage_a());
    let stage_b = comptime!(tile.stage_b());
    let lane = unit % 32;
    let mut smem_a = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(stages * stage_a), 128usize);
    let mut smem_b = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(stages * stage_b), 128usize);
    let mut bars = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _s in 0..stages {
        bars.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }

    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, comptime!(tile.mma_k()));
    let mut acc = zero_accumulators(&def, comptime!(tile.fragments()));

    // Prologue: slices 0 .. stages - 1 in flight.
    #[unroll]
    for s in 0..stages - 1 {
        if s < num_k {
            slices.copy_slice(a, b, &mut smem_a, &mut smem_b, s, s, unit, tile);
        }
        bars.index(s).commit_copy_async();
    }

    for t0 in range_stepped(0, num_k, stages) {
        #[unroll]
        for s in 0..stages {
            let t = t0 + s;
            if t < num_k {
                // Slice t has landed, and every unit is done with slice t - 1, whose stage
                // the copies of slice t + stages - 1 reuse.
                bars.index(s).arrive_and_wait();
                let next_stage = comptime!((s + stages - 1) % stages);
                let next = t + stages - 1;
                if next < num_k {
                    slices.copy_slice(a, b, &mut smem_a, &mut smem_b, next, next_stage, unit, tile);
                }
                bars.index(next_stage).commit_copy_async();
                if comptime!(tile.tf32) {
                    multiply_slice_tf32::<T, F, NV>(
                        &def, &smem_a, &smem_b, &mut acc, s * stage_a, s * stage_b, warp_row, warp_col, lane, tile,
                    );
                } else {
                    let half = cmma::MmaDefinition::<T, T, f32>::new(16usize, 8usize, 16usize);
                    multiply_slice::<T, NV>(
                        &half, &smem_a, &smem_b, &mut acc, s * stage_a, s * stage_b, warp_row, warp_col, lane, tile, false,
                    );
                }
            }
        }
    }
    acc
}

/// The first row and column, within the cube's tile, of the part that the plane of unit
/// `unit` owns (planes numbered along N first).
#[cube]
pub fn plane_origin(unit: usize, #[comptime] tile: MmaTile) -> (usize, usize) {
    let warp = unit / 32;
    ((warp / tile.warps_n) * (tile.block_m / tile.warps_m), (warp % tile.warps_n) * (tile.block_n / tile.warps_n))
}
