//! Fused reductions: a fused program over the input shape (the *read* program), the reduction
//! of one of its registers along one axis, and a fused program over the reduced shape (the
//! *write* program, whose register 0 is the reduced value), in one launch.
//!
//! The input shape's elements are taken line by line: line `l` (row-major over every dim but
//! the axis, which is also the position of its result in the reduced shape) holds `len`
//! elements. Read input `k`'s element `i` of line `l` is at `offsets[k] + line offset + i *
//! axis_strides[k]`, the line offset from `line_strides[k * rank ..]` over the `lines` shape
//! (the reduced shape without its axis). The read program's outputs are contiguous over the
//! input shape (their line strides and axis stride come after the inputs'), the write
//! program's over the reduced shape (position `l`); write inputs are views over the reduced
//! shape (their offsets and line strides come after the read inputs' and the outputs').
//!
//! Elements fold in the order of `reduce_per_unit` (one unit per line) or `reduce_per_cube`
//! (one cube per line, `cube_size` units striding over it, then a shared-memory tree), so a
//! fused reduction gives the bits of the ops run one launch at a time.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::round_to_bf16;
use crate::fused::{FusedProgram, as_register, read_input, run_ops, strided_offset, write_registers};
use crate::reduce::{Acc, ReduceOp, acc_init, acc_push, acc_write, cube_merge};

/// A fused reduction: both programs, the register reduced, the reduction and how lines are
/// spread over units.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FusedReduceProgram {
    /// The read program (its `reads` only count its float inputs: every read is strided).
    pub read: FusedProgram,
    /// The register of the read program that is reduced.
    pub reduced: usize,
    /// The reduction (sum, mean, prod, max or min).
    pub op: ReduceOp,
    /// The write program; its float input 0 is the reduced value (not read from memory: its
    /// `reads[0]` is unused), the others are the write inputs.
    pub write: FusedProgram,
    /// `None`: one unit per line; `Some(n)`: one cube of `n` units per line.
    pub cube_size: Option<usize>,
}

/// The fused reduction over `count` lines of `len` elements (see the module docs). Unary ops
/// compute in `A` (f32 for f16 and bf16), binary ops in `F`; the reduction accumulates in
/// `A`; `B` is the bool storage type. `lhs_one` and `rhs_one` are 1 (see `fused_float`).
#[cube(launch_unchecked)]
pub fn fused_reduce<F: Float, A: Float, B: Numeric>(
    inputs: &Sequence<Array<F>>,
    bools: &Sequence<Array<B>>,
    write_inputs: &Sequence<Array<F>>,
    write_bools: &Sequence<Array<B>>,
    outputs: &mut Sequence<Array<F>>,
    bool_outputs: &mut Sequence<Array<B>>,
    write_outputs: &mut Sequence<Array<F>>,
    write_bool_outputs: &mut Sequence<Array<B>>,
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
    #[comptime] program: FusedReduceProgram,
    #[define(F, A, B)] _dtypes: [StorageType; 3],
) {
    let per_cube = comptime!(program.cube_size.is_some());
    let line = if per_cube { CUBE_POS } else { ABSOLUTE_POS };
    // Uniform per cube in the cube strategy: a cube past the end leaves before any barrier.
    if line >= count {
        terminate!();
    }
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    let (floats, bool_count) = comptime!((program.read.reads.len(), program.read.bool_reads.len()));
    let read_inputs = comptime!(floats + bool_count);
    // Where line `line` starts in each read input and in the read outputs.
    let mut starts = Sequence::<usize>::new();
    #[unroll]
    for k in 0..read_inputs + 1 {
        starts.push(strided_offset(line, &lines, &line_strides, k));
    }
    let out_axis = axis_strides[read_inputs];

    let mut acc = acc_init::<A>(program.op);
    let step = comptime!(program.cube_size.unwrap_or(1));
    // Each unit starts at its own element in the cube strategy, at the line's first otherwise.
    let mut i = UNIT_POS as usize * comptime!(program.cube_size.is_some() as usize);
    let mut first = true;
    while i < len {
        let mut regs = Sequence::<F>::new();
        #[unroll]
        for k in 0..floats {
            regs.push(inputs.index(k)[offsets[k] + starts[k] + i * axis_strides[k]]);
        }
        #[unroll]
        for k in 0..bool_count {
            let j = comptime!(floats + k);
            regs.push(as_register::<F, B>(bools.index(k)[offsets[j] + starts[j] + i * axis_strides[j]]));
        }
        run_ops::<F, A>(&mut regs, &scalars, &params, l, r, program.read.ops.clone(), program.read.round_to_bf16);
        let at = starts[read_inputs] + i * out_axis;
        write_registers::<F, F, B>(outputs, bool_outputs, at, &regs, program.read.outputs.clone(), program.read.bool_outputs.clone(), false);
        // Times `lhs_one`, as every op's operand: the driver sees no pattern joining the
        // read program's last op and the fold (Mesa's did, changing a sum's bits).
        acc_push::<A>(&mut acc, A::cast_from(regs[program.reduced] * l), i as u32, first, program.op);
        first = false;
        i += step;
    }
    let total = if per_cube { cube_merge::<A>(acc, !first, program.op, step) } else { acc };
    if per_cube && UNIT_POS != 0 {
        terminate!();
    }
    write_line::<F, A, B>(
        total, line, write_inputs, write_bools, write_outputs, write_bool_outputs, &offsets, &lines, &line_strides,
        len, &scalars, &params, l, r, read_inputs + 1, program,
    );
}

