//! `Fusion<ExCubeclBackend<R>>`: Burn's fusion engine with our fusers. Random programs of
//! elementwise ops (float math, scalars, comparisons, masks, bool logic, casts, fills) over
//! broadcast and permuted inputs run on the fused backend, on the unfused one and on
//! burn-ndarray: the fused results must be the unfused ones bit for bit (each fused op
//! computes as its own kernel does) and match burn-ndarray within tolerance. Besides: the
//! launches a fused chain takes, a chain longer than any fixed limit, gradients through
//! `Autodiff<Fusion<_>>`, Burn's activations written as ops, reductions and matrix products
//! with elementwise work around them.
use std::sync::Mutex;

use burn_autodiff::Autodiff;
use burn_backend::{Backend, DType, TensorData};
use burn_tensor::{Bool, Tensor, activation};
use ex_cubecl::runtime::launch_count;
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_conformance::*;

type Fused = burn_fusion::Fusion<Ex>;

/// Launch counts are global: the tests of this file take turns.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A register of a program: a float or a bool tensor.
enum Value<B: Backend> {
    F(Tensor<B, 3>),
    B(Tensor<B, 3, Bool>),
}

impl<B: Backend> Clone for Value<B> {
    fn clone(&self) -> Self {
        match self {
            Value::F(t) => Value::F(t.clone()),
            Value::B(t) => Value::B(t.clone()),
        }
    }
}

/// One step of a program; operands are register indices (of the right kind, chosen when
/// the program is drawn).
#[derive(Clone, Copy, Debug)]
enum Step {
    Unary(u8, usize),
    Binary(u8, usize, usize),
    Scalar(u8, usize, f32),
    Compare(u8, usize, usize),
    CompareScalar(u8, usize, f32),
    IsNan(usize),
    Not(usize),
    And(usize, usize),
    Or(usize, usize),
    IntoFloat(usize),
    MaskWhere(usize, usize, usize),
    MaskFill(usize, usize, f32),
    Clamp(usize, f32, f32),
    Pow(usize, f32),
    ZerosLike(usize),
    Swap(usize),
}

const UNARY: u8 = 16;
const BINARY: u8 = 6;
const SCALAR: u8 = 5;
const COMPARE: u8 = 4;

/// A random program over `inputs` float inputs (the first of the full shape, the others
/// broadcasting to it): `steps` steps, then the registers read out. Every step's result has
/// the full shape: unary ops, comparisons and masks take full-shape registers first, and a
/// binary op's second operand may be any float register.
fn program(rng: &mut Rng, inputs: usize, steps: usize) -> (Vec<Step>, Vec<usize>) {
    // (float, full shape) per register.
    let mut kinds: Vec<(bool, bool)> = (0..inputs).map(|k| (true, k == 0)).collect();
    let mut out = Vec::new();
    let pick = |rng: &mut Rng, kinds: &[(bool, bool)], float: bool, full: bool| -> Option<usize> {
        let found: Vec<usize> = (0..kinds.len()).filter(|&k| kinds[k].0 == float && (kinds[k].1 || !full)).collect();
        (!found.is_empty()).then(|| found[rng.int(0, found.len() as i64) as usize])
    };
    while out.len() < steps {
        let f = pick(rng, &kinds, true, true).expect("a full float register");
        let g = pick(rng, &kinds, true, false).expect("float registers");
        let h = pick(rng, &kinds, true, true).expect("a full float register");
        let (b, c) = (pick(rng, &kinds, false, true), pick(rng, &kinds, false, true));
        let scalar = rng.float(-2.0, 2.0) as f32;
        let step = match (rng.int(0, 16), b, c) {
            (0..=3, ..) => Step::Unary(rng.int(0, UNARY as i64) as u8, f),
            (4..=5, ..) => Step::Binary(rng.int(0, BINARY as i64) as u8, f, g),
            (6, ..) => Step::Scalar(rng.int(0, SCALAR as i64) as u8, f, scalar),
            (7, ..) => Step::Compare(rng.int(0, COMPARE as i64) as u8, f, g),
            (8, ..) => Step::CompareScalar(rng.int(0, COMPARE as i64) as u8, f, scalar),
            (9, Some(b), _) => Step::MaskWhere(f, b, h),
            (10, Some(b), _) => Step::MaskFill(f, b, scalar),
            (11, Some(b), Some(c)) => [Step::And(b, c), Step::Or(b, c), Step::Not(b), Step::IntoFloat(b)][rng.int(0, 4) as usize],
            (12, ..) => Step::Clamp(f, scalar.min(0.5), scalar.max(0.5)),
            (13, ..) => Step::Pow(f, [2.0, 3.0, 0.5, -1.5][rng.int(0, 4) as usize]),
            (14, ..) => [Step::IsNan(f), Step::ZerosLike(f)][rng.int(0, 2) as usize],
            (15, ..) if rng.int(0, 3) == 0 => Step::Swap(f),
            _ => Step::Unary(rng.int(0, UNARY as i64) as u8, f),
        };
        let float = !matches!(step, Step::Compare(..) | Step::CompareScalar(..) | Step::IsNan(_) | Step::Not(_) | Step::And(..) | Step::Or(..));
        kinds.push((float, true));
        out.push(step);
    }
    // Read out the last two registers and a few others; the rest die inside the program.
    let n = kinds.len();
    let mut read = vec![n - 1, n - 2];
    read.extend((0..3).map(|_| rng.int(inputs as i64, n as i64) as usize));
    read.sort();
    read.dedup();
    (out, read)
}

