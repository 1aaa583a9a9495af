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
use cubecl::prelude::*;

use super::dd::{self, Dd};

const SIGN: u64 = 0x8000_0000_0000_0000;
const MAGNITUDE: u64 = 0x7fff_ffff_ffff_ffff;
/// 2^52: multiplying by it shifts left by 52 bits.
const MANTISSA_UNIT: u64 = 0x0010_0000_0000_0000;
const MANTISSA: u64 = 0x000f_ffff_ffff_ffff;
const ONE_BITS: u64 = 0x3ff0_0000_0000_0000;

/// `ln 2` split so that `k * LN2_HI` is exact for `|k| < 2^21`.
const LN2_HI: f64 = 0.6931471803691238;
const LN2_LO: f64 = 1.9082149292705877e-10;

/// +∞ from its bits, OR-ed with a zero the compiler cannot see: CUDA C++ has no infinity
/// literal and does not compile a bit cast of a constant.
#[cube]
pub fn infinity() -> f64 {
    f64::reinterpret(0x7ff0_0000_0000_0000u64 | dd::runtime_zero())
}

/// NaN, as [`infinity`].
#[cube]
pub fn nan() -> f64 {
    f64::reinterpret(0x7ff8_0000_0000_0000u64 | dd::runtime_zero())
}

#[cube]
fn is_nan(x: f64) -> bool {
    !(x == x)
}

/// `|m|` with the sign of `s`.
#[cube]
fn copysign(m: f64, s: f64) -> f64 {
    f64::reinterpret((u64::reinterpret(m) & MAGNITUDE) | (u64::reinterpret(s) & SIGN))
}

/// `2^k` for `-1022 <= k <= 1023`.
#[cube]
fn pow2(k: i32) -> f64 {
    f64::reinterpret(u64::cast_from(k + 1023) * MANTISSA_UNIT)
}

/// `x * 2^k` for `|k| <= 2044`, in two exact steps.
#[cube]
fn ldexp(x: f64, k: i32) -> f64 {
    let half = k / 2;
    x * pow2(half) * pow2(k - half)
}

#[cube]
fn pick(c: bool, a: Dd, b: Dd) -> Dd {
    dd::dd(select(c, a.hi, b.hi), select(c, a.lo, b.lo))
}

/// `e^x = 2^k (1 + m)`.
#[derive(CubeType, Clone, Copy)]
pub struct ExpParts {
    pub k: i32,
    pub m: Dd,
}

/// `e^r - 1` for `|r| <= 0.36`.
#[cube]
fn expm1_reduced(r: Dd) -> Dd {
    let z = dd::two_prod(r.hi, r.hi);
    let h2 = dd::dd(z.hi * 0.5, z.lo * 0.5 + r.hi * r.lo);
    let w = r.hi;
    let mut q = fma(4.779477332387385e-14f64, w, 7.647163731819816e-13f64);
    q = fma(q, w, 1.1470745597729725e-11f64);
    q = fma(q, w, 1.6059043836821613e-10f64);
    q = fma(q, w, 2.08767569878681e-09f64);
    q = fma(q, w, 2.505210838544172e-08f64);
    q = fma(q, w, 2.755731922398589e-07f64);
    q = fma(q, w, 2.7557319223985893e-06f64);
    q = fma(q, w, 2.48015873015873e-05f64);
    q = fma(q, w, 0.0001984126984126984f64);
    q = fma(q, w, 0.001388888888888889f64);
    q = fma(q, w, 0.008333333333333333f64);
    q = fma(q, w, 0.041666666666666664f64);
    q = fma(q, w, 0.16666666666666666f64);
    let tail = z.hi * w * q;
    let s = dd::two_sum(r.hi, h2.hi);
    dd::fast_two_sum(s.hi, s.lo + r.lo + h2.lo + tail)
}

/// `e^x` as `2^k (1 + m)`, for `|x.hi| <= 746`.
#[cube]
pub fn exp_parts(x: Dd) -> ExpParts {
    let k = f64::floor(x.hi * 1.4426950408889634f64 + 0.5f64);
    let hi = x.hi - k * LN2_HI;
    let r = dd::add_f64(dd::fast_two_sum(hi, -(k * LN2_LO)), x.lo);
    ExpParts {
        k: i32::cast_from(k),
        m: expm1_reduced(r),
    }
}

