//! The tiled matmul on tensor cores (cubecl's `cmma`: WMMA fragments on CUDA), in two
//! kernels that share the matrix work ([`multiply_slice`](fn@multiply_slice)) and the epilogue ([`write_tile`](fn@write_tile)).
//!
//! Each cube computes a `block_m` × `block_n` output tile with `warps_m × warps_n` planes
//! (warps of 32 units); each plane owns a `(block_m / warps_m)` × `(block_n / warps_n)` part
//! of the tile as 16 × 16 f32 accumulator fragments. K is walked in slices of `block_k`
//! staged in shared memory, whose rows are padded by 16 bytes so that fragment loads hit
//! distinct banks. Out-of-range rows, columns and K entries are staged as zeros, so any shape
//! works.
//!
//! - [`matmul_cmma_async`](fn@matmul_cmma_async), for inputs whose rows are read in 16-byte vectors: `stages` slices
//!   in flight through asynchronous global-to-shared copies (`cp.async`), one shared barrier
//!   per stage.
//! - [`matmul_cmma`](fn@matmul_cmma), for any strides: slices staged through registers in the matrix units'
//!   operand type `M` (the input type for f16 and bf16; TF32 for f32, rounded on the way in),
//!   double-buffered: while the planes multiply slice `t` out of one buffer, the units have
//!   already loaded slice `t + 1` into registers and store it into the other buffer
//!   afterwards, so one barrier per slice suffices.
//!
//! The epilogue goes through shared memory: each plane stores a fragment into its own
//! 16 × 16 staging area, then its units write it out in vectors of `NO` elements, converted
//! to `T`, skipping rows and columns past the output's edge.
use cubecl::prelude::barrier::{Barrier, copy_async_checked};
use cubecl::prelude::*;

use super::tile_pos;

/// Alignment of the shared-memory tiles, in bytes (fragment loads need 32).
const SMEM_ALIGN: usize = 128;
/// Rows and columns of a matrix-unit fragment.
const FRAG: usize = 16;