/// Runs a program on `B`, the inputs uploaded as `dtype`; gives the registers read out.
fn run<B: Backend>(steps: &[Step], read: &[usize], inputs: &[TensorData], dtype: DType) -> Vec<TensorData> {
    let device = dev::<B>();
    let mut regs: Vec<Value<B>> = inputs.iter().map(|d| Value::F(Tensor::from_data(d.clone(), (&device, held::<B>(dtype))))).collect();
    let f = |regs: &[Value<B>], k: usize| match &regs[k] {
        Value::F(t) => t.clone(),
        Value::B(_) => unreachable!("a float register"),
    };
    let b = |regs: &[Value<B>], k: usize| match &regs[k] {
        Value::B(t) => t.clone(),
        Value::F(_) => unreachable!("a bool register"),
    };
    for step in steps {
        let value = match *step {
            Step::Unary(op, x) => {
                let x = f(&regs, x);
                Value::F(match op {
                    0 => x.exp(),
                    1 => x.log(),
                    2 => x.sqrt(),
                    3 => x.abs(),
                    4 => x.cos(),
                    5 => x.sin(),
                    6 => x.tanh(),
                    7 => x.erf(),
                    8 => x.recip(),
                    9 => x.floor(),
                    10 => x.ceil(),
                    11 => x.round(),
                    12 => x.neg(),
                    13 => x.tan(),
                    14 => x.sinh(),
                    _ => x.atan(),
                })
            }
            Step::Binary(op, x, y) => {
                let (x, y) = (f(&regs, x), f(&regs, y));
                Value::F(match op {
                    0 => x + y,
                    1 => x - y,
                    2 => x * y,
                    3 => x / y,
                    4 => x.powf(y),
                    _ => x.atan2(y),
                })
            }
            Step::Scalar(op, x, s) => {
                let x = f(&regs, x);
                Value::F(match op {
                    0 => x + s,
                    1 => x - s,
                    2 => x * s,
                    3 => x / s,
                    _ => x.remainder_scalar(s),
                })
            }
            Step::Compare(op, x, y) => {
                let (x, y) = (f(&regs, x), f(&regs, y));
                Value::B(match op {
                    0 => x.greater(y),
                    1 => x.lower_equal(y),
                    2 => x.equal(y),
                    _ => x.lower(y),
                })
            }
            Step::CompareScalar(op, x, s) => {
                let x = f(&regs, x);
                Value::B(match op {
                    0 => x.greater_elem(s),
                    1 => x.lower_equal_elem(s),
                    2 => x.equal_elem(s),
                    _ => x.lower_elem(s),
                })
            }
            Step::IsNan(x) => Value::B(f(&regs, x).is_nan()),
            Step::Not(x) => Value::B(b(&regs, x).bool_not()),
            Step::And(x, y) => Value::B(b(&regs, x).bool_and(b(&regs, y))),
            Step::Or(x, y) => Value::B(b(&regs, x).bool_or(b(&regs, y))),
            Step::IntoFloat(x) => Value::F(b(&regs, x).cast(burn_backend::FloatDType::from(held::<B>(dtype)))),
            Step::MaskWhere(x, m, y) => {
                let (x, y) = (f(&regs, x), f(&regs, y));
                Value::F(x.mask_where(b(&regs, m), y))
            }
            Step::MaskFill(x, m, s) => {
                let x = f(&regs, x);
                Value::F(x.mask_fill(b(&regs, m), s))
            }
            Step::Clamp(x, lo, hi) => Value::F(f(&regs, x).clamp(lo, hi)),
            Step::Pow(x, p) => Value::F(f(&regs, x).powf_scalar(p)),
            Step::ZerosLike(x) => Value::F(f(&regs, x).zeros_like()),
            Step::Swap(x) => {
                // A permuted view whose dims line up again after a second swap: a view op
                // inside the chain (not fused, it splits the block).
                let x = f(&regs, x);
                Value::F(x.swap_dims(0, 2).swap_dims(0, 2))
            }
        };
        regs.push(value);
    }
    let out = read.iter().map(|&k| match &regs[k] {
        Value::F(t) => t.clone().into_data(),
        Value::B(t) => t.clone().into_data(),
    });
    out.collect()
}

/// The dtype `B` holds `dtype` in: burn-ndarray computes f16 and bf16 in f32.
fn held<B: Backend>(dtype: DType) -> DType {
    let is_ref = std::any::TypeId::of::<B>() == std::any::TypeId::of::<Ref>();
    match is_ref && matches!(dtype, DType::F16 | DType::BF16) {
        true => DType::F32,
        false => dtype,
    }
}


/// Checks a case's outputs on the fused backend (`fused`, `Err` where it panicked): bit for bit
/// against the unfused backend's, and in f32 and f64 within 1e-4 of burn-ndarray's. (burn-ndarray
/// computes f16 and bf16 in f32: a result that depends on a rounding, such as floor or a
/// comparison, can differ, so low precisions are checked against the unfused backend only.)
/// Output `j` is named `names(j)` after `label`.
fn check_outputs(
    suite: &mut Suite,
    label: &str,
    dtype: DType,
    names: impl Fn(usize) -> String,
    fused: Result<Vec<TensorData>, String>,
    unfused: Vec<TensorData>,
    reference: Vec<TensorData>,
) {
    for (j, (u, r)) in unfused.into_iter().zip(reference).enumerate() {
        let ours = fused.clone().map(|f| f[j].clone());
        suite.check(format!("{label}: {} as unfused", names(j)), Tol::EXACT, (ours.clone(), u));
        if dtype == DType::F32 || dtype == DType::F64 {
            suite.check(format!("{label}: {} as ndarray", names(j)), Tol::of(1e-4), (ours, r));
        }
    }
}

/// The inputs of a case: the first of the full shape `[a, b, c]`, the others with some
/// dims 1 (broadcast by the ops that read them).
fn inputs(rng: &mut Rng, n: usize, shape: [usize; 3]) -> Vec<TensorData> {
    let mut out = vec![float_data(rng, &shape, DType::F32, -2.0, 2.0)];
    for _ in 1..n {
        let s: Vec<usize> = shape.iter().map(|&d| if rng.int(0, 3) == 0 { 1 } else { d }).collect();
        out.push(float_data(rng, &s, DType::F32, -2.0, 2.0));
    }
    out
}

