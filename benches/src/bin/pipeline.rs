//! Host time per training step, eager versus replayed through a `Pipeline`: an MLP
//! 784-256-128-10 with softmax cross-entropy on `Autodiff<ExCubeclBackend>`, at batch 64 and
//! 1024, with Adam written in tensor ops (the state fed back as inputs and outputs), and with
//! the fused Adam (`launch::optim::adam_step`: eager with the step count on the host and the
//! state updated in place; replayed with the parameters, the moments and a device-side step
//! count as the pipeline's state, updated in place), and the tensor-op step written on
//! `Fusion<ExCubeclBackend>` and replayed (`Pipeline::capture_fused_with_state`: our fused
//! kernels' launches without the fusion engine). Prints a markdown table.
//!
//! ```text
//! pipeline [--iters N] [--warmup N] [--batches 64,1024] [--micro]
//! ```
//! A first table gives the host cost per op of a chain of tiny ops, eager, under autodiff,
//! on `Fusion<Ours>` and replayed (`--micro`: only that table).
//! For every step the time to submit it (the call returns once its kernels are enqueued)
//! and the time until the device has finished it (submit + sync) are measured; the table
//! gives the medians after the warm-up steps. Eager steps run the ops (Burn's autodiff graph,
//! our host-side op logic, allocations); replayed steps copy the inputs into the pipeline's
//! buffers, launch the recorded kernels and copy the outputs out (with state: only x, y and
//! the loss). The speed-ups are against the eager step with Adam in tensor ops.
use std::time::{Duration, Instant};

use burn_autodiff::Autodiff;
use burn_backend::ops::FloatTensorOps;
use burn_backend::{Backend, TensorData, TensorPrimitive};
use burn_tensor::backend::AutodiffBackend;
use burn_tensor::activation::{log_softmax, relu};
use burn_tensor::{Float, Tensor};
use ex_cubecl::launch::optim::{AdamDecay, AdamMoments, AdamRule, AdamTime, adam_step, next_step_count};
use ex_cubecl::fusion::pipeline::{FusedStepResults, FusedTensor};
use ex_cubecl::runtime::{Pipeline, from_cube, launch_count, to_cube};
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_benches::{Ours, Runtime};

type Train = Autodiff<Ours>;
type Fused = burn_fusion::Fusion<Ours>;

type T = CubeTensor<Runtime>;

const LAYERS: [usize; 4] = [784, 256, 128, 10];
const LR: f64 = 1e-3;
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

fn float<const D: usize>(t: T) -> Tensor<Ours, D> {
    from_cube::<Runtime, D, Float>(t)
}

/// One training step. Inputs: x `[batch, 784]`, one-hot targets `[batch, 10]`, the step
/// count `[1]`, the parameters (w `[in, out]`, b `[1, out]` per layer), their first and
/// second moments. Outputs: the loss, the next step count, then the new parameters and
/// moments, in the input order.
fn step(inputs: Vec<T>) -> Vec<T> {
    let mut it = inputs.into_iter();
    let (x, y) = (float(it.next().unwrap()), float(it.next().unwrap()));
    let t = float::<1>(it.next().unwrap());
    let (loss, t, state) = adam_ops_step(x, y, t, it.map(float).collect());
    [vec![to_cube(loss), to_cube(t)], state.into_iter().map(to_cube).collect()].concat()
}

