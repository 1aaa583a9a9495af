//! `e^x`, `ln`, `log1p` and `pow` in f64.
use cubecl::prelude::*;

use super::super::dd::{self, Dd};
use super::*;

/// `e^x = 2^k (1 + m)`.
#[derive(CubeType, Clone, Copy)]
pub struct ExpParts {
    pub k: i32,
    pub m: Dd,
}

/// `e^r - 1` for `|r| <= 0.36`.
#[cube]
pub(super) fn expm1_reduced(r: Dd) -> Dd {
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

/// `e^x - 1 = 2^k (m + (1 - 2^-k))` from [`exp_parts`](fn@exp_parts), `1 - 2^-k` exact: full relative
/// precision near zero.
#[cube]
pub fn expm1(x: f64) -> f64 {
    let safe = f64::clamp(select(is_nan(x), 0.0, x), -746.0, 710.0);
    let p = exp_parts(dd::dd(safe, 0.0));
    let minus_k = select(p.k > 1022i32, -1022i32, select(p.k < -1023i32, 1023i32, 0i32 - p.k));
    let y = ldexp(dd::to_f64(dd::add_f64(p.m, 1.0 - pow2(minus_k))), p.k);
    let y = select(x > 709.8, infinity(), select(x < -40.0, -1.0, y));
    select(is_nan(x), x, y)
}

/// `ln a` for a positive, normal `a.hi`.
#[cube]
pub(super) fn ln_dd(a: Dd) -> Dd {
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
pub(super) fn ln_any(x: Dd) -> Dd {
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
