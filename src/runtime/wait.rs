//! Waiting for a device, on cubecl's device thread.
//!
//! cubecl hands a device's launches, allocations and syncs to a thread of its own, which
//! spins for a while when it runs out of work and then naps in 150 µs steps; a launch queued
//! meanwhile waits for the end of the nap. A wait made on the caller's thread leaves that
//! thread without work for the whole of the device's, so after a long kernel the next op found
//! it napping: on an H100 an eager 2^26 f32 add and its sync took 468 µs waiting on the
//! calling thread and 321 µs waiting on the device thread (the kernel alone: 258). Every wait
//! of ours runs there (`ComputeClient::exclusive`, the caller's stream), so the thread goes
//! back to spinning as soon as the device is done.
//!
//! Each wait also confirms, in the same call, the large allocations made on the device since
//! its last wait ([`super::alloc`]), and a read first flushes the errors that earlier work left
//! in the stream (a launch the device refused, a binding it could not make), so that it never
//! returns a buffer that failed work should have written.
use cubecl::Runtime;
use cubecl::bytes::Bytes;
use cubecl::future::block_on;
use cubecl::prelude::ComputeClient;
use cubecl::server::{Handle, ServerError};

/// Waits until the work queued so far on the caller's stream is done.
///
/// # Errors
/// The device's, and a large allocation made since the last wait that the device could not
/// make (naming its op, shape, dtype and size).
pub fn sync<R: Runtime>(client: &ComputeClient<R>) -> Result<(), ServerError> {
    super::alloc::at_wait(client, || block_on(client.sync()))
}

/// The bytes of `handles`, once the work queued before the read is done.
///
/// # Errors
/// As [`sync`]; and the errors of earlier work on the caller's stream.
pub fn read<R: Runtime>(client: &ComputeClient<R>, handles: Vec<Handle>) -> Result<Vec<Bytes>, ServerError> {
    super::alloc::at_wait(client, || {
        client.flush()?;
        block_on(client.read_async(handles))
    })
}
