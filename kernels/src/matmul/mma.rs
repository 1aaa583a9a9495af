//! The matmul on the matrix units' own instructions: cubecl's manual MMA (`MmaDefinition`,
//! CUDA's `mma.sync`), with f32 accumulation: m16n8k16 for f16 and bf16 operands, loaded by
//! `ldmatrix`; m16n8k8 for f32 operands rounded to TF32 (`tile.tf32`), loaded element by
//! element from shared memory (`ldmatrix` has no 32-bit transpose).
//!
//! Each cube computes a `block_m` × `block_n` output tile with `warps_m × warps_n` planes;
//! a plane owns a `(block_m / warps_m)` × `(block_n / warps_n)` part as m16n8 accumulator
//! fragments held in registers. K is walked in slices of `block_k`, `stages` slices in flight
//! through asynchronous global-to-shared copies of 16-byte chunks (8 or 4 elements) with one
//! shared barrier per stage: [`super::pipeline`]'s loop, which the implicit-GEMM convolutions
//! share.
//!
//! Shared memory holds each operand's slice as it lies in global memory: rows along the
//! operand's strided dimension, 16-byte chunks along its contiguous one (`lhs` K-major or
//! M-major, `rhs` N-major or K-major, comptime). Rows are not padded: the chunks of a row are
//! permuted ([`swizzle`](fn@swizzle)) so that the eight rows one `ldmatrix` reads, the elements one TF32
//! fragment load reads, and the chunks one plane's copies write, fall in distinct banks.
//! `ldmatrix` (transposing where the layout needs it) then hands each unit its operand
//! registers directly; TF32 fragments are gathered at the positions `MmaDefinition` gives.
//! The staging, swizzles and fragment addressing are [`crate::tensor_core`]'s, shared with
//! flash attention.
//!
//! Split K: where the output tiles fill less than a wave, the launcher splits K's slices into
//! runs of `split_len`, each run on cubes of its own writing an f32 partial product into its
//! own copy of the output, and [`crate::split_sum`] adds them in order into the output.
use cubecl::prelude::*;

use super::pipeline::{StageSlices, StageSlicesExpand, multiply_staged, plane_origin};
use super::tile_pos;
use crate::strided::umin;
use crate::tensor_core::{CHUNK, CHUNK_F32, Pair, Swizzle, copy_tile, element_at, fragment_chunk, fragment_chunk_boxed, swizzle};

/// The comptime shape of a [`matmul_mma`](fn@matmul_mma) launch.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct MmaTile {
    /// Output rows per cube.
    pub block_m: usize,
    /// Output columns per cube.
    pub block_n: usize,
    /// K elements per slice.
    pub block_k: usize,
    /// Planes along M.
    pub warps_m: usize,
    /// Planes along N.
    pub warps_n: usize,
    /// Slices in flight (at least 2).
    pub stages: usize,
    /// `lhs` is contiguous along K (else along M).
    pub lhs_k_major: bool,
    /// `rhs` is contiguous along K (else along N).
    pub rhs_k_major: bool,
    /// f32 operands, rounded to TF32 and multiplied by m16n8k8 (else f16 / bf16 by m16n8k16).
    pub tf32: bool,
}

impl MmaTile {
    /// Elements of a 16-byte chunk of the operands.
    pub fn chunk(&self) -> usize {
        if self.tf32 { CHUNK_F32 } else { CHUNK }
    }

    /// The instruction's K.
    pub fn mma_k(&self) -> usize {
        if self.tf32 { 8 } else { 16 }
    }

    /// Units per cube.
    pub fn units(&self) -> usize {
        self.warps_m * self.warps_n * 32
    }

    /// Chunks per shared-memory row of `lhs`'s slice (rows along M if K-major, else along K).
    pub fn a_cpr(&self) -> usize {
        (if self.lhs_k_major { self.block_k } else { self.block_m }) / self.chunk()
    }

    /// Chunks per shared-memory row of `rhs`'s slice (rows along N if K-major, else along K).
    pub fn b_cpr(&self) -> usize {
        (if self.rhs_k_major { self.block_k } else { self.block_n }) / self.chunk()
    }

    /// Chunks of one stage of `lhs`'s slices.
    pub fn stage_a(&self) -> usize {
        self.block_m * self.block_k / self.chunk()
    }