/// `out[b] = lhs[b] @ rhs[b]` on matrix units; see the module docs. `frag_k` is the K size of
/// one matrix instruction (16 for f16/bf16, 8 for TF32); `pad` is 16 bytes in elements of `M`.
/// The launcher guarantees: 32 units per plane, `16 * warps_m` divides `block_m`,
/// `16 * warps_n` divides `block_n`, `frag_k` divides `block_k`, the units divide the vector
/// counts of both staged slices, and `NO` divides 8 and `N`.
#[cube(launch_unchecked)]
pub fn matmul_cmma<T: Float, M: Float, NA: Size, NB: Size, NO: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    output: &mut Tensor<Vector<T, NO>>,
    lhs_offset: usize,
    rhs_offset: usize,
    num_cubes: usize,
    #[comptime] block_m: usize,
    #[comptime] block_n: usize,
    #[comptime] block_k: usize,
    #[comptime] warps_m: usize,
    #[comptime] warps_n: usize,
    #[comptime] frag_k: usize,
    #[comptime] pad: usize,
    #[define(T, M)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let na = lhs.vector_size();
    let nb = rhs.vector_size();
    let units = comptime!(warps_m * warps_n * 32);
    let frags_m = comptime!(block_m / (warps_m * 16));
    let frags_n = comptime!(block_n / (warps_n * 16));
    let a_loads = comptime!(block_m * block_k / na / units);
    let b_loads = comptime!(block_k * block_n / nb / units);
    // Shared-memory row lengths and buffer sizes, in elements.
    let lda = block_k + pad;
    let ldb = block_n + pad;
    let stage_a = block_m * lda;
    let stage_b = block_k * ldb;

    let rank = output.rank();
    let m = output.shape(rank - 2);
    let n = output.shape(rank - 1);
    let k = lhs.shape(rank - 1);
    let pos = tile_pos::<Vector<T, NA>, Vector<T, NB>>(lhs, rhs, m, n, lhs_offset, rhs_offset, CUBE_POS, block_m, block_n);
    let lhs_row_stride = lhs.stride(rank - 2);
    let lhs_col_stride = lhs.stride(rank - 1);
    let rhs_row_stride = rhs.stride(rank - 2);
    let rhs_col_stride = rhs.stride(rank - 1);

    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let lane = unit % 32;
    let warp_row = (warp / warps_n) * (frags_m * 16);
    let warp_col = (warp % warps_n) * (frags_n * 16);

    let mut smem_a = SharedMemory::<Vector<M, NA>>::new_aligned(comptime!(2 * stage_a / na), comptime!(SMEM_ALIGN));
    let mut smem_b = SharedMemory::<Vector<M, NB>>::new_aligned(comptime!(2 * stage_b / nb), comptime!(SMEM_ALIGN));
    let mut regs_a = Array::<Vector<T, NA>>::new(a_loads);
    let mut regs_b = Array::<Vector<T, NB>>::new(b_loads);

    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _f in 0..frags_m * frags_n {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            comptime!(FRAG),
            comptime!(FRAG),
            frag_k,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }

    let num_k = k.div_ceil(block_k);
    load_slices::<T, NA, NB>(
        lhs, rhs, &mut regs_a, &mut regs_b, pos.lhs, pos.rhs, pos.row, pos.col, 0, m, n, k,
        lhs_row_stride, lhs_col_stride, rhs_row_stride, rhs_col_stride, unit, units, a_loads,
        b_loads, block_n, block_k,
    );
    store_slices::<T, M, NA, NB>(
        &mut smem_a, &mut smem_b, &regs_a, &regs_b, 0, unit, units, a_loads, b_loads, lda, ldb,
        block_m, block_n, block_k,
    );
    sync_cube();

    for t in 0..num_k {
        let stage = t % 2;
        let more = t + 1 < num_k;
        if more {
            load_slices::<T, NA, NB>(
                lhs, rhs, &mut regs_a, &mut regs_b, pos.lhs, pos.rhs, pos.row, pos.col,
                (t + 1) * block_k, m, n, k, lhs_row_stride, lhs_col_stride, rhs_row_stride,
                rhs_col_stride, unit, units, a_loads, b_loads, block_n, block_k,
            );
        }

        multiply_slice::<M, Vector<M, NA>, Vector<M, NB>>(
            &smem_a, &smem_b, &acc, stage * stage_a / na, stage * stage_b / nb, warp_row,
            warp_col, lda, ldb, na, nb, frags_m, frags_n, block_k, frag_k,
        );

        if more {
            store_slices::<T, M, NA, NB>(
                &mut smem_a, &mut smem_b, &regs_a, &regs_b, 1 - stage, unit, units, a_loads,
                b_loads, lda, ldb, block_m, block_n, block_k,
            );
        }
        sync_cube();
    }

    write_tile::<T, NO>(
        output, &acc, pos.out, pos.row + warp_row, pos.col + warp_col, m, n, warp, lane, units,
        frags_m, frags_n,
    );
}

