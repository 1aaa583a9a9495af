//! Pipelines: a replay gives bit for bit what eager execution of the same closure gives
//! (forward pass with module ops, a full Adam training step through `Autodiff`, a step of
//! int and bool ops), also after the capture's inputs are dropped; replays draw fresh random
//! numbers; bad inputs and host reads during capture give errors that say what went wrong.
use burn_autodiff::Autodiff;
use burn_backend::ops::{BoolTensorOps, ConvOptions, FloatTensorOps, IntTensorOps};
use burn_backend::{Backend, DType, TensorData};
use burn_tensor::activation::{log_softmax, relu, softmax};
use burn_tensor::module::{conv2d, max_pool2d};
use burn_tensor::{Bool, Distribution, Float, Int, Tensor};
use ex_cubecl::runtime::{Pipeline, from_cube, to_cube};
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_conformance::*;

type T = CubeTensor<Rt>;
type A = Autodiff<Ex>;

fn float<const D: usize>(t: T) -> Tensor<Ex, D> {
    from_cube::<Rt, D, Float>(t)
}

fn int<const D: usize>(t: T) -> Tensor<Ex, D, Int> {
    from_cube::<Rt, D, Int>(t)
}

fn upload(data: TensorData) -> T {
    let device = dev::<Ex>();
    match data.dtype {
        DType::Bool(_) => Ex::bool_from_data(data, &device),
        d if d.is_float() => Ex::float_from_data(data, &device),
        _ => Ex::int_from_data(data, &device),
    }
}

fn read(t: &T) -> TensorData {
    rf::<Ex>(t.clone())
}

/// Same shape, dtype and bytes.
fn same_bits(ours: &[T], expected: &[T]) -> Result<(), String> {
    if ours.len() != expected.len() {
        return Err(format!("{} outputs, expected {}", ours.len(), expected.len()));
    }
    for (k, (a, b)) in ours.iter().zip(expected).enumerate() {
        let (a, b) = (read(a), read(b));
        if a.shape != b.shape || a.dtype != b.dtype {
            return Err(format!("output {k}: {:?} {:?}, expected {:?} {:?}", a.shape, a.dtype, b.shape, b.dtype));
        }
        if a.as_bytes() != b.as_bytes() {
            return Err(format!("output {k} ({:?} {:?}) differs from eager execution", a.shape, a.dtype));
        }
    }
    Ok(())
}

