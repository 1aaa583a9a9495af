//! Device allocations that fail where they are asked for or at the device's next wait, never
//! silently.
//!
//! cubecl reserves memory on its device thread, after `empty` or `create` have returned. A
//! failure there (a buffer larger than the device can bind, memory the device doesn't have)
//! panics on that thread, where cubecl catches and only logs it: the handle is left unbound,
//! the work that later binds it fails on the device thread in turn (a look-up that panics or
//! an error kept in the stream), and the buffers that work should have written keep stale
//! values. So every allocation of the backend goes through here: sizes beyond the largest
//! buffer the device takes (cubecl's `max_page_size`: the binding limit on wgpu, a quarter of
//! the memory on CUDA) are refused at once, naming the size and the limit, and large
//! allocations are noted (op, shape, dtype, size, handle) and confirmed at the device's next
//! wait ([`super::wait`]: syncs and reads, on the device thread), or when the next op finds a
//! failure recorded on the device ([`take_failure`]). One the device could not make is an
//! error there that names the op, the shape, the dtype and the size.
//!
//! Confirming costs nothing when all went well: a failed reservation always panics on the
//! device thread, where the hook of [`super::device_failure`] records it, so a wait that finds
//! no failure recorded knows that the reservations queued before it went through. Only when
//! one is recorded are the noted handles looked up, on the device thread, in the wait's own
//! call. A noted allocation holds a clone of its handle until then (its memory stays reserved,
//! and no op writes into it in place), so at most [`PENDING_MAX`] of them, [`PENDING_BYTES`] in
//! all, wait per device: the next one is confirmed at once with the others, in one call to the
//! device thread.
//!
//! [`set_allocation_limit`] lowers the largest allocation further, for the whole process: a
//! guard against runaway sizes in production, and the way tests refuse an allocation in the
//! middle of an epoch.
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::future::block_on;
use cubecl::prelude::ComputeClient;
use cubecl::server::{Handle, ServerError};

use super::device_failure;

/// Allocations of at least this many bytes are confirmed by the device, at its next wait.
pub const CONFIRM_BYTES: usize = 32 << 20;

/// Most allocations of one device that wait for confirmation.
pub const PENDING_MAX: usize = 16;

/// Most bytes of one device's allocations that wait for confirmation.
pub const PENDING_BYTES: usize = 1 << 30;

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
/// See [`checked_bytes`]; and when the device failed to reserve large buffers asked for
/// earlier, confirmed here because too many wait (see [`PENDING_MAX`]).
pub fn empty<R: Runtime>(client: &ComputeClient<R>, op: &str, shape: &Shape, dtype: DType) -> Handle {
    let bytes = checked_bytes(client, op, shape, dtype);
    // The hook that records a failed reservation, which the confirmation relies on (installed
    // with every device client already; here for clients made outside `DeviceContext`).
    device_failure::install_panic_hook();
    let handle = client.empty(bytes);
    note(client, op, &handle, bytes, shape, dtype);
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
    device_failure::install_panic_hook();
    let handle = client.create_from_slice(&bytes);
    note(client, op, &handle, size, shape, dtype);
    handle
}

/// Runs `wait` (a sync or a read of `client`'s device) on the device thread, after confirming
/// there, in the same call, the large allocations made on the device since its last wait.
/// Those the device could not make are the error, naming each one, instead of `wait`'s result.
pub(crate) fn at_wait<R: Runtime, T: Send + 'static>(
    client: &ComputeClient<R>,
    wait: impl FnOnce() -> Result<T, ServerError> + Send,
) -> Result<T, ServerError> {
    let pending = take_pending(client);
    client.exclusive(move || match confirm_on_device(client, pending) {
        Ok(()) => wait(),
        Err(reason) => Err(ServerError::Generic { reason, backtrace: Default::default() }),
    })?
}

/// Takes the failures recorded on `device`'s thread (see [`super::take_device_failure`]),
/// naming first the large allocations among them: when one is recorded, the allocations that
/// wait for confirmation are confirmed (one call to the device thread).
pub fn take_failure<R: Runtime>(client: &ComputeClient<R>, device: &R::Device) -> Option<String> {
    if !device_failure::is_recorded(device) {
        return None;
    }
    let pending = take_pending(client);
    let unmade = match pending.is_empty() {
        true => None,
        false => client.exclusive(move || confirm_on_device(client, pending)).ok().and_then(Result::err),
    };
    match (unmade, device_failure::take_device_failure(device)) {
        (Some(unmade), Some(rest)) => Some(format!("{unmade}; {rest}")),
        (unmade, rest) => unmade.or(rest),
    }
}

/// A large allocation that waits for the device to confirm it.
struct Pending {
    op: String,
    shape: Vec<usize>,
    dtype: DType,
    bytes: usize,
    handle: Handle,
}

