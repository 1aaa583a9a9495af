//! `erf`, `erfc` and `erf_inv` in f64.
use cubecl::prelude::*;

use super::super::dd::{self, Dd};
use super::super::single;
use super::*;

/// `erf a` for `0 <= a <= 1`: `2/sqrt(pi) a (1 - a^2/3 + a^4/10 - ...)`.
#[cube]
pub(super) fn erf_series(a: f64) -> Dd {
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
pub(super) fn erfcx_near_1_5(a: f64) -> Dd {
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
pub(super) fn erfcx_near_2_5(a: f64) -> Dd {
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
pub(super) fn erfcx_large(a: f64) -> Dd {
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
pub(super) fn erfc_tail(a: f64) -> Dd {
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

/// `erf⁻¹ x`: from Giles' f32 approximation (or, within 10^-37 of ±1, the asymptotic
/// `y² = t - ln √(π t)` with `t = -ln(1 - |x|)`), four Newton steps: on `erf` below 0.6, above
/// on `ln erfc` against `ln w` (`w = 1 - |x|` exact there), which converges from far in the
/// tail. ±1 give ±∞, beyond them NaN.
#[cube]
pub fn erf_inv(x: f64) -> f64 {
    let a = f64::abs(x);
    let w = 1.0f64 - f64::min(a, 1.0f64);
    let safe_w = select(w > 0.0f64, w, 1.0f64);
    let t = 0.0f64 - ln(safe_w);
    let far = f64::sqrt(t - 0.5f64 * ln(3.141592653589793f64 * t));
    let start = single::erf_inv_start(f32::cast_from(f64::min(a, 1.0f64)), f32::cast_from(safe_w));
    let mut y = select(w < 1.0e-37f64, far, f64::cast_from(start));
    for _ in 0..4u32 {
        let d = 1.1283791670955126f64 * exp(0.0f64 - y * y);
        if a < 0.6f64 {
            y -= (erf(y) - a) / d;
        } else {
            let c = erfc(y);
            y += (ln(c) - ln(safe_w)) * c / d;
        }
    }
    let y = select(a == 1.0f64, infinity(), select(a > 1.0f64, nan(), y));
    select(is_nan(x), x, copysign(y, x))
}
