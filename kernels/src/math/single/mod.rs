//! Software f32 functions, from f32 `+ - * /`, `sqrt`, `floor`, bit casts and 32-bit integer
//! products alone, used for f32 (and f16 and bf16, which compute in f32) on every device whose
//! own functions are not accurate (all but CUDA's; see [`super::device_math`](fn@super::device_math)).
//!
//! Vulkan bounds its built-in functions loosely (`exp` within 3 + 2|x| ULP, `log` within 2^-21
//! absolute near 1, `atanh`, `erf` and the inverse trigonometric functions unbounded), and
//! lavapipe's lose most of their digits near zero (`erf` at x = 5e-4 was 6.9e-4 off relative,
//! `asin(0.1)` 200 ULP, `sin` of arguments past 10^5 wrong in every digit). These stay within
//! 4 ULP of the correctly rounded result over each function's whole domain, subnormals
//! included (the worst per function, measured on the device, is in the conformance suite's
//! `math_f32.rs`), and give the same results on every device that runs them.
//!
//! Each function reduces its argument exactly (or with its error carried along), evaluates a
//! polynomial fitted on Chebyshev nodes to the reduced range (coefficients from 50-digit fits,
//! rounded to f32) and rounds once or twice at the end. Where a division or a square root is
//! a main term, its rounding error is corrected ([`quotient`](fn@quotient), the truncated square roots of
//! `asin` / `acos`): Vulkan allows 2.5 ULP for both, and lavapipe's are that far off. Branches
//! that cost more than a select are taken with `if`, so a thread computes only its own.
//!
//! One file per family: `exp_log` (exp, expm1, ln, log1p), `hyperbolic`, `trig` (sin, cos,
//! tan), `inverse_trig` (atan, atan2, asin, acos), `error_function` (erf, erfc, erf_inv),
//! `roots` (cbrt), `pow`; the shared helpers are here.
use cubecl::prelude::*;

mod error_function;
mod exp_log;
mod hyperbolic;
mod inverse_trig;
mod pow;
mod roots;
mod trig;

// By name: cubecl's prelude has functions of the same names.
pub use error_function::{erf, erf_inv, erf_inv_start, erfc};
pub use exp_log::{exp, expm1, ln, log1p};
pub use hyperbolic::{acosh, asinh, atanh, cosh, sinh, tanh};
pub use inverse_trig::{acos, asin, atan, atan2};
pub use pow::powf;
pub use roots::cbrt;
pub use trig::{cos, sin, sin_cos, tan};

const SIGN: u32 = 0x8000_0000;
const MAGNITUDE: u32 = 0x7fff_ffff;

/// 0, from a value the compiler cannot see: whether the cube count (never 0) is zero.
#[cube]
fn runtime_zero() -> u32 {
    u32::cast_from(CUBE_COUNT_X == 0u32)
}

/// `x`, hidden from the shader compiler's algebra (Mesa folds `(1 + x) - 1` to `x`, which
/// would drop the rounding errors the functions carry). See `dd::opaque`.
#[cube]
pub(super) fn opaque(x: f32) -> f32 {
    f32::reinterpret(u32::reinterpret(x * f32::cast_from(CUBE_COUNT_X != 0u32)) | runtime_zero())
}

/// +∞ from its bits (CUDA C++ has no infinity literal).
#[cube]
pub fn infinity() -> f32 {
    f32::reinterpret(0x7f80_0000u32 | runtime_zero())
}

#[cube]
pub fn nan() -> f32 {
    f32::reinterpret(0x7fc0_0000u32 | runtime_zero())
}

#[cube]
pub(super) fn is_nan(x: f32) -> bool {
    !(x == x)
}

/// `|m|` with the sign of `s`.
#[cube]
pub(super) fn copysign(m: f32, s: f32) -> f32 {
    f32::reinterpret((u32::reinterpret(m) & MAGNITUDE) | (u32::reinterpret(s) & SIGN))
}

/// `2^k` for `-126 <= k <= 127`.
#[cube]
pub(super) fn pow2(k: i32) -> f32 {
    f32::reinterpret(u32::cast_from(k + 127) << 23u32)
}

/// `x 2^k` for `|k| <= 252`, in two exact steps.
#[cube]
pub(super) fn ldexp(x: f32, k: i32) -> f32 {
    let half = k / 2;
    x * pow2(half) * pow2(k - half)
}

/// `x` with its low 12 mantissa bits cleared: its square is exact.
#[cube]
pub(super) fn truncated(x: f32) -> f32 {
    f32::reinterpret(u32::reinterpret(x) & 0xffff_f000u32)
}

/// A value as two parts whose sum it is.
#[derive(CubeType, Clone, Copy)]
pub(super) struct Pair {
    pub hi: f32,
    pub lo: f32,
}

#[cube]
pub(super) fn smaller(a: f32, b: f32) -> f32 {
    select(a < b, a, b)
}

/// `a / b` to within about one ULP: the quotient corrected by its residual `a - q b` (exact
/// with a fused multiply-add; lavapipe's unfused one still brings its 2.5-ULP division within
/// one).
#[cube]
pub fn quotient(a: f32, b: f32) -> f32 {
    let q = opaque(a / b);
    let r = fma(0.0f32 - q, b, a);
    let c = q + r / b;
    // Infinite, NaN and zero quotients as they are.
    select(c == c && f32::abs(q) < infinity() && q != 0.0f32, c, q)
}

/// `sqrt x` to within about half an ULP, as the truncated root (`hi`) and its correction
/// `(x - hi²) / (s + hi)` (`lo`).
#[cube]
pub(super) fn sqrt_parts(x: f32) -> Pair {
    let s = f32::sqrt(x);
    let w = truncated(s);
    let c = opaque(x - w * w) / (s + w);
    Pair { hi: w, lo: select(s > 0.0f32, c, 0.0f32) }
}