/// [`step`] on any backend: the loss, the next step count and the new parameters and moments.
fn adam_ops_step<B: Backend>(
    x: Tensor<B, 2>,
    y: Tensor<B, 2>,
    t: Tensor<B, 1>,
    rest: Vec<Tensor<B, 2>>,
) -> (Tensor<B, 1>, Tensor<B, 1>, Vec<Tensor<B, 2>>) {
    let t = t.add_scalar(1.0);
    let n = 2 * (LAYERS.len() - 1);
    // The state is consumed, each tensor by its last read: on `Fusion<Ours>` a pipeline
    // capture then writes each new state over its old one (see `Pipeline::capture_fused_with_state`).
    let mut rest = rest.into_iter();
    let params: Vec<Tensor<Autodiff<B>, 2>> = rest.by_ref().take(n).map(|p| Tensor::from_inner(p).require_grad()).collect();
    let (m, v): (Vec<Tensor<B, 2>>, Vec<Tensor<B, 2>>) = (rest.by_ref().take(n).collect(), rest.collect());

    let loss = forward(Tensor::from_inner(x), Tensor::from_inner(y), &params);
    let grads = loss.backward();

    let correction = |beta: f64| t.clone().mul_scalar(beta.ln()).exp().neg().add_scalar(1.0).unsqueeze::<2>();
    let (c1, c2) = (correction(BETA1), correction(BETA2));
    let (mut new_params, mut new_m, mut new_v) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
    for ((p, m), v) in params.into_iter().zip(m).zip(v) {
        let g = p.grad(&grads).expect("gradient");
        let mk = m.mul_scalar(BETA1) + g.clone().mul_scalar(1.0 - BETA1);
        let vk = v.mul_scalar(BETA2) + g.powi_scalar(2).mul_scalar(1.0 - BETA2);
        let update = (mk.clone() / c1.clone()) / (vk.clone() / c2.clone()).sqrt().add_scalar(EPS);
        new_params.push(p.inner() - update.mul_scalar(LR));
        new_m.push(mk);
        new_v.push(vk);
    }
    (loss.inner(), t, [new_params, new_m, new_v].concat())
}

/// [`step`] written on `Fusion<Ours>` as a pipeline step with state. Inputs: x, y. State:
/// the step count, the parameters, their first and second moments. Output: the loss.
fn fusion_pipeline_step(inputs: Vec<FusedTensor<Runtime>>, state: Vec<FusedTensor<Runtime>>) -> FusedStepResults<Runtime> {
    fn tensor<const D: usize>(t: FusedTensor<Runtime>) -> Tensor<Fused, D> {
        Tensor::from_primitive(TensorPrimitive::Float(t))
    }
    fn primitive<const D: usize>(t: Tensor<Fused, D>) -> FusedTensor<Runtime> {
        t.into_primitive().tensor()
    }
    let [x, y] = <[FusedTensor<Runtime>; 2]>::try_from(inputs).ok().expect("x and y").map(tensor::<2>);
    let mut state = state.into_iter();
    let t = tensor::<1>(state.next().expect("step count"));
    let (loss, t, rest) = adam_ops_step(x, y, t, state.map(tensor::<2>).collect());
    (vec![primitive(loss)], [vec![primitive(t)], rest.into_iter().map(primitive).collect()].concat())
}

/// The MLP's loss: softmax cross-entropy of the logits against one-hot targets.
fn forward<B: AutodiffBackend>(x: Tensor<B, 2>, y: Tensor<B, 2>, params: &[Tensor<B, 2>]) -> Tensor<B, 1> {
    let mut h = x;
    for layer in 0..LAYERS.len() - 1 {
        h = h.matmul(params[2 * layer].clone()) + params[2 * layer + 1].clone();
        if layer + 2 < LAYERS.len() {
            h = relu(h);
        }
    }
    (log_softmax(h, 1) * y).sum_dim(1).mean().neg()
}

/// One training step with the fused Adam (AdamW's form with no decay: the math of `step`).
/// State: the parameters, their first moments, their second moments, each moved into its
/// update so that it runs in place. Gives the loss and the new state, in the same order.
fn fused_step(x: T, y: T, state: Vec<T>, time: AdamTime<Runtime>) -> (T, Vec<T>) {
    let n = 2 * (LAYERS.len() - 1);
    let mut state = state.into_iter();
    let params: Vec<Tensor<Train, 2>> = state.by_ref().take(n).map(|p| Tensor::from_inner(float(p)).require_grad()).collect();
    let m: Vec<T> = state.by_ref().take(n).collect();
    let loss = forward(Tensor::from_inner(float(x)), Tensor::from_inner(float(y)), &params);
    let grads = loss.backward();
    let decay = AdamDecay::Decoupled { rate: 0.0, cautious: false };
    let rule = AdamRule { lr: LR, beta_1: BETA1, beta_2: BETA2, epsilon: EPS, decay, time };
    let (mut new_params, mut new_m, mut new_v) = (Vec::new(), Vec::new(), Vec::new());
    for ((p, m), v) in params.into_iter().zip(m).zip(state) {
        let g = to_cube(p.grad(&grads).expect("gradient"));
        let moments = AdamMoments { moment_1: m, moment_2: v, max_moment_2: None };
        let (p, moments) = adam_step(to_cube(p.inner()), g, Some(moments), &rule, false);
        new_params.push(p);
        new_m.push(moments.moment_1);
        new_v.push(moments.moment_2);
    }
    (to_cube(loss.inner()), [new_params, new_m, new_v].concat())
}

