//! The math functions of the float kernels, one entry per function for every float type.
//!
//! f64 goes to our software functions ([`double`]): SPIR-V has no f64 `exp`, `log`, `sin`,
//! ..., and using them on CUDA too gives the same f64 results on every device. Narrower types
//! use the device's own functions (f16 and bf16 kernels compute in f32). The branch is taken
//! when the kernel is expanded ([`is_f64`]), so a kernel carries only one of the two.
use cubecl::prelude::*;

use crate::unary::nan_unless;

pub mod dd;
pub mod double;

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
        F::exp(x)
    }
}

#[cube]
pub fn ln<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::ln(f64::cast_from(x)))
    } else {
        F::ln(x)
    }
}

#[cube]
pub fn log1p<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::log1p(f64::cast_from(x)))
    } else {
        F::log1p(x)
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
        F::sinh(x)
    }
}

#[cube]
pub fn cosh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::cosh(f64::cast_from(x)))
    } else {
        F::cosh(x)
    }
}

#[cube]
pub fn tanh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::tanh(f64::cast_from(x)))
    } else {
        F::tanh(x)
    }
}

#[cube]
pub fn atan<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atan(f64::cast_from(x)))
    } else {
        // Some drivers' atan turns NaN into 0.
        nan_unless::<F>(x == x, F::atan(x))
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
        let one = F::new(1.0);
        nan_unless::<F>(F::abs(x) <= one, F::atan2(x, F::sqrt(one - x * x)))
    }
}

#[cube]
pub fn acos<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::acos(f64::cast_from(x)))
    } else {
        let one = F::new(1.0);
        nan_unless::<F>(F::abs(x) <= one, F::atan2(F::sqrt(one - x * x), x))
    }
}

#[cube]
pub fn asinh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::asinh(f64::cast_from(x)))
    } else {
        // sign(x) * ln(|x| + sqrt(x^2 + 1)), overflow-free for large |x|.
        let (zero, one) = (F::new(0.0), F::new(1.0));
        let a = F::abs(x);
        let big = a > F::new(1e4);
        let safe = select(big, one, a);
        let small = F::log1p(safe + safe * safe / (one + F::sqrt(safe * safe + one)));
        let large = F::ln(a) + F::new(core::f32::consts::LN_2);
        let r = select(big, large, small);
        select(x < zero, zero - r, r)
    }
}

#[cube]
pub fn acosh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::acosh(f64::cast_from(x)))
    } else {
        // ln(x + sqrt(x^2 - 1)) written so that x^2 can't overflow.
        let one = F::new(1.0);
        F::ln(x) + F::ln(one + F::sqrt((one - one / x) * (one + one / x)))
    }
}

#[cube]
pub fn atanh<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atanh(f64::cast_from(x)))
    } else {
        F::atanh(x)
    }
}

#[cube]
pub fn erf<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::erf(f64::cast_from(x)))
    } else {
        F::erf(x)
    }
}

#[cube]
pub fn erfc<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::erfc(f64::cast_from(x)))
    } else {
        F::new(1.0) - F::erf(x)
    }
}
