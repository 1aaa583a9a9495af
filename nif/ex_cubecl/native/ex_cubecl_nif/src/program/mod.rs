//! Programs: a defn graph as `ExBurn.Defn.Compiler` lowers it, run in one NIF call.
//!
//! A program is a list of blocks; block 0 is the main one. A block takes parameters, runs
//! instructions over slots (its parameters, earlier instructions' outputs, the program's
//! constants) and gives the values at its output slots. The instructions:
//! - `{:op, kernel, inputs, opts, label}`: an entry of the op table (the very entries that
//!   `ExBurn.Backend`'s callbacks call, with the same options); `label` names the Expr op
//!   in errors;
//! - `{:cond, inputs, [{pred_block, body_block}], last_block}`: the body of the first clause
//!   whose predicate block gives a non-zero scalar runs, else the last block; every block of
//!   a cond takes `inputs` as its parameters;
//! - `{:while, initial, pred_block, body_block}`: the loop state starts as `initial`, and the
//!   body block replaces it for as long as the predicate block gives a non-zero scalar;
//! - `{:repeat, inputs, times, body_block}`: the body block runs `times` times over the loop
//!   state, which starts as `inputs`; where `times` is `nil`, the first input is a scalar
//!   integer on the device giving the count (read once; negative counts as 0) and the state
//!   is the inputs after it. The compiler makes it of a `while` whose predicate compares a
//!   counter stepping by a constant with a bound the body doesn't change: one read instead
//!   of one per turn;
//! - `{:hook, id, inputs}`: hands the values at `inputs` to Elixir with the results, as
//!   event `id` of the compiler's hook table (a hook in a loop gives one event per turn);
//! - `{:call, id, inputs, outputs}`: a runtime call: Elixir computes the outputs (each
//!   `{shape, dtype}` as given) from the values at `inputs`, with function `id` of the
//!   compiler's table. A program with calls runs on a thread of its own ([`session`]).
//!
//! Blocks only name blocks after them, so a program cannot recurse.
//!
//! Execution ([`exec`]): each block is cut into units: maximal runs of ops and hooks
//! (segments) and the control-flow instructions between them ([`plan`]). A segment is
//! captured as an ExCubecl `Pipeline` on its first run and replayed on every later one: a
//! call of a compiled straight-line function is one replay, with none of the ops' host-side
//! work. Control flow runs here, in Rust: each predicate is read from the device, and the
//! chosen blocks run, without going back to Elixir. A segment whose capture the pipeline
//! refuses (an op that reads the host) runs its ops directly every time.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, TryLockError};
use std::time::Instant;

use rustler::{Binary, Encoder, Env, Resource, ResourceArc, Term};

use crate::device::Dev;
use crate::error::{NifError, NifResult, guard};
use crate::opts::Opts;
use crate::tensor::{AnyPrim, TensorRef};

mod atoms {
    rustler::atoms! { dirty }
}

mod decode;
mod exec;
mod plan;
mod session;
mod submit;

/// Where an instruction's input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Slot {
    /// The block's parameter `i`.
    Param(usize),
    /// Output `k` of instruction `n` of the block.
    Value(usize, usize),
    /// The program's constant `c`.
    Const(usize),
}

/// One instruction of a block.
#[derive(Clone, Debug)]
pub enum Instr {
    Op {
        kernel: String,
        inputs: Vec<Slot>,
        opts: Opts,
        label: String,
    },
    Cond {
        inputs: Vec<Slot>,
        clauses: Vec<(usize, usize)>,
        last: usize,
    },
    While {
        initial: Vec<Slot>,
        pred: usize,
        body: usize,
    },
    Repeat {
        inputs: Vec<Slot>,
        times: Option<usize>,
        body: usize,
    },
    Hook {
        id: usize,
        inputs: Vec<Slot>,
    },
    Call {
        id: usize,
        inputs: Vec<Slot>,
        outputs: Vec<Param>,
    },
}

impl Instr {
    /// The slots the instruction reads.
    pub fn inputs(&self) -> &[Slot] {
        match self {
            Instr::Op { inputs, .. } | Instr::Cond { inputs, .. } | Instr::Hook { inputs, .. } | Instr::Call { inputs, .. } | Instr::Repeat { inputs, .. } => inputs,
            Instr::While { initial, .. } => initial,
        }
    }
}

/// A block: its parameter count, instructions and output slots.
#[derive(Clone, Debug)]
pub struct Block {
    pub params: usize,
    pub instrs: Vec<Instr>,
    pub outputs: Vec<Slot>,
}

/// The expected shape and dtype of one input of the program.
#[derive(Clone, Debug)]
pub struct Param {
    pub shape: Vec<usize>,
    pub dtype: burn_backend::DType,
}

/// A decoded program: what runs, on which device.
pub struct Program {
    pub blocks: Vec<Block>,
    /// Whether any block holds a runtime call.
    pub calls: bool,
    pub units: Vec<Vec<plan::Unit>>,
    pub consts: Vec<AnyPrim>,
    pub params: Vec<Param>,
    pub device: Dev,
}

