//! Fused elementwise kernels: a chain of float ops, known at compile time, over broadcast views
//! of several inputs, writing several outputs, in one launch.
//!
//! The program's registers are its float inputs (register `k` is float input `k`), then its
//! bool inputs (0 / 1 of a bool storage type, read as 0.0 / 1.0), then each op's result in
//! order; an op reads earlier registers only. Every op computes exactly as its own kernel
//! does (`unary_float` widens f16 and bf16 to f32 and rounds back, `binary_float` computes in
//! the storage type), so a fused chain gives the very bits that the chain of launches gives,
//! with one read of each input and one write of each output. Comparisons and predicates give
//! 1.0 / 0.0; a bool output stores `register != 0` in the bool storage type.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, round_to_bf16, store};
use crate::binary::{BinaryFloatOp, apply_binary_float};
use crate::compare::{CompareOp, PredicateOp, apply_compare, apply_predicate};
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
    /// The launch's scalar `k` (`scalars[k]`, in the storage type): a value that changes
    /// from launch to launch without recompiling. As a scalar op's argument, it is not
    /// rounded to bf16 in a program that rounds (the host rounds a fill value).
    Scalar(usize),
    /// `op(x)` with its parameters `a` and `b` from the launch's `params[a]` and
    /// `params[b]` (in the type the op computes in), as `unary_float` computes it.
    UnaryWith(UnaryFloatOp, usize, usize, usize),
    /// A predicate of `x` as 1 or 0, as `float_predicate` computes it.
    Predicate(PredicateOp, usize),
    /// Logical not: 1 where `x` is 0, else 0.
    Not(usize),
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

/// A fused program: how each input is read (a [`FusedRead`], or a
/// [`VectorRead`](crate::fused_vec::VectorRead) in the vectorised kernel), the ops, and the
/// registers written out.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct FusedProgram<Read = FusedRead> {
    /// How float input `k` is read; it is register `k`.
    pub reads: Vec<Read>,
    /// How bool input `k` is read; it is register `reads.len() + k`.
    pub bool_reads: Vec<Read>,
    /// The ops; op `i` writes register `reads.len() + bool_reads.len() + i`.
    pub ops: Vec<FusedOp>,
    /// The register that float output `j` takes.
    pub outputs: Vec<usize>,
    /// The register that bool output `j` takes (stored as `register != 0`).
    pub bool_outputs: Vec<usize>,
    /// Whether each op's result is rounded to bf16 (an f32 program standing for a bf16 one
    /// on a device without bf16: the bits that separate bf16 launches give). In
    /// [`fused_float`](fn@fused_float) and the vectorised kernel, the float inputs and outputs
    /// are then bf16 held as bits in u16 ([`load`](fn@crate::bf16::load), [`store`](fn@crate::bf16::store)).
    pub round_to_bf16: bool,
}

/// Runs `program` at each of the `len` positions of the iteration shape: float output `j`
/// (all outputs contiguous) gets register `program.outputs[j]`, bool output `j` register
/// `program.bool_outputs[j]`. Input `k` (the float inputs, then the bool inputs) is element
/// `offsets[k]` onward of its buffer, read as its `FusedRead` says; a strided input's strides
/// over the iteration shape `shape` are `strides[k * rank ..][..rank]` (empty sequences when
/// no input is strided). The float inputs and outputs are stored as `S` (`F`, or u16 holding
/// bf16 bits with `program.round_to_bf16`), registers are `F`; unary ops compute in `A` (f32
/// for f16 and bf16), binary ops in `F`; `B` is the bool storage type.
///
/// `lhs_one` and `rhs_one` are 1: every op reads its first operand times `lhs_one` and its
/// second times `rhs_one`, values the shader compiler cannot see. Vulkan drivers may rewrite
/// float arithmetic as if it were real arithmetic (Mesa turns `x - x` into 0 and
/// `x + (-x)` into 0, wrong for infinities and NaN); separate launches never show them such
/// patterns, and through these factors a fused chain doesn't either. Multiplying by 1 is
/// exact.
#[cube(launch_unchecked)]
pub fn fused_float<S: Numeric, F: Float, A: Float, B: Numeric>(
    inputs: &Sequence<Array<S>>,
    bools: &Sequence<Array<B>>,
    outputs: &mut Sequence<Array<S>>,
    bool_outputs: &mut Sequence<Array<B>>,
    offsets: Sequence<usize>,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    len: usize,
    scalars: Sequence<InputScalar>,
    params: Sequence<InputScalar>,
    lhs_one: InputScalar,
    rhs_one: InputScalar,
    #[comptime] program: FusedProgram,
    #[define(S, F, A, B)] _dtypes: [StorageType; 4],
) {
    if ABSOLUTE_POS >= len {
        terminate!();
    }
    let bits = comptime!(program.round_to_bf16);
    let mut regs = Sequence::<F>::new();
    #[unroll]
    for k in 0..program.reads.len() {
        let read = comptime!(program.reads[k]);
        let x = read_input::<S>(inputs.index(k), offsets[k], ABSOLUTE_POS, read, &shape, &strides, k);
        regs.push(load::<S, F>(x, bits));
    }
    let floats = comptime!(program.reads.len());
    #[unroll]
    for k in 0..program.bool_reads.len() {
        let read = comptime!(program.bool_reads[k]);
        let b = read_input::<B>(bools.index(k), offsets[floats + k], ABSOLUTE_POS, read, &shape, &strides, floats + k);
        regs.push(as_register::<F, B>(b));
    }
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    run_ops::<F, A>(&mut regs, &scalars, &params, l, r, program.ops.clone(), program.round_to_bf16);
    write_registers::<S, F, B>(outputs, bool_outputs, ABSOLUTE_POS, &regs, program.outputs, program.bool_outputs, bits);
}

