//! ExCubecl's one NIF: tensors of `Autodiff<ExCubeclBackend<R>>` (wgpu and, with the `cuda`
//! feature, CUDA) for Elixir. Devices and the build's features: see `device.rs`.
//!
//! Every NIF returns `{:ok, value}` or `{:error, %{op, reason, details}}`; a panic under a NIF
//! becomes such an error ([`error::guard`]). Scheduling: NIFs that launch kernels (which may
//! compile them on first use) run on dirty CPU schedulers, NIFs that wait for the device
//! (reads, sync, device probing) on dirty IO schedulers; only the metadata NIFs (`shape`,
//! `dtype`, `device`, `free`, `kernels`), which touch no device, stay on normal schedulers.
mod autodiff;
mod buffer;
mod collective;
mod command;
mod device;
mod dtype;
mod error;
mod media;
mod ops;
mod opts;
mod pipeline;
mod program;
mod record;
mod stack;
mod tensor;

use rustler::{Binary, Env, NewBinary, Term};

use pipeline::{PipelineRef, Slot, Step};

use device::Dev;
use error::{NifError, NifResult, guard};
use opts::Opts;
use tensor::{AnyPrim, TensorRef, wrap};

/// `[{spec, name, kind, api}]` of this machine's devices, best first.
#[rustler::nif(schedule = "DirtyIo")]
fn devices() -> NifResult<Vec<(String, String, String, String)>> {
    guard("devices", || {
        Ok(device::devices()
            .into_iter()
            .map(|d| (d.spec, d.name, d.kind.to_string(), d.api))
            .collect())
    })
}

/// The default device's spec.
#[rustler::nif(schedule = "DirtyIo")]
fn default_device() -> NifResult<String> {
    guard("default_device", || Ok(device::default_device()?.spec()))
}

/// A tensor from host bytes.
#[rustler::nif(schedule = "DirtyCpu")]
fn buffer(data: Binary, shape: Vec<i64>, dtype: String, device: String) -> NifResult<TensorRef> {
    guard("buffer", || {
        let dtype = dtype::parse("buffer", &dtype)?;
        let dims = buffer::check("buffer", data.len(), &shape, dtype)?;
        let device = Dev::parse("buffer", &device)?;
        Ok(wrap(buffer::upload(
            "buffer",
            data.as_slice().to_vec(),
            dims,
            dtype,
            &device,
        )?))
    })
}

/// The tensor's bytes.
#[rustler::nif(schedule = "DirtyIo")]
fn read<'a>(env: Env<'a>, tensor: TensorRef) -> NifResult<Binary<'a>> {
    let bytes = guard("read", || buffer::read("read", tensor.get("read")?))?;
    let mut out = NewBinary::new(env, bytes.len());
    out.as_mut_slice().copy_from_slice(&bytes);
    Ok(out.into())
}

/// The tensor on `device` (itself when it is there): device to device where the runtime
/// copies between its devices (CUDA with NCCL), without waiting for the source's work.
#[rustler::nif(schedule = "DirtyIo")]
fn to_device(tensor: TensorRef, device: String) -> NifResult<TensorRef> {
    let op = "to_device";
    guard(op, || {
        let device = Dev::parse(op, &device)?;
        Ok(wrap(buffer::to_device(op, tensor.get(op)?, &device)?))
    })
}

#[rustler::nif]
fn shape(tensor: TensorRef) -> NifResult<Vec<usize>> {
    guard("shape", || Ok(tensor.get("shape")?.shape().to_vec()))
}

#[rustler::nif]
fn dtype(tensor: TensorRef) -> NifResult<&'static str> {
    guard("dtype", || Ok(dtype::name(tensor.get("dtype")?.dtype())))
}

#[rustler::nif]
fn device(tensor: TensorRef) -> NifResult<String> {
    guard("device", || Ok(tensor.get("device")?.device().spec()))
}

/// Frees the tensor's device memory now; `false` when it was freed before.
#[rustler::nif]
fn free(tensor: TensorRef) -> NifResult<bool> {
    guard("free", || Ok(tensor.free()))
}

/// Writes `src`'s value into `dst` (a kernel's result into a given output buffer): both must
/// have one shape, dtype and device; `dst`'s holders see the new value from then on.
#[rustler::nif]
fn assign(dst: TensorRef, src: TensorRef) -> NifResult<bool> {
    let op = "assign";
    guard(op, || {
        let (out, value) = (dst.get(op)?, src.get(op)?);
        if out.shape() != value.shape() || out.dtype() != value.dtype() || out.device() != value.device() {
            return Err(NifError::new(
                op,
                "the output buffer must have the result's shape, dtype and device",
                format!("output {} on {}, result {} on {}", out.describe(), out.device().spec(), value.describe(), value.device().spec()),
            ));
        }
        dst.set(op, value)?;
        Ok(true)
    })
}