/// The NIF resource of a program: the program and its captured segments. Runs of one
/// program are serialised.
pub struct ProgramRes {
    device: Dev,
    calls: bool,
    /// The host time of the last run in microseconds (`u64::MAX` before the first): what
    /// `program_run_normal/3` goes by.
    last_us: AtomicU64,
    loaded: Mutex<(Program, exec::RunState)>,
}

/// Host inputs larger than this are uploaded on a dirty scheduler.
const NORMAL_UPLOAD_BYTES: usize = 64 << 10;

#[rustler::resource_impl]
impl Resource for ProgramRes {}

pub type ProgramRef = ResourceArc<ProgramRes>;

/// A program from the compiler's terms: its blocks, the device tensors it holds as
/// constants, the shape and dtype of each input, and its device.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_new(blocks: Vec<Term>, consts: Vec<TensorRef>, params: Vec<(Vec<usize>, String)>, device: String) -> NifResult<ProgramRef> {
    let op = "program_new";
    let blocks = decode::blocks(op, blocks)?;
    guard(op, || {
        let device = Dev::parse(op, &device)?;
        let consts = consts.iter().map(|t| t.get(op)).collect::<NifResult<Vec<_>>>()?;
        if let Some(c) = consts.iter().find(|c| c.device() != device) {
            return Err(NifError::new(op, "a constant is on another device than the program", format!("{} on {}, program on {}", c.describe(), c.device().spec(), device.spec())));
        }
        let params = params
            .into_iter()
            .map(|(shape, dtype)| Ok(Param { shape, dtype: crate::dtype::parse(op, &dtype)? }))
            .collect::<NifResult<Vec<_>>>()?;
        decode::check(op, &blocks, consts.len(), params.len())?;
        let units = blocks.iter().map(plan::units).collect();
        let calls = blocks.iter().flat_map(|b| &b.instrs).any(|i| matches!(i, Instr::Call { .. }));
        let program = Program { blocks, units, consts, params, device, calls };
        let state = exec::RunState::new(&program)?;
        Ok(ResourceArc::new(ProgramRes { device: program.device.clone(), calls: program.calls, last_us: AtomicU64::new(u64::MAX), loaded: Mutex::new((program, state)) }))
    })
}

/// Runs the program on `inputs` (tensors, or `{binary, shape, dtype}` to upload). Gives
/// `{:done, outputs, events}` (hook events `[{id, tensors}]` in the order they happened), or,
/// for a program with runtime calls, `{:call, id, tensors, events, session}` where it needs
/// Elixir: `program_resume/2` continues the run with the call's results.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_run<'a>(env: Env<'a>, program: ProgramRef, inputs: Vec<Term<'a>>) -> NifResult<Term<'a>> {
    let op = "program_run";
    let inputs = inputs.into_iter().map(|t| Input::decode(op, t)).collect::<NifResult<Vec<_>>>()?;
    guard(op, || {
        let prims = inputs.into_iter().map(|i| i.prim(op, &program.device)).collect::<NifResult<Vec<_>>>()?;
        if program.calls {
            return session::start(program.clone(), prims)?.encode(env);
        }
        let mut loaded = program.loaded.lock().unwrap_or_else(|e| e.into_inner());
        run_timed(env, op, &program, &mut loaded, prims)
    })
}

/// As `program_run/2`, on the calling (normal) scheduler, for a program whose last run took
/// less than `max_us` microseconds of host time: a short run costs no dirty-scheduler
/// round trip. Gives `:dirty`, having done nothing, where the run belongs on a dirty
/// scheduler (no earlier run, a slower one, runtime calls, a large host input, or another
/// run of the program in progress); the caller then calls `program_run/2`.
#[rustler::nif]
fn program_run_normal<'a>(env: Env<'a>, program: ProgramRef, inputs: Vec<Term<'a>>, max_us: u64) -> NifResult<Term<'a>> {
    let op = "program_run";
    let dirty = || Ok(atoms::dirty().encode(env));
    if program.calls || program.last_us.load(Ordering::Relaxed) >= max_us {
        return dirty();
    }
    let inputs = inputs.into_iter().map(|t| Input::decode(op, t)).collect::<NifResult<Vec<_>>>()?;
    if inputs.iter().any(|i| matches!(i, Input::Host(b, _, _) if b.len() > NORMAL_UPLOAD_BYTES)) {
        return dirty();
    }
    let mut loaded = match program.loaded.try_lock() {
        Ok(guard) => guard,
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return dirty(),
    };
    guard(op, || {
        let prims = inputs.into_iter().map(|i| i.prim(op, &program.device)).collect::<NifResult<Vec<_>>>()?;
        run_timed(env, op, &program, &mut loaded, prims)
    })
}

