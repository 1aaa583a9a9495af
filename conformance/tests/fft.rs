//! `rfft` / `irfft` along every dimension, compared with a direct DFT computed in f64 on the
//! host. burn-ndarray 0.21 has no FFT (its `rfft` / `irfft` are `todo!()`), so the reference
//! here is the contract of Burn's `ModuleOps::rfft` / `irfft` with numpy's conventions:
//! unnormalised forward transform, 1/N inverse, inputs truncated or zero-padded to `n`, and the
//! imaginary parts of the DC and Nyquist bins ignored by `irfft`.
use std::f64::consts::PI;

use burn_backend::ops::ModuleOps;
use burn_backend::{DType, TensorData};
use ex_cubecl_conformance::*;

/// `x` truncated or zero-padded to `n`, then its `n/2 + 1` DFT bins `(re, im)`.
fn dft(x: &[f64], n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut re: Vec<f64> = (0..n).map(|t| x.get(t).copied().unwrap_or(0.0)).collect();
    let mut im = vec![0.0; n];
    fft(&mut re, &mut im, false);
    re.truncate(n / 2 + 1);
    im.truncate(n / 2 + 1);
    (re, im)
}

/// The real signal of `n` samples whose half spectrum is `(re, im)` truncated or zero-padded
/// to `n/2 + 1` bins, with the imaginary parts of the DC and Nyquist bins ignored.
fn idft(re: &[f64], im: &[f64], n: usize) -> Vec<f64> {
    let bin = |k: usize| if k < re.len() { (re[k], im[k]) } else { (0.0, 0.0) };
    // The full Hermitian spectrum: X[n - k] = conj(X[k]), real DC and Nyquist bins.
    let (mut xr, mut xi) = (vec![0.0; n], vec![0.0; n]);
    for k in 0..=n / 2 {
        let (r, i) = bin(k);
        let i = if k == 0 || 2 * k == n { 0.0 } else { i };
        (xr[k], xi[k]) = (r, i);
        (xr[(n - k) % n], xi[(n - k) % n]) = (r, -i);
    }
    fft(&mut xr, &mut xi, true);
    xr.iter().map(|v| v / n as f64).collect()
}

/// The complex DFT (`inverse`: with e^{+i}, unscaled) of `(re, im)` in place, by iterative
/// radix-2 steps in f64 (every length the transforms take is a power of two): a reference
/// within about log2(n) f64 roundings, where the direct sum took most of this test's time.
fn fft(re: &mut [f64], im: &mut [f64], inverse: bool) {
    let n = re.len();
    assert!(n.is_power_of_two(), "reference FFT of length {n}");
    let bits = n.trailing_zeros();
    for i in 0..n {
        let j = if bits == 0 { 0 } else { i.reverse_bits() >> (usize::BITS - bits) };
        if i < j {
            re.swap(i, j);
            im.swap(i, j);
        }
    }
    let (cos, sin) = table(n);
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut half = 1;
    while half < n {
        let step = n / (2 * half);
        for start in (0..n).step_by(2 * half) {
            for k in 0..half {
                let (wr, wi) = (cos[k * step], sign * sin[k * step]);
                let (a, b) = (start + k, start + k + half);
                let (tr, ti) = (re[b] * wr - im[b] * wi, re[b] * wi + im[b] * wr);
                (re[b], im[b]) = (re[a] - tr, im[a] - ti);
                (re[a], im[a]) = (re[a] + tr, im[a] + ti);
            }
        }
        half *= 2;
    }
}

/// cos and sin of 2πj/n for j in 0..n.
fn table(n: usize) -> (Vec<f64>, Vec<f64>) {
    let angle = |j: usize| 2.0 * PI * j as f64 / n as f64;
    ((0..n).map(|j| angle(j).cos()).collect(), (0..n).map(|j| angle(j).sin()).collect())
}

/// The lines of `v` (shape `shape`) along `dim`, outer dimensions first.
fn lines(v: &[f64], shape: &[usize], dim: usize) -> Vec<Vec<f64>> {
    let (outer, len, inner) = split(shape, dim);
    let mut out = Vec::new();
    for o in 0..outer {
        for i in 0..inner {
            out.push((0..len).map(|t| v[(o * len + t) * inner + i]).collect());
        }
    }
    out
}