/// Stores register `float_regs[j]` at `at` of float output `j` (of `S`: `F`, or with `bits`
/// u16 holding the bf16's bits), and register `bool_regs[j]` as `register != 0` at `at` of
/// bool output `j`.
#[cube]
pub(crate) fn write_registers<S: Numeric, F: Float, B: Numeric>(
    outputs: &mut Sequence<Array<S>>,
    bool_outputs: &mut Sequence<Array<B>>,
    at: usize,
    regs: &Sequence<F>,
    #[comptime] float_regs: Vec<usize>,
    #[comptime] bool_regs: Vec<usize>,
    #[comptime] bits: bool,
) {
    #[unroll]
    for j in 0..float_regs.len() {
        let r = comptime!(float_regs[j]);
        let output = outputs.index_mut(j);
        output[at] = store::<S, F>(regs[r], bits);
    }
    #[unroll]
    for j in 0..bool_regs.len() {
        let r = comptime!(bool_regs[j]);
        let output = bool_outputs.index_mut(j);
        output[at] = B::cast_from(!(regs[r] == F::new(0.0)));
    }
}

/// Runs `ops` on the registers `regs`, pushing each result (see [`fused_float`]: `l` and `r`
/// are its `lhs_one` and `rhs_one`; with `rounding` every computed value is rounded to bf16).
#[cube]
pub(crate) fn run_ops<F: Float, A: Float>(
    regs: &mut Sequence<F>,
    scalars: &Sequence<InputScalar>,
    params: &Sequence<InputScalar>,
    l: F,
    r: F,
    #[comptime] ops: Vec<FusedOp>,
    #[comptime] rounding: bool,
) {
    let zero = A::new(0.0);
    #[unroll]
    for i in 0..ops.len() {
        let op = comptime!(ops[i]);
        let y = match op {
            FusedOp::Unary(u, x) => F::cast_from(apply_unary_float::<A>(A::cast_from(regs[x] * l), zero, zero, u)),
            FusedOp::UnaryWith(u, x, a, b) => {
                let (a, b) = (params.index(a).get::<A>(), params.index(b).get::<A>());
                F::cast_from(apply_unary_float::<A>(A::cast_from(regs[x] * l), a, b, u))
            }
            FusedOp::Binary(b, x, y) => apply_binary_float::<F>(regs[x] * l, regs[y] * r, b),
            FusedOp::NanMax(x, y) => nan_pick::<F>(regs[x] * l, regs[y] * r, true),
            FusedOp::NanMin(x, y) => nan_pick::<F>(regs[x] * l, regs[y] * r, false),
            FusedOp::Compare(c, x, y) => F::cast_from(apply_compare::<F>(regs[x] * l, regs[y] * r, c)),
            FusedOp::Select(p, x, y) => select(!(regs[p] * l == F::new(0.0)), regs[x] * l, regs[y] * r),
            FusedOp::Const(bits) => F::new(comptime!(f32::from_bits(bits))),
            FusedOp::Scalar(k) => scalars.index(k).get::<F>(),
            FusedOp::Predicate(p, x) => F::cast_from(apply_predicate::<F>(regs[x] * l, p)),
            FusedOp::Not(x) => F::cast_from(regs[x] * l == F::new(0.0)),
        };
        // A scalar is an operand as the launch gives it (a scalar op's argument is not
        // rounded to bf16 either); every computed value is.
        let y = match comptime!(rounding && !matches!(op, FusedOp::Scalar(_))) {
            true => F::cast_from(round_to_bf16(f32::cast_from(y))),
            false => y,
        };
        regs.push(y);
    }
}

/// A bool (0 / 1 of a storage type) as a register: 0.0 or 1.0.
#[cube]
pub(crate) fn as_register<F: Float, B: Numeric>(b: B) -> F {
    F::cast_from(!(b == B::from_int(0)))
}

/// Input `k`'s value at position `pos` of the iteration shape, read as `read` says.
#[cube]
pub(crate) fn read_input<T: Numeric>(
    input: &Array<T>,
    offset: usize,
    pos: usize,
    #[comptime] read: FusedRead,
    shape: &Sequence<FastDivmod<usize>>,
    strides: &Sequence<usize>,
    #[comptime] k: usize,
) -> T {
    match read {
        FusedRead::Linear => input[offset + pos],
        FusedRead::Scalar => input[offset],
        FusedRead::Strided => input[offset + strided_offset(pos, shape, strides, k)],
    }
}

/// Offset of the `pos`-th element (row-major over `shape`) of input `k`, whose strides are
/// `strides[k * rank ..][..rank]`.
#[cube]
pub(crate) fn strided_offset(pos: usize, shape: &Sequence<FastDivmod<usize>>, strides: &Sequence<usize>, #[comptime] k: usize) -> usize {
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
