//! Blocks that no fuser fuses as a whole: a convolution (which none of ours takes), a
//! reduction with nothing to fuse, each with later ops that read its result. Burn's search
//! adds those ops to the leading op's block; the lead fuser runs the leading op alone so that
//! the others fuse. Results must be the unfused backend's bit for bit.
use burn_tensor::module::conv2d;
use burn_tensor::ops::ConvOptions;

use super::*;

/// A convolution's output normalised over the batch as a batch norm does (a mean, `y - m`,
/// its square), while a block of other work is still open.
fn conv_then_norm<B: Backend>(inputs: &[TensorData; 3]) -> Vec<TensorData> {
    let d = dev::<B>();
    let [x, w, a] = inputs.clone().map(|t| Tensor::<B, 4>::from_data(t, &d));
    let open = a * 2.0;
    let y = conv2d(x, w, None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
    let m = y.clone().mean_dim(0);
    let c = y - m.clone();
    let z = (c.clone() * c * 0.5).exp();
    let b = (open + 1.0).tanh();
    vec![z.into_data(), m.into_data(), b.into_data()]
}

fn inputs(rng: &mut Rng) -> [TensorData; 3] {
    [
        float_data(rng, &[2, 3, 6, 6], DType::F32, -1.0, 1.0),
        float_data(rng, &[4, 3, 3, 3], DType::F32, -0.5, 0.5),
        float_data(rng, &[2, 4, 6, 6], DType::F32, -1.0, 1.0),
    ]
}

#[test]
fn ops_after_a_convolution_fuse() {
    let _turn = serial();
    let mut suite = Suite::new("fusion lead");
    let mut rng = Rng::new(0x1EAD);
    let data = inputs(&mut rng);
    let fused = catch(|| conv_then_norm::<Fused>(&data));
    let (unfused, reference) = (conv_then_norm::<Ex>(&data), conv_then_norm::<Ref>(&data));
    let names = ["exp((y - m)^2 / 2)", "m", "tanh(2a + 1)"];
    check_outputs(&mut suite, "conv, mean", DType::F32, Tol::of(1e-4), |j| names[j].to_string(), fused, unfused, reference);

    // Launches: the convolution's and the mean's own, one for `y - m` through `exp`, one for
    // the open block. Run in the convolution's block, `y - m`, the squares and `exp` took
    // one launch each.
    let device = dev::<Fused>();
    let [x, w, a] = data.map(|t| Tensor::<Fused, 4>::from_data(t, &device));
    let conv = || conv2d(x.clone(), w.clone(), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
    let alone = launches(|| vec![conv().mean_dim(0)]);
    let all = launches(|| {
        let open = a.clone() * 2.0;
        let y = conv();
        let m = y.clone().mean_dim(0);
        let c = y - m.clone();
        vec![(c.clone() * c * 0.5).exp(), m, (open + 1.0).tanh()]
    });
    let expected = alone + 2;
    suite.record(
        format!("convolution and mean ({alone} launches), then two fused blocks: {expected}"),
        if all == expected { Ok(()) } else { Err(format!("{all} launches")) },
    );
    suite.finish();
}

/// A burn-nn convolution (weight `w`), batch norm and relu: forward and every gradient.
fn conv_norm_step<B: burn_tensor::backend::AutodiffBackend>(x: &TensorData, w: &TensorData) -> Vec<TensorData> {
    use burn_core::module::Param;
    use burn_nn::BatchNormConfig;
    use burn_nn::conv::Conv2dConfig;
    let d = dev::<B>();
    let mut conv = Conv2dConfig::new([x.shape[1], 6], [3, 3]).with_padding(burn_nn::PaddingConfig2d::Same).with_bias(false).init::<B>(&d);
    conv.weight = Param::from_tensor(Tensor::from_data(w.clone(), &d));
    let norm = BatchNormConfig::new(6).init::<B>(&d);
    let x = Tensor::<B, 4>::from_data(x.clone(), &d).require_grad();
    let y = activation::relu(norm.forward(conv.forward(x.clone())));
    let loss = (y.clone() * y.clone()).sum();
    let g = loss.backward();
    let grad = |t: Tensor<B, 4>| t.grad(&g).map(|t| t.into_data());
    vec![
        y.into_data(),
        grad(x).expect("x's gradient"),
        grad(conv.weight.val()).expect("the weight's gradient"),
        norm.gamma.val().grad(&g).expect("gamma's gradient").into_data(),
        norm.running_var.value().into_data(),
    ]
}

#[test]
fn convolution_batch_norm_step_as_unfused() {
    let _turn = serial();
    let mut suite = Suite::new("fusion conv batch norm");
    let mut rng = Rng::new(0xC0B7);
    let x = float_data(&mut rng, &[2, 3, 5, 5], DType::F32, -2.0, 2.0);
    let w = float_data(&mut rng, &[6, 3, 3, 3], DType::F32, -0.5, 0.5);
    let fused = catch(|| conv_norm_step::<Autodiff<Fused>>(&x, &w));
    let (unfused, reference) = (conv_norm_step::<Autodiff<Ex>>(&x, &w), conv_norm_step::<Autodiff<Ref>>(&x, &w));
    let names = ["y", "x grad", "weight grad", "gamma grad", "running var"];
    check_outputs(&mut suite, "conv, batch norm, relu", DType::F32, Tol::of(1e-3), |j| names[j].to_string(), fused, unfused, reference);
    suite.finish();
}
