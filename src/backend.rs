//! `ExCubeclBackend<R>`: Burn's `Backend` on ExCubecl buffers and kernels.
use core::marker::PhantomData;

use burn_backend::{Backend, BackendTypes, DType, DTypeUsageSet, DeviceOps, ExecutionError};
use cubecl::Runtime;

use crate::runtime::{DeviceContext, dtype_usage, on_device_thread, take_device_failure};
use crate::tensor::{CubeTensor, QuantizedTensor};

/// A Burn backend running hand-written CubeCL kernels on the runtime `R` (wgpu or CUDA).
///
/// Float, int and bool tensors share one primitive, [`CubeTensor`]; the default element
/// types are `f32`, `i32` and bools stored as `u32`, and every dtype the device supports can
/// be used through Burn's dtype arguments.
pub struct ExCubeclBackend<R: Runtime> {
    _runtime: PhantomData<R>,
}

impl<R: Runtime> Clone for ExCubeclBackend<R> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<R: Runtime> Copy for ExCubeclBackend<R> {}

impl<R: Runtime> Default for ExCubeclBackend<R> {
    fn default() -> Self {
        Self { _runtime: PhantomData }
    }
}

impl<R: Runtime> core::fmt::Debug for ExCubeclBackend<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ExCubeclBackend<{}>", core::any::type_name::<R>())
    }
}

impl<R: Runtime> BackendTypes for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    type Device = R::Device;
    type FloatTensorPrimitive = CubeTensor<R>;
    type FloatElem = f32;
    type IntTensorPrimitive = CubeTensor<R>;
    type IntElem = i32;
    type BoolTensorPrimitive = CubeTensor<R>;
    type BoolElem = u32;
    type QuantizedTensorPrimitive = QuantizedTensor<R>;
}

impl<R: Runtime> Backend for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn name(device: &Self::Device) -> String {
        let client = DeviceContext::client::<R>(device);
        format!("ex_cubecl<{}>", R::name(&client))
    }

    fn seed(device: &Self::Device, seed: u64) {
        DeviceContext::seed(device, seed);
    }

    fn sync(device: &Self::Device) -> Result<(), ExecutionError> {
        let client = DeviceContext::client::<R>(device);
        let failed = |failure: String| ExecutionError::WithContext {
            reason: format!("ex_cubecl: sync on {device:?}: earlier work failed on the device: {failure}"),
        };
        // A panic of the work waited for shows as the channel's error: the device thread's own
        // message, recorded by the panic hook, says more.
        let waited = on_device_thread(device, || crate::runtime::wait::sync(&client)).map_err(&failed)?;
        let failure = take_device_failure(device);
        match (waited, failure) {
            (_, Some(failure)) => Err(failed(failure)),
            (Err(e), None) => Err(failed(e.to_string())),
            (Ok(()), None) => Ok(()),
        }
    }

    fn dtype_usage(device: &Self::Device, dtype: DType) -> DTypeUsageSet {
        dtype_usage(&DeviceContext::client::<R>(device), dtype)
    }

    fn device_count(type_id: u16) -> usize {
        let client = DeviceContext::client::<R>(&R::Device::default());
        client.device_count(type_id)
    }

    fn memory_cleanup(device: &Self::Device) {
        DeviceContext::client::<R>(device).memory_cleanup();
    }
}