#[test]
fn random_programs_match_unfused_bits_and_ndarray() {
    let _turn = serial();
    let mut suite = Suite::new("fusion programs");
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0xF05E + dtype.size() as u64);
        for case in 0..24 {
            let shape = [rng.int(1, 5) as usize, rng.int(1, 6) as usize, rng.int(1, 9) as usize];
            let n = rng.int(2, 5) as usize;
            let data = inputs(&mut rng, n, shape);
            let len = rng.int(3, 16) as usize;
            let (steps, read) = program(&mut rng, n, len);
            let label = format!("{dtype:?} case {case} shape {shape:?} steps {steps:?} read {read:?}");
            let fused = catch(|| run::<Fused>(&steps, &read, &data, dtype));
            let (unfused, reference) = (run::<Ex>(&steps, &read, &data, dtype), run::<Ref>(&steps, &read, &data, dtype));
            check_outputs(&mut suite, &label, dtype, |j| format!("register {}", read[j]), fused, unfused, reference);
        }
    }
    suite.finish();
}

#[test]
fn a_chain_is_one_launch() {
    let _turn = serial();
    let mut suite = Suite::new("fusion launches");
    let device = dev::<Fused>();
    let mut rng = Rng::new(7);
    let data = |rng: &mut Rng, s: &[usize]| float_data(rng, s, DType::F32, -1.0, 1.0);
    let (a, b, c) = (data(&mut rng, &[4, 8]), data(&mut rng, &[1, 8]), data(&mut rng, &[4, 1]));
    let chain = |a: Tensor<Fused, 2>, b: Tensor<Fused, 2>, c: Tensor<Fused, 2>| ((a.clone() + b).exp() * 2.0 - c).tanh().mask_fill(a.lower_elem(0.0), 0.5);
    let (ta, tb, tc) = (Tensor::from_data(a.clone(), &device), Tensor::from_data(b.clone(), &device), Tensor::from_data(c.clone(), &device));
    Fused::sync(&device).unwrap();
    let before = launch_count();
    let out = chain(ta, tb, tc);
    Fused::sync(&device).unwrap();
    let launches = launch_count() - before;
    suite.record("(a + b).exp() * 2 - c, tanh, mask_fill(a < 0): 7 ops in one launch", if launches == 1 { Ok(()) } else { Err(format!("{launches} launches")) });
    let reference = {
        let d = dev::<Ref>();
        let (a, b, c) = (Tensor::<Ref, 2>::from_data(a, &d), Tensor::from_data(b, &d), Tensor::from_data(c, &d));
        ((a.clone() + b).exp() * 2.0 - c).tanh().mask_fill(a.lower_elem(0.0), 0.5).into_data()
    };
    suite.check("the chain's values", Tol::of(1e-5), (Ok(out.into_data()), reference));
    suite.finish();
}

#[test]
fn a_long_chain_and_many_inputs() {
    let _turn = serial();
    let mut suite = Suite::new("fusion long chains");
    let mut rng = Rng::new(11);
    // 300 ops: longer than any fixed limit; the block ends only at the sync.
    let x = float_data(&mut rng, &[3, 5], DType::F32, -1.0, 1.0);
    fn long<B: Backend>(x: &TensorData) -> TensorData {
        let mut t = Tensor::<B, 2>::from_data(x.clone(), &dev::<B>());
        for k in 0..100 {
            t = (t * 0.9 + (k as f32) * 1e-3).tanh();
        }
        t.into_data()
    }
    let fused = catch(|| long::<Fused>(&x));
    suite.check("300 ops as unfused", Tol::EXACT, (fused.clone(), long::<Ex>(&x)));
    suite.check("300 ops as ndarray", Tol::of(1e-5), (fused, long::<Ref>(&x)));
    // More inputs than the device binds to one kernel: the block splits, results stay.
    let inputs: Vec<TensorData> = (0..40).map(|_| float_data(&mut rng, &[6], DType::F32, -1.0, 1.0)).collect();
    fn sum<B: Backend>(inputs: &[TensorData]) -> TensorData {
        let d = dev::<B>();
        let mut it = inputs.iter().map(|x| Tensor::<B, 1>::from_data(x.clone(), &d));
        let first = it.next().unwrap();
        it.fold(first, |acc, x| acc * 0.5 + x).into_data()
    }
    let fused = catch(|| sum::<Fused>(&inputs));
    suite.check("40 inputs as unfused", Tol::EXACT, (fused.clone(), sum::<Ex>(&inputs)));
    suite.check("40 inputs as ndarray", Tol::of(1e-5), (fused, sum::<Ref>(&inputs)));
    suite.finish();
}

#[test]
fn outputs_alias_and_inputs_survive() {
    let _turn = serial();
    let mut suite = Suite::new("fusion aliasing");
    let device = dev::<Fused>();
    let mut rng = Rng::new(13);
    let x = float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0);
    let t = Tensor::<Fused, 2>::from_data(x.clone(), &device);
    // An intermediate read by later ops and also kept; an input used after the block; the
    // same tensor on both sides of an op.
    let a = t.clone() * 2.0;
    let b = (a.clone() + a.clone()).exp();
    let c = b.clone() - t.clone();
    let reference = |x: &TensorData| {
        let t = Tensor::<Ref, 2>::from_data(x.clone(), &dev::<Ref>());
        let a = t.clone() * 2.0;
        let b = (a.clone() + a.clone()).exp();
        [a.clone().into_data(), b.clone().into_data(), (b - t.clone()).into_data(), t.into_data()]
    };
    let [ra, rb, rc, rt] = reference(&x);
    suite.check("kept intermediate", Tol::of(1e-5), (Ok(a.into_data()), ra));
    suite.check("intermediate read twice", Tol::of(1e-5), (Ok(b.into_data()), rb));
    suite.check("last value", Tol::of(1e-5), (Ok(c.into_data()), rc));
    suite.check("input after the block", Tol::EXACT, (Ok(t.into_data()), rt));
    // A block of fills alone (nothing read from memory) ahead of a reduction.
    fn fills<B: Backend>() -> TensorData {
        let ones = Tensor::<B, 2>::ones([3, 4], &dev::<B>()) * 0.5;
        (ones.clone() + ones).sum_dim(1).into_data()
    }
    suite.check("fills alone", Tol::EXACT, (catch(fills::<Fused>), fills::<Ref>()));
    suite.finish();
}

