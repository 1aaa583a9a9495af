//! Comparison kernels: numeric operands in, bool storage (0 / 1 in a u8 or u32 buffer) out.
use cubecl::prelude::*;

use crate::binary::BinaryLayout;
use cubecl::std::FastDivmod;

use crate::bf16::load;
use crate::strided::read_at;

/// A comparison.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CompareOp {
    Equal,
    NotEqual,
    Greater,
    GreaterEqual,
    Lower,
    LowerEqual,
}

/// A float predicate.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PredicateOp {
    IsNan,
    IsInf,
}

/// `out = lhs op rhs` as 0 / 1 of the bool storage type `B`.
#[cube(launch_unchecked)]
pub fn compare<T: Numeric, B: Numeric>(
    lhs: &Array<T>,
    rhs: &Array<T>,
    output: &mut Array<B>,
    lhs_offset: usize,
    rhs_offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    lhs_strides: Sequence<usize>,
    rhs_strides: Sequence<usize>,
    scalar: InputScalar,
    #[comptime] op: CompareOp,
    #[comptime] layout: BinaryLayout,
    #[define(T, B)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let a = read_at::<T>(lhs, lhs_offset, ABSOLUTE_POS, &shape, &lhs_strides, layout.lhs_linear);
    let b = if layout.rhs_scalar {
        scalar.get::<T>()
    } else {
        read_at::<T>(rhs, rhs_offset, ABSOLUTE_POS, &shape, &rhs_strides, layout.rhs_linear)
    };
    output[ABSOLUTE_POS] = B::cast_from(apply_compare::<T>(a, b, op));
}

/// [`compare`](fn@compare) of bf16 operands held as their bits in u16 (see
/// [`load`](fn@crate::bf16::load)), compared as the f32 values they widen to; the scalar is an f32.
#[cube(launch_unchecked)]
pub fn compare_bf16_bits<B: Numeric>(
    lhs: &Array<u16>,
    rhs: &Array<u16>,
    output: &mut Array<B>,
    lhs_offset: usize,
    rhs_offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    lhs_strides: Sequence<usize>,
    rhs_strides: Sequence<usize>,
    scalar: InputScalar,
    #[comptime] op: CompareOp,
    #[comptime] layout: BinaryLayout,
    #[define(B)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let a = load::<u16, f32>(read_at::<u16>(lhs, lhs_offset, ABSOLUTE_POS, &shape, &lhs_strides, layout.lhs_linear), true);
    let b = if layout.rhs_scalar {
        scalar.get::<f32>()
    } else {
        load::<u16, f32>(read_at::<u16>(rhs, rhs_offset, ABSOLUTE_POS, &shape, &rhs_strides, layout.rhs_linear), true)
    };
    output[ABSOLUTE_POS] = B::cast_from(apply_compare::<f32>(a, b, op));
}

/// `a op b`.
#[cube]
pub(crate) fn apply_compare<T: Numeric>(a: T, b: T, #[comptime] op: CompareOp) -> bool {
    match op {
        CompareOp::Equal => a == b,
        CompareOp::NotEqual => !(a == b),
        CompareOp::Greater => a > b,
        CompareOp::GreaterEqual => a >= b,
        CompareOp::Lower => a < b,
        CompareOp::LowerEqual => a <= b,
    }
}

/// `out = predicate(input)` as 0 / 1 of the bool storage type `B`, the input stored as `F`
/// and tested as `A` (`F` itself, or f32 with `bits`, where `F` is u16 holding bf16 bits: see
/// [`load`](fn@crate::bf16::load)).
#[cube(launch_unchecked)]
pub fn float_predicate<F: Numeric, A: Float, B: Numeric>(
    input: &Array<F>,
    output: &mut Array<B>,
    offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    #[comptime] op: PredicateOp,
    #[comptime] linear: bool,
    #[comptime] bits: bool,
    #[define(F, A, B)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let x = load::<F, A>(read_at::<F>(input, offset, ABSOLUTE_POS, &shape, &strides, linear), bits);
    output[ABSOLUTE_POS] = B::cast_from(apply_predicate::<A>(x, op));
}

/// `op(x)`: whether `x` is NaN, or infinite.
#[cube]
pub(crate) fn apply_predicate<F: Float>(x: F, #[comptime] op: PredicateOp) -> bool {
    match op {
        PredicateOp::IsNan => !(x == x),
        PredicateOp::IsInf => crate::unary::is_inf::<F>(x),
    }
}