/// [`fused_step`] as a pipeline step. Inputs: x, y. State: the step count `[1]`, then
/// [`fused_step`]'s. Output: the loss.
fn fused_pipeline_step(inputs: Vec<T>, state: Vec<T>) -> (Vec<T>, Vec<T>) {
    let [x, y] = <[T; 2]>::try_from(inputs).expect("x and y");
    let mut state = state.into_iter();
    let count = next_step_count(state.next().expect("step count"));
    let (loss, rest) = fused_step(x, y, state.collect(), AdamTime::Device(count.clone()));
    (vec![loss], [vec![count], rest].concat())
}

/// A small deterministic generator (SplitMix64).
struct Rng(u64);

impl Rng {
    fn uniform(&mut self, lo: f32, hi: f32) -> f32 {
        self.0 = self.0.wrapping_add(0x9e3779b97f4a7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d049bb133111eb);
        z ^= z >> 31;
        lo + (hi - lo) * ((z >> 40) as f32 / (1u64 << 24) as f32)
    }
}

fn upload(values: Vec<f32>, shape: [usize; 2]) -> T {
    to_cube(Tensor::<Ours, 2>::from_data(TensorData::new(values, shape), &Default::default()))
}

fn initial_inputs(batch: usize) -> Vec<T> {
    let mut rng = Rng(batch as u64);
    let x = (0..batch * LAYERS[0]).map(|_| rng.uniform(0.0, 1.0)).collect();
    let y = (0..batch * 10).map(|k| ((k / 10) % 10 == k % 10) as u8 as f32).collect();
    let mut inputs = vec![upload(x, [batch, LAYERS[0]]), upload(y, [batch, 10])];
    inputs.push(to_cube(Tensor::<Ours, 1>::zeros([1], &Default::default())));
    let shapes: Vec<[usize; 2]> = LAYERS.windows(2).flat_map(|w| [[w[0], w[1]], [1, w[1]]]).collect();
    for w in LAYERS.windows(2) {
        let bound = 1.0 / (w[0] as f32).sqrt();
        for s in [[w[0], w[1]], [1, w[1]]] {
            inputs.push(upload((0..s[0] * s[1]).map(|_| rng.uniform(-bound, bound)).collect(), s));
        }
    }
    for _ in 0..2 {
        for s in &shapes {
            inputs.push(upload(vec![0.0; s[0] * s[1]], *s));
        }
    }
    inputs
}

/// The next step's inputs: the same batch, the step's state.
fn next_inputs(inputs: &[T], outputs: &[T]) -> Vec<T> {
    let mut next = inputs[..2].to_vec();
    next.extend(outputs[1..].iter().cloned());
    next
}

fn sync() {
    Ours::sync(&Default::default()).expect("sync");
}

struct Timing {
    submit: Duration,
    total: Duration,
    launches: u64,
}

/// `before / after`, as a speed-up.
fn ratio(before: Duration, after: Duration) -> String {
    format!("{:.2}x", before.as_secs_f64() / after.as_secs_f64())
}

/// One row of the training-step table: `t` against `baseline` (the eager tensor-op step).
fn print_row(batch: usize, mode: &str, t: &Timing, baseline: &Timing) {
    let speedups = format!("{} | {}", ratio(baseline.submit, t.submit), ratio(baseline.total, t.total));
    println!("| {batch} | {mode} | {} | {} | {} | {speedups} |", t.launches, ms(t.submit), ms(t.total));
}

/// Medians of `iters` steps after `warmup`. `step` gets the value carried from step to step
/// and the step's index and is timed (submit, then submit + sync); `next` then makes the next
/// carried value from what it gave, untimed.
fn measure<S, O>(warmup: usize, iters: usize, carried: S, step: impl FnMut(S, usize) -> O, next: impl FnMut(O) -> S) -> (Timing, S) {
    measure_synced(warmup, iters, carried, step, next, sync)
}

