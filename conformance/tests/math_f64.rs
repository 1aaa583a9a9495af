//! The kernels' software f64 math (`ex_cubecl_kernels::math::double`) against the host's
//! libm (glibc on Linux), argument by argument: within glibc's own documented error (ours
//! are within about half an ulp; glibc's hyperbolic functions are off by up to two), the IEEE
//! special values exactly, and the share of bit-identical results printed per function.
//!
//! Runs where the device computes in f64 (lavapipe, CUDA); elsewhere it checks nothing.
use burn_backend::ops::*;
use burn_backend::{Backend, DType, TensorData};
use ex_cubecl_conformance::*;

type Unary = fn(
    <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive,
) -> <Ex as burn_backend::BackendTypes>::FloatTensorPrimitive;

/// Distance in units of the last place between two f64 values of the same sign.
fn ulps(a: f64, b: f64) -> u64 {
    if a == b || (a.is_nan() && b.is_nan()) {
        return 0;
    }
    if a.is_nan() || b.is_nan() || (a < 0.0) != (b < 0.0) || a.is_infinite() || b.is_infinite() {
        return u64::MAX;
    }
    let (x, y) = (a.abs().to_bits(), b.abs().to_bits());
    x.max(y) - x.min(y)
}

/// `n` arguments spread over `[lo, hi]`, log-uniform over each sign when `log` is set.
fn arguments(rng: &mut Rng, n: usize, lo: f64, hi: f64, log: bool) -> Vec<f64> {
    (0..n)
        .map(|_| {
            let u = rng.float(0.0, 1.0);
            if log {
                let sign = if rng.next_u64() & 1 == 1 { -1.0 } else { 1.0 };
                let (a, b) = (lo.abs().max(1e-300).ln(), hi.abs().ln());
                let v = (a + u * (b - a)).exp();
                if lo < 0.0 { sign * v } else { v }
            } else {
                lo + u * (hi - lo)
            }
        })
        .collect()
}

fn run_unary(op: Unary, xs: &[f64]) -> Vec<f64> {
    let data = TensorData::new(xs.to_vec(), [xs.len()]);
    rf::<Ex>(op(f::<Ex>(&data)))
        .to_vec::<f64>()
        .expect("f64 values")
}

/// glibc's own largest known error for `name` in ulps (its manual's table for x86_64), at
/// least one: ours are within about half an ulp, so results may differ by that much.
fn glibc_max_ulps(name: &str) -> u64 {
    match name {
        "sinh" | "cosh" | "tanh" | "asinh" | "acosh" | "atanh" => 2,
        // The reference is itself a Newton root of glibc's erf or erfc.
        "erf_inv" => 2,
        _ => 1,
    }
}

/// The share of results that must equal glibc's bit for bit where glibc's function is
/// correctly rounded (its exp, log, sin, cos, tan and inverse trigonometric functions are):
/// ours round correctly for all but a fraction of a percent of arguments.
fn min_identical(name: &str) -> f64 {
    match name {
        "exp" | "log" | "sin" | "cos" | "tan" | "asin" | "acos" | "atan" => 0.99,
        _ => 0.0,
    }
}

/// Special values every function must get exactly as the reference does.
const SPECIALS: [f64; 6] = [
    0.0,
    -0.0,
    f64::INFINITY,
    f64::NEG_INFINITY,
    f64::NAN,
    1e-310,
];

/// glibc's functions where Rust's std has its own (its `asinh`, `acosh` and `atanh` are
/// short formulas, off by up to hundreds of ulp near their edges) or none.
mod libc_math {
    unsafe extern "C" {
        pub fn erf(x: f64) -> f64;
        pub fn asinh(x: f64) -> f64;
        pub fn acosh(x: f64) -> f64;
        pub fn atanh(x: f64) -> f64;
    }
}

