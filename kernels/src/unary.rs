//! Elementwise unary kernels: one for float dtypes, one for integer (and bool-storage) dtypes.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::math;
use crate::strided::read_at;

/// A unary float operation. `a` and `b` are the kernel's scalar parameters.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum UnaryFloatOp {
    Exp,
    /// `e^x - 1`, to full relative precision near zero.
    Expm1,
    Log,
    Log1p,
    Sqrt,
    Abs,
    Cos,
    Sin,
    Tan,
    Cosh,
    Sinh,
    Tanh,
    Acos,
    Acosh,
    Asin,
    Asinh,
    Atan,
    Atanh,
    /// Round half to even, as burn-ndarray does.
    Round,
    Floor,
    Ceil,
    Trunc,
    Erf,
    /// `1 - erf(x)`; in f64 to full relative precision where `erf(x)` is near 1.
    Erfc,
    Recip,
    /// `1 / sqrt(x)`, each step rounded correctly.
    Rsqrt,
    /// The cube root, negative for negative `x`.
    Cbrt,
    /// The inverse error function.
    ErfInv,
    Neg,
    Sign,
    /// `x ^ a`.
    PowScalar,
    /// `x ^ a` for an integer `a` within ±127, by squaring (see [`UnaryFloatOp::pow_scalar`]).
    PowInt,
    /// `clamp(x, a, b)`.
    Clamp,
    /// `max(x, a)`.
    ClampMin,
    /// `min(x, a)`.
    ClampMax,
    Relu,
    /// `x >= 0 ? x : a * x`.
    LeakyRelu,
    Sigmoid,
    /// `clamp(a * x + b, 0, 1)`.
    HardSigmoid,
    LogSigmoid,
    /// Exact (erf) GELU.
    Gelu,
}

impl UnaryFloatOp {
    /// The op for `x ^ y` with a scalar `y`: [`UnaryFloatOp::PowInt`] for integers within ±127
    /// (the usual squares and cubes), [`UnaryFloatOp::PowScalar`] otherwise.
    pub fn pow_scalar(y: f64) -> Self {
        if y.fract() == 0.0 && y.abs() <= 127.0 { UnaryFloatOp::PowInt } else { UnaryFloatOp::PowScalar }
    }
}

/// A unary integer operation, also used on bool storage (values 0 and 1).
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum UnaryIntOp {
    Abs,
    Neg,
    Sign,
    BitNot,
    /// `x == 0 ? 1 : 0`: logical not on bool storage.
    LogicalNot,
    /// `clamp(x, a, b)`.
    Clamp,
    /// `max(x, a)`.
    ClampMin,
    /// `min(x, a)`.
    ClampMax,
}

/// `out[i] = op(input[i])` for float dtypes stored as `F`, computed in `A` (f32 for f16 and
/// bf16, whose math functions are coarse on some devices; `F` otherwise). `a` and `b` are of
/// type `A`. With `bits`, `F` is u16 holding bf16 bits (see [`load`](fn@crate::bf16::load)).
#[cube(launch_unchecked)]
pub fn unary_float<F: Numeric, A: Float>(
    input: &Array<F>,
    output: &mut Array<F>,
    offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    a: InputScalar,
    b: InputScalar,
    #[comptime] op: UnaryFloatOp,
    #[comptime] linear: bool,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let x = load::<F, A>(read_at::<F>(input, offset, ABSOLUTE_POS, &shape, &strides, linear), bits);
    output[ABSOLUTE_POS] = store::<F, A>(apply_unary_float::<A>(x, a.get::<A>(), b.get::<A>(), op), bits);
}

/// `out[i] = op(input[i])` for float dtypes on contiguous input and output, `N` elements per
/// unit: vectors are loaded and stored whole (wide memory accesses), the op runs per lane.
/// `offset` and `vectors` are counted in vectors; `bits` as in [`unary_float`](fn@unary_float).
#[cube(launch_unchecked)]
pub fn unary_float_vec<F: Numeric, A: Float, N: Size>(
    input: &Array<Vector<F, N>>,
    output: &mut Array<Vector<F, N>>,
    offset: usize,
    vectors: usize,
    a: InputScalar,
    b: InputScalar,
    #[comptime] op: UnaryFloatOp,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let x = input[offset + ABSOLUTE_POS];
    let (a, b) = (a.get::<A>(), b.get::<A>());
    let mut y = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..x.vector_size() {
        y[i] = store::<F, A>(apply_unary_float::<A>(load::<F, A>(x[i], bits), a, b, op), bits);
    }
    output[ABSOLUTE_POS] = y;
}

/// `out[i] = op(input[i])` for integer dtypes.
#[cube(launch_unchecked)]
pub fn unary_int<I: Int>(
    input: &Array<I>,
    output: &mut Array<I>,
    offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    a: InputScalar,
    b: InputScalar,
    #[comptime] op: UnaryIntOp,
    #[comptime] linear: bool,
    #[define(I)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let x = read_at::<I>(input, offset, ABSOLUTE_POS, &shape, &strides, linear);
    output[ABSOLUTE_POS] = apply_unary_int::<I>(x, a.get::<I>(), b.get::<I>(), op);
}

