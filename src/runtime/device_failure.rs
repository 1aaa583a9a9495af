//! Failures on cubecl's device threads, brought back to the caller.
//!
//! cubecl runs the work of a device (memory reservations, kernel compilation, launches) on a
//! thread of its own, named `DS<stage>-<type id>-<index>`, and a panic of that work is caught
//! there and only logged: the tensors it should have written keep whatever their buffers held,
//! and reads return zeros or stale values. A panic hook, installed with the first client of
//! any device, records such panics of the compute server's thread (`DSD-…`) per device; the next [`launch`](super::launch),
//! `into_data` or `sync` on that device takes them and fails with their message. Each failure
//! is reported once, to whichever of those comes first.
//!
//! A large allocation the device could not make fails there too (cubecl's reservation panics);
//! [`super::alloc`] names it, with the op, shape and dtype, where it is found.
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Once};

use cubecl::device::{Device, DeviceId};

/// Whether any failure waits to be reported (keeps the launcher's check to one atomic load).
static PENDING: AtomicBool = AtomicBool::new(false);
static FAILURES: Mutex<Vec<(DeviceId, String)>> = Mutex::new(Vec::new());
static HOOK: Once = Once::new();

thread_local! {
    /// Whether this thread's panics are expected, and handled, by the code that causes them
    /// (see [`quietly`]).
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Installs the panic hook (once per process; the hook that was there before still runs).
/// Every device client does this; call it first when installing a hook of your own so that
/// this one stays in the chain.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if QUIET.try_with(Cell::get).unwrap_or(false) {
                return;
            }
            if let Some(device) = std::thread::current().name().and_then(device_of_thread) {
                let message = info
                    .payload()
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| info.payload().downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic without a message".into());
                let at = info.location().map(|l| format!(" (at {}:{})", l.file(), l.line())).unwrap_or_default();
                FAILURES.lock().unwrap_or_else(|e| e.into_inner()).push((device, format!("{message}{at}")));
                PENDING.store(true, Ordering::Release);
            }
            previous(info);
        }));
    });
}

/// The device served by a cubecl device thread, from the thread's name: the downstream
/// stage's thread (`DSD-…`, the compute server). A panic on an upstream thread (`DSU-…`,
/// burn-fusion's engine running our ops for `Fusion<B>`) is a failed operation, not a failed
/// device: burn-fusion fails the read of that operation's results, in the thread that
/// registered it, and recording it here would hand it to whichever thread launches next.
fn device_of_thread(name: &str) -> Option<DeviceId> {
    let mut parts = name.strip_prefix("DSD-")?.splitn(2, '-');
    let type_id = parts.next()?.parse().ok()?;
    let index_id = parts.next()?.parse().ok()?;
    Some(DeviceId { type_id, index_id })
}

/// Takes the failures recorded for `device`, joined into one message, if there are any.
pub fn take_device_failure<D: Device>(device: &D) -> Option<String> {
    take(device.to_id())
}

/// Whether any failure waits to be reported, on any device (one atomic load).
pub(crate) fn any_recorded() -> bool {
    PENDING.load(Ordering::Acquire)
}

/// Whether a failure of `device` waits to be reported.
pub(crate) fn is_recorded<D: Device>(device: &D) -> bool {
    if !any_recorded() {
        return false;
    }
    let id = device.to_id();
    FAILURES.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|(d, _)| *d == id)
}

/// Takes the failures recorded for the device whose thread this is (none on another thread).
pub(crate) fn take_this_devices() -> Option<String> {
    std::thread::current().name().and_then(device_of_thread).and_then(take)
}

/// Runs `f`, a look-up that may panic on the device thread when what it looks for is missing:
/// such a panic is neither recorded nor printed, and comes back as `Err`.
pub(crate) fn quietly<T>(f: impl FnOnce() -> T) -> std::thread::Result<T> {
    let before = QUIET.replace(true);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.set(before);
    result
}

fn take(id: DeviceId) -> Option<String> {
    if !PENDING.load(Ordering::Acquire) {
        return None;
    }
    let mut failures = FAILURES.lock().unwrap_or_else(|e| e.into_inner());
    let (mine, rest): (Vec<_>, Vec<_>) = failures.drain(..).partition(|(d, _)| *d == id);
    PENDING.store(!rest.is_empty(), Ordering::Release);
    *failures = rest;
    (!mine.is_empty()).then(|| mine.into_iter().map(|(_, m)| m).collect::<Vec<_>>().join("; "))
}

/// Runs `f`, a call into cubecl that waits for `device`'s thread. When the work it waits for
/// panics there, cubecl panics in the caller too (on a `CallError`); that panic becomes an
/// error carrying the device thread's own message.
pub fn on_device_thread<D: Device, T>(device: &D, f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|_| {
        take_device_failure(device).unwrap_or_else(|| "the device's thread failed".to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_threads_are_recognised_by_name() {
        assert_eq!(device_of_thread("DSD-3-1"), Some(DeviceId { type_id: 3, index_id: 1 }));
        assert_eq!(device_of_thread("DSD-0-12"), Some(DeviceId { type_id: 0, index_id: 12 }));
        assert_eq!(device_of_thread("main"), None);
        assert_eq!(device_of_thread("DSD-x-1"), None);
        assert_eq!(device_of_thread("DSU-3-1"), None, "burn-fusion's engine thread is not the device");
    }
}