/// [`measure`] with the device's sync given (`Fusion`'s drains its engine first).
fn measure_synced<S, O>(
    warmup: usize,
    iters: usize,
    mut carried: S,
    mut step: impl FnMut(S, usize) -> O,
    mut next: impl FnMut(O) -> S,
    sync: impl Fn(),
) -> (Timing, S) {
    let (mut submit, mut total, mut launches) = (Vec::new(), Vec::new(), 0);
    for i in 0..warmup + iters {
        sync();
        let before = launch_count();
        let start = Instant::now();
        let out = step(carried, i);
        let submitted = start.elapsed();
        sync();
        let finished = start.elapsed();
        if i >= warmup {
            submit.push(submitted);
            total.push(finished);
            launches = launch_count() - before;
        }
        carried = next(out);
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    (Timing { submit: median(submit), total: median(total), launches }, carried)
}

/// [`measure`] of `run` on inputs fed back from its outputs ([`next_inputs`]).
fn time(warmup: usize, iters: usize, inputs: Vec<T>, mut run: impl FnMut(Vec<T>) -> Vec<T>) -> (Timing, Vec<T>) {
    let step = |inputs: Vec<T>, _| {
        let outputs = run(inputs.clone());
        (inputs, outputs)
    };
    measure(warmup, iters, inputs, step, |(inputs, outputs)| next_inputs(&inputs, &outputs))
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn read(t: &T) -> Vec<f32> {
    burn_backend::read_sync(Ours::float_into_data(t.clone())).expect("read").to_vec::<f32>().expect("f32")
}

/// Host cost per op: a chain of `n` scalar multiplications of a 64-element tensor, eager
/// (plain, under autodiff, and on `Fusion<Ours>`, where the chain is one fused launch and the
/// time until the sync returns is the engine's work per op), and replayed; the device work is
/// negligible.
fn micro(warmup: usize, iters: usize) {
    type Out = Box<dyn std::any::Any>;
    let n = 100;
    let device = Default::default();
    let x = to_cube(Tensor::<Ours, 1>::ones([64], &device));
    let xf = Tensor::<Fused, 1>::ones([64], &device);
    let chain = |inputs: Vec<T>| {
        let mut t = float::<1>(inputs[0].clone());
        for _ in 0..n {
            t = t.mul_scalar(1.0001);
        }
        vec![to_cube(t)]
    };
    let chain_ad = || -> Out {
        let mut t = Tensor::<Train, 1>::from_inner(float::<1>(x.clone())).require_grad();
        for _ in 0..n {
            t = t.mul_scalar(1.0001);
        }
        Box::new(t)
    };
    let chain_fused = || -> Out {
        let mut t = xf.clone();
        for _ in 0..n {
            t = t.mul_scalar(1.0001);
        }
        Box::new(t)
    };
    let pipeline = Pipeline::capture(&device, &[x.clone()], chain).expect("capture");
    let sync_fused = || Fused::sync(&device).expect("sync");
    let mut rows = Vec::new();
    for (name, run, sync) in [
        ("eager", &|| -> Out { Box::new(chain(vec![x.clone()])) } as &dyn Fn() -> Out, &sync as &dyn Fn()),
        ("eager, autodiff", &chain_ad, &sync),
        ("eager, Fusion", &chain_fused, &sync_fused),
        ("replay", &|| -> Out { Box::new(pipeline.run(std::slice::from_ref(&x)).expect("replay")) }, &sync),
    ] {
        let (mut submit, mut total) = (Vec::new(), Vec::new());
        for i in 0..warmup + iters {
            sync();
            let start = Instant::now();
            let out = run();
            let submitted = start.elapsed();
            sync();
            if i >= warmup {
                submit.push(submitted);
                total.push(start.elapsed());
            }
            drop(out);
        }
        submit.sort();
        total.sort();
        rows.push((name, submit[submit.len() / 2], total[total.len() / 2]));
    }
    println!("| chain of {n} scalar ops on 64 elements | submit µs/op | submit + sync µs/op |");
    println!("|---|---|---|");
    for (name, submit, total) in rows {
        let per_op = |t: Duration| t.as_secs_f64() * 1e6 / n as f64;
        println!("| {name} | {:.1} | {:.1} |", per_op(submit), per_op(total));
    }
    println!();
}


fn main() {
    let cuda = cfg!(feature = "cuda");
    let (mut warmup, mut iters) = if cuda { (20, 200) } else { (2, 10) };
    let mut batches = vec![64, 1024];
    let mut micro_only = false;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("pipeline: {arg} needs a value"));
        match arg.as_str() {
            "--iters" => iters = value().parse().expect("pipeline: --iters N"),
            "--warmup" => warmup = value().parse().expect("pipeline: --warmup N"),
            "--micro" => micro_only = true,
            "--batches" => batches = value().split(',').map(|b| b.parse().expect("pipeline: --batches 64,1024")).collect(),
            other => panic!("pipeline: unknown argument {other}"),
        }
    }
    let iters = iters.max(1);
    let device = Default::default();
    println!("device: {}", Ours::name(&device));
    micro(warmup, iters);
    if micro_only {
        return;
    }
    println!(
        "MLP {LAYERS:?} training step (forward, backward, Adam in tensor ops or fused); medians of {iters} steps after \
         {warmup}; speed-ups against eager with Adam in tensor ops"
    );
    println!();
    println!("| batch | mode | launches/step | submit ms/step | submit + sync ms/step | speed-up (submit) | speed-up (submit + sync) |");
    println!("|---|---|---|---|---|---|---|");
    for batch in batches {
        let start = initial_inputs(batch);
        let capture_start = Instant::now();
        let pipeline = Pipeline::capture(&device, &start, step).expect("capture");
        sync();
        let capture_time = capture_start.elapsed();
        let (eager, eager_state) = time(warmup, iters, start.clone(), step);
        let (replay, replay_state) = time(warmup, iters, start.clone(), |inputs| pipeline.run(&inputs).expect("replay"));
        // Both ran the same number of steps from the same state: their losses agree.
        let (a, b) = (read(&eager_state[3]), read(&replay_state[3]));
        let same = a == b;
        println!("| {batch} | eager | {} | {} | {} | | |", eager.launches, ms(eager.submit), ms(eager.total));
        print_row(batch, "replay", &replay, &eager);
        eprintln!(
            "batch {batch}: capture took {} ms ({} recorded launches); replayed parameters {} the eager ones",
            ms(capture_time),
            pipeline.num_launches(),
            if same { "equal" } else { "DIFFER FROM" }
        );
        fused_rows(warmup, iters, batch, &start, &eager);
        fusion_rows(warmup, iters, batch, &start, &eager, &replay_state);
    }
}

