//! The identity of a device buffer, for pipelines: whether a tensor's handle is one of the
//! pipeline's state buffers, or shares memory with one, and which buffers a replay binds
//! to the caller's tensors ([`super::bindings`]).
//!
//! cubecl 0.10 keeps the id of a handle's memory (`ManagedMemoryId`) crate-private; its
//! `Debug` output prints it. [`memory_id`] reads it there, in one place, and its tests fail
//! if a cubecl upgrade changes that output.
use cubecl::server::Handle;

/// A buffer: cubecl's id of the handle's memory and the handle's byte offsets into it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BufferId {
    memory: usize,
    start: Option<u64>,
    end: Option<u64>,
}

impl BufferId {
    /// The buffer `handle` refers to.
    pub(crate) fn of(handle: &Handle) -> Self {
        Self { memory: memory_id(handle), start: handle.offset_start, end: handle.offset_end }
    }

    /// Whether the two share memory (the same allocation, whatever their offsets).
    pub(crate) fn same_memory(&self, other: &Self) -> bool {
        self.memory == other.memory
    }
}

/// A buffer by the address of its memory handle's shared parts (the two reference counts
/// that clones of a handle share): the same for every clone, different for two allocations
/// as long as a handle of each lives (addresses are reused once both are gone). Cheaper
/// than [`BufferId::of`] by far: a pipeline replay looks every kernel argument up by it
/// (see [`super::bindings`]), and holds a handle of each buffer it looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct MemoryKey {
    address: [usize; 2],
    start: Option<u64>,
    end: Option<u64>,
}

impl MemoryKey {
    /// The key of the buffer `handle` refers to.
    ///
    /// # Panics
    /// When cubecl's memory handle is no longer two pointers (a cubecl upgrade changed it).
    pub(crate) fn of(handle: &Handle) -> Self {
        fn words<T>(memory: &T) -> [usize; 2] {
            assert!(
                size_of::<T>() == size_of::<[usize; 2]>(),
                "ex_cubecl: buffer identity: cubecl's memory handle is no longer two reference counts"
            );
            // SAFETY: the sizes are equal (checked above); the handle is two `Arc`s, whose
            // bytes are all initialised pointers; the copy is read as plain words, never used
            // as the `Arc`s (nothing is cloned or dropped).
            unsafe { std::mem::transmute_copy(memory) }
        }
        Self { address: words(&handle.memory), start: handle.offset_start, end: handle.offset_end }
    }

    /// Whether the two share memory (the same allocation, whatever their offsets).
    pub(crate) fn same_memory(&self, other: &Self) -> bool {
        self.address == other.address
    }
}

/// The id of `handle`'s memory: clones of a handle share it, two allocations never do.
/// It formats the handle, so it is for captures and state checks, not for every launch
/// (replays look their bindings up by [`MemoryKey`]).
///
/// # Panics
/// When cubecl's `Debug` output of the memory handle holds no `ManagedMemoryId { value: N }`
/// (a cubecl upgrade changed it).
pub(crate) fn memory_id(handle: &Handle) -> usize {
    const KEY: &str = "ManagedMemoryId { value: ";
    let text = format!("{:?}", handle.memory);
    text.find(KEY)
        .and_then(|at| {
            let digits: String = text[at + KEY.len()..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
        .unwrap_or_else(|| {
            panic!("ex_cubecl: buffer identity: cubecl's memory handle prints no `{KEY}N }}` any more: {text}")
        })
}

#[cfg(test)]
mod tests {
    use cubecl::stream_id::StreamId;

    use super::*;

    #[test]
    fn clones_share_an_id_and_allocations_differ() {
        let a = Handle::new(StreamId::current(), 64);
        let b = Handle::new(StreamId::current(), 64);
        assert_eq!(memory_id(&a), memory_id(&a.clone()));
        assert_ne!(memory_id(&a), memory_id(&b));
        assert_eq!(BufferId::of(&a), BufferId::of(&a.clone()));
        assert_ne!(BufferId::of(&a), BufferId::of(&b));
    }

    #[test]
    fn keys_follow_ids() {
        let a = Handle::new(StreamId::current(), 64);
        let b = Handle::new(StreamId::current(), 64);
        assert_eq!(MemoryKey::of(&a), MemoryKey::of(&a.clone()));
        assert_ne!(MemoryKey::of(&a), MemoryKey::of(&b));
        let tail = a.clone().offset_start(16);
        assert_ne!(MemoryKey::of(&a), MemoryKey::of(&tail));
        assert!(MemoryKey::of(&a).same_memory(&MemoryKey::of(&tail)));
        assert!(!MemoryKey::of(&a).same_memory(&MemoryKey::of(&b)));
    }

    #[test]
    fn offsets_make_another_buffer_of_the_same_memory() {
        let a = Handle::new(StreamId::current(), 64);
        let tail = a.clone().offset_start(16);
        assert_ne!(BufferId::of(&a), BufferId::of(&tail));
        assert!(BufferId::of(&a).same_memory(&BufferId::of(&tail)));
        assert!(!BufferId::of(&a).same_memory(&BufferId::of(&Handle::new(StreamId::current(), 64))));
    }
}