    /// Chunks of one stage of `rhs`'s slices.
    pub fn stage_b(&self) -> usize {
        self.block_k * self.block_n / self.chunk()
    }

    /// m16n8 accumulator fragments per plane.
    pub fn fragments(&self) -> usize {
        self.block_m / self.warps_m / 16 * (self.block_n / self.warps_n / 8)
    }
}

/// `out[b] = lhs[b] @ rhs[b]` on manual MMA; see the module docs. `F` is the fragments' type
/// (`T` itself, or TF32 for f32); `NV` is the chunk (`tile.chunk()` elements of `T`); `NO`
/// (1 or 2) the output's vector size. Split K: cube `c` runs K slices `s · split_len ..` (at
/// most `split_len` of them) for `s = c / split_cubes` and writes the output's copy `s`:
/// `output` is `[splits, batch.., M, N]` of `O` (`T` unsplit, f32 partial sums split; one
/// split: `split_cubes` is every cube and `split_len` every slice).
///
/// The launcher guarantees: a device with `mma.sync` m16n8k16 and `ldmatrix` for `T` (or
/// m16n8k8 for TF32), 32-unit planes; each operand contiguous along its contiguous dimension
/// (per `tile`), whose length, the operand's other strides and its offset are multiples of the
/// chunk; `16 * warps_m` divides `block_m`, `16 * warps_n` divides `block_n`, 16 divides
/// `block_k`; the tile's three sizes are powers of two whose chunk counts per slice the cube's
/// units divide, with at least 8 chunks per shared-memory row for TF32; `NO` divides `N`;
/// every split starts before K's last slice.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn matmul_mma<T: Float, F: Float, O: Float, NV: Size, NO: Size>(
    lhs: &Tensor<Vector<T, NV>>,
    rhs: &Tensor<Vector<T, NV>>,
    output: &mut Tensor<Vector<O, NO>>,
    lhs_offset: usize,
    rhs_offset: usize,
    split_cubes: usize,
    split_len: usize,
    num_cubes: usize,
    #[comptime] tile: MmaTile,
    #[define(T, F, O)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    // The operands' rank: a split output has one dimension more (its copies).
    let rank = lhs.rank();
    let m = output.shape(output.rank() - 2);
    let n = output.shape(output.rank() - 1);
    let k = lhs.shape(rank - 1);
    let first = (CUBE_POS / split_cubes) * split_len;
    let num_k = umin(split_len, k.div_ceil(tile.block_k) - first);
    // Past the batches, the tile's batch coordinates wrap round: cube `c` reads the operands
    // of cube `c % split_cubes` and writes the output's copy `c / split_cubes`.
    let pos = tile_pos::<Vector<T, NV>, Vector<T, NV>>(lhs, rhs, m, n, lhs_offset, rhs_offset, CUBE_POS, tile.block_m, tile.block_n);
    let slices = MatrixSlices {
        first,
        lhs: pos.lhs,
        rhs: pos.rhs,
        row0: pos.row,
        col0: pos.col,
        m,
        n,
        k,
        // The stride between the rows of each operand's slice.
        a_stride: if tile.lhs_k_major { lhs.stride(rank - 2) } else { lhs.stride(rank - 1) },
        b_stride: if tile.rhs_k_major { rhs.stride(rank - 1) } else { rhs.stride(rank - 2) },
    };
    let unit = UNIT_POS as usize;
    let (warp_row, warp_col) = plane_origin(unit, tile);
    let acc = multiply_staged::<T, F, NV, MatrixSlices>(&slices, lhs, rhs, num_k, unit, warp_row, warp_col, tile);

    let def = cmma::MmaDefinition::<F, F, f32>::new(16usize, 8usize, comptime!(tile.mma_k()));
    write_accumulators::<O, F, NO>(
        &def,
        output,
        &acc,
        pos.out,
        pos.row + warp_row,
        pos.col + warp_col,
        m,
        n,
        unit % 32,
        comptime!(tile.block_m / tile.warps_m),
        comptime!(tile.block_n / tile.warps_n),
    );
}

/// A matrix product's operands: the cube's first K slice, each batch's `lhs` and `rhs`
/// matrices (element offsets), the cube's first output row and column, the product's sizes,
/// and the stride between the rows of each operand's slice.
#[derive(CubeType)]
struct MatrixSlices {
    first: usize,
    lhs: usize,
    rhs: usize,
    row0: usize,
    col0: usize,
    m: usize,
    n: usize,
    k: usize,
    a_stride: usize,
    b_stride: usize,
}

