//! `sin`, `cos` and `tan` in f32, over the whole f32 range.
//!
//! Above π/4 the argument `|x|` is reduced to `r = |x| - q π/2` with `|r| <= π/4` by
//! Payne-Hanek in 32-bit integer arithmetic alone: the mantissa times a 96-bit window of the
//! bits of 2/π gives the quadrant and a 64-bit fraction, which times π/2 in fixed point
//! becomes `r` as a pair of f32s. Integers keep it exact on every device (lavapipe's `fma` is
//! not fused, so Cody-Waite's exact products would not be). Then `sin r` and `cos r` are
//! polynomials (fitted on Chebyshev nodes over `r² <= (π/4)²`), and the quadrant `q mod 4`
//! picks and signs them; the odd functions take the sign of `x` last.
use cubecl::prelude::*;

use super::*;

/// Below this, no reduction: `r = |x|`.
const PIO4: f32 = 0.7853981633974483;
/// π/2 in 2.62 fixed point, high and low words.
const PIO2_FIXED_HI: u32 = 0x6487_ed51;
const PIO2_FIXED_LO: u32 = 0x10b4_611a;

/// Word `i` (0 to 7) of the bits of 2/π after 32 zero bits: bit 32 of the sequence is the
/// first bit after the binary point of 2/π.
#[cube]
fn two_over_pi_word(i: u32) -> u32 {
    let mut w = 0u32;
    w = select(i == 1u32, 0xa2f9_836eu32, w);
    w = select(i == 2u32, 0x4e44_1529u32, w);
    w = select(i == 3u32, 0xfc27_57d1u32, w);
    w = select(i == 4u32, 0xf534_ddc0u32, w);
    w = select(i == 5u32, 0xdb62_9599u32, w);
    w = select(i == 6u32, 0x3c43_9041u32, w);
    w = select(i == 7u32, 0xfe51_63abu32, w);
    w
}

/// `hi << s | lo >> (32 - s)` for `s` in 0..32 (a shift by 32 is undefined).
#[cube]
fn funnel(hi: u32, lo: u32, s: u32) -> u32 {
    select(s == 0u32, hi, (hi << s) | (lo >> ((32u32 - s) & 31u32)))
}

/// `|x| - q π/2` as `hi + lo` with `|hi + lo| <= π/4`, and `q mod 4`.
#[derive(CubeType, Clone, Copy)]
struct Reduced {
    q: u32,
    hi: f32,
    lo: f32,
}

/// `x + y` and its carry out.
#[derive(CubeType, Clone, Copy)]
struct Sum {
    value: u32,
    carry: u32,
}

#[cube]
fn add(x: u32, y: u32) -> Sum {
    let value = x + y;
    Sum { value, carry: u32::cast_from(value < x) }
}

/// Payne-Hanek reduction of a finite `a >= 2^-7`.
///
/// `a = M 2^E` with `M` the 24-bit mantissa. The bits of 2/π at places `E - 1` and below
/// (the higher ones give multiples of 4 in `a 2/π`) form a 96-bit integer `W`, so that
/// `a 2/π = M W 2^-94 (mod 4)`: the quadrant is bits 94-95 of the 120-bit product and the
/// fraction is the 64 bits below, rounded to the nearest quadrant.
#[cube]
fn reduce_large(a: f32) -> Reduced {
    let bits = u32::reinterpret(a);
    let m = (bits & 0x007f_ffffu32) | 0x0080_0000u32;
    // Place of the window in the word sequence: E + 30 with E = exponent - 150.
    let t = (bits >> 23u32) - 120u32;
    let i = t >> 5u32;
    let s = t & 31u32;
    let t0 = two_over_pi_word(i);
    let t1 = two_over_pi_word(i + 1u32);
    let t2 = two_over_pi_word(i + 2u32);
    let t3 = two_over_pi_word(i + 3u32);
    let w2 = funnel(t0, t1, s);
    let w1 = funnel(t1, t2, s);
    let w0 = funnel(t2, t3, s);
    // M W in 32-bit words (the word above bit 96 only adds multiples of 4).
    let r0 = m * w0;
    let r1 = add(u32::mul_hi(m, w0), m * w1);
    let r2 = u32::mul_hi(m, w1) + m * w2 + r1.carry;
    let mut q = r2 >> 30u32;
    let mut f_hi = (r2 << 2u32) | (r1.value >> 30u32);
    let mut f_lo = (r1.value << 2u32) | (r0 >> 30u32);
    // A fraction of a half or more rounds up to the next quadrant and turns negative.
    let up = f_hi >= 0x8000_0000u32;
    if up {
        q += 1u32;
        f_hi = !f_hi + u32::cast_from(f_lo == 0u32);
        f_lo = 0u32 - f_lo;
    }
    // The fraction (in units of 2^-64 quarter turns) times π/2 (2^62 units): the high 64 bits
    // of the 128-bit product, `r` in units of 2^-62.
    let cross = add(f_hi * PIO2_FIXED_LO, f_lo * PIO2_FIXED_HI);
    let middle = add(cross.value, u32::mul_hi(f_lo, PIO2_FIXED_LO));
    let s1 = add(f_hi * PIO2_FIXED_HI, u32::mul_hi(f_hi, PIO2_FIXED_LO));
    let s2 = add(s1.value, u32::mul_hi(f_lo, PIO2_FIXED_HI));
    let s3 = add(s2.value, cross.carry + middle.carry);
    let p_hi = u32::mul_hi(f_hi, PIO2_FIXED_HI) + s1.carry + s2.carry + s3.carry;
    let p_lo = s3.value;
    // Normalise the 64 bits and split them into two f32s.
    let empty = p_hi == 0u32;
    let n_hi = select(empty, p_lo, p_hi);
    let n_lo = select(empty, 0u32, p_lo);
    let z = u32::leading_zeros(n_hi) & 31u32;
    let top = funnel(n_hi, n_lo, z);
    let rest = n_lo << z;
    let e = -30i32 - select(empty, 32i32, 0i32) - i32::cast_from(z);
    let hi = ldexp(f32::cast_from(top & 0xffff_ff00u32), e);
    let lo = ldexp(f32::cast_from(top & 0xffu32) + f32::cast_from(rest) * 2.3283064365386963e-10f32, e);
    let sign = select(up, -1.0f32, 1.0f32);
    Reduced { q: q & 3u32, hi: sign * hi, lo: sign * lo }
}