/// `[{name, inputs, options}]` of every kernel.
#[rustler::nif]
fn kernels() -> Vec<(&'static str, &'static str, &'static str)> {
    ops::KERNELS
        .iter()
        .map(|k| (k.name, k.inputs, k.options))
        .collect()
}

/// Runs kernel `name` on `inputs` with keyword options `opts`; kernels without inputs run on
/// `device`. Gives `{ref, shape, dtype}` per output, so that Elixir needs no further call to
/// describe them.
#[rustler::nif(schedule = "DirtyCpu")]
fn run_kernel<'a>(env: Env<'a>, name: String, inputs: Vec<TensorRef>, opts: Term<'a>, device: String) -> NifResult<Vec<(TensorRef, Vec<usize>, rustler::Atom)>> {
    let op = name.as_str();
    let opts = Opts::decode(op, opts)?;
    guard(op, || {
        let prims = inputs.iter().map(|t| t.get(op)).collect::<NifResult<Vec<_>>>()?;
        let device = match prims.first() {
            Some(p) => p.device(),
            None => Dev::parse(op, &device)?,
        };
        run(op, prims, &opts, &device)?
            .into_iter()
            .map(|p| {
                let (shape, dtype) = (p.shape().to_vec(), dtype::name(p.dtype()));
                let atom = rustler::Atom::from_str(env, dtype).map_err(|_| NifError::new(op, "internal: no atom for dtype", dtype))?;
                Ok((wrap(p), shape, atom))
            })
            .collect()
    })
}

/// Runs a kernel on primitives of one device.
///
/// Work on tensors that don't require gradients runs on the inner backend and its float
/// results are wrapped as untracked autodiff tensors: Burn's `Autodiff` registers a graph step
/// for every op, tracked or not, and cleans them only when a `backward` runs, so an inference
/// loop on it would grow without bound.
pub(crate) fn run(
    op: &str,
    inputs: Vec<AnyPrim>,
    opts: &Opts,
    device: &Dev,
) -> NifResult<Vec<AnyPrim>> {
    macro_rules! on {
        ($variant:ident, $B:ty, $R:ty, $d:expr) => {{
            let prims = prims_of!(inputs, $variant, op)?;
            if let Some(p) = prims.iter().find(|p| &p.device() != $d) {
                return Err(NifError::new(
                    op,
                    "the inputs are on different devices",
                    format!(
                        "{} on {:?}, expected {}",
                        p.describe(),
                        p.device(),
                        device.spec()
                    ),
                ));
            }
            let max_bytes = <$R as ex_cubecl::cubecl::Runtime>::client($d)
                .properties()
                .memory
                .max_page_size;
            if prims.iter().any(tensor::is_tracked)
                && ops::kernel(op)?.family != ops::Family::Quant
            {
                Ok(ops::run::<$B>(op, prims, opts, $d, max_bytes)?
                    .into_iter()
                    .map(AnyPrim::$variant)
                    .collect())
            } else {
                let inner = prims.into_iter().map(tensor::to_inner::<$B>).collect();
                let out = ops::run::<<$B as burn_backend::AutodiffBackend>::InnerBackend>(
                    op, inner, opts, $d, max_bytes,
                )?;
                Ok(out
                    .into_iter()
                    .map(|p| AnyPrim::$variant(tensor::from_inner::<$B>(p)))
                    .collect())
            }
        }};
    }
    match device {
        Dev::Wgpu(d) => on!(
            Wgpu,
            tensor::AdWgpu,
            ex_cubecl::cubecl::wgpu::WgpuRuntime,
            d
        ),
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => on!(
            Cuda,
            tensor::AdCuda,
            ex_cubecl::cubecl::cuda::CudaRuntime,
            d
        ),
    }
}

/// Waits for every queued kernel of `device`; an error when the device failed.
#[rustler::nif(schedule = "DirtyIo")]
fn synchronize(device: String) -> NifResult<bool> {
    guard("synchronize", || {
        let sync = |r: Result<(), burn_backend::ExecutionError>| {
            r.map(|()| true)
                .map_err(|e| NifError::new("synchronize", format!("{e:?}"), "device failure"))
        };
        match Dev::parse("synchronize", &device)? {
            Dev::Wgpu(d) => sync(<tensor::AdWgpu as burn_backend::Backend>::sync(&d)),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => sync(<tensor::AdCuda as burn_backend::Backend>::sync(&d)),
        }
    })
}