#[cube]
pub fn exp(x: f64) -> f64 {
    let safe = f64::clamp(select(is_nan(x), 0.0, x), -746.0, 710.0);
    let p = exp_parts(dd::dd(safe, 0.0));
    let y = ldexp(dd::to_f64(dd::add_f64(p.m, 1.0)), p.k);
    let y = select(x > 709.8, infinity(), select(x < -745.2, 0.0, y));
    select(is_nan(x), x, y)
}

/// `ln a` for a positive, normal `a.hi`.
#[cube]
fn ln_dd(a: Dd) -> Dd {
    let bits = u64::reinterpret(a.hi);
    let biased = (bits / MANTISSA_UNIT) & 0x7ffu64;
    let m1 = f64::reinterpret((bits & MANTISSA) | ONE_BITS);
    // m in [sqrt(2) / 2, sqrt(2)), a = 2^e m
    let high = m1 > 1.4142135623730951f64;
    let m = select(high, m1 * 0.5, m1);
    let e = f64::cast_from(i32::cast_from(biased) - 1023) + select(high, 1.0, 0.0);
    let lo = a.lo * ldexp(1.0, -i32::cast_from(e));
    // ln(m) = 2 atanh(s), s = f / (2 + f)
    let f = dd::add_f64(dd::dd(m - 1.0, 0.0), lo);
    let s = dd::div(f, dd::add_f64(f, 2.0));
    let z = dd::mul(s, s);
    let w = z.hi;
    let mut q = fma(0.07407407407407407f64, w, 0.08f64);
    q = fma(q, w, 0.08695652173913043f64);
    q = fma(q, w, 0.09523809523809523f64);
    q = fma(q, w, 0.10526315789473684f64);
    q = fma(q, w, 0.11764705882352941f64);
    q = fma(q, w, 0.13333333333333333f64);
    q = fma(q, w, 0.15384615384615385f64);
    q = fma(q, w, 0.18181818181818182f64);
    q = fma(q, w, 0.2222222222222222f64);
    q = fma(q, w, 0.2857142857142857f64);
    // 2 + z (2/3 + z (2/5 + z q))
    let p = dd::add_f64(dd::dd(0.4f64, -2.2204460492503132e-17f64), w * q);
    let p = dd::add(
        dd::dd(0.6666666666666666f64, 3.700743415417188e-17f64),
        dd::mul(z, p),
    );
    let p = dd::add_f64(dd::mul(z, p), 2.0);
    let ln2 = dd::dd(0.6931471805599453f64, 2.3190468138462996e-17f64);
    dd::add(dd::mul_f64(ln2, e), dd::mul(s, p))
}

/// `ln x` for a dd `x > 0` that may be subnormal in `hi`.
#[cube]
fn ln_any(x: Dd) -> Dd {
    // Subnormals are scaled up by 2^54 first.
    let tiny = x.hi < 2.2250738585072014e-308f64;
    let scaled = pick(
        tiny,
        dd::dd(x.hi * 18014398509481984.0f64, x.lo * 18014398509481984.0f64),
        x,
    );
    let ln2 = dd::dd(0.6931471805599453f64, 2.3190468138462996e-17f64);
    let l = ln_dd(scaled);
    pick(tiny, dd::add(l, dd::mul_f64(ln2, -54.0)), l)
}

#[cube]
pub fn ln(x: f64) -> f64 {
    let ok = x > 0.0 && x < infinity();
    let l = dd::to_f64(ln_any(dd::dd(select(ok, x, 1.0), 0.0)));
    let special = select(x == 0.0, -infinity(), select(x == infinity(), x, nan()));
    select(ok, l, special)
}

#[cube]
pub fn log1p(x: f64) -> f64 {
    let ok = x > -1.0 && x < infinity();
    let safe = select(ok, x, 0.0);
    let l = dd::to_f64(ln_any(dd::two_sum(1.0, safe)));
    let l = select(f64::abs(x) < 1e-300f64, x, l);
    let special = select(x == -1.0, -infinity(), select(x == infinity(), x, nan()));
    select(ok, l, special)
}