/// The rows of the fused Adam at `batch`, eager and replayed with the state in the
/// pipeline, from the same start as the tensor-op rows; `baseline` is the tensor-op eager
/// step. Checks that the replays ran the same steps as eager steps of the same closure (with
/// the step count on the device), bit for bit, and reports how far the eager steps with the
/// host's count (bias corrections in f64 rather than f32) are from them.
fn fused_rows(warmup: usize, iters: usize, batch: usize, start: &[T], baseline: &Timing) {
    let device = Default::default();
    let (x, y) = (start[0].clone(), start[1].clone());
    // The tensor-op step's parameters and moments, copied so that the eager steps own theirs
    // (and update them in place).
    let state = || start[3..].iter().map(copy).collect::<Vec<T>>();
    let eager_step = |state: Vec<T>, i: usize| fused_step(x.clone(), y.clone(), state, AdamTime::Host(i + 1));
    let (eager, host_state) = measure(warmup, iters, state(), eager_step, |(_, state)| state);

    let count = || to_cube(Tensor::<Ours, 1>::zeros([1], &device));
    let pipeline_state = [vec![count()], state()].concat();
    let capture_start = Instant::now();
    let inputs = [x.clone(), y.clone()];
    let (pipeline, _) =
        Pipeline::capture_with_state(&device, &inputs, &pipeline_state, fused_pipeline_step).expect("capture with state");
    sync();
    let capture_time = capture_start.elapsed();
    // Undo the capture's step, so that both run the same steps from the same state.
    pipeline.set_state(&pipeline_state).expect("set_state");
    let (replay, ()) = measure(warmup, iters, (), |(), _| pipeline.run(&inputs).expect("replay"), drop);

    let replayed = pipeline.state().expect("state");
    let mut device_state = [vec![count()], state()].concat();
    for _ in 0..warmup + iters {
        device_state = fused_pipeline_step(inputs.to_vec(), device_state).1;
    }
    let same = replayed.iter().zip(&device_state).all(|(a, b)| read(a) == read(b));
    let n = 2 * (LAYERS.len() - 1);
    let diff = (0..n).map(|k| max_difference(&host_state[k], &replayed[1 + k])).fold(0.0f32, f32::max);
    print_row(batch, "eager, fused Adam", &eager, baseline);
    print_row(batch, "replay, fused Adam, state in place", &replay, baseline);
    eprintln!(
        "batch {batch}, fused Adam: capture took {} ms ({} recorded launches, {} state copies); replay {} (submit + \
         sync) faster than eager; replayed state {} eager steps with the device's step count; largest difference \
         of the parameters from the eager steps with the host's count {diff:e}",
        ms(capture_time),
        pipeline.num_launches(),
        pipeline.num_state_copies(),
        ratio(eager.total, replay.total),
        if same { "equals" } else { "DIFFERS FROM" },
    );
}

