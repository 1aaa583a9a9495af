//! Causes of failures that Burn's own backend suite (`burn-backend-tests` 0.21.0) found, each
//! checked here so that CI catches them without that suite: bools uploaded from every store,
//! NaN ordering in sort / argsort / topk, f16 reductions that must accumulate wider than f16,
//! f16 attention against an f32 reference, and f16 CTC loss gradients.
use burn_backend::ops::*;
use burn_backend::{AutodiffBackend, BoolStore, DType, IntDType, TensorData};
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;

/// Bool data laid out in `store` (one byte per element, or four for `U32`).
fn bools_in(values: &[bool], shape: &[usize], store: BoolStore) -> TensorData {
    let bytes: Vec<u8> = match store {
        BoolStore::U32 => values.iter().flat_map(|&b| (b as u32).to_ne_bytes()).collect(),
        _ => values.iter().map(|&b| b as u8).collect(),
    };
    TensorData::from_bytes_vec(bytes, shape.to_vec(), DType::Bool(store))
}

#[test]
fn bools_from_every_store_upload_and_read_back() {
    let mut suite = Suite::new("upstream bool stores");
    let mut rng = Rng::new(5);
    let stores = [BoolStore::Native, BoolStore::U8, BoolStore::U32];
    for shape in [vec![5], vec![3, 4], vec![2, 0, 3], vec![1]] {
        let n: usize = shape.iter().product();
        let mut values: Vec<bool> = (0..n).map(|_| rng.next_u64() & 1 == 1).collect();
        // The pattern Burn's suite caught: [T, F, T, T, F] read back as [T, F, F, F, F].
        if n == 5 {
            values = vec![true, false, true, true, false];
        }
        let expected = TensorData::new(values.clone(), shape.clone());
        for store in stores {
            let data = bools_in(&values, &shape, store);
            let up = |d: &TensorData| Ex::bool_from_data(d.clone(), &dev::<Ex>());
            let case = |op: &str| format!("bool_from_data store={store:?} then {op} shape={shape:?}");
            suite.check(case("read"), Tol::EXACT, (catch(|| rb::<Ex>(up(&data))), expected.clone()));
            let not = TensorData::new(values.iter().map(|b| !b).collect::<Vec<_>>(), shape.clone());
            suite.check(case("bool_not"), Tol::EXACT, (catch(|| rb::<Ex>(Ex::bool_not(up(&data)))), not));
            let ints = TensorData::new(values.iter().map(|&b| b as i32).collect::<Vec<_>>(), shape.clone());
            suite.check(case("into_int"), Tol::EXACT, (catch(|| ri::<Ex>(Ex::bool_into_int(up(&data), IntDType::I32))), ints));
            let any = TensorData::new(vec![values.iter().any(|&b| b)], [1]);
            suite.check(case("any"), Tol::EXACT, (catch(|| rb::<Ex>(Ex::bool_any(up(&data)))), any));
            // A float mask filled through the uploaded bools.
            let zeros = TensorData::new(vec![0f32; n], shape.clone());
            let filled = TensorData::new(values.iter().map(|&b| b as u8 as f32).collect::<Vec<_>>(), shape.clone());
            let r = catch(|| rf::<Ex>(Ex::float_mask_fill(f::<Ex>(&zeros), up(&data), 1.0f32.into())));
            suite.check(case("float_mask_fill"), Tol::EXACT, (r, filled));
        }
    }
    suite.finish();
}

/// `values` sorted stably by `f32::total_cmp` (NaN after +inf), with the source indices.
fn host_sort(values: &[f32], descending: bool) -> (Vec<f32>, Vec<i64>) {
    let mut idx: Vec<usize> = (0..values.len()).collect();
    idx.sort_by(|&a, &b| {
        let o = values[a].total_cmp(&values[b]);
        if descending { o.reverse() } else { o }
    });
    (idx.iter().map(|&i| values[i]).collect(), idx.iter().map(|&i| i as i64).collect())
}

