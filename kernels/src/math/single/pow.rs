//! `x^y` in f32 from f32 arithmetic alone, for devices whose own `pow` is loose (Vulkan's is
//! `exp2(y log2 x)`: 38 ULP off on lavapipe for moderate results, 10^3 for large ones).
//!
//! `2^(y log2 x)` with every error that the result's exponent would magnify carried along:
//! `log2 x` as two f32 (about 44 bits: the mantissa reduced by a table of 16 inverses with 12
//! significant bits, so that `m c - 1` is exact, then `ln(1 + r)` for `|r| <= 0.04`), the
//! product `y log2 x` as two f32 (Dekker's exact product from 12-bit halves: lavapipe's
//! `fma` is not fused), and `2^z` from its integer part and `e^(f ln 2)` with the low part
//! joined to the reduced argument. Within 2 ULP of the correctly rounded result.
use cubecl::prelude::*;

use super::exp_log::expm1_reduced;
use super::*;

const LOG2E_HI: f32 = 1.4426950216293335;
const LOG2E_LO: f32 = 1.925963033500011e-08;
const LN2_HI: f32 = 0.6931471824645996;
const LN2_LO: f32 = -1.9046542121259336e-09;

/// `a + b` as `hi + lo` exactly, for `|a| >= |b|`.
#[cube]
fn fast_two_sum(a: f32, b: f32) -> Pair {
    let s = opaque(a + b);
    Pair { hi: s, lo: b - opaque(s - a) }
}

/// `a + b` as `hi + lo` exactly.
#[cube]
fn two_sum(a: f32, b: f32) -> Pair {
    let s = opaque(a + b);
    let bb = opaque(s - a);
    Pair { hi: s, lo: (a - opaque(s - bb)) + (b - bb) }
}

/// `a b` as `hi + lo` exactly (Dekker: the products of 12-bit halves are exact).
#[cube]
fn two_prod(a: f32, b: f32) -> Pair {
    let p = opaque(a * b);
    let ah = truncated(a);
    let bh = truncated(b);
    let al = a - ah;
    let bl = b - bh;
    Pair { hi: p, lo: ((opaque(ah * bh - p) + ah * bl) + al * bh) + al * bl }
}

/// Row `j` of the reduction table: `c`, about the inverse of the centre of the `j`-th of 16
/// parts of `[sqrt(1/2), sqrt(2))` with 12 significant bits (1 for the part that holds 1, so
/// that `log2 x` keeps its full relative precision near 1), and `log2 c` as `hi + lo`.
#[derive(CubeType, Clone, Copy)]
struct Row {
    c: f32,
    log2_hi: f32,
    log2_lo: f32,
}

#[cube]
fn row(j: u32) -> Row {
    let mut c = 0.0f32;
    c = select(j == 0u32, 1.3837890625f32, c);
    let mut hi = 0.0f32;
    hi = select(j == 0u32, 0.4686240553855896f32, hi);
    let mut lo = 0.0f32;
    lo = select(j == 0u32, -1.2467570975616127e-08f32, lo);
    c = select(j == 1u32, 1.326171875f32, c);
    hi = select(j == 1u32, 0.4072677791118622f32, hi);
    lo = select(j == 1u32, -1.4867130637696846e-08f32, lo);
    c = select(j == 2u32, 1.2734375f32, c);
    hi = select(j == 2u32, 0.34872815012931824f32, hi);
    lo = select(j == 2u32, 4.101759376595737e-09f32, lo);
    c = select(j == 3u32, 1.224609375f32, c);
    hi = select(j == 3u32, 0.2923216223716736f32, hi);
    lo = select(j == 3u32, 1.0430365016134147e-08f32, lo);
    c = select(j == 4u32, 1.1796875f32, c);
    hi = select(j == 4u32, 0.23840473592281342f32, hi);
    lo = select(j == 4u32, 3.4022655803767066e-09f32, lo);
    c = select(j == 5u32, 1.1376953125f32, c);
    hi = select(j == 5u32, 0.18611423671245575f32, hi);
    lo = select(j == 5u32, 2.8291868847674095e-09f32, lo);
    c = select(j == 6u32, 1.0986328125f32, c);
    hi = select(j == 6u32, 0.13570928573608398f32, hi);
    lo = select(j == 6u32, 3.683154337075223e-10f32, lo);
    c = select(j == 7u32, 1.06201171875f32, c);
    hi = select(j == 7u32, 0.08679968863725662f32, hi);
    lo = select(j == 7u32, -3.0138036510862776e-09f32, lo);
    c = select(j == 8u32, 1.02783203125f32, c);
    hi = select(j == 8u32, 0.03960451856255531f32, hi);
    lo = select(j == 8u32, -6.0879690177984e-10f32, lo);
    c = select(j == 9u32, 1.0f32, c);
    hi = select(j == 9u32, 0.0f32, hi);
    lo = select(j == 9u32, 0.0f32, lo);
    c = select(j == 10u32, 0.93408203125f32, c);
    hi = select(j == 10u32, -0.09837884455919266f32, hi);
    lo = select(j == 10u32, 2.90530510760334e-09f32, lo);
    c = select(j == 11u32, 0.882568359375f32, c);
    hi = select(j == 11u32, -0.18022006750106812f32, hi);
    lo = select(j == 11u32, -6.604517488462136e-10f32, lo);
    c = select(j == 12u32, 0.83642578125f32, c);
    hi = select(j == 12u32, -0.25769057869911194f32, hi);
    lo = select(j == 12u32, 1.4783110735550054e-08f32, lo);
    c = select(j == 13u32, 0.794921875f32, c);
    hi = select(j == 13u32, -0.3311150074005127f32, hi);
    lo = select(j == 13u32, -8.333239875923937e-09f32, lo);
    c = select(j == 14u32, 0.75732421875f32, c);
    hi = select(j == 14u32, -0.40101704001426697f32, hi);
    lo = select(j == 14u32, 1.1050357962005819e-08f32, lo);
    c = select(j == 15u32, 0.72314453125f32, c);
    hi = select(j == 15u32, -0.467644065618515f32, hi);
    lo = select(j == 15u32, -9.092636865659642e-09f32, lo);
    Row { c, log2_hi: hi, log2_lo: lo }
}