#[cube]
impl<T: Float, NV: Size> StageSlices<T, NV> for MatrixSlices {
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
    ) {
        let units = comptime!(tile.units());
        let k0 = (self.first + slice) * tile.block_k;
        let (a_cpr, b_cpr) = comptime!((tile.a_cpr(), tile.b_cpr()));
        let (dst_a, dst_b) = comptime!((stage * tile.stage_a(), stage * tile.stage_b()));
        let pattern_a = comptime!(Swizzle::of(tile.tf32, tile.lhs_k_major));
        let pattern_b = comptime!(Swizzle::of(tile.tf32, tile.rhs_k_major));
        if tile.lhs_k_major {
            copy_tile::<T, NV>(a, smem_a, self.lhs, self.row0, k0, self.a_stride, self.m, self.k, dst_a, unit, tile.block_m, a_cpr, units, pattern_a);
        } else {
            copy_tile::<T, NV>(a, smem_a, self.lhs, k0, self.row0, self.a_stride, self.k, self.m, dst_a, unit, tile.block_k, a_cpr, units, pattern_a);
        }
        if tile.rhs_k_major {
            copy_tile::<T, NV>(b, smem_b, self.rhs, self.col0, k0, self.b_stride, self.n, self.k, dst_b, unit, tile.block_n, b_cpr, units, pattern_b);
        } else {
            copy_tile::<T, NV>(b, smem_b, self.rhs, k0, self.col0, self.b_stride, self.k, self.n, dst_b, unit, tile.block_k, b_cpr, units, pattern_b);
        }
    }
}

/// Multiplies one staged K slice into the plane's accumulators (`acc[i * frags_n + j]` is the
/// fragment at rows `16i`, columns `8j` of the plane's part). A fragments (16 × 16) come from
/// one `ldmatrix.x4` each; B fragments in pairs (16 × 16) from one `ldmatrix.x4`, transposed
/// where the slice is N-major (`rhs`) or M-major (`lhs`). The slices lie as
/// [`copy_tile`](fn@copy_tile) stages them, or in TMA's boxes (`boxed`, see
/// [`boxed_chunk`](fn@crate::tensor_core::boxed_chunk); `block_k` is then
/// [`BOX_INNER`](crate::tensor_core::BOX_INNER)).
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn multiply_slice<T: Float, NV: Size>(
    def: &cmma::MmaDefinition<T, T, f32>,
    smem_a: &SharedMemory<Vector<T, NV>>,
    smem_b: &SharedMemory<Vector<T, NV>>,
    acc: &mut Sequence<Array<Vector<f32, Pair>>>,
    base_a: usize,
    base_b: usize,
    warp_row: usize,
    warp_col: usize,
    lane: usize,
    #[comptime] tile: MmaTile,
    #[comptime] boxed: bool,
) {
    let frags_m = comptime!(tile.block_m / tile.warps_m / 16);
    let frags_n = comptime!(tile.block_n / tile.warps_n / 8);
    let a_cpr = comptime!((if tile.lhs_k_major { tile.block_k } else { tile.block_m }) / CHUNK);
    let b_cpr = comptime!((if tile.rhs_k_major { tile.block_k } else { tile.block_n }) / CHUNK);
    #[unroll]
    for ks in 0..tile.block_k / 16 {
        let mut a = Sequence::<Array<Vector<T, Pair>>>::new();
        #[unroll]
        for i in 0..frags_m {
            let rows = warp_row + i * 16;
            let at = if boxed {
                // Boxes of `rows` rows: block_m / block_n rows K-major, block_k rows else.
                if tile.lhs_k_major {
                    fragment_chunk_boxed(rows, ks * 2, lane, true, tile.block_m)
                } else {
                    fragment_chunk_boxed(ks * 16, rows / CHUNK, lane, false, tile.block_k)
                }
            } else if tile.lhs_k_major {
                fragment_chunk(rows, ks * 2, lane, true, a_cpr)
            } else {
                fragment_chunk(ks * 16, rows / CHUNK, lane, false, a_cpr)
            };
            let start = base_a + at;
            a.push(def.load_matrix::<Vector<T, NV>, Pair>(
                &smem_a.slice(start, start + 1),
                cmma::MatrixIdent::A,
                4usize,
                comptime!(!tile.lhs_k_major),
            ));
        }
        #[unroll]
        for jj in 0..frags_n / 2 {
            let cols = warp_col + jj * 16;
            let at = if boxed {
                if tile.rhs_k_major {
                    fragment_chunk_boxed(cols, ks * 2, lane, false, tile.block_n)
                } else {
                    fragment_chunk_boxed(ks * 16, cols / CHUNK, lane, true, tile.block_k)
                }
            } else if tile.rhs_k_major {
                fragment_chunk(cols, ks * 2, lane, false, b_cpr)
            } else {
                fragment_chunk(ks * 16, cols / CHUNK, lane, true, b_cpr)
            };
            let start = base_b + at;
            let pair = def.load_matrix::<Vector<T, NV>, Pair>(
                &smem_b.slice(start, start + 1),
                cmma::MatrixIdent::B,
                4usize,
                comptime!(!tile.rhs_k_major),
            );
            let mut b0 = Array::<Vector<T, Pair>>::new(2usize);
            let mut b1 = Array::<Vector<T, Pair>>::new(2usize);
            b0[0] = pair[0];
            b0[1] = pair[1];
            b1[0] = pair[2];
            b1[1] = pair[3];
            #[unroll]
            for i in 0..frags_m {
                def.execute_inplace(a.index(i), &b0, acc.index_mut(i * frags_n + 2 * jj));
                def.execute_inplace(a.index(i), &b1, acc.index_mut(i * frags_n + 2 * jj + 1));
            }
        }
    }
}