/// The inverse of [`lines`]: lines of `len` values along `dim` into row-major data of `shape`
/// with `shape[dim] = len`.
fn assemble(lines: &[Vec<f64>], shape: &[usize], dim: usize, len: usize) -> TensorData {
    let mut shape = shape.to_vec();
    shape[dim] = len;
    let (outer, _, inner) = split(&shape, dim);
    let mut v = vec![0.0; shape.iter().product()];
    for o in 0..outer {
        for i in 0..inner {
            for t in 0..len {
                v[(o * len + t) * inner + i] = lines[o * inner + i][t];
            }
        }
    }
    TensorData::new(v, shape)
}

fn split(shape: &[usize], dim: usize) -> (usize, usize, usize) {
    (shape[..dim].iter().product(), shape[dim], shape[dim + 1..].iter().product())
}

/// The reference rfft of `x` (read back as values of `shape`).
fn reference_rfft(x: &[f64], shape: &[usize], dim: usize, n: usize) -> (TensorData, TensorData) {
    let (re, im): (Vec<_>, Vec<_>) = lines(x, shape, dim).iter().map(|l| dft(l, n)).unzip();
    (assemble(&re, shape, dim, n / 2 + 1), assemble(&im, shape, dim, n / 2 + 1))
}

/// The reference irfft of `(re, im)` of `shape`.
fn reference_irfft(re: &[f64], im: &[f64], shape: &[usize], dim: usize, n: usize) -> TensorData {
    let out: Vec<_> = lines(re, shape, dim).iter().zip(lines(im, shape, dim)).map(|(r, i)| idft(r, &i, n)).collect();
    assemble(&out, shape, dim, n)
}

/// Tolerance for a transform of length `n` whose reference is `reference`: rounding grows
/// with log2(n) stages and with the outputs' magnitude (their RMS).
fn tol(reference: &TensorData, n: usize, dtype: DType) -> Tol {
    let v = values(reference);
    let rms = (v.iter().map(|x| x * x).sum::<f64>() / v.len().max(1) as f64).sqrt();
    let stages = 1.0 + (n as f64).log2();
    let eps = match dtype {
        DType::F16 => 1e-3,
        DType::BF16 => 8e-3,
        _ => 1e-6,
    };
    Tol { abs: eps * stages * rms.max(1e-3), rel: eps }
}

/// Uploads `data` to our backend and applies `view`.
fn upload(data: &TensorData, view: View) -> <Ex as burn_backend::backend::BackendTypes>::FloatTensorPrimitive {
    float_view::<Ex>(f::<Ex>(data), view)
}

/// The shape to upload so that `view` of it has shape `shape`.
fn upload_shape(shape: &[usize], view: View) -> Vec<usize> {
    let mut s = shape.to_vec();
    let last = s.len() - 1;
    match view {
        View::Transposed => s.swap(0, last),
        View::Stepped => s[last] *= 2,
        _ => {}
    }
    s
}

/// rfft on our backend: `(re, im)` read back, or the panic message.
fn ours_rfft(a: &TensorData, view: View, dim: usize, n: Option<usize>) -> Result<(TensorData, TensorData), String> {
    catch(|| {
        let (re, im) = Ex::rfft(upload(a, view), dim, n);
        (rf::<Ex>(re), rf::<Ex>(im))
    })
}

/// Checks rfft of `a` seen through `view` against the reference.
fn check_rfft(suite: &mut Suite, a: &TensorData, view: View, dim: usize, n: Option<usize>, case: &str) {
    let dtype = a.dtype;
    let x = rf::<Ex>(upload(a, view));
    let shape = x.shape.clone();
    let len = n.unwrap_or(shape[dim]);
    let (re, im) = reference_rfft(&values(&x), &shape, dim, len);
    let ours = ours_rfft(a, view, dim, n);
    let name = format!("rfft({dim}, n={n:?}) shape={shape:?} {dtype:?} {view:?} {case}");
    suite.check(format!("{name} re"), tol(&re, len, dtype), (ours.clone().map(|o| o.0), re));
    suite.check(format!("{name} im"), tol(&im, len, dtype), (ours.map(|o| o.1), im));
}