/// `x^y` for `x >= 0`, with IEEE `pow`'s special cases; NaN for finite `x < 0` (the caller
/// handles negative bases).
#[cube]
pub fn powf(x: f64, y: f64) -> f64 {
    let ok = x > 0.0 && x < infinity() && f64::abs(y) < infinity();
    let l = ln_any(dd::dd(select(ok, x, 1.0), 0.0));
    // |y| above 1e299 overflows the product's split; such a power over- or underflows anyway
    let yc = f64::clamp(y, -1e299f64, 1e299f64);
    let t = dd::add_f64(dd::two_prod(yc, l.hi), yc * l.lo);
    let t = pick(ok, t, dd::dd(0.0, 0.0));
    let safe = dd::dd(
        f64::clamp(t.hi, -746.0, 710.0),
        select(f64::abs(t.hi) < 709.0, t.lo, 0.0),
    );
    let p = exp_parts(safe);
    let r = ldexp(dd::to_f64(dd::add_f64(p.m, 1.0)), p.k);
    let r = select(t.hi > 709.8, infinity(), select(t.hi < -745.2, 0.0, r));
    // x = 0, x = inf and y = +-inf
    let grows = (x > 1.0) == (y > 0.0);
    let zero_base = select(y < 0.0, infinity(), 0.0);
    let inf_base = select(y < 0.0, 0.0, infinity());
    let inf_exp = select(grows, infinity(), 0.0);
    let mut out = select(ok, r, nan());
    out = select(x == 0.0 && !is_nan(y), zero_base, out);
    out = select(
        x > 0.0 && !is_nan(x) && f64::abs(y) == infinity(),
        select(x == 1.0, 1.0, inf_exp),
        out,
    );
    out = select(x < 0.0, nan(), out);
    // (-inf)^y is +inf or +0 unless y is an odd integer (the caller's case)
    out = select(f64::abs(x) == infinity() && !is_nan(y), inf_base, out);
    select(y == 0.0 || x == 1.0, 1.0, out)
}

/// `sin` and `cos` of a reduced argument.
#[derive(CubeType, Clone, Copy)]
pub struct SinCos {
    pub sin: Dd,
    pub cos: Dd,
}

/// `sin y` for `|y| <= 0.8`.
#[cube]
fn sin_reduced(y: Dd) -> Dd {
    let z = dd::mul(y, y);
    let w = z.hi;
    let mut q = fma(-3.868170170630684e-23f64, w, 1.9572941063391263e-20f64);
    q = fma(q, w, -8.22063524662433e-18f64);
    q = fma(q, w, 2.8114572543455206e-15f64);
    q = fma(q, w, -7.647163731819816e-13f64);
    q = fma(q, w, 1.6059043836821613e-10f64);
    q = fma(q, w, -2.505210838544172e-08f64);
    q = fma(q, w, 2.7557319223985893e-06f64);
    q = fma(q, w, -0.0001984126984126984f64);
    q = fma(q, w, 0.008333333333333333f64);
    // y + y z (-1/6 + z q)
    let p = dd::add_f64(
        dd::dd(-0.16666666666666666f64, -9.25185853854297e-18f64),
        w * q,
    );
    dd::add(y, dd::mul(dd::mul(y, z), p))
}

/// `cos y` for `|y| <= 0.8`.
#[cube]
fn cos_reduced(y: Dd) -> Dd {
    let z = dd::mul(y, y);
    let w = z.hi;
    let mut q = fma(-8.896791392450574e-22f64, w, 4.110317623312165e-19f64);
    q = fma(q, w, -1.5619206968586225e-16f64);
    q = fma(q, w, 4.779477332387385e-14f64);
    q = fma(q, w, -1.1470745597729725e-11f64);
    q = fma(q, w, 2.08767569878681e-09f64);
    q = fma(q, w, -2.755731922398589e-07f64);
    q = fma(q, w, 2.48015873015873e-05f64);
    q = fma(q, w, -0.001388888888888889f64);
    q = fma(q, w, 0.041666666666666664f64);
    // 1 + z (-1/2 + z q)
    let p = dd::add_f64(dd::dd(-0.5, 0.0), w * q);
    dd::add_f64(dd::mul(z, p), 1.0)
}