/// Runs the write program at reduced position `line` from the total `total` and writes its
/// outputs there. Write input `k` is at `offsets[first + k]` with line strides
/// `line_strides[(first + k) * rank ..]`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_line<F: Float, A: Float, B: Numeric>(
    total: Acc<A>,
    line: usize,
    write_inputs: &Sequence<Array<F>>,
    write_bools: &Sequence<Array<B>>,
    write_outputs: &mut Sequence<Array<F>>,
    write_bool_outputs: &mut Sequence<Array<B>>,
    offsets: &Sequence<usize>,
    lines: &Sequence<FastDivmod<usize>>,
    line_strides: &Sequence<usize>,
    len: usize,
    scalars: &Sequence<InputScalar>,
    params: &Sequence<InputScalar>,
    l: F,
    r: F,
    #[comptime] first: usize,
    #[comptime] program: FusedReduceProgram,
) {
    let reduced = acc_write::<A, F>(total, len, program.op, false);
    // The reduced value as its own launch stores it (rounded to bf16 where the program
    // stands for bf16).
    let reduced = match comptime!(program.write.round_to_bf16) {
        true => F::cast_from(round_to_bf16(f32::cast_from(reduced))),
        false => reduced,
    };
    let mut regs = Sequence::<F>::new();
    regs.push(reduced);
    let floats = comptime!(program.write.reads.len());
    #[unroll]
    for k in 1..floats {
        let j = comptime!(first + k - 1);
        regs.push(read_input::<F>(write_inputs.index(k - 1), offsets[j], line, comptime!(program.write.reads[k]), lines, line_strides, j));
    }
    #[unroll]
    for k in 0..program.write.bool_reads.len() {
        let j = comptime!(first + floats - 1 + k);
        let b = read_input::<B>(write_bools.index(k), offsets[j], line, comptime!(program.write.bool_reads[k]), lines, line_strides, j);
        regs.push(as_register::<F, B>(b));
    }
    run_ops::<F, A>(&mut regs, scalars, params, l, r, program.write.ops.clone(), program.write.round_to_bf16);
    write_registers::<F, F, B>(write_outputs, write_bool_outputs, line, &regs, program.write.outputs, program.write.bool_outputs, false);
}
