//! What both flash attention kernels share: where a cube's and a unit's rows lie, the running
//! state of a unit's rows, the queries' fragments, one key tile's scores, softmax and product
//! with the values (f16 / bf16 here, TF32 in [`super::tf32`]), and the output rows.
use cubecl::prelude::*;

use super::tf32::{multiply_keys_tf32, multiply_values_tf32, query_tf32};
use super::{FlashTile, MASKED};
use crate::tensor_core::{CHUNK, Pair, fragment_chunk, fragment_chunk_boxed, zero_accumulators};

/// Where a unit's rows lie and how their scores become logits: `row0` and `row0 + 8` are the
/// rows of its accumulators, `quad` its pair of columns in each m16n8 fragment (`2 · quad`,
/// `2 · quad + 1`); the rest is the kernel's arguments of the same names.
#[derive(CubeType, Clone, Copy)]
pub(super) struct Rows {
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
pub(super) fn rows_of(
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
pub(super) struct RowState {
    o: Sequence<Array<Vector<f32, Pair>>>,
    row_max: Array<f32>,
    row_sum: Array<f32>,
}

#[cube]
impl RowState {
    /// Nothing seen yet.
    pub(super) fn new<T: Float>(def: &cmma::MmaDefinition<T, T, f32>, #[comptime] tile: FlashTile) -> RowState {
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
pub(super) fn cube_origin(num_cubes: usize, seq_q: usize, heads: usize, #[comptime] block_q: usize) -> (usize, usize, usize) {
    let tiles_q = seq_q.div_ceil(block_q);
    let planes = num_cubes / tiles_q;
    let q0 = (tiles_q - 1 - CUBE_POS / planes) * block_q;
    (q0, (CUBE_POS % planes) / heads, CUBE_POS % heads)
}

/// The key tiles query tile `q0` reads: all of them, or under a causal mask those up to the
/// last key its last row may see.
#[cube]
pub(super) fn key_tiles(q0: usize, seq_q: usize, seq_k: usize, #[comptime] tile: FlashTile) -> usize {
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
pub(super) fn query_fragments<T: Float, F: Float, NV: Size>(
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
pub(super) fn attend_tile<T: Float, F: Float, B: Numeric, NV: Size>(
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
pub(super) fn write_rows<T: Float>(
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

/// The larger of two f32.
#[cube]
pub(super) fn max_f32(a: f32, b: f32) -> f32 {
    select(a > b, a, b)
}

/// The plane's scores `Q·Kᵀ` of the key tile in stage `stage` into `scores` (zeroed; fragment
/// `j` holds keys `8j..8j + 8`): query fragments from `q_frags`, or from `smem_q` where
/// `tile.reload_q`. Keys are rows of K-major chunks: B fragments, two per `ldmatrix.x4`,
/// untransposed.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn multiply_keys<T: Float, NV: Size>(
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
pub(super) fn multiply_key_step<T: Float, NV: Size>(
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
pub(super) fn multiply_values<T: Float, NV: Size>(
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
pub(super) fn kv_fragment_chunk(
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

/// The two B fragments (registers 0, 1 and 2, 3) of one `ldmatrix.x4`.
#[cube]
pub(super) fn split_pair<T: Float>(quad: &Array<Vector<T, Pair>>) -> (Array<Vector<T, Pair>>, Array<Vector<T, Pair>>) {
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
pub(super) fn to_operand<T: Float>(pair: Vector<f32, Pair>) -> Vector<T, Pair> {
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
pub(super) fn logit<T: Float, B: Numeric>(
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
