//! `sin`, `cos`, `tan` and their inverses in f64.
use cubecl::prelude::*;

use super::super::dd::{self, Dd};
use super::*;

/// `sin` and `cos` of a reduced argument.
#[derive(CubeType, Clone, Copy)]
pub struct SinCos {
    pub sin: Dd,
    pub cos: Dd,
}

/// `sin y` for `|y| <= 0.8`.
#[cube]
pub(super) fn sin_reduced(y: Dd) -> Dd {
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
pub(super) fn cos_reduced(y: Dd) -> Dd {
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
pub(super) fn atan_eighths(j: f64) -> Dd {
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
pub(super) fn pi_dd() -> Dd {
    dd::dd(3.141592653589793f64, 1.2246467991473532e-16f64)
}

#[cube]
pub(super) fn half_pi_dd() -> Dd {
    dd::dd(1.5707963267948966f64, 6.123233995736766e-17f64)
}

/// `atan x` for a finite dd `x >= 0`: `atan(j/8) + atan((x - j/8) / (1 + x j/8))`, through
/// `pi/2 - atan(1/x)` above 1.
#[cube]
pub(super) fn atan_dd(x: Dd) -> Dd {
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
pub(super) fn one_minus_square(a: f64) -> Dd {
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
