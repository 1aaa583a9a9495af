//! Scaled dot-product attention in one kernel on the matrix units' own instructions, with the
//! pieces of [`crate::tensor_core`]: `mma.sync` m16n8k16 on f16 / bf16 operands, or m16n8k8
//! on f32 operands rounded to TF32 (`tile.tf32`), f32 accumulators; FlashAttention-2's
//! scheme, everything of a row in registers.
//!
//! Each cube takes `16 · warps` query rows of one (batch, head); each plane owns 16 of them.
//! The cube stages its queries once, and then the keys and values tile by tile (`block_kv`
//! keys), through a two-stage pipeline of asynchronous copies (16-byte chunks, swizzled for
//! `ldmatrix`, zero past the sequence and past the head dimensions, which are padded to
//! powers of two). A plane holds its queries as A fragments (`ldmatrix`, once), and per key
//! tile:
//!
//! 1. `S = Q·Kᵀ` into m16n8 f32 accumulators (keys read by `ldmatrix` as B fragments, or
//!    for TF32 by 16-byte shared loads, as the TF32 matmul reads a K-major operand);
//! 2. each score becomes a logit in place (scale, soft cap, additive bias, boolean mask,
//!    causal mask aligned bottom-right, keys past the sequence), masked logits `MASKED`;
//!    a unit holds two rows (`g` and `g + 8`, lane = 4g + t) and the four units of a row
//!    agree on its running maximum by two shuffles;
//! 3. the logits become probabilities `exp(logit - max)` in place, the unit's part of each
//!    row sum and the output accumulators are rescaled by `exp(old max - new max)`;
//! 4. `O += P·V`: the probabilities' accumulators are the A fragments of the second product
//!    as they lie (an m16n8 accumulator pair holds what an m16n8k16 A fragment holds of 16
//!    keys), converted to the operands' type; values read by `ldmatrix` transposed. For TF32,
//!    an accumulator holds what an m16n8k8 A fragment holds of its 8 keys once K position
//!    `t` is taken as key `2t` and `t + 4` as key `2t + 1`; values are read element by
//!    element at the same keys (rows `2t`, `2t + 1`: [`Swizzle::Tf32Pairs`]).
//!
//! At the end the four units of a row sum their parts, and each row is divided by its sum
//! (at least `tiny`, so that a fully masked row gives zeros, as the unfused path does).
//!
//! On Hopper the f16 / bf16 kernel's keys and values come by TMA instead of copies
//! ([`flash_attention_mma_tma`](fn@flash_attention_mma_tma)): one unit issues a tile's loads,
//! the hardware computes the addresses, zero-fills past the keys and swizzles, and the same
//! per-tile code ([`attend_tile`](fn@attend_tile)) reads the boxes.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use crate::tensor_core::{
    BOX_INNER, CHUNK, CHUNK_F32, Pair, Swizzle, copy_tile, element_at, fragment_chunk, fragment_chunk_boxed, zero_accumulators,
};

/// The logit of a masked score: below any logit a kept score has. A row's maximum stays at it
/// until the row keeps a score, and probabilities are then taken against 0 (giving 0).
const MASKED: f32 = f32::MIN;

/// The comptime shape and options of a [`flash_attention_mma`](fn@flash_attention_mma) launch.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct FlashTile {
    /// Planes per cube (16 query rows each).
    pub warps: usize,
    /// Keys per tile (a multiple of 16).
    pub block_kv: usize,
    /// The query / key head dimension, padded (a power of two, at least 16).
    pub d_pad: usize,
    /// The value head dimension, padded (a power of two, at least 16).
    pub dv_pad: usize,
    /// A boolean mask (true: masked out) is read.
    pub has_mask: bool,
    /// An additive bias is read.
    pub has_bias: bool,
    /// Logits are capped: `cap · tanh(logit / cap)`.
    pub has_softcap: bool,
    /// Key `j` is masked for query `i` where `j > i + seq_k - seq_q`.
    pub causal: bool,
    /// f32 operands rounded to TF32 (m16n8k8; head dimensions padded to at least 32), else
    /// f16 / bf16 (m16n8k16).
    pub tf32: bool,
    /// A plane reads its query fragments from shared memory at every key tile (fewer
    /// registers) instead of holding them in registers from the start.
    pub reload_q: bool,
    /// Keys and values are staged by TMA ([`flash_attention_mma_tma`](fn@flash_attention_mma_tma),
    /// f16 / bf16 only), in boxes of [`BOX_INNER`] dimensions.
    pub tma: bool,
}

