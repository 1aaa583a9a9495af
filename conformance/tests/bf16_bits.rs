//! bf16 held as its bits (devices without bf16 arithmetic, such as lavapipe): the families a
//! model's step runs most read the u16 bits, compute in f32 and store each result rounded to
//! nearest even in one launch (elementwise unary, binary, comparison and predicate ops;
//! softmax; reductions, a split one in two as in f32; a fused elementwise chain; matmul on the
//! tiled kernel; SGD and Adam steps; layer norm; `mask_fill`), and give bit for bit what widening to f32, computing in f32 and rounding back
//! in separate launches gives (the copy kernel's `WidenBf16` and `NarrowBf16` around the f32
//! op: the path these ops took before, written here with `float_cast`). Inputs: random
//! values, NaN, ±inf, ±0, f32 subnormals, values whose sum or product overflows or rounds on
//! a tie; contiguous (vectorised), odd-length, permuted and broadcast operands.
use std::sync::Mutex;

use burn_backend::ops::{ActivationOps, FloatTensorOps};
use burn_backend::{Backend, BoolStore, DType, FloatDType, Scalar, TensorData};
use ex_cubecl::runtime::launch_count;
use ex_cubecl_conformance::*;

/// Float and bool primitives alike.
type T = ex_cubecl::tensor::CubeTensor<Rt>;
type Unary = fn(T) -> T;
type Binary = fn(T, T) -> T;

/// Launch counts are global: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

/// bf16 data of `shape`: random values in -4..4 with the edge cases written over its start.
fn data(rng: &mut Rng, shape: &[usize]) -> TensorData {
    let n: usize = shape.iter().product();
    let specials = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 0.0, -0.0, 1e-40, -3e38, 3e38, 1.0 + 1.0 / 256.0, 65504.0, 0.5];
    let mut values: Vec<f32> = (0..n).map(|_| rng.float(-4.0, 4.0) as f32).collect();
    values.iter_mut().zip(specials).for_each(|(v, s)| *v = s);
    TensorData::new(values, shape.to_vec()).convert_dtype(DType::BF16)
}

/// Whether bf16 tensors on the test device are held as bits; the test says so and passes
/// where they are not (the device computes bf16 itself).
fn held_as_bits() -> bool {
    let held = f::<Ex>(&TensorData::new(vec![0.0f32], [1]).convert_dtype(DType::BF16)).bf16_bits();
    if !held {
        eprintln!("bf16_bits: the device has bf16 arithmetic; nothing to check");
    }
    held
}

fn widen(t: T) -> T {
    Ex::float_cast(t, FloatDType::F32)
}

fn narrow(t: T) -> T {
    Ex::float_cast(t, FloatDType::BF16)
}

/// `run`'s result and the launches it took (its inputs uploaded before, its result read
/// after).
fn counted<O>(run: impl FnOnce() -> O) -> (O, u64) {
    Ex::sync(&dev::<Ex>()).unwrap();
    let before = launch_count();
    let out = run();
    Ex::sync(&dev::<Ex>()).unwrap();
    (out, launch_count() - before)
}

/// [`counted`] of a float result, read.
fn float(run: impl FnOnce() -> T) -> (TensorData, u64) {
    let (t, n) = counted(run);
    (rf::<Ex>(t), n)
}

/// [`counted`] of a bool result, read.
fn bool(run: impl FnOnce() -> T) -> (TensorData, u64) {
    let (t, n) = counted(run);
    (rb::<Ex>(t), n)
}

/// Checks one op: one launch, and the bytes of the widen / compute / narrow path.
fn check(suite: &mut Suite, case: String, ours: impl FnOnce() -> (TensorData, u64), old: impl FnOnce() -> (TensorData, u64)) {
    check_launches(suite, case, 1, ours, old)
}

/// [`check`] of an op that takes `expected` launches.
fn check_launches(suite: &mut Suite, case: String, expected: u64, ours: impl FnOnce() -> (TensorData, u64), old: impl FnOnce() -> (TensorData, u64)) {
    let result = catch(|| (ours(), old())).and_then(|((ours, launches), (old, old_launches))| {
        eprintln!("{case}: {launches} launch(es), {old_launches} on the widen / compute / narrow path");
        match (launches == expected, ours.dtype == old.dtype && ours.as_bytes() == old.as_bytes()) {
            (true, true) => Ok(()),
            (true, false) => Err(format!("bits differ: {:?} against {:?}", ours, old)),
            (false, _) => Err(format!("{launches} launches, not {expected}")),
        }
    });
    suite.record(case, result);
}

