//! Device allocations that fail where they are asked for, never later and silently.
//!
//! cubecl reserves memory on its device thread, after `empty` or `create` have returned, and a
//! failure there (a buffer larger than the device can bind, memory the device doesn't have)
//! is only logged: the handle is left unbound and later reads return zeros. So every
//! allocation of the backend goes through here: sizes beyond the largest buffer the device
//! takes (cubecl's `max_page_size`: the binding limit on wgpu, a quarter of the memory on
//! CUDA) are refused at once, naming the size and the limit, and large allocations are
//! confirmed with the device before the tensor is handed out.
//!
//! [`set_allocation_limit`] lowers the largest allocation further, for the whole process: a
//! guard against runaway sizes in production, and the way tests refuse an allocation in the
//! middle of an epoch.
use std::sync::atomic::{AtomicU64, Ordering};

use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::ComputeClient;
use cubecl::server::Handle;

/// Allocations of at least this many bytes wait for the device to confirm them (a round trip
/// to the device thread: 6-7 µs on an H100 or H200, small next to the cost of such a buffer).
pub const CONFIRM_BYTES: usize = 32 << 20;

/// The process's allocation limit in bytes (`u64::MAX`: none).
static LIMIT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Refuses from now on every allocation of more than `bytes` (on every device), as one larger
/// than the device takes is refused: a panic naming the operation, the shape, the size and
/// the limit. `None` lifts the limit.
pub fn set_allocation_limit(bytes: Option<u64>) {
    LIMIT.store(bytes.unwrap_or(u64::MAX), Ordering::Relaxed);
}

/// The limit of [`set_allocation_limit`], if one is set.
pub fn allocation_limit() -> Option<u64> {
    Some(LIMIT.load(Ordering::Relaxed)).filter(|&l| l != u64::MAX)
}

/// The bytes of `shape` elements of `dtype` (at least one word: zero-sized buffers are not
/// allowed by every runtime).
///
/// # Panics
/// When the size overflows `usize`, or exceeds the largest buffer the device takes or the
/// process's [allocation limit](set_allocation_limit).
pub fn checked_bytes<R: Runtime>(client: &ComputeClient<R>, op: &str, shape: &Shape, dtype: DType) -> usize {
    let elem = super::elem_size(dtype);
    let device_limit = client.properties().memory.max_page_size;
    let limit = device_limit.min(LIMIT.load(Ordering::Relaxed));
    let bytes = shape.iter().try_fold(elem, |acc, &d| acc.checked_mul(d));
    match bytes {
        Some(b) if (b as u64) <= limit => b.max(4),
        _ => panic!(
            "ex_cubecl: {op}: a tensor of shape {:?} and dtype {dtype:?} needs {} bytes, more than {} ({limit} bytes)",
            shape.to_vec(),
            bytes.map_or_else(|| "over 2^64".to_string(), |b| b.to_string()),
            if limit < device_limit { "the allocation limit (set_allocation_limit)" } else { "the largest buffer the device takes" },
        ),
    }
}

/// An uninitialised buffer for `shape` elements of `dtype`.
///
/// # Panics
/// See [`checked_bytes`]; and when the device fails to reserve a large buffer.
pub fn empty<R: Runtime>(client: &ComputeClient<R>, op: &str, shape: &Shape, dtype: DType) -> Handle {
    let bytes = checked_bytes(client, op, shape, dtype);
    let handle = confirm(client, op, client.empty(bytes), bytes, shape, dtype);
    // A pipeline's replays may bind such a buffer, when an output views it, to a fresh one.
    super::capture::note_scratch(&handle);
    handle
}

/// A buffer holding `bytes` (the device layout of `shape` elements of `dtype`).
///
/// # Panics
/// See [`empty`].
pub fn upload<R: Runtime>(client: &ComputeClient<R>, op: &str, mut bytes: Vec<u8>, shape: &Shape, dtype: DType) -> Handle {
    let size = checked_bytes(client, op, shape, dtype);
    bytes.resize(size.max(bytes.len()), 0);
    confirm(client, op, client.create_from_slice(&bytes), size, shape, dtype)
}

/// Waits for the device to bind a large buffer; a buffer it could not reserve is an error here.
fn confirm<R: Runtime>(client: &ComputeClient<R>, op: &str, handle: Handle, bytes: usize, shape: &Shape, dtype: DType) -> Handle {
    if bytes >= CONFIRM_BYTES
        && let Err(e) = client.get_resource(handle.clone())
    {
        panic!(
            "ex_cubecl: {op}: the device could not allocate {bytes} bytes for a tensor of shape {:?} and \
             dtype {dtype:?}: {e}",
            shape.to_vec()
        );
    }
    handle
}
