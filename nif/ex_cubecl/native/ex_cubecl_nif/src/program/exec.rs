//! Running a program: blocks unit by unit, each segment captured as a pipeline on its first
//! run and replayed on later ones, control flow here with predicates read from the device.
use std::collections::HashMap;

use burn_backend::{DType, DeviceOps};
use ex_cubecl::cubecl::Runtime;
use ex_cubecl::runtime::PipelineError;

use super::plan::{Segment, Src, Unit};
use super::{Instr, Program, Slot};
use crate::device::Dev;
use crate::error::{NifError, NifResult};
use crate::pipeline::{Inner, RecordError, Recorded, record};
use crate::tensor::{AnyPrim, Prim};

const OP: &str = "program_run";

/// How a unit of a block runs.
enum SegRun<R: Runtime> {
    /// A control-flow unit.
    Control,
    /// A segment that has not run yet.
    Pending,
    /// A segment that replays its capture.
    Replay(Recorded<R>),
    /// A segment that runs its ops directly: the pipeline refused the capture (an op read
    /// the host), or a replay would cost more than the ops (see [`worth_replaying`]).
    Direct,
}

/// Whether replaying a capture of `ops` instructions making `launches` kernels, with
/// `copies` copies of inputs and outputs, beats running the ops. A replay saves the ops'
/// host-side work; it binds inputs and outputs in place where it can and copies the rest
/// (views of constants, inputs that are views), about one launch each. On an H100
/// (2026-11-24): a launch costs 14 µs run directly and 8 µs replayed (benches' `pipeline
/// --micro`), and an Nx entry adds about 16 µs of host work of its own when run directly
/// (the digits MLP's fused training step: 44 entries making 57 launches ran directly in 1.6
/// ms). A jitted `Nx.add` (one op, one launch, no copy) replays.
fn worth_replaying(ops: usize, launches: usize, copies: usize) -> bool {
    const REPLAYED: usize = 8;
    const DIRECT_LAUNCH: usize = 14;
    const DIRECT_OP: usize = 16;
    REPLAYED * (launches + copies) < DIRECT_LAUNCH * launches + DIRECT_OP * ops
}

/// A program's runs on runtime `R`: its constants as the inner backend's primitives, and
/// per block and unit, how it runs.
pub struct State<R: Runtime>
where
    R::Device: DeviceOps,
{
    consts: Vec<Prim<Inner<R>>>,
    max_bytes: u64,
    segments: Vec<Vec<SegRun<R>>>,
    /// Predicates read from the device (by `cond` and `while`) over every run so far.
    reads: usize,
}

/// [`State`] of the program's runtime.
pub enum RunState {
    Wgpu(State<ex_cubecl::cubecl::wgpu::WgpuRuntime>),
    #[cfg(feature = "cuda")]
    Cuda(State<ex_cubecl::cubecl::cuda::CudaRuntime>),
}

/// Hook events: the hook's id and its values.
pub type Events<P> = Vec<(usize, Vec<P>)>;

/// Hands a runtime call to Elixir (with the hook events so far, which come first) and gives
/// its results.
pub trait Caller {
    fn call(&mut self, id: usize, args: Vec<AnyPrim>, events: Events<AnyPrim>) -> NifResult<Vec<AnyPrim>>;
}

/// The caller of programs without runtime calls.
pub struct NoCalls;

impl Caller for NoCalls {
    fn call(&mut self, id: usize, _args: Vec<AnyPrim>, _events: Events<AnyPrim>) -> NifResult<Vec<AnyPrim>> {
        Err(NifError::new(OP, format!("internal: runtime call {id} in a program run without a session"), ""))
    }
}

impl<R: Runtime> State<R>
where
    R::Device: DeviceOps,
{
    fn new(p: &Program, consts: Vec<Prim<Inner<R>>>, device: &R::Device) -> Self {
        let run = |u: &Unit| if matches!(u, Unit::Segment(_)) { SegRun::Pending } else { SegRun::Control };
        let segments = p.units.iter().map(|units| units.iter().map(run).collect()).collect();
        let max_bytes = R::client(device).properties().memory.max_page_size;
        Self { consts, max_bytes, segments, reads: 0 }
    }
}