#[test]
fn unary_ops_are_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: unary");
    let mut rng = Rng::new(52);
    let ops: [(&str, Unary); 12] = [
        ("exp", Ex::float_exp),
        ("log", Ex::float_log),
        ("sqrt", Ex::float_sqrt),
        ("tanh", Ex::float_tanh),
        ("recip", Ex::float_recip),
        ("relu", Ex::relu),
        ("gelu", Ex::gelu),
        ("sigmoid", Ex::sigmoid),
        ("clamp", |t| Ex::float_clamp(t, Scalar::Float(-0.3), Scalar::Float(2.7))),
        ("powf_scalar 2", |t| Ex::float_powf_scalar_impl(t, Scalar::Float(2.0))),
        ("powf_scalar 0.7", |t| Ex::float_powf_scalar_impl(t, Scalar::Float(0.7))),
        ("neg", Ex::float_neg),
    ];
    // [64, 64] runs the vectorised kernel, [7, 9] and the transposed view the strided one.
    for (shape, permute) in [([64, 64], false), ([7, 9], false), ([9, 12], true)] {
        let x = data(&mut rng, &shape);
        let input = || match permute {
            true => Ex::float_permute(f::<Ex>(&x), &[1, 0]),
            false => f::<Ex>(&x),
        };
        for (name, op) in ops {
            let case = format!("{name} {shape:?}{}", if permute { " transposed" } else { "" });
            let (a, b) = (input(), input());
            check(&mut suite, case, || float(|| op(a)), || float(|| narrow(op(widen(b)))));
        }
    }
    suite.finish();
}

#[test]
fn binary_ops_are_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: binary");
    let mut rng = Rng::new(53);
    let ops: [(&str, Binary); 6] = [
        ("add", Ex::float_add),
        ("sub", Ex::float_sub),
        ("mul", Ex::float_mul),
        ("div", Ex::float_div),
        ("powf", Ex::float_powf),
        ("atan2", Ex::float_atan2),
    ];
    // Same shapes (vectorised), odd shapes (strided kernel), and a row broadcast.
    for (ls, rs) in [([64, 64], [64, 64]), ([7, 9], [7, 9]), ([7, 9], [1, 9])] {
        let (x, y) = (data(&mut rng, &ls), data(&mut rng, &rs));
        for (name, op) in ops {
            let case = format!("{name} {ls:?} {rs:?}");
            let (a, b) = (f::<Ex>(&x), f::<Ex>(&y));
            let (c, d) = (f::<Ex>(&x), f::<Ex>(&y));
            check(&mut suite, case, || float(|| op(a, b)), || float(|| narrow(op(widen(c), widen(d)))));
        }
        let scalars: [(&str, fn(T, Scalar) -> T); 4] = [
            ("add_scalar", Ex::float_add_scalar),
            ("mul_scalar", Ex::float_mul_scalar),
            ("div_scalar", Ex::float_div_scalar),
            ("sub_scalar", Ex::float_sub_scalar),
        ];
        for (name, op) in scalars {
            // 0.1 is no bf16: the scalar stays an f32, as on the widened path.
            let s = Scalar::Float(0.1);
            let (a, c) = (f::<Ex>(&x), f::<Ex>(&x));
            check(&mut suite, format!("{name} {ls:?}"), || float(|| op(a, s)), || float(|| narrow(op(widen(c), s))));
        }
    }
    suite.finish();
}