#[test]
fn gradients_through_fusion() {
    let _turn = serial();
    let mut suite = Suite::new("fusion autodiff");
    let mut rng = Rng::new(17);
    let (x, w) = (float_data(&mut rng, &[4, 6], DType::F32, -1.0, 1.0), float_data(&mut rng, &[1, 6], DType::F32, -1.0, 1.0));
    fn grads<B: burn_tensor::backend::AutodiffBackend>(x: &TensorData, w: &TensorData) -> [TensorData; 3] {
        let d = dev::<B>();
        let x = Tensor::<B, 2>::from_data(x.clone(), &d).require_grad();
        let w = Tensor::<B, 2>::from_data(w.clone(), &d).require_grad();
        let y = activation::relu(x.clone() * w.clone() + 0.1).tanh() * 3.0 - activation::sigmoid(x.clone());
        let loss = (y.clone() * y.clone()).sum();
        let g = loss.backward();
        [y.into_data(), x.grad(&g).unwrap().into_data(), w.grad(&g).unwrap().into_data()]
    }
    let fused = grads::<Autodiff<Fused>>(&x, &w);
    let reference = grads::<Autodiff<Ref>>(&x, &w);
    for (name, (ours, theirs)) in ["value", "x grad", "w grad"].into_iter().zip(fused.into_iter().zip(reference)) {
        suite.check(format!("relu, tanh, sigmoid: {name}"), Tol::of(1e-4), (Ok(ours), theirs));
    }
    suite.finish();
}

#[test]
fn activations_as_ops() {
    let _turn = serial();
    let mut suite = Suite::new("fusion activations");
    let mut rng = Rng::new(19);
    for dtype in float_dtypes() {
        let x = float_data(&mut rng, &[3, 7], DType::F32, -3.0, 3.0);
        fn acts<B: Backend>(x: &TensorData, dtype: DType) -> Vec<TensorData> {
            let t = Tensor::<B, 2>::from_data(x.clone(), (&dev::<B>(), held::<B>(dtype)));
            vec![
                activation::relu(t.clone()).into_data(),
                activation::sigmoid(t.clone()).into_data(),
                activation::gelu(t.clone()).into_data(),
                activation::leaky_relu(t.clone(), 0.1).into_data(),
                activation::hard_sigmoid(t.clone(), 0.2, 0.5).into_data(),
                activation::silu(t.clone()).into_data(),
                activation::softplus(t.clone(), 1.0).into_data(),
                activation::softmax(t.clone(), 1).into_data(),
                activation::log_softmax(t.clone(), 0).into_data(),
                activation::mish(t).into_data(),
            ]
        }
        let ours = catch(|| acts::<Fused>(&x, dtype));
        for (j, r) in acts::<Ref>(&x, dtype).into_iter().enumerate() {
            suite.check(format!("{dtype:?} activation {j}"), Tol::of(1e-5).for_dtype(dtype), (ours.clone().map(|o| o[j].clone()), r));
        }
    }
    suite.finish();
}

/// Burn's composites of elementwise ops (`fmod`, `trunc`, `ceil`, `sign`, clamps): the
/// fuser must tell apart what the engine's relative stream records (it records `trunc` as
/// `Ceil`).
#[test]
fn burn_composites_as_ops() {
    let _turn = serial();
    let mut suite = Suite::new("fusion composites");
    let mut rng = Rng::new(23);
    let x = float_data(&mut rng, &[3, 5], DType::F32, -6.0, 6.0);
    let y = float_data(&mut rng, &[3, 5], DType::F32, 0.5, 3.0);
    fn ops<B: Backend>(x: &TensorData, y: &TensorData) -> Vec<TensorData> {
        let d = dev::<B>();
        let (x, y) = (Tensor::<B, 2>::from_data(x.clone(), &d), Tensor::<B, 2>::from_data(y.clone(), &d));
        vec![
            x.clone().fmod(y.clone()).into_data(),
            x.clone().fmod_scalar(1.5).into_data(),
            (x.clone() * 1.5).trunc().into_data(),
            (x.clone() * 1.5).ceil().into_data(),
            ((x.clone() * 1.5).trunc() + (x.clone() * 1.5).ceil()).into_data(),
            x.clone().sign().into_data(),
            x.clone().clamp_min(-1.0).clamp_max(2.0).into_data(),
            x.remainder(y).into_data(),
        ]
    }
    let fused = catch(|| ops::<Fused>(&x, &y));
    for (j, r) in ops::<Ref>(&x, &y).into_iter().enumerate() {
        suite.check(format!("composite {j}"), Tol::of(1e-5), (fused.clone().map(|f| f[j].clone()), r));
    }
    suite.finish();
}

/// A product and elementwise work on it: 0, `relu(x @ w + b)`; 1, `tanh(x @ w * 0.5 + c)`
/// with the product read out too; 2, `linear(x, w, b)`, then `y / (exp(-y) + 1)`;
/// 3, `linear(x, w)` without bias, then `exp` and a mask of it. `x` is `[batch, m, k]` (held
/// `[batch, k, m]` and transposed where `transposed`), `w` `[k, n]` (held `[n, k]` and
/// transposed), `b` `[n]`, `c` `[batch, 1, n]`.
fn matmul_case<B: Backend>(data: &[TensorData; 4], dtype: DType, case: usize, transposed: bool) -> Vec<TensorData> {
    let d = dev::<B>();
    let held = (&d, held::<B>(dtype));
    let (x, w) = (Tensor::<B, 3>::from_data(data[0].clone(), held), Tensor::<B, 2>::from_data(data[1].clone(), held));
    let (b, c) = (Tensor::<B, 1>::from_data(data[2].clone(), held), Tensor::<B, 3>::from_data(data[3].clone(), held));
    let (x, w) = match transposed {
        true => (x.swap_dims(1, 2), w.transpose()),
        false => (x, w),
    };
    // `b`'s view is taken between the product and the addition (case 0), as `linear` does.
    let w3 = w.clone().unsqueeze::<3>();
    let out = match case {
        0 => {
            let p = x.matmul(w3);
            vec![activation::relu(p + b.unsqueeze::<3>())]
        }
        1 => {
            let p = x.matmul(w3);
            vec![(p.clone() * 0.5 + c).tanh(), p]
        }
        2 => {
            let y = burn_tensor::module::linear(x, w, Some(b));
            vec![y.clone() / ((-y).exp() + 1.0)]
        }
        _ => {
            let y = burn_tensor::module::linear(x, w, None);
            vec![y.clone().exp(), y.clone().mask_fill(y.lower_elem(0.0), 0.25)]
        }
    };
    out.into_iter().map(Tensor::into_data).collect()
}