/// `sin x` and `cos x` for finite `x`: `x = n pi/2 + r` with `pi/2` in four f64 parts and
/// exact products, so `r` is exact to about 2^-150 for `|x| < 2^52`. Larger arguments (whole
/// numbers, every one of them) are reduced in plain f64, which keeps the result in [-1, 1]
/// but not its digits.
#[cube]
pub fn sin_cos(x: f64) -> SinCos {
    let big = f64::abs(x) >= 4503599627370496.0f64;
    let n = f64::floor(x * 0.6366197723675814f64 + 0.5f64);
    let m = select(big, 0.0, n);
    let r = dd::add(
        dd::dd(x, 0.0),
        dd::neg(dd::two_prod(m, 1.5707963267948966f64)),
    );
    let r = dd::add(r, dd::neg(dd::two_prod(m, 6.123233995736766e-17f64)));
    let r = dd::add(r, dd::neg(dd::two_prod(m, -1.4973849048591698e-33f64)));
    let r = dd::add(r, dd::neg(dd::two_prod(m, 5.562271104316826e-50f64)));
    // A compiler may fuse `x - n * pi/2` into one fma (NVRTC does), which gives the exact,
    // huge residual of the rounded product instead of a small one: kept only when it is
    // reduced, so that the result stays finite and in [-1, 1].
    let rough = x - n * 1.5707963267948966f64;
    let rough = select(f64::abs(rough) <= 0.7853981633974483f64, rough, 0.0);
    let r = pick(big, dd::dd(rough, 0.0), r);
    let s = sin_reduced(r);
    let c = cos_reduced(r);
    let quadrant = n - 4.0 * f64::floor(n * 0.25);
    let odd = quadrant == 1.0 || quadrant == 3.0;
    let sin = pick(odd, c, s);
    let cos = pick(odd, s, c);
    SinCos {
        sin: pick(quadrant >= 2.0, dd::neg(sin), sin),
        cos: pick(quadrant == 1.0 || quadrant == 2.0, dd::neg(cos), cos),
    }
}

#[cube]
pub fn sin(x: f64) -> f64 {
    let finite = f64::abs(x) < infinity();
    let y = dd::to_f64(sin_cos(select(finite, x, 0.0)).sin);
    select(finite, select(f64::abs(x) < 1e-300f64, x, y), nan())
}

#[cube]
pub fn cos(x: f64) -> f64 {
    let finite = f64::abs(x) < infinity();
    select(
        finite,
        dd::to_f64(sin_cos(select(finite, x, 0.0)).cos),
        nan(),
    )
}

#[cube]
pub fn tan(x: f64) -> f64 {
    let finite = f64::abs(x) < infinity();
    let sc = sin_cos(select(finite, x, 0.0));
    let y = dd::to_f64(dd::div(sc.sin, sc.cos));
    select(finite, select(f64::abs(x) < 1e-300f64, x, y), nan())
}

/// `atan(j / 8)` for `j` in 0..=8.
#[cube]
fn atan_eighths(j: f64) -> Dd {
    let mut hi = 0.0f64;
    let mut lo = 0.0f64;
    hi = select(j == 1.0, 0.12435499454676144f64, hi);
    lo = select(j == 1.0, -3.1253241424539383e-18f64, lo);
    hi = select(j == 2.0, 0.24497866312686414f64, hi);
    lo = select(j == 2.0, 1.0698755618734451e-17f64, lo);
    hi = select(j == 3.0, 0.35877067027057225f64, hi);
    lo = select(j == 3.0, -2.4623815582638635e-17f64, lo);
    hi = select(j == 4.0, 0.4636476090008061f64, hi);
    lo = select(j == 4.0, 2.2698777452961687e-17f64, lo);
    hi = select(j == 5.0, 0.5585993153435624f64, hi);
    lo = select(j == 5.0, -5.4556305485916264e-18f64, lo);
    hi = select(j == 6.0, 0.6435011087932844f64, hi);
    lo = select(j == 6.0, 1.5834785051444286e-17f64, lo);
    hi = select(j == 7.0, 0.7188299996216245f64, hi);
    lo = select(j == 7.0, -2.1478388444456983e-17f64, lo);
    hi = select(j == 8.0, 0.7853981633974483f64, hi);
    lo = select(j == 8.0, 3.061616997868383e-17f64, lo);
    dd::dd(hi, lo)
}

#[cube]
fn pi_dd() -> Dd {
    dd::dd(3.141592653589793f64, 1.2246467991473532e-16f64)
}

