//! The f16 / bf16 matmul on manual MMA ([`super::mma`]) with its operands loaded by Hopper's
//! Tensor Memory Accelerator (TMA, CUDA compute capability 9.0 and later).
//!
//! Each operand comes as a tiled tensor map (`TensorMap<T, Tiled>`, made by the launcher over
//! the operand's matrix, or its matrices with one batch dimension in front): the hardware
//! computes the addresses, fills what lies past the matrix's edges with zeros and swizzles the
//! tile into shared memory (128-byte swizzle), so the warps issue no copies, no bounds checks
//! and no swizzled stores. A K slice of an operand is cut along the operand's contiguous
//! dimension into boxes of [`BOX_INNER`] elements (128-byte rows), one TMA load per box:
//! one box for a K-major operand (`block_k` is [`BOX_INNER`]), `block_m / 64` or `block_n /
//! 64` for an M- or N-major one. [`boxed_chunk`](fn@crate::tensor_core::boxed_chunk) says where a chunk lands, and
//! [`multiply_slice`](fn@multiply_slice) reads the fragments from there with `ldmatrix`.
//!
//! The ring of `stages` slices has two barriers per stage: `full` (one arrival, unit 0's,
//! which also expects the stage's bytes; the TMA loads complete it) and `empty` (every unit
//! arrives once it has multiplied the slice). Unit 0 is the producer: after multiplying slice
//! `t` it waits for `empty` of its stage and loads slice `t + stages` there. The other planes
//! never wait on each other, only on `full`: a plane runs up to `stages - 1` slices ahead of
//! the slowest one.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use super::mma::{MmaTile, multiply_slice, write_accumulators};
use super::pipeline::plane_origin;
use crate::strided::umin;
use crate::tensor_core::{BOX_INNER, CHUNK, zero_accumulators};

/// `out[b] = lhs[b] @ rhs[b]` with TMA loads; see the module docs. `NV` is the 16-byte chunk
/// ([`CHUNK`] elements of `T`), `NO` (1 or 2) the output's vector size. `lhs` is a map over
/// `[M, K]` (`tile.lhs_k_major`) or `[K, M]`, `rhs` over `[N, K]` (`tile.rhs_k_major`) or
/// `[K, N]`, each with a batch dimension in front when `lhs_batched` / `rhs_batched` (its
/// index the output's batch index; else every batch reads the same matrix); boxes of
/// `[rows, BOX_INNER]` as [`box_rows`] says, 128-byte swizzle, zero fill. `k` is the product's
/// K. Split K as [`super::mma::matmul_mma`]'s: cube `c` runs K slices `s · split_len ..` for
/// `s = c / split_cubes` into the output's copy `s` (`output` `[splits, batch.., M, N]` of `O`).
///
/// The launcher guarantees: a device with TMA, `mma.sync` m16n8k16 and `ldmatrix` for `T`,
/// 32-unit planes; `tile.block_k` = [`BOX_INNER`], `block_m` and `block_n` multiples of 64 and
/// at most 256, `16 * warps_m` dividing `block_m` and `16 * warps_n` dividing `block_n`; not
/// `tile.tf32`; `NO` divides N; every split starts before K's last slice.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn matmul_mma_tma<T: Float, O: Float, NV: Size, NO: Size>(
    lhs: &TensorMap<T, Tiled>,
    rhs: &TensorMap<T, Tiled>,
    output: &mut Tensor<Vector<O, NO>>,
    k: usize,
    split_cubes: usize,
    split_len: usize,
    num_cubes: usize,
    #[comptime] tile: MmaTile,
    #[comptime] lhs_batched: bool,
    #[comptime] rhs_batched: bool,
    #[define(T, O)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let rank = output.rank();
    let m = output.shape(rank - 2);
    let n = output.shape(rank - 1);
    let tiles_n = n.div_ceil(tile.block_n);
    let tiles_m = m.div_ceil(tile.block_m);
    let col0 = (CUBE_POS % tiles_n) * tile.block_n;
    let row0 = ((CUBE_POS / tiles_n) % tiles_m) * tile.block_m;
    // The output's batch index counts the splits' copies; the operands' doesn't.
    let out_batch = CUBE_POS / (tiles_n * tiles_m);
    let batch = (CUBE_POS % split_cubes) / (tiles_n * tiles_m);
    let first = (CUBE_POS / split_cubes) * split_len;

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

    let num_k = umin(split_len, k.div_ceil(tile.block_k) - first);
    let bi = batch as i32;
    let (r0, c0) = (row0 as i32, col0 as i32);

    // Prologue: slices 0 .. stages in flight.
    if unit == 0 {
        #[unroll]
        for s in 0..stages {
            if s < num_k {
                let _token = full.index(s).arrive_and_expect_tx(1u32, stage_bytes);
                load_slice::<T, NV>(lhs, rhs, &mut smem_a, &mut smem_b, full.index(s), ((first + s) * tile.block_k) as i32, r0, c0, bi, s, tile, lhs_batched, rhs_batched);
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
                    load_slice::<T, NV>(lhs, rhs, &mut smem_a, &mut smem_b, full.index(s), ((first + next) * tile.block_k) as i32, r0, c0, bi, s, tile, lhs_batched, rhs_batched);
                }
            }
        }
    }

    write_accumulators::<O, T, NO>(
        &def,
        output,
        &acc,
        out_batch * m * n,
        row0 + warp_row,
        col0 + warp_col,
        m,
        n,
        lane,
        comptime!(tile.block_m / tile.warps_m),
        comptime!(tile.block_n / tile.warps_n),
    );
}

