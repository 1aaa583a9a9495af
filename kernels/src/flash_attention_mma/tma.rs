//! Flash attention with its keys and values loaded by Hopper's Tensor Memory Accelerator.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use super::tile::{RowState, attend_tile, cube_origin, key_tiles, query_fragments, rows_of, write_rows};
use super::FlashTile;
use crate::tensor_core::{BOX_INNER, CHUNK, Pair, copy_tile};

/// [`flash_attention_mma`](fn@super::flash_attention_mma) with the keys and values loaded by Hopper's
/// Tensor Memory Accelerator: `k` and `v` come as tiled tensor maps over `[b · h, seq_k, d]`
/// (`kv_batched`; its first index `b · heads + h`) or `[seq_k, d]`, boxes of `[block_kv,
/// BOX_INNER]`, 128-byte swizzle, zero fill past the keys and the head dimensions; a key
/// tile's boxes land as [`boxed_chunk`](fn@crate::tensor_core::boxed_chunk) says, which for a
/// head of 64 is the `Ldmatrix` swizzle the reads already assume. Two stages, each with a
/// `full` barrier that unit 0 arms with the stage's bytes; after every unit has seen tile `t`
/// land and passed the cube's barrier (so that nobody still reads tile `t - 1`), unit 0 loads
/// tile `t + 1` into the other stage, and the copies run under tile `t`'s products. The
/// queries are staged by asynchronous copies as in the other kernel. `seq_k` and `dv` are the
/// keys' count and the values' width (the maps don't say).
///
/// The launcher guarantees what [`flash_attention_mma`](fn@super::flash_attention_mma) needs of `q`,
/// a device with TMA, `tile.tma` (f16 / bf16, `d_pad` and `dv_pad` multiples of
/// [`BOX_INNER`]).
#[cube(launch_unchecked, fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_mma_tma<T: Float, B: Numeric, NV: Size>(
    q: &Tensor<Vector<T, NV>>,
    k: &TensorMap<T, Tiled>,
    v: &TensorMap<T, Tiled>,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    out: &mut Tensor<T>,
    q_offset: usize,
    mask_offset: usize,
    bias_offset: usize,
    seq_k: usize,
    dv: usize,
    scale: InputScalar,
    softcap: InputScalar,
    tiny: InputScalar,
    num_cubes: usize,
    #[comptime] tile: FlashTile,
    #[comptime] kv_batched: bool,
    #[define(T, B)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let units = comptime!(tile.warps * 32);
    let block_q = comptime!(tile.warps * 16);
    let q_cpr = comptime!(tile.d_pad / CHUNK);
    let k_stage = comptime!(tile.block_kv * tile.d_pad / CHUNK);
    let v_stage = comptime!(tile.block_kv * tile.dv_pad / CHUNK);
    let stage_bytes = comptime!(((k_stage + v_stage) * 16) as u32);

    let heads = q.shape(1);
    let seq_q = q.shape(2);
    let d = q.shape(3);
    let (q0, b, h) = cube_origin(num_cubes, seq_q, heads, block_q);
    let unit = UNIT_POS as usize;
    let at = rows_of(q0, b, h, seq_q, seq_k, mask_offset, bias_offset, &scale, &softcap, unit);

    let mut smem_q = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(block_q * q_cpr), 128usize);
    // Boxes start on 1024-byte boundaries, as the 128-byte swizzle needs.
    let mut smem_k = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(2 * k_stage), 1024usize);
    let mut smem_v = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(2 * v_stage), 1024usize);
    let bar_q = Barrier::shared(CUBE_DIM, UNIT_POS == 0);
    let mut full = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _s in 0..2usize {
        full.push(Barrier::shared(1u32, UNIT_POS == 0));
    }
    // The barriers' initialisation, visible to the TMA unit.
    sync_async_proxy_shared();

    let num_kv = key_tiles(q0, seq_q, seq_k, tile);
    let bh = (b * heads + h) as i32;

    // The queries by copies, the first key tile by TMA beside them.
    let q_base = q_offset + b * q.stride(0) + h * q.stride(1);
    copy_tile::<T, NV>(q, &mut smem_q, q_base, q0, 0usize, q.stride(2), seq_q, d, 0usize, unit, block_q, q_cpr, units, comptime!(tile.swizzle(false)));
    bar_q.commit_copy_async();
    if unit == 0 && num_kv > 0 {
        let _token = full.index(0usize).arrive_and_expect_tx(1u32, stage_bytes);
        load_kv_tma::<T, NV>(k, v, &mut smem_k, &mut smem_v, full.index(0usize), bh, 0i32, 0usize, tile, kv_batched);
    }
    bar_q.arrive_and_wait();

    let def = cmma::MmaDefinition::<T, T, f32>::new(16usize, 8usize, 16usize);
    let mut q_frags = Sequence::<Array<Vector<T, Pair>>>::new();
    let mut q_tf32 = Sequence::<Array<Vector<T, Const<1>>>>::new();
    query_fragments::<T, T, NV>(&def, &smem_q, &mut q_frags, &mut q_tf32, unit, tile);
    let mut state = RowState::new(&def, tile);

    for t0 in range_stepped(0usize, num_kv, 2usize) {
        // Stage s's use by tile t0 + s is its (t0 / 2)-th: its barrier's phase.
        let phase = ((t0 / 2) % 2) as u32;
        #[unroll]
        for s in 0..2usize {
            let t = t0 + s;
            if t < num_kv {
                full.index(s).wait_parity(phase);
                // Every unit is past tile t - 1: its stage takes tile t + 1.
                sync_cube();
                let next_stage = comptime!((s + 1) % 2);
                if unit == 0 && t + 1 < num_kv {
                    let _token = full.index(next_stage).arrive_and_expect_tx(1u32, stage_bytes);
                    load_kv_tma::<T, NV>(
                        k, v, &mut smem_k, &mut smem_v, full.index(next_stage), bh, ((t + 1) * tile.block_kv) as i32, next_stage,
                        tile, kv_batched,
                    );
                }
                attend_tile::<T, T, B, NV>(
                    &def, &def, &q_frags, &q_tf32, &smem_q, &smem_k, &smem_v, &mut state, mask, bias, &at, t * tile.block_kv, s, unit,
                    tile,
                );
            }
        }
    }
    write_rows::<T>(&state, out, &at, heads, dv, &tiny, tile);
}

