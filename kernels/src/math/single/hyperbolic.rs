//! The hyperbolic functions and their inverses in f32, from `exp`, `expm1`, `ln` and `log1p`.
use cubecl::prelude::*;

use super::exp_log::{exp, expm1, ln, ln_positive, log1p};
use super::*;

const LN2: f32 = 0.6931471824645996;

#[cube]
pub fn sinh(x: f32) -> f32 {
    let a = f32::abs(x);
    let t = expm1(smaller(a, 88.0f32));
    // |x| < 1: (2t - t²/(t + 1)) / 2; else (t + t/(t + 1)) / 2; past e^88, e^(a/2)² / 2
    let small = 0.5f32 * (2.0f32 * t - quotient(t * t, t + 1.0f32));
    let mid = 0.5f32 * (t + quotient(t, t + 1.0f32));
    let h = exp(0.5f32 * a);
    let large = (0.5f32 * h) * h;
    let y = select(a < 1.0f32, small, select(a < 88.0f32, mid, large));
    select(is_nan(x), x, copysign(y, x))
}

#[cube]
pub fn cosh(x: f32) -> f32 {
    let a = f32::abs(x);
    let t = expm1(smaller(a, 88.0f32));
    let small = 1.0f32 + quotient(t * t, 2.0f32 * (1.0f32 + t));
    let e = exp(smaller(a, 88.0f32));
    let mid = 0.5f32 * e + quotient(0.5f32, e);
    let h = exp(0.5f32 * a);
    let large = (0.5f32 * h) * h;
    let y = select(a < 0.6931f32, small, select(a < 88.0f32, mid, large));
    select(is_nan(x), x, y)
}

#[cube]
pub fn tanh(x: f32) -> f32 {
    let a = f32::abs(x);
    // |x| <= 0.55: x + x³ T(x²); else 1 - 2 / (e^2|x| + 1)
    let y = if a <= 0.55f32 {
        let z = a * a;
        let mut p = 0.0025263905990868807f32;
        p = fma(p, z, -0.008526332676410675f32);
        p = fma(p, z, 0.02181844972074032f32);
        p = fma(p, z, -0.05396470054984093f32);
        p = fma(p, z, 0.1333332359790802f32);
        p = fma(p, z, -0.3333333432674408f32);
        a + a * z * p
    } else {
        let large = 1.0f32 - quotient(2.0f32, expm1(2.0f32 * smaller(a, 10.0f32)) + 2.0f32);
        select(a > 9.1f32, 1.0f32, large)
    };
    select(is_nan(x), x, copysign(y, x))
}

#[cube]
pub fn asinh(x: f32) -> f32 {
    let a = f32::abs(x);
    let s = f32::sqrt(a * a + 1.0f32);
    // ln 2|x| past 2^12; ln(2|x| + 1/(s + |x|)) from 2; log1p(|x| + x²/(1 + s)) below
    let large = ln_positive(select(a > 0.0f32 && a < infinity(), a, 1.0f32)) + LN2;
    let mid = ln(2.0f32 * a + quotient(1.0f32, s + a));
    let small = log1p(a + quotient(a * a, 1.0f32 + s));
    let y = select(a >= 4096.0f32, large, select(a >= 2.0f32, mid, small));
    let y = select(a == infinity(), a, y);
    select(is_nan(x), x, copysign(y, x))
}

#[cube]
pub fn acosh(x: f32) -> f32 {
    let t = x - 1.0f32;
    // log1p(t + sqrt(t² + 2t)) below 2 (the root corrected); ln(2x - 1/(x + sqrt(x² - 1)))
    // below 2^12; ln 2x past it
    let root = sqrt_parts(t * t + 2.0f32 * t);
    let small = log1p(t + root.hi + root.lo);
    let mid = ln(2.0f32 * x - quotient(1.0f32, x + f32::sqrt(x * x - 1.0f32)));
    let large = ln_positive(select(x > 1.0f32 && x < infinity(), x, 1.0f32)) + LN2;
    let y = select(x < 2.0f32, small, select(x < 4096.0f32, mid, large));
    let y = select(x == infinity(), x, select(x < 1.0f32, nan(), y));
    select(is_nan(x), x, y)
}

#[cube]
pub fn atanh(x: f32) -> f32 {
    let a = f32::abs(x);
    // log1p(2a + 2a²/(1 - a)) / 2 below 1/2; log1p(2a/(1 - a)) / 2 above
    let small = 0.5f32 * log1p(2.0f32 * a + quotient(2.0f32 * a * a, 1.0f32 - a));
    let large = 0.5f32 * log1p(quotient(2.0f32 * a, 1.0f32 - a));
    let y = select(a < 0.5f32, small, large);
    let y = select(a == 1.0f32, infinity(), select(a > 1.0f32, nan(), y));
    select(is_nan(x), x, copysign(y, x))
}