#[test]
fn matmul_epilogues_match_unfused_bits_and_ndarray() {
    let _turn = serial();
    let mut suite = Suite::new("fusion matmul epilogues");
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x3A7 + dtype.size() as u64);
        // Products of at least 16 rows and columns (tensor-core kernels where the device has
        // them), and in f32 small products and tiles of the large tiling (over 64 rows and
        // columns) too.
        let shapes = [[2, 17, 12, 20], [2, 3, 5, 4], [1, 7, 1, 9], [1, 70, 9, 66]];
        let shapes = if dtype == DType::F32 { &shapes[..] } else { &shapes[..1] };
        for (k, &[batch, m, kk, n]) in shapes.iter().enumerate() {
            for case in 0..4 {
                let transposed = (k + case) % 2 == 1;
                let (x_shape, w_shape) = match transposed {
                    true => ([batch, kk, m], [n, kk]),
                    false => ([batch, m, kk], [kk, n]),
                };
                let data = [
                    float_data(&mut rng, &x_shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &w_shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &[n], DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &[batch, 1, n], DType::F32, -1.0, 1.0),
                ];
                let label = format!("{dtype:?} [{batch}, {m}, {kk}] @ [{kk}, {n}] case {case} transposed {transposed}");
                let fused = catch(|| matmul_case::<Fused>(&data, dtype, case, transposed));
                let (unfused, reference) = (matmul_case::<Ex>(&data, dtype, case, transposed), matmul_case::<Ref>(&data, dtype, case, transposed));
                check_outputs(&mut suite, &label, dtype, |j| format!("output {j}"), fused, unfused, reference);
            }
        }
    }
    suite.finish();
}

#[test]
fn a_layer_is_one_launch() {
    let _turn = serial();
    let mut suite = Suite::new("fusion matmul launches");
    let mut rng = Rng::new(31);
    let x = float_data(&mut rng, &[5, 12], DType::F32, -1.0, 1.0);
    let w = float_data(&mut rng, &[12, 8], DType::F32, -1.0, 1.0);
    let b = float_data(&mut rng, &[8], DType::F32, -1.0, 1.0);
    fn layer<B: Backend>(x: &TensorData, w: &TensorData, b: &TensorData, linear: bool) -> Tensor<B, 2> {
        let d = dev::<B>();
        let (x, w, b) = (Tensor::<B, 2>::from_data(x.clone(), &d), Tensor::<B, 2>::from_data(w.clone(), &d), Tensor::<B, 1>::from_data(b.clone(), &d));
        match linear {
            true => activation::relu(burn_tensor::module::linear(x, w, Some(b))),
            false => activation::relu(x.matmul(w) + b.unsqueeze::<2>()),
        }
    }
    let d = dev::<Fused>();
    for linear in [false, true] {
        let name = if linear { "relu(linear(x, w, b))" } else { "relu(x @ w + b)" };
        Fused::sync(&d).unwrap();
        let before = launch_count();
        let out = layer::<Fused>(&x, &w, &b, linear).into_data();
        Fused::sync(&d).unwrap();
        let launches = launch_count() - before;
        // The tiled kernel runs f32 products on lavapipe (and exact f32 products everywhere).
        suite.record(format!("{name}: 1 launch"), if launches == 1 { Ok(()) } else { Err(format!("{launches} launches")) });
        suite.check(name, Tol::of(1e-5), (Ok(out), layer::<Ref>(&x, &w, &b, linear).into_data()));
    }
    suite.finish();
}

/// An MLP step with SGD written on `B`: inputs x `[8, 6]` and one-hot targets `[8, 3]`, state
/// w1 `[6, 8]`, b1 `[1, 8]`, w2 `[8, 3]`, b2 `[1, 3]`; gives the loss `[1, 1]` and the new state.
fn sgd_step<B: Backend>(inputs: Vec<Tensor<B, 2>>, state: Vec<Tensor<B, 2>>) -> (Vec<Tensor<B, 2>>, Vec<Tensor<B, 2>>) {
    let [x, y] = <[Tensor<B, 2>; 2]>::try_from(inputs).ok().unwrap().map(Tensor::<Autodiff<B>, 2>::from_inner);
    let params: Vec<Tensor<Autodiff<B>, 2>> = state.iter().map(|p| Tensor::from_inner(p.clone()).require_grad()).collect();
    let h = activation::relu(x.matmul(params[0].clone()) + params[1].clone());
    let logits = h.matmul(params[2].clone()) + params[3].clone();
    let loss = (activation::log_softmax(logits, 1) * y).sum_dim(1).mean().neg();
    let grads = loss.backward();
    let new_state = params.iter().zip(state).map(|(p, s)| s - p.grad(&grads).unwrap() * 0.1).collect();
    (vec![loss.inner().reshape([1, 1])], new_state)
}

