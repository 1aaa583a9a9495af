//! Reductions on f32: a full sum, a sum along the last dim, and a softmax along the last dim.
use burn_backend::Backend;
use burn_tensor::activation::softmax;

use super::uniform;
use crate::{Case, DynCase, RunFn, Size, Work};

/// `x.sum()` over `n` elements.
pub struct Sum {
    n: usize,
}

/// `x.sum_dim(1)` over `[rows, cols]`.
pub struct SumLastDim {
    shape: [usize; 2],
}

/// `softmax(x, 1)` over `[rows, cols]`.
pub struct Softmax {
    shape: [usize; 2],
}

/// The reduction cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    match size {
        Size::Small => vec![
            Box::new(Sum { n: 1 << 16 }),
            Box::new(SumLastDim { shape: [256, 256] }),
            Box::new(Softmax { shape: [256, 256] }),
        ],
        Size::Full => vec![
            Box::new(Sum { n: 1 << 26 }),
            Box::new(SumLastDim { shape: [8192, 8192] }),
            Box::new(Softmax { shape: [4096, 4096] }),
        ],
    }
}

impl Case for Sum {
    fn name(&self) -> String {
        "sum f32 (all)".into()
    }

    fn size(&self) -> String {
        format!("2^{}", self.n.trailing_zeros())
    }

    fn work(&self) -> Work {
        Work::Bytes(4.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 1>([self.n], 1, device);
        Some(Box::new(move || x.clone().sum()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for SumLastDim {
    fn name(&self) -> String {
        "sum f32 (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        let [rows, cols] = self.shape;
        Work::Bytes(4.0 * (rows * cols + rows) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 2>(self.shape, 1, device);
        Some(Box::new(move || x.clone().sum_dim(1).flatten::<1>(0, 1)))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for Softmax {
    fn name(&self) -> String {
        "softmax f32 (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        let [rows, cols] = self.shape;
        Work::Bytes(8.0 * (rows * cols) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 2>(self.shape, 1, device);
        Some(Box::new(move || softmax(x.clone(), 1).flatten::<1>(0, 1)))
    }
}