/// The all-reduce of `tensors` (one per device, one shape and float type) with `op` (`"sum"`
/// or `"mean"`): one result per tensor, on its device. Waits for the result (host-staged on
/// wgpu), hence the IO scheduler.
#[rustler::nif(schedule = "DirtyIo")]
fn all_reduce(tensors: Vec<TensorRef>, op: String) -> NifResult<Vec<TensorRef>> {
    guard("all_reduce", || {
        let prims = tensors.iter().map(|t| t.get("all_reduce")).collect::<NifResult<Vec<_>>>()?;
        Ok(collective::all_reduce(prims, &op)?.into_iter().map(wrap).collect())
    })
}

/// `{bytes_in_use, bytes_reserved, allocations}` of `device`'s memory pools.
#[rustler::nif(schedule = "DirtyIo")]
fn memory_info(device: String) -> NifResult<(u64, u64, u64)> {
    guard("memory_info", || {
        use ex_cubecl::cubecl::Runtime;
        let usage = match Dev::parse("memory_info", &device)? {
            Dev::Wgpu(d) => ex_cubecl::cubecl::wgpu::WgpuRuntime::client(&d).memory_usage(),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => ex_cubecl::cubecl::cuda::CudaRuntime::client(&d).memory_usage(),
        }
        .map_err(|e| NifError::new("memory_info", format!("{e}"), "device failure"))?;
        Ok((
            usage.bytes_in_use,
            usage.bytes_reserved,
            usage.number_allocs,
        ))
    })
}

/// Winds the runtime down (`ExCubecl.shutdown/0`; the same runs at exit): command queues
/// drained, launches stopped, every device's queued work finished.
#[rustler::nif(schedule = "DirtyIo")]
fn shutdown() -> NifResult<bool> {
    guard("shutdown", || {
        ex_cubecl::runtime::shutdown()
            .map(|()| true)
            .map_err(|e| NifError::new("shutdown", e.to_string(), "the steps that did not end in time"))
    })
}

/// Sets the process's allocation limit in bytes (`nil` lifts it): larger allocations are
/// refused, naming the op (`ExCubecl.put_allocation_limit/1`).
#[rustler::nif]
fn put_allocation_limit(bytes: Option<u64>) -> bool {
    ex_cubecl::runtime::alloc::set_allocation_limit(bytes);
    true
}

/// The dtypes `device` stores and computes in.
#[rustler::nif(schedule = "DirtyIo")]
fn supported_dtypes(device: String) -> NifResult<Vec<&'static str>> {
    guard("supported_dtypes", || {
        let device = Dev::parse("supported_dtypes", &device)?;
        let supports = |dtype| match &device {
            Dev::Wgpu(d) => <tensor::AdWgpu as burn_backend::Backend>::supports_dtype(d, dtype),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => <tensor::AdCuda as burn_backend::Backend>::supports_dtype(d, dtype),
        };
        Ok(dtype::DTYPES
            .iter()
            .filter(|(_, d)| supports(*d))
            .map(|(n, _)| *n)
            .collect())
    })
}

/// How many kernels this process has launched so far, on every device (replayed launches
/// included).
#[rustler::nif]
fn launch_count() -> u64 {
    ex_cubecl::runtime::launch_count()
}

/// The runtimes compiled into this build.
#[rustler::nif]
fn runtimes() -> Vec<&'static str> {
    let mut out = Vec::new();
    if cfg!(feature = "cuda") {
        out.push("cuda");
    }
    out.push("wgpu");
    out
}

/// A slot from Elixir: `{:input, i}` or `{:step, s, k}`.
fn slot(op: &str, term: Term) -> NifResult<Slot> {
    let bad = || {
        NifError::new(
            op,
            "a slot is {:input, i} or {:step, step, output}",
            format!("{term:?}"),
        )
    };
    let parts = rustler::types::tuple::get_tuple(term).map_err(|_| bad())?;
    let tag = parts
        .first()
        .and_then(|t| t.atom_to_string().ok())
        .ok_or_else(bad)?;
    let index = |k: usize| {
        parts
            .get(k)
            .and_then(|t| t.decode::<usize>().ok())
            .ok_or_else(bad)
    };
    match (tag.as_str(), parts.len()) {
        ("input", 2) => Ok(Slot::Input(index(1)?)),
        ("step", 3) => Ok(Slot::Step(index(1)?, index(2)?)),
        _ => Err(bad()),
    }
}