/// Runs a program without runtime calls and records the run's host time.
fn run_timed<'a>(env: Env<'a>, op: &str, program: &ProgramRes, loaded: &mut (Program, exec::RunState), prims: Vec<AnyPrim>) -> NifResult<Term<'a>> {
    let (p, state) = loaded;
    check_inputs(op, p, &prims)?;
    let start = Instant::now();
    let done = exec::run(p, state, prims, &mut exec::NoCalls);
    program.last_us.store(start.elapsed().as_micros() as u64, Ordering::Relaxed);
    session::Step::Done(done).encode(env)
}

/// Continues a run that waits on a runtime call with the call's `results` (tensors, or
/// `{binary, shape, dtype}`); gives what `program_run/2` gives.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_resume<'a>(env: Env<'a>, session: session::SessionRef, results: Vec<Term<'a>>) -> NifResult<Term<'a>> {
    let op = "program_resume";
    let results = results.into_iter().map(|t| Input::decode(op, t)).collect::<NifResult<Vec<_>>>()?;
    guard(op, || {
        let device = session.device();
        let prims = results.into_iter().map(|i| i.prim(op, &device)).collect::<NifResult<Vec<_>>>()?;
        session::resume(&session, prims)?.encode(env)
    })
}

/// Queues a run of the program on `inputs` (as `program_run/2` takes them) on its device's
/// command queue; gives the command's id at once. The caller gets `{:ex_cubecl, id, {:ok,
/// {outputs, events}} | {:error, error}}` when the run ends.
#[rustler::nif(schedule = "DirtyCpu")]
fn program_submit<'a>(env: Env<'a>, program: ProgramRef, inputs: Vec<Term<'a>>) -> NifResult<u64> {
    let op = "program_submit";
    let pid = env.pid();
    let inputs = inputs.into_iter().map(|t| Input::decode(op, t)).collect::<NifResult<Vec<_>>>()?;
    guard(op, || {
        let prims = inputs.into_iter().map(|i| i.prim(op, &program.device)).collect::<NifResult<Vec<_>>>()?;
        submit::submit(program.clone(), prims, pid)
    })
}

/// Ends a run that waits on a runtime call (the call failed in Elixir); `false` where it had
/// ended.
#[rustler::nif(schedule = "DirtyIo")]
fn program_abort(session: session::SessionRef) -> NifResult<bool> {
    guard("program_abort", || Ok(session.abort()))
}

/// `{segments, captured, direct, launches, reads}`: how many segments the program has, how many
/// are captured as pipelines, how many run their ops directly, the captured launches in all,
/// and how many predicates (of `cond` and `while`) its runs have read from the device.
#[rustler::nif]
fn program_info(program: ProgramRef) -> NifResult<(usize, usize, usize, usize, usize)> {
    guard("program_info", || {
        let loaded = program.loaded.lock().unwrap_or_else(|e| e.into_inner());
        Ok(loaded.1.info())
    })
}

/// A program input: a tensor, or host bytes to upload.
enum Input<'a> {
    Tensor(TensorRef),
    Host(Binary<'a>, Vec<i64>, String),
}

impl<'a> Input<'a> {
    fn decode(op: &str, term: Term<'a>) -> NifResult<Self> {
        if let Ok(t) = term.decode::<TensorRef>() {
            return Ok(Input::Tensor(t));
        }
        term.decode::<(Binary<'a>, Vec<i64>, String)>()
            .map(|(b, s, d)| Input::Host(b, s, d))
            .map_err(|_| NifError::new(op, "an input is a tensor or {binary, shape, dtype}", format!("{term:?}")))
    }

    fn prim(self, op: &str, device: &Dev) -> NifResult<AnyPrim> {
        match self {
            Input::Tensor(t) => t.get(op),
            Input::Host(data, shape, dtype) => {
                let dtype = crate::dtype::parse(op, &dtype)?;
                let dims = crate::buffer::check(op, data.len(), &shape, dtype)?;
                crate::buffer::upload(op, data.as_slice().to_vec(), dims, dtype, device)
            }
        }
    }
}

/// Fails unless `inputs` match the program's parameters (count, shapes, dtypes, device).
pub(crate) fn check_inputs(op: &str, p: &Program, inputs: &[AnyPrim]) -> NifResult<()> {
    if inputs.len() != p.params.len() {
        return Err(NifError::new(op, format!("the program takes {} inputs, got {}", p.params.len(), inputs.len()), ""));
    }
    for (i, (t, want)) in inputs.iter().zip(&p.params).enumerate() {
        if t.shape().as_slice() != want.shape.as_slice() || t.dtype() != want.dtype {
            let want = format!("{:?} {}", want.shape, crate::dtype::name(want.dtype));
            return Err(NifError::new(op, format!("input {i} doesn't match the program"), format!("got {}, compiled for {want}", t.describe())));
        }
        if t.device() != p.device {
            return Err(NifError::new(op, format!("input {i} is on another device than the program"), format!("{} on {}, program on {}", t.describe(), t.device().spec(), p.device.spec())));
        }
    }
    Ok(())
}