#[allow(clippy::type_complexity)]
fn functions() -> Vec<(&'static str, Unary, fn(f64) -> f64, Vec<(f64, f64, bool)>)> {
    vec![
        (
            "exp",
            Ex::float_exp,
            f64::exp,
            vec![
                (-745.0, 709.7, false),
                (-1.0, 1.0, false),
                (1e-300, 1.0, true),
            ],
        ),
        (
            "expm1",
            Ex::float_expm1,
            f64::exp_m1,
            vec![(-40.0, 709.7, false), (-1.0, 1.0, false), (1e-300, 1.0, true)],
        ),
        (
            "log",
            Ex::float_log,
            f64::ln,
            vec![(1e-307, 1e308, true), (0.5, 2.0, false)],
        ),
        (
            "log1p",
            Ex::float_log1p,
            f64::ln_1p,
            vec![(-0.999, 1e6, false), (-1e-3, 1e-3, true)],
        ),
        (
            "sin",
            Ex::float_sin,
            f64::sin,
            vec![(-10.0, 10.0, false), (1e-300, 1e15, true)],
        ),
        (
            "cos",
            Ex::float_cos,
            f64::cos,
            vec![(-10.0, 10.0, false), (1e-300, 1e15, true)],
        ),
        (
            "tan",
            Ex::float_tan,
            f64::tan,
            vec![(-1.5, 1.5, false), (1e-300, 1e6, true)],
        ),
        (
            "sinh",
            Ex::float_sinh,
            f64::sinh,
            vec![
                (-710.0, 710.0, false),
                (-2.0, 2.0, false),
                (1e-300, 1.0, true),
            ],
        ),
        (
            "cosh",
            Ex::float_cosh,
            f64::cosh,
            vec![(-710.0, 710.0, false), (-2.0, 2.0, false)],
        ),
        (
            "tanh",
            Ex::float_tanh,
            f64::tanh,
            vec![(-25.0, 25.0, false), (1e-300, 1.0, true)],
        ),
        (
            "asin",
            Ex::float_asin,
            f64::asin,
            vec![(-1.0, 1.0, false), (1e-300, 1.0, true)],
        ),
        ("acos", Ex::float_acos, f64::acos, vec![(-1.0, 1.0, false)]),
        (
            "atan",
            Ex::float_atan,
            f64::atan,
            vec![(-4.0, 4.0, false), (1e-300, 1e300, true)],
        ),
        (
            "asinh",
            Ex::float_asinh,
            |x| unsafe { libc_math::asinh(x) },
            vec![(-4.0, 4.0, false), (1e-300, 1e300, true)],
        ),
        (
            "acosh",
            Ex::float_acosh,
            |x| unsafe { libc_math::acosh(x) },
            vec![(1.0, 4.0, false), (1.0, 1e300, true)],
        ),
        (
            "atanh",
            Ex::float_atanh,
            |x| unsafe { libc_math::atanh(x) },
            vec![(-1.0, 1.0, false), (1e-300, 1.0, true)],
        ),
        (
            "erf",
            Ex::float_erf,
            |x| unsafe { libc_math::erf(x) },
            vec![(-7.0, 7.0, false), (1e-300, 30.0, true)],
        ),
        ("rsqrt", Ex::float_rsqrt, |x| 1.0 / x.sqrt(), vec![(1e-300, 1e300, true), (0.0, 4.0, false)]),
        ("cbrt", Ex::float_cbrt, f64::cbrt, vec![(-1e300, 1e300, true), (-8.0, 8.0, false)]),
        (
            "erf_inv",
            Ex::float_erf_inv,
            reference::erf_inv,
            vec![(-1.0, 1.0, false), (1e-300, 1.0, true), (0.999, 1.0, false)],
        ),
    ]
}

