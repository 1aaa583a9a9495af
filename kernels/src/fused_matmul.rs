//! Matrix products with a fused epilogue: the tiled kernel's product (`matmul::tiled`), then a
//! fused program over the output shape whose float input 0 is the product, in one launch.
//! The product never goes to memory unless the program writes it out: `relu(x @ w + b)`
//! reads `x`, `w` and `b` and writes the activation only.
//!
//! Each output element is the product as the tiled kernel stores it (cast to the storage
//! type), then the program's ops as `fused_float` computes them: a fused product gives the
//! bits of the product and the epilogue launched one after the other.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::fused::{FusedProgram, as_register, read_input, run_ops, write_registers};
use crate::matmul::tile_pos;
use crate::matmul::tiled::{TiledConfig, tiled_product};

/// `lhs @ rhs` (views as `matmul_tiled` takes them), then `program` at every output position:
/// its float input 0 is the product (`program.reads[0]` is unused), float input `k > 0` is
/// `inputs[k - 1]` and bool input `k` is `bools[k]`, read over the output shape `shape` (input
/// `j` of the two lists together at `offsets[j]`, strides `strides[j * rank ..][..rank]`);
/// float output `j` (contiguous, of the output shape) gets register `program.outputs[j]`,
/// bool output `j` register `program.bool_outputs[j]`. The product accumulates in `A`, which
/// is also the type unary ops compute in (f32 for f16); binary ops compute in `F`; `B` is
/// the bool storage type; `lhs_one` and `rhs_one` are 1 (see `fused_float`).
#[cube(launch_unchecked)]
pub fn fused_matmul<F: Float, A: Float, B: Numeric, NA: Size, NB: Size>(
    lhs: &Tensor<Vector<F, NA>>,
    rhs: &Tensor<Vector<F, NB>>,
    inputs: &Sequence<Array<F>>,
    bools: &Sequence<Array<B>>,
    outputs: &mut Sequence<Array<F>>,
    bool_outputs: &mut Sequence<Array<B>>,
    lhs_offset: usize,
    rhs_offset: usize,
    num_cubes: usize,
    offsets: Sequence<usize>,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    scalars: Sequence<InputScalar>,
    params: Sequence<InputScalar>,
    lhs_one: InputScalar,
    rhs_one: InputScalar,
    #[comptime] tiling: TiledConfig,
    #[comptime] program: FusedProgram,
    #[define(F, A, B)] _dtypes: [StorageType; 3],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let rank = lhs.rank();
    let (m, n) = (lhs.shape(rank - 2), rhs.shape(rank - 1));
    let pos = tile_pos::<Vector<F, NA>, Vector<F, NB>>(lhs, rhs, m, n, lhs_offset, rhs_offset, CUBE_POS, tiling.block_m, tiling.block_n);
    let acc = tiled_product::<F, A, NA, NB>(lhs, rhs, &pos, m, n, tiling, false);
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    let unit_m = comptime!(tiling.unit_m);
    let unit_n = comptime!(tiling.unit_n);
    let rows_of_units = comptime!(tiling.block_m / unit_m);
    let cols_of_units = comptime!(tiling.block_n / unit_n);
    let floats = comptime!(program.reads.len());
    let unit = UNIT_POS as usize;
    #[unroll]
    for i in 0..unit_m {
        let row = pos.row + unit / cols_of_units + i * rows_of_units;
        #[unroll]
        for j in 0..unit_n {
            let col = pos.col + unit % cols_of_units + j * cols_of_units;
            if row < m && col < n {
                let at = pos.out + row * n + col;
                let mut regs = Sequence::<F>::new();
                regs.push(F::cast_from(acc[i * unit_n + j]));
                #[unroll]
                for k in 1..floats {
                    let input = comptime!(k - 1);
                    regs.push(read_input::<F>(inputs.index(input), offsets[input], at, comptime!(program.reads[k]), &shape, &strides, input));
                }
                #[unroll]
                for k in 0..program.bool_reads.len() {
                    let input = comptime!(floats - 1 + k);
                    let b = read_input::<B>(bools.index(k), offsets[input], at, comptime!(program.bool_reads[k]), &shape, &strides, input);
                    regs.push(as_register::<F, B>(b));
                }
                run_ops::<F, A>(&mut regs, &scalars, &params, l, r, program.ops.clone(), program.round_to_bf16);
                write_registers::<F, F, B>(outputs, bool_outputs, at, &regs, program.outputs.clone(), program.bool_outputs.clone(), false);
            }
        }
    }
}