fn slots(op: &str, terms: Vec<Term>) -> NifResult<Vec<Slot>> {
    terms.into_iter().map(|t| slot(op, t)).collect()
}

#[rustler::nif]
fn pipeline_new() -> PipelineRef {
    pipeline::new()
}

/// Adds kernel `name` over `inputs` (slots) to the pipeline; gives the step's index.
#[rustler::nif]
fn pipeline_add(
    pipeline: PipelineRef,
    name: String,
    inputs: Vec<Term>,
    opts: Term,
) -> NifResult<usize> {
    let op = "pipeline_add";
    let inputs = slots(op, inputs)?;
    let opts = Opts::decode(op, opts)?;
    guard(op, || {
        pipeline.add(Step {
            kernel: name,
            inputs,
            opts,
        })
    })
}

/// Runs the pipeline (capturing it on the first run) and gives the values at `outputs`.
#[rustler::nif(schedule = "DirtyCpu")]
fn pipeline_run(
    pipeline: PipelineRef,
    inputs: Vec<TensorRef>,
    outputs: Vec<Term>,
) -> NifResult<Vec<TensorRef>> {
    let op = "pipeline_run";
    let outputs = slots(op, outputs)?;
    guard(op, || {
        let prims = inputs
            .iter()
            .map(|t| t.get(op))
            .collect::<NifResult<Vec<_>>>()?;
        Ok(pipeline
            .run(prims, outputs)?
            .into_iter()
            .map(wrap)
            .collect())
    })
}

/// Frees the pipeline's captured launches and buffers.
#[rustler::nif]
fn pipeline_free(pipeline: PipelineRef) -> NifResult<bool> {
    guard("pipeline_free", || Ok(pipeline.free()))
}

/// Submits a replay of a captured pipeline on `inputs`; gives the command id.
#[rustler::nif]
fn submit_pipeline(env: Env, pipeline: PipelineRef, inputs: Vec<TensorRef>) -> NifResult<u64> {
    let op = "submit";
    let pid = env.pid();
    guard(op, || {
        let prims = inputs
            .iter()
            .map(|t| t.get(op))
            .collect::<NifResult<Vec<_>>>()?;
        let device = prims
            .first()
            .map(AnyPrim::device)
            .ok_or_else(|| NifError::new(op, "a replay needs its inputs", ""))?;
        command::submit_replay(pipeline.replay_work(prims)?, device, pid)
    })
}

/// Submits a kernel list: `[{name, input_slots, opts}]` over `inputs`, giving the values at
/// `outputs`; gives the command id.
#[rustler::nif]
fn submit_kernels<'a>(
    env: Env<'a>,
    calls: Vec<(String, Vec<Term<'a>>, Term<'a>)>,
    inputs: Vec<TensorRef>,
    outputs: Vec<Term<'a>>,
    device: String,
) -> NifResult<u64> {
    let op = "submit";
    let pid = env.pid();
    let mut steps = Vec::with_capacity(calls.len());
    for (name, slot_terms, opts) in calls {
        ops::kernel(&name).map_err(|e| NifError::new(op, e.reason, e.details))?;
        steps.push(Step {
            kernel: name,
            inputs: slots(op, slot_terms)?,
            opts: Opts::decode(op, opts)?,
        });
    }
    let outputs = slots(op, outputs)?;
    guard(op, || {
        let prims = inputs
            .iter()
            .map(|t| t.get(op))
            .collect::<NifResult<Vec<_>>>()?;
        let device = match prims.first() {
            Some(p) => p.device(),
            None => Dev::parse(op, &device)?,
        };
        command::submit_kernels(steps, prims, outputs, device, pid)
    })
}

/// `"pending"`, `"running"`, `"completed"` or `"failed"`.
#[rustler::nif]
fn poll(id: u64) -> NifResult<&'static str> {
    guard("poll", || command::poll(id))
}

/// Waits for command `id` (at most `timeout_ms`, or forever for a negative value) and takes
/// its outputs.
#[rustler::nif(schedule = "DirtyIo")]
fn wait(id: u64, timeout_ms: i64) -> NifResult<Vec<TensorRef>> {
    guard("wait", || {
        Ok(command::wait(id, u64::try_from(timeout_ms).ok())?
            .into_iter()
            .map(wrap)
            .collect())
    })
}

rustler::init!("Elixir.ExCubecl.Native");