#[test]
fn nan_orders_last_in_sort_argsort_and_first_in_topk() {
    let mut suite = Suite::new("upstream nan ordering");
    let nan = f32::NAN;
    let lines: Vec<Vec<f32>> = vec![
        vec![-0.5, nan, 0.94, -0.3, nan],
        vec![nan, 3.0, f32::INFINITY, 1.0, f32::NEG_INFINITY, 3.0, nan, 2.0],
        vec![nan, nan, nan],
        (0..37).map(|k| if k % 5 == 2 { nan } else { ((k * 7919) % 31) as f32 - 15.0 }).collect(),
    ];
    let floats: Vec<DType> = float_dtypes().into_iter().filter(|d| *d != DType::F64).collect();
    for dtype in floats {
        for line in &lines {
            let n = line.len();
            let data = TensorData::new(line.clone(), [1, n]).convert_dtype(dtype);
            let line: Vec<f32> = data.clone().convert::<f32>().to_vec().expect("values");
            for descending in [false, true] {
                let (values, indices) = host_sort(&line, descending);
                let case = |op: &str| format!("{op} descending={descending} {dtype:?} {line:?}");
                let r = catch(|| rf::<Ex>(Ex::float_sort(f::<Ex>(&data), 1, descending)));
                suite.check(case("float_sort"), Tol::EXACT, (r, TensorData::new(values.clone(), [1, n]).convert_dtype(dtype)));
                let r = catch(|| ri::<Ex>(Ex::float_argsort(f::<Ex>(&data), 1, descending, IntDType::I64)));
                suite.check(case("float_argsort"), Tol::EXACT, (r, TensorData::new(indices.clone(), [1, n])));
            }
            // topk takes the largest first: NaN, as the largest value, comes first.
            let k = n.min(3);
            let (values, indices) = host_sort(&line, true);
            let r = catch(|| rf::<Ex>(Ex::float_topk(f::<Ex>(&data), 1, k)));
            let expected = TensorData::new(values[..k].to_vec(), [1, k]).convert_dtype(dtype);
            suite.check(format!("float_topk k={k} {dtype:?} {line:?}"), Tol::EXACT, (r, expected));
            let r = catch(|| ri::<Ex>(Ex::float_argtopk(f::<Ex>(&data), 1, k, IntDType::I64)));
            suite.check(format!("float_argtopk k={k} {dtype:?} {line:?}"), Tol::EXACT, (r, TensorData::new(indices[..k].to_vec(), [1, k])));
        }
    }
    suite.finish();
}

#[test]
fn half_precision_reductions_accumulate_wider() {
    let mut suite = Suite::new("upstream f16 reductions");
    let halves: Vec<DType> = [DType::F16, DType::BF16].into_iter().filter(|d| float_dtypes().contains(d)).collect();
    for dtype in halves {
        // Sums far beyond f16::MAX (65504) whose means are small: 8192 x 100, on each path
        // (one unit per line, one cube per line, split lines).
        for shape in [vec![8192, 1], vec![4, 8192], vec![1, 8192], vec![8192]] {
            let n: usize = shape.iter().product();
            let data = TensorData::new(vec![100f32; n], shape.clone()).convert_dtype(dtype);
            let dim = shape.len() - 1 - usize::from(shape.len() == 2 && shape[1] == 1);
            let mut out_shape = shape.clone();
            out_shape[dim] = 1;
            let m: usize = out_shape.iter().product();
            let tol = Tol::of(1e-3).for_dtype(dtype);
            let r = catch(|| rf::<Ex>(Ex::float_mean_dim(f::<Ex>(&data), dim)));
            let expected = TensorData::new(vec![100f32; m], out_shape.clone()).convert_dtype(dtype);
            suite.check(format!("float_mean_dim({dim}) of 100s shape={shape:?} {dtype:?}"), tol, (r, expected));
            let r = catch(|| rf::<Ex>(Ex::float_mean(f::<Ex>(&data))));
            suite.check(format!("float_mean of 100s shape={shape:?} {dtype:?}"), tol, (r, TensorData::new(vec![100f32], [1]).convert_dtype(dtype)));
        }
        // Burn's regression case: means over permuted dims whose intermediate sum is ~261k.
        let values: Vec<f32> = (0..1024).map(|v| v as f32).collect();
        let data = TensorData::new(values, [2, 2, 256]).convert_dtype(dtype);
        let r = catch(|| {
            let t = Ex::float_permute(f::<Ex>(&data), &[1, 2, 0]);
            rf::<Ex>(Ex::float_mean_dim(Ex::float_mean_dim(t, 0), 1))
        });
        let expected = TensorData::new(vec![255.5f32, 767.5], [1, 1, 2]).convert_dtype(dtype);
        suite.check(format!("mean_dim(0) then mean_dim(1) of permuted arange {dtype:?}"), Tol::of(1e-3).for_dtype(dtype), (r, expected));
        // A long sum of a value f16 can't add exactly: f16 accumulation drifts by percents.
        let data = TensorData::new(vec![0.1f32; 4096], [4096]).convert_dtype(dtype);
        let exact = 4096.0 * data.clone().convert::<f32>().to_vec::<f32>().expect("values")[0];
        let r = catch(|| rf::<Ex>(Ex::float_sum(f::<Ex>(&data))));
        suite.check(format!("float_sum of 4096 x 0.1 {dtype:?}"), Tol { abs: 0.0, rel: 2e-3 }, (r, TensorData::new(vec![exact], [1]).convert_dtype(dtype)));
    }
    suite.finish();
}

