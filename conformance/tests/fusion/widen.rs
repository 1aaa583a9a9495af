//! Blocks over two shapes: per-channel values (`[1, C, 1, 1]`) among per-element work
//! (`[N, C, H, W]`), computed by a launch over the smaller shape that writes those still
//! needed after the block and hands the others to the block's launch; blocks of fills alone;
//! batch norm's training step as burn-nn writes it. Every result must be the unfused
//! backend's bit for bit.
use super::*;

/// Per-channel statistics `m`, `v` and per-element `x`, as a batch norm's forward and
/// backward mix them: `s` and `q` live on (written by the launch over the smaller shape),
/// `r` dies inside the block (handed over), `t` is reduced from a widened block, `u` folds a
/// difference.
fn mixed<B: Backend>(inputs: &[TensorData; 3], dtype: DType) -> Vec<TensorData> {
    let d = dev::<B>();
    let [x, m, v] = inputs.clone().map(|t| Tensor::<B, 4>::from_data(t, (&d, held::<B>(dtype))));
    let s = (v.clone() + 1e-3).sqrt();
    let y = (x.clone() - m.clone()) / s.clone() * 1.5 + 0.25;
    let r = s.clone().recip();
    let q = s.clone() * s.clone();
    let z = (x.clone() * r - m.clone()).tanh();
    let t = ((v.abs() + 1.0).log() * x.clone() - m).sum_dim(0);
    // A difference folded straight into a sum (Mesa once joined the two, changing the bits).
    let u = (x.clone() * x.clone() - x.clone().exp()).sum_dim(0);
    vec![y.into_data(), s.into_data(), z.into_data(), q.into_data(), t.into_data(), u.into_data(), x.into_data()]
}

#[test]
fn per_channel_values_beside_per_element_work() {
    let _turn = serial();
    let mut suite = Suite::new("fusion widened blocks");
    for dtype in float_dtypes() {
        let mut rng = Rng::new(0x31DE + dtype.size() as u64);
        for shape in [[2, 3, 4, 5], [4, 8, 1, 8], [1, 2, 3, 1]] {
            let channel = [1, shape[1], 1, 1];
            let inputs = [
                float_data(&mut rng, &shape, DType::F32, -1.0, 1.0),
                float_data(&mut rng, &channel, DType::F32, -0.5, 0.5),
                float_data(&mut rng, &channel, DType::F32, 0.1, 2.0),
            ];
            let fused = catch(|| mixed::<Fused>(&inputs, dtype));
            let (unfused, reference) = (mixed::<Ex>(&inputs, dtype), mixed::<Ref>(&inputs, dtype));
            for (j, name) in ["y", "s (lives on)", "z (r dies)", "q (lives on)", "t (reduced)", "u (reduced)", "x"].into_iter().enumerate() {
                let label = format!("{dtype:?} {shape:?} {name}");
                let ours = fused.clone().map(|f| f[j].clone());
                suite.check(format!("{label} as unfused"), Tol::EXACT, (ours.clone(), unfused[j].clone()));
                suite.check(format!("{label} as ndarray"), Tol::of(1e-4).for_dtype(dtype), (ours, reference[j].clone()));
            }
        }
    }
    suite.finish();
}

#[test]
fn widened_blocks_and_fills_take_few_launches() {
    let _turn = serial();
    let mut suite = Suite::new("fusion widened launches");
    let device = dev::<Fused>();
    let mut rng = Rng::new(0x31DF);
    let (x, m) = (float_data(&mut rng, &[2, 3, 4, 4], DType::F32, -1.0, 1.0), float_data(&mut rng, &[1, 3, 1, 1], DType::F32, 0.5, 1.5));
    let (tx, tm) = (Tensor::<Fused, 4>::from_data(x, &device), Tensor::<Fused, 4>::from_data(m, &device));
    // Per-element work, a per-channel value, per-element work on both: the per-channel op
    // no longer cuts the block: one launch over [1, C, 1, 1], one over the block.
    let dies = launches(|| vec![((tx.clone() * 2.0) / tm.clone().sqrt()).exp()]);
    suite.record("x * 2, sqrt of [1, C, 1, 1], then / s and exp: two launches", if dies == 2 { Ok(()) } else { Err(format!("{dies} launches")) });
    // `s` kept: the launch over [1, C, 1, 1] writes it too.
    let lives = launches(|| {
        let s = tm.clone().sqrt();
        vec![((tx.clone() * 2.0) / s.clone()).exp(), s]
    });
    suite.record("the same with s kept: two launches", if lives == 2 { Ok(()) } else { Err(format!("{lives} launches")) });
    // Autodiff's `ones * scalar` (a mean's gradient): one launch, where it took two.
    let fills = launches(|| vec![Tensor::<Fused, 4>::ones([2, 3, 4, 4], &device) * 0.125]);
    suite.record("ones * 0.125: one launch", if fills == 1 { Ok(()) } else { Err(format!("{fills} launches")) });
    suite.finish();
}

/// A burn-nn `BatchNorm`'s training step: the forward (its statistics, the running ones, the
/// normalisation) and the gradients of the input, the scale and the shift.
fn batch_norm_step<B: burn_tensor::backend::AutodiffBackend>(x: &TensorData) -> Vec<TensorData> {
    use burn_nn::BatchNormConfig;
    let d = dev::<B>();
    let channels = x.shape[1];
    let norm = BatchNormConfig::new(channels).init::<B>(&d);
    let x = Tensor::<B, 4>::from_data(x.clone(), &d).require_grad();
    let y = activation::relu(norm.forward(x.clone()));
    let loss = (y.clone() * y.clone()).sum();
    let g = loss.backward();
    let grad = |t: &burn_core::module::Param<Tensor<B, 1>>| t.val().grad(&g).map(|t| t.into_data());
    vec![
        y.into_data(),
        x.grad(&g).expect("x's gradient").into_data(),
        grad(&norm.gamma).expect("gamma's gradient"),
        grad(&norm.beta).expect("beta's gradient"),
        norm.running_mean.value().into_data(),
        norm.running_var.value().into_data(),
    ]
}

#[test]
fn batch_norm_training_step_as_unfused() {
    let _turn = serial();
    let mut suite = Suite::new("fusion batch norm");
    let mut rng = Rng::new(0xBA7C);
    for shape in [[4, 8, 6, 6], [2, 16, 3, 5]] {
        let x = float_data(&mut rng, &shape, DType::F32, -2.0, 2.0);
        let fused = catch(|| batch_norm_step::<Autodiff<Fused>>(&x));
        let (unfused, reference) = (batch_norm_step::<Autodiff<Ex>>(&x), batch_norm_step::<Autodiff<Ref>>(&x));
        let names = ["y", "x grad", "gamma grad", "beta grad", "running mean", "running var"];
        check_outputs(&mut suite, &format!("{shape:?}"), DType::F32, Tol::of(1e-3), |j| names[j].to_string(), fused, unfused, reference);
    }
    suite.finish();
}