#[test]
fn f64_math_matches_libm() {
    let mut suite = Suite::new("f64 math");
    if !Ex::supports_dtype(&dev::<Ex>(), DType::F64) {
        println!("f64 math: the device has no f64 arithmetic; nothing checked");
        return suite.finish();
    }
    for (name, op, reference, ranges) in functions() {
        let mut rng = Rng::new(name.len() as u64 * 104_729);
        let mut xs: Vec<f64> = SPECIALS.to_vec();
        for (lo, hi, log) in ranges {
            xs.extend(arguments(&mut rng, 4000, lo, hi, log));
        }
        xs.extend([1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e300, -1e300]);
        let ours = run_unary(op, &xs);
        let (mut same, mut worst, mut bad) = (0usize, (0u64, 0.0f64), Vec::new());
        for (k, (&x, &y)) in xs.iter().zip(&ours).enumerate() {
            let want = reference(x);
            // Subnormal results may be flushed to zero by the device.
            let flushed = want.abs() < f64::MIN_POSITIVE && y == 0.0;
            let d = if flushed { 0 } else { ulps(y, want) };
            let periodic = matches!(name, "sin" | "cos" | "tan");
            if periodic && x.is_finite() && x.abs() >= 4503599627370496.0 {
                // Past 2^52 the reduction is plain f64 (see math::double::sin_cos): bounded only.
                if !(y.is_finite() && (name == "tan" || y.abs() <= 1.0)) {
                    bad.push(format!("{name}({x:e}) = {y:e}, not finite or out of range"));
                }
                continue;
            }
            same += (d == 0) as usize;
            if d > worst.0 {
                worst = (d, x);
            }
            let allowed = if k < SPECIALS.len() {
                0
            } else {
                glibc_max_ulps(name)
            };
            if d > allowed {
                bad.push(format!("{name}({x:e}) = {y:e}, libm {want:e} ({d} ulp)"));
            }
        }
        let n = bad.len();
        bad.truncate(8);
        suite.record(
            format!("{name} f64 at {} arguments", xs.len()),
            if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} beyond one ulp: {}", bad.join("; ")))
            },
        );
        let share = same as f64 / xs.len() as f64;
        suite.record(
            format!("{name} f64 rounds as glibc does"),
            if share >= min_identical(name) {
                Ok(())
            } else {
                Err(format!(
                    "{same} of {} equal glibc's, below {}",
                    xs.len(),
                    min_identical(name)
                ))
            },
        );
        println!(
            "f64 math: {name}: {same} of {} results equal libm's bit for bit, worst {} ulp at {:e}",
            xs.len(),
            worst.0,
            worst.1
        );
    }
    suite.finish();
}

#[test]
fn f64_pow_and_atan2_match_libm() {
    let mut suite = Suite::new("f64 pow and atan2");
    if !Ex::supports_dtype(&dev::<Ex>(), DType::F64) {
        return suite.finish();
    }
    let mut rng = Rng::new(31);
    let specials = [
        0.0,
        -0.0,
        1.0,
        -1.0,
        2.0,
        -2.0,
        0.5,
        3.0,
        -3.0,
        f64::INFINITY,
        f64::NEG_INFINITY,
        f64::NAN,
    ];
    let mut pairs: Vec<(f64, f64)> = specials
        .iter()
        .flat_map(|&a| specials.iter().map(move |&b| (a, b)))
        .collect();
    let n_special = pairs.len();
    for _ in 0..4000 {
        pairs.push((rng.float(0.0, 10.0), rng.float(-30.0, 30.0)));
        pairs.push(((rng.float(-700.0, 700.0)).exp(), rng.float(-1.0, 1.0)));
    }
    let a = TensorData::new(pairs.iter().map(|p| p.0).collect::<Vec<_>>(), [pairs.len()]);
    let b = TensorData::new(pairs.iter().map(|p| p.1).collect::<Vec<_>>(), [pairs.len()]);
    let pow = rf::<Ex>(Ex::float_powf(f::<Ex>(&a), f::<Ex>(&b)))
        .to_vec::<f64>()
        .unwrap();
    let atan2 = rf::<Ex>(Ex::float_atan2(f::<Ex>(&a), f::<Ex>(&b)))
        .to_vec::<f64>()
        .unwrap();
    for (name, ours, reference) in [
        ("pow", &pow, f64::powf as fn(f64, f64) -> f64),
        ("atan2", &atan2, f64::atan2),
    ] {
        let mut bad = Vec::new();
        for (k, &(x, y)) in pairs.iter().enumerate() {
            let special =
                k < n_special && !(x.is_finite() && y.is_finite() && x != 0.0 && y != 0.0);
            let want = reference(x, y);
            let flushed = want.abs() < f64::MIN_POSITIVE && ours[k] == 0.0;
            let d = if flushed { 0 } else { ulps(ours[k], want) };
            if d > if special { 0 } else { 1 } {
                bad.push(format!(
                    "{name}({x:e}, {y:e}) = {:e}, libm {want:e} ({d} ulp)",
                    ours[k]
                ));
            }
        }
        let n = bad.len();
        bad.truncate(8);
        suite.record(
            format!("{name} f64 at {} argument pairs", pairs.len()),
            if n == 0 {
                Ok(())
            } else {
                Err(format!("{n} beyond one ulp: {}", bad.join("; ")))
            },
        );
    }
    suite.finish();
}
