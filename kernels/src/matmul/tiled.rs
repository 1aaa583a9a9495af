//! The tiled matmul on plain arithmetic units.
//!
//! Each cube computes a `block_m` × `block_n` output tile with `(block_m / unit_m) ×
//! (block_n / unit_n)` units; each unit accumulates `unit_m` × `unit_n` outputs in registers.
//! The K dimension is walked in slices of `block_k`: the cube stages an `lhs` slice
//! (`block_m` × `block_k`, stored K-major so that a unit reads its rows as a column) and an
//! `rhs` slice (`block_k` × `block_n`) in shared memory, converted to the accumulator type
//! `A` (f32 for f16/bf16), then every unit runs `block_k` rank-1 updates of its registers.
//! A unit owns rows `ty + i * (block_m / unit_m)` and columns `tx + j * (block_n / unit_n)`,
//! so that neighbouring units read neighbouring shared-memory words (no bank conflicts) and
//! write neighbouring output elements. [`tiled_product`](fn@tiled_product) is the product itself, which
//! `fused_matmul` shares.
use cubecl::prelude::*;

use super::{TilePos, tile_pos};
use crate::bf16::{load, store};

/// The tiling of the tiled kernels: a `block_m` × `block_n` output tile per cube, K slices of
/// `block_k`, `unit_m` × `unit_n` outputs per unit; `unroll_k` unrolls the loop over a K
/// slice (faster code, but much longer shader compilation on some drivers).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct TiledConfig {
    /// Output rows per cube.
    pub block_m: usize,
    /// Output columns per cube.
    pub block_n: usize,
    /// K elements staged per step.
    pub block_k: usize,
    /// Output rows per unit.
    pub unit_m: usize,
    /// Output columns per unit.
    pub unit_n: usize,
    /// Whether the loop over a K slice is unrolled.
    pub unroll_k: bool,
}

/// `out[b] = lhs[b] @ rhs[b]`; see the module docs. With `bits` (here and in
/// [`tiled_product`](fn@tiled_product)), `T` is u16 holding bf16 bits, widened as they are
/// staged and rounded as they are stored ([`load`](fn@crate::bf16::load), [`store`](fn@crate::bf16::store)). `NA` and `NB` are the vector sizes of the
/// loads along K (`lhs`) and N (`rhs`). The launcher guarantees that the units of a cube
/// divide the vector counts of both staged slices.
#[cube(launch_unchecked)]
pub fn matmul_tiled<T: Numeric, A: Numeric, NA: Size, NB: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    output: &mut Tensor<T>,
    lhs_offset: usize,
    rhs_offset: usize,
    num_cubes: usize,
    #[comptime] tiling: TiledConfig,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let rank = lhs.rank();
    let (m, n) = (lhs.shape(rank - 2), rhs.shape(rank - 1));
    let pos = tile_pos::<Vector<T, NA>, Vector<T, NB>>(lhs, rhs, m, n, lhs_offset, rhs_offset, CUBE_POS, tiling.block_m, tiling.block_n);
    let acc = tiled_product::<T, A, NA, NB>(lhs, rhs, &pos, m, n, tiling, bits);
    let unit_m = comptime!(tiling.unit_m);
    let unit_n = comptime!(tiling.unit_n);
    let rows_of_units = comptime!(tiling.block_m / unit_m);
    let cols_of_units = comptime!(tiling.block_n / unit_n);
    let unit = UNIT_POS as usize;
    #[unroll]
    for i in 0..unit_m {
        let row = pos.row + unit / cols_of_units + i * rows_of_units;
        #[unroll]
        for j in 0..unit_n {
            let col = pos.col + unit % cols_of_units + j * cols_of_units;
            if row < m && col < n {
                output[pos.out + row * n + col] = store::<T, A>(acc[i * unit_n + j], bits);
            }
        }
    }
}

