//! A large stack for the work of every NIF call.
//!
//! NIFs run on the BEAM's scheduler threads, whose stacks are small (a dirty CPU scheduler's
//! is 320 KB by default), while the backend's host code can go deep: the Nx entries compose
//! many ops, cubecl's kernel compiler recurses, and debug builds have large frames. A stack
//! overflow there would kill the VM (an Nx FFT did, in a debug build). So each scheduler
//! thread gets one 64 MiB stack, mapped once with a guard page below it and reused by every
//! call on that thread (only the pages a call touches are ever committed); the NIF's work
//! runs on it. On Windows, where psm doesn't switch stacks, calls run on the scheduler's own
//! stack: raise the dirty schedulers' stacks there instead (`erl +sssdcpu 16384 +sssdio 16384`,
//! in kilowords).
#[cfg(unix)]
use std::cell::Cell;

#[cfg(unix)]
const SIZE: usize = 64 << 20;

#[cfg(unix)]
thread_local! {
    /// This thread's stack: the base of the usable area (above the guard page), or null.
    static BASE: Cell<*mut u8> = const { Cell::new(std::ptr::null_mut()) };
    /// Whether this thread is running on it now (a nested call stays where it is).
    static ACTIVE: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on this thread's large stack. `f` must not unwind: callers catch panics inside.
#[cfg(unix)]
pub fn run<T>(f: impl FnOnce() -> T) -> T {
    if ACTIVE.get() || !enabled() {
        return f();
    }
    let Some(base) = base() else { return f() };
    ACTIVE.set(true);
    // SAFETY: `base..base + SIZE` is mapped read-write for this thread alone and nothing else
    // runs on it (ACTIVE), it is page-aligned (psm's requirement), and `f` doesn't unwind.
    let out = unsafe { psm::on_stack(base, SIZE, f) };
    ACTIVE.set(false);
    out
}

/// Runs `f` (on the scheduler's own stack: no stack switching on this target).
#[cfg(not(unix))]
pub fn run<T>(f: impl FnOnce() -> T) -> T {
    f()
}

/// Whether calls switch stacks (`EX_CUBECL_NIF_STACK=0` turns it off, for diagnosis).
#[cfg(unix)]
fn enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("EX_CUBECL_NIF_STACK").map_or(true, |v| v != "0"))
}

/// The base of this thread's stack, mapped on first use; `None` where mapping fails (the
/// call then runs on the scheduler's own stack).
#[cfg(unix)]
fn base() -> Option<*mut u8> {
    let base = BASE.get();
    if !base.is_null() {
        return Some(base);
    }
    // 4 KiB on x86-64 Linux, 16 KiB on Apple silicon: the guard and the base follow it.
    // SAFETY: sysconf reads a constant of the system.
    let page = match unsafe { libc::sysconf(libc::_SC_PAGESIZE) } {
        n if n > 0 => n as usize,
        _ => 4096,
    };
    // SAFETY: an anonymous private mapping; the lowest page becomes the guard.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            SIZE + page,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return None;
        }
        libc::mprotect(p, page, libc::PROT_NONE);
        let base = (p as *mut u8).add(page);
        BASE.set(base);
        Some(base)
    }
}