/// A small conv net forward pass: conv, max pool, matmul, bias, relu, softmax, with a
/// constant uploaded inside the closure.
fn forward(inputs: Vec<T>) -> Vec<T> {
    let [x, kernel, w, b] = <[T; 4]>::try_from(inputs).unwrap();
    let device = dev::<Ex>();
    let x = float::<4>(x);
    let c = conv2d(x, float(kernel), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
    let c = max_pool2d(relu(c), [2, 2], [2, 2], [0, 0], [1, 1], false);
    let flat = c.clone().flatten::<2>(1, 3);
    let scale = Tensor::<Ex, 1>::from_data(TensorData::new(vec![0.5f32, 2.0, -1.0], [3]), &device);
    let logits = flat.matmul(float(w)) + float::<1>(b).unsqueeze::<2>() * scale.unsqueeze::<2>();
    let probs = softmax(logits.clone(), 1);
    vec![to_cube(probs), to_cube(logits.transpose()), to_cube(c.sum())]
}

fn forward_inputs(rng: &mut Rng) -> Vec<T> {
    vec![
        upload(float_data(rng, &[2, 2, 6, 6], DType::F32, -1.0, 1.0)),
        upload(float_data(rng, &[3, 2, 3, 3], DType::F32, -0.5, 0.5)),
        upload(float_data(rng, &[27, 3], DType::F32, -0.5, 0.5)),
        upload(float_data(rng, &[3], DType::F32, -0.5, 0.5)),
    ]
}

#[test]
fn forward_replay_matches_eager_bit_for_bit() {
    let mut suite = Suite::new("pipeline forward");
    let seed = 11;
    let mut rng = Rng::new(seed);
    let first = forward_inputs(&mut rng);
    let (pipeline, captured) = Pipeline::capture_with_outputs(&dev::<Ex>(), &first, forward).unwrap();
    suite.record(format!("forward capture outputs seed={seed}"), same_bits(&captured, &forward(first.clone())));
    suite.record(
        "forward records launches",
        if pipeline.num_launches() >= 6 { Ok(()) } else { Err(format!("{} launches: {:?}", pipeline.num_launches(), pipeline.ops())) },
    );
    for round in 0..3 {
        let inputs = forward_inputs(&mut rng);
        let replayed = pipeline.run(&inputs).unwrap();
        let eager = forward(inputs);
        suite.record(format!("forward replay {round} seed={seed}"), same_bits(&replayed, &eager));
    }
    // Outputs are fresh tensors: a later replay leaves earlier outputs alone.
    let a_inputs = forward_inputs(&mut rng);
    let a = pipeline.run(&a_inputs).unwrap();
    let a_bytes: Vec<TensorData> = a.iter().map(read).collect();
    let _b = pipeline.run(&forward_inputs(&mut rng)).unwrap();
    let unchanged = a.iter().zip(&a_bytes).all(|(t, d)| read(t).as_bytes() == d.as_bytes());
    suite.record("forward outputs survive the next replay", if unchanged { Ok(()) } else { Err("overwritten".into()) });
    // Views as new inputs: copied into the pipeline's buffers whatever their layout.
    let mut view_inputs = forward_inputs(&mut rng);
    let w = read(&view_inputs[2]);
    let wt = TensorData::new(
        (0..27 * 3).map(|k| w.as_slice::<f32>().unwrap()[(k % 27) * 3 + k / 27]).collect::<Vec<f32>>(),
        [3, 27],
    );
    view_inputs[2] = Ex::float_swap_dims(upload(wt), 0, 1);
    let replayed = pipeline.run(&view_inputs).unwrap();
    let contiguous: Vec<T> = view_inputs.iter().map(|t| upload(read(t))).collect();
    suite.record("forward replay on a transposed input", same_bits(&replayed, &forward(contiguous)));
    suite.finish();
}

const LR: f64 = 0.01;
const BETA1: f64 = 0.9;
const BETA2: f64 = 0.999;
const EPS: f64 = 1e-8;

/// An MLP training step with Adam, written in tensor ops on `Autodiff<Ex>`. Inputs: x
/// `[n, 6]`, one-hot targets `[n, 3]`, the step count `[1]`, then the parameters w1 `[6, 8]`,
/// b1 `[1, 8]`, w2 `[8, 3]`, b2 `[1, 3]`, their first moments and their second moments.
/// Outputs: the loss, the next step count, then the updated parameters and moments.
fn train_step(inputs: Vec<T>) -> Vec<T> {
    let mut it = inputs.into_iter();
    let x = Tensor::<A, 2>::from_inner(float(it.next().unwrap()));
    let y = Tensor::<A, 2>::from_inner(float(it.next().unwrap()));
    let t = float::<1>(it.next().unwrap());
    let rest: Vec<Tensor<Ex, 2>> = it.map(float).collect();
    let (params, moments) = rest.split_at(4);
    let params: Vec<Tensor<A, 2>> = params.iter().map(|p| Tensor::from_inner(p.clone()).require_grad()).collect();

    let h = relu(x.matmul(params[0].clone()) + params[1].clone());
    let logits = h.matmul(params[2].clone()) + params[3].clone();
    let loss = (log_softmax(logits, 1) * y).sum_dim(1).mean().neg();
    let grads = loss.backward();

    // The step count is a tensor: host scalars would be frozen at capture.
    let t = t.add_scalar(1.0);
    let correction = |beta: f64| (t.clone().mul_scalar(beta.ln()).exp().neg().add_scalar(1.0)).unsqueeze::<2>();
    let (c1, c2) = (correction(BETA1), correction(BETA2));
    let mut new_params = Vec::new();
    let (mut new_m, mut new_v) = (Vec::new(), Vec::new());
    for (k, p) in params.iter().enumerate() {
        let g = p.grad(&grads).expect("gradient");
        let m = moments[k].clone().mul_scalar(BETA1) + g.clone().mul_scalar(1.0 - BETA1);
        let v = moments[4 + k].clone().mul_scalar(BETA2) + g.powi_scalar(2).mul_scalar(1.0 - BETA2);
        let update = (m.clone() / c1.clone()) / ((v.clone() / c2.clone()).sqrt().add_scalar(EPS));
        new_params.push(to_cube(p.clone().inner() - update.mul_scalar(LR)));
        new_m.push(to_cube(m));
        new_v.push(to_cube(v));
    }
    let mut out = vec![to_cube(loss.inner()), to_cube(t)];
    out.extend(new_params);
    out.extend(new_m);
    out.extend(new_v);
    out
}

fn train_inputs(rng: &mut Rng, n: usize) -> Vec<T> {
    let labels: Vec<usize> = (0..n).map(|_| rng.int(0, 3) as usize).collect();
    let onehot: Vec<f32> = (0..n * 3).map(|k| (labels[k / 3] == k % 3) as u8 as f32).collect();
    let mut inputs = vec![
        upload(float_data(rng, &[n, 6], DType::F32, -1.0, 1.0)),
        upload(TensorData::new(onehot, [n, 3])),
        upload(TensorData::new(vec![0.0f32], [1])),
    ];
    let shapes = [[6, 8], [1, 8], [8, 3], [1, 3]];
    for s in shapes {
        inputs.push(upload(float_data(rng, &s, DType::F32, -0.5, 0.5)));
    }
    for _ in 0..2 {
        for s in shapes {
            inputs.push(upload(TensorData::zeros::<f32, _>(s)));
        }
    }
    inputs
}

/// The next step's inputs: the same batch, the step's outputs as state.
fn next_inputs(inputs: &[T], outputs: &[T]) -> Vec<T> {
    let mut next = inputs[..2].to_vec();
    next.extend(outputs[1..].iter().cloned());
    next
}

#[test]
fn training_step_replay_matches_eager_bit_for_bit() {
    let mut suite = Suite::new("pipeline training step");
    let seed = 21;
    let mut rng = Rng::new(seed);
    let start = train_inputs(&mut rng, 16);
    let pipeline = Pipeline::capture(&dev::<Ex>(), &start, train_step).unwrap();
    let (mut eager_in, mut replay_in) = (start.clone(), start);
    let mut losses = Vec::new();
    for step in 0..4 {
        let eager = train_step(eager_in.clone());
        let replayed = pipeline.run(&replay_in).unwrap();
        suite.record(format!("training step {step} (forward, backward, Adam) seed={seed}"), same_bits(&replayed, &eager));
        losses.push(read(&replayed[0]).as_slice::<f32>().unwrap()[0]);
        eager_in = next_inputs(&eager_in, &eager);
        replay_in = next_inputs(&replay_in, &replayed);
    }
    let steps = read(&replay_in[2]).as_slice::<f32>().unwrap()[0];
    suite.record("training step count advances", if steps == 4.0 { Ok(()) } else { Err(format!("step count {steps}")) });
    suite.record(
        "training loss decreases",
        if losses[3] < losses[0] { Ok(()) } else { Err(format!("losses {losses:?}")) },
    );
    suite.finish();
}

/// Int and bool ops: argmax, comparisons, bool logic, mask_fill, gather, int arithmetic and
/// casts. Inputs: x `[6, 4]` f32, labels `[6]` i32, mask `[6, 4]` bool.
fn int_bool_step(inputs: Vec<T>) -> Vec<T> {
    let [x, labels, mask] = <[T; 3]>::try_from(inputs).unwrap();
    let x = float::<2>(x);
    let labels = int::<1>(labels);
    let mask = from_cube::<Rt, 2, Bool>(mask);
    let predicted = x.clone().argmax(1).squeeze_dim::<1>(1);
    let correct = predicted.clone().equal(labels.clone());
    let big = labels.clone().greater_elem(1);
    let either = correct.clone().bool_or(big.clone()).bool_and(big.clone().bool_not().bool_not());
    let hits = correct.clone().int().sum();
    let masked = x.clone().mask_fill(mask.clone(), 0.0);
    let picked = x.clone().gather(1, labels.clone().clamp(0, 3).unsqueeze_dim::<2>(1));
    let scores = (labels.clone().mul_scalar(3) + predicted.clone()).remainder_scalar(5) - 2;
    let accuracy = correct.clone().float().mean();
    let counts = mask.int().sum_dim(1).squeeze_dim::<1>(1) * labels;
    vec![
        to_cube(predicted),
        to_cube(correct),
        to_cube(either),
        to_cube(hits),
        to_cube(masked),
        to_cube(picked),
        to_cube(scores),
        to_cube(accuracy),
        to_cube(counts),
    ]
}

fn int_bool_inputs(rng: &mut Rng) -> Vec<T> {
    vec![
        upload(float_data(rng, &[6, 4], DType::F32, -1.0, 1.0)),
        upload(int_data(rng, &[6], DType::I32, 0, 4)),
        upload(bool_data(rng, &[6, 4])),
    ]
}

#[test]
fn int_bool_replay_matches_eager_bit_for_bit() {
    let mut suite = Suite::new("pipeline int/bool step");
    let seed = 31;
    let mut rng = Rng::new(seed);
    let pipeline = Pipeline::capture(&dev::<Ex>(), &int_bool_inputs(&mut rng), int_bool_step).unwrap();
    for round in 0..3 {
        let inputs = int_bool_inputs(&mut rng);
        let replayed = pipeline.run(&inputs).unwrap();
        suite.record(format!("int/bool replay {round} seed={seed}"), same_bits(&replayed, &int_bool_step(inputs)));
    }
    suite.finish();
}

#[test]
fn replay_after_the_capture_inputs_are_dropped() {
    let mut suite = Suite::new("pipeline dropped inputs");
    let mut rng = Rng::new(41);
    let pipeline = {
        let inputs = forward_inputs(&mut rng);
        let pipeline = Pipeline::capture(&dev::<Ex>(), &inputs, forward).unwrap();
        drop(inputs);
        pipeline
    };
    // Allocate and drop other tensors so that freed buffers would be reused.
    for _ in 0..3 {
        let junk = forward_inputs(&mut rng);
        drop(forward(junk));
    }
    let inputs = forward_inputs(&mut rng);
    let replayed = pipeline.run(&inputs).unwrap();
    suite.record("replay after the capture's inputs are dropped", same_bits(&replayed, &forward(inputs)));
    // A pipeline moved to another thread replays there too.
    let inputs = forward_inputs(&mut rng);
    let expected = forward(inputs.clone());
    let replayed = std::thread::spawn(move || pipeline.run(&inputs).unwrap()).join().unwrap();
    suite.record("replay on another thread", same_bits(&replayed, &expected));
    suite.finish();
}


#[test]
fn bad_inputs_and_host_reads_give_errors() {
    let mut suite = Suite::new("pipeline errors");
    let device = dev::<Ex>();
    let mut rng = Rng::new(51);
    let a = upload(float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0));
    let b = upload(float_data(&mut rng, &[2, 3], DType::F32, -1.0, 1.0));
    let add = |i: Vec<T>| vec![to_cube(float::<2>(i[0].clone()) + float::<2>(i[1].clone()))];
    let pipeline = Pipeline::capture(&device, &[a.clone(), b.clone()], add).unwrap();

    let wrong_shape = upload(float_data(&mut rng, &[3, 2], DType::F32, -1.0, 1.0));
    suite.expect_error("run: wrong shape", pipeline.run(&[a.clone(), wrong_shape]), &["input 1", "[3, 2]", "[2, 3]"]);
    let wrong_dtype = upload(int_data(&mut rng, &[2, 3], DType::I32, 0, 5));
    suite.expect_error("run: wrong dtype", pipeline.run(&[wrong_dtype, b.clone()]), &["input 0", "I32", "F32"]);
    suite.expect_error("run: wrong count", pipeline.run(&[a.clone()]), &["got 1 inputs", "captured with 2"]);
    suite.record("run: still fine after refusals", same_bits(&pipeline.run(&[a.clone(), b.clone()]).unwrap(), &add(vec![a.clone(), b.clone()])));

    // Reads to the host during capture.
    let reads = catch(|| {
        Pipeline::capture(&device, &[a.clone()], |i| {
            let total = float::<2>(i[0].clone()).sum().into_scalar();
            vec![to_cube(float::<2>(i[0].clone()).mul_scalar(total))]
        })
    })
    .unwrap();
    suite.expect_error("capture: into_scalar", reads, &["pipeline capture", "into_data", "reads data back to the host"]);
    let reads = catch(|| {
        Pipeline::capture(&device, &[a.clone()], |i| {
            let _ = float::<2>(i[0].clone()).into_data();
            i
        })
    })
    .unwrap();
    suite.expect_error("capture: into_data", reads, &["into_data"]);
    // The capture state is cleared: reads work again, and so does a new capture.
    let again = catch(|| read(&a)).map(|_| ());
    suite.record("capture state cleared after a host read", again);
    let fresh = Pipeline::capture(&device, &[a.clone(), b.clone()], add).map(|p| p.run(&[a.clone(), b.clone()]).unwrap());
    suite.record("capture works after a failed capture", fresh.map_err(|e| e.to_string()).and_then(|r| same_bits(&r, &add(vec![a.clone(), b.clone()]))));

    // A panic inside the closure, e.g. a bad shape.
    let panicked = catch(|| {
        Pipeline::capture(&device, &[a.clone()], |i| {
            let x = i[0].clone();
            vec![Ex::float_matmul(x.clone(), x)]
        })
    })
    .unwrap();
    suite.expect_error("capture: panicking closure", panicked, &["the closure panicked", "cannot multiply shapes [2, 3] and [2, 3]"]);

    // Nesting and runs during a capture.
    let mut inner = None;
    let outer = Pipeline::capture(&device, &[a.clone()], |i| {
        inner = Some((
            Pipeline::capture(&device, &i, |j| j).map(|_| ()),
            pipeline.run(&[a.clone(), b.clone()]).map(|_| ()),
        ));
        i
    });
    suite.record("capture: outer capture survives", outer.map(|_| ()).map_err(|e| e.to_string()));
    let (nested, run) = inner.unwrap();
    suite.expect_error("capture: nested capture", nested, &["captures do not nest"]);
    suite.expect_error("capture: run during capture", run, &["while a capture is active"]);
    suite.finish();
}