#[cube]
pub(crate) fn apply_unary_float<F: Float>(x: F, a: F, b: F, #[comptime] op: UnaryFloatOp) -> F {
    let zero = F::new(0.0);
    let one = F::new(1.0);
    match op {
        UnaryFloatOp::Exp => math::exp::<F>(x),
        UnaryFloatOp::Expm1 => math::expm1::<F>(x),
        UnaryFloatOp::Log => math::ln::<F>(x),
        UnaryFloatOp::Log1p => math::log1p::<F>(x),
        UnaryFloatOp::Sqrt => sqrt_rounded::<F>(x),
        UnaryFloatOp::Abs => F::abs(x),
        UnaryFloatOp::Cos => math::cos::<F>(x),
        UnaryFloatOp::Sin => math::sin::<F>(x),
        UnaryFloatOp::Tan => math::tan::<F>(x),
        UnaryFloatOp::Cosh => math::cosh::<F>(x),
        UnaryFloatOp::Sinh => math::sinh::<F>(x),
        UnaryFloatOp::Tanh => math::tanh::<F>(x),
        UnaryFloatOp::Acos => math::acos::<F>(x),
        UnaryFloatOp::Acosh => math::acosh::<F>(x),
        UnaryFloatOp::Asin => math::asin::<F>(x),
        UnaryFloatOp::Asinh => math::asinh::<F>(x),
        UnaryFloatOp::Atan => math::atan::<F>(x),
        UnaryFloatOp::Atanh => math::atanh::<F>(x),
        UnaryFloatOp::Round => round_half_even::<F>(x),
        UnaryFloatOp::Floor => F::floor(x),
        UnaryFloatOp::Ceil => F::ceil(x),
        UnaryFloatOp::Trunc => F::trunc(x),
        UnaryFloatOp::Erf => math::erf::<F>(x),
        UnaryFloatOp::Erfc => math::erfc::<F>(x),
        UnaryFloatOp::Recip => one / x,
        UnaryFloatOp::Rsqrt => crate::binary::div_rounded::<F>(one, sqrt_rounded::<F>(x)),
        UnaryFloatOp::Cbrt => math::cbrt::<F>(x),
        UnaryFloatOp::ErfInv => math::erf_inv::<F>(x),
        // Not `0 - x`: the negation of 0.0 is -0.0 (CUDA keeps `0 - 0.0` at +0.0).
        UnaryFloatOp::Neg => F::new(-1.0) * x,
        UnaryFloatOp::Sign => {
            if x > zero {
                one
            } else if x < zero {
                zero - one
            } else {
                // 0 stays 0 and NaN stays NaN.
                x
            }
        }
        UnaryFloatOp::PowScalar => pow::<F>(x, a),
        UnaryFloatOp::PowInt => pow_int::<F>(x, a),
        UnaryFloatOp::Clamp => clamp_nan_aware::<F>(x, a, b),
        UnaryFloatOp::ClampMin => select(x < a, a, x),
        UnaryFloatOp::ClampMax => select(x > a, a, x),
        UnaryFloatOp::Relu => select(x < zero, zero, x),
        UnaryFloatOp::LeakyRelu => select(x >= zero, x, a * x),
        UnaryFloatOp::Sigmoid => math::sigmoid::<F>(x),
        UnaryFloatOp::HardSigmoid => clamp_nan_aware::<F>(a * x + b, zero, one),
        UnaryFloatOp::LogSigmoid => {
            // -softplus(-x), computed without overflow for large |x|.
            let neg_abs = zero - F::abs(x);
            select(x < zero, x, zero) - math::log1p::<F>(math::exp::<F>(neg_abs))
        }
        UnaryFloatOp::Gelu => {
            x * F::new(0.5) * (one + math::erf::<F>(x / sqrt_rounded::<F>(F::new(2.0))))
        }
    }
}

#[cube]
fn apply_unary_int<I: Int>(x: I, a: I, b: I, #[comptime] op: UnaryIntOp) -> I {
    let zero = I::new(0);
    let one = I::new(1);
    match op {
        UnaryIntOp::Abs => select(x < zero, zero - x, x),
        UnaryIntOp::Neg => zero - x,
        UnaryIntOp::Sign => {
            if x > zero {
                one
            } else if x < zero {
                zero - one
            } else {
                zero
            }
        }
        UnaryIntOp::BitNot => !x,
        UnaryIntOp::LogicalNot => select(x == zero, one, zero),
        UnaryIntOp::Clamp => select(x < a, a, select(x > b, b, x)),
        UnaryIntOp::ClampMin => select(x < a, a, x),
        UnaryIntOp::ClampMax => select(x > a, a, x),
    }
}

/// Rounds half-way cases to the nearest even integer (IEEE `roundeven`).
#[cube]
pub fn round_half_even<F: Float>(x: F) -> F {
    let floor = F::floor(x);
    let diff = x - floor;
    let half = F::new(0.5);
    let two = F::new(2.0);
    let up = floor + F::new(1.0);
    let floor_is_odd = !(floor - two * F::floor(floor / two) == F::new(0.0));
    let mut out = select(diff > half, up, floor);
    if diff == half {
        out = select(floor_is_odd, up, floor);
    }
    // NaN and infinities pass through.
    select(!(x == x) || is_inf::<F>(x), x, out)
}

