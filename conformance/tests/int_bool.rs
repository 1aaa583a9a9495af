//! Int arithmetic, bitwise ops and comparisons; bool logic; casts between every dtype.
use burn_backend::ops::*;
use burn_backend::{BoolStore, DType, FloatDType, IntDType, Scalar, TensorData};
use ex_cubecl_conformance::*;

type IntBinary<B> = fn(
    <B as burn_backend::BackendTypes>::IntTensorPrimitive,
    <B as burn_backend::BackendTypes>::IntTensorPrimitive,
) -> <B as burn_backend::BackendTypes>::IntTensorPrimitive;

fn int_binary<B: burn_backend::Backend>() -> Vec<(&'static str, IntBinary<B>)> {
    vec![
        ("add", B::int_add),
        ("sub", B::int_sub),
        ("mul", B::int_mul),
        ("div", B::int_div),
        ("remainder", B::int_remainder),
        ("bitwise_and", B::bitwise_and),
        ("bitwise_or", B::bitwise_or),
        ("bitwise_xor", B::bitwise_xor),
    ]
}

#[test]
fn int_binary_ops_match_ndarray() {
    let mut suite = Suite::new("int binary");
    for dtype in [DType::I32, DType::I64].into_iter().filter(|d| int_dtypes().contains(d)) {
        for ((name, op), (_, op_ref)) in int_binary::<Ex>().into_iter().zip(int_binary::<Ref>()) {
            let seed = 61 + name.len() as u64;
            let mut rng = Rng::new(seed);
            for shape in shapes(&mut rng) {
                let mut rhs_shape = shape.clone();
                rhs_shape[0] = 1;
                for (rs, view) in [(shape.clone(), View::Contiguous), (shape.clone(), View::Transposed), (rhs_shape, View::Contiguous)] {
                    let a = int_data(&mut rng, &shape, dtype, -50, 50);
                    // Non-zero divisors: burn-ndarray panics on division by zero.
                    let b = int_data(&mut rng, &rs, dtype, 1, 9);
                    let b_neg = Ref::int_neg(i::<Ref>(&b));
                    let sign = if rng.next_u64() & 1 == 0 { ri::<Ref>(b_neg) } else { b.clone() };
                    let ours = catch(|| ri::<Ex>(op(int_view::<Ex>(i::<Ex>(&a), view), int_view::<Ex>(i::<Ex>(&sign), view))));
                    let a_ref = int_view::<Ref>(i::<Ref>(&a), view);
                    let full = burn_backend::TensorMetadata::shape(&a_ref);
                    let b_ref = Ref::int_expand(int_view::<Ref>(i::<Ref>(&sign), view), full);
                    let reference = ri::<Ref>(op_ref(a_ref, b_ref));
                    suite.check(format!("int_{name} {shape:?} with {rs:?} {dtype:?} {view:?} seed={seed}"), Tol::EXACT, (ours, reference));
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn int_scalar_unary_and_shift_ops_match_ndarray() {
    let mut suite = Suite::new("int scalar");
    for dtype in [DType::I32, DType::I64].into_iter().filter(|d| int_dtypes().contains(d)) {
        let seed = 8;
        let mut rng = Rng::new(seed);
        for shape in shapes(&mut rng) {
            let a = int_data(&mut rng, &shape, dtype, -100, 100);
            let shifts = int_data(&mut rng, &shape, dtype, 0, 5);
            let pos = int_data(&mut rng, &shape, dtype, 0, 1000);
            for s in [-3i64, 2, 7] {
                let k = Scalar::Int(s);
                let cases = vec![
                    ("add_scalar", on_both!(|B| ri::<B>(B::int_add_scalar(i::<B>(&a), k)))),
                    ("sub_scalar", on_both!(|B| ri::<B>(B::int_sub_scalar(i::<B>(&a), k)))),
                    ("mul_scalar", on_both!(|B| ri::<B>(B::int_mul_scalar(i::<B>(&a), k)))),
                    ("div_scalar", on_both!(|B| ri::<B>(B::int_div_scalar(i::<B>(&a), k)))),
                    ("remainder_scalar", on_both!(|B| ri::<B>(B::int_remainder_scalar(i::<B>(&a), k)))),
                    ("bitwise_and_scalar", on_both!(|B| ri::<B>(B::bitwise_and_scalar(i::<B>(&a), k)))),
                    ("bitwise_or_scalar", on_both!(|B| ri::<B>(B::bitwise_or_scalar(i::<B>(&a), k)))),
                    ("bitwise_xor_scalar", on_both!(|B| ri::<B>(B::bitwise_xor_scalar(i::<B>(&a), k)))),
                    ("clamp", on_both!(|B| ri::<B>(B::int_clamp(i::<B>(&a), Scalar::Int(s.min(0)), Scalar::Int(s.max(0) + 10))))),
                    ("equal_elem", on_both!(|B| rb::<B>(B::int_equal_elem(i::<B>(&a), k, BoolStore::Native)))),
                    ("greater_elem", on_both!(|B| rb::<B>(B::int_greater_elem(i::<B>(&a), k, BoolStore::Native)))),
                    ("lower_equal_elem", on_both!(|B| rb::<B>(B::int_lower_equal_elem(i::<B>(&a), k, BoolStore::Native)))),
                ];
                for (name, result) in cases {
                    suite.check(format!("int_{name}({s}) shape={shape:?} {dtype:?} seed={seed}"), Tol::EXACT, result);
                }
            }
            let cases = vec![
                ("abs", on_both!(|B| ri::<B>(B::int_abs(i::<B>(&a))))),
                ("neg", on_both!(|B| ri::<B>(B::int_neg(i::<B>(&a))))),
                ("sign", on_both!(|B| ri::<B>(B::int_sign(i::<B>(&a))))),
                ("bitwise_not", on_both!(|B| ri::<B>(B::bitwise_not(i::<B>(&a))))),
                ("left_shift", on_both!(|B| ri::<B>(B::bitwise_left_shift(i::<B>(&a), i::<B>(&shifts))))),
                ("right_shift", on_both!(|B| ri::<B>(B::bitwise_right_shift(i::<B>(&pos), i::<B>(&shifts))))),
                ("left_shift_scalar", on_both!(|B| ri::<B>(B::bitwise_left_shift_scalar(i::<B>(&a), Scalar::Int(3))))),
                ("right_shift_scalar", on_both!(|B| ri::<B>(B::bitwise_right_shift_scalar(i::<B>(&pos), Scalar::Int(2))))),
                ("equal", on_both!(|B| rb::<B>(B::int_equal(i::<B>(&a), i::<B>(&pos), BoolStore::Native)))),
                ("greater", on_both!(|B| rb::<B>(B::int_greater(i::<B>(&a), i::<B>(&pos), BoolStore::Native)))),
                ("greater_equal", on_both!(|B| rb::<B>(B::int_greater_equal(i::<B>(&a), i::<B>(&shifts), BoolStore::Native)))),
                ("lower", on_both!(|B| rb::<B>(B::int_lower(i::<B>(&a), i::<B>(&pos), BoolStore::Native)))),
                ("lower_equal", on_both!(|B| rb::<B>(B::int_lower_equal(i::<B>(&a), i::<B>(&shifts), BoolStore::Native)))),
            ];
            for (name, result) in cases {
                suite.check(format!("int_{name} shape={shape:?} {dtype:?} seed={seed}"), Tol::EXACT, result);
            }
        }
    }
    // Extreme values of i32 pass through unary and comparison ops unchanged.
    let extremes = TensorData::new(vec![i32::MIN, i32::MIN + 1, -1, 0, 1, i32::MAX - 1, i32::MAX], [7]);
    for (name, result) in [
        ("sign extremes", on_both!(|B| ri::<B>(B::int_sign(i::<B>(&extremes))))),
        ("bitwise_not extremes", on_both!(|B| ri::<B>(B::bitwise_not(i::<B>(&extremes))))),
        ("greater_elem extremes", on_both!(|B| rb::<B>(B::int_greater_elem(i::<B>(&extremes), Scalar::Int(0), BoolStore::Native)))),
        ("max extremes", on_both!(|B| ri::<B>(B::int_max(i::<B>(&extremes))))),
        ("min extremes", on_both!(|B| ri::<B>(B::int_min(i::<B>(&extremes))))),
    ] {
        suite.check(name, Tol::EXACT, result);
    }
    suite.finish();
}

#[test]
fn bool_ops_match_ndarray() {
    let mut suite = Suite::new("bool");
    let seed = 3;
    let mut rng = Rng::new(seed);
    for shape in shapes(&mut rng) {
        let a = bool_data(&mut rng, &shape);
        let c = bool_data(&mut rng, &shape);
        let cases = vec![
            ("not", on_both!(|B| rb::<B>(B::bool_not(b::<B>(&a))))),
            ("and", on_both!(|B| rb::<B>(B::bool_and(b::<B>(&a), b::<B>(&c))))),
            ("or", on_both!(|B| rb::<B>(B::bool_or(b::<B>(&a), b::<B>(&c))))),
            ("xor", on_both!(|B| rb::<B>(B::bool_xor(b::<B>(&a), b::<B>(&c))))),
            ("equal", on_both!(|B| rb::<B>(B::bool_equal(b::<B>(&a), b::<B>(&c))))),
            ("not_equal", on_both!(|B| rb::<B>(B::bool_not_equal(b::<B>(&a), b::<B>(&c))))),
            ("equal_elem", on_both!(|B| rb::<B>(B::bool_equal_elem(b::<B>(&a), Scalar::Bool(true))))),
            ("any", on_both!(|B| rb::<B>(B::bool_any(b::<B>(&a))))),
            ("all", on_both!(|B| rb::<B>(B::bool_all(b::<B>(&a))))),
            ("into_int", on_both!(|B| ri::<B>(B::bool_into_int(b::<B>(&a), IntDType::I32)))),
            ("into_float", on_both!(|B| rf::<B>(B::bool_into_float(b::<B>(&a), FloatDType::F32)))),
            ("zeros", on_both!(|B| rb::<B>(B::bool_zeros(shape.clone().into(), &dev::<B>(), BoolStore::Native)))),
            ("ones", on_both!(|B| rb::<B>(B::bool_ones(shape.clone().into(), &dev::<B>(), BoolStore::Native)))),
        ];
        for (name, result) in cases {
            suite.check(format!("bool_{name} shape={shape:?} seed={seed}"), Tol::EXACT, result);
        }
        for dim in 0..shape.len() {
            let r = on_both!(|B| rb::<B>(B::bool_any_dim(b::<B>(&a), dim)));
            suite.check(format!("bool_any_dim({dim}) shape={shape:?}"), Tol::EXACT, r);
            let r = on_both!(|B| rb::<B>(B::bool_all_dim(b::<B>(&a), dim)));
            suite.check(format!("bool_all_dim({dim}) shape={shape:?}"), Tol::EXACT, r);
        }
    }
    // Every bool store the device has gives the same answers.
    for store in [BoolStore::Native, BoolStore::U8, BoolStore::U32] {
        let x = float_data(&mut rng, &[4, 5], DType::F32, -1.0, 1.0);
        let r = on_both!(|B| rb::<B>(B::bool_not(B::float_greater_elem(f::<B>(&x), Scalar::Float(0.0), store))));
        suite.check(format!("bool_not(greater_elem) store={store:?}"), Tol::EXACT, r);
    }
    suite.finish();
}

#[test]
fn casts_between_every_dtype_match_ndarray() {
    let mut suite = Suite::new("cast");
    let seed = 12;
    let mut rng = Rng::new(seed);
    let floats = float_dtypes();
    let ints: Vec<DType> = int_dtypes();
    for shape in shapes(&mut rng) {
        // Values every dtype can hold exactly.
        let base = int_data(&mut rng, &shape, DType::I32, 0, 100);
        for &from in floats.iter() {
            let x = base.clone().convert_dtype(from);
            // The reference is the exact host conversion (burn-ndarray lacks f16).
            for &to in floats.iter() {
                let ours = catch(|| rf::<Ex>(Ex::float_cast(f::<Ex>(&x), to.into())));
                suite.check(format!("float_cast {from:?}->{to:?} shape={shape:?}"), Tol::EXACT, (ours, base.clone().convert_dtype(to)));
            }
            for &to in ints.iter() {
                let ours = catch(|| ri::<Ex>(Ex::float_into_int(f::<Ex>(&x), to.into())));
                suite.check(format!("float_into_int {from:?}->{to:?} shape={shape:?}"), Tol::EXACT, (ours, base.clone().convert_dtype(to)));
            }
        }
        for &from in ints.iter() {
            let x = base.clone().convert_dtype(from);
            for &to in ints.iter() {
                let ours = catch(|| ri::<Ex>(Ex::int_cast(i::<Ex>(&x), to.into())));
                suite.check(format!("int_cast {from:?}->{to:?} shape={shape:?}"), Tol::EXACT, (ours, base.clone().convert_dtype(to)));
            }
            for &to in floats.iter() {
                let ours = catch(|| rf::<Ex>(Ex::int_into_float(i::<Ex>(&x), to.into())));
                suite.check(format!("int_into_float {from:?}->{to:?} shape={shape:?}"), Tol::EXACT, (ours, base.clone().convert_dtype(to)));
            }
        }
        // Float to int truncates toward zero.
        let frac = float_data(&mut rng, &shape, DType::F32, -9.9, 9.9);
        let r = on_both!(|B| ri::<B>(B::float_into_int(f::<B>(&frac), IntDType::I32)));
        suite.check(format!("float_into_int truncation shape={shape:?}"), Tol::EXACT, r);
    }
    suite.finish();
}
