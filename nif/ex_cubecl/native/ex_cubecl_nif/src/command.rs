//! Asynchronous commands: a pipeline replay or a kernel list, run on the device's
//! `CommandQueue` (one worker thread per device; commands run in submission order). The
//! caller gets an id at once; `poll` says where the command stands, `wait` takes its outcome,
//! and the submitting process receives `{:ex_cubecl, id, {:ok, buffers} | {:error, error}}`
//! when the command ends.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use burn_backend::DeviceOps;
use ex_cubecl::cubecl::Runtime;
use ex_cubecl::runtime::{CommandId, CommandQueue, CommandStatus, Pipeline, Work};
use ex_cubecl::tensor::CubeTensor;
use rustler::{Encoder, LocalPid, OwnedEnv};

use crate::device::Dev;
use crate::error::{NifError, NifResult, on_nif_stream};
use crate::pipeline::{Inner, Slot, Step, from_code, run_steps, to_code};
use crate::tensor::{AnyPrim, Prim, TensorRef, wrap};

/// A captured pipeline with the inputs of one replay and its outputs' kind codes.
pub enum Replay {
    Wgpu(
        Arc<Pipeline<ex_cubecl::cubecl::wgpu::WgpuRuntime>>,
        Vec<CubeTensor<ex_cubecl::cubecl::wgpu::WgpuRuntime>>,
        Vec<u8>,
    ),
    #[cfg(feature = "cuda")]
    Cuda(
        Arc<Pipeline<ex_cubecl::cubecl::cuda::CudaRuntime>>,
        Vec<CubeTensor<ex_cubecl::cubecl::cuda::CudaRuntime>>,
        Vec<u8>,
    ),
}

/// A submitted command: its device, its id in the device's queue, its outputs' kind codes.
struct Entry {
    device: Dev,
    id: CommandId,
    kinds: Arc<Mutex<Vec<u8>>>,
}

static NEXT: AtomicU64 = AtomicU64::new(1);
static COMMANDS: Mutex<Option<HashMap<u64, Entry>>> = Mutex::new(None);

mod atoms {
    rustler::atoms! { ex_cubecl, ok, error }
}

type Wrap<R> = fn(Prim<Inner<R>>) -> AnyPrim;

fn wrap_wgpu(p: Prim<Inner<ex_cubecl::cubecl::wgpu::WgpuRuntime>>) -> AnyPrim {
    AnyPrim::Wgpu(crate::tensor::from_inner(p))
}

#[cfg(feature = "cuda")]
fn wrap_cuda(p: Prim<Inner<ex_cubecl::cubecl::cuda::CudaRuntime>>) -> AnyPrim {
    AnyPrim::Cuda(crate::tensor::from_inner(p))
}

/// The prims of a finished command's tensors.
fn prims<R: Runtime>(tensors: &[CubeTensor<R>], kinds: &[u8], wrap_prim: Wrap<R>) -> Vec<AnyPrim>
where
    R::Device: DeviceOps,
{
    tensors
        .iter()
        .zip(kinds)
        .map(|(t, &k)| wrap_prim(from_code(t.clone(), k)))
        .collect()
}

/// Queues `work` on `device`'s queue; `pid` gets the outcome. Gives the command's id.
fn enqueue<R: Runtime>(
    device: &R::Device,
    dev: Dev,
    work: Work<R>,
    kinds: Arc<Mutex<Vec<u8>>>,
    pid: LocalPid,
    wrap_prim: Wrap<R>,
) -> u64
where
    R::Device: DeviceOps,
{
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    let queue = CommandQueue::<R>::for_device(device);
    let k = kinds.clone();
    // Registered before the callback can run, so `poll` and `wait` find the command.
    let mut commands = COMMANDS.lock().unwrap_or_else(|e| e.into_inner());
    let queue_id = queue.submit_with_callback(work, move |_, outcome| {
        let result = match outcome {
            Ok(tensors) => Ok(prims(
                tensors,
                &k.lock().unwrap_or_else(|e| e.into_inner()),
                wrap_prim,
            )),
            Err(e) => Err(NifError::new(
                "command",
                e.to_string(),
                format!("command {id}"),
            )),
        };
        let mut env = OwnedEnv::new();
        let _ = env.send_and_clear(&pid, |env| {
            let result = match result {
                Ok(prims) => (
                    atoms::ok(),
                    prims.into_iter().map(wrap).collect::<Vec<TensorRef>>(),
                )
                    .encode(env),
                Err(e) => (atoms::error(), e).encode(env),
            };
            (atoms::ex_cubecl(), id, result).encode(env)
        });
    });
    commands.get_or_insert_with(HashMap::new).insert(
        id,
        Entry {
            device: dev,
            id: queue_id,
            kinds,
        },
    );
    id
}

/// Queues `work` on `device`'s queue without registering it for `poll` and `wait`: `pid`
/// gets `{:ex_cubecl, id, term}`, `term` made by `reply` from the outcome. Gives the id.
pub fn submit_reply<R: Runtime>(
    device: &R::Device,
    work: Work<R>,
    pid: LocalPid,
    reply: impl for<'a> FnOnce(rustler::Env<'a>, Result<&[CubeTensor<R>], String>) -> rustler::Term<'a> + Send + 'static,
) -> u64
where
    R::Device: DeviceOps,
{
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    CommandQueue::<R>::for_device(device).submit_with_callback(work, move |_, outcome| {
        let mut env = OwnedEnv::new();
        let _ = env.send_and_clear(&pid, |env| {
            let term = reply(env, outcome.as_ref().map(Vec::as_slice).map_err(|e| e.to_string()));
            (atoms::ex_cubecl(), id, term).encode(env)
        });
    });
    id
}

