//! The fused reduction of [`crate::fused_reduce`] on `N` adjacent lines per unit, for
//! reductions along a dimension that is not the innermost (autodiff's sums of a gradient over
//! the batch, batch norm's statistics): each step along the reduced dimension loads one
//! vector (or one value for every lane) per input and stores one vector per output, where the
//! one-line-per-unit kernel moves one element. The programs run lane by lane and each line
//! folds in that kernel's order, so the bits are its bits.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::round_to_bf16;
use crate::fused::{FusedProgram, run_ops, strided_offset};
use crate::fused_vec::{VectorRead, index, slot};
use crate::reduce::{Acc, ReduceOp, acc_init, acc_push, acc_write};

/// A fused reduction on vectors of lines: both programs (float registers only), the register
/// reduced and the reduction.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FusedReduceVecProgram {
    /// The read program; input `k` is read `Strided` (as a vector) or `StridedSplat`.
    pub read: FusedProgram<VectorRead>,
    /// The register of the read program that is reduced.
    pub reduced: usize,
    /// The reduction (sum, mean, prod, max or min).
    pub op: ReduceOp,
    /// The write program; its input 0 is the reduced value (`reads[0]` is unused), the
    /// others are read as their `VectorRead` says over the reduced shape.
    pub write: FusedProgram<VectorRead>,
}

/// Unit `ABSOLUTE_POS` runs the fused reduction (see [`crate::fused_reduce`]'s module docs for
/// the layout of `offsets`, `lines`, `line_strides` and `axis_strides`, here without bool
/// inputs) on lines `N * ABSOLUTE_POS ..`, `count` units in all. Read inputs read as vectors
/// are bound in `vectors`, the others in `splats` (likewise the write inputs); `N` divides the
/// lines' innermost dimension and every offset and stride of an input read as a vector, so
/// each vector is whole and aligned. Offsets of write inputs read `Linear` count vectors.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn fused_reduce_vec<F: Float, A: Float, N: Size>(
    vectors: &Sequence<Array<Vector<F, N>>>,
    splats: &Sequence<Array<F>>,
    write_vectors: &Sequence<Array<Vector<F, N>>>,
    write_splats: &Sequence<Array<F>>,
    outputs: &mut Sequence<Array<Vector<F, N>>>,
    write_outputs: &mut Sequence<Array<Vector<F, N>>>,
    offsets: Sequence<usize>,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    axis_strides: Sequence<usize>,
    len: usize,
    count: usize,
    scalars: Sequence<InputScalar>,
    params: Sequence<InputScalar>,
    lhs_one: InputScalar,
    rhs_one: InputScalar,
    #[comptime] program: FusedReduceVecProgram,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= count {
        terminate!();
    }
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    let floats = comptime!(program.read.reads.len());
    let outs = comptime!(program.read.outputs.len());
    // Where the first line starts (in elements) in each read input and in the read outputs.
    let mut starts = Sequence::<usize>::new();
    #[unroll]
    for k in 0..floats + 1 {
        starts.push(offsets[k] + strided_offset(ABSOLUTE_POS * N::value(), &lines, &line_strides, k));
    }
    let out_axis = axis_strides[floats];
    let init = acc_init::<A>(program.op);
    let mut values = Vector::<A, N>::new(init.value);
    for i in 0..len {
        let mut loaded = Sequence::<Vector<F, N>>::new();
        #[unroll]
        for k in 0..floats {
            let (read, s) = comptime!((program.read.reads[k], slot(&program.read.reads, k)));
            let at = starts[k] + i * axis_strides[k];
            let v = match read.is_vector() {
                true => vectors.index(s)[at / N::value()],
                false => Vector::<F, N>::new(splats.index(s)[at]),
            };
            loaded.push(v);
        }
        let mut results = Sequence::<Vector<F, N>>::new();
        #[unroll]
        for _ in 0..outs {
            results.push(Vector::<F, N>::empty());
        }
        #[unroll]
        for lane in 0..N::value() {
            let mut regs = Sequence::<F>::new();
            #[unroll]
            for k in 0..floats {
                regs.push(loaded[k][lane]);
            }
            run_ops::<F, A>(&mut regs, &scalars, &params, l, r, program.read.ops.clone(), program.read.round_to_bf16);
            #[unroll]
            for j in 0..outs {
                let reg = comptime!(program.read.outputs[j]);
                let result = results.index_mut(j);
                result[lane] = regs[reg];
            }
            let mut acc = Acc::<A> { value: values[lane], index: 0u32 };
            // Times `lhs_one`, as in `fused_reduce`.
            acc_push::<A>(&mut acc, A::cast_from(regs[program.reduced] * l), i as u32, i == 0, program.op);
            values[lane] = acc.value;
        }
        let at = (starts[floats] + i * out_axis) / N::value();
        #[unroll]
        for j in 0..outs {
            let output = outputs.index_mut(j);
            output[at] = results[j];
        }
    }
    write_lines::<F, A, N>(
        values, write_vectors, write_splats, write_outputs, &offsets, &lines, &line_strides, len, &scalars, &params, l, r,
        floats + 1, program,
    );
}

