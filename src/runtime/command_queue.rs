//! Asynchronous commands: a queue per device that runs pipeline replays and closures of
//! backend ops on its own thread, in submission order.
//!
//! [`CommandQueue::submit`] returns a [`CommandId`] at once; [`CommandQueue::poll`] tells
//! whether the command is pending, running, completed or failed; [`CommandQueue::wait`]
//! blocks until it has finished and gives its outputs or its error. A completion callback
//! ([`CommandQueue::submit_with_callback`]) is called on the queue's thread with the id and
//! the outcome (the NIF uses it to message the submitting Elixir process).
//!
//! Rules:
//! - Commands of one queue run one at a time, in the order they were submitted, on the
//!   queue's worker thread; the worker syncs the device before it marks a command completed,
//!   so a completed command's outputs are ready.
//! - A panic inside a command (a bad shape, a failed replay) makes that command
//!   `Failed(message)`; the next command runs as usual.
//! - The outcome of a finished command is kept until [`CommandQueue::wait`] takes it or
//!   [`CommandQueue::forget`] drops it. At most [`CommandQueue::retention`] finished outcomes
//!   are kept (1024 by default; [`CommandQueue::with_retention`]): past that, the oldest are
//!   dropped, so callers that never wait cannot make a queue grow without bound. Polling or
//!   waiting on a dropped (or never issued) id gives [`CommandError::Unknown`].
//! - Dropping a queue finishes its queued commands and joins its thread. The shared queues
//!   of [`CommandQueue::for_device`] live as long as the process.
//! - [`shutdown`](super::shutdown()) (and the process's exit) closes every queue: the commands
//!   queued before it run to the end, and a command submitted after it fails at once with a
//!   message saying so (its callback is still called, on the queue's thread).
//! - A command must not `wait` for a later command of its own queue (that command cannot
//!   start before this one ends).
//!
//! ```
//! use std::sync::Arc;
//! use burn_tensor::Tensor;
//! use ex_cubecl::runtime::{CommandQueue, CommandStatus, Pipeline, Work, from_cube, to_cube};
//! use ex_cubecl::ExWgpu;
//!
//! let device = Default::default();
//! let queue = CommandQueue::<cubecl::wgpu::WgpuRuntime>::new(&device);
//!
//! // Any closure of backend ops.
//! let d = device.clone();
//! let id = queue.submit(Work::ops(move || {
//!     let x = Tensor::<ExWgpu, 1>::from_floats([1.0, 2.0, 3.0], &d);
//!     vec![to_cube(x.exp().sum())]
//! }));
//! let out = queue.wait(id).unwrap();
//! let sum = from_cube::<_, 1, burn_tensor::Float>(out[0].clone()).into_scalar();
//! assert!((sum - 30.192).abs() < 1e-3);
//!
//! // A pipeline replay, with a completion callback.
//! let x = Tensor::<ExWgpu, 1>::from_floats([1.0, 2.0], &device);
//! let double = Arc::new(Pipeline::capture(&device, &[to_cube(x.clone())], |i| {
//!     vec![to_cube(from_cube::<_, 1, burn_tensor::Float>(i[0].clone()) * 2.0)]
//! }).unwrap());
//! let (tx, rx) = std::sync::mpsc::channel();
//! let id = queue.submit_with_callback(Work::replay(&double, vec![to_cube(x)]), move |id, outcome| {
//!     tx.send((id, outcome.is_ok())).unwrap();
//! });
//! assert_eq!(rx.recv().unwrap(), (id, true));
//! assert_eq!(queue.poll(id), Ok(CommandStatus::Completed));
//!
//! // A failing command fails alone.
//! let bad = queue.submit(Work::replay(&double, vec![]));
//! assert!(queue.wait(bad).unwrap_err().to_string().contains("got 0 inputs"));
//! assert_eq!(queue.wait(id).unwrap().len(), 1);
//! ```
use std::any::{Any, TypeId};
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;

use cubecl::Runtime;
use cubecl::device::{Device, DeviceId};

use super::DeviceContext;
use super::pipeline::{Pipeline, panic_message};
use crate::tensor::CubeTensor;

/// The id of a submitted command, unique within its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CommandId(pub u64);

impl fmt::Display for CommandId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Where a command stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandStatus {
    /// Queued behind other commands.
    Pending,
    /// Running on the queue's thread.
    Running,
    /// Finished; its outputs are ready.
    Completed,
    /// Finished with an error.
    Failed(String),
}