impl Pending {
    fn unmade(&self) -> String {
        format!(
            "ex_cubecl: {}: the device could not allocate {} bytes for a tensor of shape {:?} and dtype {:?}",
            self.op, self.bytes, self.shape, self.dtype
        )
    }
}

/// The allocations that wait for confirmation, per device. A device's key is the address of its
/// properties: cubecl keeps them once per device, shared by every clone of its client, for the
/// life of the process.
static PENDING: Mutex<Option<HashMap<usize, Vec<Pending>>>> = Mutex::new(None);

fn device_key<R: Runtime>(client: &ComputeClient<R>) -> usize {
    std::ptr::from_ref(client.properties()).addr()
}

/// Notes a large allocation for confirmation at the device's next wait, or confirms it now
/// with the others when [`PENDING_MAX`] or [`PENDING_BYTES`] are reached.
fn note<R: Runtime>(client: &ComputeClient<R>, op: &str, handle: &Handle, bytes: usize, shape: &Shape, dtype: DType) {
    if bytes < CONFIRM_BYTES {
        return;
    }
    let full = {
        let mut guard = PENDING.lock().unwrap_or_else(|e| e.into_inner());
        let pending = guard.get_or_insert_with(HashMap::new).entry(device_key(client)).or_default();
        pending.push(Pending { op: op.to_string(), shape: shape.to_vec(), dtype, bytes, handle: handle.clone() });
        let total: usize = pending.iter().map(|p| p.bytes).sum();
        (pending.len() >= PENDING_MAX || total >= PENDING_BYTES).then(|| std::mem::take(pending))
    };
    if let Some(pending) = full
        && let Ok(Err(unmade)) = client.exclusive(move || confirm_on_device(client, pending))
    {
        panic!("{unmade}");
    }
}

/// Takes the allocations of `client`'s device that wait for confirmation: their reservations
/// are queued on the device thread before anything queued after this.
fn take_pending<R: Runtime>(client: &ComputeClient<R>) -> Vec<Pending> {
    let mut guard = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_mut().and_then(|map| map.get_mut(&device_key(client))).map(std::mem::take).unwrap_or_default()
}

/// How many allocations of `client`'s device wait for confirmation.
#[cfg(test)]
fn pending_len<R: Runtime>(client: &ComputeClient<R>) -> usize {
    let guard = PENDING.lock().unwrap_or_else(|e| e.into_inner());
    guard.as_ref().and_then(|map| map.get(&device_key(client))).map_or(0, Vec::len)
}

/// Confirms `pending` on the device thread (within `exclusive`): an error naming those the device
/// could not reserve, with the device thread's own message.
fn confirm_on_device<R: Runtime>(client: &ComputeClient<R>, pending: Vec<Pending>) -> Result<(), String> {
    if pending.is_empty() || !device_failure::any_recorded() {
        return Ok(());
    }
    // An unbound handle's look-up fails, or panics on the device thread (cubecl finds another
    // buffer's slot at its unset location and asserts that it is not its own).
    let reserved = |handle: &Handle| device_failure::quietly(|| client.get_resource(handle.clone()).is_ok()).unwrap_or(false);
    let unmade: Vec<String> = pending.iter().filter(|p| !reserved(&p.handle)).map(Pending::unmade).collect();
    if unmade.is_empty() {
        return Ok(());
    }
    // The work that bound them failed on the device thread too: its panics (recorded) and the
    // errors it left in the stream (flushed by a sync) go with this report, not to the next wait.
    let then = block_on(client.sync()).err().map(|e| format!("; the device reported then: {e}")).unwrap_or_default();
    let cause = device_failure::take_this_devices().map(|c| format!(": {c}")).unwrap_or_default();
    Err(format!("{}{cause}{then}", unmade.join("; ")))
}

#[cfg(all(test, any(feature = "wgpu", feature = "cuda")))]
mod tests {
    use std::panic::AssertUnwindSafe;

    use burn_backend::ops::FloatTensorOps;
    use burn_backend::{TensorData, read_sync};

    use super::*;
    use crate::runtime::{DeviceContext, Layout, take_device_failure, wait};
    use crate::{CubeTensor, ExCubeclBackend};

    // As the conformance suite: wgpu where it is built, CUDA otherwise
    // (`--no-default-features --features cuda`).
    #[cfg(feature = "wgpu")]
    type R = cubecl::wgpu::WgpuRuntime;
    #[cfg(all(feature = "cuda", not(feature = "wgpu")))]
    type R = cubecl::cuda::CudaRuntime;
    type B = ExCubeclBackend<R>;

    /// A buffer the device cannot reserve (2^40 bytes: more than any of its memory pools takes,
    /// which `checked_bytes` refuses before the device sees it; asked for here behind its back),
    /// noted as `op` allocating `bytes` for as many f32 elements.
    fn unmade(client: &ComputeClient<R>, op: &str, bytes: usize) -> Handle {
        assert!(client.properties().memory.max_page_size < 1 << 40);
        let handle = client.empty(1 << 40);
        note(client, op, &handle, bytes, &Shape::from(vec![bytes / 4]), DType::F32);
        handle
    }

