//! Pipelines captured over the fused backend (their replays against eager fused steps), and
//! failures inside a fused capture or on burn-fusion's engine thread.
use super::*;

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

/// How [`moments_step`] runs.
#[derive(Clone, Copy, Debug)]
struct Moments {
    /// The new state in the order this picks from (w', m', v').
    order: [usize; 3],
    /// Whether a view of the old w is an output.
    keep_view: bool,
    /// Whether the gradient is the product `g @ h` (the moments then in its epilogue).
    product: bool,
}

/// An Adam-like update on `B` (no autodiff): inputs the gradient g `[4, 6]` and h `[6, 6]`,
/// state w, m, v (each `[4, 6]`); gives w' * 2 (and a view of the old w), and the new state.
fn moments_step<B: Backend>(inputs: [Tensor<B, 2>; 2], state: Vec<Tensor<B, 2>>, how: Moments) -> (Vec<Tensor<B, 2>>, Vec<Tensor<B, 2>>) {
    let [g, h] = inputs;
    let g = if how.product { g.matmul(h) } else { g };
    let [w, m, v] = <[Tensor<B, 2>; 3]>::try_from(state).ok().unwrap();
    let kept = how.keep_view.then(|| w.clone().reshape([6, 4]).reshape([4, 6]));
    let m = m * 0.9 + g.clone() * 0.1;
    let v = v * 0.99 + g.clone() * g * 0.01;
    let w = w - m.clone() / (v.clone().sqrt() + 1e-3) * 0.05;
    let new = [w.clone(), m, v];
    let outputs = [vec![w * 2.0], kept.into_iter().collect()].concat();
    (outputs, how.order.iter().map(|&k| new[k].clone()).collect())
}

#[test]
fn fused_captures_write_new_state_over_the_old() {
    use burn_backend::TensorPrimitive;
    use burn_backend::ops::FloatTensorOps;
    use ex_cubecl::runtime::Pipeline;
    let _turn = serial();
    let mut suite = Suite::new("fusion pipelines: state written in place");
    let mut rng = Rng::new(41);
    let inputs = [float_data(&mut rng, &[4, 6], DType::F32, -1.0, 1.0), float_data(&mut rng, &[6, 6], DType::F32, -0.5, 0.5)];
    let state: Vec<TensorData> = (0..3).map(|k| float_data(&mut rng, &[4, 6], DType::F32, k as f64 * 0.5, 1.0)).collect();
    let on = |ts: &[TensorData]| -> Vec<CubeTensor<Rt>> { ts.iter().map(|t| Ex::float_from_data(t.clone(), &dev::<Ex>())).collect() };
    let to_tensor = |t| Tensor::<Fused, 2>::from_primitive(TensorPrimitive::Float(t));
    let to_primitives = |ts: Vec<Tensor<Fused, 2>>| ts.into_iter().map(|t| t.into_primitive().tensor()).collect::<Vec<_>>();
    // (how, state copies at most): in place, none; the new state permuted, each copied aside
    // and then in (the guess is wrong for all three); the old w's view alive, w' alone copied;
    // the moments in a product's epilogue, none.
    let (direct, view, product) = ([0, 1, 2], false, false);
    let cases = [
        (Moments { order: direct, keep_view: view, product }, 0),
        (Moments { order: [1, 2, 0], keep_view: view, product }, 6),
        (Moments { order: direct, keep_view: true, product }, 1),
        (Moments { order: direct, keep_view: view, product: true }, 0),
    ];
    for (how, most_copies) in cases {
        let case = format!("{how:?}");
        let captured = Pipeline::capture_fused_with_state(&dev::<Ex>(), &on(&inputs), &on(&state), |ins, st| {
            let ins = <[_; 2]>::try_from(ins).ok().unwrap().map(to_tensor);
            let (outputs, new_state) = moments_step(ins, st.into_iter().map(to_tensor).collect(), how);
            (to_primitives(outputs), to_primitives(new_state))
        });
        let (pipeline, first) = captured.unwrap_or_else(|e| panic!("{case}: the fused capture failed: {e}"));
        let mut ours = vec![first];
        ours.extend((0..2).map(|_| pipeline.run(&on(&inputs)).unwrap()));
        // The same three steps eager on the fused backend, the new state fed back as the state.
        let d = dev::<Fused>();
        let mut eager_state: Vec<Tensor<Fused, 2>> = state.iter().map(|t| Tensor::from_data(t.clone(), &d)).collect();
        for (step, ours) in ours.iter().enumerate() {
            let eager_inputs = inputs.clone().map(|t| Tensor::from_data(t, &d));
            let (outputs, next) = moments_step(eager_inputs, eager_state, how);
            for (k, (ours, theirs)) in ours.iter().zip(outputs).enumerate() {
                let label = format!("{case}: step {step}, output {k} as eager fused execution");
                suite.check(label, Tol::EXACT, (Ok(rf::<Ex>(ours.clone())), theirs.into_data()));
            }
            eager_state = next;
        }
        let state_after: Vec<TensorData> = pipeline.state().unwrap().into_iter().map(rf::<Ex>).collect();
        for (k, (ours, theirs)) in state_after.into_iter().zip(eager_state).enumerate() {
            suite.check(format!("{case}: state {k} after three steps"), Tol::EXACT, (Ok(ours), theirs.into_data()));
        }
        let copies = pipeline.num_state_copies();
        let few = if copies <= most_copies { Ok(()) } else { Err(format!("{copies} state copies")) };
        suite.record(format!("{case}: at most {most_copies} state copies per run ({copies})"), few);
    }
    suite.finish();
}
