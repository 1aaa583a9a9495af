//! Composite ops written as chains of tensor ops (what a model's code often does): softmax,
//! layer norm, the tanh form of GELU and a linear layer with its activation. Unfused, each op
//! is its own launch; under a fusion engine (`bench --fusion`) the elementwise runs fuse, and
//! a product with the elementwise work on its result.
use burn_backend::Backend;

use super::uniform;
use crate::{Case, DynCase, Precision, RunFn, Size, Work};

/// Softmax over the last dim as `exp(x - max) / sum(exp(x - max))`.
pub struct SoftmaxOps {
    shape: [usize; 2],
}

/// Layer norm over the last dim with a weight and a bias, as `(x - mean) / sqrt(var + eps)
/// * gamma + beta`.
pub struct LayerNormOps {
    shape: [usize; 2],
}

/// GELU's tanh form, `0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))`, as ops.
pub struct GeluOps {
    n: usize,
}

/// A linear layer and its activation, `relu(x @ w + b)` (f32 products: exact by default, as
/// PyTorch's).
pub struct LinearReluOps {
    /// M, K and N.
    dims: [usize; 3],
}

/// The composite cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    let (rows, n, dims) = match size {
        Size::Small => ([256, 512], 1 << 16, [256, 128, 128]),
        Size::Full => ([16384, 4096], 1 << 26, [8192, 1024, 1024]),
    };
    vec![
        Box::new(SoftmaxOps { shape: rows }),
        Box::new(LayerNormOps { shape: rows }),
        Box::new(GeluOps { n }),
        Box::new(LinearReluOps { dims }),
    ]
}

impl Case for SoftmaxOps {
    fn name(&self) -> String {
        "softmax f32 as ops (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        Work::Bytes(8.0 * (self.shape[0] * self.shape[1]) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 2>(self.shape, 1, device);
        Some(Box::new(move || {
            let e = (x.clone() - x.clone().max_dim(1)).exp();
            (e.clone() / e.sum_dim(1)).flatten::<1>(0, 1)
        }))
    }
}

impl Case for LayerNormOps {
    fn name(&self) -> String {
        "layer norm f32 as ops (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        Work::Bytes(8.0 * (self.shape[0] * self.shape[1]) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 2>(self.shape, 1, device);
        let gamma = uniform::<B, 2>([1, self.shape[1]], 2, device);
        let beta = uniform::<B, 2>([1, self.shape[1]], 3, device);
        Some(Box::new(move || {
            let centred = x.clone() - x.clone().mean_dim(1);
            let var = (centred.clone() * centred.clone()).mean_dim(1);
            (centred / (var + 1e-5).sqrt() * gamma.clone() + beta.clone()).flatten::<1>(0, 1)
        }))
    }
}

impl Case for GeluOps {
    fn name(&self) -> String {
        "gelu f32 as ops (tanh form)".into()
    }

    fn size(&self) -> String {
        format!("2^{}", self.n.trailing_zeros())
    }

    fn work(&self) -> Work {
        Work::Bytes(8.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 1>([self.n], 1, device);
        Some(Box::new(move || {
            let x = x.clone();
            let inner = (x.clone() + x.clone() * x.clone() * x.clone() * 0.044715) * (2.0f32 / std::f32::consts::PI).sqrt();
            x * 0.5 * (inner.tanh() + 1.0)
        }))
    }
}

impl Case for LinearReluOps {
    fn name(&self) -> String {
        "linear + relu f32 as ops (relu(x @ w + b))".into()
    }

    fn size(&self) -> String {
        let [m, k, n] = self.dims;
        format!("[{m}, {k}] @ [{k}, {n}]")
    }

    fn work(&self) -> Work {
        let [m, k, n] = self.dims;
        Work::Flops(2.0 * (m * k * n) as f64, Precision::F32)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let [m, k, n] = self.dims;
        let x = uniform::<B, 2>([m, k], 1, device);
        let w = uniform::<B, 2>([k, n], 2, device);
        let b = uniform::<B, 2>([1, n], 3, device);
        Some(Box::new(move || burn_tensor::activation::relu(x.clone().matmul(w.clone()) + b.clone()).flatten::<1>(0, 1)))
    }
}