impl FlashTile {
    /// Elements of a 16-byte chunk of the operands.
    pub fn chunk(&self) -> usize {
        if self.tf32 { CHUNK_F32 } else { CHUNK }
    }

    /// How the staged queries and keys (`values: false`) or values are permuted.
    pub fn swizzle(&self, values: bool) -> Swizzle {
        match (self.tf32, values) {
            (false, _) => Swizzle::Ldmatrix,
            (true, false) => Swizzle::Tf32Chunks,
            (true, true) => Swizzle::Tf32Pairs,
        }
    }
}

/// `q` `[b, h, seq_q, d]`, `k` `[b, h, seq_k, d]` and `v` `[b, h, seq_k, dv]` are strided views
/// with offsets, read in 16-byte chunks (`NV` = `tile.chunk()` elements); `F` is the fragments'
/// type (`T` itself, or TF32 for f32); `mask` and `bias` are views of the
/// scores' shape `[b, h, seq_q, seq_k]` (stride 0 where broadcast); `out` `[b, h, seq_q, dv]` is
/// contiguous. Cubes are numbered over `(query tile, b, h)`, heads fastest, query tiles from
/// the last (`num_cubes` is their product). `scale`,
/// `softcap` and `tiny` (the dtype's smallest positive normal) are f32.
///
/// The launcher guarantees: a device with `mma.sync` m16n8k16 and `ldmatrix` for `T` (or
/// m16n8k8 for TF32), 32-unit planes; `q`, `k` and `v` contiguous along their last dimension,
/// whose length, their other strides and their offsets are multiples of the chunk; `d ≤ d_pad`,
/// `dv ≤ dv_pad` (at least 32 for TF32); the cube's units divide the chunks of a key tile;
/// not `tile.tma`.
#[cube(launch_unchecked, fast_math = FastMath::ReducedPrecision | FastMath::NotNaN | FastMath::NotInf)]
#[allow(clippy::too_many_arguments)]
pub fn flash_attention_mma<T: Float, F: Float, B: Numeric, NV: Size>(
    q: &Tensor<Vector<T, NV>>,
    k: &Tensor<Vector<T, NV>>,
    v: &Tensor<Vector<T, NV>>,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    out: &mut Tensor<T>,
    q_offset: usize,
    k_offset: usize,
    v_offset: usize,
    mask_offset: usize,
    bias_offset: usize,
    scale: InputScalar,
    softcap: InputScalar,
    tiny: InputScalar,
    num_cubes: usize,
    #[comptime] tile: FlashTile,
    #[define(T, F, B)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let units = comptime!(tile.warps * 32);
    let block_q = comptime!(tile.warps * 16);
    let q_cpr = comptime!(tile.d_pad / tile.chunk());

    let heads = q.shape(1);
    let seq_q = q.shape(2);
    let seq_k = k.shape(2);
    let d = q.shape(3);
    let dv = v.shape(3);
    let (q0, b, h) = cube_origin(num_cubes, seq_q, heads, block_q);
    let unit = UNIT_POS as usize;
    let at = rows_of(q0, b, h, seq_q, seq_k, mask_offset, bias_offset, &scale, &softcap, unit);

    let mut smem_q = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(block_q * q_cpr), 128usize);
    let mut smem_k = SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(2 * tile.block_kv * q_cpr), 128usize);
    let mut smem_v =
        SharedMemory::<Vector<T, NV>>::new_aligned(comptime!(2 * tile.block_kv * (tile.dv_pad / tile.chunk())), 128usize);
    let bar_q = Barrier::shared(CUBE_DIM, UNIT_POS == 0);
    let mut bars = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _s in 0..2usize {
        bars.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }

    let q_base = q_offset + b * q.stride(0) + h * q.stride(1);
    let k_base = k_offset + b * k.stride(0) + h * k.stride(1);
    let v_base = v_offset + b * v.stride(0) + h * v.stride(1);
    let num_kv = key_tiles(q0, seq_q, seq_k, tile);

    // The queries, and the first key tile beside them.
    copy_tile::<T, NV>(q, &mut smem_q, q_base, q0, 0usize, q.stride(2), seq_q, d, 0usize, unit, block_q, q_cpr, units, comptime!(tile.swizzle(false)));
    bar_q.commit_copy_async();
    if num_kv > 0 {
        copy_kv::<T, NV>(k, v, &mut smem_k, &mut smem_v, k_base, v_base, 0usize, seq_k, d, dv, 0usize, unit, tile);
    }
    bars.index(0usize).commit_copy_async();
    bar_q.arrive_and_wait();

    let def = cmma::MmaDefinition::<T, T, f32>::new(16usize, 8usize, 16usize);
    let def_tf32 = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, 8usize);
    let mut q_frags = Sequence::<Array<Vector<T, Pair>>>::new();
    let mut q_tf32 = Sequence::<Array<Vector<F, Const<1>>>>::new();
    query_fragments::<T, F, NV>(&def, &smem_q, &mut q_frags, &mut q_tf32, unit, tile);
    let mut state = RowState::new(&def, tile);

    // Tile `t` lives in stage `t % 2`; the loop is unrolled by 2 so that stages and barriers
    // are known at compile time.
    for t0 in range_stepped(0usize, num_kv, 2usize) {
        #[unroll]
        for s in 0..2usize {
            let t = t0 + s;
            if t < num_kv {
                // Tile t has landed, and every unit is done with tile t - 1, whose stage the
                // copies of tile t + 1 reuse.
                bars.index(s).arrive_and_wait();
                let next_stage = comptime!((s + 1) % 2);
                if t + 1 < num_kv {
                    copy_kv::<T, NV>(
                        k, v, &mut smem_k, &mut smem_v, k_base, v_base, (t + 1) * tile.block_kv, seq_k, d, dv,
                        next_stage, unit, tile,
                    );
                }
                bars.index(next_stage).commit_copy_async();
                attend_tile::<T, F, B, NV>(
                    &def, &def_tf32, &q_frags, &q_tf32, &smem_q, &smem_k, &smem_v, &mut state, mask, bias, &at, t * tile.block_kv, s,
                    unit, tile,
                );
            }
        }
    }
    write_rows::<T>(&state, out, &at, heads, dv, &tiny, tile);
}

