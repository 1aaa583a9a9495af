//! `erf` and `erfc` in f32: below 1 (erf) or 1/2 (erfc) the series of `erf x / x` in `x²`;
//! above, `erfc x = e^(-x²) g(x)` with `g` fitted on [1/2, 2] in `x - 5/4` and on [2, 10.5] in
//! `1/x²` (as `x g(x)`), and `e^(-x²)` from an exact split of `x²`. `erf_inv`: Giles' f32
//! approximation refined by a Newton step on `erf` (or `erfc` in the tail).
use cubecl::prelude::*;

use super::exp_log::{exp, exp_sum, ln_positive};
use super::*;

/// `erf x / x` as a polynomial in `z = x²`, for `z <= 1`.
#[cube]
fn erf_poly(z: f32) -> f32 {
    let mut p = 0.00011265958892181516f32 - 9.667044650996104e-06f32 * z;
    p = fma(p, z, -0.0008484080317430198f32);
    p = fma(p, z, 0.005221031606197357f32);
    p = fma(p, z, -0.026865430176258087f32);
    p = fma(p, z, 0.11283782124519348f32);
    p = fma(p, z, -0.37612637877464294f32);
    fma(p, z, 1.128379225730896f32)
}

/// `erfc a` for `1/2 <= a <= 10.06`.
#[cube]
fn erfc_tail(a: f32) -> f32 {
    // e^(-a²) = e^(-h²) e^(-(a - h)(a + h)), h = a truncated so that h² is exact
    let h = truncated(a);
    let d = (a - h) * (a + h);
    let e = exp_sum(0.0f32 - h * h, 0.0f32 - d);
    let g = if a < 2.0f32 {
        let t = a - 1.25f32;
        let mut g = 6.407439650502056e-05f32 - 2.0357365428935736e-05f32 * t;
        g = fma(g, t, -0.00016099793720059097f32);
        g = fma(g, t, 0.0004674357478506863f32);
        g = fma(g, t, -0.0013263628352433443f32);
        g = fma(g, t, 0.0035550426691770554f32);
        g = fma(g, t, -0.009081550873816013f32);
        g = fma(g, t, 0.022011106833815575f32);
        g = fma(g, t, -0.05021827667951584f32);
        g = fma(g, t, 0.10679558664560318f32);
        g = fma(g, t, -0.2088218778371811f32);
        fma(g, t, 0.36782291531562805f32)
    } else {
        let u = quotient(1.0f32, a * a);
        let mut q = 27.578153610229492f32;
        q = fma(q, u, -38.1330451965332f32);
        q = fma(q, u, 24.266536712646484f32);
        q = fma(q, u, -9.903507232666016f32);
        q = fma(q, u, 3.20733380317688f32);
        q = fma(q, u, -1.0339797735214233f32);
        q = fma(q, u, 0.42246368527412415f32);
        q = fma(q, u, -0.282085120677948f32);
        q = fma(q, u, 0.5641895532608032f32);
        quotient(q, a)
    };
    e * g
}

#[cube]
pub fn erf(x: f32) -> f32 {
    let a = f32::abs(x);
    let y = if a < 1.0f32 {
        a * erf_poly(a * a)
    } else {
        select(a > 4.0f32, 1.0f32, 1.0f32 - erfc_tail(smaller(a, 4.0f32)))
    };
    select(is_nan(x), x, copysign(y, x))
}

#[cube]
pub fn erfc(x: f32) -> f32 {
    let a = f32::abs(x);
    let y = if a < 0.5f32 {
        1.0f32 - x * erf_poly(x * x)
    } else {
        let tail = select(a > 10.05f32, 0.0f32, erfc_tail(smaller(a, 10.06f32)));
        select(x > 0.0f32, tail, 2.0f32 - tail)
    };
    select(is_nan(x), x, y)
}

/// Giles' approximation of `erf⁻¹ a` (within a few 10^-7), from `a` and `w = 1 - a`.
#[allow(unused_assignments)]
#[cube]
pub fn erf_inv_start(a: f32, w: f32) -> f32 {
    let l = 0.0f32 - ln_positive(w * (2.0f32 - w));
    let mut p = 0.0f32;
    if l < 5.0f32 {
        let t = l - 2.5f32;
        p = fma(2.81022636e-08f32, t, 3.43273939e-07f32);
        p = fma(p, t, -3.5233877e-06f32);
        p = fma(p, t, -4.39150654e-06f32);
        p = fma(p, t, 0.00021858087f32);
        p = fma(p, t, -0.00125372503f32);
        p = fma(p, t, -0.00417768164f32);
        p = fma(p, t, 0.246640727f32);
        p = fma(p, t, 1.50140941f32);
    } else {
        let t = f32::sqrt(l) - 3.0f32;
        p = fma(-0.000200214257f32, t, 0.000100950558f32);
        p = fma(p, t, 0.00134934322f32);
        p = fma(p, t, -0.00367342844f32);
        p = fma(p, t, 0.00573950773f32);
        p = fma(p, t, -0.0076224613f32);
        p = fma(p, t, 0.00943887047f32);
        p = fma(p, t, 1.00167406f32);
        p = fma(p, t, 2.83297682f32);
    }
    p * a
}

/// `erf⁻¹ x`: Giles' approximation, then one Newton step `y - (erf y - a) / erf'(y)`; from 0.6 on
/// with `erfc y - w` (`w = 1 - a` exact there), which keeps the residual's relative precision
/// as `a` nears 1. ±1 give ±∞, beyond them NaN.
#[allow(unused_assignments)]
#[cube]
pub fn erf_inv(x: f32) -> f32 {
    let a = f32::abs(x);
    let w = 1.0f32 - smaller(a, 1.0f32);
    let y0 = erf_inv_start(smaller(a, 1.0f32), select(w > 0.0f32, w, 1.0f32));
    let d = 1.1283791670955126f32 * exp(0.0f32 - y0 * y0);
    let mut residual = 0.0f32;
    if a < 0.6f32 {
        residual = erf(y0) - a;
    } else {
        residual = w - erfc(y0);
    }
    let y = y0 - quotient(residual, d);
    let y = select(a == 1.0f32, infinity(), select(a > 1.0f32, nan(), y));
    select(is_nan(x), x, copysign(y, x))
}
