//! The capture state of the current thread: while a [`Pipeline`](super::Pipeline) captures
//! a closure, the launcher appends every launch to a recording here, host reads are refused,
//! and the fused optimizers learn which buffers are the pipeline's state, donated to the
//! step, which they may update in place.
use std::cell::RefCell;
use std::collections::BTreeSet;

use cubecl::{CubeCount, CubeDim};

use super::buffer_id::BufferId;

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
    /// The pipeline's state buffers, by index: each buffer and its number of elements.
    pub state: Vec<(BufferId, usize)>,
    /// The indices of the state buffers that an op updated in place.
    pub updated: BTreeSet<usize>,
    /// The buffers allocated uninitialised during the capture: the buffers that the
    /// recorded launches write (constants are uploaded, not allocated so).
    pub scratch: Vec<BufferId>,
}

thread_local! {
    static CAPTURE: RefCell<Option<Recording>> = const { RefCell::new(None) };
}

/// Whether a capture is active on this thread.
pub(crate) fn is_capturing() -> bool {
    CAPTURE.with(|c| c.borrow().is_some())
}

/// Starts a capture on this thread, whose state buffers (each with its number of elements)
/// are `state`; `false` when a capture is active already.
pub(crate) fn begin(state: Vec<(BufferId, usize)>) -> bool {
    CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_some() {
            return false;
        }
        *c = Some(Recording { state, ..Recording::default() });
        true
    })
}

/// Whether an op may update the buffer `id` in place, seen whole (`elements` elements,
/// contiguous from its start): during a capture, when it is one of the capture's state
/// buffers. The capture notes the update for its checks at the end.
pub(crate) fn update_in_place(id: BufferId, elements: usize) -> bool {
    CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        let Some(recording) = c.as_mut() else { return false };
        let index = recording.state.iter().position(|&state| state == (id, elements));
        index.map(|index| recording.updated.insert(index)).is_some()
    })
}

/// Whether `id` (of `elements` elements) is one of the state buffers of a capture active on
/// this thread. Unlike [`update_in_place`] nothing is noted: a fused block that writes a new
/// value over a state it read for the last time (see `crate::fusion::in_place`) leaves no old
/// value that a result could stand for.
#[cfg(feature = "fusion")]
pub(crate) fn is_state_buffer(id: BufferId, elements: usize) -> bool {
    CAPTURE.with(|c| c.borrow().as_ref().is_some_and(|recording| recording.state.contains(&(id, elements))))
}

/// Ends the capture of this thread and gives what it recorded.
pub(crate) fn end() -> Option<Recording> {
    CAPTURE.with(|c| c.borrow_mut().take())
}

/// Notes a buffer allocated uninitialised in this thread's recording, if a capture is
/// active.
pub(crate) fn note_scratch(handle: &cubecl::server::Handle) {
    CAPTURE.with(|c| {
        if let Some(recording) = c.borrow_mut().as_mut() {
            recording.scratch.push(BufferId::of(handle));
        }
    });
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
    if let Some(message) = refused_host_read(op) {
        panic!("{message}");
    }
}

/// During a capture on this thread, notes that `op` would read data back to the host and
/// gives the refusal's message (it starts with `ex_cubecl: pipeline capture: <op>`); `None`
/// otherwise. For reads that fail with an error rather than a panic (on the fusion engine's
/// thread a panic would count as a device failure).
pub(crate) fn refused_host_read(op: &str) -> Option<String> {
    let capturing = CAPTURE.with(|c| {
        let mut c = c.borrow_mut();
        let recording = c.as_mut()?;
        recording.host_read.get_or_insert_with(|| op.to_string());
        Some(())
    });
    capturing.map(|()| {
        format!(
            "ex_cubecl: pipeline capture: {op} reads data back to the host, which a pipeline cannot replay; \
             return the tensor as an output of the captured closure instead"
        )
    })
}
