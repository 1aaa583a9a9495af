//! `e^x`, `e^x - 1`, `ln` and `ln(1 + x)` in f32.
use cubecl::prelude::*;

use super::*;

/// `ln 2` split so that `k LN2_HI` is exact for `|k| < 256`.
const LN2_HI: f32 = 0.693145751953125;
const LN2_LO: f32 = 1.428606765330187e-6;
const LOG2_E: f32 = 1.442695;

/// `e^r - 1` for `|r| <= ln 2 / 2`: `r + r² E(r)`.
#[cube]
pub(super) fn expm1_reduced(x: f32) -> f32 {
    let mut p = 2.485957884346135e-05f32;
    p = fma(p, x, 0.00019899274047929794f32);
    p = fma(p, x, 0.001388885430060327f32);
    p = fma(p, x, 0.0083332983776927f32);
    p = fma(p, x, 0.0416666679084301f32);
    p = fma(p, x, 0.1666666716337204f32);
    p = fma(p, x, 0.5f32);
    x + x * x * p
}

/// `x = k ln 2 + r` with `|r| <= ln 2 / 2`.
#[derive(CubeType, Clone, Copy)]
struct Reduced {
    k: i32,
    r: f32,
}

/// [`Reduced`] of `|x| < 104`.
#[cube]
fn reduce(x: f32) -> Reduced {
    let k = f32::floor(x * LOG2_E + 0.5f32);
    Reduced { k: i32::cast_from(k), r: opaque(x - k * LN2_HI) - k * LN2_LO }
}

#[cube]
pub fn exp(x: f32) -> f32 {
    exp_sum(x, 0.0f32)
}

/// `e^(x + tail)` for a small `tail` (|tail| < 0.06), rounded once: the tail joins the reduced
/// argument (`erfc` gives `-x²` as an exact square and its rest).
#[cube]
pub(super) fn exp_sum(x: f32, tail: f32) -> f32 {
    let safe = f32::clamp(select(is_nan(x), 0.0f32, x), -104.0f32, 89.0f32);
    let red = reduce(safe);
    let y = ldexp(1.0f32 + expm1_reduced(red.r + tail), red.k);
    let y = select(x > 88.72284f32, infinity(), select(x < -103.97208f32, 0.0f32, y));
    select(is_nan(x), x, y)
}

#[cube]
pub fn expm1(x: f32) -> f32 {
    let safe = f32::clamp(select(is_nan(x), 0.0f32, x), -30.0f32, 89.0f32);
    let red = reduce(safe);
    // 2^k (1 + e) - 1 = 2^k (e - (2^-k - 1)), 2^-k - 1 exact (k within [-43, 128])
    let e = expm1_reduced(red.r);
    let minus_k = select(red.k > 126i32, -126i32, 0i32 - red.k);
    // (k = 0 and r = x exactly below ln 2 / 2: e itself, to full relative precision)
    let y = ldexp(e - (pow2(minus_k) - 1.0f32), red.k);
    let y = select(x > 88.72284f32, infinity(), select(x < -17.4f32, -1.0f32, y));
    select(is_nan(x), x, y)
}

/// `ln x` for a positive finite `x` (subnormals included).
#[cube]
pub(super) fn ln_positive(x: f32) -> f32 {
    let tiny = x < 1.17549435e-38f32;
    let scaled = select(tiny, x * 33554432.0f32, x);
    // x = 2^k m, m in [sqrt(1/2), sqrt(2))
    let bits = u32::reinterpret(scaled) + (0x3f80_0000u32 - 0x3f35_04f3u32);
    let k = i32::cast_from(bits >> 23u32) - 127 - select(tiny, 25i32, 0i32);
    let m = f32::reinterpret((bits & 0x007f_ffffu32) + 0x3f35_04f3u32);
    let f = m - 1.0f32;
    // ln(1 + f) = f - f²/2 + f³ Q(f)
    let mut p = 0.06971611827611923f32;
    p = fma(p, f, -0.11479733884334564f32);
    p = fma(p, f, 0.11685419827699661f32);
    p = fma(p, f, -0.12425687164068222f32);
    p = fma(p, f, 0.14249058067798615f32);
    p = fma(p, f, -0.1666780263185501f32);
    p = fma(p, f, 0.20000715553760529f32);
    p = fma(p, f, -0.2499999701976776f32);
    p = fma(p, f, 0.3333333134651184f32);
    let dk = f32::cast_from(k);
    let half_square = 0.5f32 * f * f;
    dk * LN2_HI + ((f - half_square) + (f * f * f * p + dk * LN2_LO))
}

#[cube]
pub fn ln(x: f32) -> f32 {
    let ok = x > 0.0f32 && x < infinity();
    let l = ln_positive(select(ok, x, 1.0f32));
    let special = select(x == 0.0f32, 0.0f32 - infinity(), select(x == infinity(), x, nan()));
    select(ok, l, special)
}

/// `ln(1 + x)`: `ln u` of `u = 1 + x` rounded, plus the first-order correction for that
/// rounding, `(x - (u - 1)) / u`.
#[cube]
pub fn log1p(x: f32) -> f32 {
    let u = opaque(1.0f32 + x);
    let ok = u > 0.0f32 && u < infinity();
    let safe = select(ok, u, 1.0f32);
    let l = ln_positive(safe) + opaque(x - opaque(safe - 1.0f32)) / safe;
    let special = select(u == 0.0f32, 0.0f32 - infinity(), select(x == infinity(), x, nan()));
    select(ok, l, special)
}
