//! Command queues: submit / poll / wait, completion callbacks, submission order, many
//! threads submitting to one queue, a failure in the middle of a queue, retention of
//! outcomes nobody waits for, and a queue dropped with work still queued.
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use burn_backend::ops::FloatTensorOps;
use burn_backend::{DType, TensorData};
use burn_tensor::{Float, Tensor};
use ex_cubecl::runtime::{CommandError, CommandId, CommandQueue, CommandStatus, Pipeline, Work, from_cube, to_cube};
use ex_cubecl::tensor::CubeTensor;
use ex_cubecl_conformance::*;

type T = CubeTensor<Rt>;

fn upload(data: TensorData) -> T {
    Ex::float_from_data(data, &dev::<Ex>())
}

fn read(t: &T) -> TensorData {
    rf::<Ex>(t.clone())
}

fn floats(t: &T) -> Vec<f32> {
    read(t).to_vec::<f32>().unwrap()
}

/// `2x + 1` through a pipeline, for rank-2 `shape`.
fn affine_pipeline(shape: &[usize]) -> Arc<Pipeline<Rt>> {
    let x = upload(TensorData::zeros::<f32, _>(shape.to_vec()));
    let pipeline = Pipeline::capture(&dev::<Ex>(), &[x], |i| {
        vec![to_cube(from_cube::<Rt, 2, Float>(i[0].clone()).mul_scalar(2.0).add_scalar(1.0))]
    })
    .unwrap();
    Arc::new(pipeline)
}

fn check_values(case: &str, got: &[f32], expected: &[f32]) -> Result<(), String> {
    if got == expected { Ok(()) } else { Err(format!("{case}: got {got:?}, expected {expected:?}")) }
}

#[test]
fn submit_poll_wait_and_callbacks() {
    let mut suite = Suite::new("command queue basics");
    let device = dev::<Ex>();
    let queue = CommandQueue::<Rt>::new(&device);
    let mut rng = Rng::new(3);

    // A closure of ops.
    let data = float_data(&mut rng, &[4, 3], DType::F32, -1.0, 1.0);
    let (d, x) = (device.clone(), data.clone());
    let id = queue.submit(Work::ops(move || {
        let t = Tensor::<Ex, 2>::from_data(x, &d);
        vec![to_cube(t.clone().exp() * t)]
    }));
    let out = queue.wait(id).unwrap();
    let eager = {
        let t = Tensor::<Ex, 2>::from_data(data.clone(), &device);
        to_cube(t.clone().exp() * t)
    };
    suite.record("ops command gives the eager result", check_values("ops", &floats(&out[0]), &floats(&eager)));

    // A replay, polled until it completes.
    let pipeline = affine_pipeline(&[4, 3]);
    let input = upload(data.clone());
    let id = queue.submit(Work::replay(&pipeline, vec![input.clone()]));
    let status = loop {
        match queue.poll(id) {
            Ok(CommandStatus::Pending | CommandStatus::Running) => std::thread::yield_now(),
            other => break other,
        }
    };
    suite.record("replay command completes", if status == Ok(CommandStatus::Completed) { Ok(()) } else { Err(format!("{status:?}")) });
    let expected = pipeline.run(&[input.clone()]).unwrap();
    let got = queue.wait(id).unwrap();
    suite.record("replay command gives the pipeline's outputs", check_values("replay", &floats(&got[0]), &floats(&expected[0])));

    // The outcome is taken by `wait`; unknown ids are errors.
    suite.record(
        "second wait on an id is an error",
        match queue.wait(id) {
            Err(CommandError::Unknown(i)) if i == id => Ok(()),
            other => Err(format!("{:?}", other.map(|o| o.len()))),
        },
    );
    let unknown = CommandId(1_000_000);
    let message = queue.poll(unknown).unwrap_err().to_string();
    suite.record(
        "poll on an unknown id is an error",
        if message.contains("#1000000") && message.contains("unknown") { Ok(()) } else { Err(message) },
    );

    // Callbacks get the id and the outcome, after the outcome is recorded.
    let (tx, rx) = channel();
    let id = queue.submit_with_callback(Work::replay(&pipeline, vec![input.clone()]), move |id, outcome| {
        let values = outcome.as_ref().map(|o| o.len()).map_err(|e| e.to_string());
        tx.send((id, values)).unwrap();
    });
    let (called, values) = rx.recv().unwrap();
    suite.record("callback gets the id", if called == id { Ok(()) } else { Err(format!("{called} vs {id}")) });
    suite.record("callback gets the outputs", if values == Ok(1) { Ok(()) } else { Err(format!("{values:?}")) });
    suite.record("polled completed inside the callback's window", match queue.poll(id) {
        Ok(CommandStatus::Completed) => Ok(()),
        other => Err(format!("{other:?}")),
    });
    suite.record("forget drops an outcome", if queue.forget(id) && queue.poll(id).is_err() { Ok(()) } else { Err("still held".into()) });

    // Pending and running, held by a command that waits on the test.
    let (started_tx, started_rx) = channel();
    let (go_tx, go_rx) = channel::<()>();
    let blocker = queue.submit(Work::ops(move || {
        started_tx.send(()).unwrap();
        go_rx.recv().unwrap();
        vec![]
    }));
    let behind = queue.submit(Work::replay(&pipeline, vec![input.clone()]));
    started_rx.recv().unwrap();
    let (a, b) = (queue.poll(blocker), queue.poll(behind));
    suite.record("running and pending", if (a.clone(), b.clone()) == (Ok(CommandStatus::Running), Ok(CommandStatus::Pending)) {
        Ok(())
    } else {
        Err(format!("{a:?} {b:?}"))
    });
    go_tx.send(()).unwrap();
    suite.record("blocked command finishes", queue.wait(behind).map(|_| ()).map_err(|e| e.to_string()));
    suite.record("blocker finishes", queue.wait(blocker).map(|_| ()).map_err(|e| e.to_string()));
    suite.finish();
}

