//! Several processes (on one host or several), one GPU each, in one NCCL communicator: rank 0
//! makes NCCL's unique id, a launcher hands it to every process, each process joins with its
//! rank, as `torchrun` does. CUDA only; without CUDA a group of one process is all there is.
//!
//! The launcher's protocol (`scripts/launch_distributed.sh` follows it):
//! - [`RANK_ENV`] (`EX_CUBECL_RANK`): this process's rank, `0..world_size`;
//! - [`WORLD_SIZE_ENV`] (`EX_CUBECL_WORLD_SIZE`): the number of processes;
//! - [`LOCAL_RANK_ENV`] (`EX_CUBECL_LOCAL_RANK`, default: the rank): the CUDA device of this
//!   process on its host;
//! - the unique id, either in [`NCCL_ID_ENV`] (`EX_CUBECL_NCCL_ID`, 256 hex digits, from
//!   [`UniqueId::new`] on rank 0's host: `UniqueId::new()?.to_hex()`), or through the file
//!   named by [`NCCL_ID_FILE_ENV`] (`EX_CUBECL_NCCL_ID_FILE`) on a file system every process
//!   sees: rank 0 writes the id there, the others wait for it.
use std::fmt;
use std::path::Path;
use std::time::{Duration, Instant};

use burn_backend::distributed::ReduceOperation;
use burn_backend::{DeviceOps, TensorPrimitive};
use burn_tensor::Tensor;
use cubecl::Runtime;

use crate::ExCubeclBackend;
use crate::tensor::CubeTensor;

/// This process's rank.
pub const RANK_ENV: &str = "EX_CUBECL_RANK";
/// The number of processes.
pub const WORLD_SIZE_ENV: &str = "EX_CUBECL_WORLD_SIZE";
/// The CUDA device of this process on its host (default: the rank).
pub const LOCAL_RANK_ENV: &str = "EX_CUBECL_LOCAL_RANK";
/// NCCL's unique id, as 256 hex digits.
pub const NCCL_ID_ENV: &str = "EX_CUBECL_NCCL_ID";
/// A file that rank 0 writes the unique id to and the other ranks read it from.
pub const NCCL_ID_FILE_ENV: &str = "EX_CUBECL_NCCL_ID_FILE";

/// How long ranks other than 0 wait for the id file.
const ID_FILE_WAIT: Duration = Duration::from_secs(300);

/// Why a process group could not be made or used.
#[derive(Clone, Debug, PartialEq)]
pub enum DistributedError {
    /// A launcher variable is missing or malformed.
    Config(String),
    /// NCCL or CUDA failed, or is missing.
    Nccl(String),
    /// The runtime has no collective library across processes (wgpu).
    SingleProcess(String),
}

impl fmt::Display for DistributedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DistributedError::Config(m) => write!(f, "ex_cubecl: distributed: {m}"),
            DistributedError::Nccl(m) => write!(f, "ex_cubecl: distributed: NCCL: {m}"),
            DistributedError::SingleProcess(m) => write!(f, "ex_cubecl: distributed: {m}"),
        }
    }
}

impl std::error::Error for DistributedError {}

/// NCCL's unique id of a communicator: made once, by rank 0, and given to every process.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct UniqueId(pub [u8; 128]);

impl fmt::Debug for UniqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UniqueId({}...)", &self.to_hex()[..16])
    }
}

impl UniqueId {
    /// A new unique id from NCCL (it names this host's network interface for the others to
    /// connect to).
    ///
    /// # Errors
    /// Without CUDA, or where NCCL is missing.
    pub fn new() -> Result<Self, DistributedError> {
        nccl_id()
    }

    /// The id as 256 hex digits.
    pub fn to_hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The id from [`UniqueId::to_hex`]'s digits.
    ///
    /// # Errors
    /// When `text` is not 256 hex digits.
    pub fn from_hex(text: &str) -> Result<Self, DistributedError> {
        let text = text.trim();
        let bad = || DistributedError::Config(format!("an NCCL unique id is 256 hex digits, not {:?}", shorten(text)));
        if text.len() != 256 || !text.is_ascii() {
            return Err(bad());
        }
        let mut id = [0u8; 128];
        for (i, byte) in id.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
        }
        Ok(Self(id))
    }
}

fn shorten(text: &str) -> String {
    text.chars().take(40).collect()
}

/// Where this process stands in the group.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessGroupConfig {
    /// This process's rank, `0..world_size`.
    pub rank: usize,
    /// The number of processes.
    pub world_size: usize,
    /// The CUDA device of this process on its host.
    pub local_device: usize,
    /// The communicator's unique id (the same in every process).
    pub id: UniqueId,
}

