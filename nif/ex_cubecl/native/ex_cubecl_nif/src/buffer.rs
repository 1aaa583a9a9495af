//! Buffers: tensors made from host bytes and read back to them.
use burn_backend::{Backend, DType, Shape, TensorData};

use crate::device::Dev;
use crate::dtype::{Class, class, host_size, name};
use crate::error::{NifError, NifResult};
use crate::tensor::{AnyPrim, Prim};

/// Validates `shape` (non-negative dimensions, a byte size that fits in memory) against the
/// byte length of `data` for `dtype`.
pub fn check(op: &str, len: usize, shape: &[i64], dtype: DType) -> NifResult<Vec<usize>> {
    let dims: Vec<usize> = shape
        .iter()
        .map(|&d| {
            usize::try_from(d).map_err(|_| {
                NifError::new(
                    op,
                    format!("dimension {d} is negative"),
                    format!("shape {shape:?}"),
                )
            })
        })
        .collect::<NifResult<_>>()?;
    let bytes = dims
        .iter()
        .try_fold(host_size(dtype), |acc, &d| acc.checked_mul(d));
    match bytes {
        Some(b) if b == len => Ok(dims),
        Some(b) => Err(NifError::new(
            op,
            format!(
                "the data has {len} bytes, shape {shape:?} of {} needs {b}",
                name(dtype)
            ),
            format!("shape {shape:?}, dtype {}", name(dtype)),
        )),
        None => Err(NifError::new(
            op,
            format!("shape {shape:?} is too large"),
            format!("dtype {}", name(dtype)),
        )),
    }
}

/// Uploads `bytes` (host layout of `dtype`, bools one byte each) to `device`.
pub fn upload(
    op: &str,
    bytes: Vec<u8>,
    dims: Vec<usize>,
    dtype: DType,
    device: &Dev,
) -> NifResult<AnyPrim> {
    let data = TensorData::from_bytes_vec(bytes, Shape::from(dims), dtype);
    Ok(match device {
        Dev::Wgpu(d) => AnyPrim::Wgpu(upload_on::<crate::tensor::AdWgpu>(op, data, d)?),
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => AnyPrim::Cuda(upload_on::<crate::tensor::AdCuda>(op, data, d)?),
    })
}

fn upload_on<B: Backend>(op: &str, data: TensorData, device: &B::Device) -> NifResult<Prim<B>> {
    let dtype = data.dtype;
    if !B::supports_dtype(device, dtype) {
        return Err(NifError::new(
            op,
            format!("the device does not support dtype {}", name(dtype)),
            format!("{device:?}"),
        ));
    }
    Ok(match class(dtype) {
        Class::Float => Prim::Float(B::float_from_data(data, device)),
        Class::Int => Prim::Int(B::int_from_data(data, device)),
        Class::Bool => Prim::Bool(B::bool_from_data(data, device)),
    })
}

/// The tensor's bytes in its dtype's host layout (bools one byte each, 0 or 1).
pub fn read(op: &str, prim: AnyPrim) -> NifResult<Vec<u8>> {
    crate::on_prim!(prim, |B, p| read_prim::<B>(op, p))
}

/// The bytes of a primitive of backend `B`, as [`read`] gives them.
pub fn read_prim<B: Backend>(op: &str, p: Prim<B>) -> NifResult<Vec<u8>> {
    let data = read_on::<B>(p).map_err(|e| NifError::new(op, format!("reading failed: {e}"), "the device reported an error"))?;
    Ok(match data.dtype {
        DType::Bool(_) => data
            .to_vec::<bool>()
            .map_err(|e| NifError::new(op, format!("{e:?}"), "bool read-back"))?
            .into_iter()
            .map(u8::from)
            .collect(),
        _ => data.into_bytes().to_vec(),
    })
}

fn read_on<B: Backend>(p: Prim<B>) -> Result<TensorData, String> {
    let future = match p {
        Prim::Float(t) => burn_backend::read_sync(B::float_into_data(t)),
        Prim::Int(t) => burn_backend::read_sync(B::int_into_data(t)),
        Prim::Bool(t) => burn_backend::read_sync(B::bool_into_data(t)),
        Prim::Quant(t) => burn_backend::read_sync(B::q_into_data(t)),
    };
    future.map_err(|e| format!("{e:?}"))
}

/// `prim` on `device`: the tensor itself where it already is; between two devices of one
/// runtime Burn's `to_device` (device to device on CUDA with NCCL, through the host
/// elsewhere), queued behind the source's work without waiting for it where the runtime copies
/// device to device; between runtimes through the host. A tracked tensor stays on the tape.
pub fn to_device(op: &str, prim: AnyPrim, device: &Dev) -> NifResult<AnyPrim> {
    if &prim.device() == device {
        return Ok(prim);
    }
    match (prim, device) {
        (AnyPrim::Wgpu(p), Dev::Wgpu(d)) => Ok(AnyPrim::Wgpu(to_device_on::<crate::tensor::AdWgpu>(op, p, d)?)),
        #[cfg(feature = "cuda")]
        (AnyPrim::Cuda(p), Dev::Cuda(d)) => Ok(AnyPrim::Cuda(to_device_on::<crate::tensor::AdCuda>(op, p, d)?)),
        #[allow(unreachable_patterns)]
        (prim, device) => {
            let (dims, dtype) = (prim.shape().to_vec(), prim.dtype());
            upload(op, read(op, prim)?, dims, dtype, device)
        }
    }
}

fn to_device_on<B: Backend>(op: &str, p: Prim<B>, device: &B::Device) -> NifResult<Prim<B>> {
    let dtype = p.dtype();
    if !B::supports_dtype(device, dtype) {
        return Err(NifError::new(op, format!("the device does not support dtype {}", name(dtype)), format!("{device:?}")));
    }
    Ok(match p {
        Prim::Float(t) => Prim::Float(B::float_to_device(t, device)),
        Prim::Int(t) => Prim::Int(B::int_to_device(t, device)),
        Prim::Bool(t) => Prim::Bool(B::bool_to_device(t, device)),
        Prim::Quant(t) => Prim::Quant(B::q_to_device(t, device)),
    })
}