/// [`multiply_slice`](fn@multiply_slice) for f32 operands on m16n8k8 TF32, two K steps of 8 at a time.
///
/// The fragments follow PTX's m16n8k8 TF32 layout (lane = 4g + t): A register v holds row
/// `g + 8 (v % 2)`, column `t + 4 (v / 2)`; B register v holds row `t + 4 v`, column g. The
/// instruction sums over its 8 K positions in any order, so K position c of the step s of a
/// 16-wide window is taken from element `4 (c % 4) + 2 s + c / 4` of the window: a lane's four
/// elements of both steps are then one 16-byte chunk of a K-major slice (one shared load
/// instead of four). M- and N-major slices are read element by element.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn multiply_slice_tf32<T: Float, F: Float, NV: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    smem_a: &SharedMemory<Vector<T, NV>>,
    smem_b: &SharedMemory<Vector<T, NV>>,
    acc: &mut Sequence<Array<Vector<f32, Pair>>>,
    base_a: usize,
    base_b: usize,
    warp_row: usize,
    warp_col: usize,
    lane: usize,
    #[comptime] tile: MmaTile,
) {
    let frags_m = comptime!(tile.block_m / tile.warps_m / 16);
    let frags_n = comptime!(tile.block_n / tile.warps_n / 8);
    let a_cpr = comptime!((if tile.lhs_k_major { tile.block_k } else { tile.block_m }) / CHUNK_F32);
    let b_cpr = comptime!((if tile.rhs_k_major { tile.block_k } else { tile.block_n }) / CHUNK_F32);
    let a_elems = smem_a.slice(base_a, base_a + comptime!(tile.block_m * tile.block_k / CHUNK_F32)).with_vector_size::<Const<1>>();
    let b_elems = smem_b.slice(base_b, base_b + comptime!(tile.block_k * tile.block_n / CHUNK_F32)).with_vector_size::<Const<1>>();
    let g = lane / 4;
    let t = lane % 4;
    #[unroll]
    for w in 0..tile.block_k / 16 {
        // This lane's K elements of the window: 4t .. 4t + 4, chunk 4w + t of a K-major row.
        let k_row = w * 16 + 4 * t;
        let mut a0 = Sequence::<Array<Vector<F, Const<1>>>>::new();
        let mut a1 = Sequence::<Array<Vector<F, Const<1>>>>::new();
        #[unroll]
        for i in 0..frags_m {
            let mut f0 = Array::<Vector<F, Const<1>>>::new(4usize);
            let mut f1 = Array::<Vector<F, Const<1>>>::new(4usize);
            #[unroll]
            for h in 0..2usize {
                let row = warp_row + i * 16 + g + 8 * h;
                let mut e4 = Vector::<T, Const<4>>::empty();
                if tile.lhs_k_major {
                    let chunk = smem_a[base_a + row * a_cpr + swizzle(row, 4 * w + t, a_cpr, Swizzle::Tf32Chunks)];
                    #[unroll]
                    for e in 0..4usize {
                        e4[e] = chunk[e];
                    }
                } else {
                    #[unroll]
                    for e in 0..4usize {
                        e4[e] = a_elems[element_at(k_row + e, row, a_cpr, comptime!(Swizzle::Tf32Elements))][0];
                    }
                }
                // Element e is step e / 2's register h + 2 (e % 2).
                f0[h] = Vector::new(F::cast_from(e4[0]));
                f0[h + 2] = Vector::new(F::cast_from(e4[1]));
                f1[h] = Vector::new(F::cast_from(e4[2]));
                f1[h + 2] = Vector::new(F::cast_from(e4[3]));
            }
            a0.push(f0);
            a1.push(f1);
        }
        #[unroll]
        for j in 0..frags_n {
            let col = warp_col + j * 8 + g;
            let mut e4 = Vector::<T, Const<4>>::empty();
            if tile.rhs_k_major {
                let chunk = smem_b[base_b + col * b_cpr + swizzle(col, 4 * w + t, b_cpr, Swizzle::Tf32Chunks)];
                #[unroll]
                for e in 0..4usize {
                    e4[e] = chunk[e];
                }
            } else {
                #[unroll]
                for e in 0..4usize {
                    e4[e] = b_elems[element_at(k_row + e, col, b_cpr, comptime!(Swizzle::Tf32Elements))][0];
                }
            }
            // Element e is step e / 2's register e % 2.
            let mut b0 = Array::<Vector<F, Const<1>>>::new(2usize);
            let mut b1 = Array::<Vector<F, Const<1>>>::new(2usize);
            b0[0] = Vector::new(F::cast_from(e4[0]));
            b0[1] = Vector::new(F::cast_from(e4[1]));
            b1[0] = Vector::new(F::cast_from(e4[2]));
            b1[1] = Vector::new(F::cast_from(e4[3]));
            #[unroll]
            for i in 0..frags_m {
                def.execute_inplace(a0.index(i), &b0, acc.index_mut(i * frags_n + j));
                def.execute_inplace(a1.index(i), &b1, acc.index_mut(i * frags_n + j));
            }
        }
    }
}

