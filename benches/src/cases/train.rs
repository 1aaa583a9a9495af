//! One training step of a small model under Burn's autodiff: forward, cross-entropy loss,
//! backward and an Adam update, as tensor ops on the backend or (ours, `fused`) as one kernel
//! per parameter (`ex_cubecl::launch::optim`, what `ex_cubecl::optim::AdamW` runs). The
//! models: a 784-256-128-10 MLP, and a digits-sized CNN (two 3x3 convolutions with ReLU and
//! 2x2 max pooling, then a linear layer).
use burn_autodiff::Autodiff;
use burn_backend::ops::ConvOptions;
use burn_backend::{Backend, TensorPrimitive};
use burn_tensor::activation::{log_softmax, relu};
use burn_tensor::module::{conv2d, max_pool2d};
use burn_tensor::{Int, Tensor, TensorData};
use ex_cubecl::CubeTensor;
use ex_cubecl::launch::optim::{AdamDecay, AdamMoments, AdamRule, AdamTime, adam_step};

use super::{downcast, uniform};
use crate::{Case, DynCase, Precision, RunFn, Runtime, Size, Work};

/// A model trained on a fixed random batch with Adam.
pub struct TrainStep {
    model: Model,
    batch: usize,
    /// Ours updates each parameter with the fused Adam kernel; the peer keeps the tensor ops
    /// (burn-optim's Adam is tensor ops on every backend).
    fused: bool,
}

/// Which model a step trains.
#[derive(Clone, Copy, PartialEq)]
enum Model {
    /// 784-256-128-10 with ReLU.
    Mlp,
    /// `[b, 1, 28, 28]`: conv 3x3 to 8 channels, ReLU, max pool 2x2, conv 3x3 to 16, ReLU,
    /// max pool 2x2, linear 784-10.
    Cnn,
}

/// The MLP's layer widths.
const WIDTHS: [usize; 4] = [784, 256, 128, 10];
/// The CNN's channels (input, first and second convolution) and classes.
const CHANNELS: [usize; 3] = [1, 8, 16];
const CLASSES: usize = 10;

/// The training cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    let batches: &[(Model, usize)] = match size {
        Size::Small => &[(Model::Mlp, 64), (Model::Cnn, 64)],
        Size::Full => &[(Model::Mlp, 64), (Model::Mlp, 1024), (Model::Cnn, 64)],
    };
    batches
        .iter()
        .flat_map(|&(model, batch)| [false, true].map(|fused| Box::new(TrainStep { model, batch, fused }) as Box<dyn DynCase>))
        .collect()
}

/// Adam's state for one parameter.
struct Param<B: Backend> {
    value: Tensor<B, 2>,
    m: Tensor<B, 2>,
    v: Tensor<B, 2>,
}

impl<B: Backend> Param<B> {
    fn new(value: Tensor<B, 2>) -> Self {
        let m = value.zeros_like();
        let v = value.zeros_like();
        Self { value, m, v }
    }

    /// One Adam step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8) at step `t` (from 1), fused into
    /// one kernel when asked for and `B` is ours.
    fn update(self, grad: Tensor<B, 2>, t: i32, fused: bool) -> Self {
        let (lr, b1, b2, eps) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32);
        let ours = std::any::TypeId::of::<B::FloatTensorPrimitive>() == std::any::TypeId::of::<CubeTensor<Runtime>>();
        if fused && ours {
            return self.update_fused(grad, t, [lr, b1, b2, eps]);
        }
        let m = self.m.mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1);
        let v = self.v.mul_scalar(b2) + grad.powi_scalar(2).mul_scalar(1.0 - b2);
        let m_hat = m.clone().div_scalar(1.0 - b1.powi(t));
        let v_hat = v.clone().div_scalar(1.0 - b2.powi(t));
        let value = self.value - m_hat.div(v_hat.sqrt().add_scalar(eps)).mul_scalar(lr);
        Self { value, m, v }
    }

    /// The same step in one kernel on ours (`B`'s primitive is `CubeTensor<Runtime>`); the
    /// tensor-op form above is AdamW's with no decay.
    fn update_fused(self, grad: Tensor<B, 2>, t: i32, [lr, b1, b2, eps]: [f32; 4]) -> Self {
        let ours = |t: Tensor<B, 2>| downcast::<CubeTensor<Runtime>, _>(t.into_primitive().tensor()).expect("ours");
        let back = |t: CubeTensor<Runtime>| Tensor::<B, 2>::from_primitive(TensorPrimitive::Float(downcast(t).expect("ours")));
        let state = AdamMoments { moment_1: ours(self.m), moment_2: ours(self.v), max_moment_2: None };
        let decay = AdamDecay::Decoupled { rate: 0.0, cautious: false };
        let rule = AdamRule { lr: lr as f64, beta_1: b1 as f64, beta_2: b2 as f64, epsilon: eps as f64, decay, time: AdamTime::Host(t as usize) };
        let (value, state) = adam_step(ours(self.value), ours(grad), Some(state), &rule, false);
        Self { value: back(value), m: back(state.moment_1), v: back(state.moment_2) }
    }
}

/// The model and optimizer state, stepped by the benchmark closure. Every parameter is held
/// 2-d (a convolution's weight `[c_out, c_in * 9]`, a bias `[1, n]`) and reshaped in the
/// forward pass.
struct Trainer<B: Backend> {
    model: Model,
    params: Vec<Param<B>>,
    x: Tensor<Autodiff<B>, 2>,
    labels: Tensor<Autodiff<B>, 2, Int>,
    step: i32,
    fused: bool,
}

