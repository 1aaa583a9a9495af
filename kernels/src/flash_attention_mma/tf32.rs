//! Flash attention's products on TF32 fragments (f32 operands on m16n8k8): the queries', the
//! keys' and the values' registers gathered from the staged chunks (see the module docs of
//! [`super`]).
use cubecl::prelude::*;

use super::FlashTile;
use crate::tensor_core::{CHUNK_F32, Pair, Swizzle, element_at};

/// The TF32 A fragments of 16-dimension window `w` (its two steps of 8) for rows `row` and
/// `row + 8` of the staged queries: this unit's chunk `4w + quad` of each row (see the kernel).
#[cube]
pub(super) fn query_tf32<T: Float, F: Float, NV: Size>(
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
pub(super) fn swizzle_tf32(row: usize, chunk: usize, #[comptime] cpr: usize) -> usize {
    crate::tensor_core::swizzle(row, chunk, cpr, comptime!(Swizzle::Tf32Chunks))
}

/// [`multiply_keys`] on TF32: key `8j + g` gives this unit's chunk `4w + quad` of its row for
/// window `w`, the B registers of both steps (element e is step e / 2's register e % 2).
#[cube]
#[allow(clippy::too_many_arguments)]
pub(super) fn multiply_keys_tf32<T: Float, F: Float, NV: Size>(
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
pub(super) fn multiply_key_window_tf32<T: Float, F: Float, NV: Size>(
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
pub(super) fn multiply_values_tf32<T: Float, F: Float, NV: Size>(
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
