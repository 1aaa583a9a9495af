//! Batched matrix multiplication: a shared-memory tiled kernel, one cube per output tile.
//!
//! `lhs` is a view `[batch.., M, K]` and `rhs` a view `[batch.., K, N]`, both with the
//! output's batch shape (stride 0 on broadcast batch dimensions); the output is contiguous
//! `[batch.., M, N]`. Cubes are numbered linearly (`CUBE_POS`) so that any batch count fits.
use cubecl::prelude::*;

/// `out[b] = lhs[b] @ rhs[b]`, `tile` × `tile` output elements per cube.
#[cube(launch_unchecked)]
pub fn matmul<T: Numeric>(
    lhs: &Tensor<T>,
    rhs: &Tensor<T>,
    output: &mut Tensor<T>,
    lhs_offset: usize,
    rhs_offset: usize,
    num_cubes: usize,
    #[comptime] tile: usize,
    #[define(T)] _dtype: StorageType,
) {
    let cube = CUBE_POS;
    // Uniform per cube, before any barrier.
    if cube >= num_cubes {
        terminate!();
    }
    let rank = output.rank();
    let m = output.shape(rank - 2);
    let n = output.shape(rank - 1);
    let k = lhs.shape(rank - 1);
    let tiles_n = n.div_ceil(tile);
    let tiles_m = m.div_ceil(tile);
    let tile_col = cube % tiles_n;
    let tile_row = (cube / tiles_n) % tiles_m;
    let mut batch = cube / (tiles_n * tiles_m);

    let mut lhs_base = lhs_offset;
    let mut rhs_base = rhs_offset;
    let mut out_base = 0;
    for i in 0..rank - 2 {
        let d = rank - 3 - i;
        let size = output.shape(d);
        let coord = batch % size;
        batch /= size;
        lhs_base += coord * lhs.stride(d);
        rhs_base += coord * rhs.stride(d);
        out_base += coord * output.stride(d);
    }

    let ux = UNIT_POS_X as usize;
    let uy = UNIT_POS_Y as usize;
    let row = tile_row * tile + uy;
    let col = tile_col * tile + ux;
    let lhs_row_stride = lhs.stride(rank - 2);
    let lhs_col_stride = lhs.stride(rank - 1);
    let rhs_row_stride = rhs.stride(rank - 2);
    let rhs_col_stride = rhs.stride(rank - 1);

    let mut tile_a = SharedMemory::<T>::new(tile * tile);
    let mut tile_b = SharedMemory::<T>::new(tile * tile);
    let mut acc = T::from_int(0);

    for t in 0..k.div_ceil(tile) {
        let ka = t * tile + ux;
        let mut a = T::from_int(0);
        if row < m && ka < k {
            a = lhs[lhs_base + row * lhs_row_stride + ka * lhs_col_stride];
        }
        tile_a[uy * tile + ux] = a;
        let kb = t * tile + uy;
        let mut b = T::from_int(0);
        if kb < k && col < n {
            b = rhs[rhs_base + kb * rhs_row_stride + col * rhs_col_stride];
        }
        tile_b[uy * tile + ux] = b;
        sync_cube();

        #[unroll]
        for kk in 0..tile {
            acc += tile_a[uy * tile + kk] * tile_b[kk * tile + ux];
        }
        sync_cube();
    }

    if row < m && col < n {
        output[out_base + row * n + col] = acc;
    }
}