#[cube]
fn half_pi_dd() -> Dd {
    dd::dd(1.5707963267948966f64, 6.123233995736766e-17f64)
}

/// `atan x` for a finite dd `x >= 0`: `atan(j/8) + atan((x - j/8) / (1 + x j/8))`, through
/// `pi/2 - atan(1/x)` above 1.
#[cube]
fn atan_dd(x: Dd) -> Dd {
    let big = x.hi > 1.0;
    let huge = x.hi > 1e300f64;
    let safe = pick(huge, dd::dd(1e300f64, 0.0), x);
    let u = pick(big, dd::div(dd::dd(1.0, 0.0), safe), safe);
    let j = f64::floor(u.hi * 8.0 + 0.5);
    let c = j * 0.125;
    let t = dd::div(dd::add_f64(u, -c), dd::add_f64(dd::mul_f64(u, c), 1.0));
    let w = t.hi * t.hi;
    let mut q = fma(-0.05263157894736842f64, w, 0.058823529411764705f64);
    q = fma(q, w, -0.06666666666666667f64);
    q = fma(q, w, 0.07692307692307693f64);
    q = fma(q, w, -0.09090909090909091f64);
    q = fma(q, w, 0.1111111111111111f64);
    q = fma(q, w, -0.14285714285714285f64);
    q = fma(q, w, 0.2f64);
    q = fma(q, w, -0.3333333333333333f64);
    let a = dd::add(atan_eighths(j), dd::add_f64(t, t.hi * w * q));
    let a = pick(big, dd::add(half_pi_dd(), dd::neg(a)), a);
    pick(huge, half_pi_dd(), a)
}

#[cube]
pub fn atan(x: f64) -> f64 {
    let a = atan_dd(dd::dd(select(is_nan(x), 0.0, f64::abs(x)), 0.0));
    select(is_nan(x), x, copysign(dd::to_f64(a), x))
}

/// `atan2(y, x)` with IEEE's special cases (signed zeros, infinities).
#[cube]
pub fn atan2(y: f64, x: f64) -> f64 {
    let ax = f64::abs(x);
    let ay = f64::abs(y);
    let x_negative = (u64::reinterpret(x) & SIGN) != 0u64;
    let inf = infinity();
    // |y| / |x| as a dd, for finite non-zero operands
    let finite = ax < inf && ay < inf && ax > 0.0 && ay > 0.0;
    let fx = select(finite, ax, 1.0);
    let fy = select(finite, ay, 1.0);
    let steep = fy > fx * 1e300f64;
    let ratio = pick(
        steep,
        dd::dd(1e301f64, 0.0),
        dd::div(dd::dd(fy, 0.0), dd::dd(fx, 0.0)),
    );
    let a = atan_dd(ratio);
    let general = pick(x_negative, dd::add(pi_dd(), dd::neg(a)), a);
    let quarter = select(x_negative, 2.356194490192345f64, 0.7853981633974483f64);
    let mut r = dd::to_f64(general);
    r = select(
        ay == inf,
        select(ax == inf, quarter, 1.5707963267948966f64),
        r,
    );
    r = select(
        ax == inf && ay < inf,
        select(x_negative, 3.141592653589793f64, 0.0),
        r,
    );
    r = select(ax == 0.0 && ay > 0.0, 1.5707963267948966f64, r);
    r = select(ay == 0.0, select(x_negative, 3.141592653589793f64, 0.0), r);
    select(is_nan(x) || is_nan(y), nan(), copysign(r, y))
}

/// `1 - a^2` for `0 <= a <= 1`, exactly as a dd.
#[cube]
fn one_minus_square(a: f64) -> Dd {
    dd::add_f64(dd::neg(dd::two_prod(a, a)), 1.0)
}

#[cube]
pub fn asin(x: f64) -> f64 {
    let a = f64::abs(x);
    let ok = a < 1.0;
    let safe = select(ok, a, 0.5);
    let r = dd::to_f64(atan_dd(dd::div(
        dd::dd(safe, 0.0),
        dd::sqrt(one_minus_square(safe)),
    )));
    let r = select(a == 1.0, 1.5707963267948966f64, select(ok, r, nan()));
    select(a < 1e-300f64, x, select(is_nan(x), x, copysign(r, x)))
}

