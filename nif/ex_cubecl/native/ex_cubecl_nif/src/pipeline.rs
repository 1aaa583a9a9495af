//! Pipelines from Elixir: a list of kernels over slots (the pipeline's inputs and earlier
//! steps' outputs), captured with the backend's `Pipeline` on the first run and replayed in
//! one NIF call on every run after it.
//!
//! The first run fixes the input shapes and dtypes and the outputs asked for; later runs
//! must match them (the backend's pipeline refuses other inputs, naming the input and both
//! shapes). Steps added after the first run are refused.
use std::sync::{Arc, Mutex};

use burn_backend::DeviceOps;
use ex_cubecl::ExCubeclBackend;
use ex_cubecl::cubecl::Runtime;
use ex_cubecl::runtime::Pipeline;
use ex_cubecl::tensor::CubeTensor;
use rustler::{Resource, ResourceArc};

use crate::device::Dev;
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::{AnyPrim, Prim};

/// Where a step's input comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Slot {
    /// The pipeline's input `i`.
    Input(usize),
    /// Output `k` of step `s`.
    Step(usize, usize),
}

/// One kernel of a pipeline.
#[derive(Clone, Debug)]
pub struct Step {
    pub kernel: String,
    pub inputs: Vec<Slot>,
    pub opts: Opts,
}

/// The kind of a primitive (the backend has one primitive type for all three).
#[derive(Clone, Copy, Debug)]
enum Kind {
    Float,
    Int,
    Bool,
}

/// A captured closure of one runtime's ops, with the kinds of its outputs.
pub struct Recorded<R: Runtime> {
    pipeline: Arc<Pipeline<R>>,
    kinds: Vec<Kind>,
    /// The copies a run makes on inputs laid out as the capture's.
    copies: usize,
}

/// A captured pipeline of steps, with the outputs asked for at its first run.
struct Captured<R: Runtime> {
    recorded: Recorded<R>,
    outputs: Vec<Slot>,
}

enum Compiled {
    Wgpu(Captured<ex_cubecl::cubecl::wgpu::WgpuRuntime>),
    #[cfg(feature = "cuda")]
    Cuda(Captured<ex_cubecl::cubecl::cuda::CudaRuntime>),
}

struct Plan {
    steps: Vec<Step>,
    compiled: Option<Compiled>,
    freed: bool,
}

/// The NIF resource of a pipeline.
pub struct PipelineRes {
    plan: Mutex<Plan>,
}

#[rustler::resource_impl]
impl Resource for PipelineRes {}

pub type PipelineRef = ResourceArc<PipelineRes>;

/// A new, empty pipeline.
pub fn new() -> PipelineRef {
    ResourceArc::new(PipelineRes {
        plan: Mutex::new(Plan {
            steps: Vec::new(),
            compiled: None,
            freed: false,
        }),
    })
}