/// Writes the plane's accumulators, converted to `O`, to the output at rows `row0..` and
/// columns `col0..` (the plane's part), in vectors of `NO` elements, skipping rows and columns
/// past `m` and `n`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_accumulators<O: Float, F: Float, NO: Size>(
    def: &cmma::MmaDefinition<F, F, f32>,
    output: &mut Tensor<Vector<O, NO>>,
    acc: &Sequence<Array<Vector<f32, Pair>>>,
    out_base: usize,
    row0: usize,
    col0: usize,
    m: usize,
    n: usize,
    lane: usize,
    #[comptime] plane_m: usize,
    #[comptime] plane_n: usize,
) {
    let no = output.vector_size();
    let frags_n = comptime!(plane_n / 8);
    let vectors = def.vectors_per_lane(cmma::MatrixIdent::Accumulator);
    let width = def.vector_size(cmma::MatrixIdent::Accumulator);
    #[unroll]
    for i in 0..plane_m / 16 {
        #[unroll]
        for j in 0..frags_n {
            let frag = acc.index(i * frags_n + j);
            #[unroll]
            for v in 0..vectors {
                let (r, c) = def.position_of_nth(lane as u32, comptime!((v * width) as u32), cmma::MatrixIdent::Accumulator);
                let row = row0 + i * 16 + r as usize;
                let values = frag[v];
                #[unroll]
                for w in 0..comptime!(width / no) {
                    let col = col0 + j * 8 + c as usize + w * no;
                    if row < m && col < n {
                        let mut out = Vector::<O, NO>::empty();
                        #[unroll]
                        for e in 0..no {
                            out[e] = O::cast_from(values[w * no + e]);
                        }
                        output[(out_base + row * n + col) / no] = out;
                    }
                }
            }
        }
    }
}