impl RunState {
    /// The state of a program that has not run yet.
    pub fn new(p: &Program) -> NifResult<Self> {
        macro_rules! new {
            ($variant:ident, $d:expr) => {{
                let consts = crate::prims_of!(p.consts.clone(), $variant, "program_new")?.into_iter().map(crate::tensor::to_inner).collect();
                Ok(RunState::$variant(State::new(p, consts, $d)))
            }};
        }
        match &p.device {
            Dev::Wgpu(d) => new!(Wgpu, d),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => new!(Cuda, d),
        }
    }

    /// `(segments, captured, direct, launches, reads)`: see `program_info/1`.
    pub fn info(&self) -> (usize, usize, usize, usize, usize) {
        fn count<R: Runtime>(s: &State<R>) -> (usize, usize, usize, usize, usize)
        where
            R::Device: DeviceOps,
        {
            let runs: Vec<&SegRun<R>> = s.segments.iter().flatten().filter(|r| !matches!(r, SegRun::Control)).collect();
            let captured: Vec<&Recorded<R>> = runs.iter().filter_map(|r| if let SegRun::Replay(c) = r { Some(c) } else { None }).collect();
            let direct = runs.iter().filter(|r| matches!(r, SegRun::Direct)).count();
            (runs.len(), captured.len(), direct, captured.iter().map(|c| c.launches()).sum(), s.reads)
        }
        match self {
            RunState::Wgpu(s) => count(s),
            #[cfg(feature = "cuda")]
            RunState::Cuda(s) => count(s),
        }
    }
}

/// Runs program `p` on `inputs` (checked against its parameters); gives its outputs and hook
/// events. `caller` takes the program's runtime calls.
pub fn run(p: &Program, state: &mut RunState, inputs: Vec<AnyPrim>, caller: &mut dyn Caller) -> NifResult<(Vec<AnyPrim>, Events<AnyPrim>)> {
    macro_rules! go {
        ($variant:ident, $R:ty, $d:expr, $s:expr) => {{
            fn outer(p: Prim<Inner<$R>>) -> AnyPrim {
                AnyPrim::$variant(crate::tensor::from_inner(p))
            }
            fn inner(p: AnyPrim) -> NifResult<Prim<Inner<$R>>> {
                Ok(crate::tensor::to_inner(crate::prims_of!([p], $variant, OP)?.remove(0)))
            }
            let inputs = inputs.into_iter().map(inner).collect::<NifResult<Vec<_>>>()?;
            let mut ctx = Ctx::<$R> { program: p, device: $d, consts: &$s.consts, max_bytes: $s.max_bytes, events: Vec::new(), caller, outer, inner, reads: 0 };
            let outputs = ctx.block(&mut $s.segments, 0, inputs);
            $s.reads += ctx.reads;
            Ok((outputs?.into_iter().map(outer).collect(), ctx.take_events()))
        }};
    }
    match (&p.device, state) {
        (Dev::Wgpu(d), RunState::Wgpu(s)) => go!(Wgpu, ex_cubecl::cubecl::wgpu::WgpuRuntime, d, s),
        #[cfg(feature = "cuda")]
        (Dev::Cuda(d), RunState::Cuda(s)) => go!(Cuda, ex_cubecl::cubecl::cuda::CudaRuntime, d, s),
        #[allow(unreachable_patterns)]
        _ => Err(NifError::new(OP, "internal: the program's state is of another runtime", p.device.spec())),
    }
}