/// Issues the TMA loads of keys and values `kv0..kv0 + block_kv` of head `bh` into stage
/// `stage`, completing on `bar`: each a box of `[block_kv, BOX_INNER]` per 64 dimensions, box
/// `i` at chunk `i · block_kv · 8` of the stage.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_kv_tma<T: Float, NV: Size>(
    k: &TensorMap<T, Tiled>,
    v: &TensorMap<T, Tiled>,
    smem_k: &mut SharedMemory<Vector<T, NV>>,
    smem_v: &mut SharedMemory<Vector<T, NV>>,
    bar: &Shared<Barrier>,
    bh: i32,
    kv0: i32,
    #[comptime] stage: usize,
    #[comptime] tile: FlashTile,
    #[comptime] batched: bool,
) {
    load_rows_tma::<T, NV>(k, smem_k, bar, bh, kv0, comptime!(stage * tile.block_kv * tile.d_pad / CHUNK), tile.block_kv, tile.d_pad, batched);
    load_rows_tma::<T, NV>(v, smem_v, bar, bh, kv0, comptime!(stage * tile.block_kv * tile.dv_pad / CHUNK), tile.block_kv, tile.dv_pad, batched);
}

/// One operand's boxes of [`load_kv_tma`](fn@load_kv_tma): `rows` rows from `row0`, `width`
/// dimensions, landing from chunk `dst`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_rows_tma<T: Float, NV: Size>(
    map: &TensorMap<T, Tiled>,
    smem: &mut SharedMemory<Vector<T, NV>>,
    bar: &Shared<Barrier>,
    bh: i32,
    row0: i32,
    #[comptime] dst: usize,
    #[comptime] rows: usize,
    #[comptime] width: usize,
    #[comptime] batched: bool,
) {
    let box_chunks = comptime!(rows * BOX_INNER / CHUNK);
    #[unroll]
    for i in 0..comptime!(width / BOX_INNER) {
        let at = comptime!(dst + i * box_chunks);
        let mut to = smem.slice_mut(at, at + box_chunks);
        let col = comptime!((i * BOX_INNER) as i32);
        if batched {
            bar.tma_load_3d(map, &mut to, bh, row0, col);
        } else {
            bar.tma_load_2d(map, &mut to, row0, col);
        }
    }
}