impl PipelineRes {
    fn lock(&self, op: &str) -> NifResult<std::sync::MutexGuard<'_, Plan>> {
        let plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if plan.freed {
            return Err(NifError::new(
                op,
                "the pipeline was freed",
                "pipeline_free/1 was called on it before",
            ));
        }
        Ok(plan)
    }

    /// Adds a step; gives its index. Its slots must name earlier steps.
    pub fn add(&self, step: Step) -> NifResult<usize> {
        let op = "pipeline_add";
        let mut plan = self.lock(op)?;
        if plan.compiled.is_some() {
            return Err(NifError::new(
                op,
                "the pipeline has run: its steps are fixed",
                format!("{} steps", plan.steps.len()),
            ));
        }
        let kernel =
            crate::ops::kernel(&step.kernel).map_err(|e| NifError::new(op, e.reason, e.details))?;
        if kernel.family == crate::ops::Family::Quant {
            return Err(NifError::new(
                op,
                format!(
                    "{} can't be in a pipeline: pipelines take and give float, int or bool tensors",
                    step.kernel
                ),
                "run it with run_kernel",
            ));
        }
        let n = plan.steps.len();
        if let Some(bad) = step
            .inputs
            .iter()
            .find(|s| matches!(s, Slot::Step(i, _) if *i >= n))
        {
            return Err(NifError::new(
                op,
                format!("slot {bad:?} names a step that comes later"),
                format!("step {n} ({})", step.kernel),
            ));
        }
        plan.steps.push(step);
        Ok(n)
    }

    /// Frees the captured launches and their buffers; `false` when freed before.
    pub fn free(&self) -> bool {
        let mut plan = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        let was = !plan.freed;
        plan.freed = true;
        plan.steps.clear();
        plan.compiled = None;
        was
    }

    /// Runs the pipeline on `inputs`, giving the outputs at `outputs`.
    pub fn run(&self, inputs: Vec<AnyPrim>, outputs: Vec<Slot>) -> NifResult<Vec<AnyPrim>> {
        let op = "pipeline_run";
        let mut plan = self.lock(op)?;
        if plan.steps.is_empty() {
            return Err(NifError::new(
                op,
                "the pipeline has no steps",
                "add kernels with pipeline_add first",
            ));
        }
        let device = inputs
            .first()
            .map(AnyPrim::device)
            .ok_or_else(|| NifError::new(op, "needs at least one input", ""))?;
        macro_rules! go {
            ($variant:ident, $R:ty, $d:expr) => {{
                let cubes: Vec<_> = crate::prims_of!(inputs, $variant, op)?
                    .into_iter()
                    .map(crate::tensor::to_inner)
                    .collect();
                match &plan.compiled {
                    None => {
                        let (captured, outs) = capture::<$R>($d, &plan.steps, cubes, outputs)?;
                        plan.compiled = Some(Compiled::$variant(captured));
                        Ok(outs
                            .into_iter()
                            .map(|p| AnyPrim::$variant(crate::tensor::from_inner(p)))
                            .collect())
                    }
                    #[allow(unreachable_patterns)]
                    Some(Compiled::$variant(c)) => Ok(replay::<$R>(c, cubes, &outputs)?
                        .into_iter()
                        .map(|p| AnyPrim::$variant(crate::tensor::from_inner(p)))
                        .collect()),
                    #[allow(unreachable_patterns)]
                    Some(_) => Err(NifError::new(
                        op,
                        "the pipeline was captured on another runtime",
                        device.spec(),
                    )),
                }
            }};
        }
        match &device {
            Dev::Wgpu(d) => go!(Wgpu, ex_cubecl::cubecl::wgpu::WgpuRuntime, d),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => go!(Cuda, ex_cubecl::cubecl::cuda::CudaRuntime, d),
        }
    }

    /// The captured pipeline of `R` and the inputs it expects, for asynchronous replays.
    pub fn replay_work(&self, inputs: Vec<AnyPrim>) -> NifResult<crate::command::Replay> {
        let op = "submit";
        let plan = self.lock(op)?;
        macro_rules! work {
            ($variant:ident, $c:expr) => {
                Ok(crate::command::Replay::$variant(
                    $c.recorded.pipeline.clone(),
                    crate::prims_of!(inputs, $variant, op)?
                        .into_iter()
                        .map(|p| into_cube(crate::tensor::to_inner(p)).0)
                        .collect(),
                    codes(&$c.recorded.kinds),
                ))
            };
        }
        match (&plan.compiled, inputs.first()) {
            (Some(Compiled::Wgpu(c)), Some(AnyPrim::Wgpu(_))) => work!(Wgpu, c),
            #[cfg(feature = "cuda")]
            (Some(Compiled::Cuda(c)), Some(AnyPrim::Cuda(_))) => work!(Cuda, c),
            (None, _) => Err(NifError::new(
                op,
                "the pipeline has not run yet",
                "run it once with pipeline_run to capture it",
            )),
            _ => Err(NifError::new(
                op,
                "the inputs are not on the pipeline's device",
                "",
            )),
        }
    }
}

pub type Inner<R> = ExCubeclBackend<R>;