/// Burn's `test_ctc_loss_grad_mixed_input_lengths` shape: T=12, N=3, C=5, targets of lengths
/// 3, 2 and 4, inputs of lengths 12, 7 and 10.
fn ctc_case() -> (TensorData, TensorData, TensorData, TensorData) {
    let logits: Vec<f32> = (0..12 * 3 * 5).map(|k| ((k / 15 * 7 + k / 5 % 3 * 13 + k % 5 * 3) as f32 * 0.1).sin()).collect();
    (
        TensorData::new(logits, [12, 3, 5]),
        TensorData::new(vec![1i64, 4, 2, 0, 3, 1, 0, 0, 2, 4, 1, 3], [3, 4]),
        TensorData::new(vec![12i64, 7, 10], [3]),
        TensorData::new(vec![3i64, 2, 4], [3]),
    )
}

#[test]
fn half_precision_ctc_loss_gradients_match_f32() {
    setup();
    let mut suite = Suite::new("upstream f16 ctc");
    let (logits, targets, input_lengths, target_lengths) = ctc_case();
    let halves: Vec<DType> = [DType::F16, DType::BF16].into_iter().filter(|d| float_dtypes().contains(d)).collect();
    for dtype in halves {
        // f16 keeps about 3 digits: the loss and gradient must be that close to the f32
        // reference (Burn's composition in f16 was off by 5e-2).
        let x = logits.clone().convert_dtype(dtype);
        let tol = match dtype {
            DType::F16 => Tol { abs: 5e-3, rel: 5e-3 },
            _ => Tol { abs: 3e-2, rel: 3e-2 },
        };
        grad_check!(&mut suite, format!("ctc_loss mixed input lengths {dtype:?}"), tol, [x: &x], |B| {
            B::ctc_loss(B::log_softmax(x, 2), i::<B>(&targets), i::<B>(&input_lengths), i::<B>(&target_lengths), 0)
        });
    }
    suite.finish();
}

#[test]
fn ctc_loss_of_an_unreachable_target_is_inf_with_zero_gradient() {
    setup();
    let mut suite = Suite::new("upstream ctc unreachable");
    // Sample 0 needs 3 steps ([1, 1] with a blank between) but has 2; sample 1 is fine.
    let log_probs = TensorData::new(vec![(1.0f32 / 3.0).ln(); 2 * 2 * 3], [2, 2, 3]);
    let targets = TensorData::new(vec![1i64, 1, 2, 0], [2, 2]);
    let lengths = TensorData::new(vec![2i64, 2], [2]);
    let target_lengths = TensorData::new(vec![2i64, 1], [2]);
    type AD = AdEx;
    let r = catch(|| {
        let x = leaf::<AD>(&log_probs, true);
        let loss = AD::ctc_loss(x.clone(), i::<AD>(&targets), i::<AD>(&lengths), i::<AD>(&target_lengths), 0);
        let loss_data = rf::<AD>(loss.clone());
        let grads = AD::backward(AD::float_sum(loss));
        let grad = rf::<Ex>(AD::grad(&x, &grads).expect("gradient"));
        (loss_data, grad)
    });
    suite.record("ctc_loss unreachable target: loss [inf, finite], gradient of sample 0 zero, finite", match r {
        Ok((loss, grad)) => {
            let (l, g) = (values(&loss), values(&grad));
            let sample0: Vec<f64> = (0..2).flat_map(|t| (0..3).map(move |c| (t * 2) * 3 + c)).map(|k| g[k]).collect();
            if !(l[0].is_infinite() && l[0] > 0.0 && l[1].is_finite()) {
                Err(format!("loss {l:?}"))
            } else if g.iter().any(|v| !v.is_finite()) || sample0.iter().any(|&v| v != 0.0) {
                Err(format!("gradient {g:?}"))
            } else {
                Ok(())
            }
        }
        Err(msg) => Err(format!("panicked: {msg}")),
    });
    suite.finish();
}