/// One run of a program on runtime `R`.
struct Ctx<'p, R: Runtime>
where
    R::Device: DeviceOps,
{
    program: &'p Program,
    device: &'p R::Device,
    consts: &'p [Prim<Inner<R>>],
    max_bytes: u64,
    events: Events<Prim<Inner<R>>>,
    caller: &'p mut dyn Caller,
    outer: fn(Prim<Inner<R>>) -> AnyPrim,
    inner: fn(AnyPrim) -> NifResult<Prim<Inner<R>>>,
    /// Predicates read in this run.
    reads: usize,
}

type Segments<R> = [Vec<SegRun<R>>];

impl<R: Runtime> Ctx<'_, R>
where
    R::Device: DeviceOps,
{
    /// Runs block `b` on `params`; gives its outputs.
    fn block(&mut self, segs: &mut Segments<R>, b: usize, params: Vec<Prim<Inner<R>>>) -> NifResult<Vec<Prim<Inner<R>>>> {
        let program = self.program;
        let block = &program.blocks[b];
        let mut values: HashMap<(usize, usize), Prim<Inner<R>>> = HashMap::new();
        let fetch = |values: &HashMap<(usize, usize), Prim<Inner<R>>>, s: Slot| -> NifResult<Prim<Inner<R>>> {
            match s {
                Slot::Param(i) => params.get(i).cloned(),
                Slot::Value(n, k) => values.get(&(n, k)).cloned(),
                Slot::Const(c) => self.consts.get(c).cloned(),
            }
            .ok_or_else(|| NifError::new(OP, format!("block {b}: {s:?} has no value"), "the instruction gives fewer outputs"))
        };
        for (u, unit) in program.units[b].iter().enumerate() {
            match unit {
                Unit::Segment(seg) => {
                    let inputs = seg.inputs.iter().map(|&s| fetch(&values, s)).collect::<NifResult<Vec<_>>>()?;
                    let mut outs = self.segment(&mut segs[b][u], b, seg, inputs)?.into_iter();
                    for (&key, v) in seg.outputs.iter().zip(outs.by_ref()) {
                        values.insert(key, v);
                    }
                    for (id, srcs) in &seg.hooks {
                        self.events.push((*id, outs.by_ref().take(srcs.len()).collect()));
                    }
                }
                Unit::Control(n) => {
                    let outs = match &block.instrs[*n] {
                        Instr::Cond { inputs, clauses, last } => {
                            let args = inputs.iter().map(|&s| fetch(&values, s)).collect::<NifResult<Vec<_>>>()?;
                            self.cond(segs, args, clauses, *last)?
                        }
                        Instr::While { initial, pred, body } => {
                            let state = initial.iter().map(|&s| fetch(&values, s)).collect::<NifResult<Vec<_>>>()?;
                            self.while_loop(segs, state, *pred, *body)?
                        }
                        Instr::Repeat { inputs, times, body } => {
                            let mut state = inputs.iter().map(|&s| fetch(&values, s)).collect::<NifResult<Vec<_>>>()?;
                            let times = match times {
                                Some(n) => *n,
                                None => {
                                    self.reads += 1;
                                    count::<R>(state.remove(0))?
                                }
                            };
                            self.repeat(segs, state, times, *body)?
                        }
                        Instr::Call { id, inputs, outputs } => {
                            let args = inputs.iter().map(|&s| fetch(&values, s)).collect::<NifResult<Vec<_>>>()?;
                            self.call(*id, args, outputs)?
                        }
                        other => return Err(NifError::new(OP, "internal: a control unit holds no control instruction", format!("{other:?}"))),
                    };
                    for (k, v) in outs.into_iter().enumerate() {
                        values.insert((*n, k), v);
                    }
                }
            }
        }
        block.outputs.iter().map(|&s| fetch(&values, s)).collect()
    }

    /// The hook events so far, for Elixir.
    fn take_events(&mut self) -> Events<AnyPrim> {
        std::mem::take(&mut self.events).into_iter().map(|(id, ts)| (id, ts.into_iter().map(self.outer).collect())).collect()
    }

    /// Runtime call `id` on `args`: its results, checked against `outputs`.
    fn call(&mut self, id: usize, args: Vec<Prim<Inner<R>>>, outputs: &[super::Param]) -> NifResult<Vec<Prim<Inner<R>>>> {
        let events = self.take_events();
        let results = self.caller.call(id, args.into_iter().map(self.outer).collect(), events)?;
        let results = results.into_iter().map(self.inner).collect::<NifResult<Vec<_>>>()?;
        let shapes = |ps: &[Prim<Inner<R>>]| ps.iter().map(|p| p.describe()).collect::<Vec<_>>();
        let wanted: Vec<String> = outputs.iter().map(|o| format!("{:?} {}", o.shape, crate::dtype::name(o.dtype))).collect();
        if shapes(&results) != wanted {
            return Err(NifError::new("runtime_call", format!("runtime call {id} gave results that don't match its template"), format!("got {:?}, expected {wanted:?}", shapes(&results))));
        }
        Ok(results)
    }

    fn cond(&mut self, segs: &mut Segments<R>, args: Vec<Prim<Inner<R>>>, clauses: &[(usize, usize)], last: usize) -> NifResult<Vec<Prim<Inner<R>>>> {
        for &(pred, body) in clauses {
            let p = self.block(segs, pred, args.clone())?;
            self.reads += 1;
            if truthy::<R>("cond", p)? {
                return self.block(segs, body, args);
            }
        }
        self.block(segs, last, args)
    }

    fn while_loop(&mut self, segs: &mut Segments<R>, mut state: Vec<Prim<Inner<R>>>, pred: usize, body: usize) -> NifResult<Vec<Prim<Inner<R>>>> {
        loop {
            let p = self.block(segs, pred, state.clone())?;
            self.reads += 1;
            if !truthy::<R>("while", p)? {
                return Ok(state);
            }
            state = self.block(segs, body, state)?;
        }
    }

    fn repeat(&mut self, segs: &mut Segments<R>, mut state: Vec<Prim<Inner<R>>>, times: usize, body: usize) -> NifResult<Vec<Prim<Inner<R>>>> {
        for _ in 0..times {
            state = self.block(segs, body, state)?;
        }
        Ok(state)
    }

    /// Runs a segment: a replay of its capture, or its ops; the first run captures it.
    fn segment(&mut self, run: &mut SegRun<R>, b: usize, seg: &Segment, inputs: Vec<Prim<Inner<R>>>) -> NifResult<Vec<Prim<Inner<R>>>> {
        let ops = |inputs| run_ops::<R>(self.program, self.consts, self.device, self.max_bytes, b, seg, inputs);
        match run {
            SegRun::Replay(captured) => captured.run(OP, inputs),
            SegRun::Direct => ops(inputs),
            SegRun::Control => Err(NifError::new(OP, "internal: a control unit run as a segment", format!("block {b}"))),
            SegRun::Pending => match record::<R>(self.device, inputs.clone(), ops) {
                Ok((captured, outs)) => {
                    *run = if worth_replaying(seg.instrs.len(), captured.launches(), captured.copies()) { SegRun::Replay(captured) } else { SegRun::Direct };
                    Ok(outs)
                }
                Err(RecordError::Capture(PipelineError::HostRead { .. })) => {
                    *run = SegRun::Direct;
                    ops(inputs)
                }
                Err(RecordError::Capture(e)) => Err(NifError::new(OP, format!("capturing instructions {:?} of block {b} failed: {e}", seg.instrs), "")),
                Err(RecordError::Op(e)) => Err(e),
            },
        }
    }
}