#[test]
fn comparisons_and_predicates_are_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: comparisons");
    let mut rng = Rng::new(54);
    let store = BoolStore::Native;
    for (ls, rs) in [([64, 64], [64, 64]), ([7, 9], [1, 9])] {
        let (x, mut y) = (data(&mut rng, &ls), data(&mut rng, &rs));
        if ls == rs {
            // Equal elements, so that `equal` and `greater_equal` see both answers.
            y = TensorData::new(x.to_vec::<burn_backend::bf16>().unwrap().iter().enumerate().map(|(i, &v)| if i % 3 == 0 { v } else { burn_backend::bf16::from_f32(0.25) }).collect(), ls.to_vec());
        }
        let tensors: [(&str, fn(T, T, BoolStore) -> T); 3] =
            [("equal", Ex::float_equal), ("lower", Ex::float_lower), ("greater_equal", Ex::float_greater_equal)];
        for (name, op) in tensors {
            let (a, b) = (f::<Ex>(&x), f::<Ex>(&y));
            let (c, d) = (f::<Ex>(&x), f::<Ex>(&y));
            check(&mut suite, format!("{name} {ls:?} {rs:?}"), || bool(|| op(a, b, store)), || bool(|| op(widen(c), widen(d), store)));
        }
        let scalars: [(&str, fn(T, Scalar, BoolStore) -> T); 2] =
            [("greater_elem", Ex::float_greater_elem), ("equal_elem", Ex::float_equal_elem)];
        for (name, op) in scalars {
            for s in [0.5, 0.1] {
                let (a, c) = (f::<Ex>(&x), f::<Ex>(&x));
                let s = Scalar::Float(s);
                check(&mut suite, format!("{name} {s:?} {ls:?}"), || bool(|| op(a, s, store)), || bool(|| op(widen(c), s, store)));
            }
        }
        let predicates: [(&str, fn(T, BoolStore) -> T); 2] = [("is_nan", Ex::float_is_nan), ("is_inf", Ex::float_is_inf)];
        for (name, op) in predicates {
            let (a, c) = (f::<Ex>(&x), f::<Ex>(&x));
            check(&mut suite, format!("{name} {ls:?}"), || bool(|| op(a, store)), || bool(|| op(widen(c), store)));
        }
    }
    suite.finish();
}

#[test]
fn softmax_is_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: softmax");
    let mut rng = Rng::new(55);
    // Each of the three kernels: a cube per row along the last dimension (rows held in
    // registers, and streamed twice), a cube per long line elsewhere, a unit per line; then
    // a transposed view, which is made contiguous (its bits copied) first.
    let cases: [(&[usize], usize, bool, u64); 6] = [
        (&[4, 600], 1, false, 1),
        (&[2, 9000], 1, false, 1),
        (&[2, 600, 1], 1, false, 1),
        (&[40, 3], 0, false, 1),
        (&[5, 7], 1, false, 1),
        (&[600, 4], 0, true, 2),
    ];
    for (shape, dim, transpose, expected) in cases {
        let x = data(&mut rng, shape);
        let input = || match transpose {
            true => Ex::float_permute(f::<Ex>(&x), &[1, 0]),
            false => f::<Ex>(&x),
        };
        let dim = if transpose { 1 - dim } else { dim };
        for (name, op) in [("softmax", Ex::softmax as fn(T, usize) -> T), ("log_softmax", Ex::log_softmax)] {
            let (a, b) = (input(), input());
            let case = format!("{name} {shape:?} dim {dim}{}", if transpose { " transposed" } else { "" });
            check_launches(&mut suite, case, expected, || float(|| op(a, dim)), || float(|| narrow(op(widen(b), dim))));
        }
    }
    suite.finish();
}