/// `log2 x` for a positive finite `x` (subnormals included) as `hi + lo`.
#[cube]
fn log2_parts(x: f32) -> Pair {
    let tiny = x < 1.17549435e-38f32;
    let scaled = select(tiny, x * 33554432.0f32, x);
    // x = 2^k m, m in [sqrt(1/2), sqrt(2)); the top 4 bits of m's offset mantissa pick the row
    let bits = u32::reinterpret(scaled) + (0x3f80_0000u32 - 0x3f35_04f3u32);
    let k = i32::cast_from(bits >> 23u32) - 127 - select(tiny, 25i32, 0i32);
    let t = bits & 0x007f_ffffu32;
    let m = f32::reinterpret(t + 0x3f35_04f3u32);
    let row = row(t >> 19u32);
    // r = m c - 1 exactly: m = mh + ml (12 bits each), mh c - 1 exact (near 1)
    let mh = truncated(m);
    let r = two_sum(opaque(mh * row.c) - 1.0f32, (m - mh) * row.c);
    // ln(1 + r) = r - r²/2 + r³ Q(r), r² exact and its cross term kept
    let sq = two_prod(r.hi, r.hi);
    let half_lo = 0.5f32 * (sq.lo + 2.0f32 * r.hi * r.lo);
    // Q(r) = 1/3 - r/4 + r²/5 - r³/6 + r⁴/7 - r⁵/8
    let mut q = 0.125f32;
    q = 0.14285714285714285f32 - r.hi * q;
    q = 0.16666666666666666f32 - r.hi * q;
    q = 0.2f32 - r.hi * q;
    q = 0.25f32 - r.hi * q;
    q = 0.3333333333333333f32 - r.hi * q;
    let u = fast_two_sum(r.hi, 0.0f32 - 0.5f32 * sq.hi);
    let u = fast_two_sum(u.hi, u.lo + ((r.lo - half_lo) + r.hi * sq.hi * q));
    // log2(1 + r) = ln(1 + r) log2(e), then + k - log2 c
    let v = two_prod(u.hi, LOG2E_HI);
    let v_lo = v.lo + (u.hi * LOG2E_LO + u.lo * LOG2E_HI);
    let s = two_sum(f32::cast_from(k), 0.0f32 - row.log2_hi);
    let w = two_sum(s.hi, v.hi);
    fast_two_sum(w.hi, w.lo + ((s.lo - row.log2_lo) + v_lo))
}

/// `2^(hi + lo)` for `-152 <= hi <= 129` (past 128 it is ∞, below -150 it is 0).
#[cube]
fn exp2_parts(z: Pair) -> f32 {
    let n = f32::floor(z.hi + 0.5f32);
    let f = two_sum(z.hi - n, z.lo);
    // e^(f ln 2), |f ln 2| <= ln 2 / 2; the low part joins the reduced argument
    let p = two_prod(f.hi, LN2_HI);
    let p_lo = p.lo + (f.hi * LN2_LO + f.lo * LN2_HI);
    let e = expm1_reduced(p.hi) + p_lo * (1.0f32 + p.hi);
    ldexp(1.0f32 + e, i32::cast_from(n))
}

/// `x^y` for `x >= 0` (NaN for a negative or NaN `x`); `x = 1`, `y = 0`, an infinite or NaN
/// `y` and negative bases are `crate::unary::pow`'s.
#[cube]
pub fn powf(x: f32, y: f32) -> f32 {
    let finite = x > 0.0f32 && x < infinity();
    let l = log2_parts(select(finite, x, 1.0f32));
    let guess = y * l.hi;
    let in_range = guess > -152.0f32 && guess < 129.0f32;
    let yy = select(in_range, y, 0.0f32);
    let z = two_prod(yy, l.hi);
    let v = exp2_parts(Pair { hi: z.hi, lo: z.lo + yy * l.lo });
    let v = select(in_range, v, select(guess > 0.0f32, infinity(), 0.0f32));
    // 0^y and ∞^y: 0 or ∞ by the sign of y
    let edge = select((x == 0.0f32) == (y > 0.0f32), 0.0f32, infinity());
    select(finite, v, select(x == 0.0f32 || x == infinity(), edge, nan()))
}