/// The unit's `unit_m` × `unit_n` sums of the cube's tile at `pos` (an `m` × `n` output),
/// row-major: sum `i * unit_n + j` is output row `pos.row + ty + i * (block_m / unit_m)`,
/// column `pos.col + tx + j * (block_n / unit_n)`, where the unit is `ty * (block_n / unit_n)
/// + tx`. Every unit of the cube calls it (it synchronises the cube).
#[cube]
pub fn tiled_product<T: Numeric, A: Numeric, NA: Size, NB: Size>(
    lhs: &Tensor<Vector<T, NA>>,
    rhs: &Tensor<Vector<T, NB>>,
    pos: &TilePos,
    m: usize,
    n: usize,
    #[comptime] tiling: TiledConfig,
    #[comptime] bits: bool,
) -> Array<A> {
    let block_m = comptime!(tiling.block_m);
    let block_n = comptime!(tiling.block_n);
    let block_k = comptime!(tiling.block_k);
    let unit_m = comptime!(tiling.unit_m);
    let unit_n = comptime!(tiling.unit_n);
    let unroll_k = comptime!(tiling.unroll_k);
    let na = lhs.vector_size();
    let nb = rhs.vector_size();
    let rows_of_units = block_m / unit_m;
    let cols_of_units = block_n / unit_n;
    let units = rows_of_units * cols_of_units;
    let a_loads = comptime!(block_m * block_k / na / units);
    let b_loads = comptime!(block_k * block_n / nb / units);

    let rank = lhs.rank();
    let k = lhs.shape(rank - 1);
    let lhs_row_stride = lhs.stride(rank - 2);
    let lhs_col_stride = lhs.stride(rank - 1);
    let rhs_row_stride = rhs.stride(rank - 2);
    let rhs_col_stride = rhs.stride(rank - 1);

    let unit = UNIT_POS as usize;
    let tx = unit % cols_of_units;
    let ty = unit / cols_of_units;

    let mut tile_a = SharedMemory::<A>::new(block_k * block_m);
    let mut tile_b = SharedMemory::<A>::new(block_k * block_n);
    let mut acc = Array::<A>::new(unit_m * unit_n);
    #[unroll]
    for i in 0..unit_m * unit_n {
        acc[i] = A::from_int(0);
    }
    let mut a = Array::<A>::new(unit_m);
    let mut b = Array::<A>::new(unit_n);

    for t in 0..k.div_ceil(block_k) {
        let k0 = t * block_k;
        // lhs slice: `block_k / na` vectors per row, consecutive units along K.
        #[unroll]
        for l in 0..a_loads {
            let v = unit + l * units;
            let row = v / (block_k / na);
            let kk = (v % (block_k / na)) * na;
            let gr = pos.row + row;
            let gk = k0 + kk;
            let mut value = Vector::<T, NA>::new(T::from_int(0));
            if gr < m && gk < k {
                value = lhs[(pos.lhs + gr * lhs_row_stride + gk * lhs_col_stride) / na];
            }
            #[unroll]
            for e in 0..na {
                tile_a[(kk + e) * block_m + row] = load::<T, A>(value[e], bits);
            }
        }
        // rhs slice: `block_n / nb` vectors per row, consecutive units along N.
        #[unroll]
        for l in 0..b_loads {
            let v = unit + l * units;
            let kr = v / (block_n / nb);
            let col = (v % (block_n / nb)) * nb;
            let gk = k0 + kr;
            let gc = pos.col + col;
            let mut value = Vector::<T, NB>::new(T::from_int(0));
            if gk < k && gc < n {
                value = rhs[(pos.rhs + gk * rhs_row_stride + gc * rhs_col_stride) / nb];
            }
            #[unroll]
            for e in 0..nb {
                tile_b[kr * block_n + col + e] = load::<T, A>(value[e], bits);
            }
        }
        sync_cube();

        #[unroll(unroll_k)]
        for kk in 0..block_k {
            #[unroll]
            for i in 0..unit_m {
                a[i] = tile_a[kk * block_m + ty + i * rows_of_units];
            }
            #[unroll]
            for j in 0..unit_n {
                b[j] = tile_b[kk * block_n + tx + j * cols_of_units];
            }
            #[unroll]
            for i in 0..unit_m {
                #[unroll]
                for j in 0..unit_n {
                    acc[i * unit_n + j] += a[i] * b[j];
                }
            }
        }
        sync_cube();
    }
    acc
}