/// The ops of a segment on its inputs; gives its outputs, then its hooks' values.
fn run_ops<R: Runtime>(
    p: &Program,
    consts: &[Prim<Inner<R>>],
    device: &R::Device,
    max_bytes: u64,
    b: usize,
    seg: &Segment,
    inputs: Vec<Prim<Inner<R>>>,
) -> NifResult<Vec<Prim<Inner<R>>>>
where
    R::Device: DeviceOps,
{
    let block = &p.blocks[b];
    let mut local: HashMap<usize, Vec<Prim<Inner<R>>>> = HashMap::new();
    let get = |local: &HashMap<usize, Vec<Prim<Inner<R>>>>, s: Src| {
        match s {
            Src::Input(i) => inputs.get(i).cloned(),
            Src::Local(n, k) => local.get(&n).and_then(|v| v.get(k)).cloned(),
            Src::Const(c) => consts.get(c).cloned(),
        }
        .ok_or_else(|| NifError::new(OP, format!("block {b}: {s:?} has no value"), "the instruction gives fewer outputs"))
    };
    for (&n, reads) in seg.instrs.iter().zip(&seg.reads) {
        if let Instr::Op { kernel, opts, label, .. } = &block.instrs[n] {
            let args = reads.iter().map(|&s| get(&local, s)).collect::<NifResult<Vec<_>>>()?;
            let out = crate::ops::run::<Inner<R>>(kernel, args, opts, device, max_bytes)
                .map_err(|e| NifError::new(label, format!("instruction {n} of block {b} ({kernel}): {}", e.reason), e.details))?;
            local.insert(n, out);
        }
    }
    let mut outs = seg.outputs.iter().map(|&(n, k)| get(&local, Src::Local(n, k))).collect::<NifResult<Vec<_>>>()?;
    for (_, srcs) in &seg.hooks {
        for &s in srcs {
            outs.push(get(&local, s)?);
        }
    }
    Ok(outs)
}

