//! `Fusion<ExCubeclBackend<R>>`: Burn's fusion engine with our fusers. Random programs of
//! elementwise ops (float math, scalars, comparisons, masks, bool logic, casts, fills) over
//! broadcast and permuted inputs run on the fused backend, on the unfused one and on
//! burn-ndarray: the fused results must be the unfused ones bit for bit (each fused op
//! computes as its own kernel does) and match burn-ndarray within tolerance. Besides: the
//! launches a fused chain takes, a chain longer than any fixed limit, gradients through
//! `Autodiff<Fusion<_>>`, Burn's activations written as ops. The other fusers, fused
//! pipelines and failures have a file each under `fusion/`, in this one test binary.
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
/// against the unfused backend's, and in f32 and f64 within `tol` of burn-ndarray's. (burn-ndarray
/// computes f16 and bf16 in f32: a result that depends on a rounding, such as floor or a
/// comparison, can differ, so low precisions are checked against the unfused backend only.)
/// Output `j` is named `names(j)` after `label`.
#[allow(clippy::too_many_arguments)]
fn check_outputs(
    suite: &mut Suite,
    label: &str,
    dtype: DType,
    tol: Tol,
    names: impl Fn(usize) -> String,
    fused: Result<Vec<TensorData>, String>,
    unfused: Vec<TensorData>,
    reference: Vec<TensorData>,
) {
    for (j, (u, r)) in unfused.into_iter().zip(reference).enumerate() {
        let ours = fused.clone().map(|f| f[j].clone());
        suite.check(format!("{label}: {} as unfused", names(j)), Tol::EXACT, (ours.clone(), u));
        if dtype == DType::F32 || dtype == DType::F64 {
            suite.check(format!("{label}: {} as ndarray", names(j)), tol, (ours, r));
        }
    }
}

/// The kernels launched to compute and read back `f`'s results on the fused backend's default
/// device (the device synced before and after).
fn launches<const D: usize>(f: impl FnOnce() -> Vec<Tensor<Fused, D>>) -> u64 {
    let device = dev::<Fused>();
    Fused::sync(&device).unwrap();
    let before = launch_count();
    let outs = f();
    Fused::sync(&device).unwrap();
    drop(outs);
    launch_count() - before
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
            check_outputs(&mut suite, &label, dtype, Tol::of(1e-4), |j| format!("register {}", read[j]), fused, unfused, reference);
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

#[path = "fusion/lead.rs"]
mod lead;
#[path = "fusion/matmul.rs"]
mod matmul;
#[path = "fusion/pipeline.rs"]
mod pipeline;
#[path = "fusion/reduce.rs"]
mod reduce;
#[path = "fusion/reduce_pair.rs"]
mod reduce_pair;
#[path = "fusion/view_reduce.rs"]
mod view_reduce;
#[path = "fusion/widen.rs"]
mod widen;
