//! `erf` and `erfc` in f32: below 1 (erf) or 1/2 (erfc) the series of `erf x / x` in `x²`;
//! above, `erfc x = e^(-x²) g(x)` with `g` fitted on [1/2, 2] in `x - 5/4` and on [2, 10.5] in
//! `1/x²` (as `x g(x)`), and `e^(-x²)` from an exact split of `x²`.
use cubecl::prelude::*;

use super::exp_log::exp_sum;
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