#[cube]
fn reduce(a: f32) -> Reduced {
    let mut q = 0u32;
    let mut hi = a;
    let mut lo = 0.0f32;
    if a > PIO4 && a < infinity() {
        let large = reduce_large(a);
        q = large.q;
        hi = large.hi;
        lo = large.lo;
    }
    Reduced { q, hi, lo }
}

/// `(sin r - r) / r³` as a polynomial in `z = r²`, for `z <= (π/4)²`.
#[cube]
fn sin_poly(z: f32) -> f32 {
    let mut p = 2.7249925551586784e-06f32 * z;
    p = fma(p + -0.00019840087043121457f32, z, 0.008333331905305386f32);
    fma(p, z, -0.1666666716337204f32)
}

/// `(cos r - 1 + r²/2) / r⁴` as a polynomial in `z = r²`, for `z <= (π/4)²`.
#[cube]
fn cos_poly(z: f32) -> f32 {
    let mut p = -2.730095900460583e-07f32 * z;
    p = fma(p + 2.480059993104078e-05f32, z, -0.00138888880610466f32);
    fma(p, z, 0.0416666679084301f32)
}

/// `sin r` and `cos r` for `r = hi + lo`, `|r| <= π/4`: the polynomials at `hi`, and `lo`
/// times the derivatives.
#[cube]
fn sin_cos_reduced(r: Reduced) -> SinCosPair {
    let z = r.hi * r.hi;
    let sin = r.hi + fma(r.hi * z, sin_poly(z), r.lo * fma(z, -0.5f32, 1.0f32));
    let cos = 1.0f32 + fma(z, fma(z, cos_poly(z), -0.5f32), 0.0f32 - r.lo * r.hi);
    SinCosPair { sin, cos }
}

/// `(tan r - r) / r³` as a polynomial in `z = r²`, for `z <= (π/4)²`.
#[cube]
fn tan_poly(z: f32) -> f32 {
    let mut p = 0.0038431398570537567f32 * z;
    p = fma(p + 0.0011853215983137488f32, z, 0.00996214710175991f32);
    p = fma(p, z, 0.02162112668156624f32);
    p = fma(p, z, 0.05399446561932564f32);
    p = fma(p, z, 0.13333231210708618f32);
    fma(p, z, 0.3333333432674408f32)
}

/// `sin` and `cos` of one argument.
#[derive(CubeType, Clone, Copy)]
pub struct SinCosPair {
    pub sin: f32,
    pub cos: f32,
}

/// `x` with its sign flipped where `s` is negative (the odd functions of `|x|`).
#[cube]
fn with_sign_of(v: f32, s: f32) -> f32 {
    f32::reinterpret(u32::reinterpret(v) ^ (u32::reinterpret(s) & SIGN))
}

/// NaN for infinite and NaN `x`, `v` otherwise.
#[cube]
fn finite_or_nan(x: f32, v: f32) -> f32 {
    select(f32::abs(x) < infinity(), v, nan())
}

#[cube]
pub fn sin(x: f32) -> f32 {
    let r = reduce(f32::abs(x));
    let sc = sin_cos_reduced(r);
    let v = select((r.q & 1u32) == 0u32, sc.sin, sc.cos);
    let v = select(r.q >= 2u32, 0.0f32 - v, v);
    finite_or_nan(x, with_sign_of(v, x))
}

#[cube]
pub fn cos(x: f32) -> f32 {
    let r = reduce(f32::abs(x));
    let sc = sin_cos_reduced(r);
    let v = select((r.q & 1u32) == 0u32, sc.cos, sc.sin);
    let v = select(r.q == 1u32 || r.q == 2u32, 0.0f32 - v, v);
    finite_or_nan(x, v)
}

/// `sin x` and `cos x` from one reduction.
#[cube]
pub fn sin_cos(x: f32) -> SinCosPair {
    let r = reduce(f32::abs(x));
    let sc = sin_cos_reduced(r);
    let odd = (r.q & 1u32) == 1u32;
    let s = select(odd, sc.cos, sc.sin);
    let c = select(odd, sc.sin, sc.cos);
    let s = select(r.q >= 2u32, 0.0f32 - s, s);
    let c = select(r.q == 1u32 || r.q == 2u32, 0.0f32 - c, c);
    SinCosPair { sin: finite_or_nan(x, with_sign_of(s, x)), cos: finite_or_nan(x, c) }
}

/// `tan r` for `r = hi + lo` by its own polynomial (the quotient of `sin` and `cos` would add
/// their errors), `-1 / tan r` in the odd quadrants.
#[cube]
pub fn tan(x: f32) -> f32 {
    let r = reduce(f32::abs(x));
    let z = r.hi * r.hi;
    let t0 = r.hi * z * tan_poly(z);
    let t = r.hi + fma(t0, 1.0f32, r.lo * fma(r.hi + t0, r.hi + t0, 1.0f32));
    let v = select((r.q & 1u32) == 0u32, t, quotient(-1.0f32, t));
    finite_or_nan(x, with_sign_of(v, x))
}
