//! The hyperbolic functions and their inverses in f64.
use cubecl::prelude::*;

use super::super::dd::{self, Dd};
use super::*;
use super::exp_log::ln_any;

/// `e^a` as a plain dd, for `|a| <= 23`.
#[cube]
pub(super) fn exp_dd(a: f64) -> Dd {
    let p = exp_parts(dd::dd(a, 0.0));
    let s = pow2(p.k);
    dd::add_f64(dd::dd(p.m.hi * s, p.m.lo * s), s)
}

/// `e^a / 2` for `a >= 0`, scaled at the end so that it overflows only when the result does.
#[cube]
pub(super) fn half_exp(a: f64) -> f64 {
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
pub(super) fn ln_twice(a: f64) -> f64 {
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