/// Why a command gave no outputs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommandError {
    /// The command failed (it panicked, its replay was refused, or the device failed).
    Failed {
        /// The command.
        id: CommandId,
        /// What went wrong.
        reason: String,
    },
    /// No such command: never submitted to this queue, or its outcome was already taken by
    /// `wait`, forgotten, or dropped past the retention limit.
    Unknown(CommandId),
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Failed { id, reason } => write!(f, "ex_cubecl: command {id} failed: {reason}"),
            Self::Unknown(id) => write!(
                f,
                "ex_cubecl: command {id} is unknown: never submitted to this queue, or its outcome was already \
                 waited for, forgotten, or dropped past the queue's retention limit"
            ),
        }
    }
}

impl std::error::Error for CommandError {}

/// The outcome of a finished command: its outputs or its error.
pub type CommandOutcome<R> = Result<Vec<CubeTensor<R>>, CommandError>;

/// A command's completion callback: the command's id and outcome, on the queue's thread.
pub type Callback<R> = Box<dyn FnOnce(CommandId, &CommandOutcome<R>) + Send>;

/// What a command does.
pub enum Work<R: Runtime> {
    /// A pipeline replay on these inputs.
    Replay {
        /// The pipeline.
        pipeline: Arc<Pipeline<R>>,
        /// Its inputs.
        inputs: Vec<CubeTensor<R>>,
    },
    /// Any closure of backend ops, giving the command's outputs.
    Ops(Box<dyn FnOnce() -> Vec<CubeTensor<R>> + Send>),
}

impl<R: Runtime> Work<R> {
    /// A replay of `pipeline` on `inputs`.
    pub fn replay(pipeline: &Arc<Pipeline<R>>, inputs: Vec<CubeTensor<R>>) -> Self {
        Self::Replay { pipeline: pipeline.clone(), inputs }
    }

    /// A closure of backend ops.
    pub fn ops(f: impl FnOnce() -> Vec<CubeTensor<R>> + Send + 'static) -> Self {
        Self::Ops(Box::new(f))
    }

    fn run(self) -> Result<Vec<CubeTensor<R>>, String> {
        match self {
            Self::Replay { pipeline, inputs } => pipeline.run(&inputs).map_err(|e| e.to_string()),
            Self::Ops(f) => Ok(f()),
        }
    }
}

/// Finished outcomes kept by default.
pub const DEFAULT_RETENTION: usize = 1024;

/// A queue of commands for one device, run in order on the queue's own thread (see the
/// [module docs](self)).
pub struct CommandQueue<R: Runtime> {
    device: R::Device,
    shared: Arc<Shared<R>>,
    worker: Option<JoinHandle<()>>,
}

struct Shared<R: Runtime> {
    state: Mutex<State<R>>,
    finished: Condvar,
    /// The device, as the shutdown names the queue.
    device_name: String,
}

struct State<R: Runtime> {
    /// `None` once the queue is being dropped.
    sender: Option<Sender<Job<R>>>,
    /// Set by the runtime's shutdown: later commands fail without running.
    closed: bool,
    next_id: u64,
    entries: HashMap<u64, Entry<R>>,
    /// Finished commands whose outcome is kept, oldest first.
    done: VecDeque<u64>,
    retention: usize,
}

enum Entry<R: Runtime> {
    Pending,
    Running,
    Done(CommandOutcome<R>),
}

struct Job<R: Runtime> {
    id: CommandId,
    /// `None`: refused (submitted after the shutdown).
    work: Option<Work<R>>,
    callback: Option<Callback<R>>,
}

impl<R: Runtime> fmt::Debug for CommandQueue<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.lock();
        f.debug_struct("CommandQueue")
            .field("device", &self.device)
            .field("commands", &state.entries.len())
            .field("next_id", &state.next_id)
            .finish()
    }
}

impl<R: Runtime> Shared<R> {
    fn lock(&self) -> MutexGuard<'_, State<R>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<R: Runtime> CommandQueue<R> {
    /// A new, private queue for `device`, with its own worker thread.
    pub fn new(device: &R::Device) -> Self {
        Self::with_retention(device, DEFAULT_RETENTION)
    }