#[test]
fn reductions_are_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: reductions");
    let mut rng = Rng::new(56);
    // A unit per line, a cube per line (along the last dimension and across it), a line split
    // over cubes (two launches: chunks, then their merge, as for f32), and a transposed view,
    // whose elements fold in the order of its f32 widening.
    let cases: [(&[usize], usize, bool, u64); 6] = [
        (&[4, 37], 1, false, 1),
        (&[2, 3000], 1, false, 1),
        (&[600, 3], 0, false, 1),
        (&[2, 40000], 1, false, 2),
        (&[37, 4], 0, true, 1),
        (&[3, 600], 1, true, 1),
    ];
    let ops: [(&str, fn(T, usize) -> T); 4] = [
        ("sum_dim", Ex::float_sum_dim),
        ("mean_dim", Ex::float_mean_dim),
        ("max_dim", Ex::float_max_dim),
        ("argmax", |t, dim| Ex::float_argmax(t, dim, burn_backend::IntDType::I32)),
    ];
    for (shape, dim, transpose, expected) in cases {
        // Values in -4..4 without the edge cases, whose inf and NaN would hide the sums' bits.
        let x = float_data(&mut rng, shape, DType::BF16, -4.0, 4.0);
        let input = || match transpose {
            true => Ex::float_permute(f::<Ex>(&x), &[1, 0]),
            false => f::<Ex>(&x),
        };
        let dim = if transpose { 1 - dim } else { dim };
        for (name, op) in ops {
            let (a, b) = (input(), input());
            let case = format!("{name} {shape:?} dim {dim}{}", if transpose { " transposed" } else { "" });
            // argmax gives indices: nothing to narrow.
            let old = move || match name {
                "argmax" => op(widen(b), dim),
                _ => narrow(op(widen(b), dim)),
            };
            check_launches(&mut suite, case, expected, || float(|| op(a, dim)), || float(old));
        }
    }
    let x = float_data(&mut rng, &[5, 300], DType::BF16, -4.0, 4.0);
    let (a, b) = (f::<Ex>(&x), f::<Ex>(&x));
    check(&mut suite, "sum [5, 300]".into(), || float(|| Ex::float_sum(a)), || float(|| narrow(Ex::float_sum(widen(b)))));
    let (a, b) = (f::<Ex>(&x), f::<Ex>(&x));
    let max_with_indices = |t| {
        let (values, indices) = Ex::float_max_dim_with_indices(t, 1, burn_backend::IntDType::I32);
        (values, ri::<Ex>(indices))
    };
    let ((ours, ours_idx), n) = counted(|| max_with_indices(a));
    let ((old, old_idx), _) = counted(|| max_with_indices(widen(b)));
    let same = rf::<Ex>(ours).as_bytes() == rf::<Ex>(narrow(old)).as_bytes() && ours_idx == old_idx;
    suite.record("max_dim_with_indices [5, 300]: one launch, the same bits and indices", match (n, same) {
        (1, true) => Ok(()),
        (n, same) => Err(format!("{n} launches, the same bits and indices: {same}")),
    });
    suite.finish();
}

#[test]
fn a_fused_chain_is_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    type Fused = burn_fusion::Fusion<Ex>;
    use burn_tensor::Tensor;
    let mut suite = Suite::new("bf16 bits: fused chain");
    let mut rng = Rng::new(57);
    let chain = |a: Tensor<Fused, 2>, b: Tensor<Fused, 2>, c: Tensor<Fused, 2>| ((a.clone() + b).exp() * 2.0 - c).tanh().mask_fill(a.lower_elem(0.0), 0.5);
    // [64, 64] runs the vectorised kernel, [7, 9] the other; b and c broadcast.
    for (sa, sb, sc) in [([64, 64], [1, 64], [64, 1]), ([7, 9], [1, 9], [7, 1])] {
        let (a, b, c) = (data(&mut rng, &sa), data(&mut rng, &sb), data(&mut rng, &sc));
        let device = dev::<Fused>();
        let on = (&device, DType::BF16);
        let (ta, tb, tc) = (Tensor::from_data(a.clone(), on), Tensor::from_data(b.clone(), on), Tensor::from_data(c.clone(), on));
        let ((ours, launches), (old, old_launches)) = (
            {
                Fused::sync(&device).unwrap();
                let before = launch_count();
                let out = chain(ta, tb, tc);
                Fused::sync(&device).unwrap();
                (out.into_data(), launch_count() - before)
            },
            {
                // The same ops one by one, each widened, computed and narrowed.
                let (a, b, c) = (f::<Ex>(&a), f::<Ex>(&b), f::<Ex>(&c));
                let op = |x: T, op: &dyn Fn(T) -> T| narrow(op(widen(x)));
                let op2 = |x: T, y: T, op: &dyn Fn(T, T) -> T| narrow(op(widen(x), widen(y)));
                let counted = counted(|| {
                    let sum = op2(a.clone(), b, &|x, y| Ex::float_add(x, y));
                    let e = op(sum, &|x| Ex::float_exp(x));
                    let m = op(e, &|x| Ex::float_mul_scalar(x, Scalar::Float(2.0)));
                    let d = op2(m, c, &|x, y| Ex::float_sub(x, y));
                    let t = op(d, &|x| Ex::float_tanh(x));
                    let mask = Ex::float_lower_elem(widen(a), Scalar::Float(0.0), BoolStore::Native);
                    Ex::float_mask_fill(t, mask, Scalar::Float(0.5))
                });
                (rf::<Ex>(counted.0), counted.1)
            },
        );
        eprintln!("fused chain {sa:?}: {launches} launch(es); the ops one by one on the widen / compute / narrow path {old_launches}");
        let same = ours.as_bytes() == old.as_bytes();
        suite.record(format!("(a + b).exp() * 2 - c, tanh, mask_fill(a < 0) {sa:?}: one launch, the same bits"), match (launches, same) {
            (1, true) => Ok(()),
            (n, same) => Err(format!("{n} launches, the same bits: {same}")),
        });
    }
    suite.finish();
}

