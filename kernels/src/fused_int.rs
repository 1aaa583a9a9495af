//! Fused elementwise integer kernels: a chain of integer ops (adds, shifts, rotations, xors:
//! what a counter-based random generator is made of), known at compile time, over broadcast
//! views of several inputs of one integer type, writing several outputs, in one launch.
//!
//! Registers are the inputs (register `k` is input `k`), then each op's result in order; an
//! op reads earlier registers only. Every op computes exactly as the op-by-op launches of
//! Nx's entries do (wrapping arithmetic in the storage type; shifts by the width or more
//! give 0, or -1 for a right shift of a negative signed value), so a fused chain gives the
//! very bits of the chain of launches. Comparisons give 1 or 0 of the type.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::binary::{BinaryIntOp, apply_binary_int};
use crate::compare::{CompareOp, apply_compare};
use crate::fused::{FusedRead, read_input};

/// One op of a fused integer program; its operands are register indices.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum IntFusedOp {
    /// `op(a, b)` as `binary_int` computes it (not `Shl` / `Shr`: see the shifts below).
    Binary(BinaryIntOp, usize, usize),
    /// `a << b`, 0 where `b` is the width or more.
    ShiftLeft(usize, usize),
    /// `a >> b` (arithmetic for signed types), 0 (or -1 for a negative signed `a`) where `b`
    /// is the width or more.
    ShiftRight(usize, usize),
    /// `0 - x`, wrapping.
    Negate(usize),
    /// Every bit of `x` flipped.
    BitNot(usize),
    /// `a op b` as 1 or 0.
    Compare(CompareOp, usize, usize),
    /// `p != 0 ? a : b`.
    Select(usize, usize, usize),
    /// A constant of the type (its value, already wrapped into the type's range).
    Const(i64),
}

/// A fused integer program: how each input is read, the ops, the registers written out,
/// and the type's width in bits and signedness (for the shifts).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct IntFusedProgram {
    /// How input `k` is read; it is register `k`.
    pub reads: Vec<FusedRead>,
    /// The ops; op `i` writes register `reads.len() + i`.
    pub ops: Vec<IntFusedOp>,
    /// The register that output `j` takes.
    pub outputs: Vec<usize>,
    /// The width of the type in bits.
    pub bits: u32,
    /// Whether the type is signed.
    pub signed: bool,
    /// Whether the outputs are stacked in one buffer (output `j` at `j * len` onward of
    /// output 0: the concatenation of the outputs along their first axis).
    pub stacked: bool,
}

/// Runs `program` at each of the `len` positions of the iteration shape: output `j` (every
/// output contiguous) gets register `program.outputs[j]` (with `stacked`, output 0 holds
/// them all, one after another). Input `k` is element `offsets[k]`
/// onward of its buffer, read as its `FusedRead` says; a strided input's strides over the
/// iteration shape `shape` are `strides[k * rank ..][..rank]`.
#[cube(launch_unchecked)]
pub fn fused_int<I: Int>(
    inputs: &Sequence<Array<I>>,
    outputs: &mut Sequence<Array<I>>,
    offsets: Sequence<usize>,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    len: usize,
    #[comptime] program: IntFusedProgram,
    #[define(I)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= len {
        terminate!();
    }
    let mut regs = Sequence::<I>::new();
    #[unroll]
    for k in 0..program.reads.len() {
        let read = comptime!(program.reads[k]);
        regs.push(read_input::<I>(inputs.index(k), offsets[k], ABSOLUTE_POS, read, &shape, &strides, k));
    }
    run_int_ops::<I>(&mut regs, program.ops.clone(), program.bits, program.signed);
    #[unroll]
    for j in 0..program.outputs.len() {
        let r = comptime!(program.outputs[j]);
        match comptime!(program.stacked) {
            true => {
                let output = outputs.index_mut(0usize);
                let k = comptime!(j as usize);
                output[len * k + ABSOLUTE_POS] = regs[r];
            }
            false => {
                let output = outputs.index_mut(j);
                output[ABSOLUTE_POS] = regs[r];
            }
        }
    }
}

/// Runs `ops` on the registers `regs`, pushing each result.
#[cube]
fn run_int_ops<I: Int>(regs: &mut Sequence<I>, #[comptime] ops: Vec<IntFusedOp>, #[comptime] bits: u32, #[comptime] signed: bool) {
    let zero = I::new(0);
    let width = I::new(comptime!(bits as i64));
    #[unroll]
    for i in 0..ops.len() {
        let op = comptime!(ops[i]);
        let y = match op {
            IntFusedOp::Binary(b, x, y) => apply_binary_int::<I>(regs[x], regs[y], b),
            IntFusedOp::ShiftLeft(x, y) => {
                let (a, b) = (regs[x], regs[y]);
                let safe = select(b >= width, zero, b);
                select(b >= width, zero, a << safe)
            }
            IntFusedOp::ShiftRight(x, y) => shift_right::<I>(regs[x], regs[y], width, signed),
            IntFusedOp::Negate(x) => zero - regs[x],
            IntFusedOp::BitNot(x) => !regs[x],
            IntFusedOp::Compare(c, x, y) => I::cast_from(apply_compare::<I>(regs[x], regs[y], c)),
            IntFusedOp::Select(p, x, y) => select(!(regs[p] == zero), regs[x], regs[y]),
            IntFusedOp::Const(value) => I::new(value),
        };
        regs.push(y);
    }
}

/// `a >> b` with Nx's result for shifts by the width or more.
#[cube]
fn shift_right<I: Int>(a: I, b: I, width: I, #[comptime] signed: bool) -> I {
    let zero = I::new(0);
    let wide = b >= width;
    let shifted = a >> select(wide, zero, b);
    match signed {
        true => select(wide, select(a < zero, zero - I::new(1), zero), shifted),
        false => select(wide, zero, shifted),
    }
}