fn codes(kinds: &[Kind]) -> Vec<u8> {
    kinds
        .iter()
        .map(|k| matches!(k, Kind::Float) as u8 + 2 * matches!(k, Kind::Bool) as u8)
        .collect()
}

fn into_cube<R: Runtime>(p: Prim<Inner<R>>) -> (CubeTensor<R>, Kind)
where
    R::Device: DeviceOps,
{
    match p {
        Prim::Float(t) => (t, Kind::Float),
        Prim::Int(t) => (t, Kind::Int),
        Prim::Bool(t) => (t, Kind::Bool),
        q @ Prim::Quant(_) => panic!(
            "pipelines and commands take and give float, int or bool tensors, not {}: dequantize it first",
            q.describe()
        ),
    }
}

fn from_cube<R: Runtime>(t: CubeTensor<R>, kind: Kind) -> Prim<Inner<R>>
where
    R::Device: DeviceOps,
{
    match kind {
        Kind::Float => Prim::Float(t),
        Kind::Int => Prim::Int(t),
        Kind::Bool => Prim::Bool(t),
    }
}

/// The kind code of `p` (see [`from_code`]) and its tensor.
pub fn to_code<R: Runtime>(p: Prim<Inner<R>>) -> (CubeTensor<R>, u8)
where
    R::Device: DeviceOps,
{
    let (t, k) = into_cube(p);
    (
        t,
        matches!(k, Kind::Float) as u8 + 2 * matches!(k, Kind::Bool) as u8,
    )
}

/// A kind code of a command's outputs: 0 int, 1 float, 2 bool.
pub fn from_code<R: Runtime>(t: CubeTensor<R>, code: u8) -> Prim<Inner<R>>
where
    R::Device: DeviceOps,
{
    from_cube(
        t,
        match code {
            1 => Kind::Float,
            2 => Kind::Bool,
            _ => Kind::Int,
        },
    )
}

/// Runs `steps` on `inputs`, giving the values at `outputs`.
pub fn run_steps<R: Runtime>(
    device: &R::Device,
    steps: &[Step],
    inputs: Vec<Prim<Inner<R>>>,
    outputs: &[Slot],
) -> NifResult<Vec<Prim<Inner<R>>>>
where
    R::Device: DeviceOps,
{
    let max_bytes = R::client(device).properties().memory.max_page_size;
    let mut values: Vec<Vec<Prim<Inner<R>>>> = Vec::with_capacity(steps.len());
    let get = |values: &Vec<Vec<Prim<Inner<R>>>>, slot: &Slot| -> NifResult<Prim<Inner<R>>> {
        match *slot {
            Slot::Input(i) => inputs.get(i).cloned(),
            Slot::Step(s, k) => values.get(s).and_then(|v| v.get(k)).cloned(),
        }
        .ok_or_else(|| {
            NifError::new(
                "pipeline_run",
                format!("slot {slot:?} has no value"),
                format!("{} inputs", inputs.len()),
            )
        })
    };
    for (n, step) in steps.iter().enumerate() {
        let args = step
            .inputs
            .iter()
            .map(|s| get(&values, s))
            .collect::<NifResult<Vec<_>>>()?;
        let out = crate::ops::run::<Inner<R>>(&step.kernel, args, &step.opts, device, max_bytes)
            .map_err(|e| {
                NifError::new(
                    "pipeline_run",
                    format!("step {n} ({}): {}", step.kernel, e.reason),
                    e.details,
                )
            })?;
        values.push(out);
    }
    outputs.iter().map(|s| get(&values, s)).collect()
}

fn capture<R: Runtime>(
    device: &R::Device,
    steps: &[Step],
    inputs: Vec<Prim<Inner<R>>>,
    outputs: Vec<Slot>,
) -> NifResult<(Captured<R>, Vec<Prim<Inner<R>>>)>
where
    R::Device: DeviceOps,
{
    let (recorded, outs) = record::<R>(device, inputs, |prims| {
        run_steps::<R>(device, steps, prims, &outputs)
    })
    .map_err(|e| match e {
        RecordError::Capture(e) => NifError::new(
            "pipeline_run",
            format!("capture failed: {e}"),
            format!("{} steps", steps.len()),
        ),
        RecordError::Op(e) => e,
    })?;
    Ok((Captured { recorded, outputs }, outs))
}

