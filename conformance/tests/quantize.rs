//! Quantized tensors: quantization (dynamic and with given scales), Burn's quantized data
//! bytes, dequantization, round trips across backends, layout ops and `q_matmul`, compared
//! with burn-ndarray, for every scheme both support; edge cases and bad input.
//!
//! burn-ndarray keeps per-block scales in place under views and so misreads permuted or
//! sliced per-block tensors; per-block layout ops are therefore compared with the same op on
//! burn-ndarray's dequantized tensor (the values the quantized tensor stands for).
use burn_backend::ops::*;
use burn_backend::quantization::{
    QuantLevel, QuantScheme, QuantStore, QuantValue, QuantizationParametersPrimitive,
};
use burn_backend::{DType, FloatDType, Slice, TensorData};
use ex_cubecl_conformance::*;


mod quant_common;
use quant_common::*;

/// Random values in `dtype`; for f64, values an f32 holds exactly, since burn-ndarray
/// quantizes only f32 (it reads its input as an f32 slice) and gets their f32 form.
fn quant_input(rng: &mut Rng, shape: &[usize], dtype: DType) -> TensorData {
    match dtype {
        DType::F64 => float_data(rng, shape, DType::F32, -2.0, 2.0).convert_dtype(DType::F64),
        _ => float_data(rng, shape, dtype, -2.0, 2.0),
    }
}

/// `a` on backend `B`: burn-ndarray gets f64 values as f32 (exact for `quant_input`'s).
fn input<B: burn_backend::Backend>(a: &TensorData) -> B::FloatTensorPrimitive {
    match a.dtype {
        DType::F64 if is_ref::<B>() => f::<B>(&a.clone().convert_dtype(DType::F32)),
        _ => f::<B>(a),
    }
}

#[test]
fn quantize_and_dequantize_match_ndarray() {
    let mut suite = Suite::new("quantize");
    let seed = 11;
    let mut rng = Rng::new(seed);
    for (scheme, shapes) in schemes(&mut rng) {
        for dtype in float_dtypes() {
            for shape in &shapes {
                let case = |what: &str| format!("{what} {scheme:?} shape={shape:?} {dtype:?} seed={seed}");
                let a = quant_input(&mut rng, shape, dtype);
                let qdtype = DType::QFloat(scheme);
                let r = on_both!(|B| rq::<B>(B::quantize_dynamic(input::<B>(&a), &scheme)));
                check_bytes(&mut suite, case("quantize_dynamic bytes"), qdtype, r);
                let r = on_both!(|B| dq::<B>(B::quantize_dynamic(input::<B>(&a), &scheme)));
                suite.check(case("dequantize"), Tol::EXACT, r);
                // Dequantized to the input's dtype (burn-ndarray computes in f32).
                let to = if dtype == DType::F64 { FloatDType::F64 } else { FloatDType::F32 };
                let r = on_both!(|B| {
                    let target = if is_ref::<B>() { to } else { dtype.into() };
                    rf::<B>(B::dequantize(B::quantize_dynamic(input::<B>(&a), &scheme), target))
                });
                suite.check(case("dequantize to input dtype"), Tol::EXACT.for_dtype(dtype), r);
                // A non-contiguous input.
                let r = on_both!(|B| rq::<B>(B::quantize_dynamic(float_view::<B>(input::<B>(&a), View::Reversed), &scheme)));
                check_bytes(&mut suite, case("quantize_dynamic of a reversed view"), qdtype, r);

                // Given scales, one of them zero.
                let n: usize = shape.iter().product();
                let count = match scheme.level {
                    QuantLevel::Tensor => 1,
                    QuantLevel::Block(b) => n / b.num_elements(),
                };
                let scales: Vec<f32> =
                    (0..count).map(|k| if k == 1 { 0.0 } else { rng.float(0.004, 0.03) as f32 }).collect();
                let scales = TensorData::new(scales, vec![count]);
                let r = on_both!(|B| {
                    let qparams = QuantizationParametersPrimitive::<B> { scales: f::<B>(&scales) };
                    rq::<B>(B::quantize(input::<B>(&a), &scheme, qparams))
                });
                check_bytes(&mut suite, case("quantize with given scales bytes"), qdtype, r);
                let r = on_both!(|B| {
                    let qparams = QuantizationParametersPrimitive::<B> { scales: f::<B>(&scales) };
                    dq::<B>(B::quantize(input::<B>(&a), &scheme, qparams))
                });
                suite.check(case("dequantize with given scales"), Tol::EXACT, r);
            }
        }
    }
    suite.finish();
}

