//! The reduction and softmax fusers: reductions with elementwise work on both sides, and
//! softmax and layer norm written as ops in few launches.
use super::*;

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
        // (split: the read program, the reduction and the write program one by one), and
        // short lines over a contiguous innermost dimension of a multiple of 8 (a unit per
        // vector of adjacent lines).
        for (k, shape) in [[3, 5, 7], [2, 4, 9], [1, 3, 700], [4, 600, 1], [1, 1, 5000], [3, 5, 8], [6, 3, 16]].into_iter().enumerate() {
            for rep in 0..4 {
                let axis = match k {
                    0 | 1 => rng.int(0, 3) as usize,
                    2..=4 => (0..3).find(|&a| shape[a] >= 600).unwrap(),
                    _ => rng.int(0, 2) as usize,
                };
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
                check_outputs(&mut suite, &label, dtype, Tol::of(1e-4), |j| format!("output {j}"), fused, unfused, reference);
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
    // the max, sub-exp-sum (one launch), `m * 0` (of the max's shape, a launch over it) and
    // the division and the sum (one launch: `m * 0` no longer cuts them apart).
    let (launches, ours) = count(&|| {
        let m = tx.clone().max_dim(1);
        let e = (tx.clone() - m.clone()).exp();
        e.clone() / e.sum_dim(1) + m * 0.0
    });
    suite.record("softmax keeping its max: 4 launches", if launches == 4 { Ok(()) } else { Err(format!("{launches} launches")) });
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
