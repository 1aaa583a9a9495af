//! Fused elementwise kernels: a chain of float ops, known at compile time, over broadcast views
//! of several inputs, writing several outputs, in one launch.
//!
//! The program's registers are its inputs (register `k` is input `k`) followed by each op's
//! result in order; an op reads earlier registers only. Every op computes exactly as its own
//! kernel does (`unary_float` widens f16 and bf16 to f32 and rounds back, `binary_float`
//! computes in the storage type), so a fused chain gives the very bits that the chain of
//! launches gives, with one read of each input and one write of each output.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::round_to_bf16;
use crate::binary::{BinaryFloatOp, apply_binary_float};
use crate::compare::{CompareOp, apply_compare};
use crate::unary::{UnaryFloatOp, apply_unary_float};

/// One op of a fused program; its operands are register indices.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum FusedOp {
    /// `op(x)` with parameters 0, as `unary_float` computes it.
    Unary(UnaryFloatOp, usize),
    /// `op(a, b)`, as `binary_float` computes it.
    Binary(BinaryFloatOp, usize, usize),
    /// The larger of two values, NaN where either is NaN (Nx's `max`).
    NanMax(usize, usize),
    /// The smaller of two values, NaN where either is NaN (Nx's `min`).
    NanMin(usize, usize),
    /// `a op b` as 1 or 0, as `compare` computes it.
    Compare(CompareOp, usize, usize),
    /// `p != 0 ? a : b` (NaN counts as non-zero, as Nx's `select` has it).
    Select(usize, usize, usize),
    /// A finite f32 constant, by its bits (f32 programs only: the kernel gets it as a
    /// literal rather than as one more buffer to bind).
    Const(u32),
}

/// How a fused kernel reads one input.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum FusedRead {
    /// Contiguous with the output: element `offset + pos`.
    Linear,
    /// One value for every position: element `offset`.
    Scalar,
    /// A strided view over the iteration shape (strides in the launch's `strides`).
    Strided,
}

/// A fused program: how each input is read, the ops, and the registers written out.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FusedProgram {
    /// How input `k` is read; input `k` is register `k`.
    pub reads: Vec<FusedRead>,
    /// The ops; op `i` writes register `reads.len() + i`.
    pub ops: Vec<FusedOp>,
    /// The register that output `j` takes.
    pub outputs: Vec<usize>,
    /// Whether each op's result is rounded to bf16 (an f32 program standing for a bf16 one
    /// on a device without bf16: the bits that separate bf16 launches give).
    pub round_to_bf16: bool,
}

/// Runs `program` at each of the `len` positions of the iteration shape: output `j` (all
/// contiguous) gets register `program.outputs[j]`. Input `k` is element `offsets[k]` onward of
/// `inputs[k]`, read as `program.reads[k]` says; a strided input's strides over the iteration
/// shape `shape` are `strides[k * rank ..][..rank]` (empty sequences when no input is strided).
/// Unary ops compute in `A` (f32 for f16 and bf16), binary ops in `F`.
///
/// `lhs_one` and `rhs_one` are 1: every op reads its first operand times `lhs_one` and its
/// second times `rhs_one`, values the shader compiler cannot see. Vulkan drivers may rewrite
/// float arithmetic as if it were real arithmetic (Mesa turns `x - x` into 0 and
/// `x + (-x)` into 0, wrong for infinities and NaN); separate launches never show them such
/// patterns, and through these factors a fused chain doesn't either. Multiplying by 1 is
/// exact.
#[cube(launch_unchecked)]
pub fn fused_float<F: Float, A: Float>(
    inputs: &Sequence<Array<F>>,
    outputs: &mut Sequence<Array<F>>,
    offsets: Sequence<usize>,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    len: usize,
    lhs_one: InputScalar,
    rhs_one: InputScalar,
    #[comptime] program: FusedProgram,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= len {
        terminate!();
    }
    let mut regs = Sequence::<F>::new();
    #[unroll]
    for k in 0..program.reads.len() {
        let read = comptime!(program.reads[k]);
        let input = inputs.index(k);
        let offset = offsets[k];
        let x = match read {
            FusedRead::Linear => input[offset + ABSOLUTE_POS],
            FusedRead::Scalar => input[offset],
            FusedRead::Strided => input[offset + strided_offset(ABSOLUTE_POS, &shape, &strides, k)],
        };
        regs.push(x);
    }
    let zero = A::new(0.0);
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    #[unroll]
    for i in 0..program.ops.len() {
        let op = comptime!(program.ops[i]);
        let y = match op {
            FusedOp::Unary(u, x) => F::cast_from(apply_unary_float::<A>(A::cast_from(regs[x] * l), zero, zero, u)),
            FusedOp::Binary(b, x, y) => apply_binary_float::<F>(regs[x] * l, regs[y] * r, b),
            FusedOp::NanMax(x, y) => nan_pick::<F>(regs[x] * l, regs[y] * r, true),
            FusedOp::NanMin(x, y) => nan_pick::<F>(regs[x] * l, regs[y] * r, false),
            FusedOp::Compare(c, x, y) => F::cast_from(apply_compare::<F>(regs[x] * l, regs[y] * r, c)),
            FusedOp::Select(p, x, y) => select(!(regs[p] * l == F::new(0.0)), regs[x] * l, regs[y] * r),
            FusedOp::Const(bits) => F::new(comptime!(f32::from_bits(bits))),
        };
        let y = match comptime!(program.round_to_bf16) {
            true => F::cast_from(round_to_bf16(f32::cast_from(y))),
            false => y,
        };
        regs.push(y);
    }
    #[unroll]
    for j in 0..program.outputs.len() {
        let r = comptime!(program.outputs[j]);
        let output = outputs.index_mut(j);
        output[ABSOLUTE_POS] = regs[r];
    }
}

/// Offset of the `pos`-th element (row-major over `shape`) of input `k`, whose strides are
/// `strides[k * rank ..][..rank]`.
#[cube]
fn strided_offset(pos: usize, shape: &Sequence<FastDivmod<usize>>, strides: &Sequence<usize>, #[comptime] k: usize) -> usize {
    let rank = shape.len().comptime();
    let mut offset = 0;
    let mut rem = pos;
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let (q, r) = shape[d].div_mod(rem);
        offset += r * strides[k * rank + d];
        rem = q;
    }
    offset
}

/// Nx's `max` (`larger`) or `min`: NaN where either operand is NaN (their sum), else the pick.
#[cube]
fn nan_pick<F: Float>(a: F, b: F, #[comptime] larger: bool) -> F {
    let pick_a = if larger { a > b } else { a < b };
    let nan = !(a == a) || !(b == b);
    select(nan, a + b, select(pick_a, a, b))
}
