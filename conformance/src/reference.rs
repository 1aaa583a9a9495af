//! Reference functions that neither Rust's std nor burn-ndarray has, from glibc's `erf` and
//! `erfc`.

mod libc_math {
    unsafe extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
    }
}

/// The inverse error function in f64: bisection to a bracket, then Newton steps on `erf`
/// (or, from 1/2 on, on `erfc` against `1 - |x|`, which is exact there), so within about an
/// ulp of the root of glibc's functions.
pub fn erf_inv(x: f64) -> f64 {
    let a = x.abs();
    if x.is_nan() || a > 1.0 {
        return f64::NAN;
    }
    if a == 1.0 {
        return f64::INFINITY.copysign(x);
    }
    let w = 1.0 - a;
    // SAFETY: glibc's erf and erfc are pure functions of their argument.
    let f = |y: f64| unsafe { if a < 0.5 { libc_math::erf(y) - a } else { w - libc_math::erfc(y) } };
    let (mut lo, mut hi) = (0.0f64, 30.0f64);
    for _ in 0..80 {
        let mid = 0.5 * (lo + hi);
        if f(mid) < 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let mut y = 0.5 * (lo + hi);
    for _ in 0..3 {
        let d = std::f64::consts::FRAC_2_SQRT_PI * (-y * y).exp();
        if d > 0.0 {
            y -= f(y) / d;
        }
    }
    y.copysign(x)
}