#[test]
fn half_precision_math_and_attention_match_f32() {
    let mut suite = Suite::new("upstream f16 attention");
    let halves: Vec<DType> = [DType::F16, DType::BF16].into_iter().filter(|d| float_dtypes().contains(d)).collect();
    let mut rng = Rng::new(31);
    for dtype in halves {
        // Softcapped attention takes tanh of small values, where a half-precision tanh built
        // from exponentials loses most of its digits; elementwise math computes in f32.
        let small = float_data(&mut rng, &[64], dtype, -0.02, 0.02);
        let tol = if dtype == DType::F16 { Tol { abs: 1e-6, rel: 2e-3 } } else { Tol { abs: 1e-5, rel: 1.6e-2 } };
        for (name, r) in [
            ("tanh", on_both!(|B| rf::<B>(B::float_tanh(f::<B>(&small))))),
            ("exp", on_both!(|B| rf::<B>(B::float_exp(f::<B>(&small))))),
            ("sin", on_both!(|B| rf::<B>(B::float_sin(f::<B>(&small))))),
        ] {
            suite.check(format!("float_{name} of small values {dtype:?}"), tol, r);
        }
        // Burn's test_attention_softcap and test_attention_all_options, against the f32 reference.
        let (qkv, scores) = ([2, 2, 16, 32], [2, 2, 16, 16]);
        let q = float_data(&mut rng, &qkv, dtype, -1.0, 1.0);
        let k = float_data(&mut rng, &qkv, dtype, -1.0, 1.0);
        let v = float_data(&mut rng, &qkv, dtype, -1.0, 1.0);
        let bias = float_data(&mut rng, &scores, dtype, -0.5, 0.5);
        let mask = bool_data(&mut rng, &scores);
        let cases = [
            ("softcap 50", AttentionModuleOptions { softcap: Some(50.0), ..Default::default() }, false),
            ("scale 0.05, softcap 30, causal, mask, bias", AttentionModuleOptions { scale: Some(0.05), softcap: Some(30.0), is_causal: true }, true),
        ];
        let tol = if dtype == DType::F16 { Tol { abs: 1e-3, rel: 1e-1 } } else { Tol { abs: 8e-3, rel: 1e-1 } };
        for (label, options, extras) in cases {
            let r = on_both!(|B| rf::<B>(B::attention(
                f::<B>(&q),
                f::<B>(&k),
                f::<B>(&v),
                extras.then(|| b::<B>(&mask)),
                extras.then(|| f::<B>(&bias)),
                options,
            )));
            suite.check(format!("attention {label} {dtype:?}"), tol, r);
        }
    }
    suite.finish();
}

#[test]
fn signed_ints_cast_to_wider_unsigned_sign_extend() {
    let mut suite = Suite::new("upstream signed to unsigned casts");
    let values: Vec<i64> = vec![-30, -1, 0, 1, 100, -128];
    for (from, to) in [(IntDType::I8, IntDType::U16), (IntDType::I8, IntDType::U32), (IntDType::I16, IntDType::U32), (IntDType::I32, IntDType::U32), (IntDType::I8, IntDType::U8)] {
        let x = TensorData::new(values.clone(), [values.len()]).convert_dtype(DType::from(from));
        let expected: TensorData = match to {
            IntDType::U16 => TensorData::new(values.iter().map(|&v| v as i8 as u16).collect::<Vec<_>>(), [values.len()]),
            IntDType::U8 => TensorData::new(values.iter().map(|&v| v as i8 as u8).collect::<Vec<_>>(), [values.len()]),
            _ => TensorData::new(
                values.iter().map(|&v| if from == IntDType::I32 { v as i32 as u32 } else if from == IntDType::I16 { v as i16 as u32 } else { v as i8 as u32 }).collect::<Vec<_>>(),
                [values.len()],
            ),
        };
        let ours = catch(|| ri::<Ex>(Ex::int_cast(i::<Ex>(&x), to)));
        suite.check(format!("int_cast {from:?}->{to:?} of negatives"), Tol::EXACT, (ours, expected));
    }
    suite.finish();
}

/// Vulkan leaves `atan(y, x)` undefined at `y = ±0` (lavapipe gave 3π/4 for `atan2(0, 0)`):
/// the kernels give C's values there, `±0` or `±π` by the signs of the zeros, in every float
/// dtype.
#[test]
fn atan2_of_zeros_is_c_s() {
    let mut suite = Suite::new("upstream atan2 zeros");
    let ys = [0.0f32, -0.0, 0.0, -0.0, 0.0, -0.0, 0.0, -0.0];
    let xs = [0.0f32, 0.0, -0.0, -0.0, 2.0, 2.0, -2.0, -2.0];
    for dtype in float_dtypes() {
        let want: Vec<f64> = ys.iter().zip(&xs).map(|(&y, &x)| (y as f64).atan2(x as f64)).collect();
        let y = TensorData::new(ys.to_vec(), [8]).convert_dtype(dtype);
        let x = TensorData::new(xs.to_vec(), [8]).convert_dtype(dtype);
        let r = catch(|| rf::<Ex>(Ex::float_atan2(f::<Ex>(&y), f::<Ex>(&x))).convert::<f64>().to_vec::<f64>().expect("values"));
        let ok = match r {
            Ok(got) => {
                let same = got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= 1e-3 && g.is_sign_negative() == w.is_sign_negative());
                if same { Ok(()) } else { Err(format!("{got:?}, C gives {want:?}")) }
            }
            Err(e) => Err(e),
        };
        suite.record(format!("atan2 of signed zeros {dtype:?}"), ok);
    }
    suite.finish();
}