/// The row of the tensor-op step written on `Fusion<Ours>` and replayed (the launches of our
/// fused kernels, without the fusion engine), with the step count, the parameters and the
/// moments as the pipeline's state; `baseline` is the tensor-op eager step, `replayed` the
/// inputs after the tensor-op replays (as many steps from the same start).
fn fusion_rows(warmup: usize, iters: usize, batch: usize, start: &[T], baseline: &Timing, replayed: &[T]) {
    let device = Default::default();
    // Eager on `Fusion<Ours>`: every op through Burn's engine, from the same start.
    let fused = |t: &T| Tensor::<Fused, 2>::from_data(burn_backend::read_sync(Ours::float_into_data(t.clone())).expect("read"), &device);
    let (xf, yf) = (fused(&start[0]), fused(&start[1]));
    let state = (Tensor::<Fused, 1>::zeros([1], &device), start[3..].iter().map(fused).collect::<Vec<_>>());
    let step = |(t, rest): (Tensor<Fused, 1>, Vec<Tensor<Fused, 2>>), _| adam_ops_step(xf.clone(), yf.clone(), t, rest);
    let fused_sync = || Fused::sync(&device).expect("sync");
    let (eager, _) = measure_synced(warmup, iters, state, step, |(_, t, rest)| (t, rest), fused_sync);
    print_row(batch, "eager, Fusion (Adam as ops)", &eager, baseline);
    let inputs = [start[0].clone(), start[1].clone()];
    let capture_start = Instant::now();
    let (pipeline, _) = Pipeline::capture_fused_with_state(&device, &inputs, &start[2..], fusion_pipeline_step).expect("fused capture");
    sync();
    let capture_time = capture_start.elapsed();
    // Undo the capture's step, so that both run the same steps from the same state.
    pipeline.set_state(&start[2..]).expect("set_state");
    let (replay, ()) = measure(warmup, iters, (), |(), _| pipeline.run(&inputs).expect("replay"), drop);
    let state = pipeline.state().expect("state");
    let n = 2 * (LAYERS.len() - 1);
    let diff = (0..n).map(|k| max_difference(&state[1 + k], &replayed[3 + k])).fold(0.0f32, f32::max);
    print_row(batch, "replay, Fusion (Adam as ops)", &replay, baseline);
    eprintln!(
        "batch {batch}, Fusion: capture took {} ms ({} recorded launches, {} state copies); largest difference of the \
         parameters from the unfused replays {diff:e}",
        ms(capture_time),
        pipeline.num_launches(),
        pipeline.num_state_copies(),
    );
}

/// A copy of a rank-2 tensor, in a buffer of its own.
fn copy(t: &T) -> T {
    to_cube(Tensor::<Ours, 2>::from_data(TensorData::new(read(t), t.dims().to_vec()), &Default::default()))
}

/// The largest absolute difference between two tensors of the same shape.
fn max_difference(a: &T, b: &T) -> f32 {
    read(a).iter().zip(read(b)).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}
