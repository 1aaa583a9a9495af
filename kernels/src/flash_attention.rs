//! Scaled dot-product attention in one kernel (flash attention): each cube takes `16 · warps`
//! query rows of one (batch, head) and streams the keys and values through shared memory in
//! tiles of `block_kv`, keeping a running softmax (row maximum, row sum and the weighted sum
//! of values, rescaled whenever the maximum grows), so the `[seq_q, seq_k]` scores never
//! reach global memory. Everything the unfused path honours is applied per score: scale,
//! soft cap, boolean mask, causal mask aligned bottom-right, additive bias (masks and bias are
//! strided views, stride 0 where broadcast), and a fully masked row gives zeros.
//!
//! Each group of 32 units (a "warp") owns 16 query rows; units `2r` and `2r + 1` of a warp
//! share row `r`, each taking half of every key tile's columns for the softmax and half of
//! the value columns for the output, which they keep in registers (f32). Only the staging of
//! a key tile needs the whole cube; the phases after it touch the warp's own rows, so they
//! synchronise per plane where planes are 32 units wide (`plane_sync`), per cube otherwise.
//! Per key tile:
//!
//! 1. the cube stages the tile's keys and values (zero past `seq_k` and past the head
//!    dimensions, which are padded to multiples of 16);
//! 2. each plane computes its 16 × `block_kv` scores `Q·Kᵀ` into shared memory: with the
//!    matrix units (`tensor_cores`: cubecl's `cmma`, f32 accumulators, operands of type `M`,
//!    TF32 for f32) or with plain fused multiply-adds;
//! 3. each unit turns its half row into logits (scale, cap, bias, masks), the two units of a
//!    row agree on the new maximum through shared memory, and each writes its probabilities
//!    `exp(logit - max)` (in `T`) and rescales its output columns;
//! 4. the plane adds `P·V` to its rows: with the matrix units into fragments that go through
//!    shared memory to the units, or with plain fused multiply-adds.
//!
//! At the end each row is divided by its sum (at least the dtype's smallest normal, as the
//! unfused path does, so that a fully masked row gives zeros).
use cubecl::prelude::*;

/// Alignment of the shared-memory tiles, in bytes (fragment loads need 32).
const SMEM_ALIGN: usize = 128;
/// Rows and columns of a matrix-unit fragment.
const FRAG: usize = 16;