impl<B: Backend> Trainer<B> {
    fn new(model: Model, batch: usize, fused: bool, device: &B::Device) -> Self {
        // Each layer's weight `[fan_in, out]` (a convolution's `[out, fan_in]`) and bias
        // `[1, out]`, scaled by `1 / sqrt(fan_in)`; the input, flat for the MLP.
        let (layers, input): (Vec<(usize, usize, bool)>, usize) = match model {
            Model::Mlp => (WIDTHS.windows(2).map(|p| (p[0], p[1], false)).collect(), WIDTHS[0]),
            Model::Cnn => {
                let convs = CHANNELS.windows(2).map(|c| (c[0] * 9, c[1], true));
                (convs.chain([(CHANNELS[2] * 7 * 7, CLASSES, false)]).collect(), 28 * 28)
            }
        };
        let mut params = Vec::new();
        for (layer, &(fan_in, out, conv)) in layers.iter().enumerate() {
            let scale = (1.0 / fan_in as f32).sqrt();
            let seed = 10 + 2 * layer as u64;
            let shape = if conv { [out, fan_in] } else { [fan_in, out] };
            params.push(Param::new(uniform::<B, 2>(shape, seed, device).mul_scalar(scale)));
            params.push(Param::new(uniform::<B, 2>([1, out], seed + 1, device).mul_scalar(scale)));
        }
        let x = Tensor::from_inner(uniform::<B, 2>([batch, input], 1, device));
        let labels: Vec<i32> = (0..batch).map(|i| ((i * 7 + 3) % CLASSES) as i32).collect();
        let labels = Tensor::from_data(TensorData::new(labels, [batch, 1]), device);
        Self { model, params, x, labels, step: 0, fused }
    }

    /// The logits `[batch, 10]` of the batch under the parameters `leaves`.
    fn forward(&self, leaves: &[Tensor<Autodiff<B>, 2>]) -> Tensor<Autodiff<B>, 2> {
        let linear = |h: Tensor<Autodiff<B>, 2>, layer: &[Tensor<Autodiff<B>, 2>]| h.matmul(layer[0].clone()) + layer[1].clone();
        match self.model {
            Model::Mlp => {
                let mut h = self.x.clone();
                for (layer, pair) in leaves.chunks(2).enumerate() {
                    h = linear(h, pair);
                    if layer + 1 < leaves.len() / 2 {
                        h = relu(h);
                    }
                }
                h
            }
            Model::Cnn => {
                let batch = self.x.dims()[0];
                let mut h = self.x.clone().reshape([batch, 1, 28, 28]);
                for (layer, c) in CHANNELS.windows(2).enumerate() {
                    let weight = leaves[2 * layer].clone().reshape([c[1], c[0], 3, 3]);
                    let bias = leaves[2 * layer + 1].clone().reshape([c[1]]);
                    let conv = conv2d(h, weight, Some(bias), ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
                    h = max_pool2d(relu(conv), [2, 2], [2, 2], [0, 0], [1, 1], false);
                }
                linear(h.reshape([batch, CHANNELS[2] * 7 * 7]), &leaves[4..])
            }
        }
    }

    /// Forward, loss, backward and update; returns the loss before the update.
    fn step(&mut self) -> Tensor<B, 1> {
        let leaves: Vec<Tensor<Autodiff<B>, 2>> =
            self.params.iter().map(|p| Tensor::from_inner(p.value.clone()).require_grad()).collect();
        let h = self.forward(&leaves);
        let loss = log_softmax(h, 1).gather(1, self.labels.clone()).mean().neg();
        let grads = loss.backward();
        let grads: Vec<_> = leaves.iter().map(|leaf| leaf.grad(&grads).expect("every parameter has a gradient")).collect();
        // The leaves share the parameters' buffers: dropped here, the fused update may write
        // into them in place.
        let loss = loss.inner();
        drop(leaves);
        self.step += 1;
        let params = std::mem::take(&mut self.params);
        self.params = params.into_iter().zip(grads).map(|(p, g)| p.update(g, self.step, self.fused)).collect();
        loss
    }
}

impl Case for TrainStep {
    fn name(&self) -> String {
        let model = match self.model {
            Model::Mlp => "MLP train step f32 (784-256-128-10",
            Model::Cnn => "CNN train step f32 (28x28, conv 8-16, pool, linear",
        };
        let adam = if self.fused { "fused Adam" } else { "Adam" };
        format!("{model}, {adam})")
    }

    fn size(&self) -> String {
        format!("batch {}", self.batch)
    }

    fn work(&self) -> Work {
        // Forward products plus the two backward products of each layer.
        let macs: usize = match self.model {
            Model::Mlp => WIDTHS.windows(2).map(|p| p[0] * p[1]).sum(),
            Model::Cnn => 28 * 28 * 9 * CHANNELS[0] * CHANNELS[1] + 14 * 14 * 9 * CHANNELS[1] * CHANNELS[2] + 7 * 7 * CHANNELS[2] * CLASSES,
        };
        Work::Flops(6.0 * (self.batch * macs) as f64, Precision::Tf32)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let mut trainer = Trainer::<B>::new(self.model, self.batch, self.fused, device);
        Some(Box::new(move || trainer.step()))
    }

    fn on_cpu(&self) -> bool {
        // burn-ndarray's convolutions take seconds a step: the CNN gets no CPU column.
        self.model == Model::Mlp
    }
}
