//! Errors of the NIF: every NIF returns `{:ok, value}` or `{:error, %{op, reason, details}}`,
//! and a panic under a NIF (a Burn op refusing its input, a device failure) becomes such an
//! error instead of taking the VM down.
use std::panic::{AssertUnwindSafe, catch_unwind};

use ex_cubecl::cubecl::stream_id::StreamId;
use rustler::{Encoder, Env, Term};

/// An error of one operation: `op` names it, `reason` says what went wrong, `details` gives
/// the shapes, dtypes or values involved.
#[derive(Clone, Debug)]
pub struct NifError {
    pub op: String,
    pub reason: String,
    pub details: String,
}

impl NifError {
    pub fn new(op: &str, reason: impl Into<String>, details: impl Into<String>) -> Self {
        Self {
            op: op.to_string(),
            reason: reason.into(),
            details: details.into(),
        }
    }
}

impl std::fmt::Display for NifError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} ({})", self.op, self.reason, self.details)
    }
}

mod atoms {
    rustler::atoms! { op, reason, details }
}

impl Encoder for NifError {
    fn encode<'a>(&self, env: Env<'a>) -> Term<'a> {
        Term::map_from_pairs(
            env,
            &[
                (atoms::op().encode(env), self.op.encode(env)),
                (atoms::reason().encode(env), self.reason.encode(env)),
                (atoms::details().encode(env), self.details.encode(env)),
            ],
        )
        .expect("a map of three distinct atoms")
    }
}

/// The result of every NIF.
pub type NifResult<T> = Result<T, NifError>;

/// The one cubecl stream of the NIF. cubecl gives each OS thread a stream of its own, and
/// the BEAM runs one process's NIF calls on whichever dirty scheduler thread is free, so a
/// tensor made on one thread is used on another; across streams, cubecl 0.10 can hand a
/// buffer to one stream while another's work on it is still queued (seen as results of other
/// processes' tensors under concurrent load). On one stream every op is ordered after the ops
/// that made its inputs.
const NIF_STREAM: StreamId = StreamId { value: u64::MAX };

/// Runs `f` on the NIF's stream.
pub fn on_nif_stream<T>(f: impl FnOnce() -> T) -> T {
    NIF_STREAM.executes(f)
}

/// Runs `f` on the NIF's stream, turning a panic into an error of `op` whose reason is the
/// panic's message.
pub fn guard<T>(op: &str, f: impl FnOnce() -> NifResult<T>) -> NifResult<T> {
    quiet_panics();
    match crate::stack::run(|| catch_unwind(AssertUnwindSafe(|| NIF_STREAM.executes(f)))) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "a panic without a message".into());
            Err(NifError::new(op, message, "caught panic"))
        }
    }
}

/// Panics under a NIF are errors for the caller, not crashes: the default hook's report on
/// stderr is kept only where `EX_CUBECL_PANIC_TRACE` is set (the backend's own hook, which
/// records device-thread failures, still runs: it was installed first and is chained).
fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var_os("EX_CUBECL_PANIC_TRACE").is_some() {
            return;
        }
        // Install the backend's device-failure hook first so that it stays in the chain.
        ex_cubecl::runtime::install_panic_hook();
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let device_thread = std::thread::current()
                .name()
                .is_some_and(|n| n.starts_with("DS"));
            if device_thread {
                previous(info);
            }
        }));
    });
}
