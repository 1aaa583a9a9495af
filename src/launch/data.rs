//! Moving data between the host and the device.
use burn_backend::{BoolStore, DType, ExecutionError, Shape, TensorData};
use cubecl::Runtime;

use super::copy::into_contiguous;
use crate::runtime::{DeviceContext, alloc, dtype_usage, elem_size, on_device_thread, refused_host_read, take_device_failure};
use crate::tensor::CubeTensor;

/// Uploads `data` to `device` as a tensor of `dtype` (converting on the host if the data has
/// another dtype). Bools keep their store when the device has it and use `u32` otherwise.
///
/// # Panics
/// When the data's length doesn't match its shape, or the device lacks the dtype.
pub fn from_data<R: Runtime>(data: TensorData, device: &R::Device, dtype: DType) -> CubeTensor<R> {
    let client = DeviceContext::client::<R>(device);
    if let Some(failure) = alloc::take_failure(&client, device) {
        panic!("ex_cubecl: from_data: earlier work failed on device {device:?}: {failure}");
    }
    let expected = data.num_elements() * data.dtype.size();
    if data.bytes.len() != expected {
        panic!(
            "ex_cubecl: from_data: {} bytes for shape {:?} of {:?} (expected {expected})",
            data.bytes.len(),
            data.shape.to_vec(),
            data.dtype
        );
    }
    let dtype = match dtype {
        DType::Bool(_) if !dtype_usage(&client, dtype).contains(burn_backend::DTypeUsage::Storage) => {
            DType::Bool(BoolStore::U32)
        }
        other => other,
    };
    if !dtype_usage(&client, dtype).contains(burn_backend::DTypeUsage::Storage) {
        panic!(
            "ex_cubecl: from_data: dtype {dtype:?} is not supported by device {device:?} (shape {:?})",
            data.shape.to_vec()
        );
    }
    let shape = Shape::from(data.shape.clone());
    let bytes = host_bytes(data, dtype);
    let handle = alloc::upload(&client, "from_data", bytes, &shape, dtype);
    CubeTensor {
        client,
        device: device.clone(),
        handle,
        layout: crate::runtime::Layout::contiguous(shape),
        dtype,
    }
}

/// The bytes of `data` laid out as `dtype` stores them on the device.
fn host_bytes(data: TensorData, dtype: DType) -> Vec<u8> {
    match (data.dtype, dtype) {
        (DType::Bool(_), DType::Bool(BoolStore::U32)) => {
            bool_values(&data).flat_map(|b| (b as u32).to_ne_bytes()).collect()
        }
        (DType::Bool(_), DType::Bool(_)) => bool_values(&data).map(|b| b as u8).collect(),
        (from, to) if from == to => data.as_bytes().to_vec(),
        (_, to) => data.convert_dtype(to).as_bytes().to_vec(),
    }
}

/// The values of bool data in any store: an element is true when any of its bytes is not 0
/// (one byte for the native and `U8` stores, four for `U32`).
fn bool_values(data: &TensorData) -> impl Iterator<Item = bool> + '_ {
    data.as_bytes().chunks_exact(data.dtype.size()).map(|e| e.iter().any(|&b| b != 0))
}

/// Reads a tensor back to the host. Bool tensors come back as native bools.
///
/// # Errors
/// During a pipeline capture on this thread (see [`crate::runtime::Pipeline`]), which the
/// read fails: the values read would be those of the capture, which a replay cannot
/// reproduce.
pub fn into_data<R: Runtime>(
    tensor: CubeTensor<R>,
) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
    let refused = refused_host_read("into_data");
    let tensor = into_contiguous(tensor);
    let shape = tensor.layout.shape.clone();
    let dtype = tensor.dtype;
    let len = tensor.num_elements() * elem_size(dtype);
    // Failures of earlier work on this thread's stream (a kernel the device refused or could
    // not compile, a binding it could not make) are kept by cubecl until a flush, and large
    // allocations are confirmed at the next wait: the read flushes and confirms first
    // (`runtime::wait::read`), and reports them rather than read a buffer that the failed work
    // never wrote.
    let device = tensor.device.clone();
    let what = format!("ex_cubecl: into_data: reading {:?} of {dtype:?}", shape.to_vec());
    let failed = move |failure: String| ExecutionError::WithContext {
        reason: format!("{what}: earlier work failed on device {device:?}: {failure}"),
    };
    let CubeTensor { client, device, handle, .. } = tensor;
    async move {
        if let Some(reason) = refused {
            return Err(ExecutionError::WithContext { reason });
        }
        let read = on_device_thread(&device, || crate::runtime::wait::read(&client, vec![handle])).map_err(&failed)?;
        // A failure recorded by the time the read completes concerns work queued before it (and
        // says more than the channel's error of a read whose work panicked).
        if let Some(failure) = take_device_failure(&device) {
            return Err(failed(failure));
        }
        let mut bytes = read.map_err(|e| failed(e.to_string()))?.remove(0).to_vec();
        bytes.truncate(len);
        Ok(match dtype {
            DType::Bool(BoolStore::U32) => {
                let bools = bytes
                    .chunks_exact(4)
                    .map(|w| u32::from_ne_bytes([w[0], w[1], w[2], w[3]]) != 0)
                    .collect::<Vec<bool>>();
                TensorData::new(bools, shape)
            }
            DType::Bool(_) => TensorData::from_bytes_vec(bytes, shape, DType::Bool(BoolStore::Native)),
            _ => TensorData::from_bytes_vec(bytes, shape, dtype),
        })
    }
}
