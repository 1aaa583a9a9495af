//! One training step of an MLP under Burn's autodiff: forward, cross-entropy loss, backward
//! and an Adam update, all as tensor ops on the backend.
use burn_autodiff::Autodiff;
use burn_backend::Backend;
use burn_tensor::activation::{log_softmax, relu};
use burn_tensor::{Int, Tensor, TensorData};

use super::uniform;
use crate::{Case, DynCase, Precision, RunFn, Size, Work};

/// A 784-256-128-10 MLP with ReLU, trained on a fixed random batch with Adam.
pub struct MlpStep {
    batch: usize,
}

/// Layer widths.
const WIDTHS: [usize; 4] = [784, 256, 128, 10];

/// The training cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    match size {
        Size::Small => vec![Box::new(MlpStep { batch: 64 })],
        Size::Full => vec![Box::new(MlpStep { batch: 64 }), Box::new(MlpStep { batch: 1024 })],
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

    /// One Adam step (lr 1e-3, betas 0.9 / 0.999, eps 1e-8) at step `t` (from 1).
    fn update(&mut self, grad: Tensor<B, 2>, t: i32) {
        let (lr, b1, b2, eps) = (1e-3f32, 0.9f32, 0.999f32, 1e-8f32);
        self.m = self.m.clone().mul_scalar(b1) + grad.clone().mul_scalar(1.0 - b1);
        self.v = self.v.clone().mul_scalar(b2) + grad.powi_scalar(2).mul_scalar(1.0 - b2);
        let m_hat = self.m.clone().div_scalar(1.0 - b1.powi(t));
        let v_hat = self.v.clone().div_scalar(1.0 - b2.powi(t));
        self.value = self.value.clone() - m_hat.div(v_hat.sqrt().add_scalar(eps)).mul_scalar(lr);
    }
}

/// The model and optimizer state, stepped by the benchmark closure.
struct Trainer<B: Backend> {
    params: Vec<Param<B>>,
    x: Tensor<Autodiff<B>, 2>,
    labels: Tensor<Autodiff<B>, 2, Int>,
    step: i32,
}

impl<B: Backend> Trainer<B> {
    fn new(batch: usize, device: &B::Device) -> Self {
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
        Self { params, x, labels, step: 0 }
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
        self.step += 1;
        for (param, leaf) in self.params.iter_mut().zip(&leaves) {
            param.update(leaf.grad(&grads).expect("every parameter has a gradient"), self.step);
        }
        loss.inner()
    }
}

impl Case for MlpStep {
    fn name(&self) -> String {
        "MLP train step f32 (784-256-128-10, Adam)".into()
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
        let mut trainer = Trainer::<B>::new(self.batch, device);
        Some(Box::new(move || trainer.step()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}