/// `x^y` with C's `pow` semantics for a negative base: `±|x|^y` when `y` is an integer
/// (negative for odd `y`), NaN otherwise. cubecl's SPIR-V `powf` tests oddness with `OpFRem`,
/// whose result takes the sign of `y`, so it gives NaN for negative odd exponents (`(-2)^-3`).
/// Small integer exponents ([`math::squaring_limit`](fn@math::squaring_limit)) multiply by squaring, as a CPU's `pow`
/// is exact where the product is (`1.5^2` is 2.25, where `exp(2 ln 1.5)` on Vulkan gives
/// 2.2500002, and `x^2` is `x * x` rounded once); `y = 0.5` is a correctly rounded square root.
#[cube]
pub fn pow<F: Float>(x: F, y: F) -> F {
    let zero = F::new(0.0);
    let magnitude = math::powf::<F>(F::abs(x), y);
    let integer = F::floor(y) == y;
    let half = y * F::new(0.5);
    let odd = integer && !(F::floor(half) == half);
    // A negative base (-0 and -∞ included) gives the sign to odd powers; a finite negative
    // base has no real non-integer power.
    let negative = x < zero || F::new(1.0) / x < zero;
    let general = nan_unless::<F>(!(x < zero && !is_inf::<F>(x) && !integer), select(negative && odd, zero - magnitude, magnitude));
    // Binary exponentiation over the 7 bits of |y| up to the limit.
    let small = integer && F::abs(y) <= math::squaring_limit::<F>();
    let exact = pow_int::<F>(x, select(small, y, zero));
    // x^0.5 as a correctly rounded square root (C's pow is exact there too: 25^0.5 is 5).
    let root = select(x == zero, zero, sqrt_rounded::<F>(x));
    let negative_infinity = is_inf::<F>(x) && x < zero;
    let value = select(small, exact, select(y == F::new(0.5) && !negative_infinity, root, general));
    // C's cases that a device's `exp2(y log2 x)` may miss: infinite exponents (1 for |x| = 1,
    // else ∞ or 0 by whether |x| < 1 and y < 0 agree), x^0 = 1 and 1^y = 1 (NaN included), NaN.
    let one = F::new(1.0);
    let ax = F::abs(x);
    let infinite = select(ax == one, one, select((ax < one) == (y < zero), F::new(1.0) / zero, zero));
    let nan = !(x == x) || !(y == y);
    select(y == zero || x == one, one, select(nan, x + y, select(is_inf::<F>(y), infinite, value)))
}

/// `x^n` for an integer `n` within ±127 by squaring (as a CPU's `pow`, exact where the
/// product is: `1.5^2` is 2.25), `1 / x^-n` for negative `n`: what `x^2` and other integer
/// powers of a scalar exponent need, without compiling a general `pow`.
#[cube]
pub fn pow_int<F: Float>(x: F, n: F) -> F {
    let mut k = u32::cast_from(F::abs(n));
    let mut base = x;
    let mut acc = F::new(1.0);
    #[unroll]
    for _ in 0..7 {
        if k & 1 == 1 {
            acc *= base;
        }
        base *= base;
        k >>= 1;
    }
    select(n < F::new(0.0), crate::binary::div_rounded::<F>(F::new(1.0), acc), acc)
}

/// `sqrt(x)`, rounded correctly where the device's is approximate (Vulkan allows 3 ULP;
/// lavapipe gives sqrt(50) one ULP low): one Newton correction from the exact residual
/// `x - s²`, computed with a fused multiply-add. Zero, infinity and NaN pass through.
#[cube]
pub fn sqrt_rounded<F: Float>(x: F) -> F {
    let s = F::sqrt(x);
    let r = fma::<F>(F::new(0.0) - s, s, x);
    let c = s + r / (s + s);
    select(c == c && !is_inf::<F>(s) && s > F::new(0.0), c, s)
}

/// `value` where `ok`, NaN elsewhere: some drivers' `atan` turns NaN into 0.
///
/// NaN and infinity are computed, never written as literals: CUDA C++ has no `nan` / `inf`
/// literal, so such constants would not compile there. `d / d` with `d = v - v` is NaN for
/// every `v` (0/0, inf - inf, or NaN already).
#[cube]
pub fn nan_unless<F: Float>(ok: bool, value: F) -> F {
    let d = value - value;
    select(ok, value, d / d)
}

/// Whether `x` is ±infinity: the only non-zero numbers that halving leaves unchanged (a
/// form no compiler folds away, unlike `x - x`).
#[cube]
pub fn is_inf<F: Float>(x: F) -> bool {
    !(x == F::new(0.0)) && x * F::new(0.5) == x
}

/// `clamp` that propagates NaN inputs, like `f32::clamp`.
#[cube]
fn clamp_nan_aware<F: Float>(x: F, lo: F, hi: F) -> F {
    select(x < lo, lo, select(x > hi, hi, x))
}