/// `q` `[b, h, seq_q, d]`, `k` `[b, h, seq_k, d]` and `v` `[b, h, seq_k, dv]` are strided views
/// with offsets; `mask` and `bias` are views of the scores' shape `[b, h, seq_q, seq_k]`
/// (stride 0 where broadcast); `out` `[b, h, seq_q, dv]` is contiguous. Cubes are numbered
/// over `(b, h, query tile)`, query tiles fastest.
///
/// `scale`, `softcap`, `lowest` (the dtype's most negative finite value) and `tiny` (its
/// smallest positive normal) are f32. The launcher guarantees: `16` divides `d_pad ≥ d` and
/// `dv_pad ≥ dv`; `block_kv` is 32 or 64; `frag_k` divides 16; `pad` is 16 bytes in elements
/// of `T`; `NV` divides `d`, `dv`, the strides and offsets of `q`, `k` and `v`, whose last
/// dimension is contiguous when `NV > 1`; with `tensor_cores`, 32 units per plane and matrix
/// units for `M`; with `plane_sync`, 32 units per plane.
#[cube(launch_unchecked)]
pub fn flash_attention<T: Float, M: Float, B: Numeric, NV: Size>(
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
    lowest: InputScalar,
    tiny: InputScalar,
    num_cubes: usize,
    #[comptime] has_mask: bool,
    #[comptime] has_bias: bool,
    #[comptime] has_softcap: bool,
    #[comptime] causal: bool,
    #[comptime] tensor_cores: bool,
    #[comptime] warps: usize,
    #[comptime] block_kv: usize,
    #[comptime] d_pad: usize,
    #[comptime] dv_pad: usize,
    #[comptime] frag_k: usize,
    #[comptime] pad: usize,
    #[comptime] unroll: bool,
    #[comptime] plane_sync: bool,
    #[define(T, M, B)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let units = comptime!(warps * 32);
    let block_q = comptime!(warps * 16);
    let half_kv = comptime!(block_kv / 2);
    let half_dv = comptime!(dv_pad / 2);
    // Shared-memory row lengths, in elements.
    let ldq = comptime!(d_pad + pad);
    let ldv = comptime!(dv_pad + pad);
    let ldp = comptime!(block_kv + pad);
    let lds = comptime!(if block_kv > dv_pad { block_kv + 4 } else { dv_pad + 4 });

    let heads = q.shape(1);
    let seq_q = q.shape(2);
    let seq_k = k.shape(2);
    let d = q.shape(3);
    let dv = v.shape(3);
    let tiles_q = seq_q.div_ceil(block_q);
    let q0 = (CUBE_POS % tiles_q) * block_q;
    let h = (CUBE_POS / tiles_q) % heads;
    let b = CUBE_POS / (tiles_q * heads);

    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let lane = unit % 32;
    // This unit's row within the cube and within its plane, and which half it takes.
    let row = warp * 16 + lane / 2;
    let sub_row = lane / 2;
    let half = lane % 2;
    let i = q0 + row;
    let row_ok = i < seq_q;

    let mut smem_q = SharedMemory::<T>::new_aligned(comptime!(block_q * ldq), comptime!(SMEM_ALIGN));
    let mut smem_k = SharedMemory::<T>::new_aligned(comptime!(block_kv * ldq), comptime!(SMEM_ALIGN));
    let mut smem_v = SharedMemory::<T>::new_aligned(comptime!(block_kv * ldv), comptime!(SMEM_ALIGN));
    let mut smem_p = SharedMemory::<T>::new_aligned(comptime!(block_q * ldp), comptime!(SMEM_ALIGN));
    let mut smem_s = SharedMemory::<f32>::new_aligned(comptime!(block_q * lds), comptime!(SMEM_ALIGN));
    let mut stats = SharedMemory::<f32>::new(comptime!(block_q * 2));

    let q_base = q_offset + b * q.stride(0) + h * q.stride(1);
    let k_base = k_offset + b * k.stride(0) + h * k.stride(1);
    let v_base = v_offset + b * v.stride(0) + h * v.stride(1);
    load_tile::<T, NV>(q, &mut smem_q, q_base, q0, seq_q, d, unit, units, block_q, d_pad, ldq);

    let mask_row = mask_offset + b * mask.stride(0) + h * mask.stride(1) + i * mask.stride(2);
    let bias_row = bias_offset + b * bias.stride(0) + h * bias.stride(1) + i * bias.stride(2);
    let scale = scale.get::<f32>();
    let cap = softcap.get::<f32>();
    let mut max = lowest.get::<f32>();
    let mut sum = 0.0f32;
    let mut acc = Array::<f32>::new(half_dv);
    #[unroll(unroll)]
    for c in 0..half_dv {
        acc[c] = 0.0;
    }

    // Matrix-unit accumulators (none without tensor cores).
    let mut s_frags = Sequence::<cmma::Matrix<f32>>::new();
    let mut o_frags = Sequence::<cmma::Matrix<f32>>::new();
    if tensor_cores {
        #[unroll]
        for _f in 0..block_kv / FRAG {
            s_frags.push(zero_fragment(frag_k));
        }
        #[unroll]
        for _f in 0..dv_pad / FRAG {
            o_frags.push(zero_fragment(frag_k));
        }
    }

    // Keys past the last one that a row of this tile may see (causal) are skipped.
    let mut kv_end = seq_k;
    if causal {
        let last_row = select(q0 + block_q < seq_q, q0 + block_q, seq_q);
        let reach = last_row + seq_k;
        kv_end = select(reach > seq_q, reach - seq_q, 0usize);
        kv_end = select(kv_end < seq_k, kv_end, seq_k);
    }

    for kv0 in range_stepped(0usize, kv_end, block_kv) {
        sync_cube();
        load_tile::<T, NV>(k, &mut smem_k, k_base, kv0, seq_k, d, unit, units, block_kv, d_pad, ldq);
        load_tile::<T, NV>(v, &mut smem_v, v_base, kv0, seq_k, dv, unit, units, block_kv, dv_pad, ldv);
        sync_cube();

        // Scores of the plane's 16 rows.
        if tensor_cores {
            scores_cmma::<T, M>(&smem_q, &smem_k, &mut smem_s, &s_frags, warp, ldq, lds, block_kv, d_pad, frag_k);
        } else {
            #[unroll(unroll)]
            for cc in 0..half_kv {
                let c = half * half_kv + cc;
                let mut s = 0.0f32;
                for dd in 0..d_pad {
                    s += f32::cast_from(smem_q[row * ldq + dd]) * f32::cast_from(smem_k[c * ldq + dd]);
                }
                smem_s[row * lds + c] = s;
            }
        }
        sync_rows(plane_sync);

        // Logits of this unit's half row (columns staggered by row against bank conflicts),
        // which of them the masks keep, and their maximum.
        let mut keep_bits = 0u32;
        let mut tile_max = lowest.get::<f32>();
        #[unroll(unroll)]
        for cc in 0..half_kv {
            let c = half * half_kv + (cc + sub_row) % half_kv;
            let key = kv0 + c;
            let mut value = smem_s[row * lds + c] * scale;
            if has_softcap {
                value = cap * f32::tanh(value / cap);
            }
            let mut keep = row_ok && key < seq_k;
            if keep {
                if has_mask {
                    keep = mask[mask_row + key * mask.stride(3)] == B::from_int(0);
                }
                if has_bias {
                    value += f32::cast_from(bias[bias_row + key * bias.stride(3)]);
                }
            }
            if causal {
                // key > i + (seq_k - seq_q)  ⟺  key + seq_q > i + seq_k
                keep = keep && key + seq_q <= i + seq_k;
            }
            smem_s[row * lds + c] = value;
            keep_bits |= u32::cast_from(keep) << (cc as u32);
            if keep && value > tile_max {
                tile_max = value;
            }
        }
        stats[row * 2 + half] = tile_max;
        sync_rows(plane_sync);
        let other = stats[row * 2 + 1 - half];
        let mut new_max = select(other > tile_max, other, tile_max);
        new_max = select(max > new_max, max, new_max);
        let alpha = f32::exp(max - new_max);
        max = new_max;

        // Probabilities, this unit's part of the row sum, and the rescaled output.
        let mut part = 0.0f32;
        #[unroll(unroll)]
        for cc in 0..half_kv {
            let c = half * half_kv + (cc + sub_row) % half_kv;
            let kept = ((keep_bits >> (cc as u32)) & 1u32) == 1u32;
            let p = select(kept, f32::exp(smem_s[row * lds + c] - max), 0.0f32);
            part += p;
            smem_p[row * ldp + c] = T::cast_from(p);
        }
        sum = sum * alpha + part;
        #[unroll(unroll)]
        for c in 0..half_dv {
            acc[c] *= alpha;
        }
        sync_rows(plane_sync);

        // The plane's P·V.
        if tensor_cores {
            values_cmma::<T, M>(&smem_p, &smem_v, &mut smem_s, &o_frags, warp, ldp, ldv, lds, block_kv, dv_pad, frag_k);
            sync_rows(plane_sync);
            #[unroll(unroll)]
            for c in 0..half_dv {
                acc[c] += smem_s[row * lds + half * half_dv + c];
            }
        } else {
            for j in 0..block_kv {
                let p = f32::cast_from(smem_p[row * ldp + j]);
                #[unroll(unroll)]
                for c in 0..half_dv {
                    acc[c] += p * f32::cast_from(smem_v[j * ldv + half * half_dv + c]);
                }
            }
        }
    }

    // Each row's sum is split over its two units.
    sync_rows(plane_sync);
    stats[row * 2 + half] = sum;
    sync_rows(plane_sync);
    let mut total = sum + stats[row * 2 + 1 - half];
    let t = tiny.get::<f32>();
    total = select(total < t, t, total);
    if row_ok {
        let out_row = ((b * heads + h) * seq_q + i) * dv;
        #[unroll(unroll)]
        for c in 0..half_dv {
            let col = half * half_dv + c;
            if col < dv {
                out[out_row + col] = T::cast_from(acc[c] / total);
            }
        }
    }
}