#[test]
fn quantized_data_round_trips_across_backends() {
    let mut suite = Suite::new("quantized data");
    let seed = 12;
    let mut rng = Rng::new(seed);
    for (scheme, shapes) in schemes(&mut rng) {
        for shape in shapes {
            let case = |what: &str| format!("{what} {scheme:?} shape={shape:?} seed={seed}");
            let a = float_data(&mut rng, &shape, DType::F32, -3.0, 3.0);
            let ours = rq::<Ex>(Ex::quantize_dynamic(f::<Ex>(&a), &scheme));
            let theirs = rq::<Ref>(Ref::quantize_dynamic(f::<Ref>(&a), &scheme));
            let expected = dq::<Ref>(q::<Ref>(&theirs));
            // Ours read by burn-ndarray, burn-ndarray's read by us, ours read by us.
            suite.check(case("ours -> ndarray q_from_data"), Tol::EXACT, (Ok(dq::<Ref>(q::<Ref>(&ours))), expected.clone()));
            suite.check(case("ndarray -> ours q_from_data"), Tol::EXACT, (catch(|| dq::<Ex>(q::<Ex>(&theirs))), expected.clone()));
            let again = catch(|| rq::<Ex>(q::<Ex>(&ours)));
            suite.record(case("ours -> ours bytes"), again.and_then(|d| same_data(&d, &ours, ours.dtype)));

            // Burn's default store, PackedU32(0): the same bytes for 8-bit values.
            let packed = scheme.with_store(QuantStore::PackedU32(0));
            let ours_packed = catch(|| rq::<Ex>(Ex::quantize_dynamic(f::<Ex>(&a), &packed)));
            suite.record(case("PackedU32(0) bytes"), ours_packed.clone().and_then(|d| same_data(&d, &theirs, DType::QFloat(packed))));
            if let Ok(data) = ours_packed {
                suite.check(case("PackedU32(0) -> ndarray"), Tol::EXACT, (Ok(dq::<Ref>(q::<Ref>(&data))), expected.clone()));
            }
            // Packed data padded to whole words, as a packing writer may give it.
            let n = a.num_elements();
            let mut bytes = theirs.as_bytes()[..n].to_vec();
            bytes.resize(n.next_multiple_of(4), 0);
            bytes.extend_from_slice(&theirs.as_bytes()[n..]);
            let padded = TensorData::from_bytes_vec(bytes, shape.clone(), DType::QFloat(packed));
            suite.check(case("padded PackedU32(0) -> ours"), Tol::EXACT, (catch(|| dq::<Ex>(q::<Ex>(&padded))), expected));
        }
    }
    suite.finish();
}

#[test]
fn layout_ops_keep_quantized_values() {
    let mut suite = Suite::new("quantized layout ops");
    let seed = 13;
    let mut rng = Rng::new(seed);
    for (scheme, shapes) in schemes(&mut rng) {
        for shape in shapes {
            if shape.iter().product::<usize>() == 0 || shape.iter().product::<usize>() > 1024 {
                continue;
            }
            let a = float_data(&mut rng, &shape, DType::F32, -2.0, 2.0);
            for op in ops(&mut rng, &shape) {
                let case = |what: &str| format!("{what} {op:?} {scheme:?} shape={shape:?} seed={seed}");
                if scheme.level == QuantLevel::Tensor {
                    // One scale: the op moves values only, exactly as burn-ndarray does.
                    let r = on_both!(|B| rq::<B>(apply_q::<B>(B::quantize_dynamic(f::<B>(&a), &scheme), &op)));
                    check_bytes(&mut suite, case("q_into_data"), DType::QFloat(scheme), r);
                    let r = on_both!(|B| dq::<B>(apply_q::<B>(B::quantize_dynamic(f::<B>(&a), &scheme), &op)));
                    suite.check(case("dequantize"), Tol::EXACT, r);
                    continue;
                }
                // Per block: compared with the op on the dequantized tensor.
                let expected = rf::<Ref>(apply_f::<Ref>(Ref::dequantize(Ref::quantize_dynamic(f::<Ref>(&a), &scheme), FloatDType::F32), &op));
                let requantized = Tol { abs: step(&scheme), rel: 0.0 };
                let tol = if op.copies() { requantized } else { Tol::EXACT };
                let ours = catch(|| dq::<Ex>(apply_q::<Ex>(Ex::quantize_dynamic(f::<Ex>(&a), &scheme), &op)));
                suite.check(case("dequantize"), tol, (ours, expected.clone()));
                // Read back in Burn's format (views of whole blocks only) and loaded by both.
                if rq_count(&scheme, &expected) > 0 {
                    let data = catch(|| rq::<Ex>(apply_q::<Ex>(Ex::quantize_dynamic(f::<Ex>(&a), &scheme), &op)));
                    let tol = if matches!(op, Op::Reshape(_)) { Tol::EXACT } else { requantized };
                    suite.check(case("q_into_data -> ndarray"), tol, (data.clone().map(|d| dq::<Ref>(q::<Ref>(&d))), expected.clone()));
                    suite.check(case("q_into_data -> ours"), tol, (data.and_then(|d| catch(|| dq::<Ex>(q::<Ex>(&d)))), expected));
                }
            }
        }
    }
    suite.finish();
}

