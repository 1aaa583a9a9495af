//! Pipelines with state (`Pipeline::capture_with_state`): training steps with the fused
//! optimizers (Adam with the step count on the device, SGD with momentum) replayed N times
//! give bit for bit what N eager steps give; state updated in place costs no copy launch;
//! a new state that is a fresh tensor is copied, also when the new states swap buffers;
//! `state` / `set_state` round trip; bad new state, bad `set_state` and aliasing of state
//! updated in place give errors that name the index, shapes and dtypes. Runs bind their
//! inputs and outputs rather than copying them where they can: contiguous inputs are read
//! where the caller has them, outputs are written where the caller gets them, and only
//! views of constants, state and copied inputs are copied out.
//!
//! The launch counter is process-wide, so the tests of this file take one lock.
use std::sync::Mutex;

use burn_autodiff::Autodiff;
use burn_backend::ops::{FloatTensorOps, IntTensorOps};
use burn_backend::{DType, TensorData};
use burn_tensor::{Float, Tensor};
use ex_cubecl::launch::optim::{
    AdamDecay, AdamMoments, AdamRule, AdamTime, SgdMomentum, SgdRule, adam_step, next_step_count, sgd_step,
};
use ex_cubecl::runtime::{Pipeline, from_cube, launch_count, to_cube};
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_conformance::*;

type T = CubeTensor<Rt>;
type A = Autodiff<Ex>;

static LAUNCHES: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    LAUNCHES.lock().unwrap_or_else(|e| e.into_inner())
}

fn float<const D: usize>(t: T) -> Tensor<Ex, D> {
    from_cube::<Rt, D, Float>(t)
}

fn upload(data: TensorData) -> T {
    Ex::float_from_data(data, &dev::<Ex>())
}

fn read(t: &T) -> TensorData {
    rf::<Ex>(t.clone())
}

/// Same shapes, dtypes and bytes.
fn same_bits(what: &str, ours: &[T], expected: &[T]) -> Result<(), String> {
    if ours.len() != expected.len() {
        return Err(format!("{what}: {} tensors, expected {}", ours.len(), expected.len()));
    }
    for (k, (a, b)) in ours.iter().zip(expected).enumerate() {
        let (a, b) = (read(a), read(b));
        if a.shape != b.shape || a.dtype != b.dtype || a.as_bytes() != b.as_bytes() {
            return Err(format!("{what} {k} ({:?} {:?}) differs: {:?} vs {:?}", a.shape, a.dtype, a.to_vec::<f32>(), b.to_vec::<f32>()));
        }
    }
    Ok(())
}

/// The loss `mean((x·w + b - y)²)` of a linear model and each parameter with its gradient
/// (the parameters back as plain tensors, the autodiff graph dropped).
fn linear_grads(x: T, y: T, w: T, b: T) -> (T, [(T, T); 2]) {
    let [w, b] = [w, b].map(|p| Tensor::<A, 2>::from_inner(float(p)).require_grad());
    let (x, y) = (Tensor::<A, 2>::from_inner(float(x)), Tensor::<A, 2>::from_inner(float(y)));
    let loss = (x.matmul(w.clone()) + b.clone() - y).powi_scalar(2).mean();
    let grads = loss.backward();
    let pair = |p: Tensor<A, 2>| {
        let g = p.grad(&grads).expect("gradient");
        (to_cube(p.inner()), to_cube(g))
    };
    (to_cube(loss.inner()), [pair(w), pair(b)])
}

fn adam_rule(time: T) -> AdamRule<Rt> {
    let decay = AdamDecay::Decoupled { rate: 0.1, cautious: false };
    AdamRule { lr: 0.05, beta_1: 0.9, beta_2: 0.99, epsilon: 1e-6, decay, time: AdamTime::Device(time) }
}

