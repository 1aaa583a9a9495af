//! ExCubecl's one NIF: tensors of `Autodiff<ExCubeclBackend<R>>` (wgpu and, with the `cuda`
//! feature, CUDA) for Elixir.
//!
//! Every NIF returns `{:ok, value}` or `{:error, %{op, reason, details}}`; a panic under a NIF
//! becomes such an error ([`error::guard`]). Scheduling: NIFs that launch kernels (which may
//! compile them on first use) run on dirty CPU schedulers, NIFs that wait for the device
//! (reads, sync, device probing) on dirty IO schedulers; only the metadata NIFs (`shape`,
//! `dtype`, `device`, `free`, `kernels`), which touch no device, stay on normal schedulers.
pub mod bench;
mod buffer;
pub mod device;
mod dtype;
pub mod error;
mod ops;
pub mod opts;
pub mod tensor;

use rustler::{Binary, Env, NewBinary, Term};

use device::Dev;
use error::{NifError, NifResult, guard};
use opts::Opts;
use tensor::{AnyPrim, TensorRef, wrap};

/// `[{spec, name, kind, api}]` of this machine's devices, best first.
#[rustler::nif(schedule = "DirtyIo")]
fn devices() -> NifResult<Vec<(String, String, String, String)>> {
    guard("devices", || Ok(device::devices().into_iter().map(|d| (d.spec, d.name, d.kind.to_string(), d.api)).collect()))
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
        Ok(wrap(buffer::upload("buffer", data.as_slice().to_vec(), dims, dtype, &device)?))
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

/// `[{name, inputs, options}]` of every kernel.
#[rustler::nif]
fn kernels() -> Vec<(&'static str, &'static str, &'static str)> {
    ops::KERNELS.iter().map(|k| (k.name, k.inputs, k.options)).collect()
}

/// Runs kernel `name` on `inputs` with keyword options `opts`; kernels without inputs run on
/// `device`.
#[rustler::nif(schedule = "DirtyCpu")]
fn run_kernel(name: String, inputs: Vec<TensorRef>, opts: Term, device: String) -> NifResult<Vec<TensorRef>> {
    let op = name.as_str();
    let opts = Opts::decode(op, opts)?;
    guard(op, || {
        let prims = inputs.iter().map(|t| t.get(op)).collect::<NifResult<Vec<_>>>()?;
        let device = match prims.first() {
            Some(p) => p.device(),
            None => Dev::parse(op, &device)?,
        };
        Ok(run(op, prims, &opts, &device)?.into_iter().map(wrap).collect())
    })
}

/// Runs a kernel on primitives of one device.
///
/// Work on tensors that don't require gradients runs on the inner backend and its float
/// results are wrapped as untracked autodiff tensors: Burn's `Autodiff` registers a graph step
/// for every op, tracked or not, and cleans them only when a `backward` runs, so an inference
/// loop on it would grow without bound.
pub(crate) fn run(op: &str, inputs: Vec<AnyPrim>, opts: &Opts, device: &Dev) -> NifResult<Vec<AnyPrim>> {
    macro_rules! on {
        ($variant:ident, $B:ty, $R:ty, $d:expr) => {{
            let prims = inputs
                .into_iter()
                .map(|p| match p {
                    AnyPrim::$variant(p) => Ok(p),
                    #[allow(unreachable_patterns)]
                    other => Err(NifError::new(op, "the inputs are on different devices", format!("{} on {}, expected {}", other.describe(), other.device().spec(), device.spec()))),
                })
                .collect::<NifResult<Vec<_>>>()?;
            if let Some(p) = prims.iter().find(|p| &p.device() != $d) {
                return Err(NifError::new(op, "the inputs are on different devices", format!("{} on {:?}, expected {}", p.describe(), p.device(), device.spec())));
            }
            let max_bytes = <$R as ex_cubecl::cubecl::Runtime>::client($d).properties().memory.max_page_size;
            if prims.iter().any(tensor::is_tracked::<$B>) {
                Ok(ops::run::<$B>(op, prims, opts, $d, max_bytes)?.into_iter().map(AnyPrim::$variant).collect())
            } else {
                let inner = prims.into_iter().map(tensor::to_inner::<$B>).collect();
                let out = ops::run::<<$B as burn_backend::AutodiffBackend>::InnerBackend>(op, inner, opts, $d, max_bytes)?;
                Ok(out.into_iter().map(|p| AnyPrim::$variant(tensor::from_inner::<$B>(p))).collect())
            }
        }};
    }
    match device {
        #[cfg(feature = "wgpu")]
        Dev::Wgpu(d) => on!(Wgpu, tensor::AdWgpu, ex_cubecl::cubecl::wgpu::WgpuRuntime, d),
        #[cfg(feature = "cuda")]
        Dev::Cuda(d) => on!(Cuda, tensor::AdCuda, ex_cubecl::cubecl::cuda::CudaRuntime, d),
    }
}

/// Waits for every queued kernel of `device`; an error when the device failed.
#[rustler::nif(schedule = "DirtyIo")]
fn synchronize(device: String) -> NifResult<bool> {
    guard("synchronize", || {
        let sync = |r: Result<(), burn_backend::ExecutionError>| r.map(|()| true).map_err(|e| NifError::new("synchronize", format!("{e:?}"), "device failure"));
        match Dev::parse("synchronize", &device)? {
            #[cfg(feature = "wgpu")]
            Dev::Wgpu(d) => sync(<tensor::AdWgpu as burn_backend::Backend>::sync(&d)),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => sync(<tensor::AdCuda as burn_backend::Backend>::sync(&d)),
        }
    })
}

/// `{bytes_in_use, bytes_reserved, allocations}` of `device`'s memory pools.
#[rustler::nif(schedule = "DirtyIo")]
fn memory_info(device: String) -> NifResult<(u64, u64, u64)> {
    guard("memory_info", || {
        use ex_cubecl::cubecl::Runtime;
        let usage = match Dev::parse("memory_info", &device)? {
            #[cfg(feature = "wgpu")]
            Dev::Wgpu(d) => ex_cubecl::cubecl::wgpu::WgpuRuntime::client(&d).memory_usage(),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => ex_cubecl::cubecl::cuda::CudaRuntime::client(&d).memory_usage(),
        }
        .map_err(|e| NifError::new("memory_info", format!("{e}"), "device failure"))?;
        Ok((usage.bytes_in_use, usage.bytes_reserved, usage.number_allocs))
    })
}

/// The dtypes `device` stores and computes in.
#[rustler::nif(schedule = "DirtyIo")]
fn supported_dtypes(device: String) -> NifResult<Vec<&'static str>> {
    guard("supported_dtypes", || {
        let device = Dev::parse("supported_dtypes", &device)?;
        let supports = |dtype| match &device {
            #[cfg(feature = "wgpu")]
            Dev::Wgpu(d) => <tensor::AdWgpu as burn_backend::Backend>::supports_dtype(d, dtype),
            #[cfg(feature = "cuda")]
            Dev::Cuda(d) => <tensor::AdCuda as burn_backend::Backend>::supports_dtype(d, dtype),
        };
        Ok(dtype::DTYPES.iter().filter(|(_, d)| supports(*d)).map(|(n, _)| *n).collect())
    })
}

/// The runtimes compiled into this build.
#[rustler::nif]
fn runtimes() -> Vec<&'static str> {
    let mut out = Vec::new();
    if cfg!(feature = "cuda") {
        out.push("cuda");
    }
    if cfg!(feature = "wgpu") {
        out.push("wgpu");
    }
    out
}



rustler::init!("Elixir.ExCubecl.Native");
