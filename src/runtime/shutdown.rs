//! Winding the runtime down before the process exits.
//!
//! cubecl runs each device's work (allocations, kernel compilation, launches) on a thread of
//! its own, `DSD-<type>-<index>`, that lives as long as the process and is never joined. A
//! program that returns from `main` (or a BEAM that halts) while work is still queued leaves
//! that thread compiling or running: on lavapipe it is inside LLVM when `exit` runs the
//! libraries' destructors, and the process dies with a segmentation fault after it has done
//! everything it should (2 runs in 6 of a script that trains, saves and ends).
//!
//! [`shutdown`] winds down in order:
//! 1. the [`CommandQueue`](super::CommandQueue)s stop taking commands (a later `submit`
//!    gives a command that fails with "shut down") and finish the commands already queued;
//! 2. kernel launches stop: [`launch`](super::launch) refuses them (a panic naming the
//!    operation, which the NIF turns into an error), and the launches already under way end;
//! 3. every device this process used finishes its queued work (a sync on its device thread,
//!    which flushes the caller's stream and waits for all the work handed to the device).
//!
//! After it the device threads are idle; reads, frees and syncs still work, launches don't.
//!
//! The same runs by itself when the process exits. A Rust program's main thread, once it has
//! used a device, holds a thread-local whose destructor does it: `exit` runs the exiting
//! thread's thread-local destructors before any `atexit` handler, so it comes before every
//! library's destructors. As a fallback (another thread calling `exit`, the BEAM's `halt`), the
//! first client of each device registers a handler with the C library's `atexit`, after the
//! device is loaded; it runs before the destructors registered ahead of it, but not before
//! those that LLVM registers lazily during its first compilations, which is why the Elixir
//! side also winds down before the VM calls `exit` (`ExCubecl.Application`: at the end of a
//! script or mix task, and when the application stops). There, launches asked for after it has started wait forever
//! instead of failing (the process is ending; a thread that got an error could go on to other
//! work), and last each device thread is parked in a task of ours, so that nothing runs on it
//! while the libraries are torn down. The BEAM's `halt` (and `init:stop`, which ends in it)
//! calls `exit` without unloading NIF libraries, so this handler is what winds the NIF down;
//! a NIF library that is unloaded (purged) runs it too (the C library runs a library's
//! `atexit` handlers when it is closed).
//!
//! `EX_CUBECL_EXIT_SHUTDOWN=0` leaves the handler out (to see what it prevents:
//! `scripts/exit_check.sh` runs programs that end with work in flight).
//!
//! Every wait is bounded ([`TIMEOUT`]; at exit, queued commands get 10 s); a device that doesn't answer in time is named in the
//! error (and, at exit, on stderr), and the process goes on.
use std::any::TypeId;
use std::cell::RefCell;
use std::fmt::Display;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use cubecl::Runtime;
use cubecl::device::{Device, DeviceId};
use cubecl::prelude::ComputeClient;
use cubecl::stream_id::StreamId;

/// The longest [`shutdown`] waits for each of its steps.
pub const TIMEOUT: Duration = Duration::from_secs(60);
/// At exit, the longest wait for the queued commands: past it they are left (the launches
/// they would make wait forever), the process is ending anyway.
const EXIT_DRAIN: Duration = Duration::from_secs(10);

const OPEN: u8 = 0;
/// Shut down by a call: later launches panic.
const CLOSED: u8 = 1;
/// Shutting down at exit: later launches wait forever.
const EXITING: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(OPEN);
/// Launches between their check of [`STATE`] and the end of their enqueueing.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// Why [`shutdown`] did not finish every step in time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShutdownError(pub Vec<String>);

impl Display for ShutdownError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ex_cubecl: shutdown: {}", self.0.join("; "))
    }
}

impl std::error::Error for ShutdownError {}

/// Winds the runtime down (see the [module docs](self)): command queues drained, launches
/// stopped, every device's queued work finished. Safe to call more than once; after it,
/// kernel launches panic with a message naming the operation.
///
/// # Errors
/// The steps that did not end within [`TIMEOUT`] (a queue still running, a device that did
/// not finish).
pub fn shutdown() -> Result<(), ShutdownError> {
    wind_down(CLOSED)
}

/// Whether [`shutdown`] has run (or the process is exiting).
pub fn is_shut_down() -> bool {
    STATE.load(Ordering::SeqCst) != OPEN
}

/// A launch under way: [`shutdown`] waits until none is left.
pub(crate) struct Launching(());