/// Checks irfft of the half spectrum `(re, im)` (each seen through its view) against the
/// reference.
fn check_irfft(suite: &mut Suite, re: &TensorData, im: &TensorData, views: [View; 2], dim: usize, n: Option<usize>, case: &str) {
    let dtype = re.dtype;
    let (r, i) = (rf::<Ex>(upload(re, views[0])), rf::<Ex>(upload(im, views[1])));
    let shape = r.shape.clone();
    let len = n.unwrap_or(2 * (shape[dim] - 1));
    let reference = reference_irfft(&values(&r), &values(&i), &shape, dim, len);
    let ours = catch(|| rf::<Ex>(Ex::irfft(upload(re, views[0]), upload(im, views[1]), dim, n)));
    let name = format!("irfft({dim}, n={n:?}) shape={shape:?} {dtype:?} views={views:?} {case}");
    suite.check(name, tol(&reference, len, dtype), (ours, reference));
}

fn fft_dtypes() -> Vec<DType> {
    float_dtypes()
}

/// Short lengths: every one for f32 and the half types; for f64 (where the device computes
/// it), whose kernels carry software sine and cosine and take lavapipe seconds to compile
/// each, a spread of them.
fn short_lengths(dtype: DType) -> &'static [usize] {
    if dtype == DType::F64 { &[1, 2, 8, 64] } else { &[1, 2, 4, 8, 16, 64, 256] }
}

/// Long lengths: the one-cube-per-line path up to 4096 samples, multi-pass beyond.
fn long_lengths(dtype: DType) -> &'static [usize] {
    if dtype == DType::F64 { &[4096, 16384] } else { &[512, 1024, 2048, 4096, 8192, 16384] }
}

#[test]
fn rfft_matches_dft() {
    let mut suite = Suite::new("rfft");
    for dtype in fft_dtypes() {
        let seed = 11;
        let mut rng = Rng::new(seed);
        let case = format!("seed={seed}");
        // Every rank and dimension, short lengths, every view.
        for rank in 1..=4 {
            for dim in 0..rank {
                for &len in short_lengths(dtype) {
                    let mut shape = rng.shape(rank, 3);
                    shape[dim] = len;
                    let views: &[View] = if len <= 16 { &VIEWS } else { &[View::Contiguous, View::Transposed] };
                    for &view in views {
                        let a = float_data(&mut rng, &upload_shape(&shape, view), dtype, -1.0, 1.0);
                        check_rfft(&mut suite, &a, view, dim, None, &case);
                    }
                }
            }
        }
        // Long lines: the one-cube-per-line path up to 4096 samples, multi-pass beyond.
        for &len in long_lengths(dtype) {
            let a = float_data(&mut rng, &[2, len], dtype, -1.0, 1.0);
            check_rfft(&mut suite, &a, View::Contiguous, 1, None, &case);
            let a = float_data(&mut rng, &[len, 2], dtype, -1.0, 1.0);
            check_rfft(&mut suite, &a, View::Transposed, 1, None, &case);
            check_rfft(&mut suite, &a, View::Contiguous, 0, None, &case);
        }
        // `n` shorter (truncation) and longer (zero padding) than the signal.
        for (len, n) in [(8, 1), (8, 2), (8, 4), (8, 16), (8, 64), (5, 8), (6, 4), (3, 1), (1, 4), (4096, 8192), (8192, 4096), (300, 16384)] {
            for dim in 0..2 {
                let mut shape = vec![3, 2];
                shape[dim] = len;
                let a = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
                check_rfft(&mut suite, &a, View::Contiguous, dim, Some(n), &case);
                if len <= 8 {
                    check_rfft(&mut suite, &a, View::Reversed, dim, Some(n), &case);
                }
            }
        }
        // Many lines at once.
        let a = float_data(&mut rng, &[300, 2, 8], dtype, -1.0, 1.0);
        check_rfft(&mut suite, &a, View::Contiguous, 2, None, &case);
        check_rfft(&mut suite, &a, View::Transposed, 0, None, &case);
    }
    // Burn's own example: a sine wave puts its energy in the imaginary part of bins 1 and 2.
    let sine = TensorData::new(vec![0.0f32, 1.2071, 1.0, 0.2071, 0.0, -0.2071, -1.0, -1.2071], [1, 8]);
    let ours = ours_rfft(&sine, View::Contiguous, 1, None);
    let expected = TensorData::new(vec![0.0f32, -4.0, -2.0, 0.0, 0.0], [1, 5]);
    suite.check("rfft sine wave im", Tol::of(1e-3), (ours.map(|o| o.1), expected));
    suite.finish();
}