    /// [`CommandQueue::new`] keeping at most `retention` finished outcomes (at least 1).
    pub fn with_retention(device: &R::Device, retention: usize) -> Self {
        let (sender, receiver) = channel();
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                sender: Some(sender),
                closed: false,
                next_id: 0,
                entries: HashMap::new(),
                done: VecDeque::new(),
                retention: retention.max(1),
            }),
            finished: Condvar::new(),
            device_name: format!("{device:?}"),
        });
        let worker = {
            let (shared, device) = (shared.clone(), device.clone());
            std::thread::Builder::new()
                .name("ex_cubecl-commands".into())
                .spawn(move || work_loop(device, shared, receiver))
                .expect("ex_cubecl: command queue: cannot spawn the worker thread")
        };
        let drain: Arc<dyn super::shutdown::Drain> = shared.clone();
        super::shutdown::track_queue(Arc::downgrade(&drain));
        Self { device: device.clone(), shared, worker: Some(worker) }
    }

    /// The queue shared by every caller of this function for `device` (made on first use;
    /// it lives as long as the process).
    pub fn for_device(device: &R::Device) -> Arc<Self> {
        type Queues = Mutex<HashMap<(TypeId, DeviceId), Box<dyn Any + Send + Sync>>>;
        static QUEUES: OnceLock<Queues> = OnceLock::new();
        let mut queues = QUEUES.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let entry = queues
            .entry((TypeId::of::<R>(), device.to_id()))
            .or_insert_with(|| Box::new(Arc::new(Self::new(device))));
        entry.downcast_ref::<Arc<Self>>().expect("queue of this runtime").clone()
    }

    /// The device the queue runs on.
    pub fn device(&self) -> &R::Device {
        &self.device
    }

    /// Most finished outcomes kept at once.
    pub fn retention(&self) -> usize {
        self.shared.lock().retention
    }

    /// Queues `work`; gives its id at once.
    pub fn submit(&self, work: Work<R>) -> CommandId {
        self.enqueue(work, None)
    }

    /// Queues `work`; `callback` is called on the queue's thread with the id and the
    /// outcome once the command has finished (after its outcome can be polled and waited
    /// for). A panic in the callback is ignored.
    pub fn submit_with_callback(
        &self,
        work: Work<R>,
        callback: impl FnOnce(CommandId, &CommandOutcome<R>) + Send + 'static,
    ) -> CommandId {
        self.enqueue(work, Some(Box::new(callback)))
    }

    fn enqueue(&self, work: Work<R>, callback: Option<Callback<R>>) -> CommandId {
        let mut state = self.shared.lock();
        let id = CommandId(state.next_id);
        state.next_id += 1;
        state.entries.insert(id.0, Entry::Pending);
        let work = (!state.closed).then_some(work);
        // Sending under the lock keeps the run order equal to the id order.
        let sent = state.sender.as_ref().map(|s| s.send(Job { id, work, callback }));
        assert!(matches!(sent, Some(Ok(()))), "ex_cubecl: command queue: the worker thread is gone");
        id
    }

    /// Where command `id` stands.
    ///
    /// # Errors
    /// [`CommandError::Unknown`] for an id this queue doesn't hold (see [`CommandError`]).
    pub fn poll(&self, id: CommandId) -> Result<CommandStatus, CommandError> {
        match self.shared.lock().entries.get(&id.0) {
            None => Err(CommandError::Unknown(id)),
            Some(Entry::Pending) => Ok(CommandStatus::Pending),
            Some(Entry::Running) => Ok(CommandStatus::Running),
            Some(Entry::Done(Ok(_))) => Ok(CommandStatus::Completed),
            Some(Entry::Done(Err(CommandError::Failed { reason, .. }))) => Ok(CommandStatus::Failed(reason.clone())),
            Some(Entry::Done(Err(e))) => Ok(CommandStatus::Failed(e.to_string())),
        }
    }

    /// Blocks until command `id` has finished and takes its outcome (a second `wait` on the
    /// same id gives [`CommandError::Unknown`]).
    ///
    /// # Errors
    /// [`CommandError::Failed`] when the command failed, [`CommandError::Unknown`] for an id
    /// this queue doesn't hold.
    pub fn wait(&self, id: CommandId) -> CommandOutcome<R> {
        let mut state = self.shared.lock();
        loop {
            match state.entries.get(&id.0) {
                None => return Err(CommandError::Unknown(id)),
                Some(Entry::Done(_)) => {
                    state.done.retain(|&d| d != id.0);
                    match state.entries.remove(&id.0) {
                        Some(Entry::Done(outcome)) => return outcome,
                        _ => unreachable!("checked above"),
                    }
                }
                Some(_) => state = self.shared.finished.wait(state).unwrap_or_else(|e| e.into_inner()),
            }
        }
    }

    /// Drops the outcome of command `id` (at once if it has finished, else when it finishes;
    /// the command still runs and its callback is still called). Gives whether the queue
    /// held the id.
    pub fn forget(&self, id: CommandId) -> bool {
        let mut state = self.shared.lock();
        match state.entries.get(&id.0) {
            None => false,
            Some(Entry::Done(_)) => {
                state.entries.remove(&id.0);
                state.done.retain(|&d| d != id.0);
                true
            }
            Some(_) => {
                // Finished outcomes of forgotten commands are dropped by the worker.
                state.entries.remove(&id.0);
                true
            }
        }
    }

    /// Blocks until every command submitted so far has finished.
    pub fn finish(&self) {
        let mut state = self.shared.lock();
        let last = state.next_id;
        while state.entries.iter().any(|(&id, e)| id < last && !matches!(e, Entry::Done(_))) {
            state = self.shared.finished.wait(state).unwrap_or_else(|e| e.into_inner());
        }
    }
}

