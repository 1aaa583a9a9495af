//! `atan`, `atan2`, `asin` and `acos` in f32.
use cubecl::prelude::*;

use super::*;

/// π/2 and π as f32 pairs (high part, rest).
const PI2_HI: f32 = 1.5707963705062866;
const PI2_LO: f32 = -4.371138828673793e-08;
const PI_HI: f32 = 3.1415927410125732;
const PI_LO: f32 = -8.742277657347586e-08;

/// `(atan t - t) / t³` as a polynomial in `z = t²`, for `|t| <= 0.4375`.
#[cube]
fn atan_poly(z: f32) -> f32 {
    let mut p = 0.04822302982211113f32;
    p = fma(p, z, -0.08532127737998962f32);
    p = fma(p, z, 0.11058227717876434f32);
    p = fma(p, z, -0.14283399283885956f32);
    p = fma(p, z, 0.1999996304512024f32);
    fma(p, z, -0.3333333432674408f32)
}

/// `(asin t - t) / t³` as a polynomial in `z = t²`, for `z <= 1/4`.
#[cube]
fn asin_poly(z: f32) -> f32 {
    let mut p = 0.03369084745645523f32;
    p = fma(p, z, 0.017149237915873528f32);
    p = fma(p, z, 0.031100662425160408f32);
    p = fma(p, z, 0.04459940269589424f32);
    p = fma(p, z, 0.07500094175338745f32);
    fma(p, z, 0.1666666567325592f32)
}

/// `atan x`: below 0.4375 the series; above, `atan c + atan t` with `c` one of 0.5, 1, 1.5,
/// ∞ and `t = (|x| - c)/(1 + c|x|)` within 0.4375.
#[cube]
pub fn atan(x: f32) -> f32 {
    let a = f32::abs(x);
    let r0 = a < 0.6875f32;
    let r1 = a < 1.1875f32;
    let r2 = a < 2.4375f32;
    let t = select(
        r0,
        quotient(2.0f32 * a - 1.0f32, 2.0f32 + a),
        select(r1, quotient(a - 1.0f32, a + 1.0f32), select(r2, quotient(a - 1.5f32, 1.0f32 + 1.5f32 * a), quotient(-1.0f32, select(a > 1.0e-30f32, a, 1.0e-30f32)))),
    );
    let hi = select(r0, 0.46364760398864746f32, select(r1, 0.7853981852531433f32, select(r2, 0.9827937483787537f32, PI2_HI)));
    let lo = select(r0, 5.01215868808913e-09f32, select(r1, -2.1855694143368964e-08f32, select(r2, -2.5131424052915463e-08f32, PI2_LO)));
    let z = t * t;
    let reduced = hi + (lo + (t + t * z * atan_poly(z)));
    let zz = a * a;
    let small = a + a * zz * atan_poly(zz);
    let y = select(a < 0.4375f32, small, select(a > 1.0e30f32, PI2_HI, reduced));
    select(is_nan(x), x, copysign(y, x))
}

/// `atan2(y, x)`: `atan` of the smaller magnitude over the larger (a corrected quotient within
/// [0, 1]), then reflected into its octant: `π/2 - a` where `|y| > |x|`, `π - a` where `x` is
/// negative (-0 included), and the sign of `y` last. Two zeros and two infinities give the
/// axes' and the diagonals' angles, as C's `atan2`.
#[cube]
pub fn atan2(y: f32, x: f32) -> f32 {
    let ax = f32::abs(x);
    let ay = f32::abs(y);
    let steep = ay > ax;
    let num = select(steep, ax, ay);
    let den = select(steep, ay, ax);
    let diagonal = ax == infinity() && ay == infinity();
    let t = select(diagonal, 1.0f32, select(den == 0.0f32, 0.0f32, quotient(num, den)));
    let a = atan(t);
    let a = select(steep, (PI2_HI - a) + PI2_LO, a);
    let a = select((u32::reinterpret(x) & SIGN) != 0u32, (PI_HI - a) + PI_LO, a);
    select(is_nan(x) || is_nan(y), x + y, copysign(a, y))
}

/// `asin sqrt z` for `z <= 1/4` as the sum `w + c + t`: the truncated root, its correction,
/// and the series' rest.
#[derive(CubeType, Clone, Copy)]
struct AsinRoot {
    w: f32,
    c: f32,
    t: f32,
}

#[cube]
fn asin_root(z: f32) -> AsinRoot {
    let root = sqrt_parts(z);
    let s = root.hi + root.lo;
    AsinRoot { w: root.hi, c: root.lo, t: s * z * asin_poly(z) }
}

#[cube]
pub fn asin(x: f32) -> f32 {
    let a = f32::abs(x);
    let zz = a * a;
    let small = a + a * zz * asin_poly(zz);
    // |x| >= 1/2: π/2 - 2 asin sqrt((1 - |x|)/2)
    let r = asin_root((1.0f32 - smaller(a, 1.0f32)) * 0.5f32);
    let large = (PI2_HI - 2.0f32 * r.w) + (PI2_LO - 2.0f32 * (r.c + r.t));
    let y = select(a < 0.5f32, small, select(a > 1.0f32, nan(), large));
    select(is_nan(x), x, copysign(y, x))
}

#[cube]
pub fn acos(x: f32) -> f32 {
    let a = f32::abs(x);
    let zz = x * x;
    // |x| < 1/2: π/2 - asin x
    let small = PI2_HI - (x + (x * zz * asin_poly(zz) - PI2_LO));
    // else 2 asin sqrt((1 - |x|)/2), or π minus it for x < 0
    let r = asin_root((1.0f32 - smaller(a, 1.0f32)) * 0.5f32);
    let positive = 2.0f32 * r.w + 2.0f32 * (r.c + r.t);
    let negative = (PI_HI - 2.0f32 * r.w) + (PI_LO - 2.0f32 * (r.c + r.t));
    let y = select(a < 0.5f32, small, select(x > 0.0f32, positive, negative));
    let y = select(a > 1.0f32, nan(), y);
    select(is_nan(x), x, y)
}
