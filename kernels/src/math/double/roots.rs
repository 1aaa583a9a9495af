//! The cube root in f64.
use cubecl::prelude::*;

use super::*;

/// `∛x`: `|x|^(1/3)` (off by `|x|^δ` for the rounded third `1/3 - δ`, up to tens of ULP at the
/// ends of the range) corrected by a Newton step `y - (y - a / y²) / 3`. Zero, infinity and
/// NaN are their own roots.
#[cube]
pub fn cbrt(x: f64) -> f64 {
    let a = f64::abs(x);
    let done = a == 0.0f64 || !(a < infinity());
    let y = powf(select(done, 1.0f64, a), 0.3333333333333333f64);
    let y = y - (y - a / (y * y)) * 0.3333333333333333f64;
    select(done, x, copysign(y, x))
}