/// [`flash_attention_mma`](fn@flash_attention_mma) with the keys and values loaded by Hopper's
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
/// The launcher guarantees what [`flash_attention_mma`](fn@flash_attention_mma) needs of `q`,
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

/// Where a unit's rows lie and how their scores become logits: `row0` and `row0 + 8` are the
/// rows of its accumulators, `quad` its pair of columns in each m16n8 fragment (`2 · quad`,
/// `2 · quad + 1`); the rest is the kernel's arguments of the same names.
#[derive(CubeType, Clone, Copy)]
struct Rows {
    row0: usize,
    quad: usize,
    b: usize,
    h: usize,
    seq_q: usize,
    seq_k: usize,
    mask_offset: usize,
    bias_offset: usize,
    scale: f32,
    cap: f32,
}

/// The unit's [`Rows`] in query tile `q0` of `(b, h)`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn rows_of(
    q0: usize,
    b: usize,
    h: usize,
    seq_q: usize,
    seq_k: usize,
    mask_offset: usize,
    bias_offset: usize,
    scale: &InputScalar,
    softcap: &InputScalar,
    unit: usize,
) -> Rows {
    let lane = unit % 32;
    Rows {
        row0: q0 + (unit / 32) * 16 + lane / 4,
        quad: lane % 4,
        b,
        h,
        seq_q,
        seq_k,
        mask_offset,
        bias_offset,
        scale: scale.get::<f32>(),
        cap: softcap.get::<f32>(),
    }
}

/// A unit's running state over the key tiles: the output accumulators (`tile.dv_pad / 8`
/// m16n8 fragments) and, for its rows `row0` and `row0 + 8`, the running maximum and its part
/// of the running sum.
#[derive(CubeType)]
struct RowState {
    o: Sequence<Array<Vector<f32, Pair>>>,
    row_max: Array<f32>,
    row_sum: Array<f32>,
}

#[cube]
impl RowState {
    /// Nothing seen yet.
    fn new<T: Float>(def: &cmma::MmaDefinition<T, T, f32>, #[comptime] tile: FlashTile) -> RowState {
        let mut row_max = Array::<f32>::new(2usize);
        let mut row_sum = Array::<f32>::new(2usize);
        #[unroll]
        for r in 0..2usize {
            row_max[r] = MASKED;
            row_sum[r] = 0.0;
        }
        RowState { o: zero_accumulators(def, comptime!(tile.dv_pad / 8)), row_max, row_sum }
    }
}

