//! Random tensors (seeded determinism, distribution moments), dtype support, bad input
//! (clear panics naming the op, shapes and dtypes) and a gradient through `Autodiff`.
use burn_backend::ops::*;
use burn_backend::{Backend, BoolStore, DType, Distribution, FloatDType, IntDType, Shape, TensorData};
use ex_cubecl_conformance::*;

fn moments(data: &TensorData) -> (f64, f64) {
    let v = values(data);
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var)
}

#[test]
fn random_is_seeded_and_has_the_right_moments() {
    let mut suite = Suite::new("random");
    let device = dev::<Ex>();
    let shape = Shape::from(vec![64, 128]);
    for dtype in float_dtypes() {
        for dist in [Distribution::Default, Distribution::Uniform(-2.0, 3.0), Distribution::Normal(1.5, 0.5), Distribution::Bernoulli(0.3)] {
            Ex::seed(&device, 7);
            let a = rf::<Ex>(Ex::float_random(shape.clone(), dist, &device, dtype.into()));
            let b = rf::<Ex>(Ex::float_random(shape.clone(), dist, &device, dtype.into()));
            Ex::seed(&device, 7);
            let a2 = rf::<Ex>(Ex::float_random(shape.clone(), dist, &device, dtype.into()));
            suite.record(format!("{dist:?} {dtype:?} repeats after seed"), compare(&a, &a2, Tol::EXACT));
            suite.record(format!("{dist:?} {dtype:?} differs between calls"), if values(&a) != values(&b) { Ok(()) } else { Err("two calls gave the same tensor".into()) });
            let (mean, var) = moments(&a);
            let (m, v, lo, hi) = match dist {
                Distribution::Default => (0.5, 1.0 / 12.0, 0.0, 1.0),
                Distribution::Uniform(l, h) => ((l + h) / 2.0, (h - l).powi(2) / 12.0, l, h),
                Distribution::Normal(mu, s) => (mu, s * s, f64::NEG_INFINITY, f64::INFINITY),
                Distribution::Bernoulli(p) => (p, p * (1.0 - p), 0.0, 1.0),
            };
            let in_range = values(&a).iter().all(|&x| x >= lo && x <= hi);
            let ok = (mean - m).abs() < 0.05 * v.sqrt().max(0.2) * 4.0 && (var - v).abs() < 0.1 * v + 1e-3 && in_range;
            suite.record(format!("{dist:?} {dtype:?} moments mean={mean:.4} var={var:.4}"), if ok { Ok(()) } else { Err(format!("expected mean {m} var {v} in [{lo}, {hi}]")) });
        }
    }
    Ex::seed(&device, 9);
    let ints = ri::<Ex>(Ex::int_random(shape.clone(), Distribution::Uniform(0.0, 10.0), &device, IntDType::I32));
    let v = values(&ints);
    let ok = v.iter().all(|&x| (0.0..10.0).contains(&x) && x.fract() == 0.0) && (0..10).all(|k| v.contains(&(k as f64)));
    suite.record("int_random uniform [0, 10) covers every value", if ok { Ok(()) } else { Err("bad int samples".into()) });
    suite.finish();
}

#[test]
fn dtype_usage_is_honest() {
    let mut suite = Suite::new("dtypes");
    let device = dev::<Ex>();
    // Every dtype the backend advertises really computes.
    for dtype in [DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64, DType::I32, DType::I16, DType::I8, DType::U32, DType::U16, DType::U8, DType::Bool(BoolStore::U8), DType::Bool(BoolStore::U32)] {
        if !Ex::supports_dtype(&device, dtype) {
            println!("dtypes: {dtype:?} is not supported on this device");
            continue;
        }
        let base = TensorData::new(vec![1i64, 0, 3, 2], [4]);
        let result = catch(|| {
            if dtype.is_float() {
                let x = f::<Ex>(&base.clone().convert_dtype(dtype));
                rf::<Ex>(Ex::float_add(x.clone(), x))
            } else if dtype.is_bool() {
                let x = Ex::int_greater_elem(i::<Ex>(&base), 0.into(), dtype.into());
                rb::<Ex>(Ex::bool_not(x))
            } else {
                let x = i::<Ex>(&base.clone().convert_dtype(dtype));
                ri::<Ex>(Ex::int_add(x.clone(), x))
            }
        });
        let expected = if dtype.is_bool() { TensorData::new(vec![false, true, false, false], [4]) } else { TensorData::new(vec![2i64, 0, 6, 4], [4]) };
        suite.check(format!("{dtype:?} computes"), Tol::EXACT, (result, expected));
    }
    suite.record("f32 and i32 are always supported", if Ex::supports_dtype(&device, DType::F32) && Ex::supports_dtype(&device, DType::I32) { Ok(()) } else { Err("missing".into()) });
    suite.finish();
}

