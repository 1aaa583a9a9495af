//! Elementwise binary kernels with broadcasting, and their scalar forms.
//!
//! Both operands are strided views over the output's shape (broadcast dimensions have stride
//! 0), given as their buffers (`Array`s), offsets, and strides over the iteration shape
//! `shape` (comptime-length sequences, empty when both operands are contiguous: see
//! [`seq_offset`](fn@crate::strided::seq_offset)). When `rhs_scalar` is set, the right operand is
//! the scalar argument and `rhs` is unused.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::strided::{read_at, seq_offset};

/// A binary operation on float dtypes.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum BinaryFloatOp {
    Add,
    Sub,
    Mul,
    Div,
    /// Remainder with the sign of the divisor (Python's `%`), as Burn defines it.
    Rem,
    Powf,
    Atan2,
    Min,
    Max,
    /// Relu's gradient: `b` (the incoming gradient) where `a` (relu's output) is above 0, else
    /// 0, as Burn's `relu_backward` masks it (a NaN output passes its gradient on).
    ReluGrad,
}

/// A binary operation on integer dtypes (and bool storage, values 0 and 1).
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum BinaryIntOp {
    Add,
    Sub,
    Mul,
    /// Division truncating toward zero; division by zero gives 0.
    Div,
    /// Remainder with the sign of the divisor; remainder by zero gives 0.
    Rem,
    Min,
    Max,
    BitAnd,
    BitOr,
    BitXor,
    Shl,
    Shr,
}

/// Which operand layouts a launch uses; all comptime.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct BinaryLayout {
    /// `lhs` is contiguous with the output's shape.
    pub lhs_linear: bool,
    /// `rhs` is contiguous with the output's shape.
    pub rhs_linear: bool,
    /// The right operand is the scalar argument.
    pub rhs_scalar: bool,
}

/// `out = op(lhs, rhs)` for float dtypes stored as `F`, computed in `A` (`F` itself, or f32
/// with `bits`, where `F` is u16 holding bf16 bits: see [`load`](fn@crate::bf16::load)). The scalar is
/// of type `A`.
#[cube(launch_unchecked)]
pub fn binary_float<F: Numeric, A: Float>(
    lhs: &Array<F>,
    rhs: &Array<F>,
    output: &mut Array<F>,
    lhs_offset: usize,
    rhs_offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    lhs_strides: Sequence<usize>,
    rhs_strides: Sequence<usize>,
    scalar: InputScalar,
    #[comptime] op: BinaryFloatOp,
    #[comptime] layout: BinaryLayout,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let a = load::<F, A>(read_at::<F>(lhs, lhs_offset, ABSOLUTE_POS, &shape, &lhs_strides, layout.lhs_linear), bits);
    let b = if layout.rhs_scalar {
        scalar.get::<A>()
    } else {
        load::<F, A>(read_at::<F>(rhs, rhs_offset, ABSOLUTE_POS, &shape, &rhs_strides, layout.rhs_linear), bits)
    };
    output[ABSOLUTE_POS] = store::<F, A>(apply_binary_float::<A>(a, b, op), bits);
}

/// `out = op(lhs, rhs)` for float dtypes when both operands are contiguous with the output's
/// shape (or the right one is the scalar), `N` elements per unit: vectors are loaded and
/// stored whole, the op runs per lane. Offsets and `vectors` are counted in vectors; `A` and
/// `bits` as in [`binary_float`](fn@binary_float).
#[cube(launch_unchecked)]
pub fn binary_float_vec<F: Numeric, A: Float, N: Size>(
    lhs: &Array<Vector<F, N>>,
    rhs: &Array<Vector<F, N>>,
    output: &mut Array<Vector<F, N>>,
    lhs_offset: usize,
    rhs_offset: usize,
    vectors: usize,
    scalar: InputScalar,
    #[comptime] op: BinaryFloatOp,
    #[comptime] rhs_scalar: bool,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let a = lhs[lhs_offset + ABSOLUTE_POS];
    let s = scalar.get::<A>();
    let mut y = Vector::<F, N>::empty();
    if rhs_scalar {
        #[unroll]
        for i in 0..a.vector_size() {
            y[i] = store::<F, A>(apply_binary_float::<A>(load::<F, A>(a[i], bits), s, op), bits);
        }
    } else {
        let b = rhs[rhs_offset + ABSOLUTE_POS];
        #[unroll]
        for i in 0..a.vector_size() {
            y[i] = store::<F, A>(apply_binary_float::<A>(load::<F, A>(a[i], bits), load::<F, A>(b[i], bits), op), bits);
        }
    }
    output[ABSOLUTE_POS] = y;
}

