//! Software f64 functions, from f64 `+ - * /`, `sqrt`, `floor` and bit casts alone.
//!
//! Vulkan's extended instruction set defines `exp`, `log`, `sin`, `atan`, `pow`, ... for
//! 16- and 32-bit floats only, so a SPIR-V device that computes in f64 (lavapipe does) has no
//! f64 transcendental functions. These are ours, and every device uses them for f64, so f64
//! results are the same on wgpu and CUDA.
//!
//! Each function reduces its argument exactly, evaluates a Taylor series (or, for `erfc` on
//! [1, 3), a Taylor expansion of `exp(x^2) erfc(x)`) with the leading terms in double-double
//! ([`super::dd`]) and rounds once at the end. Against 200-bit references they round
//! correctly for all but about 0.1% to 0.5% of arguments, and are never off by more than one
//! ulp; some glibc functions (`sinh`, `acosh`, `atanh`, `erfc`) are off by one ulp where these
//! are correctly rounded. Trigonometric arguments are reduced exactly for `|x| < 2^52`; beyond
//! that (where an f64 has no fractional bits left) the reduction loses accuracy.
//!
//! Subnormal results may be flushed to zero on devices that flush f64 subnormals.
//!
//! One file per family: `exp_log` (exp, ln, log1p, pow), `trig` (sin, cos, tan and their
//! inverses), `hyperbolic`, `error_function` (erf, erfc, erf_inv), `roots` (cbrt); the
//! constants and bit helpers that they share are here.
use cubecl::prelude::*;

use super::dd::{self, Dd};

mod error_function;
mod exp_log;
mod hyperbolic;
mod roots;
mod trig;

// By name: cubecl's prelude has functions of the same names.
pub use error_function::{erf, erf_inv, erfc};
pub use roots::cbrt;
pub use exp_log::{ExpParts, exp, exp_parts, expm1, ln, log1p, powf};
pub use hyperbolic::{acosh, asinh, atanh, cosh, sinh, tanh};
pub use trig::{SinCos, acos, asin, atan, atan2, cos, sin, sin_cos, tan};

pub(super) const SIGN: u64 = 0x8000_0000_0000_0000;
pub(super) const MAGNITUDE: u64 = 0x7fff_ffff_ffff_ffff;
/// 2^52: multiplying by it shifts left by 52 bits.
pub(super) const MANTISSA_UNIT: u64 = 0x0010_0000_0000_0000;
pub(super) const MANTISSA: u64 = 0x000f_ffff_ffff_ffff;
pub(super) const ONE_BITS: u64 = 0x3ff0_0000_0000_0000;

/// `ln 2` split so that `k * LN2_HI` is exact for `|k| < 2^21`.
pub(super) const LN2_HI: f64 = 0.6931471803691238;
pub(super) const LN2_LO: f64 = 1.9082149292705877e-10;

/// +∞ from its bits, OR-ed with a zero the compiler cannot see: CUDA C++ has no infinity
/// literal and does not compile a bit cast of a constant.
#[cube]
pub fn infinity() -> f64 {
    f64::reinterpret(0x7ff0_0000_0000_0000u64 | dd::runtime_zero())
}

/// NaN, as [`infinity`](fn@infinity).
#[cube]
pub fn nan() -> f64 {
    f64::reinterpret(0x7ff8_0000_0000_0000u64 | dd::runtime_zero())
}

#[cube]
pub(super) fn is_nan(x: f64) -> bool {
    !(x == x)
}

/// `|m|` with the sign of `s`.
#[cube]
pub(super) fn copysign(m: f64, s: f64) -> f64 {
    f64::reinterpret((u64::reinterpret(m) & MAGNITUDE) | (u64::reinterpret(s) & SIGN))
}

/// `2^k` for `-1022 <= k <= 1023`.
#[cube]
pub(super) fn pow2(k: i32) -> f64 {
    f64::reinterpret(u64::cast_from(k + 1023) * MANTISSA_UNIT)
}

/// `x * 2^k` for `|k| <= 2044`, in two exact steps.
#[cube]
pub(super) fn ldexp(x: f64, k: i32) -> f64 {
    let half = k / 2;
    x * pow2(half) * pow2(k - half)
}

#[cube]
pub(super) fn pick(c: bool, a: Dd, b: Dd) -> Dd {
    dd::dd(select(c, a.hi, b.hi), select(c, a.lo, b.lo))
}
