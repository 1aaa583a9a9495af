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
use cubecl::Runtime;
use cubecl::bytes::Bytes;
use cubecl::future::block_on;
use cubecl::prelude::ComputeClient;
use cubecl::server::{Handle, ServerError};

/// Waits until the work queued so far on the caller's stream is done.
pub fn sync<R: Runtime>(client: &ComputeClient<R>) -> Result<(), ServerError> {
    client.exclusive(|| block_on(client.sync()))?
}

/// The bytes of `handles`, once the work queued before the read is done.
pub fn read<R: Runtime>(client: &ComputeClient<R>, handles: Vec<Handle>) -> Result<Vec<Bytes>, ServerError> {
    client.exclusive(|| block_on(client.read_async(handles)))?
}