impl ProcessGroupConfig {
    /// The configuration the launcher set in the environment (see the module docs). Rank 0
    /// makes the id and writes the id file when [`NCCL_ID_FILE_ENV`] is set and
    /// [`NCCL_ID_ENV`] is not; the other ranks wait up to 5 minutes for the file.
    ///
    /// # Errors
    /// When a variable is missing or malformed, or the id can be neither read nor made.
    pub fn from_env() -> Result<Self, DistributedError> {
        let number = |name: &str| -> Result<Option<usize>, DistributedError> {
            match std::env::var(name) {
                Err(_) => Ok(None),
                Ok(v) => v
                    .trim()
                    .parse()
                    .map(Some)
                    .map_err(|_| DistributedError::Config(format!("{name}={v:?} is not a number"))),
            }
        };
        let missing = |name: &str| DistributedError::Config(format!("{name} is not set (the launcher sets it)"));
        let rank = number(RANK_ENV)?.ok_or_else(|| missing(RANK_ENV))?;
        let world_size = number(WORLD_SIZE_ENV)?.ok_or_else(|| missing(WORLD_SIZE_ENV))?;
        let local_device = number(LOCAL_RANK_ENV)?.unwrap_or(rank);
        if rank >= world_size {
            return Err(DistributedError::Config(format!("{RANK_ENV}={rank} is not below {WORLD_SIZE_ENV}={world_size}")));
        }
        let id = match (std::env::var(NCCL_ID_ENV), std::env::var(NCCL_ID_FILE_ENV)) {
            (Ok(hex), _) => UniqueId::from_hex(&hex)?,
            (Err(_), Ok(file)) => id_through_file(Path::new(&file), rank)?,
            (Err(_), Err(_)) if world_size == 1 => UniqueId([0; 128]),
            (Err(_), Err(_)) => {
                return Err(DistributedError::Config(format!("neither {NCCL_ID_ENV} nor {NCCL_ID_FILE_ENV} is set")));
            }
        };
        Ok(Self { rank, world_size, local_device, id })
    }
}

/// Rank 0 makes the id and writes it to `path` (through a temporary file and a rename, so
/// that no rank reads half of it); the others wait for the file and read it.
fn id_through_file(path: &Path, rank: usize) -> Result<UniqueId, DistributedError> {
    let io = |what: &str, e: std::io::Error| DistributedError::Config(format!("{what} {}: {e}", path.display()));
    if rank == 0 {
        let id = UniqueId::new()?;
        let partial = path.with_extension("partial");
        std::fs::write(&partial, id.to_hex()).map_err(|e| io("writing", e))?;
        std::fs::rename(&partial, path).map_err(|e| io("renaming to", e))?;
        return Ok(id);
    }
    let start = Instant::now();
    loop {
        match std::fs::read_to_string(path) {
            Ok(text) => return UniqueId::from_hex(&text),
            Err(_) if start.elapsed() < ID_FILE_WAIT => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(io(&format!("rank {rank} waited {} s for", ID_FILE_WAIT.as_secs()), e)),
        }
    }
}

/// This process's membership of an NCCL communicator of `world_size` processes.
pub struct ProcessGroup {
    rank: usize,
    world_size: usize,
    local_device: usize,
    #[cfg(feature = "cuda")]
    comm: Option<nccl::Communicator>,
}

impl fmt::Debug for ProcessGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ProcessGroup {{ rank: {}, world_size: {} }}", self.rank, self.world_size)
    }
}

/// Joins the group of `config` (blocks until every process has joined).
///
/// # Errors
/// A group of more than one process without CUDA or NCCL; NCCL's or CUDA's failures.
pub fn init(config: ProcessGroupConfig) -> Result<ProcessGroup, DistributedError> {
    if config.world_size <= 1 {
        return Ok(ProcessGroup {
            rank: 0,
            world_size: 1,
            local_device: config.local_device,
            #[cfg(feature = "cuda")]
            comm: None,
        });
    }
    #[cfg(feature = "cuda")]
    {
        crate::runtime::nccl_status().map_err(DistributedError::Nccl)?;
        let comm = nccl::Communicator::join(&config)?;
        Ok(ProcessGroup { rank: config.rank, world_size: config.world_size, local_device: config.local_device, comm: Some(comm) })
    }
    #[cfg(not(feature = "cuda"))]
    Err(single_process())
}

/// [`init`] with [`ProcessGroupConfig::from_env`].
///
/// # Errors
/// See both.
pub fn init_from_env() -> Result<ProcessGroup, DistributedError> {
    init(ProcessGroupConfig::from_env()?)
}

#[cfg_attr(feature = "cuda", allow(dead_code))]
fn single_process() -> DistributedError {
    DistributedError::SingleProcess(
        "several processes need CUDA and NCCL (build with the `cuda` feature); on wgpu the scale-out is \
         single-process: several devices of one process (ex_cubecl::distributed::all_reduce, Burn's \
         DistributedBackend)"
            .into(),
    )
}