impl<R: Runtime> super::shutdown::Drain for Shared<R> {
    fn close(&self) -> u64 {
        let mut state = self.lock();
        state.closed = true;
        state.next_id
    }

    fn finish_before(&self, n: u64, deadline: std::time::Instant) -> bool {
        let mut state = self.lock();
        while state.entries.iter().any(|(&id, e)| id < n && !matches!(e, Entry::Done(_))) {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self.finished.wait_timeout(state, left).unwrap_or_else(|e| e.into_inner()).0;
        }
        true
    }

    fn name(&self) -> String {
        format!("the command queue of {}", self.device_name)
    }
}

impl<R: Runtime> Drop for CommandQueue<R> {
    fn drop(&mut self) {
        // Closing the channel lets the worker finish the queued commands and stop.
        self.shared.lock().sender = None;
        if let Some(worker) = self.worker.take() {
            // A queue dropped by its own worker (its last owner was a command or a callback)
            // cannot wait for itself: the worker ends after the commands already queued.
            if worker.thread().id() != std::thread::current().id() {
                let _ = worker.join();
            }
        }
    }
}

fn work_loop<R: Runtime>(device: R::Device, shared: Arc<Shared<R>>, receiver: Receiver<Job<R>>) {
    let client = DeviceContext::client::<R>(&device);
    while let Ok(Job { id, work, callback }) = receiver.recv() {
        {
            let mut state = shared.lock();
            if let Some(entry) = state.entries.get_mut(&id.0) {
                *entry = Entry::Running;
            }
        }
        // The command and the device sync that completes it; a panic in either fails the
        // command, never the worker.
        let result = catch_unwind(AssertUnwindSafe(|| {
            let outputs = work
                .ok_or_else(|| {
                    format!("ex_cubecl: command {id} was submitted after the runtime was shut down (ex_cubecl::runtime::shutdown)")
                })?
                .run()?;
            match super::wait::sync(&client) {
                Ok(()) => Ok(outputs),
                Err(e) => Err(format!("ex_cubecl: command {id}: syncing device {device:?}: {e:?}")),
            }
        }))
        .unwrap_or_else(|payload| Err(panic_message(payload.as_ref())));
        let outcome: CommandOutcome<R> = result.map_err(|reason| CommandError::Failed { id, reason });
        let for_callback = callback.as_ref().map(|_| outcome.clone());
        {
            let mut state = shared.lock();
            // A forgotten command has no entry any more: its outcome is dropped.
            if let Some(entry) = state.entries.get_mut(&id.0) {
                *entry = Entry::Done(outcome);
                state.done.push_back(id.0);
                while state.done.len() > state.retention {
                    if let Some(old) = state.done.pop_front() {
                        state.entries.remove(&old);
                    }
                }
            }
        }
        shared.finished.notify_all();
        if let (Some(callback), Some(outcome)) = (callback, for_callback) {
            let _ = catch_unwind(AssertUnwindSafe(|| callback(id, &outcome)));
        }
    }
}
