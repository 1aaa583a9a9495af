//! The kernels' f32 math (ours, `ex_cubecl_kernels::math::single`, or CUDA's on CUDA) against
//! the host's f64 libm, argument by argument, in units of the last place of the f32 result:
//! every function within 4 ULP of the exact value over its whole domain (subnormal arguments,
//! the neighbourhood of zero and the overflow edges included), the IEEE special values exactly.
//! Prints the worst error per function on the device that runs it.
use burn_backend::ops::*;
use burn_backend::TensorData;
use ex_cubecl_conformance::*;

type Unary = fn(
    <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive,
) -> <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive;

/// The bound, in ULP of the f32 result.
const MAX_ULPS: f64 = 4.0;

/// The distance of `got` from the exact `want`, in units of the last place of `want` rounded
/// to f32 (at least the smallest subnormal's); NaN for NaN and infinite ones equal, else
/// infinite where they differ.
fn ulps(got: f32, want: f64) -> f64 {
    let w = want as f32;
    if (got.is_nan() && want.is_nan()) || (got.is_infinite() && got == w) {
        return 0.0;
    }
    if got.is_nan() || want.is_nan() || w.is_infinite() || got.is_infinite() {
        return f64::INFINITY;
    }
    let a = w.abs();
    let unit = (f32::from_bits(a.to_bits() + 1) - a).max(f32::from_bits(1)) as f64;
    (got as f64 - want).abs() / unit
}

/// glibc's functions where Rust's std has its own (short formulas, off near their edges) or
/// none.
mod libc_math {
    unsafe extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn erfc(x: f64) -> f64;
        pub fn asinh(x: f64) -> f64;
        pub fn acosh(x: f64) -> f64;
        pub fn atanh(x: f64) -> f64;
    }
}

/// `n` arguments over `[lo, hi]`: uniform, or log-uniform in magnitude over both signs.
fn arguments(rng: &mut Rng, n: usize, lo: f64, hi: f64, log: bool) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let u = rng.float(0.0, 1.0);
            if log {
                let sign = if lo < 0.0 && rng.next_u64() & 1 == 1 { -1.0 } else { 1.0 };
                let (a, b) = (lo.abs().max(1e-45).ln(), hi.abs().ln());
                (sign * (a + u * (b - a)).exp()) as f32
            } else {
                (lo + u * (hi - lo)) as f32
            }
        })
        .collect()
}

/// The f32s nearest to `k π/2` and their neighbours, for `k` log-uniform up to 2^40: where
/// the reduction of `sin`, `cos` and `tan` cancels most.
fn near_quadrants(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .flat_map(|_| {
            let k = rng.float(0.0, 40.0 * std::f64::consts::LN_2).exp().round();
            let x = (k * std::f64::consts::FRAC_PI_2) as f32;
            [x, f32::from_bits(x.to_bits() + 1), f32::from_bits(x.to_bits() - 1)]
        })
        .collect()
}

/// The IEEE special values, subnormals, and the neighbours of 0, ±1 and the overflow edges.
const SPECIALS: [f32; 16] = [
    0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, -1e-40, 1e-45, 1.0, -1.0, 0.99999994, -0.99999994, 1.0000001,
    88.72283, 88.72284, -103.97207,
];

