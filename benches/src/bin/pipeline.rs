//! Host time per training step, eager versus replayed through a `Pipeline`: an MLP
//! 784-256-128-10 with softmax cross-entropy and Adam written in tensor ops on
//! `Autodiff<ExCubeclBackend>`, at batch 64 and 1024. Prints a markdown table.
//!
//! ```text
//! pipeline [--iters N] [--warmup N] [--batches 64,1024] [--micro]
//! ```
//! A first table gives the host cost per launch of a chain of tiny ops (`--micro`: only
//! that table).
//! For every step the time to submit it (the call returns once its kernels are enqueued)
//! and the time until the device has finished it (submit + sync) are measured; the table
//! gives the medians after the warm-up steps. Eager steps run the ops (Burn's autodiff graph,
//! our host-side op logic, allocations); replayed steps copy the inputs into the pipeline's
//! buffers, launch the recorded kernels and copy the outputs out.
use std::time::{Duration, Instant};

use burn_backend::ops::FloatTensorOps;
use burn_backend::{Backend, TensorData};
use burn_tensor::activation::{log_softmax, relu};
use burn_tensor::{Float, Tensor};
use ex_cubecl::runtime::{Pipeline, from_cube, launch_count, to_cube};
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_benches::{Ours, Runtime};

type Train = burn_autodiff::Autodiff<Ours>;

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
    let x = Tensor::<Train, 2>::from_inner(float(it.next().unwrap()));
    let y = Tensor::<Train, 2>::from_inner(float(it.next().unwrap()));
    let t = float::<1>(it.next().unwrap()).add_scalar(1.0);
    let rest: Vec<Tensor<Ours, 2>> = it.map(float).collect();
    let n = 2 * (LAYERS.len() - 1);
    let params: Vec<Tensor<Train, 2>> = rest[..n].iter().map(|p| Tensor::from_inner(p.clone()).require_grad()).collect();
    let (m, v) = (&rest[n..2 * n], &rest[2 * n..]);

    let mut h = x;
    for layer in 0..LAYERS.len() - 1 {
        h = h.matmul(params[2 * layer].clone()) + params[2 * layer + 1].clone();
        if layer + 2 < LAYERS.len() {
            h = relu(h);
        }
    }
    let loss = (log_softmax(h, 1) * y).sum_dim(1).mean().neg();
    let grads = loss.backward();

    let correction = |beta: f64| t.clone().mul_scalar(beta.ln()).exp().neg().add_scalar(1.0).unsqueeze::<2>();
    let (c1, c2) = (correction(BETA1), correction(BETA2));
    let mut new_params = Vec::with_capacity(n);
    let (mut new_m, mut new_v) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for (k, p) in params.iter().enumerate() {
        let g = p.grad(&grads).expect("gradient");
        let mk = m[k].clone().mul_scalar(BETA1) + g.clone().mul_scalar(1.0 - BETA1);
        let vk = v[k].clone().mul_scalar(BETA2) + g.powi_scalar(2).mul_scalar(1.0 - BETA2);
        let update = (mk.clone() / c1.clone()) / (vk.clone() / c2.clone()).sqrt().add_scalar(EPS);
        new_params.push(to_cube(p.clone().inner() - update.mul_scalar(LR)));
        new_m.push(to_cube(mk));
        new_v.push(to_cube(vk));
    }
    let mut out = vec![to_cube(loss.inner()), to_cube(t)];
    out.extend(new_params);
    out.extend(new_m);
    out.extend(new_v);
    out
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

/// Medians of `iters` steps after `warmup` steps of `run`.
fn time(warmup: usize, iters: usize, mut inputs: Vec<T>, mut run: impl FnMut(Vec<T>) -> Vec<T>) -> (Timing, Vec<T>) {
    let (mut submit, mut total, mut launches) = (Vec::new(), Vec::new(), 0);
    for i in 0..warmup + iters {
        sync();
        let before = launch_count();
        let start = Instant::now();
        let outputs = run(inputs.clone());
        let submitted = start.elapsed();
        sync();
        let finished = start.elapsed();
        if i >= warmup {
            submit.push(submitted);
            total.push(finished);
            launches = launch_count() - before;
        }
        inputs = next_inputs(&inputs, &outputs);
    }
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    (Timing { submit: median(submit), total: median(total), launches }, inputs)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn read(t: &T) -> Vec<f32> {
    burn_backend::read_sync(Ours::float_into_data(t.clone())).expect("read").to_vec::<f32>().expect("f32")
}

/// Host cost per launch: a chain of `n` scalar multiplications of a 64-element tensor, eager
/// (plain and under autodiff) and replayed; the device work is negligible.
fn micro(warmup: usize, iters: usize) {
    let n = 100;
    let device = Default::default();
    let x = to_cube(Tensor::<Ours, 1>::ones([64], &device));
    let chain = |inputs: Vec<T>| {
        let mut t = float::<1>(inputs[0].clone());
        for _ in 0..n {
            t = t.mul_scalar(1.0001);
        }
        vec![to_cube(t)]
    };
    let chain_ad = |inputs: Vec<T>| {
        let mut t = Tensor::<Train, 1>::from_inner(float::<1>(inputs[0].clone())).require_grad();
        for _ in 0..n {
            t = t.mul_scalar(1.0001);
        }
        vec![to_cube(t.inner())]
    };
    let pipeline = Pipeline::capture(&device, &[x.clone()], chain).expect("capture");
    let mut rows = Vec::new();
    for (name, run) in [
        ("eager", &chain as &dyn Fn(Vec<T>) -> Vec<T>),
        ("eager, autodiff", &chain_ad),
        ("replay", &|inputs: Vec<T>| pipeline.run(&inputs).expect("replay")),
    ] {
        let mut submit = Vec::new();
        for i in 0..warmup + iters {
            sync();
            let start = Instant::now();
            let out = run(vec![x.clone()]);
            if i >= warmup {
                submit.push(start.elapsed());
            }
            drop(out);
        }
        submit.sort();
        rows.push((name, submit[submit.len() / 2]));
    }
    println!("| chain of {n} scalar ops on 64 elements | submit µs/op |");
    println!("|---|---|");
    for (name, t) in rows {
        println!("| {name} | {:.1} |", t.as_secs_f64() * 1e6 / n as f64);
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
    println!("MLP {LAYERS:?} training step (forward, backward, Adam in tensor ops); medians of {iters} steps after {warmup}");
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
        let (replay, replay_state) = time(warmup, iters, start, |inputs| pipeline.run(&inputs).expect("replay"));
        // Both ran the same number of steps from the same state: their losses agree.
        let (a, b) = (read(&eager_state[3]), read(&replay_state[3]));
        let same = a == b;
        let ratio = |e: Duration, r: Duration| format!("{:.2}x", e.as_secs_f64() / r.as_secs_f64());
        println!("| {batch} | eager | {} | {} | {} | | |", eager.launches, ms(eager.submit), ms(eager.total));
        println!(
            "| {batch} | replay | {} | {} | {} | {} | {} |",
            replay.launches,
            ms(replay.submit),
            ms(replay.total),
            ratio(eager.submit, replay.submit),
            ratio(eager.total, replay.total)
        );
        eprintln!(
            "batch {batch}: capture took {} ms ({} recorded launches); replayed parameters {} the eager ones",
            ms(capture_time),
            pipeline.num_launches(),
            if same { "equal" } else { "DIFFER FROM" }
        );
    }
}