#[test]
fn a_pipeline_replays_fused_launches() {
    use burn_backend::TensorPrimitive;
    use burn_backend::ops::FloatTensorOps;
    use ex_cubecl::runtime::Pipeline;
    let _turn = serial();
    let mut suite = Suite::new("fusion pipelines");
    let mut rng = Rng::new(37);
    let labels: Vec<f32> = (0..24).map(|k| (k % 3 == (k / 3) % 3) as u8 as f32).collect();
    let inputs = vec![float_data(&mut rng, &[8, 6], DType::F32, -1.0, 1.0), TensorData::new(labels, [8, 3])];
    let state: Vec<TensorData> = [[6, 8], [1, 8], [8, 3], [1, 3]].iter().map(|s| float_data(&mut rng, s, DType::F32, -0.5, 0.5)).collect();
    let on = |ts: &[TensorData]| -> Vec<CubeTensor<Rt>> { ts.iter().map(|t| Ex::float_from_data(t.clone(), &dev::<Ex>())).collect() };
    fn eager<B: Backend>(inputs: &[TensorData], state: &[TensorData], steps: usize) -> Vec<Vec<TensorData>> {
        let d = dev::<B>();
        let tensors = |ts: &[TensorData]| ts.iter().map(|t| Tensor::<B, 2>::from_data(t.clone(), &d)).collect::<Vec<_>>();
        let (inputs, mut state) = (tensors(inputs), tensors(state));
        let mut out = Vec::new();
        for _ in 0..steps {
            let (loss, next) = sgd_step(inputs.clone(), state);
            state = next;
            out.push(loss.into_iter().chain(state.clone()).map(Tensor::into_data).collect());
        }
        out
    }
    let to_tensor = |t| Tensor::<Fused, 2>::from_primitive(TensorPrimitive::Float(t));
    let to_primitive = |t: Tensor<Fused, 2>| t.into_primitive().tensor();
    let captured = Pipeline::capture_fused_with_state(&dev::<Ex>(), &on(&inputs), &on(&state), |ins, st| {
        let (outputs, new_state) = sgd_step(ins.into_iter().map(to_tensor).collect(), st.into_iter().map(to_tensor).collect());
        (outputs.into_iter().map(to_primitive).collect(), new_state.into_iter().map(to_primitive).collect())
    });
    let (pipeline, first) = match captured {
        Ok(captured) => captured,
        Err(e) => panic!("the fused capture failed: {e}"),
    };
    // Three steps: the capture's, then two replays.
    let mut ours = vec![first];
    let cube_inputs = on(&inputs);
    Fused::sync(&dev::<Fused>()).unwrap();
    let before = launch_count();
    ours.push(pipeline.run(&cube_inputs).unwrap());
    let replay_launches = launch_count() - before;
    ours.push(pipeline.run(&cube_inputs).unwrap());
    let fused_eager = eager::<Fused>(&inputs, &state, 3);
    let unfused_eager = eager::<Ex>(&inputs, &state, 3);
    for (step, ((loss, fused), unfused)) in ours.iter().zip(&fused_eager).zip(&unfused_eager).enumerate() {
        let loss = rf::<Ex>(loss[0].clone());
        suite.check(format!("step {step}: the loss as eager fused execution"), Tol::EXACT, (Ok(loss.clone()), fused[0].clone()));
        suite.check(format!("step {step}: the loss as the unfused backend"), Tol::of(1e-5), (Ok(loss), unfused[0].clone()));
    }
    let state_after: Vec<TensorData> = pipeline.state().unwrap().into_iter().map(rf::<Ex>).collect();
    for (k, (ours, theirs)) in state_after.into_iter().zip(fused_eager[2][1..].iter()).enumerate() {
        suite.check(format!("state {k} after three steps as eager fused execution"), Tol::EXACT, (Ok(ours), theirs.clone()));
    }
    // The unfused capture of the same step, for its launch count.
    let unfused = Pipeline::capture_with_state(&dev::<Ex>(), &on(&inputs), &on(&state), |ins, st| {
        let t = |ts: Vec<CubeTensor<Rt>>| ts.into_iter().map(|t| Tensor::<Ex, 2>::from_primitive(TensorPrimitive::Float(t))).collect();
        let (outputs, new_state) = sgd_step::<Ex>(t(ins), t(st));
        let p = |ts: Vec<Tensor<Ex, 2>>| ts.into_iter().map(|t| t.into_primitive().tensor()).collect();
        (p(outputs), p(new_state))
    });
    let unfused_launches = unfused.unwrap().0.num_launches();
    let fused_launches = pipeline.num_launches();
    println!("fusion pipelines: the SGD step replays {fused_launches} launches ({replay_launches} with its input copies), unfused {unfused_launches}");
    let fewer = fused_launches < unfused_launches && replay_launches as usize >= fused_launches;
    suite.record(
        format!("a replay runs the fused launches ({fused_launches} recorded, {replay_launches} in a replay; unfused {unfused_launches})"),
        if fewer { Ok(()) } else { Err("not fewer launches than unfused".into()) },
    );
    suite.finish();
}