/// Rows of one TMA box of an operand's slice: the output tile's rows or columns (`mn`) when
/// the operand is K-major, else `block_k`; the box is [`BOX_INNER`] elements wide.
pub fn box_rows(k_major: bool, mn: usize, block_k: usize) -> usize {
    if k_major { mn } else { block_k }
}

/// Issues the TMA loads of K slice `k0..k0 + block_k` of both operands into stage `stage`,
/// completing on `bar`: each operand's boxes along its contiguous dimension, box `h` at
/// chunk `h * rows * 8` of the stage (see [`boxed_chunk`](fn@crate::tensor_core::boxed_chunk)).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_slice<T: Float, NV: Size>(
    lhs: &TensorMap<T, Tiled>,
    rhs: &TensorMap<T, Tiled>,
    smem_a: &mut SharedMemory<Vector<T, NV>>,
    smem_b: &mut SharedMemory<Vector<T, NV>>,
    bar: &Shared<Barrier>,
    k0: i32,
    row0: i32,
    col0: i32,
    batch: i32,
    #[comptime] stage: usize,
    #[comptime] tile: MmaTile,
    #[comptime] lhs_batched: bool,
    #[comptime] rhs_batched: bool,
) {
    load_operand::<T, NV>(lhs, smem_a, bar, k0, row0, batch, comptime!(stage * tile.stage_a()), tile.lhs_k_major, tile.block_m, tile.block_k, lhs_batched);
    load_operand::<T, NV>(rhs, smem_b, bar, k0, col0, batch, comptime!(stage * tile.stage_b()), tile.rhs_k_major, tile.block_n, tile.block_k, rhs_batched);
}

/// One operand's boxes of a K slice (see [`load_slice`](fn@load_slice)): `mn0` is the tile's
/// first row (`lhs`) or column (`rhs`), `mn` the tile's extent there.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_operand<T: Float, NV: Size>(
    map: &TensorMap<T, Tiled>,
    smem: &mut SharedMemory<Vector<T, NV>>,
    bar: &Shared<Barrier>,
    k0: i32,
    mn0: i32,
    batch: i32,
    #[comptime] dst: usize,
    #[comptime] k_major: bool,
    #[comptime] mn: usize,
    #[comptime] block_k: usize,
    #[comptime] batched: bool,
) {
    let rows = comptime!(box_rows(k_major, mn, block_k));
    let boxes = comptime!(if k_major { 1 } else { mn / BOX_INNER });
    let box_chunks = comptime!(rows * BOX_INNER / CHUNK);
    #[unroll]
    for h in 0..boxes {
        let at = comptime!(dst + h * box_chunks);
        let mut to = smem.slice_mut(at, at + box_chunks);
        // Coordinates outermost first: (batch,) row of the box, element along the row.
        let outer = if k_major { mn0 } else { k0 };
        let inner = if k_major { k0 } else { mn0 + comptime!((h * BOX_INNER) as i32) };
        if batched {
            bar.tma_load_3d(map, &mut to, batch, outer, inner);
        } else {
            bar.tma_load_2d(map, &mut to, outer, inner);
        }
    }
}
