//! Reductions (full and per dimension), cumulative scans, sort / argsort / topk.
use burn_backend::ops::*;
use burn_backend::{BoolStore, DType, IntDType, Slice, TensorData};
use ex_cubecl_conformance::*;

#[test]
fn float_reductions_match_ndarray() {
    let mut suite = Suite::new("float reduce");
    for dtype in float_dtypes() {
        let seed = 99;
        let mut rng = Rng::new(seed);
        let mut all_shapes = shapes(&mut rng);
        all_shapes.retain(|s| s.iter().product::<usize>() > 0);
        // Long lines take the one-cube-per-line path.
        all_shapes.push(vec![3, 700]);
        all_shapes.push(vec![1500]);
        // Few very long lines take the split path (chunks per cube, then a merge).
        all_shapes.push(vec![2, 9000]);
        all_shapes.push(vec![20001]);
        // Dimensions before a contiguous innermost one of a multiple of 8: one unit reduces
        // a vector of adjacent lines.
        all_shapes.push(vec![5, 8]);
        all_shapes.push(vec![3, 4, 16]);
        for shape in all_shapes {
            for view in [View::Contiguous, View::Transposed, View::Reversed] {
                let a = float_data(&mut rng, &shape, dtype, -2.0, 2.0);
                let tol = Tol::of(1e-4).for_dtype(dtype);
                let full = vec![
                    ("sum", on_both!(|B| rf::<B>(B::float_sum(float_view::<B>(f::<B>(&a), view))))),
                    ("mean", on_both!(|B| rf::<B>(B::float_mean(float_view::<B>(f::<B>(&a), view))))),
                    ("max", on_both!(|B| rf::<B>(B::float_max(float_view::<B>(f::<B>(&a), view))))),
                    ("min", on_both!(|B| rf::<B>(B::float_min(float_view::<B>(f::<B>(&a), view))))),
                    ("max_abs", on_both!(|B| rf::<B>(B::float_max_abs(float_view::<B>(f::<B>(&a), view))))),
                    ("any", on_both!(|B| rb::<B>(B::float_any(float_view::<B>(f::<B>(&a), view), BoolStore::Native)))),
                    ("all", on_both!(|B| rb::<B>(B::float_all(float_view::<B>(f::<B>(&a), view), BoolStore::Native)))),
                ];
                for (name, result) in full {
                    suite.check(format!("{name} shape={shape:?} {dtype:?} {view:?} seed={seed}"), tol, result);
                }
                if shape.iter().product::<usize>() <= 12 {
                    let r = on_both!(|B| rf::<B>(B::float_prod(float_view::<B>(f::<B>(&a), view))));
                    suite.check(format!("prod shape={shape:?} {dtype:?} {view:?}"), tol, r);
                }
                for dim in 0..shape.len() {
                    let per_dim = vec![
                        ("sum_dim", on_both!(|B| rf::<B>(B::float_sum_dim(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("mean_dim", on_both!(|B| rf::<B>(B::float_mean_dim(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("max_dim", on_both!(|B| rf::<B>(B::float_max_dim(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("min_dim", on_both!(|B| rf::<B>(B::float_min_dim(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("argmax", on_both!(|B| ri::<B>(B::float_argmax(float_view::<B>(f::<B>(&a), view), dim, IntDType::I64)))),
                        ("argmin", on_both!(|B| ri::<B>(B::float_argmin(float_view::<B>(f::<B>(&a), view), dim, IntDType::I64)))),
                        ("any_dim", on_both!(|B| rb::<B>(B::float_any_dim(float_view::<B>(f::<B>(&a), view), dim, BoolStore::Native)))),
                        ("cumsum", on_both!(|B| rf::<B>(B::float_cumsum(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("cummin", on_both!(|B| rf::<B>(B::float_cummin(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("cummax", on_both!(|B| rf::<B>(B::float_cummax(float_view::<B>(f::<B>(&a), view), dim)))),
                    ];
                    let per_dim = per_dim.into_iter().chain([
                        ("softmax", on_both!(|B| rf::<B>(B::softmax(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("log_softmax", on_both!(|B| rf::<B>(B::log_softmax(float_view::<B>(f::<B>(&a), view), dim)))),
                        ("max_dim_with_indices values", on_both!(|B| rf::<B>(B::float_max_dim_with_indices(float_view::<B>(f::<B>(&a), view), dim, IntDType::I64).0))),
                        ("max_dim_with_indices indices", on_both!(|B| ri::<B>(B::float_max_dim_with_indices(float_view::<B>(f::<B>(&a), view), dim, IntDType::I64).1))),
                        ("min_dim_with_indices indices", on_both!(|B| ri::<B>(B::float_min_dim_with_indices(float_view::<B>(f::<B>(&a), view), dim, IntDType::I64).1))),
                    ]);
                    for (name, result) in per_dim {
                        // Half-precision ties may pick another index than the f32 reference.
                        if dtype != DType::F32 && (name.starts_with("arg") || name.ends_with("indices")) {
                            continue;
                        }
                        suite.check(format!("{name}({dim}) shape={shape:?} {dtype:?} {view:?} seed={seed}"), tol, result);
                    }
                    if shape[dim] <= 8 {
                        let r = on_both!(|B| rf::<B>(B::float_cumprod(float_view::<B>(f::<B>(&a), view), dim)));
                        suite.check(format!("cumprod({dim}) shape={shape:?} {dtype:?} {view:?}"), tol, r);
                        let r = on_both!(|B| rf::<B>(B::float_prod_dim(float_view::<B>(f::<B>(&a), view), dim)));
                        suite.check(format!("prod_dim({dim}) shape={shape:?} {dtype:?} {view:?}"), tol, r);
                    }
                }
            }
        }
    }
    // Long rows of column slices: rows that don't follow each other, starting at an offset
    // that allows whole vectors (4) or not (1, 2), and leading dimensions that merge or not.
    let a = float_data(&mut Rng::new(5), &[2, 3, 708], DType::F32, -2.0, 2.0);
    for from in [1, 2, 4] {
        let cols = |rank: usize| {
            let mut slices = vec![Slice::new(0, None, 1); rank];
            slices[rank - 1] = Slice::new(from, None, 1);
            slices
        };
        for (name, result) in [
            ("softmax", on_both!(|B| rf::<B>(B::softmax(B::float_slice(f::<B>(&a), &cols(3)), 2)))),
            ("log_softmax", on_both!(|B| rf::<B>(B::log_softmax(B::float_slice(f::<B>(&a), &cols(3)), 2)))),
            ("softmax of a row slice", on_both!(|B| rf::<B>(B::softmax(B::float_slice(f::<B>(&a), &[Slice::new(1, None, 1), Slice::new(0, None, 1), Slice::new(from, None, 1)]), 2)))),
        ] {
            suite.check(format!("{name} of columns from {from} of [2, 3, 708]"), Tol::of(1e-5), result);
        }
    }
    // Split reductions keep the first index on ties across chunks, and find a maximum in the
    // last, shorter chunk.
    let n = 20001;
    let ones = TensorData::new(vec![1.0f32; n], [n]);
    let mut last = vec![0.0f32; n];
    last[n - 1] = 5.0;
    let last = TensorData::new(last, [n]);
    for (name, result) in [
        ("argmax ties split", on_both!(|B| ri::<B>(B::float_argmax(f::<B>(&ones), 0, IntDType::I64)))),
        ("argmin ties split", on_both!(|B| ri::<B>(B::float_argmin(f::<B>(&ones), 0, IntDType::I64)))),
        ("argmax last split", on_both!(|B| ri::<B>(B::float_argmax(f::<B>(&last), 0, IntDType::I64)))),
        ("sum ones split", on_both!(|B| rf::<B>(B::float_sum(f::<B>(&ones))))),
        ("mean split", on_both!(|B| rf::<B>(B::float_mean(f::<B>(&last))))),
    ] {
        suite.check(name, Tol::EXACT, result);
    }
    // max and min skip NaN as burn-ndarray does; sum propagates it.
    let nan = TensorData::new(vec![1.0f32, f32::NAN, 3.0, -1.0], [4]);
    for (name, result) in [
        ("max NaN", on_both!(|B| rf::<B>(B::float_max(f::<B>(&nan))))),
        ("min NaN", on_both!(|B| rf::<B>(B::float_min(f::<B>(&nan))))),
        ("sum NaN", on_both!(|B| rf::<B>(B::float_sum(f::<B>(&nan))))),
    ] {
        suite.check(name, Tol::EXACT, result);
    }
    suite.finish();
}

/// Nx's `reduce_max` / `reduce_min` in one launch (`float_extreme_dim_nan`): NaN where a line
/// holds one, else Burn's max / min; against ndarray's max / min with the NaN filled in, on
/// every reduction path (a unit per line, a cube per line, split lines), every float dtype
/// and view, with NaN first, last, alone, everywhere or nowhere in a line.
#[test]
fn nan_propagating_extremes_match_ndarray() {
    let mut suite = Suite::new("float_extreme_dim_nan");
    let mut rng = Rng::new(7);
    for dtype in float_dtypes() {
        for shape in [vec![4, 5], vec![3, 700], vec![2, 9000], vec![6, 1, 3], vec![5, 8]] {
            for view in [View::Contiguous, View::Transposed, View::Reversed] {
                let mut values: Vec<f32> = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0).to_vec().unwrap();
                let line = *shape.last().unwrap();
                // Row 0 NaN first, row 1 NaN last, row 2 all NaN (where it exists), the rest none.
                values[0] = f32::NAN;
                if values.len() >= 2 * line {
                    values[2 * line - 1] = f32::NAN;
                }
                if values.len() >= 3 * line {
                    values[2 * line..3 * line].iter_mut().for_each(|v| *v = f32::NAN);
                }
                let a = TensorData::new(values, shape.clone()).convert_dtype(dtype);
                for dim in 0..shape.len() {
                    for max in [true, false] {
                        let ours = catch(|| rf::<Ex>(Ex::float_extreme_dim_nan(float_view::<Ex>(f::<Ex>(&a), view), dim, max)));
                        let reference = {
                            type B = Ref;
                            let t = float_view::<B>(f::<B>(&a), view);
                            let nan = B::bool_any_dim(B::float_is_nan(t.clone(), BoolStore::Native), dim);
                            let r = if max { B::float_max_dim(t, dim) } else { B::float_min_dim(t, dim) };
                            rf::<B>(B::float_mask_fill(r, nan, burn_backend::Scalar::Float(f64::NAN)))
                        };
                        suite.check(format!("max={max} dim={dim} shape={shape:?} {dtype:?} {view:?}"), Tol::EXACT, (ours, reference));
                    }
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn int_reductions_match_ndarray() {
    let mut suite = Suite::new("int reduce");
    // burn-ndarray's reductions overflow on 8- and 16-bit ints: i32, i64 and u32 are compared.
    for dtype in int_dtypes().into_iter().filter(|d| matches!(d, DType::I32 | DType::I64 | DType::U32)) {
        let signed = matches!(dtype, DType::I64 | DType::I32 | DType::I16 | DType::I8);
        let (lo, hi) = if signed { (-9, 10) } else { (0, 10) };
        let seed = 5;
        let mut rng = Rng::new(seed);
        let mut all_shapes = shapes(&mut rng);
        all_shapes.retain(|s| s.iter().product::<usize>() > 0);
        all_shapes.push(vec![2, 600]);
        for shape in all_shapes {
            let a = int_data(&mut rng, &shape, dtype, lo, hi);
            let small = shape.iter().product::<usize>() <= 600 && !matches!(dtype, DType::U8 | DType::I8 | DType::I16 | DType::U16);
            for view in [View::Contiguous, View::Transposed] {
                let mut cases = vec![
                    ("max", on_both!(|B| ri::<B>(B::int_max(int_view::<B>(i::<B>(&a), view))))),
                    ("min", on_both!(|B| ri::<B>(B::int_min(int_view::<B>(i::<B>(&a), view))))),
                    ("any", on_both!(|B| rb::<B>(B::int_any(int_view::<B>(i::<B>(&a), view), BoolStore::Native)))),
                    ("all", on_both!(|B| rb::<B>(B::int_all(int_view::<B>(i::<B>(&a), view), BoolStore::Native)))),
                ];
                if small {
                    cases.push(("sum", on_both!(|B| ri::<B>(B::int_sum(int_view::<B>(i::<B>(&a), view))))));
                }
                for (name, result) in cases {
                    suite.check(format!("{name} shape={shape:?} {dtype:?} {view:?} seed={seed}"), Tol::EXACT, result);
                }
                for dim in 0..shape.len() {
                    let mut cases = vec![
                        ("max_dim", on_both!(|B| ri::<B>(B::int_max_dim(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("min_dim", on_both!(|B| ri::<B>(B::int_min_dim(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("argmax", on_both!(|B| ri::<B>(B::int_argmax(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("argmin", on_both!(|B| ri::<B>(B::int_argmin(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("cummin", on_both!(|B| ri::<B>(B::int_cummin(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("cummax", on_both!(|B| ri::<B>(B::int_cummax(int_view::<B>(i::<B>(&a), view), dim)))),
                        ("max_dim_with_indices", on_both!(|B| ri::<B>(B::int_max_dim_with_indices(int_view::<B>(i::<B>(&a), view), dim).1))),
                        ("min_dim_with_indices", on_both!(|B| ri::<B>(B::int_min_dim_with_indices(int_view::<B>(i::<B>(&a), view), dim).0))),
                    ];
                    if small {
                        cases.push(("sum_dim", on_both!(|B| ri::<B>(B::int_sum_dim(int_view::<B>(i::<B>(&a), view), dim)))));
                        cases.push(("mean_dim", on_both!(|B| ri::<B>(B::int_mean_dim(int_view::<B>(i::<B>(&a), view), dim)))));
                        cases.push(("cumsum", on_both!(|B| ri::<B>(B::int_cumsum(int_view::<B>(i::<B>(&a), view), dim)))));
                    }
                    if shape[dim] <= 6 && small {
                        cases.push(("prod_dim", on_both!(|B| ri::<B>(B::int_prod_dim(int_view::<B>(i::<B>(&a), view), dim)))));
                        cases.push(("cumprod", on_both!(|B| ri::<B>(B::int_cumprod(int_view::<B>(i::<B>(&a), view), dim)))));
                    }
                    for (name, result) in cases {
                        suite.check(format!("{name}({dim}) shape={shape:?} {dtype:?} {view:?} seed={seed}"), Tol::EXACT, result);
                    }
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn sort_and_topk_match_ndarray() {
    let mut suite = Suite::new("sort");
    let seed = 17;
    let mut rng = Rng::new(seed);
    let mut all_shapes = shapes(&mut rng);
    all_shapes.push(vec![2, 37]);
    for shape in all_shapes {
        // Few distinct values, so ties exercise the stable order.
        let a = int_data(&mut rng, &shape, DType::I32, -4, 5);
        let af = a.clone().convert_dtype(DType::F32);
        for dim in 0..shape.len() {
            for descending in [false, true] {
                // Burn leaves the order of ties unspecified (burn-ndarray's is unstable on long
                // lines; ours is stable): argsort is checked by the values its indices gather
                // and by being a permutation.
                let cases = vec![
                    ("float_sort", on_both!(|B| rf::<B>(B::float_sort(f::<B>(&af), dim, descending)))),
                    ("float_argsort gathers sorted", on_both!(|B| rf::<B>(B::float_gather(dim, f::<B>(&af), B::float_argsort(f::<B>(&af), dim, descending, IntDType::I64))))),
                    ("float_argsort is a permutation", on_both!(|B| ri::<B>(B::int_sort(B::float_argsort(f::<B>(&af), dim, descending, IntDType::I64), dim, false)))),
                    ("int_sort", on_both!(|B| ri::<B>(B::int_sort(i::<B>(&a), dim, descending)))),
                    ("int_argsort gathers sorted", on_both!(|B| ri::<B>(B::int_gather(dim, i::<B>(&a), B::int_argsort(i::<B>(&a), dim, descending))))),
                ];
                for (name, result) in cases {
                    suite.check(format!("{name}({dim}, desc={descending}) shape={shape:?} seed={seed}"), Tol::EXACT, result);
                }
            }
            let k = shape[dim].min(3);
            if shape[dim] > 0 {
                let cases = vec![
                    ("float_topk", on_both!(|B| rf::<B>(B::float_topk(f::<B>(&af), dim, k)))),
                    ("int_topk", on_both!(|B| ri::<B>(B::int_topk(i::<B>(&a), dim, k)))),
                ];
                for (name, result) in cases {
                    suite.check(format!("{name}({dim}, k={k}) shape={shape:?} seed={seed}"), Tol::EXACT, result);
                }
                // Distinct values: which of several tied indices is "top" is not specified.
                let n: usize = shape.iter().product();
                let distinct = TensorData::new((0..n).map(|x| ((x * 7919) % n) as f32).collect::<Vec<_>>(), shape.clone());
                // burn-ndarray has no argtopk: its reference is argsort (descending) cut to k.
                let ours = catch(|| ri::<Ex>(Ex::float_argtopk(f::<Ex>(&distinct), dim, k, IntDType::I64)));
                let sorted = Ref::float_argsort(f::<Ref>(&distinct), dim, true, IntDType::I64);
                let mut slices = vec![burn_backend::Slice::new(0, None, 1); shape.len()];
                slices[dim] = burn_backend::Slice::new(0, Some(k as isize), 1);
                let r = (ours, ri::<Ref>(Ref::int_slice(sorted, &slices)));
                suite.check(format!("float_argtopk({dim}, k={k}) shape={shape:?}"), Tol::EXACT, r);
            }
        }
    }
    suite.finish();
}