#[test]
fn fused_captures_give_errors_and_leave_the_device_usable() {
    use burn_backend::TensorPrimitive;
    use burn_backend::ops::FloatTensorOps;
    use ex_cubecl::runtime::{Pipeline, PipelineError};
    let _turn = serial();
    let mut suite = Suite::new("fusion pipeline errors");
    let data = TensorData::new(vec![1.0f32, -2.0, 3.0], [3]);
    let x = Ex::float_from_data(data.clone(), &dev::<Ex>());
    let tensor = |t| Tensor::<Fused, 1>::from_primitive(TensorPrimitive::Float(t));
    // A host read inside the step: refused, named.
    let read = Pipeline::capture_fused(&dev::<Ex>(), std::slice::from_ref(&x), |ins| {
        let y = tensor(ins[0].clone()) * 2.0;
        let _ = y.clone().into_data();
        vec![y.into_primitive().tensor()]
    });
    let got = match read {
        Err(PipelineError::HostRead { op }) => Ok(op),
        Err(e) => Err(format!("the wrong error: {e}")),
        Ok(_) => Err("a capture with a host read succeeded".into()),
    };
    suite.record("a host read in a fused capture is a HostRead error", got.map(|_| ()));
    // A panic inside the step (shapes that don't broadcast): an error naming it.
    let bad = Pipeline::capture_fused(&dev::<Ex>(), std::slice::from_ref(&x), |ins| {
        let y = tensor(ins[0].clone()).reshape([3, 1]) + Tensor::<Fused, 2>::ones([2, 2], &dev::<Fused>());
        vec![y.into_primitive().tensor()]
    });
    let got = match bad {
        Err(PipelineError::CapturePanicked { message }) => Ok(message),
        Err(e) => Err(format!("the wrong error: {e}")),
        Ok(_) => Err("a capture that panics succeeded".into()),
    };
    suite.record("a panic in a fused capture is a CapturePanicked error", got.map(|_| ()));
    // The fused device and captures still work.
    let y = (Tensor::<Fused, 1>::from_data(data.clone(), &dev::<Fused>()) * 2.0 + 1.0).into_data();
    suite.check("fused ops after failed captures", Tol::EXACT, (Ok(y), TensorData::new(vec![3.0f32, -3.0, 7.0], [3])));
    let pipeline = Pipeline::capture_fused(&dev::<Ex>(), std::slice::from_ref(&x), |ins| vec![(tensor(ins[0].clone()) * 2.0 + 1.0).into_primitive().tensor()]);
    let replayed = pipeline.map_err(|e| e.to_string()).and_then(|p| p.run(std::slice::from_ref(&x)).map_err(|e| e.to_string()));
    suite.check("a fused capture after failed ones", Tol::EXACT, (replayed.map(|out| rf::<Ex>(out[0].clone())), TensorData::new(vec![3.0f32, -3.0, 7.0], [3])));
    suite.finish();
}

/// A tensor larger than the device takes, asked for on one thread: burn-fusion's engine
/// refuses it while running that thread's operations, the read of its result fails there,
/// and another thread's work on the same device, before and after, is untouched (it used
/// to be handed the failure as the device's).
#[test]
fn a_refused_allocation_fails_only_its_reader() {
    use cubecl::Runtime;
    let _turn = serial();
    let mut suite = Suite::new("fusion refused allocation");
    let limit = Rt::client(&dev::<Ex>()).properties().memory.max_page_size as usize;
    let data = TensorData::new(vec![1.0f32, -2.0, 3.0], [3]);
    let expected = TensorData::new(vec![3.0f32, -3.0, 7.0], [3]);
    let x = Tensor::<Fused, 1>::from_data(data, &dev::<Fused>());
    let y = x.clone() * 2.0 + 1.0;
    let thread = std::thread::spawn(move || {
        let refused = catch(|| Tensor::<Fused, 1>::zeros([limit / 4 + 1], &dev::<Fused>()).sum().into_data());
        let after = catch(|| (Tensor::<Fused, 1>::from_data([1.0f32, -2.0, 3.0], &dev::<Fused>()) * 2.0 + 1.0).into_data());
        (refused, after)
    });
    let (refused, after) = thread.join().expect("the thread died outside its reads");
    suite.record("the read of a refused tensor fails", match refused {
        Err(_) => Ok(()),
        Ok(_) => Err("a tensor over the device's limit was made".into()),
    });
    // burn-fusion 0.21 keeps the failed operation in that thread's stream and runs it again on
    // each later read there, which fails too: never a wrong value.
    suite.record("the same thread's later reads fail or are right", match after {
        Ok(d) if d != expected => Err(format!("a wrong value after the failure: {d:?}")),
        _ => Ok(()),
    });
    suite.check("work registered before it, read after", Tol::EXACT, (catch(|| y.into_data()), expected.clone()));
    suite.check("work registered after it", Tol::EXACT, (catch(|| (x * 2.0 + 1.0).into_data()), expected));
    suite.record("the device syncs", catch(|| Fused::sync(&dev::<Fused>())).and_then(|r| r.map_err(|e| format!("{e:?}"))));
    suite.finish();
}

/// A reduction with elementwise work on both sides: `t = u(x * y + s)` over the input shape,
/// `r = reduce(t, axis)`, `w = v(r op z)` over the reduced shape (`z` broadcast to it); `t`
/// and `r` are read out in some cases (outputs of both programs).
fn reduce_case<B: Backend>(inputs: &[TensorData; 3], dtype: DType, case: [usize; 6], axis: usize, keep: bool) -> Vec<TensorData> {
    let d = dev::<B>();
    let [x, y, z] = inputs.clone().map(|t| Tensor::<B, 3>::from_data(t, (&d, held::<B>(dtype))));
    let [u, kind, op, v, ..] = case;
    let t = x * y + 0.25;
    let t = match u {
        0 => t.exp(),
        1 => t.tanh(),
        2 => t.abs(),
        _ => t.sin(),
    };
    let r = match kind {
        0 => t.clone().sum_dim(axis),
        1 => t.clone().mean_dim(axis),
        2 => t.clone().max_dim(axis),
        3 => t.clone().min_dim(axis),
        _ => (t.clone() * 0.5 + 1.0).prod_dim(axis),
    };
    let w = match op {
        0 => r.clone() + z,
        1 => r.clone() * z,
        2 => r.clone() / (z.abs() + 1.0),
        _ => r.clone() - z,
    };
    let w = match v {
        0 => w.exp(),
        1 => w.log(),
        _ => w * 2.0,
    };
    let mut out = vec![w.into_data()];
    if keep {
        out.push(t.into_data());
        out.push(r.into_data());
    }
    out
}