#[allow(clippy::type_complexity)]
fn functions() -> Vec<(&'static str, Unary, fn(f64) -> f64, Vec<(f64, f64, bool)>)> {
    vec![
        ("exp", Ex::float_exp, f64::exp, vec![(-104.0, 89.0, false), (-1.0, 1.0, false), (-1e-30, 1.0, true)]),
        ("expm1", Ex::float_expm1, f64::exp_m1, vec![(-20.0, 89.0, false), (-1.0, 1.0, false), (-1e-30, 1.0, true)]),
        ("log", Ex::float_log, f64::ln, vec![(1e-45, 3e38, true), (0.5, 2.0, false)]),
        ("log1p", Ex::float_log1p, f64::ln_1p, vec![(-1.0, 1.0, false), (-1e-30, 1.0, true), (1e-30, 3e38, true)]),
        ("sinh", Ex::float_sinh, f64::sinh, vec![(-90.0, 90.0, false), (-2.0, 2.0, false), (-1e-30, 1.0, true)]),
        ("cosh", Ex::float_cosh, f64::cosh, vec![(-90.0, 90.0, false), (-2.0, 2.0, false)]),
        ("tanh", Ex::float_tanh, f64::tanh, vec![(-12.0, 12.0, false), (-1e-30, 1.0, true)]),
        ("asinh", Ex::float_asinh, |x| unsafe { libc_math::asinh(x) }, vec![(-5.0, 5.0, false), (-1e-30, 3e38, true)]),
        ("acosh", Ex::float_acosh, |x| unsafe { libc_math::acosh(x) }, vec![(1.0, 5.0, false), (1.0, 3e38, true), (1.0, 1.001, false)]),
        ("atanh", Ex::float_atanh, |x| unsafe { libc_math::atanh(x) }, vec![(-1.0, 1.0, false), (-1e-30, 1.0, true)]),
        ("asin", Ex::float_asin, f64::asin, vec![(-1.0, 1.0, false), (-1e-30, 1.0, true)]),
        ("acos", Ex::float_acos, f64::acos, vec![(-1.0, 1.0, false), (-1e-30, 1.0, true)]),
        ("atan", Ex::float_atan, f64::atan, vec![(-4.0, 4.0, false), (-1e-30, 3e38, true)]),
        ("erf", Ex::float_erf, |x| unsafe { libc_math::erf(x) }, vec![(-5.0, 5.0, false), (-1e-30, 12.0, true)]),
        ("erfc", Ex::float_erfc, |x| unsafe { libc_math::erfc(x) }, vec![(-5.0, 11.0, false), (-1e-30, 12.0, true)]),
        ("sigmoid", Ex::sigmoid, |x| 1.0 / (1.0 + (-x).exp()), vec![(-90.0, 90.0, false), (-1e-30, 100.0, true)]),
        ("sin", Ex::float_sin, f64::sin, vec![(-7.0, 7.0, false), (-2e5, 2e5, false), (-1e-30, 3e38, true)]),
        ("cos", Ex::float_cos, f64::cos, vec![(-7.0, 7.0, false), (-2e5, 2e5, false), (-1e-30, 3e38, true)]),
        ("tan", Ex::float_tan, f64::tan, vec![(-7.0, 7.0, false), (-2e5, 2e5, false), (-1e-30, 3e38, true)]),
        ("sqrt", Ex::float_sqrt, f64::sqrt, vec![(1e-45, 3e38, true), (0.0, 4.0, false)]),
        ("rsqrt", Ex::float_rsqrt, |x| 1.0 / x.sqrt(), vec![(1e-45, 3e38, true), (0.0, 4.0, false)]),
        ("cbrt", Ex::float_cbrt, f64::cbrt, vec![(-1e-45, 3e38, true), (-8.0, 8.0, false)]),
        ("erf_inv", Ex::float_erf_inv, reference::erf_inv, vec![(-1.0, 1.0, false), (-1e-30, 1.0, true), (0.999, 1.0, false)]),
    ]
}

#[test]
fn f32_math_within_4_ulp() {
    let mut rng = Rng::new(20_261_125);
    let mut failures = Vec::new();
    for (name, op, reference, ranges) in functions() {
        let mut xs: Vec<f32> = SPECIALS.to_vec();
        for (lo, hi, log) in ranges {
            xs.extend(arguments(&mut rng, 20_000, lo, hi, log));
        }
        if ["sin", "cos", "tan"].contains(&name) {
            xs.extend(near_quadrants(&mut rng, 5_000));
        }
        let data = TensorData::new(xs.clone(), [xs.len()]);
        let got = rf::<Ex>(op(f::<Ex>(&data))).to_vec::<f32>().expect("f32 values");
        let (mut worst, mut at) = (0.0f64, 0.0f32);
        for (&x, &y) in xs.iter().zip(&got) {
            let e = ulps(y, reference(x as f64));
            if !(e <= worst) {
                (worst, at) = (e, x);
            }
        }
        println!("f32 math: {name}: worst {worst:.2} ULP (at {at:e}), over {} arguments", xs.len());
        if !(worst <= MAX_ULPS) {
            let y = got[xs.iter().position(|&x| x.to_bits() == at.to_bits()).unwrap()];
            failures.push(format!("{name}({at:e}) = {y:e}, exact {:e}: {worst:.2} ULP", reference(at as f64)));
        }
    }
    assert!(failures.is_empty(), "beyond {MAX_ULPS} ULP:\n{}", failures.join("\n"));
}