/// The tensor-core matmul with asynchronous copies (`cp.async` on CUDA): each unit copies its
/// 16-byte vectors of a K slice straight from global to shared memory, `stages` slices deep,
/// and a shared barrier per stage tracks their arrival, so global-memory latency hides behind
/// `stages - 1` slices of matrix work without staging registers. Only for inputs read in
/// 16-byte vectors (`NA` and `NB` elements of `T`), contiguous along K (`lhs`) and N (`rhs`),
/// with the vector size dividing K, N, every stride and offset; out-of-range vectors are
/// zero-filled by the copy itself. Shared memory holds `T` (f32 bits for TF32, which the matrix
/// units truncate). Other preconditions as for [`matmul_cmma`](fn@matmul_cmma), plus `stages >= 2`.
#[cube(launch_unchecked)]
pub fn matmul_cmma_async<T: Float, M: Float, NA: Size, NB: Size, NO: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    output: &mut Tensor<Vector<T, NO>>,
    lhs_offset: usize,
    rhs_offset: usize,
    num_cubes: usize,
    #[comptime] block_m: usize,
    #[comptime] block_n: usize,
    #[comptime] block_k: usize,
    #[comptime] warps_m: usize,
    #[comptime] warps_n: usize,
    #[comptime] frag_k: usize,
    #[comptime] pad: usize,
    #[comptime] stages: usize,
    #[define(T, M)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let na = lhs.vector_size();
    let nb = rhs.vector_size();
    let units = comptime!(warps_m * warps_n * 32);
    let frags_m = comptime!(block_m / (warps_m * 16));
    let frags_n = comptime!(block_n / (warps_n * 16));
    let a_loads = comptime!(block_m * block_k / na / units);
    let b_loads = comptime!(block_k * block_n / nb / units);
    let lda = block_k + pad;
    let ldb = block_n + pad;
    // Stage sizes in vectors.
    let stage_a = comptime!(block_m * lda / na);
    let stage_b = comptime!(block_k * ldb / nb);

    let rank = output.rank();
    let m = output.shape(rank - 2);
    let n = output.shape(rank - 1);
    let k = lhs.shape(rank - 1);
    let pos = tile_pos::<Vector<T, NA>, Vector<T, NB>>(lhs, rhs, m, n, lhs_offset, rhs_offset, CUBE_POS, block_m, block_n);
    let lhs_row_stride = lhs.stride(rank - 2);
    let rhs_row_stride = rhs.stride(rank - 2);

    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let lane = unit % 32;
    let warp_row = (warp / warps_n) * (frags_m * 16);
    let warp_col = (warp % warps_n) * (frags_n * 16);

    let mut smem_a = SharedMemory::<Vector<T, NA>>::new_aligned(comptime!(stages * stage_a), comptime!(SMEM_ALIGN));
    let mut smem_b = SharedMemory::<Vector<T, NB>>::new_aligned(comptime!(stages * stage_b), comptime!(SMEM_ALIGN));
    let mut bars = Sequence::<Shared<Barrier>>::new();
    #[unroll]
    for _s in 0..stages {
        bars.push(Barrier::shared(CUBE_DIM, UNIT_POS == 0));
    }

    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _f in 0..frags_m * frags_n {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            comptime!(FRAG),
            comptime!(FRAG),
            frag_k,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }

    let num_k = k.div_ceil(block_k);
    // Prologue: slices 0 .. stages - 1 in flight.
    #[unroll]
    for s in 0..stages - 1 {
        if s < num_k {
            copy_slices::<T, NA, NB>(
                lhs, rhs, &mut smem_a, &mut smem_b, pos.lhs, pos.rhs, pos.row, pos.col, s * block_k,
                m, n, k, lhs_row_stride, rhs_row_stride, s * stage_a, s * stage_b, unit, units,
                a_loads, b_loads, lda, ldb, block_n, block_k,
            );
        }
        bars.index(s).commit_copy_async();
    }

    // Slice `t` lives in stage `t % stages`; the loop is unrolled by `stages` so that stages
    // and barriers are known at compile time.
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
                    copy_slices::<T, NA, NB>(
                        lhs, rhs, &mut smem_a, &mut smem_b, pos.lhs, pos.rhs, pos.row, pos.col,
                        next * block_k, m, n, k, lhs_row_stride, rhs_row_stride,
                        next_stage * stage_a, next_stage * stage_b, unit, units, a_loads, b_loads,
                        lda, ldb, block_n, block_k,
                    );
                }
                bars.index(next_stage).commit_copy_async();
                multiply_slice::<M, Vector<T, NA>, Vector<T, NB>>(
                    &smem_a, &smem_b, &acc, s * stage_a, s * stage_b, warp_row, warp_col, lda, ldb,
                    na, nb, frags_m, frags_n, block_k, frag_k,
                );
            }
        }
    }

    write_tile::<T, NO>(
        output, &acc, pos.out, pos.row + warp_row, pos.col + warp_col, m, n, warp, lane, units,
        frags_m, frags_n,
    );
}