/// A zeroed 16 × 16 f32 accumulator fragment.
#[cube]
fn zero_fragment(#[comptime] frag_k: usize) -> cmma::Matrix<f32> {
    cmma::Matrix::<f32>::from_value(
        cmma::MatrixIdent::Accumulator,
        comptime!(FRAG),
        comptime!(FRAG),
        frag_k,
        cmma::MatrixLayout::Undefined,
        0.0,
    )
}

/// Stages rows `row0..row0 + rows` of a `[b, h, seq, cols]` view (from `base`, in elements)
/// into shared memory rows of `ld` elements, zero past `seq` and past `cols` up to
/// `cols_pad`, reading vectors of `NV` elements along the rows (the launcher picks `NV > 1`
/// only where the rows are contiguous and `NV` divides `cols`, the strides and the offset).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_tile<T: Float, NV: Size>(
    src: &Tensor<Vector<T, NV>>,
    smem: &mut SharedMemory<T>,
    base: usize,
    row0: usize,
    seq: usize,
    cols: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] rows: usize,
    #[comptime] cols_pad: usize,
    #[comptime] ld: usize,
) {
    let nv = src.vector_size();
    let row_stride = src.stride(2);
    let col_stride = src.stride(3);
    let per_row = comptime!(cols_pad / nv);
    let total = comptime!(rows * per_row);
    for l in 0..comptime!(total.div_ceil(units)) {
        let idx = unit + l * units;
        if idx < total {
            let r = idx / per_row;
            let c = (idx % per_row) * nv;
            let mut value = Vector::<T, NV>::new(T::from_int(0));
            if row0 + r < seq && c < cols {
                value = src[(base + (row0 + r) * row_stride + c * col_stride) / nv];
            }
            #[unroll]
            for e in 0..nv {
                smem[r * ld + c + e] = value[e];
            }
        }
    }
}

