//! A replay's bindings: while a [`Pipeline`](super::Pipeline) replays, the buffers it captured
//! its inputs and outputs in stand for other buffers: an input for the caller's tensor (no
//! copy in), an output for a fresh buffer the caller gets (no copy out). Every kernel
//! argument is made from a handle through [`bound`], which swaps a captured buffer for the
//! one it stands for during the replay on this thread.
use std::cell::RefCell;

use cubecl::server::Handle;

use super::buffer_id::MemoryKey;

thread_local! {
    /// The bindings of the replay running on this thread: (a captured buffer, the buffer
    /// that stands for it). Empty outside replays.
    static BINDINGS: RefCell<Vec<(MemoryKey, Handle)>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` with `bindings` in force on this thread (each: a buffer and the handle that
/// stands for it), then removes them, also when `f` panics.
pub(crate) fn with_bindings<T>(bindings: Vec<(MemoryKey, Handle)>, f: impl FnOnce() -> T) -> T {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            BINDINGS.with(|b| b.borrow_mut().clear());
        }
    }
    BINDINGS.with(|b| *b.borrow_mut() = bindings);
    let _clear = Clear;
    f()
}

/// The handle a kernel binds for `handle`: the buffer that stands for it during a replay on
/// this thread, or `handle` itself.
pub(crate) fn bound(handle: &Handle) -> Handle {
    BINDINGS.with(|b| {
        let b = b.borrow();
        if b.is_empty() {
            return handle.clone();
        }
        let id = MemoryKey::of(handle);
        match b.iter().find(|(captured, _)| captured.same_memory(&id)) {
            Some((captured, to)) => {
                // Every handle of a buffer is the one its allocation gave (views keep their
                // offsets in the layout), so a captured buffer is always bound whole.
                assert!(*captured == id, "ex_cubecl: pipeline replay: a kernel binds a captured buffer by other byte offsets");
                to.clone()
            }
            None => handle.clone(),
        }
    })
}
