//! Module ops: conv2d, max_pool2d and attention, f32.
use burn_backend::Backend;
use burn_backend::ops::{AttentionModuleOptions, ConvOptions};
use burn_tensor::module::{attention, conv2d, max_pool2d};

use super::uniform;
use crate::{Case, DynCase, Precision, RunFn, Size, Work};

/// `conv2d(x [b, c, h, w], weight [c_out, c, 3, 3])`, stride 1, padding 1.
pub struct Conv2d {
    x: [usize; 4],
    c_out: usize,
}

/// `max_pool2d(x, 3×3, stride 2, padding 1)`.
pub struct MaxPool2d {
    x: [usize; 4],
}

/// `attention(q, k, v)` over `[batch, heads, seq, dim]`, no mask.
pub struct Attention {
    shape: [usize; 4],
}

/// The module-op cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    match size {
        Size::Small => vec![
            Box::new(Conv2d { x: [2, 8, 16, 16], c_out: 8 }),
            Box::new(MaxPool2d { x: [2, 4, 32, 32] }),
            Box::new(Attention { shape: [1, 2, 64, 32] }),
        ],
        Size::Full => vec![
            Box::new(Conv2d { x: [64, 64, 56, 56], c_out: 64 }),
            Box::new(MaxPool2d { x: [64, 64, 112, 112] }),
            Box::new(Attention { shape: [4, 16, 1024, 64] }),
        ],
    }
}

impl Case for Conv2d {
    fn name(&self) -> String {
        "conv2d f32 3x3".into()
    }

    fn size(&self) -> String {
        let [b, c, h, w] = self.x;
        format!("[{b},{c},{h},{w}]x[{},{c},3,3]", self.c_out)
    }

    fn work(&self) -> Work {
        let [b, c, h, w] = self.x;
        Work::Flops(2.0 * (b * self.c_out * h * w * c * 9) as f64, Precision::Tf32)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let [_, c, ..] = self.x;
        let x = uniform::<B, 4>(self.x, 1, device);
        let w = uniform::<B, 4>([self.c_out, c, 3, 3], 2, device);
        Some(Box::new(move || {
            conv2d(x.clone(), w.clone(), None, ConvOptions::new([1, 1], [1, 1], [1, 1], 1)).flatten::<1>(0, 3)
        }))
    }
}

impl Case for MaxPool2d {
    fn name(&self) -> String {
        "max_pool2d f32 3x3/2".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.x)
    }

    fn work(&self) -> Work {
        let [b, c, h, w] = self.x;
        // Reads x once, writes a quarter of it.
        Work::Bytes((b * c * h * w * 4 + b * c * h.div_ceil(2) * w.div_ceil(2) * 4) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 4>(self.x, 3, device);
        Some(Box::new(move || max_pool2d(x.clone(), [3, 3], [2, 2], [1, 1], [1, 1], false).flatten::<1>(0, 3)))
    }
}

impl Case for Attention {
    fn name(&self) -> String {
        "attention f32".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        let [b, h, s, d] = self.shape;
        Work::Flops(4.0 * (b * h * s * s * d) as f64, Precision::Tf32)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let q = uniform::<B, 4>(self.shape, 4, device);
        let k = uniform::<B, 4>(self.shape, 5, device);
        let v = uniform::<B, 4>(self.shape, 6, device);
        Some(Box::new(move || {
            attention(q.clone(), k.clone(), v.clone(), None, None, AttentionModuleOptions::default()).flatten::<1>(0, 3)
        }))
    }
}