#[test]
fn failure_in_the_middle_of_a_queue() {
    let mut suite = Suite::new("command queue failures");
    let device = dev::<Ex>();
    let queue = CommandQueue::<Rt>::new(&device);
    let pipeline = affine_pipeline(&[2, 2]);
    let good = upload(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]));
    let wrong = upload(TensorData::new(vec![1.0f32, 2.0, 3.0], [3, 1]));

    let (tx, rx) = channel();
    let before = queue.submit(Work::replay(&pipeline, vec![good.clone()]));
    let panics = queue.submit_with_callback(
        Work::ops(|| {
            let a = upload(TensorData::new(vec![1.0f32; 6], [2, 3]));
            vec![Ex::float_matmul(a.clone(), a)]
        }),
        move |id, outcome| tx.send((id, outcome.as_ref().err().cloned())).unwrap(),
    );
    let refused = queue.submit(Work::replay(&pipeline, vec![wrong]));
    let after = queue.submit(Work::replay(&pipeline, vec![good.clone()]));
    queue.finish();

    let status = queue.poll(panics);
    suite.record("a panicking command fails", match &status {
        Ok(CommandStatus::Failed(reason)) if reason.contains("cannot multiply shapes [2, 3] and [2, 3]") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    let (id, error) = rx.recv().unwrap();
    suite.record("the failure's callback gets the error", match error {
        Some(CommandError::Failed { id: e, reason }) if e == id && id == panics && reason.contains("matmul") => Ok(()),
        other => Err(format!("{other:?}")),
    });
    suite.record("a refused replay fails with the pipeline's error", match queue.wait(refused) {
        Err(CommandError::Failed { reason, .. }) if reason.contains("input 0 has shape [3, 1]") => Ok(()),
        other => Err(format!("{:?}", other.map(|o| o.len()))),
    });
    for (name, id) in [("before", before), ("after", after)] {
        let result = queue.wait(id).map_err(|e| e.to_string()).and_then(|o| check_values(name, &floats(&o[0]), &[3.0, 5.0, 7.0, 9.0]));
        suite.record(format!("the command {name} the failures completes"), result);
    }
    suite.record("wait on a failed command names it", match queue.wait(panics) {
        Err(e) if e.to_string().starts_with(&format!("ex_cubecl: command {panics} failed")) => Ok(()),
        other => Err(format!("{:?}", other.map(|o| o.len()))),
    });
    suite.finish();
}

#[test]
fn many_threads_submit_to_one_queue_in_order() {
    let mut suite = Suite::new("command queue threads");
    let device = dev::<Ex>();
    let queue = CommandQueue::<Rt>::for_device(&device);
    let same = Arc::ptr_eq(&queue, &CommandQueue::<Rt>::for_device(&device));
    suite.record("for_device shares one queue per device", if same { Ok(()) } else { Err("two queues".into()) });
    let pipeline = affine_pipeline(&[1, 3]);
    let ran = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..6)
        .map(|thread| {
            let (queue, pipeline, ran) = (queue.clone(), pipeline.clone(), ran.clone());
            std::thread::spawn(move || {
                let mut results = Vec::new();
                for k in 0..8 {
                    let v = (thread * 100 + k) as f32;
                    let x = upload(TensorData::new(vec![v, v + 1.0, v + 2.0], [1, 3]));
                    let order = ran.clone();
                    // Odd steps: a plain closure that logs that it ran; even ones: replays.
                    let id = if k % 2 == 1 {
                        queue.submit(Work::ops(move || {
                            order.lock().unwrap().push((thread, k));
                            let t = from_cube::<Rt, 2, Float>(x).mul_scalar(2.0).add_scalar(1.0);
                            vec![to_cube(t)]
                        }))
                    } else {
                        queue.submit(Work::replay(&pipeline, vec![x]))
                    };
                    results.push(((thread, k), id, [2.0 * v + 1.0, 2.0 * v + 3.0, 2.0 * v + 5.0]));
                }
                results
                    .into_iter()
                    .map(|(tag, id, expected)| {
                        let got = queue.wait(id).map_err(|e| e.to_string())?;
                        check_values(&format!("thread {thread} command {id}"), &floats(&got[0]), &expected)?;
                        Ok((tag, id))
                    })
                    .collect::<Vec<Result<((usize, usize), CommandId), String>>>()
            })
        })
        .collect();
    let mut tags = std::collections::HashMap::new();
    for t in threads {
        for result in t.join().unwrap() {
            suite.record("command submitted from a thread", result.map(|(tag, id)| {
                tags.insert(tag, id);
            }));
        }
    }
    let mut ids: Vec<CommandId> = tags.values().copied().collect();
    ids.sort();
    ids.dedup();
    suite.record("ids are unique", if ids.len() == 48 { Ok(()) } else { Err(format!("{} distinct ids", ids.len())) });
    let order: Vec<CommandId> = ran.lock().unwrap().iter().map(|tag| tags[tag]).collect();
    let sorted = order.windows(2).all(|w| w[0] < w[1]);
    suite.record("commands run in submission order", if sorted && order.len() == 24 { Ok(()) } else { Err(format!("{order:?}")) });
    suite.finish();
}