/// A barrier over the plane when planes are 32 units (`plane_sync`: the phases it separates
/// touch only the plane's own rows), over the cube otherwise.
#[cube]
fn sync_rows(#[comptime] plane_sync: bool) {
    if plane_sync {
        sync_plane();
    } else {
        sync_cube();
    }
}

/// The plane's scores `Q·Kᵀ` (16 rows from `16 · warp`, `block_kv` keys) on the matrix
/// units, stored as f32 into `smem_s`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn scores_cmma<T: Float, M: Float>(
    smem_q: &SharedMemory<T>,
    smem_k: &SharedMemory<T>,
    smem_s: &mut SharedMemory<f32>,
    frags: &Sequence<cmma::Matrix<f32>>,
    warp: usize,
    #[comptime] ldq: usize,
    #[comptime] lds: usize,
    #[comptime] block_kv: usize,
    #[comptime] d_pad: usize,
    #[comptime] frag_k: usize,
) {
    let ldq_u32 = comptime!(ldq as u32);
    #[unroll]
    for j in 0..block_kv / FRAG {
        cmma::fill::<f32>(frags.index(j), 0.0);
    }
    #[unroll]
    for kf in 0..d_pad / frag_k {
        let a_start = warp * 16 * ldq + kf * frag_k;
        // SAFETY: loaded right away.
        let a = unsafe {
            cmma::Matrix::<M>::uninitialized(
                cmma::MatrixIdent::A,
                comptime!(FRAG),
                comptime!(FRAG),
                frag_k,
                cmma::MatrixLayout::RowMajor,
            )
        };
        cmma::load(&a, &smem_q.slice(a_start, a_start + 16 * ldq), ldq_u32);
        #[unroll]
        for j in 0..block_kv / FRAG {
            // Kᵀ is K read column-major: key j·16 + n, dimension kf·frag_k + k.
            let b_start = j * 16 * ldq + kf * frag_k;
            // SAFETY: loaded right away.
            let bf = unsafe {
                cmma::Matrix::<M>::uninitialized(
                    cmma::MatrixIdent::B,
                    comptime!(FRAG),
                    comptime!(FRAG),
                    frag_k,
                    cmma::MatrixLayout::ColMajor,
                )
            };
            cmma::load(&bf, &smem_k.slice(b_start, b_start + 16 * ldq), ldq_u32);
            let c = frags.index(j);
            cmma::execute::<M, M, f32, f32>(&a, &bf, c, c);
        }
    }
    let lds_u32 = comptime!(lds as u32);
    #[unroll]
    for j in 0..block_kv / FRAG {
        let start = warp * 16 * lds + j * 16;
        cmma::store(&mut smem_s.slice_mut(start, start + 16 * lds), frags.index(j), lds_u32, cmma::MatrixLayout::RowMajor);
    }
}

