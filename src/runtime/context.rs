//! Per-device state kept by the runtime: the random seed and a counter of random calls.
use std::collections::HashMap;
use std::sync::Mutex;

use cubecl::Runtime;
use cubecl::prelude::ComputeClient;
use cubecl::device::{Device, DeviceId};

/// The compute client of a device, with helpers used by the launch code.
pub struct DeviceContext;

impl DeviceContext {
    /// The cubecl client of `device` (cubecl caches one per device). The device is noted for
    /// [`shutdown`](super::shutdown()), which syncs it before the process exits.
    pub fn client<R: Runtime>(device: &R::Device) -> ComputeClient<R> {
        super::device_failure::install_panic_hook();
        let client = R::client(device);
        super::shutdown::track::<R>(device, &client);
        client
    }

    /// Seeds the random number generation of `device`.
    pub fn seed<D: Device>(device: &D, seed: u64) {
        let mut guard = RANDOM.lock().unwrap_or_else(|e| e.into_inner());
        let states = guard.get_or_insert_with(HashMap::new);
        states.insert(device.to_id(), RandomState { seed, counter: 0 });
    }
}

#[derive(Clone, Copy)]
struct RandomState {
    seed: u64,
    counter: u32,
}

static RANDOM: Mutex<Option<HashMap<DeviceId, RandomState>>> = Mutex::new(None);

/// The (seed, counter) key for the next random tensor of `device`. An unseeded device starts
/// from a seed taken from the clock, so unseeded runs differ; a seeded one repeats exactly.
pub fn next_random_key<D: Device>(device: &D) -> (u64, u32) {
    let mut guard = RANDOM.lock().unwrap_or_else(|e| e.into_inner());
    let states = guard.get_or_insert_with(HashMap::new);
    let state = states.entry(device.to_id()).or_insert_with(|| RandomState {
        seed: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0x5eed),
        counter: 0,
    });
    let key = (state.seed, state.counter);
    state.counter = state.counter.wrapping_add(1);
    key
}