/// Why [`record`] failed.
pub enum RecordError {
    /// The pipeline refused the closure (it read the host, it panicked, ...).
    Capture(ex_cubecl::runtime::PipelineError),
    /// The closure's own error.
    Op(NifError),
}

/// Runs `f` on `inputs` once, capturing its launches as a [`Pipeline`] of `device`; gives it
/// with the outputs of this first run (fresh tensors, as every replay gives).
pub fn record<R: Runtime>(
    device: &R::Device,
    inputs: Vec<Prim<Inner<R>>>,
    f: impl FnOnce(Vec<Prim<Inner<R>>>) -> NifResult<Vec<Prim<Inner<R>>>>,
) -> Result<(Recorded<R>, Vec<Prim<Inner<R>>>), RecordError>
where
    R::Device: DeviceOps,
{
    let (cubes, kinds): (Vec<_>, Vec<_>) = inputs.into_iter().map(into_cube).unzip();
    let mut failure = None;
    let mut out_kinds = Vec::new();
    let (pipeline, fresh) = Pipeline::capture_with_outputs(device, &cubes, |seen| {
        let prims = seen
            .into_iter()
            .zip(&kinds)
            .map(|(t, k)| from_cube(t, *k))
            .collect();
        match f(prims) {
            Ok(outs) => outs
                .into_iter()
                .map(into_cube)
                .map(|(t, k)| {
                    out_kinds.push(k);
                    t
                })
                .collect(),
            Err(e) => {
                failure = Some(e);
                Vec::new()
            }
        }
    })
    .map_err(RecordError::Capture)?;
    if let Some(e) = failure {
        return Err(RecordError::Op(e));
    }
    let outs = fresh
        .into_iter()
        .zip(&out_kinds)
        .map(|(t, k)| from_cube(t, *k))
        .collect();
    let recorded = Recorded {
        copies: pipeline.num_copies(&cubes),
        pipeline: Arc::new(pipeline),
        kinds: out_kinds,
    };
    Ok((recorded, outs))
}

impl<R: Runtime> Recorded<R>
where
    R::Device: DeviceOps,
{
    /// Replays the captured launches on `inputs` (of the capture's shapes and dtypes); gives
    /// fresh outputs.
    pub fn run(&self, op: &str, inputs: Vec<Prim<Inner<R>>>) -> NifResult<Vec<Prim<Inner<R>>>> {
        let cubes: Vec<CubeTensor<R>> = inputs.into_iter().map(|p| into_cube(p).0).collect();
        let outs = self
            .pipeline
            .run(&cubes)
            .map_err(|e| NifError::new(op, e.to_string(), "replay refused"))?;
        Ok(outs
            .into_iter()
            .zip(&self.kinds)
            .map(|(t, k)| from_cube(t, *k))
            .collect())
    }

    /// The number of recorded launches.
    pub fn launches(&self) -> usize {
        self.pipeline.num_launches()
    }

    /// The copy launches a run makes for its inputs and outputs, on inputs laid out as the
    /// capture's.
    pub fn copies(&self) -> usize {
        self.copies
    }
}

fn replay<R: Runtime>(
    c: &Captured<R>,
    inputs: Vec<Prim<Inner<R>>>,
    outputs: &[Slot],
) -> NifResult<Vec<Prim<Inner<R>>>>
where
    R::Device: DeviceOps,
{
    if outputs != c.outputs.as_slice() {
        return Err(NifError::new(
            "pipeline_run",
            "the outputs differ from those of the first run",
            format!("asked {outputs:?}, captured {:?}", c.outputs),
        ));
    }
    c.recorded.run("pipeline_run", inputs)
}