#[test]
fn irfft_matches_dft() {
    let mut suite = Suite::new("irfft");
    for dtype in fft_dtypes() {
        let seed = 23;
        let mut rng = Rng::new(seed);
        let case = format!("seed={seed}");
        // Random spectra (non-zero imaginary DC and Nyquist parts, which irfft ignores).
        for rank in 1..=4 {
            for dim in 0..rank {
                for &n in short_lengths(dtype).iter().filter(|&&n| n >= 2) {
                    let mut shape = rng.shape(rank, 3);
                    shape[dim] = n / 2 + 1;
                    let re = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
                    let im = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
                    check_irfft(&mut suite, &re, &im, [View::Contiguous; 2], dim, None, &case);
                    if n <= 16 {
                        for view in [View::Transposed, View::Stepped, View::Reversed, View::Expanded] {
                            let viewed = float_data(&mut rng, &upload_shape(&shape, view), dtype, -1.0, 1.0);
                            check_irfft(&mut suite, &viewed, &im, [view, View::Contiguous], dim, None, &case);
                            check_irfft(&mut suite, &re, &viewed, [View::Contiguous, view], dim, None, &case);
                        }
                    }
                }
            }
        }
        for &n in long_lengths(dtype) {
            let bins = n / 2 + 1;
            let re = float_data(&mut rng, &[2, bins], dtype, -1.0, 1.0);
            let im = float_data(&mut rng, &[2, bins], dtype, -1.0, 1.0);
            check_irfft(&mut suite, &re, &im, [View::Contiguous; 2], 1, None, &case);
            let re = float_data(&mut rng, &[2, bins], dtype, -1.0, 1.0);
            let im = float_data(&mut rng, &[bins, 2], dtype, -1.0, 1.0);
            check_irfft(&mut suite, &re, &im, [View::Transposed, View::Contiguous], 0, None, &case);
        }
        // `n` asking for fewer bins than given (truncation) or more (zero padding), and n = 1.
        for (bins, n) in [(5, 1), (5, 2), (5, 4), (5, 16), (5, 64), (3, 8), (1, 1), (1, 8), (2, 2), (1025, 4096), (2049, 8192), (4097, 4096), (100, 16384)] {
            for dim in 0..2 {
                let mut shape = vec![2, 3];
                shape[dim] = bins;
                let re = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
                let im = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
                check_irfft(&mut suite, &re, &im, [View::Contiguous; 2], dim, Some(n), &case);
            }
        }
    }
    suite.finish();
}

#[test]
fn rfft_then_irfft_gives_the_signal_back() {
    let mut suite = Suite::new("rfft round trip");
    for dtype in fft_dtypes() {
        let seed = 31;
        let mut rng = Rng::new(seed);
        for (shape, dim) in [(vec![1], 0), (vec![2], 0), (vec![3, 16], 1), (vec![16, 3], 0), (vec![2, 4, 32, 2], 2), (vec![2, 1024], 1), (vec![1, 8192], 1), (vec![16384], 0)] {
            let a = float_data(&mut rng, &shape, dtype, -1.0, 1.0);
            let n = shape[dim];
            let ours = catch(|| {
                let (re, im) = Ex::rfft(f::<Ex>(&a), dim, None);
                rf::<Ex>(Ex::irfft(re, im, dim, Some(n)))
            });
            let tol = tol(&a, n, dtype);
            suite.check(format!("irfft(rfft(x)) dim={dim} shape={shape:?} {dtype:?} seed={seed}"), tol, (ours, a));
        }
    }
    suite.finish();
}