#[test]
fn bad_input_panics_with_clear_messages() {
    let mut suite = Suite::new("errors");
    let a = TensorData::new(vec![1.0f32; 6], [2, 3]);
    let b = TensorData::new(vec![1.0f32; 8], [2, 4]);
    let idx = TensorData::new(vec![0i64, 1], [2]);
    let cases: Vec<(&str, &str, Result<TensorData, String>)> = vec![
        ("add of unbroadcastable shapes", "cannot broadcast shapes [2, 3]", catch(|| rf::<Ex>(Ex::float_add(f::<Ex>(&a), f::<Ex>(&b))))),
        ("matmul of mismatched shapes", "cannot multiply shapes [2, 3] and [2, 4]", catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))))),
        ("sum_dim out of range", "dimension 5 is out of range for shape [2, 3]", catch(|| rf::<Ex>(Ex::float_sum_dim(f::<Ex>(&a), 5)))),
        ("reshape to another size", "cannot reshape [2, 3]", catch(|| rf::<Ex>(Ex::float_reshape(f::<Ex>(&a), Shape::from(vec![4, 2]))))),
        ("expand to an incompatible shape", "cannot expand [2, 3] to [4, 3]", catch(|| rf::<Ex>(Ex::float_expand(f::<Ex>(&a), Shape::from(vec![4, 3]))))),
        ("gather with wrong-rank indices", "don't fit tensor of shape [2, 3]", catch(|| rf::<Ex>(Ex::float_gather(1, f::<Ex>(&a), i::<Ex>(&idx))))),
        ("slice_assign with a wrong value shape", "doesn't fit the region", catch(|| rf::<Ex>(Ex::float_slice_assign(f::<Ex>(&a), &[burn_backend::Slice::new(0, Some(1), 1)], f::<Ex>(&a))))),
        ("binary op with mixed dtypes", "dtypes differ", catch(|| rf::<Ex>(Ex::float_add(f::<Ex>(&a), Ex::float_cast(f::<Ex>(&a), FloatDType::F16))))),
        ("from_data with a wrong byte count", "bytes for shape", catch(|| rf::<Ex>(Ex::float_from_data(TensorData::from_bytes_vec(vec![0u8; 10], [2, 3], DType::F32), &dev::<Ex>())))),
        ("module op not implemented yet", "conv2d", catch(|| rf::<Ex>(Ex::conv2d(f::<Ex>(&a), f::<Ex>(&a), None, burn_backend::ops::ConvOptions::new([1, 1], [0, 0], [1, 1], 1))))),
    ];
    for (name, needle, result) in cases {
        suite.check_panics(name, needle, result);
    }
    // The device still works after every failure above.
    let r = on_both!(|B| rf::<B>(B::float_add(f::<B>(&a), f::<B>(&a))));
    suite.check("device usable after errors", Tol::EXACT, r);
    suite.finish();
}

#[test]
fn autodiff_gradients_match_ndarray() {
    use burn_autodiff::Autodiff;
    use burn_tensor::Tensor;
    let mut suite = Suite::new("autodiff");
    let mut rng = Rng::new(5);
    let x = float_data(&mut rng, &[4, 3], DType::F32, -1.0, 1.0);
    let w = float_data(&mut rng, &[3, 2], DType::F32, -1.0, 1.0);
    macro_rules! grads {
        ($B:ty) => {{
            let device = Default::default();
            let x = Tensor::<Autodiff<$B>, 2>::from_data(x.clone(), &device).require_grad();
            let w = Tensor::<Autodiff<$B>, 2>::from_data(w.clone(), &device).require_grad();
            let h = x.clone().matmul(w.clone()).tanh();
            let y = burn_tensor::activation::softmax(h.clone() * h, 1).log().sum();
            let g = y.backward();
            (x.grad(&g).unwrap().into_data(), w.grad(&g).unwrap().into_data())
        }};
    }
    let (ours_x, ours_w) = grads!(Ex);
    let (ref_x, ref_w) = grads!(Ref);
    suite.check("grad x of log-softmax(tanh(xw)^2)", Tol::of(1e-4), (Ok(ours_x), ref_x));
    suite.check("grad w of log-softmax(tanh(xw)^2)", Tol::of(1e-4), (Ok(ours_w), ref_w));
    suite.finish();
}