type Binary = fn(
    <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive,
    <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive,
) -> <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive;

/// Argument pairs of `pow`: positive bases over the whole range with exponents that keep the
/// result finite or just past it, negative bases with integer exponents, and the special
/// cases of C's `pow`.
fn pow_arguments(rng: &mut Rng) -> Vec<(f32, f32)> {
    let mut pairs = Vec::new();
    for _ in 0..20_000 {
        let x = arguments(rng, 1, 1e-38, 3e38, true)[0].abs();
        let limit = 130.0 / (x as f64).ln().abs().max(1e-3);
        pairs.push((x, rng.float(-limit, limit) as f32));
        pairs.push((rng.float(0.0, 2.0) as f32, rng.float(-30.0, 30.0) as f32));
        pairs.push((-(rng.float(0.0, 40.0) as f32), rng.float(-20.0, 20.0).round() as f32));
        // near 1, where log2 x must keep its relative precision, with large exponents
        pairs.push(((1.0 + rng.float(-1e-3, 1e-3)) as f32, rng.float(-5e4, 5e4) as f32));
        // integer exponents of positive bases
        pairs.push((rng.float(0.0, 10.0) as f32, rng.float(-40.0, 40.0).round() as f32));
    }
    let specials = [0.0f32, -0.0, 1.0, -1.0, 0.5, 2.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40];
    for &x in &specials {
        for &y in &specials {
            pairs.push((x, y));
        }
    }
    pairs
}

/// Argument pairs of `atan2`: both log-uniform over both signs, and the axes.
fn atan2_arguments(rng: &mut Rng) -> Vec<(f32, f32)> {
    let mut pairs: Vec<(f32, f32)> = (0..40_000)
        .map(|_| (arguments(rng, 1, -1e-30, 3e38, true)[0], arguments(rng, 1, -1e-30, 3e38, true)[0]))
        .collect();
    let specials = [0.0f32, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40];
    for &y in &specials {
        for &x in &specials {
            pairs.push((y, x));
        }
    }
    pairs
}

#[allow(clippy::type_complexity)]
fn binary_functions() -> Vec<(&'static str, Binary, fn(f64, f64) -> f64, fn(&mut Rng) -> Vec<(f32, f32)>)> {
    vec![("pow", Ex::float_powf, f64::powf, pow_arguments), ("atan2", Ex::float_atan2, f64::atan2, atan2_arguments)]
}

#[test]
fn f32_binary_math_within_4_ulp() {
    let mut rng = Rng::new(20_261_125);
    let mut failures = Vec::new();
    for (name, op, reference, pairs) in binary_functions() {
        let pairs = pairs(&mut rng);
        let (xs, ys): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
        let a = f::<Ex>(&TensorData::new(xs.clone(), [xs.len()]));
        let b = f::<Ex>(&TensorData::new(ys.clone(), [ys.len()]));
        let got = rf::<Ex>(op(a, b)).to_vec::<f32>().expect("f32 values");
        let (mut worst, mut at) = (0.0f64, 0usize);
        for (i, (&x, &y)) in xs.iter().zip(&ys).enumerate() {
            let e = ulps(got[i], reference(x as f64, y as f64));
            if !(e <= worst) {
                (worst, at) = (e, i);
            }
        }
        let (x, y) = (xs[at], ys[at]);
        println!("f32 math: {name}: worst {worst:.2} ULP (at {x:e}, {y:e}), over {} pairs", xs.len());
        if !(worst <= MAX_ULPS) {
            let want = reference(x as f64, y as f64);
            failures.push(format!("{name}({x:e}, {y:e}) = {:e}, exact {want:e}: {worst:.2} ULP", got[at]));
        }
    }
    assert!(failures.is_empty(), "beyond {MAX_ULPS} ULP:\n{}", failures.join("\n"));
}