#[test]
fn matmul_is_one_launch_with_the_same_bits() {
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: matmul");
    let mut rng = Rng::new(58);
    // Small and large tiles, a batch, and a transposed right operand (a backward pass's
    // product); values in -4..4 (the edge cases' inf and NaN would hide the sums' bits).
    let cases: [(&[usize], &[usize], bool); 4] = [
        (&[8, 12], &[12, 5], false),
        (&[70, 33], &[33, 70], false),
        (&[2, 9, 20], &[2, 20, 17], false),
        (&[40, 30], &[24, 30], true),
    ];
    for (ls, rs, transpose) in cases {
        let (x, y) = (float_data(&mut rng, ls, DType::BF16, -4.0, 4.0), float_data(&mut rng, rs, DType::BF16, -4.0, 4.0));
        let rhs = || match transpose {
            true => Ex::float_permute(f::<Ex>(&y), &[1, 0]),
            false => f::<Ex>(&y),
        };
        let (a, b, c, d) = (f::<Ex>(&x), rhs(), f::<Ex>(&x), rhs());
        let case = format!("matmul {ls:?} {rs:?}{}", if transpose { " transposed" } else { "" });
        check(&mut suite, case, || float(|| Ex::float_matmul(a, b)), || float(|| narrow(Ex::float_matmul(widen(c), widen(d)))));
    }
    suite.finish();
}

#[test]
fn optimizer_steps_are_one_launch_with_the_same_bits() {
    use ex_cubecl::launch::optim::{AdamDecay, AdamMoments, AdamRule, AdamTime, SgdMomentum, SgdRule, adam_step, sgd_step};
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: optimizer steps");
    let mut rng = Rng::new(59);
    let shape = [9, 13];
    let (p, g, s1, s2) = (0..4).map(|_| float_data(&mut rng, &shape, DType::BF16, -2.0, 2.0)).collect::<Vec<_>>().try_into().map(|[a, b, c, d]: [TensorData; 4]| (a, b, c, d)).unwrap();
    let s2 = TensorData::new(s2.to_vec::<burn_backend::bf16>().unwrap().iter().map(|v| v.to_f32().abs()).collect(), shape.to_vec()).convert_dtype(DType::BF16);
    let sgd = |momentum: bool| SgdRule { lr: 0.05, penalty: Some(0.01), momentum: momentum.then_some(SgdMomentum { momentum: 0.9, dampening: 0.1, nesterov: true }) };
    for (name, momentum, with_state) in [("sgd", false, false), ("sgd momentum, first step", true, false), ("sgd momentum", true, true)] {
        let rule = sgd(momentum);
        let state = || with_state.then(|| f::<Ex>(&s1));
        let (param, grad, velocity) = (f::<Ex>(&p), f::<Ex>(&g), state());
        let ((ours, ours_v), n) = counted(|| sgd_step(param, grad, velocity, &rule));
        let (param, grad, velocity) = (f::<Ex>(&p), f::<Ex>(&g), state());
        let ((old, old_v), old_n) = counted(|| {
            let (p, v) = sgd_step(widen(param), widen(grad), velocity.map(widen), &rule);
            (narrow(p), v.map(narrow))
        });
        eprintln!("{name}: {n} launch(es), {old_n} on the widen / compute / narrow path");
        let same = rf::<Ex>(ours).as_bytes() == rf::<Ex>(old).as_bytes() && ours_v.map(|v| rf::<Ex>(v).into_bytes().to_vec()) == old_v.map(|v| rf::<Ex>(v).into_bytes().to_vec());
        suite.record(format!("{name} {shape:?}: one launch, the same bits"), if n == 1 && same { Ok(()) } else { Err(format!("{n} launches, the same bits: {same}")) });
    }
    let configs = [("adam", AdamDecay::None, false, false), ("adamw amsgrad", AdamDecay::Decoupled { rate: 0.01, cautious: false }, true, true), ("adam l2", AdamDecay::L2(0.1), false, true)];
    for (name, decay, amsgrad, with_state) in configs {
        let rule = AdamRule { lr: 0.01, beta_1: 0.9, beta_2: 0.999, epsilon: 1e-5, decay, time: AdamTime::Host(3) };
        let state = || with_state.then(|| AdamMoments { moment_1: f::<Ex>(&s1), moment_2: f::<Ex>(&s2), max_moment_2: amsgrad.then(|| f::<Ex>(&s2)) });
        let wide = |m: AdamMoments<Rt>| AdamMoments { moment_1: widen(m.moment_1), moment_2: widen(m.moment_2), max_moment_2: m.max_moment_2.map(widen) };
        let bytes = |m: AdamMoments<Rt>| [Some(m.moment_1), Some(m.moment_2), m.max_moment_2].into_iter().flatten().map(|t| rf::<Ex>(t).into_bytes().to_vec()).collect::<Vec<_>>();
        let (param, grad, s) = (f::<Ex>(&p), f::<Ex>(&g), state());
        let ((ours, ours_s), n) = counted(|| adam_step(param, grad, s, &rule, amsgrad));
        let (param, grad, s) = (f::<Ex>(&p), f::<Ex>(&g), state());
        let ((old, old_s), old_n) = counted(|| {
            let (p, m) = adam_step(widen(param), widen(grad), s.map(wide), &rule, amsgrad);
            (narrow(p), AdamMoments { moment_1: narrow(m.moment_1), moment_2: narrow(m.moment_2), max_moment_2: m.max_moment_2.map(narrow) })
        });
        eprintln!("{name}: {n} launch(es), {old_n} on the widen / compute / narrow path");
        let same = rf::<Ex>(ours).as_bytes() == rf::<Ex>(old).as_bytes() && bytes(ours_s) == bytes(old_s);
        suite.record(format!("{name} {shape:?}: one launch, the same bits"), if n == 1 && same { Ok(()) } else { Err(format!("{n} launches, the same bits: {same}")) });
    }
    suite.finish();
}

