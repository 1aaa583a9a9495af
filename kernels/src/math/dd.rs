//! Double-double arithmetic: a value `hi + lo` with `|lo| <= ulp(hi) / 2`, about 106 bits
//! of precision from f64 operations. The software f64 functions carry their intermediate
//! results in it so that the final rounding to f64 is (almost always) the correct one.
//!
//! Every step is an exact transformation (Knuth's two-sum, Dekker's fast two-sum and exact
//! product) or a rounding far below the f64 ulp.
use cubecl::prelude::*;

/// `hi + lo`.
#[derive(CubeType, Clone, Copy)]
pub struct Dd {
    pub hi: f64,
    pub lo: f64,
}

/// `hi + lo` as one value.
#[cube]
pub fn dd(hi: f64, lo: f64) -> Dd {
    Dd { hi, lo }
}

/// The value rounded to f64.
#[cube]
pub fn to_f64(a: Dd) -> f64 {
    a.hi + a.lo
}

/// 1.0, from a value the compiler cannot see: whether the cube count (never 0) is non-zero.
#[cube]
pub fn runtime_one() -> f64 {
    f64::cast_from(CUBE_COUNT_X != 0u32)
}

/// 0, from a value the compiler cannot see: whether the cube count (never 0) is zero.
#[cube]
pub fn runtime_zero() -> u64 {
    u64::cast_from(CUBE_COUNT_X == 0u32)
}

/// `x`, hidden from the shader compiler's algebra: Mesa's NIR rewrites `(a + b) - a` to `b`,
/// `sqrt(a) * sqrt(a)` to `a` and `(a / b) * b` to `a`, and reassociates sums with constants
/// (Vulkan lets it, and cubecl cannot mark instructions exact), which would fold the rounding
/// errors below to zero. OR-ing the bits with a zero the compiler cannot see makes a value
/// opaque (exactly: signs of zeros, infinities and NaN are kept). The multiplication by a 1.0
/// it cannot see first makes the bit cast's operand a variable even where `x` is a constant
/// (CUDA C++ does not compile a bit cast of a literal). Every primitive hides its operands
/// and its intermediate sums this way.
#[cube]
fn opaque(x: f64) -> f64 {
    f64::reinterpret(u64::reinterpret(x * runtime_one()) | runtime_zero())
}

/// `a + b` exactly (Knuth).
#[cube]
pub fn two_sum(a: f64, b: f64) -> Dd {
    let (a, b) = (opaque(a), opaque(b));
    let s = opaque(a + b);
    let bb = opaque(s - a);
    Dd {
        hi: s,
        lo: (a - (s - bb)) + (b - bb),
    }
}

/// `a + b` exactly when `|a| >= |b|` (Dekker).
#[cube]
pub fn fast_two_sum(a: f64, b: f64) -> Dd {
    let (a, b) = (opaque(a), opaque(b));
    let s = opaque(a + b);
    Dd {
        hi: s,
        lo: b - opaque(s - a),
    }
}

/// `a` split into two halves of 26 bits each, `a = hi + lo` (Veltkamp), for `|a| < 2^995`.
#[cube]
fn split(a: f64) -> Dd {
    let c = opaque(134217729.0f64 * a);
    let hi = opaque(c - opaque(c - a));
    Dd { hi, lo: a - hi }
}

/// `a * b` exactly (Dekker), for `|a|, |b| < 2^995` (and products that neither overflow nor
/// go subnormal). Not through `fma`: lavapipe's f64 `fma` is a multiply and an add.
#[cube]
pub fn two_prod(a: f64, b: f64) -> Dd {
    let (a, b) = (opaque(a), opaque(b));
    let p = opaque(a * b);
    let x = split(a);
    let y = split(b);
    let e = ((opaque(x.hi * y.hi - p) + x.hi * y.lo) + x.lo * y.hi) + x.lo * y.lo;
    Dd { hi: p, lo: e }
}

#[cube]
pub fn neg(a: Dd) -> Dd {
    Dd {
        hi: -a.hi,
        lo: -a.lo,
    }
}

#[cube]
pub fn add(a: Dd, b: Dd) -> Dd {
    let s = two_sum(a.hi, b.hi);
    fast_two_sum(s.hi, s.lo + opaque(a.lo) + opaque(b.lo))
}

#[cube]
pub fn add_f64(a: Dd, b: f64) -> Dd {
    let s = two_sum(a.hi, b);
    fast_two_sum(s.hi, s.lo + opaque(a.lo))
}

#[cube]
pub fn mul(a: Dd, b: Dd) -> Dd {
    let p = two_prod(a.hi, b.hi);
    fast_two_sum(p.hi, p.lo + (a.hi * opaque(b.lo) + opaque(a.lo) * b.hi))
}

#[cube]
pub fn mul_f64(a: Dd, b: f64) -> Dd {
    let p = two_prod(a.hi, b);
    fast_two_sum(p.hi, opaque(a.lo) * b + p.lo)
}

#[cube]
pub fn div(a: Dd, b: Dd) -> Dd {
    // Opaque, or NIR folds `(a / b) * b` back to `a` and the residual to zero.
    let q = opaque(a.hi / b.hi);
    let p = two_prod(q, b.hi);
    let r = ((opaque(a.hi - p.hi) - p.lo) + opaque(a.lo) - q * opaque(b.lo)) / b.hi;
    fast_two_sum(q, r)
}

/// The square root of `a >= 0`.
#[cube]
pub fn sqrt(a: Dd) -> Dd {
    // Opaque, or NIR folds `sqrt(a) * sqrt(a)` back to `a` and the residual to zero.
    let s = opaque(f64::sqrt(a.hi));
    let safe = select(s > 0.0, s, 1.0);
    let p = two_prod(s, s);
    let r = ((opaque(a.hi - p.hi) - p.lo) + opaque(a.lo)) / (safe + safe);
    let out = fast_two_sum(s, r);
    Dd {
        hi: select(s > 0.0, out.hi, s),
        lo: select(s > 0.0, out.lo, 0.0),
    }
}