/// This cube's query tile (its first row), batch entry and head. Query tiles run slowest and
/// backwards, so that under a causal mask the cubes with the most keys start first and the
/// short ones fill the last wave.
#[cube]
fn cube_origin(num_cubes: usize, seq_q: usize, heads: usize, #[comptime] block_q: usize) -> (usize, usize, usize) {
    let tiles_q = seq_q.div_ceil(block_q);
    let planes = num_cubes / tiles_q;
    let q0 = (tiles_q - 1 - CUBE_POS / planes) * block_q;
    (q0, (CUBE_POS % planes) / heads, CUBE_POS % heads)
}

/// The key tiles query tile `q0` reads: all of them, or under a causal mask those up to the
/// last key its last row may see.
#[cube]
fn key_tiles(q0: usize, seq_q: usize, seq_k: usize, #[comptime] tile: FlashTile) -> usize {
    let block_q = comptime!(tile.warps * 16);
    let mut kv_end = seq_k;
    if tile.causal {
        let last_row = select(q0 + block_q < seq_q, q0 + block_q, seq_q);
        let reach = last_row + seq_k;
        kv_end = select(reach > seq_q, reach - seq_q, 0usize);
        kv_end = select(kv_end < seq_k, kv_end, seq_k);
    }
    kv_end.div_ceil(tile.block_kv)
}

/// The plane's queries as A fragments, unless `tile.reload_q` (then read again at every key
/// tile): f16 / bf16 per 16 dimensions into `frags`, or TF32 per 8 into `tf32` (those of
/// 16-dimension window `w`: K position `c` of its step `s` is dimension
/// `16w + 4 (c % 4) + 2s + c / 4`, so that a unit's elements of both steps are one chunk).
#[cube]
fn query_fragments<T: Float, F: Float, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    smem_q: &SharedMemory<Vector<T, NV>>,
    frags: &mut Sequence<Array<Vector<T, Pair>>>,
    tf32: &mut Sequence<Array<Vector<F, Const<1>>>>,
    unit: usize,
    #[comptime] tile: FlashTile,
) {
    let q_cpr = comptime!(tile.d_pad / tile.chunk());
    let warp = unit / 32;
    let lane = unit % 32;
    if tile.reload_q {
        // Read again at every key tile.
    } else if tile.tf32 {
        #[unroll]
        for w in 0..tile.d_pad / 16 {
            let (f0, f1) = query_tf32::<T, F, NV>(smem_q, warp * 16 + lane / 4, w, lane % 4, q_cpr);
            tf32.push(f0);
            tf32.push(f1);
        }
    } else {
        #[unroll]
        for ks in 0..tile.d_pad / 16 {
            let at = fragment_chunk(warp * 16, ks * 2, lane, true, q_cpr);
            frags.push(def.load_matrix::<Vector<T, NV>, Pair>(&smem_q.slice(at, at + 1), cmma::MatrixIdent::A, 4usize, false));
        }
    }
}