#[cube]
pub fn acos(x: f64) -> f64 {
    let a = f64::abs(x);
    let ok = a <= 1.0 && a >= 1e-300f64;
    let safe = select(ok, a, 0.5);
    let t = atan_dd(dd::div(dd::sqrt(one_minus_square(safe)), dd::dd(safe, 0.0)));
    let r = dd::to_f64(pick(x < 0.0, dd::add(pi_dd(), dd::neg(t)), t));
    select(a < 1e-300f64, 1.5707963267948966f64, select(ok, r, nan()))
}

/// `e^a` as a plain dd, for `|a| <= 23`.
#[cube]
fn exp_dd(a: f64) -> Dd {
    let p = exp_parts(dd::dd(a, 0.0));
    let s = pow2(p.k);
    dd::add_f64(dd::dd(p.m.hi * s, p.m.lo * s), s)
}

/// `e^a / 2` for `a >= 0`, scaled at the end so that it overflows only when the result does.
#[cube]
fn half_exp(a: f64) -> f64 {
    let p = exp_parts(dd::dd(f64::min(a, 712.0), 0.0));
    ldexp(dd::to_f64(dd::add_f64(p.m, 1.0)), p.k - 1)
}

#[cube]
pub fn sinh(x: f64) -> f64 {
    let a = f64::abs(x);
    let small = f64::min(a, 22.0);
    let d = dd::add(exp_dd(small), dd::neg(exp_dd(-small)));
    let r = select(
        a > 22.0,
        half_exp(select(is_nan(a), 0.0, a)),
        dd::to_f64(d) * 0.5,
    );
    select(is_nan(x) || a < 1e-300f64, x, copysign(r, x))
}

#[cube]
pub fn cosh(x: f64) -> f64 {
    let a = f64::abs(x);
    let small = f64::min(a, 22.0);
    let d = dd::add(exp_dd(small), exp_dd(-small));
    let r = select(
        a > 22.0,
        half_exp(select(is_nan(a), 0.0, a)),
        dd::to_f64(d) * 0.5,
    );
    select(is_nan(x), x, r)
}

#[cube]
pub fn tanh(x: f64) -> f64 {
    let a = f64::abs(x);
    let small = f64::min(a, 22.0);
    let (p, n) = (exp_dd(small), exp_dd(-small));
    let t = dd::to_f64(dd::div(dd::add(p, dd::neg(n)), dd::add(p, n)));
    let r = select(a > 22.0, 1.0, t);
    select(is_nan(x) || a < 1e-300f64, x, copysign(r, x))
}

/// `ln(2a)` for large `a`, where `a^2` would overflow.
#[cube]
fn ln_twice(a: f64) -> f64 {
    let ln2 = dd::dd(0.6931471805599453f64, 2.3190468138462996e-17f64);
    dd::to_f64(dd::add(ln_any(dd::dd(a, 0.0)), ln2))
}

#[cube]
pub fn asinh(x: f64) -> f64 {
    let a = f64::abs(x);
    let large = a > 1e150f64;
    let safe = select(large || is_nan(a), 1.0, a);
    let w = dd::add_f64(dd::sqrt(dd::add_f64(dd::two_prod(safe, safe), 1.0)), safe);
    let r = select(
        large,
        ln_twice(select(a < infinity(), a, 1.0)),
        dd::to_f64(ln_any(w)),
    );
    let r = select(a == infinity(), a, r);
    select(is_nan(x) || a < 1e-300f64, x, copysign(r, x))
}

#[cube]
pub fn acosh(x: f64) -> f64 {
    let large = x > 1e150f64;
    let ok = x >= 1.0;
    let safe = select(large || !ok, 1.0, x);
    let w = dd::add_f64(dd::sqrt(dd::add_f64(dd::two_prod(safe, safe), -1.0)), safe);
    let r = select(
        large,
        ln_twice(select(x < infinity(), x, 1.0)),
        dd::to_f64(ln_any(w)),
    );
    let r = select(x == infinity(), x, r);
    select(ok, r, nan())
}

