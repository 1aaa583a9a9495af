//! The cube root in f32.
use cubecl::prelude::*;

use super::*;

/// `∛x`: a first guess from the bits (the exponent divided by three), two Halley steps in the
/// ratio `r = a / y³` (cubic convergence, no overflow: `a / y` before `/ y²`) and a last
/// Newton correction `y (r - 1) / 3`, whose residual is small and exact enough to round once.
/// Subnormals are scaled by 2^24 first. Zero, infinity and NaN are their own roots.
#[cube]
pub fn cbrt(x: f32) -> f32 {
    let a = f32::abs(x);
    let tiny = a < 1.17549435e-38f32;
    let s = select(tiny, a * 16777216.0f32, a);
    let mut y = f32::reinterpret(u32::reinterpret(s) / 3u32 + 0x2a51_37a0u32);
    #[unroll]
    for _ in 0..2 {
        let r = (s / y) / (y * y);
        y = y * quotient(1.0f32 + 2.0f32 * r, 2.0f32 + r);
    }
    let r = quotient(quotient(s, y), y * y);
    y = fma(y * (r - 1.0f32), 0.3333333432674408f32, y);
    let y = select(tiny, y * 0.00390625f32, y);
    let done = a == 0.0f32 || !(a < infinity());
    select(done, x, copysign(y, x))
}