/// One key tile (keys `kv0..`, staged in stage `stage`) for the plane's rows: scores, logits,
/// the running maximum and sum, probabilities, and `o += P·V` (see the module docs).
#[cube]
#[allow(clippy::too_many_arguments)]
fn attend_tile<T: Float, F: Float, B: Numeric, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    def_tf32: &cmma::MmaDefinition<F, F, f32>,
    q_frags: &Sequence<Array<Vector<T, Pair>>>,
    q_tf32: &Sequence<Array<Vector<F, Const<1>>>>,
    smem_q: &SharedMemory<Vector<T, NV>>,
    smem_k: &SharedMemory<Vector<T, NV>>,
    smem_v: &SharedMemory<Vector<T, NV>>,
    state: &mut RowState,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    at: &Rows,
    kv0: usize,
    #[comptime] stage: usize,
    unit: usize,
    #[comptime] tile: FlashTile,
) {
    let frags_s = comptime!(tile.block_kv / 8);
    let frags_o = comptime!(tile.dv_pad / 8);
    let warp = unit / 32;
    let lane = unit % 32;
    let mut scores = zero_accumulators(def, frags_s);
    if tile.tf32 {
        multiply_keys_tf32::<T, F, NV>(def_tf32, q_tf32, smem_q, smem_k, &mut scores, stage, warp, lane, tile);
    } else {
        multiply_keys::<T, NV>(def, q_frags, smem_q, smem_k, &mut scores, stage, warp, lane, tile);
    }

    #[unroll]
    for r in 0..2usize {
        let row = at.row0 + 8 * r;
        let mut tile_max = f32::new(MASKED);
        #[unroll]
        for j in 0..frags_s {
            let frag = scores.index_mut(j);
            let mut pair = frag[r];
            #[unroll]
            for e in 0..2usize {
                let key = kv0 + j * 8 + 2 * at.quad + e;
                let x = logit::<T, B>(
                    pair[e], row, key, at.b, at.h, at.seq_q, at.seq_k, mask, bias, at.mask_offset, at.bias_offset, at.scale,
                    at.cap, tile,
                );
                pair[e] = x;
                tile_max = select(x > tile_max, x, tile_max);
            }
            frag[r] = pair;
        }
        tile_max = max_f32(tile_max, plane_shuffle_xor(tile_max, 1u32));
        tile_max = max_f32(tile_max, plane_shuffle_xor(tile_max, 2u32));
        let new_max = max_f32(state.row_max[r], tile_max);
        // Against 0 while the row keeps nothing: its probabilities are all 0.
        let base = select(new_max == MASKED, 0.0f32, new_max);
        let alpha = f32::exp(state.row_max[r] - base);
        state.row_max[r] = new_max;

        let mut part = 0.0f32;
        #[unroll]
        for j in 0..frags_s {
            let frag = scores.index_mut(j);
            let mut pair = frag[r];
            #[unroll]
            for e in 0..2usize {
                let p = f32::exp(pair[e] - base);
                pair[e] = p;
                part += p;
            }
            frag[r] = pair;
        }
        state.row_sum[r] = state.row_sum[r] * alpha + part;
        #[unroll]
        for j in 0..frags_o {
            let frag = state.o.index_mut(j);
            frag[r] = frag[r] * Vector::<f32, Pair>::cast_from(alpha);
        }
    }

    if tile.tf32 {
        multiply_values_tf32::<T, F, NV>(def_tf32, &scores, smem_v, &mut state.o, stage, lane, tile);
    } else {
        multiply_values::<T, NV>(def, &scores, smem_v, &mut state.o, stage, lane, tile);
    }
}

/// The output rows: the four units of a row sum their parts, and each row is divided by its
/// sum (at least `tiny`, so that a fully masked row gives zeros, as the unfused path does).
#[cube]
fn write_rows<T: Float>(
    state: &RowState,
    out: &mut Tensor<T>,
    at: &Rows,
    heads: usize,
    dv: usize,
    tiny: &InputScalar,
    #[comptime] tile: FlashTile,
) {
    let t = tiny.get::<f32>();
    #[unroll]
    for r in 0..2usize {
        let mut total = state.row_sum[r];
        total += plane_shuffle_xor(total, 1u32);
        total += plane_shuffle_xor(total, 2u32);
        total = select(total < t, t, total);
        let inv = 1.0f32 / total;
        let row = at.row0 + 8 * r;
        if row < at.seq_q {
            let out_row = ((at.b * heads + at.h) * at.seq_q + row) * dv;
            #[unroll]
            for j in 0..comptime!(tile.dv_pad / 8) {
                let pair = state.o.index(j)[r];
                #[unroll]
                for e in 0..2usize {
                    let col = j * 8 + 2 * at.quad + e;
                    if col < dv {
                        out[out_row + col] = T::cast_from(pair[e] * inv);
                    }
                }
            }
        }
    }
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

/// The larger of two f32.
#[cube]
fn max_f32(a: f32, b: f32) -> f32 {
    select(a > b, a, b)
}

/// Starts the asynchronous copies of keys and values `kv0..kv0 + block_kv` into stage `stage`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_kv<T: Float, NV: Size>(
    k: &Tensor<Vector<T, NV>>,
    v: &Tensor<Vector<T, NV>>,
    smem_k: &mut SharedMemory<Vector<T, NV>>,
    smem_v: &mut SharedMemory<Vector<T, NV>>,
    k_base: usize,
    v_base: usize,
    kv0: usize,
    seq_k: usize,
    d: usize,
    dv: usize,
    #[comptime] stage: usize,
    unit: usize,
    #[comptime] tile: FlashTile,
) {
    let units = comptime!(tile.warps * 32);
    let k_cpr = comptime!(tile.d_pad / tile.chunk());
    let v_cpr = comptime!(tile.dv_pad / tile.chunk());
    copy_tile::<T, NV>(k, smem_k, k_base, kv0, 0usize, k.stride(2), seq_k, d, comptime!(stage * tile.block_kv * k_cpr), unit, tile.block_kv, k_cpr, units, comptime!(tile.swizzle(false)));
    copy_tile::<T, NV>(v, smem_v, v_base, kv0, 0usize, v.stride(2), seq_k, dv, comptime!(stage * tile.block_kv * v_cpr), unit, tile.block_kv, v_cpr, units, comptime!(tile.swizzle(true)));
}

