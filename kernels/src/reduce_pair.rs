//! Two reductions in a row as one launch: along axis `a` of the input, then along axis `b` of
//! that result (autodiff's gradient of a broadcast, `[1, C, H, W]` summed over `H`, then over
//! `W`, two latency-bound launches of a few microseconds each).
//!
//! One cube per output element (line `l`, row-major over every dimension but `a` and `b`,
//! starting at `offset + seq_offset(l, lines, line_strides)`). Unit `j` of the cube folds the
//! `len_a` elements `stride_a` apart that start `j * stride_b` into the line, in order, as
//! `reduce_per_unit` does the first reduction, and keeps the value as the first reduction's
//! output holds it (in `T`: rounded to f16, or to bf16's bits). Unit 0 then folds the `len_b`
//! values in order, as `reduce_per_unit` does the second: the bits of the two launches.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::load;
use crate::reduce::{ReduceOp, acc_init, acc_push, write_output};
use crate::strided::seq_offset;

/// The two reductions' ops and how their elements lie.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PairOps {
    /// The first reduction (along `a`).
    pub first: ReduceOp,
    /// The second (along `b`, of the first's output).
    pub second: ReduceOp,
    /// bf16 held as its bits in u16, in and out (the accumulator is f32).
    pub bits: bool,
}

/// The two reductions of each of `output`'s elements (see the module docs); `cube_size`
/// (comptime, at least `len_b`) units per cube. `T` is the storage type of the input, of
/// the first reduction's output and of `output`; `A` the accumulator's.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn reduce_pair<T: Numeric, A: Numeric>(
    input: &Array<T>,
    output: &mut Array<T>,
    offset: usize,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    len_a: usize,
    stride_a: usize,
    len_b: usize,
    stride_b: usize,
    #[comptime] ops: PairOps,
    #[comptime] cube_size: usize,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let line = CUBE_POS;
    // Uniform per cube: a cube past the end leaves as a whole, before the barrier.
    if line >= output.len() {
        terminate!();
    }
    let j = UNIT_POS as usize;
    let mut partials = SharedMemory::<A>::new(cube_size);
    if j < len_b {
        let start = offset + seq_offset(line, &lines, &line_strides) + j * stride_b;
        let mut acc = acc_init::<A>(ops.first);
        for k in 0..len_a {
            acc_push::<A>(&mut acc, load::<T, A>(input[start + k * stride_a], ops.bits), k as u32, k == 0, ops.first);
        }
        // The first reduction's output element, as its launch stores it.
        let stored = write_output::<A, T>(acc, len_a, ops.first, false, ops.bits);
        partials[j] = load::<T, A>(stored, ops.bits);
    }
    sync_cube();
    if j == 0 {
        let mut acc = acc_init::<A>(ops.second);
        for k in 0..len_b {
            acc_push::<A>(&mut acc, partials[k], k as u32, k == 0, ops.second);
        }
        output[line] = write_output::<A, T>(acc, len_b, ops.second, false, ops.bits);
    }
}