#[cube]
pub fn atanh(x: f64) -> f64 {
    let a = f64::abs(x);
    let ok = a < 1.0;
    let safe = select(ok, a, 0.5);
    let q = dd::div(dd::two_sum(1.0, safe), dd::two_sum(1.0, -safe));
    let r = dd::to_f64(ln_any(q)) * 0.5;
    let r = select(a == 1.0, infinity(), select(ok, r, nan()));
    select(a < 1e-300f64, x, select(is_nan(x), x, copysign(r, x)))
}

/// `erf a` for `0 <= a <= 1`: `2/sqrt(pi) a (1 - a^2/3 + a^4/10 - ...)`.
#[cube]
fn erf_series(a: f64) -> Dd {
    let z = dd::two_prod(a, a);
    let w = z.hi;
    let mut q = fma(1.0025164934907719e-20f64, w, -2.107855191442136e-19f64);
    q = fma(q, w, 4.221407288807088e-18f64);
    q = fma(q, w, -8.032735012415773e-17f64);
    q = fma(q, w, 1.4483264643598138e-15f64);
    q = fma(q, w, -2.466827010264457e-14f64);
    q = fma(q, w, 3.9554295164585257e-13f64);
    q = fma(q, w, -5.9477940136376354e-12f64);
    q = fma(q, w, 8.35070279514724e-11f64);
    q = fma(q, w, -1.0892221037148573e-09f64);
    q = fma(q, w, 1.3122532963802806e-08f64);
    q = fma(q, w, -1.4503852223150468e-07f64);
    q = fma(q, w, 1.4589169000933706e-06f64);
    q = fma(q, w, -1.3227513227513228e-05f64);
    q = fma(q, w, 0.00010683760683760684f64);
    q = fma(q, w, -0.0007575757575757576f64);
    q = fma(q, w, 0.004629629629629629f64);
    q = fma(q, w, -0.023809523809523808f64);
    // 1 + z (-1/3 + z (1/10 + z q))
    let p = dd::add_f64(dd::dd(0.1f64, -5.551115123125783e-18f64), w * q);
    let p = dd::add(
        dd::dd(-0.3333333333333333f64, -1.850371707708594e-17f64),
        dd::mul(z, p),
    );
    let p = dd::add_f64(dd::mul(z, p), 1.0);
    let two_over_sqrt_pi = dd::dd(1.1283791670955126f64, 1.533545961316588e-17f64);
    dd::mul(two_over_sqrt_pi, dd::mul_f64(p, a))
}

/// `e^(a^2) erfc(a)` for `1 <= a < 2` (Taylor expansion at 1.5).
#[cube]
fn erfcx_near_1_5(a: f64) -> Dd {
    let w = a - 1.5;
    let mut q = fma(-7.004374506902837e-13f64, w, 2.9886581012019698e-12f64);
    q = fma(q, w, -1.2538017834741216e-11f64);
    q = fma(q, w, 5.168226586533349e-11f64);
    q = fma(q, w, -2.09172586062783e-10f64);
    q = fma(q, w, 8.305815377475094e-10f64);
    q = fma(q, w, -3.233011874217703e-09f64);
    q = fma(q, w, 1.232475165105414e-08f64);
    q = fma(q, w, -4.596772840743168e-08f64);
    q = fma(q, w, 1.6754960581958065e-07f64);
    q = fma(q, w, -5.960823717851086e-07f64);
    q = fma(q, w, 2.0669707984147273e-06f64);
    q = fma(q, w, -6.974991614225297e-06f64);
    q = fma(q, w, 2.2864312211826308e-05f64);
    q = fma(q, w, -7.265892219597859e-05f64);
    q = fma(q, w, 0.00022330994435309945f64);
    q = fma(q, w, -0.0006619300664115528f64);
    q = fma(q, w, 0.001886134877029727f64);
    q = fma(q, w, -0.005145957547985025f64);
    q = fma(q, w, 0.013377340953066719f64);
    q = fma(q, w, -0.03293090529956264f64);
    q = fma(q, w, 0.0761510398554774f64);
    let p = dd::add_f64(
        dd::dd(-0.16362291773256007f64, 7.932921594371794e-18f64),
        w * q,
    );
    dd::add(
        dd::dd(0.3215854164543175f64, 1.7007985607722196e-17f64),
        dd::mul_f64(p, w),
    )
}