impl Drop for Launching {
    fn drop(&mut self) {
        IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Admits a launch of `op`, or refuses it once the runtime is shut down (a panic naming
/// `op`; at exit the calling thread waits until the process ends).
pub(crate) fn launching(op: &dyn Display) -> Launching {
    // Counted before the state is read, and the state set before the count is read by
    // `shutdown` (both sequentially consistent): either this launch sees the shutdown, or
    // the shutdown sees this launch and waits for it.
    IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
    let launching = Launching(());
    match STATE.load(Ordering::SeqCst) {
        OPEN => launching,
        EXITING => {
            drop(launching);
            loop {
                std::thread::park();
            }
        }
        _ => {
            drop(launching);
            panic!("ex_cubecl: {op}: the runtime was shut down (ex_cubecl::runtime::shutdown): no kernel launches after it")
        }
    }
}

/// What the shutdown needs of a device: its sync, and a way to park its thread.
trait Tracked: Send + Sync {
    fn name(&self) -> String;
    /// Waits until the device has done the work queued before this call.
    fn sync(&self) -> Result<(), String>;
    /// Runs a task on the device thread that waits for the device to be idle and then never
    /// returns; sends on `started` once it is idle.
    fn park(&self, started: mpsc::Sender<()>);
}

struct TrackedDevice<R: Runtime> {
    device: R::Device,
    client: ComputeClient<R>,
}

impl<R: Runtime> Tracked for TrackedDevice<R> {
    fn name(&self) -> String {
        format!("{:?}", self.device)
    }

    fn sync(&self) -> Result<(), String> {
        super::wait::sync(&self.client).map_err(|e| format!("{e:?}"))
    }

    fn park(&self, started: mpsc::Sender<()>) {
        let client = self.client.clone();
        let _ = self.client.exclusive(move || {
            // On the device thread, once the tasks queued before this one have run: the
            // work they handed the device (a read may have flushed more since the sync)
            // done, nothing more can be handed to it.
            let _ = super::wait::sync(&client);
            let _ = started.send(());
            loop {
                std::thread::park();
            }
        });
    }
}

/// A queue the shutdown drains.
pub(crate) trait Drain: Send + Sync {
    /// Takes no more commands; gives the ids issued so far (`[0, n)`).
    fn close(&self) -> u64;
    /// Waits until the commands before `n` have finished, or until `deadline`; gives
    /// whether they did.
    fn finish_before(&self, n: u64, deadline: Instant) -> bool;
    fn name(&self) -> String;
}

type Key = (TypeId, DeviceId);

static DEVICES: Mutex<Vec<(Key, Arc<dyn Tracked>)>> = Mutex::new(Vec::new());
static QUEUES: Mutex<Vec<Weak<dyn Drain>>> = Mutex::new(Vec::new());

thread_local! {
    /// The devices this thread knows are tracked (keeps the common case off the lock).
    static SEEN: RefCell<Vec<Key>> = const { RefCell::new(Vec::new()) };
    /// On the main thread, once it has used a device: its destructor winds the runtime down.
    static MAIN_THREAD_GUARD: MainThreadGuard = const { MainThreadGuard };
}

/// Winds the runtime down when the main thread's thread-locals are destroyed: `exit` (which
/// `main` returning calls) runs the exiting thread's thread-local destructors before any
/// `atexit` handler. That matters because an `atexit` handler only runs before the handlers
/// registered ahead of it, and LLVM registers some of its destructors lazily, during its
/// first compilations, after the device (and our handler) exist.
struct MainThreadGuard;

impl Drop for MainThreadGuard {
    fn drop(&mut self) {
        at_exit();
    }
}

/// Notes that this process uses `device` (with its client): the shutdown syncs it. The first
/// time a device is seen, the exit handler is registered (again: it runs once), after the
/// device's libraries are loaded.
pub(crate) fn track<R: Runtime>(device: &R::Device, client: &ComputeClient<R>) {
    let key = (TypeId::of::<R>(), device.to_id());
    if SEEN.try_with(|seen| seen.borrow().contains(&key)).unwrap_or(false) {
        return;
    }
    if std::thread::current().name() == Some("main") && exit_handler_wanted() {
        let _ = MAIN_THREAD_GUARD.try_with(|_| ());
    }
    let mut devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
    if !devices.iter().any(|(k, _)| *k == key) {
        devices.push((key, Arc::new(TrackedDevice::<R> { device: device.clone(), client: client.clone() })));
        register_exit_handler();
    }
    drop(devices);
    let _ = SEEN.try_with(|seen| seen.borrow_mut().push(key));
}

/// Adds a queue to those the shutdown drains.
pub(crate) fn track_queue(queue: Weak<dyn Drain>) {
    let mut queues = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
    queues.retain(|q| q.strong_count() > 0);
    queues.push(queue);
}

unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

extern "C" fn at_exit() {
    // A panic must not cross into C; there is nothing left to report it to but stderr.
    let outcome = std::panic::catch_unwind(|| wind_down(EXITING));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => eprintln!("{e} (at exit)"),
        Err(_) => eprintln!("ex_cubecl: shutdown at exit: a panic"),
    }
}

fn exit_handler_wanted() -> bool {
    !std::env::var_os("EX_CUBECL_EXIT_SHUTDOWN").is_some_and(|v| v == "0")
}

fn register_exit_handler() {
    if !exit_handler_wanted() {
        return;
    }
    // SAFETY: `at_exit` is an `extern "C" fn()` that never unwinds (it catches panics), as
    // `atexit` requires; registering it more than once is allowed (it runs once).
    let failed = unsafe { atexit(at_exit) } != 0;
    if failed {
        eprintln!("ex_cubecl: could not register the exit handler: devices will not be synced at exit");
    }
}

/// Runs `f` on a thread of its own and waits for it until `deadline`.
fn bounded<T: Send + 'static>(deadline: Instant, f: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("ex_cubecl-shutdown".into())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .ok()?;
    rx.recv_timeout(deadline.saturating_duration_since(Instant::now())).ok()
}

/// One winding down at a time; a second caller waits and does it again (cheap once done).
static WINDING: Mutex<()> = Mutex::new(());
static WOUND_DOWN_AT_EXIT: AtomicU8 = AtomicU8::new(0);

fn wind_down(mode: u8) -> Result<(), ShutdownError> {
    let _one = WINDING.lock().unwrap_or_else(|e| e.into_inner());
    if mode == EXITING && WOUND_DOWN_AT_EXIT.swap(1, Ordering::SeqCst) == 1 {
        return Ok(());
    }
    let mut late = Vec::new();

    // 1. The command queues: no new commands, and the queued ones finished (their launches
    //    still run).
    let queues: Vec<Arc<dyn Drain>> = {
        let queues = QUEUES.lock().unwrap_or_else(|e| e.into_inner());
        queues.iter().filter_map(Weak::upgrade).collect()
    };
    let drain = if mode == EXITING { EXIT_DRAIN } else { TIMEOUT };
    let deadline = Instant::now() + drain;
    let issued: Vec<u64> = queues.iter().map(|q| q.close()).collect();
    for (queue, n) in queues.iter().zip(issued) {
        if !queue.finish_before(n, deadline) {
            late.push(format!("{} did not finish its queued commands within {drain:?}", queue.name()));
        }
    }

    // 2. Launches: none after this, and those under way end (they only enqueue).
    STATE.store(mode.max(STATE.load(Ordering::SeqCst)), Ordering::SeqCst);
    let deadline = Instant::now() + TIMEOUT;
    while IN_FLIGHT.load(Ordering::SeqCst) != 0 {
        if Instant::now() > deadline {
            late.push(format!("{} kernel launches did not end within {TIMEOUT:?}", IN_FLIGHT.load(Ordering::SeqCst)));
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }

    // 3. The devices: their queued work done; at exit, their threads parked for good.
    let devices: Vec<Arc<dyn Tracked>> = {
        let devices = DEVICES.lock().unwrap_or_else(|e| e.into_inner());
        devices.iter().map(|(_, d)| d.clone()).collect()
    };
    // The sync flushes the caller's stream (cubecl's streams are per thread; the NIF runs
    // every call on one stream of its own) and waits for everything the device was given.
    let stream = StreamId::current();
    let deadline = Instant::now() + TIMEOUT;
    for device in &devices {
        let synced = {
            let device = device.clone();
            bounded(deadline, move || stream.executes(|| device.sync()))
        };
        match synced {
            Some(Ok(())) => {}
            Some(Err(e)) => late.push(format!("device {}: the sync failed: {e}", device.name())),
            None => late.push(format!("device {} did not finish its work within {TIMEOUT:?}", device.name())),
        }
        if mode == EXITING {
            let (started, parked) = mpsc::channel();
            let device_for_park = device.clone();
            // The thread that asks waits forever with the device's; the process is ending.
            let asked = std::thread::Builder::new()
                .name("ex_cubecl-park".into())
                .spawn(move || device_for_park.park(started));
            let in_time = asked.is_ok()
                && parked.recv_timeout(deadline.saturating_duration_since(Instant::now())).is_ok();
            if !in_time {
                late.push(format!("device {}: its thread could not be stopped within {TIMEOUT:?}", device.name()));
            }
        }
    }
    if late.is_empty() { Ok(()) } else { Err(ShutdownError(late)) }
}