/// One training step with the fused AdamW, the step count on the device. Inputs: x `[6, 4]`,
/// y `[6, 3]`. State: the step count `[1]`, w `[4, 3]`, b `[1, 3]`, their first moments,
/// their second moments. Output: the loss.
fn adam_train_step(inputs: Vec<T>, state: Vec<T>) -> (Vec<T>, Vec<T>) {
    let [x, y] = <[T; 2]>::try_from(inputs).unwrap();
    let [count, w, b, mw, mb, vw, vb] = <[T; 7]>::try_from(state).unwrap();
    let (loss, [(w, gw), (b, gb)]) = linear_grads(x, y, w, b);
    let count = next_step_count(count);
    let rule = adam_rule(count.clone());
    let moments = |m, v| Some(AdamMoments { moment_1: m, moment_2: v, max_moment_2: None });
    let (w, sw) = adam_step(w, gw, moments(mw, vw), &rule, false);
    let (b, sb) = adam_step(b, gb, moments(mb, vb), &rule, false);
    (vec![loss], vec![count, w, b, sw.moment_1, sb.moment_1, sw.moment_2, sb.moment_2])
}

/// One training step with the fused SGD with momentum and an L2 penalty. State: w, b and
/// their velocities.
fn sgd_train_step(inputs: Vec<T>, state: Vec<T>) -> (Vec<T>, Vec<T>) {
    let [x, y] = <[T; 2]>::try_from(inputs).unwrap();
    let [w, b, uw, ub] = <[T; 4]>::try_from(state).unwrap();
    let (loss, [(w, gw), (b, gb)]) = linear_grads(x, y, w, b);
    let momentum = SgdMomentum { momentum: 0.9, dampening: 0.1, nesterov: false };
    let rule = SgdRule { lr: 0.05, penalty: Some(0.01), momentum: Some(momentum) };
    let (w, uw) = sgd_step(w, gw, Some(uw), &rule);
    let (b, ub) = sgd_step(b, gb, Some(ub), &rule);
    (vec![loss], vec![w, b, uw.unwrap(), ub.unwrap()])
}

fn batch(rng: &mut Rng) -> Vec<T> {
    vec![
        upload(float_data(rng, &[6, 4], DType::F32, -1.0, 1.0)),
        upload(float_data(rng, &[6, 3], DType::F32, -1.0, 1.0)),
    ]
}

fn params(rng: &mut Rng) -> Vec<T> {
    vec![upload(float_data(rng, &[4, 3], DType::F32, -0.5, 0.5)), upload(float_data(rng, &[1, 3], DType::F32, -0.5, 0.5))]
}

fn zeros(shapes: &[[usize; 2]]) -> Vec<T> {
    shapes.iter().map(|s| upload(TensorData::zeros::<f32, _>(*s))).collect()
}

fn adam_state(rng: &mut Rng) -> Vec<T> {
    let mut state = vec![upload(TensorData::new(vec![0.0f32], [1]))];
    state.extend(params(rng));
    state.extend(zeros(&[[4, 3], [1, 3], [4, 3], [1, 3]]));
    state
}

fn sgd_state(rng: &mut Rng) -> Vec<T> {
    let mut state = params(rng);
    state.extend(zeros(&[[4, 3], [1, 3]]));
    state
}

type Step = fn(Vec<T>, Vec<T>) -> (Vec<T>, Vec<T>);

/// Replays compared with eager steps, after the capture's step.
const RUNS: usize = 4;

