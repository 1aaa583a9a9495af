//! The math functions of the float kernels, one entry per function for every float type.
//!
//! f64 goes to our software functions ([`double`]): SPIR-V has no f64 `exp`, `log`, `sin`,
//! ..., and using them on CUDA too gives the same f64 results on every device. f32 (and f16
//! and bf16, which compute in f32) goes to our f32 functions ([`single`]) for `exp`, `expm1`,
//! `ln`, `log1p`, the hyperbolic functions and their inverses, `asin`, `acos`, `atan`, `erf`,
//! `erfc` and `sigmoid`: Vulkan's built-ins are loosely bounded and lavapipe's lose digits
//! near zero; ours are within 4 ULP everywhere. `sin`, `cos`, `tan`, `atan2` and `pow` stay the
//! device's. The branch is taken when the kernel is expanded ([`is_f64`]), so a kernel
//! carries only one of the two.
use cubecl::prelude::*;

use crate::unary::nan_unless;

pub mod dd;
pub mod double;
pub mod single;

/// Whether `F` is f64, decided when the kernel is expanded: the `if` on it keeps one branch
/// (a comparison of `F::type_size()` would be an instruction, and both branches would be
/// compiled into every kernel).
#[cube]
pub fn is_f64<F: Float>() -> comptime_type!(bool) {
    intrinsic!(|scope| { F::as_type(scope).storage_type() == f64::as_type(scope).storage_type() })
}

#[cube]
pub fn exp<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::exp(f64::cast_from(x)))
    } else {
        F::cast_from(single::exp(f32::cast_from(x)))
    }
}

#[cube]
pub fn ln<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::ln(f64::cast_from(x)))
    } else {
        F::cast_from(single::ln(f32::cast_from(x)))
    }
}

#[cube]
pub fn log1p<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::log1p(f64::cast_from(x)))
    } else {
        F::cast_from(single::log1p(f32::cast_from(x)))
    }
}

/// `x^y` for `x >= 0` (NaN for `x < 0`; see [`crate::unary::pow`] for negative bases).
#[cube]
pub fn powf<F: Float>(x: F, y: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::powf(f64::cast_from(x), f64::cast_from(y)))
    } else {
        F::powf(x, y)
    }
}

/// `sin x` and `cos x` at once.
#[derive(CubeType, Clone, Copy)]
pub struct SinCos<F: Float> {
    pub sin: F,
    pub cos: F,
}

/// `sin x` and `cos x` from one argument reduction (f64).
#[allow(unused_assignments)]
#[cube]
pub fn sin_cos<F: Float>(x: F) -> SinCos<F> {
    let mut sin = F::new(0.0);
    let mut cos = F::new(0.0);
    if is_f64::<F>() {
        let v = f64::cast_from(x);
        let finite = f64::abs(v) < double::infinity();
        let sc = double::sin_cos(select(finite, v, 0.0));
        let nan = double::nan();
        sin = F::cast_from(select(finite, dd::to_f64(sc.sin), nan));
        cos = F::cast_from(select(finite, dd::to_f64(sc.cos), nan));
    } else {
        sin = F::sin(x);
        cos = F::cos(x);
    }
    SinCos::<F> { sin, cos }
}

#[cube]
pub fn sin<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::sin(f64::cast_from(x)))
    } else {
        F::sin(x)
    }
}

#[cube]
pub fn cos<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::cos(f64::cast_from(x)))
    } else {
        F::cos(x)
    }
}

#[cube]
pub fn tan<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::tan(f64::cast_from(x)))
    } else {
        F::tan(x)
    }
}

#[cube]
pub fn sinh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::sinh(f64::cast_from(x)))
    } else {
        F::cast_from(single::sinh(f32::cast_from(x)))
    }
}

#[cube]
pub fn cosh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::cosh(f64::cast_from(x)))
    } else {
        F::cast_from(single::cosh(f32::cast_from(x)))
    }
}

#[cube]
pub fn tanh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::tanh(f64::cast_from(x)))
    } else {
        F::cast_from(single::tanh(f32::cast_from(x)))
    }
}

#[cube]
pub fn atan<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atan(f64::cast_from(x)))
    } else {
        F::cast_from(single::atan(f32::cast_from(x)))
    }
}

#[cube]
pub fn atan2<F: Float>(y: F, x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atan2(f64::cast_from(y), f64::cast_from(x)))
    } else {
        // Vulkan leaves atan2(±0, x) undefined (lavapipe gives 3π/4 for (0, 0)): ±0 for
        // x = +0 or x > 0, ±π for x = -0 or x < 0, as C's atan2.
        let zero = F::new(0.0);
        let pi = F::new(core::f32::consts::PI);
        let x_negative = x < zero || (x == zero && F::new(1.0) / x < zero);
        let y_negative = F::new(1.0) / y < zero;
        let on_axis = select(x_negative, select(y_negative, zero - pi, pi), y);
        nan_unless::<F>(x == x && y == y, select(y == zero, on_axis, F::atan2(y, x)))
    }
}

#[cube]
pub fn asin<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::asin(f64::cast_from(x)))
    } else {
        F::cast_from(single::asin(f32::cast_from(x)))
    }
}

#[cube]
pub fn acos<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::acos(f64::cast_from(x)))
    } else {
        F::cast_from(single::acos(f32::cast_from(x)))
    }
}

#[cube]
pub fn asinh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::asinh(f64::cast_from(x)))
    } else {
        F::cast_from(single::asinh(f32::cast_from(x)))
    }
}

#[cube]
pub fn acosh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::acosh(f64::cast_from(x)))
    } else {
        F::cast_from(single::acosh(f32::cast_from(x)))
    }
}

#[cube]
pub fn atanh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atanh(f64::cast_from(x)))
    } else {
        F::cast_from(single::atanh(f32::cast_from(x)))
    }
}

#[cube]
pub fn erf<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::erf(f64::cast_from(x)))
    } else {
        F::cast_from(single::erf(f32::cast_from(x)))
    }
}

#[cube]
pub fn erfc<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::erfc(f64::cast_from(x)))
    } else {
        F::cast_from(single::erfc(f32::cast_from(x)))
    }
}

#[cube]
pub fn expm1<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::expm1(f64::cast_from(x)))
    } else {
        F::cast_from(single::expm1(f32::cast_from(x)))
    }
}

/// `1 / (1 + e^-x)`, with the quotient corrected in f32 (a device's division may be 2.5 ULP
/// off).
#[cube]
pub fn sigmoid<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        let v = f64::cast_from(x);
        let e = double::exp(0.0f64 - f64::abs(v));
        F::cast_from(select(v < 0.0f64, e, 1.0f64) / (1.0f64 + e))
    } else {
        // e^x / (1 + e^x) below 0 (e^-x would overflow past -88.7), 1 / (1 + e^-x) above
        let v = f32::cast_from(x);
        let e = single::exp(0.0f32 - f32::abs(v));
        let s = single::quotient(select(v < 0.0f32, e, 1.0f32), 1.0f32 + e);
        F::cast_from(select(v == v, s, v))
    }
}
