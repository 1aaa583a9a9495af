//! Runs of programs with runtime calls. Such a run needs Elixir in its middle, and a NIF
//! can't call Elixir: the program runs on a thread of its own, which hands each call over a
//! channel and waits. `program_run/2` returns `{:call, id, tensors, events, session}` where
//! the run waits; Elixir computes the call's results and `program_resume/2` sends them and
//! returns the next step; `program_abort/1` (or the session's garbage collection) ends a run
//! whose call failed. The thread works on the NIF's stream, so its launches are ordered
//! with every other NIF call's.
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::thread::JoinHandle;

use rustler::{Encoder, Env, Resource, ResourceArc, Term};

use super::exec::{self, Caller, Events};
use super::ProgramRef;
use crate::device::Dev;
use crate::error::{NifError, NifResult, on_nif_stream};
use crate::tensor::{AnyPrim, wrap};

const OP: &str = "program_run";

mod atoms {
    rustler::atoms! { done, call }
}

/// Where a run stands: it waits on runtime call `id` of these arguments (after these hook
/// events), or it is done.
pub enum Step {
    Call(usize, Vec<AnyPrim>, Events<AnyPrim>, Option<SessionRef>),
    Done(NifResult<(Vec<AnyPrim>, Events<AnyPrim>)>),
}

fn encode_events<'a>(env: Env<'a>, events: Events<AnyPrim>) -> Term<'a> {
    events
        .into_iter()
        .map(|(id, ts)| (id, ts.into_iter().map(wrap).collect::<Vec<_>>()))
        .collect::<Vec<_>>()
        .encode(env)
}

impl Step {
    /// `{:done, outputs, events}` or `{:call, id, tensors, events, session}`; a failed run
    /// is the NIF's error.
    pub fn encode(self, env: Env<'_>) -> NifResult<Term<'_>> {
        match self {
            Step::Done(Ok((outputs, events))) => {
                let outputs: Vec<_> = outputs.into_iter().map(wrap).collect();
                Ok((atoms::done(), outputs, encode_events(env, events)).encode(env))
            }
            Step::Done(Err(e)) => Err(e),
            Step::Call(id, args, events, session) => {
                let args: Vec<_> = args.into_iter().map(wrap).collect();
                Ok((atoms::call(), id, args, encode_events(env, events), session).encode(env))
            }
        }
    }
}

/// A run in progress on its thread.
struct Session {
    results: Sender<NifResult<Vec<AnyPrim>>>,
    steps: Receiver<Step>,
    thread: Option<JoinHandle<()>>,
}

/// The NIF resource of a run that waits on a runtime call.
pub struct SessionRes {
    device: Dev,
    session: Mutex<Option<Session>>,
}

#[rustler::resource_impl]
impl Resource for SessionRes {}

pub type SessionRef = ResourceArc<SessionRes>;

/// The worker's side of the calls: each call goes out as a step, its results come back.
struct ChannelCaller {
    steps: Sender<Step>,
    results: Receiver<NifResult<Vec<AnyPrim>>>,
}

impl Caller for ChannelCaller {
    fn call(&mut self, id: usize, args: Vec<AnyPrim>, events: Events<AnyPrim>) -> NifResult<Vec<AnyPrim>> {
        let abandoned = || NifError::new("runtime_call", format!("the run was abandoned while Elixir computed runtime call {id}"), "program_abort/1, or the caller went away");
        self.steps.send(Step::Call(id, args, events, None)).map_err(|_| abandoned())?;
        self.results.recv().map_err(|_| abandoned())?
    }
}

/// Starts a run of `program` on its own thread; gives its first step.
pub fn start(program: ProgramRef, inputs: Vec<AnyPrim>) -> NifResult<Step> {
    let (step_tx, step_rx) = channel();
    let (result_tx, result_rx) = channel();
    let device = program.device.clone();
    let worker = move || {
        let mut caller = ChannelCaller { steps: step_tx.clone(), results: result_rx };
        let outcome = on_nif_stream(|| {
            catch_unwind(AssertUnwindSafe(|| {
                let mut loaded = program.loaded.lock().unwrap_or_else(|e| e.into_inner());
                let (p, state) = &mut *loaded;
                super::check_inputs(OP, p, &inputs)?;
                exec::run(p, state, inputs, &mut caller)
            }))
        });
        let outcome = outcome.unwrap_or_else(|payload| {
            let message = payload.downcast_ref::<String>().cloned().or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()));
            Err(NifError::new(OP, message.unwrap_or_else(|| "a panic without a message".into()), "caught panic"))
        });
        let _ = step_tx.send(Step::Done(outcome));
    };
    let thread = std::thread::Builder::new()
        .name("ex_cubecl-program".into())
        .stack_size(64 << 20)
        .spawn(worker)
        .map_err(|e| NifError::new(OP, format!("could not start the run's thread: {e}"), ""))?;
    let session = SessionRef::new(SessionRes { device, session: Mutex::new(Some(Session { results: result_tx, steps: step_rx, thread: Some(thread) })) });
    next(&session)
}

/// The run's next step; a finished run ends the session.
fn next(res: &SessionRef) -> NifResult<Step> {
    let mut guard = res.session.lock().unwrap_or_else(|e| e.into_inner());
    let step = match guard.as_ref() {
        None => return Err(NifError::new(OP, "the run has ended", "")),
        Some(session) => session.steps.recv().unwrap_or_else(|_| Step::Done(Err(NifError::new(OP, "internal: the run's thread stopped without a result", "")))),
    };
    Ok(match step {
        Step::Call(id, args, events, None) => Step::Call(id, args, events, Some(res.clone())),
        done => {
            if let Some(mut session) = guard.take() {
                session.join();
            }
            done
        }
    })
}

/// Sends a call's results to the run of `res`; gives the next step.
pub fn resume(res: &SessionRef, results: Vec<AnyPrim>) -> NifResult<Step> {
    {
        let guard = res.session.lock().unwrap_or_else(|e| e.into_inner());
        let session = guard.as_ref().ok_or_else(|| NifError::new("program_resume", "the run has ended", "it finished, failed or was aborted"))?;
        session.results.send(Ok(results)).map_err(|_| NifError::new("program_resume", "the run has ended", "its thread stopped"))?;
    }
    next(res)
}

impl SessionRes {
    /// The program's device, where the call's results go.
    pub fn device(&self) -> Dev {
        self.device.clone()
    }

    /// Ends the run: its pending call fails and its thread stops. `false` where it had ended.
    pub fn abort(&self) -> bool {
        let taken = self.session.lock().unwrap_or_else(|e| e.into_inner()).take();
        taken.map(|mut s| s.join()).is_some()
    }
}

impl Session {
    /// Closes the results channel (a pending call then fails) and waits for the thread.
    fn join(&mut self) {
        let (closed, _) = channel();
        drop(std::mem::replace(&mut self.results, closed));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.join();
    }
}
