//! Random tensors from a counter-based generator seeded per device.
use burn_backend::{DType, Distribution, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::random::{RandomKind, random as random_kernel};

use crate::runtime::{DeviceContext, Geometry, launch, next_random_key};
use crate::tensor::CubeTensor;

/// A tensor of `shape` with samples of `distribution` as `dtype`.
pub fn random<R: Runtime>(shape: Shape, distribution: Distribution, device: &R::Device, dtype: DType) -> CubeTensor<R> {
    let client = DeviceContext::client::<R>(device);
    if super::bf16::held_as_bits(&client, dtype) {
        return super::bf16::narrow(random(shape, distribution, device, DType::F32), dtype);
    }
    let out = CubeTensor::empty(&client, device, shape, dtype);
    let integer = !dtype.is_float();
    let (kind, a, b) = match distribution {
        Distribution::Default => (RandomKind::Uniform, 0.0, 1.0),
        Distribution::Uniform(low, high) if integer => (RandomKind::UniformInt, low, high),
        Distribution::Uniform(low, high) => (RandomKind::Uniform, low, high),
        Distribution::Normal(mean, std) => (RandomKind::Normal, mean, std),
        Distribution::Bernoulli(p) => (RandomKind::Bernoulli, p, 0.0),
    };
    // The key is drawn when the kernel launches, so that every pipeline replay draws fresh
    // numbers (and a replay after the same `seed` repeats the eager run).
    let (o, device) = (out.clone(), device.clone());
    launch(&client, "random", Geometry::Units(out.num_elements()), move |client, count, dim| {
        let (seed, counter) = next_random_key(&device);
        // SAFETY: the kernel guards `pos < len`.
        unsafe {
            random_kernel::launch_unchecked::<R>(
                client, count, dim, o.as_arg(), seed as u32, (seed >> 32) as u32, counter,
                a as f32, b as f32, kind, o.storage(),
            )
        }
    });
    out
}
