//! One training step of an MLP under Burn's autodiff: forward, cross-entropy loss, backward
//! and an Adam update, as tensor ops on the backend or (ours, `fused`) as one kernel per
//! parameter (`ex_cubecl::launch::optim`, what `ex_cubecl::optim::AdamW` runs).
use burn_autodiff::Autodiff;
use burn_backend::{Backend, TensorPrimitive};
use burn_tensor::activation::{log_softmax, relu};
use burn_tensor::{Int, Tensor, TensorData};
use ex_cubecl::CubeTensor;
use ex_cubecl::launch::optim::{AdamDecay, AdamMoments, AdamRule, AdamTime, adam_step};

use super::{downcast, uniform};
use crate::{Case, DynCase, Precision, RunFn, Runtime, Size, Work};

/// A 784-256-128-10 MLP with ReLU, trained on a fixed random batch with Adam.
pub struct MlpStep {
    batch: usize,
    /// Ours updates each parameter with the fused Adam kernel; the peer keeps the tensor ops
    /// (burn-optim's Adam is tensor ops on every backend).
    fused: bool,
}

/// Layer widths.
const WIDTHS: [usize; 4] = [784, 256, 128, 10];

/// The training cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    match size {
        Size::Small => vec![Box::new(MlpStep { batch: 64, fused: false }), Box::new(MlpStep { batch: 64, fused: true })],
        Size::Full => [64, 1024]
            .into_iter()
            .flat_map(|batch| [false, true].map(|fused| Box::new(MlpStep { batch, fused }) as Box<dyn DynCase>))
            .collect(),
    }
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

/// The model and optimizer state, stepped by the benchmark closure.
struct Trainer<B: Backend> {
    params: Vec<Param<B>>,
    x: Tensor<Autodiff<B>, 2>,
    labels: Tensor<Autodiff<B>, 2, Int>,
    step: i32,
    fused: bool,
}

impl<B: Backend> Trainer<B> {
    fn new(batch: usize, fused: bool, device: &B::Device) -> Self {
        let mut params = Vec::new();
        for (layer, pair) in WIDTHS.windows(2).enumerate() {
            let scale = (1.0 / pair[0] as f32).sqrt();
            let seed = 10 + 2 * layer as u64;
            params.push(Param::new(uniform::<B, 2>([pair[0], pair[1]], seed, device).mul_scalar(scale)));
            params.push(Param::new(uniform::<B, 2>([1, pair[1]], seed + 1, device).mul_scalar(scale)));
        }
        let x = Tensor::from_inner(uniform::<B, 2>([batch, WIDTHS[0]], 1, device));
        let labels: Vec<i32> = (0..batch).map(|i| ((i * 7 + 3) % WIDTHS[3]) as i32).collect();
        let labels = Tensor::from_data(TensorData::new(labels, [batch, 1]), device);
        Self { params, x, labels, step: 0, fused }
    }

    /// Forward, loss, backward and update; returns the loss before the update.
    fn step(&mut self) -> Tensor<B, 1> {
        let leaves: Vec<Tensor<Autodiff<B>, 2>> =
            self.params.iter().map(|p| Tensor::from_inner(p.value.clone()).require_grad()).collect();
        let mut h = self.x.clone();
        for (layer, pair) in leaves.chunks(2).enumerate() {
            h = h.matmul(pair[0].clone()) + pair[1].clone();
            if layer + 1 < leaves.len() / 2 {
                h = relu(h);
            }
        }
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

impl Case for MlpStep {
    fn name(&self) -> String {
        match self.fused {
            false => "MLP train step f32 (784-256-128-10, Adam)".into(),
            true => "MLP train step f32 (784-256-128-10, fused Adam)".into(),
        }
    }

    fn size(&self) -> String {
        format!("batch {}", self.batch)
    }

    fn work(&self) -> Work {
        // Forward products plus the two backward products of each layer.
        let macs: usize = WIDTHS.windows(2).map(|p| self.batch * p[0] * p[1]).sum();
        Work::Flops(6.0 * macs as f64, Precision::Tf32)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let mut trainer = Trainer::<B>::new(self.batch, self.fused, device);
        Some(Box::new(move || trainer.step()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}