#[test]
fn retention_and_drop() {
    let mut suite = Suite::new("command queue retention");
    let device = dev::<Ex>();
    let pipeline = affine_pipeline(&[1, 2]);
    let x = upload(TensorData::new(vec![1.0f32, 2.0], [1, 2]));
    let calls = Arc::new(Mutex::new(0usize));
    let ids: Vec<CommandId> = {
        let queue = CommandQueue::<Rt>::with_retention(&device, 4);
        let ids: Vec<CommandId> = (0..10)
            .map(|_| {
                let calls = calls.clone();
                queue.submit_with_callback(Work::replay(&pipeline, vec![x.clone()]), move |_, _| *calls.lock().unwrap() += 1)
            })
            .collect();
        queue.finish();
        let kept: Vec<bool> = ids.iter().map(|&id| queue.poll(id).is_ok()).collect();
        let expected: Vec<bool> = (0..10).map(|k| k >= 6).collect();
        suite.record("only the newest outcomes are kept", if kept == expected { Ok(()) } else { Err(format!("{kept:?}")) });
        suite.record("a dropped outcome is an unknown id", match queue.wait(ids[0]) {
            Err(CommandError::Unknown(_)) => Ok(()),
            other => Err(format!("{:?}", other.map(|o| o.len()))),
        });
        suite.record("a kept outcome can be waited for", queue.wait(ids[9]).map_err(|e| e.to_string()).and_then(|o| check_values("kept", &floats(&o[0]), &[3.0, 5.0])));
        // Queue more work and drop the queue at once: it finishes the work first.
        for _ in 0..5 {
            let calls = calls.clone();
            queue.submit_with_callback(Work::replay(&pipeline, vec![x.clone()]), move |_, _| *calls.lock().unwrap() += 1);
        }
        ids
    };
    let called = *calls.lock().unwrap();
    suite.record("dropping a queue finishes its queued commands", if called == 15 { Ok(()) } else { Err(format!("{called} callbacks")) });
    suite.record("ids count up", if ids.windows(2).all(|w| w[1].0 == w[0].0 + 1) { Ok(()) } else { Err(format!("{ids:?}")) });
    suite.finish();
}
