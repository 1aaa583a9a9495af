//! The kernels' software f32 math (`ex_cubecl_kernels::math::single`) against the host's f64
//! libm, argument by argument, in units of the last place of the f32 result: every function
//! within 4 ULP of the exact value over its whole domain (subnormal arguments, the
//! neighbourhood of zero and the overflow edges included), the IEEE special values exactly.
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