/// Starts the asynchronous copies of K slice `k0..k0 + block_k` of the tile's `lhs` rows and
/// `rhs` columns into the stage at `base_a` / `base_b` (in vectors); vectors outside the
/// matrices are zero-filled.
#[cube]
#[allow(clippy::too_many_arguments)]
fn copy_slices<T: Float, NA: Size, NB: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    smem_a: &mut SharedMemory<Vector<T, NA>>,
    smem_b: &mut SharedMemory<Vector<T, NB>>,
    lhs_base: usize,
    rhs_base: usize,
    row0: usize,
    col0: usize,
    k0: usize,
    m: usize,
    n: usize,
    k: usize,
    lhs_row_stride: usize,
    rhs_row_stride: usize,
    base_a: usize,
    base_b: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
    #[comptime] lda: usize,
    #[comptime] ldb: usize,
    #[comptime] block_n: usize,
    #[comptime] block_k: usize,
) {
    let na = lhs.vector_size();
    let nb = rhs.vector_size();
    let na_u32 = comptime!(na as u32);
    let nb_u32 = comptime!(nb as u32);
    #[unroll]
    for l in 0..a_loads {
        let v = unit + l * units;
        let row = v / (block_k / na);
        let kk = (v % (block_k / na)) * na;
        let gr = row0 + row;
        let gk = k0 + kk;
        let inside = gr < m && gk < k;
        // Out-of-range vectors read nothing (length 0) from the batch's first element.
        let mut src = lhs_base / na;
        if inside {
            src = (lhs_base + gr * lhs_row_stride + gk) / na;
        }
        let len = usize::cast_from(inside);
        let dst = base_a + (row * lda + kk) / na;
        copy_async_checked(&lhs.slice(src, src + len), &mut smem_a.slice_mut(dst, dst + 1), na_u32);
    }
    #[unroll]
    for l in 0..b_loads {
        let v = unit + l * units;
        let kr = v / (block_n / nb);
        let col = (v % (block_n / nb)) * nb;
        let gk = k0 + kr;
        let gc = col0 + col;
        let inside = gk < k && gc < n;
        let mut src = rhs_base / nb;
        if inside {
            src = (rhs_base + gk * rhs_row_stride + gc) / nb;
        }
        let len = usize::cast_from(inside);
        let dst = base_b + (kr * ldb + col) / nb;
        copy_async_checked(&rhs.slice(src, src + len), &mut smem_b.slice_mut(dst, dst + 1), nb_u32);
    }
}

/// Loads K slice `k0..k0 + block_k` of the tile's `lhs` rows and `rhs` columns into registers
/// (zeros outside the matrices).
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_slices<T: Float, NA: Size, NB: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    regs_a: &mut Array<Vector<T, NA>>,
    regs_b: &mut Array<Vector<T, NB>>,
    lhs_base: usize,
    rhs_base: usize,
    row0: usize,
    col0: usize,
    k0: usize,
    m: usize,
    n: usize,
    k: usize,
    lhs_row_stride: usize,
    lhs_col_stride: usize,
    rhs_row_stride: usize,
    rhs_col_stride: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
    #[comptime] block_n: usize,
    #[comptime] block_k: usize,
) {
    let na = lhs.vector_size();
    let nb = rhs.vector_size();
    #[unroll]
    for l in 0..a_loads {
        let v = unit + l * units;
        let gr = row0 + v / (block_k / na);
        let gk = k0 + (v % (block_k / na)) * na;
        let mut value = Vector::<T, NA>::new(T::from_int(0));
        if gr < m && gk < k {
            value = lhs[(lhs_base + gr * lhs_row_stride + gk * lhs_col_stride) / na];
        }
        regs_a[l] = value;
    }
    #[unroll]
    for l in 0..b_loads {
        let v = unit + l * units;
        let gk = k0 + v / (block_n / nb);
        let gc = col0 + (v % (block_n / nb)) * nb;
        let mut value = Vector::<T, NB>::new(T::from_int(0));
        if gk < k && gc < n {
            value = rhs[(rhs_base + gk * rhs_row_stride + gc * rhs_col_stride) / nb];
        }
        regs_b[l] = value;
    }
}

/// Stores the registers of [`load_slices`] into shared-memory buffer `stage`, converted to the
/// matrix units' operand type.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_slices<T: Float, M: Float, NA: Size, NB: Size>(
    smem_a: &mut SharedMemory<Vector<M, NA>>,
    smem_b: &mut SharedMemory<Vector<M, NB>>,
    regs_a: &Array<Vector<T, NA>>,
    regs_b: &Array<Vector<T, NB>>,
    stage: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
    #[comptime] lda: usize,
    #[comptime] ldb: usize,
    #[comptime] block_m: usize,
    #[comptime] block_n: usize,
    #[comptime] block_k: usize,
) {
    let na = regs_a.vector_size();
    let nb = regs_b.vector_size();
    let base_a = stage * (lda * block_m);
    let base_b = stage * (ldb * block_k);
    #[unroll]
    for l in 0..a_loads {
        let v = unit + l * units;
        let row = v / (block_k / na);
        let kk = (v % (block_k / na)) * na;
        smem_a[(base_a + row * lda + kk) / na] = Vector::cast_from(regs_a[l]);
    }
    #[unroll]
    for l in 0..b_loads {
        let v = unit + l * units;
        let kr = v / (block_n / nb);
        let col = (v % (block_n / nb)) * nb;
        smem_b[(base_b + kr * ldb + col) / nb] = Vector::cast_from(regs_b[l]);
    }
}