fn nccl_id() -> Result<UniqueId, DistributedError> {
    #[cfg(feature = "cuda")]
    {
        crate::runtime::nccl_status().map_err(DistributedError::Nccl)?;
        let id = cudarc::nccl::result::get_uniqueid().map_err(|e| DistributedError::Nccl(format!("ncclGetUniqueId: {e:?}")))?;
        Ok(UniqueId(id.internal.map(|c| c as u8)))
    }
    #[cfg(not(feature = "cuda"))]
    Err(single_process())
}

impl ProcessGroup {
    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of processes.
    pub fn world_size(&self) -> usize {
        self.world_size
    }

    /// The index of this process's GPU on its host (`CudaDevice::new(local_device)`).
    pub fn local_device(&self) -> usize {
        self.local_device
    }

    /// The all-reduce of `tensor` (on this process's device) with the same call of every
    /// other process: the sum or mean of all of them, on this process's device. Blocks until
    /// the result is on the device. A group of one process returns `tensor`.
    ///
    /// # Errors
    /// A tensor of another runtime than CUDA or on another device than the group's; a
    /// dtype other than f32, f16, bf16 and f64; NCCL's failures.
    pub fn all_reduce<R: Runtime, const D: usize>(
        &self,
        tensor: Tensor<ExCubeclBackend<R>, D>,
        op: ReduceOperation,
    ) -> Result<Tensor<ExCubeclBackend<R>, D>, DistributedError>
    where
        R::Device: DeviceOps,
    {
        let primitive = tensor.into_primitive().tensor();
        let reduced = self.all_reduce_primitive(primitive, op)?;
        Ok(Tensor::from_primitive(TensorPrimitive::Float(reduced)))
    }

    /// [`ProcessGroup::all_reduce`] on the backend's primitive.
    ///
    /// # Errors
    /// See [`ProcessGroup::all_reduce`].
    pub fn all_reduce_primitive<R: Runtime>(&self, tensor: CubeTensor<R>, op: ReduceOperation) -> Result<CubeTensor<R>, DistributedError> {
        #[cfg(feature = "cuda")]
        if let Some(comm) = &self.comm {
            let tensor: Box<dyn std::any::Any> = Box::new(tensor);
            let tensor = tensor.downcast::<CubeTensor<cubecl::cuda::CudaRuntime>>().map_err(|_| {
                DistributedError::Nccl(format!(
                    "all_reduce across processes takes CUDA tensors, not tensors of {}",
                    core::any::type_name::<R>()
                ))
            })?;
            let reduced: Box<dyn std::any::Any> = Box::new(comm.all_reduce(*tensor, op)?);
            return Ok(*reduced.downcast::<CubeTensor<R>>().expect("the runtime checked above"));
        }
        let _ = op;
        Ok(tensor)
    }
}

#[cfg(feature = "cuda")]
mod nccl {
    //! The NCCL communicator of one process: its own stream on its CUDA device.
    use std::mem::MaybeUninit;
    use std::sync::Mutex;

    use burn_backend::distributed::ReduceOperation;
    use burn_backend::{DType, Shape};
    use cubecl::Runtime;
    use cubecl::cuda::{CudaDevice, CudaRuntime};
    use cudarc::driver::result as driver;
    use cudarc::nccl::{result as nccl, sys};

    use super::{DistributedError, ProcessGroupConfig};
    use crate::runtime::{exact_buffer, wait};
    use crate::tensor::CubeTensor;

    /// NCCL's communicator, its stream and the CUDA context they live in.
    pub(super) struct Communicator {
        device: CudaDevice,
        raw: Mutex<Raw>,
    }

    struct Raw {
        comm: sys::ncclComm_t,
        stream: cudarc::driver::sys::CUstream,
        context: cudarc::driver::sys::CUcontext,
    }

    // SAFETY: the communicator and the stream are used under the mutex only, with the context
    // made current on the calling thread first.
    unsafe impl Send for Raw {}