/// Captures `step` with state and checks, for the capture's step and `runs` replays, that
/// the outputs and the state equal those of eager steps (each on a new batch), that the
/// caller's state is never written, and that a run launches only the recorded kernels and
/// the input and output copies, with `state_copies` of them state copies. Then `set_state`
/// back to the start: the next run repeats the first step.
fn replays_match_eager(suite: &mut Suite, name: &str, step: Step, start: Vec<T>, state_copies: usize) {
    let _guard = lock();
    let mut rng = Rng::new(77);
    let kept: Vec<TensorData> = start.iter().map(read).collect();
    let first = batch(&mut rng);
    let (pipeline, captured) = Pipeline::capture_with_state(&dev::<Ex>(), &first, &start, step).unwrap();
    let copies = pipeline.num_state_copies();
    suite.record(
        format!("{name}: state copies per run"),
        if copies == state_copies { Ok(()) } else { Err(format!("{copies} state copies, expected {state_copies}: {:?}", pipeline.ops())) },
    );
    let (outputs, mut eager_state) = step(first.clone(), start.iter().map(|t| upload(read(t))).collect());
    suite.record(format!("{name}: capture's step outputs"), same_bits("output", &captured, &outputs));
    suite.record(format!("{name}: capture's step state"), same_bits("state", &pipeline.state().unwrap(), &eager_state));
    for run in 1..=RUNS {
        let inputs = batch(&mut rng);
        let before = launch_count();
        let replayed = pipeline.run(&inputs).unwrap();
        let launched = launch_count() - before;
        let expected_launches = (pipeline.num_launches() + pipeline.num_copies(&inputs)) as u64;
        let (outputs, state) = step(inputs, eager_state);
        eager_state = state;
        suite.record(format!("{name}: run {run} outputs"), same_bits("output", &replayed, &outputs));
        suite.record(format!("{name}: run {run} state"), same_bits("state", &pipeline.state().unwrap(), &eager_state));
        suite.record(
            format!("{name}: run {run} launches"),
            if launched == expected_launches { Ok(()) } else { Err(format!("{launched} launches, expected {expected_launches}")) },
        );
    }
    let unchanged = start.iter().zip(&kept).all(|(t, d)| read(t).as_bytes() == d.as_bytes());
    suite.record(format!("{name}: the caller's state is not written"), if unchanged { Ok(()) } else { Err("written".into()) });
    pipeline.set_state(&start).unwrap();
    suite.record(format!("{name}: set_state then state round trip"), same_bits("state", &pipeline.state().unwrap(), &start));
    let again = pipeline.run(&first).unwrap();
    suite.record(format!("{name}: after set_state, a run repeats the first step"), same_bits("output", &again, &captured));
}

#[test]
fn fused_adam_and_sgd_update_the_state_in_place() {
    let mut suite = Suite::new("pipeline state in place");
    let mut rng = Rng::new(3);
    replays_match_eager(&mut suite, "adamw, device step count", adam_train_step, adam_state(&mut rng), 0);
    replays_match_eager(&mut suite, "sgd momentum", sgd_train_step, sgd_state(&mut rng), 0);
    suite.finish();
}

/// SGD in tensor ops: every new state is a fresh tensor, copied into its buffer each run.
fn tensor_op_step(inputs: Vec<T>, state: Vec<T>) -> (Vec<T>, Vec<T>) {
    let [x, y] = <[T; 2]>::try_from(inputs).unwrap();
    let [w, b] = <[T; 2]>::try_from(state).unwrap();
    let (loss, [(w, gw), (b, gb)]) = linear_grads(x, y, w, b);
    let update = |p: T, g: T| to_cube(float::<2>(p) - float::<2>(g).mul_scalar(0.1));
    (vec![loss], vec![update(w, gw), update(b, gb)])
}

/// The state of each step is the previous one's in reverse order (as the shapes allow), plus
/// the input: the new states read buffers that other copies write.
fn swap_step(inputs: Vec<T>, state: Vec<T>) -> (Vec<T>, Vec<T>) {
    let [a, b, c] = <[T; 3]>::try_from(state).unwrap();
    let c = to_cube(float::<2>(c) + float::<2>(inputs[0].clone()));
    (vec![a.clone()], vec![b, a, c])
}