/// The plane's `P·V` (16 rows from `16 · warp`, `dv_pad` columns) on the matrix units,
/// stored as f32 into `smem_s`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn values_cmma<T: Float, M: Float>(
    smem_p: &SharedMemory<T>,
    smem_v: &SharedMemory<T>,
    smem_s: &mut SharedMemory<f32>,
    frags: &Sequence<cmma::Matrix<f32>>,
    warp: usize,
    #[comptime] ldp: usize,
    #[comptime] ldv: usize,
    #[comptime] lds: usize,
    #[comptime] block_kv: usize,
    #[comptime] dv_pad: usize,
    #[comptime] frag_k: usize,
) {
    let ldp_u32 = comptime!(ldp as u32);
    let ldv_u32 = comptime!(ldv as u32);
    #[unroll]
    for j in 0..dv_pad / FRAG {
        cmma::fill::<f32>(frags.index(j), 0.0);
    }
    #[unroll]
    for kf in 0..block_kv / frag_k {
        let a_start = warp * 16 * ldp + kf * frag_k;
        // SAFETY: loaded right away.
        let a = unsafe {
            cmma::Matrix::<M>::uninitialized(
                cmma::MatrixIdent::A,
                comptime!(FRAG),
                comptime!(FRAG),
                frag_k,
                cmma::MatrixLayout::RowMajor,
            )
        };
        cmma::load(&a, &smem_p.slice(a_start, a_start + 16 * ldp), ldp_u32);
        #[unroll]
        for j in 0..dv_pad / FRAG {
            let b_start = kf * frag_k * ldv + j * 16;
            // SAFETY: loaded right away.
            let bf = unsafe {
                cmma::Matrix::<M>::uninitialized(
                    cmma::MatrixIdent::B,
                    comptime!(FRAG),
                    comptime!(FRAG),
                    frag_k,
                    cmma::MatrixLayout::RowMajor,
                )
            };
            cmma::load(&bf, &smem_v.slice(b_start, b_start + frag_k * ldv), ldv_u32);
            let c = frags.index(j);
            cmma::execute::<M, M, f32, f32>(&a, &bf, c, c);
        }
    }
    let lds_u32 = comptime!(lds as u32);
    #[unroll]
    for j in 0..dv_pad / FRAG {
        let start = warp * 16 * lds + j * 16;
        cmma::store(&mut smem_s.slice_mut(start, start + 16 * lds), frags.index(j), lds_u32, cmma::MatrixLayout::RowMajor);
    }
}