    fn failed(what: &str) -> impl Fn(String) -> DistributedError + '_ {
        move |e| DistributedError::Nccl(format!("{what}: {e}"))
    }

    impl Communicator {
        /// Joins the communicator of `config` on its local device.
        pub(super) fn join(config: &ProcessGroupConfig) -> Result<Self, DistributedError> {
            let device = CudaDevice::new(config.local_device);
            // cubecl makes the device's primary context current on its own thread; the
            // communicator uses the same context.
            let _client = CudaRuntime::client(&device);
            // SAFETY: the driver is initialised before the device is looked up; the primary
            // context is retained (kept alive) for the communicator's lifetime.
            let (context, stream) = unsafe {
                driver::init().map_err(|e| failed("cuInit")(format!("{e:?}")))?;
                let cu_device = driver::device::get(config.local_device as i32)
                    .map_err(|e| failed("cuDeviceGet")(format!("device {}: {e:?}", config.local_device)))?;
                let context = driver::primary_ctx::retain(cu_device).map_err(|e| failed("cuDevicePrimaryCtxRetain")(format!("{e:?}")))?;
                driver::ctx::set_current(context).map_err(|e| failed("cuCtxSetCurrent")(format!("{e:?}")))?;
                let stream = driver::stream::create(driver::stream::StreamKind::NonBlocking)
                    .map_err(|e| failed("cuStreamCreate")(format!("{e:?}")))?;
                (context, stream)
            };
            let id = sys::ncclUniqueId { internal: config.id.0.map(|b| b as _) };
            let mut comm = MaybeUninit::uninit();
            // SAFETY: `comm` is written by ncclCommInitRank on success, which makes
            // `assume_init` valid; every rank passes the same id and world size.
            let comm = unsafe {
                nccl::comm_init_rank(comm.as_mut_ptr(), config.world_size as i32, id, config.rank as i32).map_err(|e| {
                    failed("ncclCommInitRank")(format!("rank {} of {}: {e:?}", config.rank, config.world_size))
                })?;
                comm.assume_init()
            };
            Ok(Self { device, raw: Mutex::new(Raw { comm, stream, context }) })
        }

        /// The all-reduce of `tensor` with the other processes' calls; waits for the result.
        pub(super) fn all_reduce(&self, tensor: CubeTensor<CudaRuntime>, op: ReduceOperation) -> Result<CubeTensor<CudaRuntime>, DistributedError> {
            if tensor.device != self.device {
                return Err(DistributedError::Nccl(format!(
                    "the tensor is on {:?}, the process group's device is {:?}",
                    tensor.device, self.device
                )));
            }
            let dtype = match tensor.dtype {
                DType::F32 => sys::ncclDataType_t::ncclFloat32,
                DType::F16 => sys::ncclDataType_t::ncclFloat16,
                DType::BF16 => sys::ncclDataType_t::ncclBfloat16,
                DType::F64 => sys::ncclDataType_t::ncclFloat64,
                other => {
                    return Err(DistributedError::Nccl(format!(
                        "all_reduce: dtype {other:?} (shape {:?}) is not supported: f32, f16, bf16 and f64 are",
                        tensor.dims()
                    )));
                }
            };
            let op = match op {
                ReduceOperation::Sum => sys::ncclRedOp_t::ncclSum,
                ReduceOperation::Mean => sys::ncclRedOp_t::ncclAvg,
            };
            let source = exact_buffer(tensor, "all_reduce");
            let count = source.num_elements();
            let out = CubeTensor::empty(&source.client, &source.device, Shape::from(source.dims().to_vec()), source.dtype);
            // NCCL reads the source on its own stream: the work that writes it must be done.
            wait::sync(&source.client).map_err(|e| failed("waiting for the tensor")(e.to_string()))?;
            let src = source.client.get_resource(source.handle.clone()).map_err(|e| failed("source buffer")(format!("{e:?}")))?;
            let dst = out.client.get_resource(out.handle.clone()).map_err(|e| failed("output buffer")(format!("{e:?}")))?;
            let raw = self.raw.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: both pointers are live device buffers of `count` elements of the dtype
            // on this communicator's device (held by `src` and `dst`); the stream and the
            // communicator belong to the context made current here; the stream is waited for
            // before the buffers are released.
            unsafe {
                driver::ctx::set_current(raw.context).map_err(|e| failed("cuCtxSetCurrent")(format!("{e:?}")))?;
                nccl::all_reduce(
                    src.resource().ptr as *const _,
                    dst.resource().ptr as *mut _,
                    count,
                    dtype,
                    op,
                    raw.comm,
                    raw.stream as _,
                )
                .map_err(|e| failed("ncclAllReduce")(format!("{e:?}")))?;
                driver::stream::synchronize(raw.stream).map_err(|e| failed("cuStreamSynchronize")(format!("{e:?}")))?;
            }
            drop((src, dst));
            Ok(out)
        }
    }

    impl Drop for Communicator {
        fn drop(&mut self) {
            let raw = self.raw.get_mut().unwrap_or_else(|e| e.into_inner());
            // SAFETY: nothing uses the communicator or the stream after this; errors at
            // teardown are ignored (the process is leaving the group).
            unsafe {
                let _ = driver::ctx::set_current(raw.context);
                let _ = nccl::comm_destroy(raw.comm);
                let _ = driver::stream::destroy(raw.stream);
            }
        }
    }
}