#[test]
fn new_state_from_fresh_tensors_is_copied() {
    let mut suite = Suite::new("pipeline state copies");
    let mut rng = Rng::new(5);
    replays_match_eager(&mut suite, "tensor-op sgd", tensor_op_step, params(&mut rng), 2);

    let _guard = lock();
    let state: Vec<T> = (0..3).map(|_| upload(float_data(&mut rng, &[2, 2], DType::F32, -1.0, 1.0))).collect();
    let x = upload(float_data(&mut rng, &[2, 2], DType::F32, -1.0, 1.0));
    let (pipeline, out) = Pipeline::capture_with_state(&dev::<Ex>(), &[x.clone()], &state, swap_step).unwrap();
    suite.record("swap: the output is the state before the step", same_bits("output", &out, &state[..1]));
    let c1 = to_cube(float::<2>(state[2].clone()) + float::<2>(x.clone()));
    let swapped = vec![state[1].clone(), state[0].clone(), c1.clone()];
    suite.record("swap: state after the capture's step", same_bits("state", &pipeline.state().unwrap(), &swapped));
    let out = pipeline.run(&[x.clone()]).unwrap();
    suite.record("swap: a run's output is the state before it", same_bits("output", &out, &swapped[..1]));
    let c2 = to_cube(float::<2>(c1) + float::<2>(x));
    let back = vec![state[0].clone(), state[1].clone(), c2];
    suite.record("swap: state after a run", same_bits("state", &pipeline.state().unwrap(), &back));
    suite.record(
        "swap: two staged copies, then three",
        if pipeline.num_state_copies() == 5 { Ok(()) } else { Err(format!("{:?}", pipeline.ops())) },
    );
    suite.finish();
}


#[test]
fn bad_state_and_aliases_of_donated_state_give_errors() {
    let _guard = lock();
    let mut suite = Suite::new("pipeline state errors");
    let device = dev::<Ex>();
    let mut rng = Rng::new(7);
    let x = upload(float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0));
    let state: Vec<T> = (0..2).map(|_| upload(float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0))).collect();
    let capture = |f: Step| Pipeline::capture_with_state(&device, &[x.clone()], &state, f).map(|(pipeline, _)| pipeline);

    let transposed: Step = |_, s| (vec![], vec![s[0].clone(), to_cube(float::<2>(s[1].clone()).transpose())]);
    suite.expect_error("new state of another shape", capture(transposed), &["new state 1", "[3, 2]", "[2, 3]", "F32"]);
    let int: Step = |_, s| (vec![], vec![to_cube(float::<2>(s[0].clone()).int()), s[1].clone()]);
    suite.expect_error("new state of another dtype", capture(int), &["new state 0", "I32", "F32"]);
    let short: Step = |_, s| (vec![], s[..1].to_vec());
    suite.expect_error("too few new state tensors", capture(short), &["returned 1 new state tensors", "its 2 state"]);

    // Updated in place (SGD without momentum) while an output or another new state keeps
    // the buffer: they would see the new value where the closure meant the old one.
    fn sgd(p: T, g: T) -> T {
        sgd_step(p, g, None, &SgdRule { lr: 0.1, penalty: None, momentum: None }).0
    }
    let as_output: Step = |i, s| (vec![s[0].clone()], vec![sgd(s[0].clone(), i[0].clone()), s[1].clone()]);
    suite.expect_error("output aliases state updated in place", capture(as_output), &["state 0 was updated in place", "output 0"]);
    let as_other: Step = |i, s| {
        let p = sgd(s[0].clone(), i[0].clone());
        (vec![], vec![p.clone(), p])
    };
    suite.expect_error("new state aliases another updated in place", capture(as_other), &["state 0", "new state 1"]);
    // The same update with its result as its own new state is fine, with no copy.
    let fine: Step = |i, s| (vec![], vec![sgd(s[0].clone(), i[0].clone()), s[1].clone()]);
    let pipeline = capture(fine).map_err(|e| e.to_string());
    suite.record(
        "update in place as its own new state",
        pipeline.and_then(|p| if p.num_state_copies() == 0 { Ok(()) } else { Err(format!("{:?}", p.ops())) }),
    );

    let pipeline = capture(|_, s| (vec![], s)).unwrap();
    let wrong_shape = upload(float_data(&mut rng, &[3, 2], DType::F32, -1.0, 1.0));
    suite.expect_error("set_state: wrong shape", pipeline.set_state(&[state[0].clone(), wrong_shape]), &["state 1", "[3, 2]", "[2, 3]", "F32"]);
    let wrong_dtype = Ex::int_from_data(int_data(&mut rng, &[2, 3], DType::I32, 0, 5), &device);
    suite.expect_error("set_state: wrong dtype", pipeline.set_state(&[wrong_dtype, state[1].clone()]), &["state 0", "I32", "F32"]);
    suite.expect_error("set_state: wrong count", pipeline.set_state(&state[..1]), &["got 1 state tensors", "has 2"]);
    suite.finish();
}