/// `e^(a^2) erfc(a)` for `2 <= a < 3` (Taylor expansion at 2.5).
#[cube]
fn erfcx_near_2_5(a: f64) -> Dd {
    let w = a - 2.5;
    let mut q = fma(-9.496804892610957e-14f64, w, 4.5317283847135657e-13f64);
    q = fma(q, w, -2.130096609902542e-12f64);
    q = fma(q, w, 9.85696990946992e-12f64);
    q = fma(q, w, -4.487834256774895e-11f64);
    q = fma(q, w, 2.0090858560460168e-10f64);
    q = fma(q, w, -8.837373758373702e-10f64);
    q = fma(q, w, 3.816612124430239e-09f64);
    q = fma(q, w, -1.6169560629855874e-08f64);
    q = fma(q, w, 6.714018644565135e-08f64);
    q = fma(q, w, -2.7295261020819155e-07f64);
    q = fma(q, w, 1.085222644194387e-06f64);
    q = fma(q, w, -4.214295966631021e-06f64);
    q = fma(q, w, 1.596185313754949e-05f64);
    q = fma(q, w, -5.886896469371332e-05f64);
    q = fma(q, w, 0.00021101982428448125f64);
    q = fma(q, w, -0.0007335909371391998f64);
    q = fma(q, w, 0.002467036815701443f64);
    q = fma(q, w, -0.008001569382101607f64);
    q = fma(q, w, 0.024937997086656904f64);
    let p = dd::add_f64(
        dd::dd(-0.07434734678979467f64, -1.840725736273771e-18f64),
        w * q,
    );
    dd::add(
        dd::dd(0.2108063640611436f64, -5.6277259093102524e-18f64),
        dd::mul_f64(p, w),
    )
}

/// `e^(a^2) erfc(a)` for `a >= 3`: Laplace's continued fraction, 60 terms.
#[cube]
fn erfcx_large(a: f64) -> Dd {
    let mut t = 0.0f64;
    let mut k = 60.0f64;
    for _ in 0..60u32 {
        t = (k * 0.5) / (a + t);
        k -= 1.0;
    }
    let inv_sqrt_pi = dd::dd(0.5641895835477563f64, 7.66772980658294e-18f64);
    dd::mul(inv_sqrt_pi, dd::div(dd::dd(1.0, 0.0), dd::two_sum(a, t)))
}

/// `erfc a` for `1 <= a <= 27.3`, to full relative precision.
#[cube]
fn erfc_tail(a: f64) -> Dd {
    let large = erfcx_large(f64::max(a, 3.0));
    let mut hi = large.hi;
    let mut lo = large.lo;
    if a < 2.0 {
        let g = erfcx_near_1_5(a);
        hi = g.hi;
        lo = g.lo;
    } else if a < 3.0 {
        let g = erfcx_near_2_5(a);
        hi = g.hi;
        lo = g.lo;
    }
    let g = dd::dd(hi, lo);
    let p = exp_parts(dd::neg(dd::two_prod(a, a)));
    let r = dd::mul(dd::add_f64(p.m, 1.0), g);
    dd::dd(ldexp(r.hi, p.k), ldexp(r.lo, p.k))
}

#[cube]
pub fn erf(x: f64) -> f64 {
    let a = f64::abs(x);
    let series = dd::to_f64(erf_series(f64::min(a, 1.0)));
    let tail = dd::to_f64(dd::add_f64(
        dd::neg(erfc_tail(f64::clamp(a, 1.0, 6.0))),
        1.0,
    ));
    let r = select(a <= 1.0, series, select(a >= 6.0, 1.0, tail));
    let tiny = x * 1.1283791670955126f64;
    select(is_nan(x), x, select(a < 1e-300f64, tiny, copysign(r, x)))
}

#[cube]
pub fn erfc(x: f64) -> f64 {
    let a = f64::abs(x);
    let series = erf_series(f64::min(a, 1.0));
    let near = dd::add_f64(pick(x < 0.0, series, dd::neg(series)), 1.0);
    let tail = erfc_tail(f64::clamp(a, 1.0, 27.3));
    let far = pick(x < 0.0, dd::add_f64(dd::neg(tail), 2.0), tail);
    let r = dd::to_f64(pick(a <= 1.0, near, far));
    let r = select(x > 27.3, 0.0, select(x < -6.0, 2.0, r));
    select(is_nan(x), x, r)
}
