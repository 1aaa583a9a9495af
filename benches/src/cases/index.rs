//! Indexing ops on f32: gather and scatter-add along the last dim with random indices, and a
//! concatenation.
use burn_backend::Backend;
use burn_tensor::IndexingUpdateOp;
use burn_tensor::{Int, Tensor, TensorData};

use super::uniform;
use crate::{Case, DynCase, RunFn, Size, Work};

/// `x.gather(1, idx)` with `x` and `idx` of `[rows, cols]`.
pub struct Gather {
    shape: [usize; 2],
}

/// `zeros.scatter(1, idx, values, Add)`, all of `[rows, cols]`: every row's values are added
/// at random columns of the same row (with collisions).
pub struct ScatterAdd {
    shape: [usize; 2],
}

/// `cat` of four `[rows, cols / 4]` tensors along the last dim.
pub struct Cat {
    shape: [usize; 2],
}

/// The indexing cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    let shape = match size {
        Size::Small => [256, 256],
        Size::Full => [4096, 4096],
    };
    vec![Box::new(Gather { shape }), Box::new(ScatterAdd { shape }), Box::new(Cat { shape })]
}

/// Indices in `0..shape[1]`, the same on every backend.
fn columns<B: Backend>(shape: [usize; 2], device: &B::Device) -> Tensor<B, 2, Int> {
    let mut state = 0x2545f4914f6cdd1du64;
    let cols = shape[1] as u64;
    let values: Vec<i32> = (0..shape[0] * shape[1])
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % cols) as i32
        })
        .collect();
    Tensor::from_data(TensorData::new(values, shape), device)
}

fn elements(shape: [usize; 2]) -> f64 {
    (shape[0] * shape[1]) as f64
}

impl Case for Gather {
    fn name(&self) -> String {
        "gather f32 (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        // Reads the indices (4-byte ints on both GPU backends) and one value per index, writes
        // the output.
        Work::Bytes(12.0 * elements(self.shape))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 2>(self.shape, 1, device);
        let idx = columns::<B>(self.shape, device);
        Some(Box::new(move || x.clone().gather(1, idx.clone()).flatten::<1>(0, 1)))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for ScatterAdd {
    fn name(&self) -> String {
        "scatter add f32 (last dim)".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        // Reads indices and values, reads and writes the target once.
        Work::Bytes(16.0 * elements(self.shape))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let values = uniform::<B, 2>(self.shape, 2, device);
        let target = Tensor::<B, 2>::zeros(self.shape, device);
        let idx = columns::<B>(self.shape, device);
        Some(Box::new(move || {
            target.clone().scatter(1, idx.clone(), values.clone(), IndexingUpdateOp::Add).flatten::<1>(0, 1)
        }))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for Cat {
    fn name(&self) -> String {
        "cat f32 (4 tensors, last dim)".into()
    }

    fn size(&self) -> String {
        format!("4x[{}, {}]", self.shape[0], self.shape[1] / 4)
    }

    fn work(&self) -> Work {
        Work::Bytes(8.0 * elements(self.shape))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let part = [self.shape[0], self.shape[1] / 4];
        let parts: Vec<Tensor<B, 2>> = (0..4).map(|seed| uniform::<B, 2>(part, 10 + seed, device)).collect();
        Some(Box::new(move || Tensor::cat(parts.clone(), 1).flatten::<1>(0, 1)))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}