/// Multiplies one staged K slice into the plane's accumulators: `smem_a` holds `block_m`
/// rows of `lda` elements from `base_a`, `smem_b` holds `block_k` rows of `ldb` elements from
/// `base_b` (bases in vectors of `na` and `nb` elements); the plane's part of the tile starts
/// at row `warp_row` and column `warp_col`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn multiply_slice<M: Float, VA: CubePrimitive, VB: CubePrimitive>(
    smem_a: &SharedMemory<VA>,
    smem_b: &SharedMemory<VB>,
    acc: &Sequence<cmma::Matrix<f32>>,
    base_a: usize,
    base_b: usize,
    warp_row: usize,
    warp_col: usize,
    #[comptime] lda: usize,
    #[comptime] ldb: usize,
    #[comptime] na: usize,
    #[comptime] nb: usize,
    #[comptime] frags_m: usize,
    #[comptime] frags_n: usize,
    #[comptime] block_k: usize,
    #[comptime] frag_k: usize,
) {
    let lda_u32 = comptime!(lda as u32);
    let ldb_u32 = comptime!(ldb as u32);
    #[unroll]
    for kf in 0..block_k / frag_k {
        let kk = kf * frag_k;
        let mut b_frags = Sequence::<cmma::Matrix<M>>::new();
        #[unroll]
        for j in 0..frags_n {
            let start = base_b + (kk * ldb + warp_col + j * 16) / nb;
            // SAFETY: loaded right away.
            let b_frag = unsafe {
                cmma::Matrix::<M>::uninitialized(
                    cmma::MatrixIdent::B,
                    comptime!(FRAG),
                    comptime!(FRAG),
                    frag_k,
                    cmma::MatrixLayout::RowMajor,
                )
            };
            cmma::load(&b_frag, &smem_b.slice(start, start + frag_k * ldb / nb), ldb_u32);
            b_frags.push(b_frag);
        }
        #[unroll]
        for i in 0..frags_m {
            let start = base_a + ((warp_row + i * 16) * lda + kk) / na;
            // SAFETY: loaded right away.
            let a_frag = unsafe {
                cmma::Matrix::<M>::uninitialized(
                    cmma::MatrixIdent::A,
                    comptime!(FRAG),
                    comptime!(FRAG),
                    frag_k,
                    cmma::MatrixLayout::RowMajor,
                )
            };
            cmma::load(&a_frag, &smem_a.slice(start, start + 16 * lda / na), lda_u32);
            #[unroll]
            for j in 0..frags_n {
                let c = acc.index(i * frags_n + j);
                cmma::execute::<M, M, f32, f32>(&a_frag, b_frags.index(j), c, c);
            }
        }
    }
}

/// Writes the plane's accumulators to the output: each fragment goes through the plane's own
/// 16 × 16 staging area in shared memory, then each unit writes 8 elements of it (half a row)
/// in vectors of `NO`, converted to `T`, skipping rows and columns past `m` and `n`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn write_tile<T: Float, NO: Size>(
    output: &mut Tensor<Vector<T, NO>>,
    acc: &Sequence<cmma::Matrix<f32>>,
    out_base: usize,
    row0: usize,
    col0: usize,
    m: usize,
    n: usize,
    warp: usize,
    lane: usize,
    #[comptime] units: usize,
    #[comptime] frags_m: usize,
    #[comptime] frags_n: usize,
) {
    let no = output.vector_size();
    let mut staging = SharedMemory::<f32>::new_aligned(comptime!(units * 8), comptime!(SMEM_ALIGN));
    let area = warp * 256;
    let sub_row = lane / 2;
    let sub_col = (lane % 2) * 8;
    #[unroll]
    for i in 0..frags_m {
        #[unroll]
        for j in 0..frags_n {
            cmma::store(
                &mut staging.slice_mut(area, area + 256),
                acc.index(i * frags_n + j),
                16u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_plane();
            let row = row0 + i * 16 + sub_row;
            #[unroll]
            for v in 0..comptime!(8 / no) {
                let col = col0 + j * 16 + sub_col + v * no;
                if row < m && col < n {
                    let mut value = Vector::<T, NO>::new(T::from_int(0));
                    #[unroll]
                    for e in 0..no {
                        value[e] = T::cast_from(staging[area + sub_row * 16 + sub_col + v * no + e]);
                    }
                    output[(out_base + row * n + col) / no] = value;
                }
            }
            sync_plane();
        }
    }
}
