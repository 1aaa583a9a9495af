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
//! per-tile code (`tile::attend_tile`) reads the boxes.
use cubecl::prelude::barrier::Barrier;
use cubecl::prelude::*;

use crate::tensor_core::{CHUNK, CHUNK_F32, Pair, Swizzle, copy_tile};

mod tf32;
mod tile;
mod tma;

pub use tma::flash_attention_mma_tma;
use tile::{RowState, attend_tile, cube_origin, key_tiles, query_fragments, rows_of, write_rows};

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
    /// f16 / bf16 only), in boxes of [`BOX_INNER`](crate::tensor_core::BOX_INNER) dimensions.
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