#[test]
fn layer_norm_and_mask_fill_are_one_launch_with_the_same_bits() {
    use ex_cubecl::launch::norm::layer_norm;
    let _turn = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    if !held_as_bits() {
        return;
    }
    let mut suite = Suite::new("bf16 bits: layer norm, mask_fill");
    let mut rng = Rng::new(60);
    for (shape, with_beta) in [([6, 40], true), ([3, 17], false)] {
        let x = float_data(&mut rng, &shape, DType::BF16, -4.0, 4.0);
        let (gamma, beta) = (float_data(&mut rng, &shape[1..], DType::BF16, 0.5, 1.5), float_data(&mut rng, &shape[1..], DType::BF16, -1.0, 1.0));
        let inputs = || (f::<Ex>(&x), f::<Ex>(&gamma), with_beta.then(|| f::<Ex>(&beta)));
        let ((a, g, b), (c, h, d)) = (inputs(), inputs());
        check(
            &mut suite,
            format!("layer_norm {shape:?}{}", if with_beta { " with beta" } else { "" }),
            || float(|| layer_norm(a, g, b, 1e-5)),
            || float(|| narrow(layer_norm(widen(c), widen(h), d.map(widen), 1e-5))),
        );
    }
    // A signalling NaN (0x7f81) among the values: the widened path quiets it (0x7fc0).
    let mut values = float_data(&mut rng, &[5, 9], DType::BF16, -4.0, 4.0).to_vec::<burn_backend::bf16>().unwrap();
    values[1] = burn_backend::bf16::from_bits(0x7f81);
    values[2] = burn_backend::bf16::from_bits(0xff81);
    let x = TensorData::new(values, [5, 9]);
    let mask = bool_data(&mut rng, &[5, 9]);
    for s in [0.1, -2.5] {
        let (a, m, c, n) = (f::<Ex>(&x), b::<Ex>(&mask), f::<Ex>(&x), b::<Ex>(&mask));
        let s = Scalar::Float(s);
        check(&mut suite, format!("mask_fill {s:?}"), || float(|| Ex::float_mask_fill(a, m, s)), || float(|| narrow(Ex::float_mask_fill(widen(c), n, s))));
    }
    suite.finish();
}