/// The plane's scores `Q·Kᵀ` of the key tile in stage `stage` into `scores` (zeroed; fragment
/// `j` holds keys `8j..8j + 8`): query fragments from `q_frags`, or from `smem_q` where
/// `tile.reload_q`. Keys are rows of K-major chunks: B fragments, two per `ldmatrix.x4`,
/// untransposed.
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply_keys<T: Float, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    q_frags: &Sequence<Array<Vector<T, Pair>>>,
    smem_q: &SharedMemory<Vector<T, NV>>,
    smem_k: &SharedMemory<Vector<T, NV>>,
    scores: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] stage: usize,
    warp: usize,
    lane: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.d_pad / CHUNK);
    let base = comptime!(stage * tile.block_kv * cpr);
    #[unroll]
    for ks in 0..tile.d_pad / 16 {
        if tile.reload_q {
            let at = fragment_chunk(warp * 16, ks * 2, lane, true, cpr);
            let a = def.load_matrix::<Vector<T, NV>, Pair>(&smem_q.slice(at, at + 1), cmma::MatrixIdent::A, 4usize, false);
            multiply_key_step::<T, NV>(def, &a, smem_k, scores, base, ks, lane, tile);
        } else {
            multiply_key_step::<T, NV>(def, q_frags.index(ks), smem_k, scores, base, ks, lane, tile);
        }
    }
}

/// One 16-dimension step `ks` of [`multiply_keys`] with query fragment `a`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply_key_step<T: Float, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    a: &Array<Vector<T, Pair>>,
    smem_k: &SharedMemory<Vector<T, NV>>,
    scores: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] base: usize,
    #[comptime] ks: usize,
    lane: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.d_pad / CHUNK);
    #[unroll]
    for jj in 0..tile.block_kv / 16 {
        let at = base + kv_fragment_chunk(jj * 16, ks * 2, lane, false, cpr, tile);
        let quad = def.load_matrix::<Vector<T, NV>, Pair>(&smem_k.slice(at, at + 1), cmma::MatrixIdent::B, 4usize, false);
        let (b0, b1) = split_pair::<T>(&quad);
        def.execute_inplace(a, &b0, scores.index_mut(2 * jj));
        def.execute_inplace(a, &b1, scores.index_mut(2 * jj + 1));
    }
}

/// `o += P·V` for the value tile in stage `stage`: the probabilities' fragments `2kk` and
/// `2kk + 1` (keys `16kk..16kk + 16`) are the A fragment of step `kk`; values are rows of
/// N-major chunks, read transposed as B fragments, two per `ldmatrix.x4`.
#[cube]
fn multiply_values<T: Float, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    probs: &Sequence<Array<Vector<f32, Pair>>>,
    smem_v: &SharedMemory<Vector<T, NV>>,
    o: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] stage: usize,
    lane: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.dv_pad / CHUNK);
    let base = comptime!(stage * tile.block_kv * cpr);
    #[unroll]
    for kk in 0..tile.block_kv / 16 {
        let lo = probs.index(2 * kk);
        let hi = probs.index(2 * kk + 1);
        let mut a = Array::<Vector<T, Pair>>::new(4usize);
        a[0] = to_operand::<T>(lo[0]);
        a[1] = to_operand::<T>(lo[1]);
        a[2] = to_operand::<T>(hi[0]);
        a[3] = to_operand::<T>(hi[1]);
        #[unroll]
        for jj in 0..tile.dv_pad / 16 {
            let at = base + kv_fragment_chunk(kk * 16, jj * 2, lane, true, cpr, tile);
            let quad = def.load_matrix::<Vector<T, NV>, Pair>(&smem_v.slice(at, at + 1), cmma::MatrixIdent::B, 4usize, true);
            let (b0, b1) = split_pair::<T>(&quad);
            def.execute_inplace(&a, &b0, o.index_mut(2 * jj));
            def.execute_inplace(&a, &b1, o.index_mut(2 * jj + 1));
        }
    }
}