/// `out = op(lhs, rhs)` for float dtypes, `N` elements per unit along the output's innermost
/// dimension, for strided operands that either step through that dimension contiguously (read
/// whole: `NL` or `NR` is `N`) or repeat one element along it (`NL` or `NR` is 1: the element
/// serves every lane), such as a [n, c, h, w] tensor and a [1, c, 1, 1] one. `shape` counts the
/// innermost dimension in vectors of `N`; each operand's offset and strides over it are in its
/// own vectors (its innermost stride 1 or 0). `A` and `bits` as in
/// [`binary_float`](fn@binary_float).
#[cube(launch_unchecked)]
pub fn binary_float_vec_strided<F: Numeric, A: Float, N: Size, NL: Size, NR: Size>(
    lhs: &Array<Vector<F, NL>>,
    rhs: &Array<Vector<F, NR>>,
    output: &mut Array<Vector<F, N>>,
    lhs_offset: usize,
    rhs_offset: usize,
    vectors: usize,
    shape: Sequence<FastDivmod<usize>>,
    lhs_strides: Sequence<usize>,
    rhs_strides: Sequence<usize>,
    #[comptime] op: BinaryFloatOp,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let a = lhs[lhs_offset + seq_offset(ABSOLUTE_POS, &shape, &lhs_strides)];
    let b = rhs[rhs_offset + seq_offset(ABSOLUTE_POS, &shape, &rhs_strides)];
    let (na, nb) = (a.vector_size(), b.vector_size());
    let mut y = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..y.vector_size() {
        let x = load::<F, A>(a[comptime!(i % na)], bits);
        let z = load::<F, A>(b[comptime!(i % nb)], bits);
        y[i] = store::<F, A>(apply_binary_float::<A>(x, z, op), bits);
    }
    output[ABSOLUTE_POS] = y;
}

/// `out = op(lhs, rhs)` for integer dtypes.
#[cube(launch_unchecked)]
pub fn binary_int<I: Int>(
    lhs: &Array<I>,
    rhs: &Array<I>,
    output: &mut Array<I>,
    lhs_offset: usize,
    rhs_offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    lhs_strides: Sequence<usize>,
    rhs_strides: Sequence<usize>,
    scalar: InputScalar,
    #[comptime] op: BinaryIntOp,
    #[comptime] layout: BinaryLayout,
    #[define(I)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let a = read_at::<I>(lhs, lhs_offset, ABSOLUTE_POS, &shape, &lhs_strides, layout.lhs_linear);
    let b = if layout.rhs_scalar {
        scalar.get::<I>()
    } else {
        read_at::<I>(rhs, rhs_offset, ABSOLUTE_POS, &shape, &rhs_strides, layout.rhs_linear)
    };
    output[ABSOLUTE_POS] = apply_binary_int::<I>(a, b, op);
}

#[cube]
pub(crate) fn apply_binary_float<F: Float>(a: F, b: F, #[comptime] op: BinaryFloatOp) -> F {
    match op {
        BinaryFloatOp::Add => a + b,
        BinaryFloatOp::Sub => a - b,
        BinaryFloatOp::Mul => a * b,
        BinaryFloatOp::Div => div_rounded::<F>(a, b),
        BinaryFloatOp::Rem => {
            if crate::math::is_f64::<F>() {
                // f64 in f64 (an f32 detour lost its digits).
                let zero = F::new(0.0);
                let r = a - b * F::trunc(a / b);
                select(!(r == zero) && (r < zero) != (b < zero), r + b, r)
            } else {
                // In f32 at least, so half precision rounds the exact result once.
                let (x, y) = (f32::cast_from(a), f32::cast_from(b));
                let r = x - y * f32::trunc(x / y);
                F::cast_from(select(!(r == 0.0) && (r < 0.0) != (y < 0.0), r + y, r))
            }
        }
        BinaryFloatOp::Powf => crate::unary::pow::<F>(a, b),
        BinaryFloatOp::Atan2 => crate::math::atan2::<F>(a, b),
        BinaryFloatOp::Min => select(a < b || !(a == a), a, b),
        BinaryFloatOp::Max => select(a > b || !(a == a), a, b),
        BinaryFloatOp::ReluGrad => select(a <= F::new(0.0), F::new(0.0), b),
    }
}

#[cube]
pub(crate) fn apply_binary_int<I: Int>(a: I, b: I, #[comptime] op: BinaryIntOp) -> I {
    let zero = I::new(0);
    match op {
        BinaryIntOp::Add => a + b,
        BinaryIntOp::Sub => a - b,
        BinaryIntOp::Mul => a * b,
        BinaryIntOp::Div => {
            let safe = select(b == zero, I::new(1), b);
            select(b == zero, zero, a / safe)
        }
        BinaryIntOp::Rem => {
            let safe = select(b == zero, I::new(1), b);
            let r = a % safe;
            let r = select(!(r == zero) && (r < zero) != (safe < zero), r + safe, r);
            select(b == zero, zero, r)
        }
        BinaryIntOp::Min => select(a < b, a, b),
        BinaryIntOp::Max => select(a > b, a, b),
        BinaryIntOp::BitAnd => a & b,
        BinaryIntOp::BitOr => a | b,
        BinaryIntOp::BitXor => a ^ b,
        BinaryIntOp::Shl => a << b,
        BinaryIntOp::Shr => a >> b,
    }
}

/// `a / b`, rounded correctly where the device's division is approximate (Vulkan allows
/// 2.5 ULP, and lavapipe gives 10 / 4 = 2.4999998): one correction from the exact residual
/// `a - q b`, computed with a fused multiply-add. Where the quotient is already correctly
/// rounded (CUDA), the correction is below half an ULP and changes nothing. Infinite and NaN
/// quotients are kept as they are, and so are exact ones (a zero residual: `q + 0` would turn
/// a quotient of -0 into +0).
#[cube]
pub fn div_rounded<F: Float>(a: F, b: F) -> F {
    let q = a / b;
    let r = fma::<F>(F::new(0.0) - q, b, a);
    let c = q + r / b;
    select(c == c && !crate::unary::is_inf::<F>(q) && r != F::new(0.0), c, q)
}
