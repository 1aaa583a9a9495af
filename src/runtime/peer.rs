//! Copies between two devices of one runtime without the host, where cubecl offers them: on
//! CUDA, NCCL's send and receive over cubecl-cuda's communicator of the two devices (NVLink or
//! PCIe peer to peer). Other runtimes, and CUDA where NCCL is missing (see
//! [`super::nccl_status`]), get `None`, and the caller reads back and uploads.
use burn_backend::Shape;
use cubecl::Runtime;
use cubecl::ir::{ElemType, UIntKind};
use cubecl::server::ServerCommunication;

use super::{DeviceContext, alloc, nccl_status};
use crate::tensor::CubeTensor;

/// Whether this runtime's devices talk to each other directly (CUDA with NCCL).
pub fn peer_to_peer<R: Runtime>() -> bool {
    <R::Server as ServerCommunication>::SERVER_COMM_ENABLED && nccl_status().is_ok()
}

/// `tensor` copied to `device` device to device, or `None` where the runtime offers no such
/// copy. Both devices' streams wait for the transfer (the target's to read the copy, the
/// source's to reuse the memory it was read from); the host doesn't.
pub(crate) fn device_to_device<R: Runtime>(tensor: &CubeTensor<R>, device: &R::Device) -> Option<CubeTensor<R>> {
    if !peer_to_peer::<R>() {
        return None;
    }
    let source = exact_buffer(tensor.clone(), "to_device");
    let target = DeviceContext::client::<R>(device);
    let mut client = source.client.clone();
    // The bytes travel as bytes: NCCL has no bool type, and the dtype doesn't matter to a copy.
    let handle = client.to_client(source.handle.clone(), &target, ElemType::UInt(UIntKind::U8));
    // NCCL's send reads `source` on the communication stream, which cubecl's memory pools
    // don't see: the source stream waits for it, so whatever reuses the source's memory once
    // `source` (a temporary copy, or the caller's tensor freed after the transfer) is dropped
    // runs after the send. The host doesn't wait.
    client.sync_collective();
    Some(CubeTensor {
        client: target,
        device: device.clone(),
        handle,
        layout: source.layout.clone(),
        dtype: source.dtype,
    })
}

/// `tensor`, or a copy of it, contiguous from the start of a buffer of exactly its bytes (what
/// NCCL reads: the whole buffer of a handle).
pub(crate) fn exact_buffer<R: Runtime>(tensor: CubeTensor<R>, op: &str) -> CubeTensor<R> {
    let bytes = alloc::checked_bytes(&tensor.client, op, &Shape::from(tensor.dims().to_vec()), tensor.dtype);
    if tensor.layout.is_contiguous_from_start() && tensor.handle.size_in_used() as usize == bytes {
        return tensor;
    }
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    crate::launch::copy::copy_into(&tensor, &tensor.layout, 0, &out, &out.layout);
    out
}
