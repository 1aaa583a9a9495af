//! Batched matrix multiplication, `out[b] = lhs[b] @ rhs[b]`, in three kernels:
//!
//! - [`tiled`]: shared-memory tiles with register blocking on plain arithmetic units, for
//!   every numeric dtype (ints, exact f32, and floats on devices without matrix units).
//! - [`cmma`]: the same tiling with tensor cores through cubecl's `cmma` (f16 and bf16, and
//!   f32 rounded to TF32), f32 accumulators.
//! - [`mma`]: f16, bf16 and f32 rounded to TF32 on the matrix units' own instructions
//!   (`mma.sync`; `ldmatrix` for f16 / bf16), operands read in 16-byte chunks along whichever
//!   dimension is contiguous, swizzled shared memory, a multi-stage asynchronous-copy pipeline
//!   ([`pipeline`], shared with the convolutions on the same instructions).
//! - [`tma`]: the same f16 / bf16 product on Hopper, its operands loaded by the Tensor Memory
//!   Accelerator into hardware-swizzled shared memory, one unit feeding a ring of stages.
//!
//! Shared conventions: `lhs` is a view `[batch.., M, K]` and `rhs` a view `[batch.., K, N]`,
//! both with the output's batch shape (stride 0 on broadcast batch dimensions) and any
//! strides; the output is contiguous `[batch.., M, N]`. Inputs may be read in vectors along
//! their contiguous inner dimension (`K` for `lhs`, `N` for `rhs`): the launcher only picks a
//! vector size above 1 when that dimension has stride 1 and the vector size divides it, the
//! other strides and the offset. Cubes are numbered linearly (`CUBE_POS`), one per output
//! tile, so that any batch count fits; cubes past `num_cubes` leave at once.
pub mod cmma;
pub mod mma;
pub mod pipeline;
pub mod tiled;
pub mod tma;

use cubecl::prelude::*;

/// Where one cube's output tile lies: the element offsets of its batch in `lhs`, `rhs` and the
/// output, and the tile's first row and column.
#[derive(CubeType)]
pub struct TilePos {
    /// Offset of the batch's `lhs` matrix, in elements.
    pub lhs: usize,
    /// Offset of the batch's `rhs` matrix, in elements.
    pub rhs: usize,
    /// Offset of the batch's output matrix, in elements.
    pub out: usize,
    /// First output row of the tile.
    pub row: usize,
    /// First output column of the tile.
    pub col: usize,
}

/// The tile of cube `cube`: tiles run along `N` first, then `M`, then the batch dimensions
/// (the last batch dimension fastest). The batch shape is `lhs`'s (the output's, see the
/// module docs), and the output is contiguous: its batch `b` starts at `b * m * n`.
#[cube]
pub fn tile_pos<L: CubePrimitive, R: CubePrimitive>(
    lhs: &Tensor<L>,
    rhs: &Tensor<R>,
    m: usize,
    n: usize,
    lhs_offset: usize,
    rhs_offset: usize,
    cube: usize,
    #[comptime] block_m: usize,
    #[comptime] block_n: usize,
) -> TilePos {
    let rank = lhs.rank();
    let tiles_n = n.div_ceil(block_n);
    let tiles_m = m.div_ceil(block_m);
    let col = (cube % tiles_n) * block_n;
    let row = ((cube / tiles_n) % tiles_m) * block_m;
    let batch_index = cube / (tiles_n * tiles_m);
    let mut batch = batch_index;
    let mut lhs_base = lhs_offset;
    let mut rhs_base = rhs_offset;
    for i in 0..rank - 2 {
        let d = rank - 3 - i;
        let size = lhs.shape(d);
        let coord = batch % size;
        batch /= size;
        lhs_base += coord * lhs.stride(d);
        rhs_base += coord * rhs.stride(d);
    }
    TilePos { lhs: lhs_base, rhs: rhs_base, out: batch_index * m * n, row, col }
}