/// Outputs of every kind: an intermediate, a view of it, an input, a constant uploaded in the
/// closure, a slice (with an offset) of another intermediate.
fn io_step(inputs: Vec<T>) -> Vec<T> {
    let [x, y] = <[T; 2]>::try_from(inputs).unwrap();
    let s = float::<2>(x.clone()).mul_scalar(2.0) + float::<2>(y.clone());
    let c = Tensor::<Ex, 2>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0], [1, 3]), &dev::<Ex>());
    let t = (float::<2>(y) + 1.0).slice([1..2, 0..3]);
    vec![to_cube(s.clone()), to_cube(s.transpose()), x, to_cube(c), to_cube(t)]
}

/// A run of `pipeline` (of [`io_step`]) on `inputs`, checked: `copies` copy launches
/// besides the recorded ones, the outputs of eager execution, the inputs unchanged.
fn bound_run(suite: &mut Suite, pipeline: &Pipeline<Rt>, name: &str, inputs: Vec<T>, copies: usize) -> (Vec<T>, Vec<T>) {
    let kept: Vec<TensorData> = inputs.iter().map(read).collect();
    let counted = pipeline.num_copies(&inputs);
    suite.record(format!("{name}: copies"), if counted == copies { Ok(()) } else { Err(format!("{counted}, expected {copies}")) });
    let before = launch_count();
    let out = pipeline.run(&inputs).unwrap();
    let launched = launch_count() - before;
    let expected = (pipeline.num_launches() + copies) as u64;
    suite.record(format!("{name}: launches"), if launched == expected { Ok(()) } else { Err(format!("{launched}, expected {expected}")) });
    let eager = io_step(inputs.iter().map(|t| upload(read(t))).collect());
    suite.record(format!("{name}: outputs"), same_bits("output", &out, &eager));
    let unchanged = inputs.iter().zip(&kept).all(|(t, d)| read(t).as_bytes() == d.as_bytes());
    suite.record(format!("{name}: inputs not written"), if unchanged { Ok(()) } else { Err("written".into()) });
    (out, eager)
}

#[test]
fn inputs_and_outputs_are_bound_not_copied() {
    let _guard = lock();
    let mut suite = Suite::new("pipeline bindings");
    let mut rng = Rng::new(9);
    let mut batch = || [0, 1].map(|_| upload(float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0))).to_vec();
    let (pipeline, _) = Pipeline::capture_with_outputs(&dev::<Ex>(), &batch(), io_step).unwrap();
    // Contiguous inputs: only the constant is copied out.
    let (first, first_eager) = bound_run(&mut suite, &pipeline, "contiguous inputs", batch(), 1);
    let (second, _) = bound_run(&mut suite, &pipeline, "second run", batch(), 1);
    suite.record("a run leaves the previous run's outputs alone", same_bits("output", &first, &first_eager));
    // A transposed input is copied in, and its pass-through output copied out.
    let mut inputs = batch();
    inputs[0] = Ex::float_swap_dims(upload(float_data(&mut Rng::new(10), &[3, 2], DType::F32, -1.0, 1.0)), 0, 1);
    bound_run(&mut suite, &pipeline, "a transposed input", inputs, 3);
    // The caller owns what a run gives: updating outputs in place (the fused SGD writes a
    // uniquely owned tensor in place) changes neither the pipeline's constant nor what the
    // next run writes.
    let rule = SgdRule { lr: 1.0, penalty: None, momentum: None };
    let ones = |t: &T| upload(TensorData::new(vec![1.0f32; t.num_elements()], t.dims().to_vec()));
    let [s, _, _, c, _] = <[T; 5]>::try_from(second).unwrap();
    let (s_ones, c_ones) = (ones(&s), ones(&c));
    drop(sgd_step(s, s_ones, None, &rule));
    drop(sgd_step(c, c_ones, None, &rule));
    bound_run(&mut suite, &pipeline, "after the caller updated outputs in place", batch(), 1);
    suite.finish();
}