/// Runs the write program on the totals `values` of lines `N * ABSOLUTE_POS ..` and stores its
/// outputs there. Write input `k` is input `first + k - 1` of `offsets` and `line_strides`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_lines<F: Float, A: Float, N: Size>(
    values: Vector<A, N>,
    write_vectors: &Sequence<Array<Vector<F, N>>>,
    write_splats: &Sequence<Array<F>>,
    write_outputs: &mut Sequence<Array<Vector<F, N>>>,
    offsets: &Sequence<usize>,
    lines: &Sequence<FastDivmod<usize>>,
    line_strides: &Sequence<usize>,
    len: usize,
    scalars: &Sequence<InputScalar>,
    params: &Sequence<InputScalar>,
    l: F,
    r: F,
    #[comptime] first: usize,
    #[comptime] program: FusedReduceVecProgram,
) {
    let floats = comptime!(program.write.reads.len());
    let outs = comptime!(program.write.outputs.len());
    let mut loaded = Sequence::<Vector<F, N>>::new();
    #[unroll]
    for k in 1..floats {
        let (read, j) = comptime!((program.write.reads[k], first + k - 1));
        let s = comptime!(slot(&program.write.reads[1..], k - 1));
        let at = index::<N>(ABSOLUTE_POS, offsets[j], read, lines, line_strides, j);
        let v = match read.is_vector() {
            true => write_vectors.index(s)[at],
            false => Vector::<F, N>::new(write_splats.index(s)[at]),
        };
        loaded.push(v);
    }
    let mut results = Sequence::<Vector<F, N>>::new();
    #[unroll]
    for _ in 0..outs {
        results.push(Vector::<F, N>::empty());
    }
    #[unroll]
    for lane in 0..N::value() {
        let reduced = acc_write::<A, F>(Acc::<A> { value: values[lane], index: 0u32 }, len, program.op, false);
        // The reduced value as its own launch stores it (rounded to bf16 where the program
        // stands for bf16).
        let reduced = match comptime!(program.write.round_to_bf16) {
            true => F::cast_from(round_to_bf16(f32::cast_from(reduced))),
            false => reduced,
        };
        let mut regs = Sequence::<F>::new();
        regs.push(reduced);
        #[unroll]
        for k in 1..floats {
            regs.push(loaded[comptime!(k - 1)][lane]);
        }
        run_ops::<F, A>(&mut regs, scalars, params, l, r, program.write.ops.clone(), program.write.round_to_bf16);
        #[unroll]
        for j in 0..outs {
            let reg = comptime!(program.write.outputs[j]);
            let result = results.index_mut(j);
            result[lane] = regs[reg];
        }
    }
    #[unroll]
    for j in 0..outs {
        let output = write_outputs.index_mut(j);
        output[ABSOLUTE_POS] = results[j];
    }
}