    /// What `op`'s failed allocation of `bytes` is reported as.
    fn named(op: &str, bytes: usize) -> String {
        format!("ex_cubecl: {op}: the device could not allocate {bytes} bytes for a tensor of shape [{}] and dtype F32", bytes / 4)
    }

    fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
        payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default()
    }

    // One test, its cases in order: they share the device's list of allocations that wait.
    #[test]
    fn large_allocations_are_confirmed_at_the_next_wait() {
        let device = <R as Runtime>::Device::default();
        let client = DeviceContext::client::<R>(&device);

        // Small allocations never wait; a large one waits for the next wait, which confirms it.
        for _ in 0..100 {
            empty(&client, "test_small", &Shape::from(vec![16]), DType::F32);
        }
        assert_eq!(pending_len(&client), 0);
        let large = empty(&client, "test_large", &Shape::from(vec![CONFIRM_BYTES / 4]), DType::F32);
        assert_eq!(pending_len(&client), 1);
        wait::sync(&client).expect("a large allocation the device makes");
        assert_eq!(pending_len(&client), 0);
        drop(large);

        // Many large allocations without a wait: confirmed at once, all together, whenever
        // PENDING_MAX or PENDING_BYTES is reached, so the list stays bounded.
        let mut most = 0;
        for bytes in [CONFIRM_BYTES, PENDING_BYTES / 2] {
            for _ in 0..100 {
                let handle = client.empty(64);
                note(&client, "test_bounded", &handle, bytes, &Shape::from(vec![bytes / 4]), DType::F32);
                let len = pending_len(&client);
                assert!(len < PENDING_MAX && len * bytes < PENDING_BYTES, "{len} allocations of {bytes} bytes wait");
                most = most.max(len);
            }
            wait::sync(&client).expect("a wait");
        }
        assert_eq!(most, PENDING_MAX - 1, "allocations wait for the next wait");
        assert_eq!(pending_len(&client), 0);

        // One of PENDING_BYTES or more is confirmed at once: one the device cannot make fails
        // there, naming the op, shape, dtype and size.
        let at_once = std::panic::catch_unwind(AssertUnwindSafe(|| unmade(&client, "test_huge", PENDING_BYTES)));
        let message = panic_message(at_once.expect_err("an allocation the device cannot make"));
        assert!(message.contains(&named("test_huge", PENDING_BYTES)), "{message}");
        assert_eq!(take_device_failure(&device), None, "the device thread's own message is part of the report");

        // Smaller ones wait: one the device cannot make fails the next wait, naming it, once;
        // the device goes on.
        let _lost = unmade(&client, "test_unmade", CONFIRM_BYTES);
        assert_eq!(pending_len(&client), 1);
        let error = wait::sync(&client).expect_err("a wait after an allocation the device could not make").to_string();
        assert!(error.contains(&named("test_unmade", CONFIRM_BYTES)), "{error}");
        assert_eq!(take_device_failure(&device), None, "the device thread's own message is part of the report");
        wait::sync(&client).expect("the wait after the report");

        // Found by the next op's allocation (`take_failure`, which `CubeTensor::empty` and
        // `from_data` call) once the device thread has recorded it.
        let _lost = unmade(&client, "test_unmade_op", CONFIRM_BYTES);
        client.memory_usage().expect("a call that waits for the device thread without confirming");
        let failure = take_failure(&client, &device).expect("the failure, found by the next op");
        assert!(failure.contains(&named("test_unmade_op", CONFIRM_BYTES)), "{failure}");
        assert_eq!(pending_len(&client), 0);
        wait::sync(&client).expect("the wait after the report");

        // An op on the buffer the device could not make, and a read of its result: an error
        // naming the allocation (at the op's own allocation or at the read), never values.
        let handle = unmade(&client, "test_unmade_read", CONFIRM_BYTES);
        let x = CubeTensor { client: client.clone(), device: device.clone(), handle, layout: Layout::contiguous(Shape::from(vec![16])), dtype: DType::F32 };
        let read = std::panic::catch_unwind(AssertUnwindSafe(|| read_sync(B::float_into_data(B::float_exp(x)))));
        let message = match read {
            Ok(Ok(data)) => panic!("read {:?} from a buffer the device could not make", data.as_slice::<f32>()),
            Ok(Err(e)) => format!("{e:?}"),
            Err(payload) => panic_message(payload),
        };
        assert!(message.contains(&named("test_unmade_read", CONFIRM_BYTES)), "{message}");
        assert_eq!(take_device_failure(&device), None);
        let zeros = B::float_from_data(TensorData::new(vec![0f32; 4], [4]), &device);
        let values = read_sync(B::float_into_data(B::float_exp(zeros))).expect("an op after the failures");
        assert_eq!(values.as_slice::<f32>().unwrap(), &[1.0; 4]);
    }
}