/// The chunk of a staged key or value tile that this lane hands to `ldmatrix` (see
/// [`fragment_chunk`](fn@fragment_chunk)): in the copies' swizzle, or in TMA's boxes of
/// `block_kv` rows (`tile.tma`).
#[cube]
fn kv_fragment_chunk(
    row0: usize,
    chunk0: usize,
    lane: usize,
    #[comptime] rows_first: bool,
    #[comptime] cpr: usize,
    #[comptime] tile: FlashTile,
) -> usize {
    if tile.tma {
        fragment_chunk_boxed(row0, chunk0, lane, rows_first, tile.block_kv)
    } else {
        fragment_chunk(row0, chunk0, lane, rows_first, cpr)
    }
}

/// The TF32 A fragments of 16-dimension window `w` (its two steps of 8) for rows `row` and
/// `row + 8` of the staged queries: this unit's chunk `4w + quad` of each row (see the kernel).
#[cube]
fn query_tf32<T: Float, F: Float, NV: Size>(
    smem_q: &SharedMemory<Vector<T, NV>>,
    row: usize,
    w: usize,
    quad: usize,
    #[comptime] cpr: usize,
) -> (Array<Vector<F, Const<1>>>, Array<Vector<F, Const<1>>>) {
    let mut f0 = Array::<Vector<F, Const<1>>>::new(4usize);
    let mut f1 = Array::<Vector<F, Const<1>>>::new(4usize);
    #[unroll]
    for h in 0..2usize {
        let r = row + 8 * h;
        let chunk = smem_q[r * cpr + swizzle_tf32(r, 4 * w + quad, cpr)];
        // Element e is step e / 2's register h + 2 (e % 2).
        f0[h] = Vector::new(F::cast_from(chunk[0]));
        f0[h + 2] = Vector::new(F::cast_from(chunk[1]));
        f1[h] = Vector::new(F::cast_from(chunk[2]));
        f1[h + 2] = Vector::new(F::cast_from(chunk[3]));
    }
    (f0, f1)
}

/// Where chunk `chunk` of staged query or key row `row` lies (TF32).
#[cube]
fn swizzle_tf32(row: usize, chunk: usize, #[comptime] cpr: usize) -> usize {
    crate::tensor_core::swizzle(row, chunk, cpr, comptime!(Swizzle::Tf32Chunks))
}

/// [`multiply_keys`] on TF32: key `8j + g` gives this unit's chunk `4w + quad` of its row for
/// window `w`, the B registers of both steps (element e is step e / 2's register e % 2).
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply_keys_tf32<T: Float, F: Float, NV: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    q_frags: &Sequence<Array<Vector<F, Const<1>>>>,
    smem_q: &SharedMemory<Vector<T, NV>>,
    smem_k: &SharedMemory<Vector<T, NV>>,
    scores: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] stage: usize,
    warp: usize,
    lane: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.d_pad / CHUNK_F32);
    let base = comptime!(stage * tile.block_kv * cpr);
    let g = lane / 4;
    let quad = lane % 4;
    #[unroll]
    for w in 0..tile.d_pad / 16 {
        if tile.reload_q {
            let (f0, f1) = query_tf32::<T, F, NV>(smem_q, warp * 16 + g, w, quad, cpr);
            multiply_key_window_tf32::<T, F, NV>(def, &f0, &f1, smem_k, scores, base, w, g, quad, tile);
        } else {
            multiply_key_window_tf32::<T, F, NV>(def, q_frags.index(2 * w), q_frags.index(2 * w + 1), smem_k, scores, base, w, g, quad, tile);
        }
    }
}

/// One 16-dimension window `w` of [`multiply_keys_tf32`] with its query fragments `f0`, `f1`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn multiply_key_window_tf32<T: Float, F: Float, NV: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    f0: &Array<Vector<F, Const<1>>>,
    f1: &Array<Vector<F, Const<1>>>,
    smem_k: &SharedMemory<Vector<T, NV>>,
    scores: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] base: usize,
    #[comptime] w: usize,
    g: usize,
    quad: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.d_pad / CHUNK_F32);
    #[unroll]
    for j in 0..tile.block_kv / 8 {
        let key = j * 8 + g;
        let chunk = smem_k[base + key * cpr + swizzle_tf32(key, 4 * w + quad, cpr)];
        let mut b0 = Array::<Vector<F, Const<1>>>::new(2usize);
        let mut b1 = Array::<Vector<F, Const<1>>>::new(2usize);
        b0[0] = Vector::new(F::cast_from(chunk[0]));
        b0[1] = Vector::new(F::cast_from(chunk[1]));
        b1[0] = Vector::new(F::cast_from(chunk[2]));
        b1[1] = Vector::new(F::cast_from(chunk[3]));
        def.execute_inplace(f0, &b0, scores.index_mut(j));
        def.execute_inplace(f1, &b1, scores.index_mut(j));
    }
}

