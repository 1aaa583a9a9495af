//! The benchmark cases, one file per op family.
pub mod composite;
pub mod elementwise;
pub mod index;
pub mod matmul;
pub mod module;
pub mod reduce;
pub mod resnet;
pub mod train;

use crate::{DynCase, Size};

/// Every case at `size`; `tune` adds variants of ours only (kernel tilings) for tuning.
pub fn all(size: Size, tune: bool) -> Vec<Box<dyn DynCase>> {
    let mut cases = Vec::new();
    cases.extend(elementwise::cases(size));
    cases.extend(reduce::cases(size));
    cases.extend(composite::cases(size));
    cases.extend(index::cases(size));
    cases.extend(matmul::cases(size, tune));
    cases.extend(module::cases(size, tune));
    cases.extend(train::cases(size));
    cases.extend(resnet::cases(size));
    cases
}

/// `Some(t)` when `B` is the backend whose primitive is `T`: lets a case call one backend's
/// own API (ours' kernel variants) from code generic over the backend.
pub(crate) fn downcast<T: 'static, U: 'static>(value: U) -> Option<T> {
    let boxed: Box<dyn std::any::Any> = Box::new(value);
    boxed.downcast::<T>().ok().map(|b| *b)
}

/// An f32 tensor of `shape`, uniform in [-1, 1), the same on every backend for one `seed`
/// (generated on the host), so that the two backends' outputs can be compared.
pub fn uniform<B: burn_backend::Backend, const D: usize>(shape: [usize; D], seed: u64, device: &B::Device) -> burn_tensor::Tensor<B, D> {
    let mut state = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    let values: Vec<f32> = (0..shape.iter().product::<usize>())
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect();
    burn_tensor::Tensor::from_data(burn_tensor::TensorData::new(values, shape), device)
}