#[test]
fn fft_of_empty_batches() {
    let mut suite = Suite::new("fft empty");
    for dtype in fft_dtypes() {
        let empty = |shape: &[usize]| TensorData::new(Vec::<f32>::new(), shape.to_vec()).convert_dtype(dtype);
        for (shape, dim, n, out) in [
            (vec![0, 8], 1, None, vec![0, 5]),
            (vec![3, 0, 4], 2, None, vec![3, 0, 3]),
            (vec![0], 0, Some(4), vec![3]),
            (vec![3, 0], 1, Some(4), vec![3, 3]),
        ] {
            let a = empty(&shape);
            let expected = TensorData::new(vec![0.0f32; out.iter().product()], out.clone());
            let ours = ours_rfft(&a, View::Contiguous, dim, n);
            let name = format!("rfft({dim}, n={n:?}) shape={shape:?} {dtype:?}");
            suite.check(format!("{name} re"), Tol::EXACT, (ours.clone().map(|o| o.0), expected.clone()));
            suite.check(format!("{name} im"), Tol::EXACT, (ours.map(|o| o.1), expected));
        }
        for (shape, dim, n, out) in [(vec![2, 0, 5], 2, None, vec![2, 0, 8]), (vec![0, 3], 0, Some(8), vec![8, 3]), (vec![4, 0], 1, Some(2), vec![4, 2])] {
            let a = empty(&shape);
            let expected = TensorData::new(vec![0.0f32; out.iter().product()], out.clone());
            let ours = catch(|| rf::<Ex>(Ex::irfft(f::<Ex>(&a), f::<Ex>(&a), dim, n)));
            suite.check(format!("irfft({dim}, n={n:?}) shape={shape:?} {dtype:?}"), Tol::EXACT, (ours, expected));
        }
    }
    suite.finish();
}

#[test]
fn fft_rejects_bad_input() {
    let mut suite = Suite::new("fft errors");
    let data = |shape: &[usize]| TensorData::new(vec![1.0f32; shape.iter().product()], shape.to_vec());
    let rfft = |shape: &[usize], dim: usize, n: Option<usize>| catch(|| rf::<Ex>(Ex::rfft(f::<Ex>(&data(shape)), dim, n).0));
    let irfft = |re: &[usize], im: &[usize], dim: usize, n: Option<usize>| {
        catch(|| rf::<Ex>(Ex::irfft(f::<Ex>(&data(re)), f::<Ex>(&data(im)), dim, n)))
    };
    let cases = [
        ("rfft of 6 samples", "ex_cubecl: rfft: signal length = 6 is not a power of two (shape [2, 6], dim 1, F32)", rfft(&[2, 6], 1, None)),
        ("rfft of 0 samples", "ex_cubecl: rfft: signal length = 0 is not a power of two (shape [2, 0], dim 1, F32)", rfft(&[2, 0], 1, None)),
        ("rfft n = 5", "ex_cubecl: rfft: n = 5 is not a power of two (shape [4], dim 0, F32)", rfft(&[4], 0, Some(5))),
        ("rfft n = 0", "ex_cubecl: rfft: n = 0 is not a power of two", rfft(&[4], 0, Some(0))),
        ("rfft dim 2 of rank 2", "ex_cubecl: rfft: dimension 2 is out of range for shape [2, 4] (F32)", rfft(&[2, 4], 2, None)),
        ("irfft of 4 bins", "ex_cubecl: irfft: output length 2 (bins - 1) = 6 is not a power of two (shape [4, 2], dim 0, F32)", irfft(&[4, 2], &[4, 2], 0, None)),
        ("irfft of 1 bin", "ex_cubecl: irfft: output length 2 (bins - 1) = 0 is not a power of two (shape [1], dim 0, F32)", irfft(&[1], &[1], 0, None)),
        ("irfft n = 3", "ex_cubecl: irfft: n = 3 is not a power of two (shape [5], dim 0, F32)", irfft(&[5], &[5], 0, Some(3))),
        ("irfft dim 1 of rank 1", "ex_cubecl: irfft: dimension 1 is out of range for shape [5] (F32)", irfft(&[5], &[5], 1, None)),
        ("irfft shapes differ", "ex_cubecl: irfft: the real part has shape [5] and the imaginary part [3] (F32)", irfft(&[5], &[3], 0, None)),
    ];
    for (name, needle, result) in cases {
        suite.check_panics(name, needle, result);
    }
    let ints = TensorData::new(vec![1i32, 2, 3, 4], [4]);
    let result = catch(|| rf::<Ex>(Ex::rfft(i::<Ex>(&ints), 0, None).0));
    suite.check_panics("rfft of an int tensor", "ex_cubecl: rfft: expected a float tensor, got I32 with shape [4]", result);
    suite.finish();
}