#[test]
fn reductions_with_elementwise_work_around_them() {
    let _turn = serial();
    let mut suite = Suite::new("fusion reductions");
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x5ED + dtype.size() as u64);
        // Short lines (a unit per line), long lines (a cube per line), few very long lines
        // (split: the read program, the reduction and the write program one by one).
        for (k, shape) in [[3, 5, 7], [2, 4, 9], [1, 3, 700], [4, 600, 1], [1, 1, 5000]].into_iter().enumerate() {
            for rep in 0..4 {
                let axis = if k >= 2 { (0..3).find(|&a| shape[a] >= 600).unwrap() } else { rng.int(0, 3) as usize };
                let mut reduced = shape;
                reduced[axis] = 1;
                let y_shape: Vec<usize> = shape.iter().map(|&n| if rng.int(0, 2) == 0 { 1 } else { n }).collect();
                let z_shape: Vec<usize> = reduced.iter().map(|&n| if rng.int(0, 2) == 0 { 1 } else { n }).collect();
                let inputs = [
                    float_data(&mut rng, &shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &y_shape, DType::F32, -1.0, 1.0),
                    float_data(&mut rng, &z_shape, DType::F32, -1.0, 1.0),
                ];
                let case = [rng.int(0, 4), rng.int(0, 5), rng.int(0, 4), rng.int(0, 3), 0, 0].map(|v| v as usize);
                let keep = rep % 2 == 1;
                let label = format!("{dtype:?} shape {shape:?} axis {axis} y {y_shape:?} z {z_shape:?} case {case:?} keep {keep}");
                let fused = catch(|| reduce_case::<Fused>(&inputs, dtype, case, axis, keep));
                let (unfused, reference) = (reduce_case::<Ex>(&inputs, dtype, case, axis, keep), reduce_case::<Ref>(&inputs, dtype, case, axis, keep));
                check_outputs(&mut suite, &label, dtype, |j| format!("output {j}"), fused, unfused, reference);
            }
        }
    }
    suite.finish();
}

#[test]
fn softmax_and_layer_norm_as_ops_take_few_launches() {
    let _turn = serial();
    let mut suite = Suite::new("fusion reduction launches");
    let mut rng = Rng::new(29);
    let x = float_data(&mut rng, &[6, 40], DType::F32, -3.0, 3.0);
    let g = float_data(&mut rng, &[1, 40], DType::F32, -1.0, 1.0);
    fn softmax<B: Backend>(x: Tensor<B, 2>) -> Tensor<B, 2> {
        let e = (x.clone() - x.max_dim(1)).exp();
        e.clone() / e.sum_dim(1)
    }
    fn layer_norm<B: Backend>(x: Tensor<B, 2>, g: Tensor<B, 2>) -> Tensor<B, 2> {
        let centred = x.clone() - x.mean_dim(1);
        let var = (centred.clone() * centred.clone()).mean_dim(1);
        centred / (var + 1e-5).sqrt() * g
    }
    let d = dev::<Fused>();
    let (tx, tg) = (Tensor::<Fused, 2>::from_data(x.clone(), &d), Tensor::<Fused, 2>::from_data(g.clone(), &d));
    let count = |f: &dyn Fn() -> Tensor<Fused, 2>| {
        Fused::sync(&d).unwrap();
        let before = launch_count();
        let out = f();
        Fused::sync(&d).unwrap();
        (launch_count() - before, out.into_data())
    };
    let (launches, ours) = count(&|| softmax(tx.clone()));
    // Burn's own decomposition: our softmax kernel, one launch (5 unfused).
    suite.record("softmax as ops: 1 launch", if launches == 1 { Ok(()) } else { Err(format!("{launches} launches")) });
    let rd = dev::<Ref>();
    suite.check("softmax as ops", Tol::of(1e-5), (Ok(ours), softmax(Tensor::<Ref, 2>::from_data(x.clone(), &rd)).into_data()));
    let (launches, ours) = count(&|| activation::log_softmax(tx.clone(), 1));
    suite.record("log_softmax: 1 launch", if launches == 1 { Ok(()) } else { Err(format!("{launches} launches")) });
    suite.check("log_softmax", Tol::of(1e-5), (Ok(ours), activation::log_softmax(Tensor::<Ref, 2>::from_data(x.clone(), &rd), 1).into_data()));
    // The max kept for later: no softmax kernel (it gives no max), the values all the same:
    // the max, sub-exp-sum (one launch), the division, `m * 0` and the sum.
    let (launches, ours) = count(&|| {
        let m = tx.clone().max_dim(1);
        let e = (tx.clone() - m.clone()).exp();
        e.clone() / e.sum_dim(1) + m * 0.0
    });
    suite.record("softmax keeping its max: 5 launches", if launches == 5 { Ok(()) } else { Err(format!("{launches} launches")) });
    // Under autodiff, which keeps `exp`'s and `log`'s values for the backward pass: the max,
    // then sub-exp-sum-log (one launch), then the last sub.
    type AdFused = Autodiff<Fused>;
    let ad = Tensor::<AdFused, 2>::from_data(x.clone(), &dev::<AdFused>()).require_grad();
    AdFused::sync(&d).unwrap();
    let before = launch_count();
    let y = activation::log_softmax(ad.clone(), 1);
    AdFused::sync(&d).unwrap();
    let launches = launch_count() - before;
    suite.record("log_softmax under autodiff: 3 launches", if launches == 3 { Ok(()) } else { Err(format!("{launches} launches")) });
    suite.check("log_softmax under autodiff", Tol::of(1e-5), (Ok(y.into_data()), activation::log_softmax(Tensor::<Ref, 2>::from_data(x.clone(), &rd), 1).into_data()));
    suite.check("softmax keeping its max", Tol::of(1e-5), (Ok(ours), softmax(Tensor::<Ref, 2>::from_data(x.clone(), &rd)).into_data()));
    let (launches, ours) = count(&|| layer_norm(tx.clone(), tg.clone()));
    // mean, then sub-square-mean, then the rest: 3 launches (8 unfused).
    suite.record("layer norm as ops: 3 launches", if launches == 3 { Ok(()) } else { Err(format!("{launches} launches")) });
    let reference = layer_norm(Tensor::<Ref, 2>::from_data(x, &rd), Tensor::from_data(g, &rd)).into_data();
    suite.check("layer norm as ops", Tol::of(1e-4), (Ok(ours), reference));
    suite.finish();
}
