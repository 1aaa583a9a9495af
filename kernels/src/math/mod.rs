//! The math functions of the float kernels, one entry per function for every float type.
//!
//! f64 goes to our software functions ([`double`]): SPIR-V has no f64 `exp`, `log`, `sin`,
//! ..., and using them on CUDA too gives the same f64 results on every device. f32 (and f16
//! and bf16, which compute in f32) goes to the device's own functions where they are accurate
//! ([`device_math`](fn@device_math): CUDA's, within 4 ULP by NVIDIA's bounds and by our measure), and to our
//! f32 functions ([`single`]) everywhere else: Vulkan's built-ins are loosely bounded,
//! lavapipe's lose digits near zero and its `sin` is wrong past 10^5; ours are within 4 ULP
//! over each whole domain. `expm1`, `erfc`, `cbrt` and `erf_inv`, which cubecl lacks, are
//! ours on every device. The branches are
//! taken when the kernel is expanded ([`is_f64`](fn@is_f64), [`device_math`](fn@device_math)), so a kernel carries only
//! one of them.
use cubecl::prelude::*;


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

/// Whether the device's own f32 functions are within 4 ULP over their domains, decided when
/// the kernel is expanded: CUDA's are (its programming guide bounds each, 1 to 4 ULP, and
/// `math_f32.rs` measures them on an H100). cubecl's CUDA runtime is recognised by
/// `copy_async`, which it alone reports (on sm_80 and later); Vulkan, Metal and older GPUs
/// get our [`single`] functions.
#[cube]
pub fn device_math() -> comptime_type!(bool) {
    intrinsic!(|scope| { accurate_math(scope) })
}

/// Whether the device a kernel is expanded for reports `copy_async` (see [`device_math`]).
fn accurate_math(scope: &cubecl::ir::Scope) -> bool {
    scope.properties.as_deref().is_some_and(|p| p.features.copy_async)
}

/// An f32 function for every float type: our f64 one for f64; for f32, f16 and bf16 (in f32)
/// the device's built-in where [`device_math`] holds, else ours.
macro_rules! float_function {
    ($name:ident, $builtin:ident) => {
        // `f32::erf` is also an unstable std method; cubecl's trait method is meant.
        #[allow(unstable_name_collisions)]
        #[cube]
        pub fn $name<F: Float>(x: F) -> F {
            if is_f64::<F>() {
                F::cast_from(double::$name(f64::cast_from(x)))
            } else {
                if device_math() {
                    F::cast_from(f32::$builtin(f32::cast_from(x)))
                } else {
                    F::cast_from(single::$name(f32::cast_from(x)))
                }
            }
        }
    };
    ($name:ident) => {
        #[cube]
        pub fn $name<F: Float>(x: F) -> F {
            if is_f64::<F>() {
                F::cast_from(double::$name(f64::cast_from(x)))
            } else {
                F::cast_from(single::$name(f32::cast_from(x)))
            }
        }
    };
}

float_function!(exp, exp);
float_function!(ln, ln);
float_function!(log1p, log1p);
float_function!(sin, sin);
float_function!(cos, cos);
float_function!(tan, tan);
float_function!(sinh, sinh);
float_function!(cosh, cosh);
float_function!(tanh, tanh);
float_function!(asin, asin);
float_function!(acos, acos);
float_function!(atan, atan);
float_function!(asinh, asinh);
float_function!(acosh, acosh);
float_function!(atanh, atanh);
float_function!(erf, erf);
float_function!(erfc);
float_function!(expm1);
float_function!(cbrt);
float_function!(erf_inv);

/// The largest `|y|` for which [`crate::unary::pow`](fn@crate::unary::pow) multiplies out an integer exponent (a
/// CPU's `pow` is exact where the product is: `1.5^2` is 2.25, `x^2` is `x * x` rounded once):
/// 127 in f64; 4 in f32, within 2 ULP that way (the roundings of repeated squaring add up past
/// it, where [`powf`](fn@powf) stays within 1.4).
#[cube]
pub fn squaring_limit<F: Float>() -> F {
    if is_f64::<F>() {
        F::new(127.0)
    } else {
        F::new(4.0)
    }
}

/// `x^y` for `x >= 0` (NaN for `x < 0`; see [`crate::unary::pow`](fn@crate::unary::pow) for negative bases and C's
/// special cases): ours in f64; in f32 CUDA's where [`device_math`](fn@device_math) holds (within 4 ULP),
/// else ours (`single::powf`, from f32 arithmetic alone: Vulkan's is `exp2(y log2 x)`, 38 ULP
/// off on lavapipe even for results within [2^-8, 2^8]).
#[cube]
pub fn powf<F: Float>(x: F, y: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::powf(f64::cast_from(x), f64::cast_from(y)))
    } else {
        if device_math() {
            F::cast_from(f32::powf(f32::cast_from(x), f32::cast_from(y)))
        } else {
            F::cast_from(single::powf(f32::cast_from(x), f32::cast_from(y)))
        }
    }
}

/// `sin x` for `|x| <= 10` by the device's own f32 `sin` (ours in f64), which is within 2 ULP
/// there on lavapipe too: for the kernels' own weights (Lanczos), without compiling the full-range
/// reduction of [`sin`](fn@sin) into each tap.
#[cube]
pub fn sin_bounded<F: Float>(x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::sin(f64::cast_from(x)))
    } else {
        F::cast_from(f32::sin(f32::cast_from(x)))
    }
}

/// `sin x` and `cos x` at once.
#[derive(CubeType, Clone, Copy)]
pub struct SinCos<F: Float> {
    pub sin: F,
    pub cos: F,
}

/// `sin x` and `cos x` from one argument reduction.
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
        let v = f32::cast_from(x);
        if device_math() {
            sin = F::cast_from(f32::sin(v));
            cos = F::cast_from(f32::cos(v));
        } else {
            let sc = single::sin_cos(v);
            sin = F::cast_from(sc.sin);
            cos = F::cast_from(sc.cos);
        }
    }
    SinCos::<F> { sin, cos }
}

#[allow(unstable_name_collisions)]
#[cube]
pub fn atan2<F: Float>(y: F, x: F) -> F {
    if is_f64::<F>() {
        F::cast_from(double::atan2(f64::cast_from(y), f64::cast_from(x)))
    } else {
        if device_math() {
            F::cast_from(f32::atan2(f32::cast_from(y), f32::cast_from(x)))
        } else {
            F::cast_from(single::atan2(f32::cast_from(y), f32::cast_from(x)))
        }
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
        let e = exp::<f32>(0.0f32 - f32::abs(v));
        let s = single::quotient(select(v < 0.0f32, e, 1.0f32), 1.0f32 + e);
        F::cast_from(select(v == v, s, v))
    }
}
