//! Whether NCCL can be used in this process: the library is looked up once, the way cudarc
//! loads it, and a missing one is explained (cudarc opens `libnccl.so`, while NCCL's packages
//! install `libnccl.so.2` and leave the unversioned link to their `-dev` package).

/// The environment variable that turns NCCL off (`EX_CUBECL_NCCL=0`): all-reduces then take
/// the host-staged path and copies between devices go through the host.
pub const NCCL_ENV: &str = "EX_CUBECL_NCCL";

/// `Ok(())` when NCCL can be used here, else why not (a sentence naming what is missing).
pub fn nccl_status() -> Result<(), String> {
    use std::sync::OnceLock;
    static STATUS: OnceLock<Result<(), String>> = OnceLock::new();
    if std::env::var(NCCL_ENV).is_ok_and(|v| v == "0" || v.eq_ignore_ascii_case("false")) {
        return Err(format!("NCCL is turned off ({NCCL_ENV}=0)"));
    }
    STATUS.get_or_init(probe).clone()
}

#[cfg(feature = "cuda")]
fn probe() -> Result<(), String> {
    // SAFETY: only opens the library (dlopen) to see whether it loads.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    // SAFETY: as above; the handle is dropped at once.
    let versioned = unsafe { libloading::Library::new("libnccl.so.2") }.is_ok();
    Err(match versioned {
        true => "NCCL is installed as libnccl.so.2 but cudarc loads libnccl.so: add the link \
                 (ln -s <dir>/libnccl.so.2 <dir>/libnccl.so, <dir> on LD_LIBRARY_PATH or in \
                 ldconfig's path) or install NCCL's -dev package"
            .to_string(),
        false => "NCCL (libnccl.so) was not found on the library path: install NCCL \
                  (libnccl2 and libnccl-dev) or add its folder to LD_LIBRARY_PATH"
            .to_string(),
    })
}

#[cfg(not(feature = "cuda"))]
fn probe() -> Result<(), String> {
    Err("NCCL needs the CUDA runtime; this build has no `cuda` feature".to_string())
}