/// Scales in quantized data of `expected`'s size (0 when it is not a whole number of blocks).
fn rq_count(scheme: &QuantScheme, expected: &TensorData) -> usize {
    match scheme.level {
        QuantLevel::Tensor => 1,
        QuantLevel::Block(b) => {
            let n = expected.num_elements();
            let block = b.num_elements();
            if n % block == 0 { n / block } else { 0 }
        }
    }
}

#[test]
fn block_aligned_copies_keep_values_and_scales() {
    let mut suite = Suite::new("quantized block-aligned copies");
    let seed = 14;
    let mut rng = Rng::new(seed);
    for value in [QuantValue::Q8S, QuantValue::Q8F] {
        let scheme = QuantScheme::default().with_value(value).with_level(QuantLevel::block([4])).with_store(QuantStore::Native);
        let shape = vec![5, 12];
        let a = float_data(&mut rng, &shape, DType::F32, -2.0, 2.0);
        let full = rq::<Ref>(Ref::quantize_dynamic(f::<Ref>(&a), &scheme));
        let deq = || Ref::dequantize(q::<Ref>(&full), FloatDType::F32);
        // Every output block is a whole source block: values and scales move unchanged.
        let ops = [
            Op::Flip(vec![0]),
            Op::Flip(vec![1]),
            Op::Flip(vec![0, 1]),
            Op::Select(0, vec![4, 0, 0, 2]),
            Op::Slice(vec![Slice::new(0, None, -2)]),
            Op::Slice(vec![Slice::new(1, Some(3), 1)]),
            Op::Slice(vec![Slice::new(0, None, 1), Slice::new(4, Some(12), 1)]),
            Op::SwapDims(0, 0),
        ];
        for op in ops {
            let case = |what: &str| format!("{what} {op:?} {scheme:?} shape={shape:?} seed={seed}");
            let expected = rf::<Ref>(apply_f::<Ref>(deq(), &op));
            let data = catch(|| rq::<Ex>(apply_q::<Ex>(q::<Ex>(&full), &op)));
            suite.check(case("exact after q_into_data"), Tol::EXACT, (data.clone().map(|d| dq::<Ref>(q::<Ref>(&d))), expected));
            // Each output scale is one of the source's.
            let scales = |d: &TensorData| -> Vec<[u8; 4]> {
                let n = d.num_elements();
                d.as_bytes()[n..].chunks_exact(4).map(|w| w.try_into().unwrap()).collect()
            };
            let source = scales(&full);
            suite.record(
                case("scales kept"),
                data.and_then(|d| match scales(&d).iter().all(|s| source.contains(s)) {
                    true => Ok(()),
                    false => Err("a scale was recomputed".into()),
                }),
            );
        }
        // Rows 1..3 of the data are bytes 12..36 of the values and scales 3..9.
        let rows = catch(|| rq::<Ex>(apply_q::<Ex>(q::<Ex>(&full), &Op::Slice(vec![Slice::new(1, Some(3), 1)]))));
        let n = 60;
        let mut bytes = full.as_bytes()[12..36].to_vec();
        bytes.extend_from_slice(&full.as_bytes()[n + 12..n + 36]);
        let expected = TensorData::from_bytes_vec(bytes, vec![2, 12], full.dtype);
        suite.record(format!("slice rows bytes {scheme:?}"), rows.and_then(|d| same_data(&d, &expected, full.dtype)));
    }
    suite.finish();
}