/// `x + uniform noise`, and `x` through a dropout mask.
fn noisy(inputs: Vec<T>) -> Vec<T> {
    let device = dev::<Ex>();
    let x = float::<2>(inputs[0].clone());
    let noise = Tensor::<Ex, 2>::random(x.dims(), Distribution::Uniform(-1.0, 1.0), &device);
    let keep = Tensor::<Ex, 2>::random(x.dims(), Distribution::Bernoulli(0.5), &device);
    vec![to_cube(x.clone() + noise), to_cube(x * keep)]
}

#[test]
fn replays_draw_fresh_random_numbers() {
    // The only test of this binary that draws random numbers: the seed decides them.
    let mut suite = Suite::new("pipeline random");
    let device = dev::<Ex>();
    let mut rng = Rng::new(61);
    let x = upload(float_data(&mut rng, &[16, 16], DType::F32, 1.0, 2.0));
    Ex::seed(&device, 7);
    let eager = noisy(vec![x.clone()]);
    Ex::seed(&device, 7);
    let pipeline = Pipeline::capture(&device, &[x.clone()], noisy).unwrap();
    Ex::seed(&device, 7);
    let first = pipeline.run(&[x.clone()]).unwrap();
    suite.record("random: replay after the same seed repeats eager", same_bits(&first, &eager));
    let second = pipeline.run(&[x.clone()]).unwrap();
    let differs = (0..2).all(|k| read(&first[k]).as_bytes() != read(&second[k]).as_bytes());
    suite.record("random: each replay draws fresh numbers", if differs { Ok(()) } else { Err("two replays drew the same numbers".into()) });
    suite.finish();
}