/// Whether a predicate (the one output of a predicate block: a scalar) is non-zero.
/// A repeat's count: a scalar integer read from the device (0 where negative).
fn count<R: Runtime>(p: Prim<Inner<R>>) -> NifResult<usize>
where
    R::Device: DeviceOps,
{
    const WHAT: &str = "while";
    if p.shape().num_elements() != 1 {
        return Err(NifError::new(WHAT, "internal: a loop's count must be a scalar", p.describe()));
    }
    let dtype = p.dtype();
    let bytes = crate::buffer::read_prim::<Inner<R>>(WHAT, p)?;
    let n = dtype.size();
    let word = bytes.get(..n).ok_or_else(|| NifError::new(WHAT, "internal: a loop's count read short", format!("{dtype:?}")))?;
    let unsigned = word.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x));
    let value = match dtype {
        DType::I8 | DType::I16 | DType::I32 | DType::I64 => {
            let shift = 64 - 8 * n as u32;
            ((unsigned << shift) as i64 >> shift).max(0) as u64
        }
        DType::U8 | DType::U16 | DType::U32 | DType::U64 => unsigned,
        other => return Err(NifError::new(WHAT, "internal: a loop's count must be an integer", format!("{other:?}"))),
    };
    usize::try_from(value).map_err(|_| NifError::new(WHAT, "a loop's trip count is out of range", value.to_string()))
}

fn truthy<R: Runtime>(what: &str, mut outs: Vec<Prim<Inner<R>>>) -> NifResult<bool>
where
    R::Device: DeviceOps,
{
    let p = outs.pop().ok_or_else(|| NifError::new(what, "internal: a predicate block gave no value", ""))?;
    if p.shape().num_elements() != 1 {
        return Err(NifError::new(what, "the predicate must be a scalar", p.describe()));
    }
    let dtype = p.dtype();
    let bytes = crate::buffer::read_prim::<Inner<R>>(what, p)?;
    let word = |n: usize| bytes.get(..n).map(|b| b.iter().rev().fold(0u64, |acc, &x| acc << 8 | u64::from(x)));
    Ok(match dtype {
        // Floats: any non-zero value (NaN included), ignoring the sign of zero.
        DType::F64 => word(8).is_some_and(|w| w << 1 != 0),
        DType::F32 => word(4).is_some_and(|w| w << 33 != 0),
        DType::F16 | DType::BF16 => word(2).is_some_and(|w| w << 49 != 0),
        _ => bytes.iter().any(|&x| x != 0),
    })
}
