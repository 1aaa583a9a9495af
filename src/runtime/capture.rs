//! The capture state of the current thread: while a [`Pipeline`](super::Pipeline) captures
//! a closure, the launcher appends every launch to a recording here, and host reads are
//! refused.
use std::cell::RefCell;

use cubecl::{CubeCount, CubeDim};

/// A recorded kernel launch, replayable with the cube count and dimension it was launched
/// with. It owns everything it binds (tensor handles, scalars, the client).
pub(crate) type Replay = Box<dyn Fn(CubeCount, CubeDim) + Send>;

/// One launch of a recording.
pub(crate) struct RecordedLaunch {
    /// The operation's name, for errors and [`Pipeline::ops`](super::Pipeline::ops).
    pub op: String,
    /// The cube count it was launched with.
    pub count: CubeCount,
    /// The cube dimension it was launched with.
    pub dim: CubeDim,
    /// The launch itself.
    pub kernel: Replay,
}

/// What a capture recorded.
#[derive(Default)]
pub(crate) struct Recording {
    /// Every launch, in order.
    pub launches: Vec<RecordedLaunch>,
    /// The operation that tried to read data back to the host, if one did.
    pub host_read: Option<String>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Whether a capture is active on this thread.
pub(crate) fn is_capturing() -> bool {
    CAPTURE.with(|c| c.borrow().is_some())
}

/// Starts a capture on this thread; `false` when one is active already.
pub(crate) fn begin() -> bool {
    CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_some() {
            return false;
        }
        *c = Some(Recording::default());
        true
    })
}

/// Ends the capture of this thread and gives what it recorded.
pub(crate) fn end() -> Option<Recording> {
    CAPTURE.with(|c| c.borrow_mut().take())
}

/// Appends a launch to this thread's recording (nothing when no capture is active).
pub(crate) fn record(launch: RecordedLaunch) {
    CAPTURE.with(|c| {
        if let Some(recording) = c.borrow_mut().as_mut() {
            recording.launches.push(launch);
        }
    });
}

/// Panics when a capture is active on this thread: `op` would read data back to the host,
/// which a pipeline cannot replay (the values would be those of the capture, not of the
/// replay's inputs).
///
/// # Panics
/// During a capture, with a message that starts with `ex_cubecl: pipeline capture: <op>`.
pub fn check_host_read(op: &str) {
    let capturing = CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        match c.as_mut() {
            Some(recording) => {
                recording.host_read.get_or_insert_with(|| op.to_string());
                true
            }
            None => false,
        }
    });
    if capturing {
        panic!(
            "ex_cubecl: pipeline capture: {op} reads data back to the host, which a pipeline cannot replay; \
             return the tensor as an output of the captured closure instead"
        );
    }
}