/// [`multiply_values`] on TF32, one step of 8 keys per probability fragment `j`: K position
/// `t` is key `8j + 2t` and `t + 4` key `8j + 2t + 1`, so A register v is the fragment's row
/// `v % 2`, element `v / 2`, and B register v is value row `8j + 2 quad + v`, column `g`.
#[cube]
fn multiply_values_tf32<T: Float, F: Float, NV: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    probs: &Sequence<Array<Vector<f32, Pair>>>,
    smem_v: &SharedMemory<Vector<T, NV>>,
    o: &mut Sequence<Array<Vector<f32, Pair>>>,
    #[comptime] stage: usize,
    lane: usize,
    #[comptime] tile: FlashTile,
) {
    let cpr = comptime!(tile.dv_pad / CHUNK_F32);
    let stage_len = comptime!(tile.block_kv * cpr);
    let elems = smem_v.slice(comptime!(stage * stage_len), comptime!((stage + 1) * stage_len)).with_vector_size::<Const<1>>();
    let g = lane / 4;
    let quad = lane % 4;
    #[unroll]
    for j in 0..tile.block_kv / 8 {
        let p = probs.index(j);
        let mut a = Array::<Vector<F, Const<1>>>::new(4usize);
        #[unroll]
        for r in 0..4usize {
            a[r] = Vector::new(F::cast_from(p[r % 2][r / 2]));
        }
        let key = j * 8 + 2 * quad;
        #[unroll]
        for jn in 0..tile.dv_pad / 8 {
            let col = jn * 8 + g;
            let mut b = Array::<Vector<F, Const<1>>>::new(2usize);
            #[unroll]
            for r in 0..2usize {
                b[r] = Vector::new(F::cast_from(elems[element_at(key + r, col, cpr, comptime!(Swizzle::Tf32Pairs))][0]));
            }
            def.execute_inplace(&a, &b, o.index_mut(jn));
        }
    }
}

/// The two B fragments (registers 0, 1 and 2, 3) of one `ldmatrix.x4`.
#[cube]
fn split_pair<T: Float>(quad: &Array<Vector<T, Pair>>) -> (Array<Vector<T, Pair>>, Array<Vector<T, Pair>>) {
    let mut b0 = Array::<Vector<T, Pair>>::new(2usize);
    let mut b1 = Array::<Vector<T, Pair>>::new(2usize);
    b0[0] = quad[0];
    b0[1] = quad[1];
    b1[0] = quad[2];
    b1[1] = quad[3];
    (b0, b1)
}

/// Two f32 of an accumulator as an operand register of `T`.
#[cube]
fn to_operand<T: Float>(pair: Vector<f32, Pair>) -> Vector<T, Pair> {
    let mut out = Vector::<T, Pair>::empty();
    out[0] = T::cast_from(pair[0]);
    out[1] = T::cast_from(pair[1]);
    out
}

/// The logit of score `score` of query `row` and key `key`, or [`MASKED`]: scaled, capped,
/// biased; masked by the mask, causally, or past the keys. Rows past the queries keep their
/// scores (never written) and read no mask or bias.
#[cube]
#[allow(clippy::too_many_arguments)]
fn logit<T: Float, B: Numeric>(
    score: f32,
    row: usize,
    key: usize,
    b: usize,
    h: usize,
    seq_q: usize,
    seq_k: usize,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    mask_offset: usize,
    bias_offset: usize,
    scale: f32,
    cap: f32,
    #[comptime] tile: FlashTile,
) -> f32 {
    let mut value = score * scale;
    if tile.has_softcap {
        value = cap * f32::tanh(value / cap);
    }
    let mut keep = key < seq_k;
    if tile.has_mask || tile.has_bias {
        if keep && row < seq_q {
            if tile.has_mask {
                let at = mask_offset + b * mask.stride(0) + h * mask.stride(1) + row * mask.stride(2) + key * mask.stride(3);
                keep = mask[at] == B::from_int(0);
            }
            if tile.has_bias {
                let at = bias_offset + b * bias.stride(0) + h * bias.stride(1) + row * bias.stride(2) + key * bias.stride(3);
                value += f32::cast_from(bias[at]);
            }
        }
    }
    if tile.causal {
        // key > row + (seq_k - seq_q)  ⟺  key + seq_q > row + seq_k
        keep = keep && key + seq_q <= row + seq_k;
    }
    select(keep, value, MASKED)
}