/// Submits a kernel list: `steps` over `inputs` (slots `Input(i)` and earlier steps'
/// outputs), giving the values at `outs`.
pub fn submit_kernels(
    steps: Vec<Step>,
    inputs: Vec<AnyPrim>,
    outs: Vec<Slot>,
    device: Dev,
    pid: LocalPid,
) -> NifResult<u64> {
    macro_rules! go {
        ($variant:ident, $R:ty, $d:expr, $wrap:expr) => {{
            let inner: Vec<_> = crate::prims_of!(inputs, $variant, "submit")?
                .into_iter()
                .map(crate::tensor::to_inner)
                .collect();
            let kinds = Arc::new(Mutex::new(Vec::new()));
            let (k, d) = (kinds.clone(), $d.clone());
            let work = Work::<$R>::ops(move || {
                // On the NIF's stream, as every other call (see `error::guard`).
                let outs = on_nif_stream(|| run_steps::<$R>(&d, &steps, inner, &outs))
                    .unwrap_or_else(|e| panic!("{e}"));
                let (tensors, codes): (Vec<_>, Vec<_>) = outs.into_iter().map(to_code).unzip();
                *k.lock().unwrap_or_else(|e| e.into_inner()) = codes;
                tensors
            });
            Ok(enqueue::<$R>($d, device.clone(), work, kinds, pid, $wrap))
        }};
    }
    match &device {
        Dev::Wgpu(d) => go!(Wgpu, ex_cubecl::cubecl::wgpu::WgpuRuntime, d, wrap_wgpu),
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => go!(Cuda, ex_cubecl::cubecl::cuda::CudaRuntime, d, wrap_cuda),
    }
}

/// Submits a replay of a captured pipeline.
pub fn submit_replay(replay: Replay, device: Dev, pid: LocalPid) -> NifResult<u64> {
    match (replay, &device) {
        (Replay::Wgpu(p, inputs, codes), Dev::Wgpu(d)) => Ok(enqueue(
            d,
            device.clone(),
            Work::replay(&p, inputs),
            Arc::new(Mutex::new(codes)),
            pid,
            wrap_wgpu,
        )),
        #[cfg(feature = "cuda")]
        (Replay::Cuda(p, inputs, codes), Dev::Cuda(d)) => Ok(enqueue(
            d,
            device.clone(),
            Work::replay(&p, inputs),
            Arc::new(Mutex::new(codes)),
            pid,
            wrap_cuda,
        )),
        #[allow(unreachable_patterns)]
        _ => Err(NifError::new(
            "submit",
            "the pipeline is on another runtime than its inputs",
            device.spec(),
        )),
    }
}

fn status_of(id: u64) -> NifResult<(Dev, CommandId, Result<CommandStatus, String>)> {
    let commands = COMMANDS.lock().unwrap_or_else(|e| e.into_inner());
    let entry = commands.as_ref().and_then(|c| c.get(&id)).ok_or_else(|| {
        NifError::new(
            "poll",
            format!("command {id} is unknown"),
            "never submitted, or already waited for",
        )
    })?;
    let status = match &entry.device {
        Dev::Wgpu(d) => {
            CommandQueue::<ex_cubecl::cubecl::wgpu::WgpuRuntime>::for_device(d).poll(entry.id)
        }
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => {
            CommandQueue::<ex_cubecl::cubecl::cuda::CudaRuntime>::for_device(d).poll(entry.id)
        }
    };
    Ok((
        entry.device.clone(),
        entry.id,
        status.map_err(|e| e.to_string()),
    ))
}

/// `"pending"`, `"running"`, `"completed"` or `"failed"`.
pub fn poll(id: u64) -> NifResult<&'static str> {
    let (_, _, status) = status_of(id)?;
    Ok(
        match status.map_err(|e| NifError::new("poll", e, format!("command {id}")))? {
            CommandStatus::Pending => "pending",
            CommandStatus::Running => "running",
            CommandStatus::Completed => "completed",
            CommandStatus::Failed(_) => "failed",
        },
    )
}

/// Waits up to `timeout_ms` (forever when `None`) for command `id` and takes its outcome.
pub fn wait(id: u64, timeout_ms: Option<u64>) -> NifResult<Vec<AnyPrim>> {
    let deadline = timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
    loop {
        let (_, _, status) = status_of(id)?;
        match status {
            Ok(CommandStatus::Completed | CommandStatus::Failed(_)) | Err(_) => break,
            Ok(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                return Err(NifError::new(
                    "wait",
                    format!(
                        "command {id} did not finish within {} ms",
                        timeout_ms.unwrap_or(0)
                    ),
                    "it still runs; wait again or poll",
                ));
            }
            Ok(_) => std::thread::sleep(Duration::from_micros(200)),
        }
    }
    let entry = COMMANDS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|c| c.remove(&id))
        .ok_or_else(|| {
            NifError::new(
                "wait",
                format!("command {id} is unknown"),
                "already waited for",
            )
        })?;
    let kinds = entry
        .kinds
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    let failed = |e: ex_cubecl::runtime::CommandError| {
        NifError::new("wait", e.to_string(), format!("command {id}"))
    };
    match &entry.device {
        Dev::Wgpu(d) => {
            let out = CommandQueue::<ex_cubecl::cubecl::wgpu::WgpuRuntime>::for_device(d)
                .wait(entry.id)
                .map_err(failed)?;
            Ok(prims(&out, &kinds, wrap_wgpu))
        }
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => {
            let out = CommandQueue::<ex_cubecl::cubecl::cuda::CudaRuntime>::for_device(d)
                .wait(entry.id)
                .map_err(failed)?;
            Ok(prims(&out, &kinds, wrap_cuda))
        }
    }
}
