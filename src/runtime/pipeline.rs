//! Pipelines: capture the kernel launches of a closure of backend ops once, replay them on
//! new inputs many times.
//!
//! # How it works
//!
//! Every kernel launch of the backend goes through the one launcher
//! ([`launch`](super::launch)), as a closure that owns what it binds: the tensors (handle
//! clones) and the scalars, by value. While [`Pipeline::capture`] runs its closure, a
//! thread-local recording is active: the launcher runs each launch as usual and also keeps
//! it, with its cube count and cube dimension. Replaying a pipeline calls those launches
//! again in order, without the host-side logic of the ops that made them (Burn's autodiff
//! graph, shape checks, broadcasting, layout decisions, allocation).
//!
//! Buffers:
//! - **Inputs.** At capture, each input is copied into a contiguous buffer owned by the
//!   pipeline, and the closure sees those buffers. [`Pipeline::run`] checks each new input
//!   (shape, dtype, device) and copies it into the same buffer, so the caller's tensors are
//!   never written and may be views of any layout.
//! - **Intermediates** are the buffers the ops allocated during the capture. The recorded
//!   launches hold them, so they live as long as the pipeline and every replay reuses them:
//!   they are the pipeline's pool, and a replay allocates nothing for them. Buffers that the
//!   closure uploaded (constants made with `from_data`) are held the same way and keep their
//!   values; no op of this backend writes into a buffer that another tensor still holds.
//! - **Outputs.** After a replay, each output is copied into a fresh contiguous tensor that
//!   the caller owns, so the next replay cannot overwrite what the caller holds.
//!
//! Rules for the captured closure:
//! - It may run any backend ops: float, int, bool, module ops, and `Autodiff` ops including
//!   `backward` (wrap the inputs with `Tensor::from_inner`); uploads are fine and become
//!   constants of the pipeline.
//! - It must not read data back to the host (`into_data`, `into_scalar`, `to_device` across
//!   devices, ...): the values would be those of the capture, which a replay cannot
//!   reproduce. Such a read panics inside the closure and [`Pipeline::capture`] returns
//!   [`PipelineError::HostRead`].
//! - Host-side values are frozen at capture: scalars (a learning rate or a step count given
//!   as an `f64` is replayed with its capture value: pass values that change as input
//!   tensors), branches on shapes, the matmul precision, the choice of kernel. Only launches
//!   made on the capturing thread are recorded.
//! - Random ops draw their key when their kernel launches, so **every replay draws fresh
//!   random numbers** (dropout masks change from step to step, as in eager training), and
//!   after the same `Backend::seed` a replay repeats the numbers of an eager run.
//!
//! Costs: a replay launches one copy kernel per input and per output besides the recorded
//! launches, and a pipeline keeps every intermediate of the captured closure alive at once
//! (eager execution frees and reuses them within the step).
//!
//! Runs of one pipeline are serialised (a pipeline is `Send + Sync` and can be shared
//! through an `Arc`, e.g. with a [`CommandQueue`](super::CommandQueue)); a pipeline cannot
//! run while a capture is active on the same thread.
//!
//! # Example
//!
//! A training step of a linear model, `y ≈ x·w`, with plain gradient descent, on Burn
//! tensors; the step is captured once and replayed on new batches:
//!
//! ```
//! use burn_autodiff::Autodiff;
//! use burn_tensor::{Tensor, TensorData};
//! use ex_cubecl::runtime::{Pipeline, from_cube, to_cube};
//! use ex_cubecl::ExWgpu;
//!
//! type B = ExWgpu;
//! type A = Autodiff<ExWgpu>;
//! let device = Default::default();
//! let x = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]), &device);
//! let y = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2]), &device);
//! let w = Tensor::<B, 2>::zeros([2, 2], &device);
//!
//! let step = Pipeline::capture(&device, &[to_cube(x.clone()), to_cube(y.clone()), to_cube(w)], |inputs| {
//!     let [x, y, w] = <[_; 3]>::try_from(inputs).unwrap();
//!     let (x, y) = (from_cube::<_, 2, _>(x), from_cube::<_, 2, _>(y));
//!     let w = Tensor::<A, 2>::from_inner(from_cube(w)).require_grad();
//!     let loss = (Tensor::<A, 2>::from_inner(x).matmul(w.clone()) - Tensor::from_inner(y))
//!         .powi_scalar(2)
//!         .mean();
//!     let grads = loss.backward();
//!     let grad = w.grad(&grads).unwrap();
//!     let w = w.inner() - grad.mul_scalar(0.1);
//!     vec![to_cube(loss.inner()), to_cube(w)]
//! })
//! .unwrap();
//!
//! // Replays: the outputs are fresh tensors; feed the updated weights back in.
//! let mut w = Tensor::<B, 2>::zeros([2, 2], &device);
//! let mut losses = Vec::new();
//! for _ in 0..3 {
//!     let outputs = step.run(&[to_cube(x.clone()), to_cube(y.clone()), to_cube(w)]).unwrap();
//!     losses.push(from_cube::<_, 1, burn_tensor::Float>(outputs[0].clone()).into_scalar());
//!     w = from_cube(outputs[1].clone());
//! }
//! assert!(losses[2] < losses[0]);
//!
//! // New inputs of another shape are refused, naming the input and both shapes.
//! let wrong = Tensor::<B, 2>::zeros([3, 2], &device);
//! let err = step.run(&[to_cube(wrong), to_cube(y), to_cube(w)]).unwrap_err();
//! assert!(err.to_string().contains("input 0"));
//! ```
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use burn_backend::{DType, DeviceOps, TensorMetadata};
use burn_backend::tensor::{Bool, Float, Int};
use burn_backend::TensorPrimitive;
use burn_tensor::{BasicOps, Tensor};
use cubecl::Runtime;
use cubecl::device::Device;
use cubecl::prelude::ComputeClient;
use cubecl::stream_id::StreamId;

use super::capture::{self, RecordedLaunch};
use super::launcher::replay;
use crate::backend::ExCubeclBackend;
use super::Layout;
use crate::launch::copy::copy_into;
use crate::tensor::CubeTensor;

/// Why a capture or a run failed.
#[derive(Clone, Debug, PartialEq)]
pub enum PipelineError {
    /// A capture was started while another one is active on this thread.
    NestedCapture,
    /// The captured closure read data back to the host (`op` did).
    HostRead {
        /// The operation that read, e.g. `into_data`.
        op: String,
    },
    /// The captured closure panicked.
    CapturePanicked {
        /// The panic message.
        message: String,
    },
    /// A pipeline was run while a capture is active on this thread.
    RunDuringCapture,
    /// An input is on another device than the pipeline.
    WrongDevice {
        /// Position of the input.
        index: usize,
        /// The pipeline's device.
        expected: String,
        /// The input's device.
        got: String,
    },
    /// A run got another number of inputs than the capture.
    InputCount {
        /// Inputs the pipeline was captured with.
        expected: usize,
        /// Inputs given.
        got: usize,
    },
    /// A run's input differs in shape or dtype from the capture's.
    InputMismatch {
        /// Position of the input.
        index: usize,
        /// Shape at capture.
        expected_shape: Vec<usize>,
        /// Dtype at capture.
        expected_dtype: DType,
        /// Shape given.
        got_shape: Vec<usize>,
        /// Dtype given.
        got_dtype: DType,
    },
    /// A replay panicked (a device error).
    ReplayPanicked {
        /// The panic message.
        message: String,
    },
}

impl fmt::Display for PipelineError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NestedCapture => {
                write!(f, "ex_cubecl: pipeline capture: another capture is active on this thread; captures do not nest")
            }
            Self::HostRead { op } => write!(
                f,
                "ex_cubecl: pipeline capture: {op} reads data back to the host, which a pipeline cannot replay; \
                 return the tensor as an output of the captured closure instead"
            ),
            Self::CapturePanicked { message } => write!(f, "ex_cubecl: pipeline capture: the closure panicked: {message}"),
            Self::RunDuringCapture => {
                write!(f, "ex_cubecl: pipeline run: cannot run a pipeline while a capture is active on this thread")
            }
            Self::WrongDevice { index, expected, got } => {
                write!(f, "ex_cubecl: pipeline: input {index} is on device {got}, but the pipeline is on {expected}")
            }
            Self::InputCount { expected, got } => {
                write!(f, "ex_cubecl: pipeline run: got {got} inputs, but the pipeline was captured with {expected}")
            }
            Self::InputMismatch { index, expected_shape, expected_dtype, got_shape, got_dtype } => write!(
                f,
                "ex_cubecl: pipeline run: input {index} has shape {got_shape:?} ({got_dtype:?}), but the pipeline \
                 was captured with shape {expected_shape:?} ({expected_dtype:?})"
            ),
            Self::ReplayPanicked { message } => write!(f, "ex_cubecl: pipeline run: the replay failed: {message}"),
        }
    }
}

impl std::error::Error for PipelineError {}

/// The recorded launches of a closure of backend ops, replayable on new inputs of the same
/// shapes and dtypes (see the [module docs](self)).
pub struct Pipeline<R: Runtime> {
    device: R::Device,
    client: ComputeClient<R>,
    /// Pipeline-owned contiguous input buffers, as the closure saw them.
    inputs: Vec<CubeTensor<R>>,
    /// The closure's outputs: views of intermediates, inputs or constants.
    outputs: Vec<CubeTensor<R>>,
    /// The launches; the lock serialises runs.
    replay: Mutex<Replayer>,
}

struct Replayer {
    launches: Vec<RecordedLaunch>,
    /// The stream (thread) of the last capture or run.
    stream: StreamId,
}

impl<R: Runtime> fmt::Debug for Pipeline<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("device", &self.device)
            .field("inputs", &self.input_specs())
            .field("outputs", &self.output_specs())
            .field("launches", &self.num_launches())
            .finish()
    }
}

impl<R: Runtime> Pipeline<R> {
    /// Runs `f` once on `device` with copies of `inputs`, recording every kernel launch, and
    /// gives the pipeline. `f` receives the inputs (in pipeline-owned buffers) and returns
    /// the outputs.
    ///
    /// # Errors
    /// When `f` panics or reads data back to the host (the capture state is cleared either
    /// way), when an input is on another device, or when a capture is already active on this
    /// thread.
    pub fn capture<F>(device: &R::Device, inputs: &[CubeTensor<R>], f: F) -> Result<Self, PipelineError>
    where
        F: FnOnce(Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>>,
    {
        Self::capture_with_outputs(device, inputs, f).map(|(pipeline, _)| pipeline)
    }

    /// [`Pipeline::capture`], also giving the outputs of the capture's own run (fresh
    /// contiguous tensors, as [`Pipeline::run`] gives).
    ///
    /// # Errors
    /// As [`Pipeline::capture`].
    pub fn capture_with_outputs<F>(
        device: &R::Device,
        inputs: &[CubeTensor<R>],
        f: F,
    ) -> Result<(Self, Vec<CubeTensor<R>>), PipelineError>
    where
        F: FnOnce(Vec<CubeTensor<R>>) -> Vec<CubeTensor<R>>,
    {
        if capture::is_capturing() {
            return Err(PipelineError::NestedCapture);
        }
        check_devices(device, inputs)?;
        let client = super::DeviceContext::client::<R>(device);
        let owned: Vec<CubeTensor<R>> = inputs.iter().map(fresh_copy).collect();
        let seen = owned.clone();

        if !capture::begin() {
            return Err(PipelineError::NestedCapture);
        }
        // A panic in `f` is caught here, so the capture state is cleared however `f` leaves.
        let result = catch_unwind(AssertUnwindSafe(|| f(seen)));
        let recording = capture::end().unwrap_or_default();

        let outputs = match result {
            Ok(outputs) => outputs,
            Err(payload) => {
                return Err(match recording.host_read {
                    Some(op) => PipelineError::HostRead { op },
                    None => PipelineError::CapturePanicked { message: panic_message(payload.as_ref()) },
                });
            }
        };
        if let Some(op) = recording.host_read {
            // The closure caught the read's panic itself; the capture is still unusable.
            return Err(PipelineError::HostRead { op });
        }
        let fresh = outputs.iter().map(fresh_copy).collect();
        let pipeline = Self {
            device: device.clone(),
            client,
            inputs: owned,
            outputs,
            replay: Mutex::new(Replayer { launches: recording.launches, stream: StreamId::current() }),
        };
        Ok((pipeline, fresh))
    }

    /// Replays the recorded launches on `inputs` (same count, shapes, dtypes and device as at
    /// capture; any layout) and gives fresh output tensors.
    ///
    /// # Errors
    /// When an input doesn't match (the error names the input and both shapes and dtypes),
    /// when a capture is active on this thread, or when the device fails.
    pub fn run(&self, inputs: &[CubeTensor<R>]) -> Result<Vec<CubeTensor<R>>, PipelineError> {
        if capture::is_capturing() {
            return Err(PipelineError::RunDuringCapture);
        }
        if inputs.len() != self.inputs.len() {
            return Err(PipelineError::InputCount { expected: self.inputs.len(), got: inputs.len() });
        }
        check_devices(&self.device, inputs)?;
        for (index, (new, owned)) in inputs.iter().zip(&self.inputs).enumerate() {
            if new.dims() != owned.dims() || new.dtype != owned.dtype {
                return Err(PipelineError::InputMismatch {
                    index,
                    expected_shape: owned.dims().to_vec(),
                    expected_dtype: owned.dtype,
                    got_shape: new.dims().to_vec(),
                    got_dtype: new.dtype,
                });
            }
        }
        let mut replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        catch_unwind(AssertUnwindSafe(|| {
            self.align_streams(&mut replayer);
            for (new, owned) in inputs.iter().zip(&self.inputs) {
                copy_to(new, owned);
            }
            for launch in &replayer.launches {
                replay(launch);
            }
            self.outputs.iter().map(fresh_copy).collect()
        }))
        .map_err(|payload| PipelineError::ReplayPanicked { message: panic_message(payload.as_ref()) })
    }

    /// On runtimes with a stream per thread (CUDA), a buffer's uses are ordered by the
    /// stream that allocated it only. A run from another thread than the last one first
    /// waits for the last one's stream, so that the two runs' uses of the pipeline's buffers
    /// cannot overlap.
    fn align_streams(&self, replayer: &mut Replayer) {
        let current = StreamId::current();
        if replayer.stream != current {
            let mut client = self.client.clone();
            // SAFETY: the client only syncs the other stream; the pipeline's lock keeps any
            // other run of this pipeline from enqueueing on the buffers meanwhile.
            unsafe { client.set_stream(replayer.stream) };
            if let Err(e) = cubecl::future::block_on(client.sync()) {
                panic!("ex_cubecl: pipeline run: syncing the previous run's stream: {e:?}");
            }
            replayer.stream = current;
        }
    }

    /// The device the pipeline runs on.
    pub fn device(&self) -> &R::Device {
        &self.device
    }

    /// Number of kernel launches a run replays (input and output copies aside).
    pub fn num_launches(&self) -> usize {
        self.replay.lock().unwrap_or_else(|e| e.into_inner()).launches.len()
    }

    /// The operation of each recorded launch, in order.
    pub fn ops(&self) -> Vec<String> {
        let replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        replayer.launches.iter().map(|l| l.op.clone()).collect()
    }

    /// Shape and dtype of each input.
    pub fn input_specs(&self) -> Vec<(Vec<usize>, DType)> {
        self.inputs.iter().map(|t| (t.dims().to_vec(), t.dtype)).collect()
    }

    /// Shape and dtype of each output.
    pub fn output_specs(&self) -> Vec<(Vec<usize>, DType)> {
        self.outputs.iter().map(|t| (t.dims().to_vec(), t.dtype)).collect()
    }
}

/// Copies `src` (any layout) into `dst` (contiguous from its start; same shape and dtype),
/// as a flat copy when `src` is contiguous too.
fn copy_to<R: Runtime>(src: &CubeTensor<R>, dst: &CubeTensor<R>) {
    let flat = |layout: &Layout| {
        let mut out = Layout::contiguous(burn_backend::Shape::from(vec![layout.num_elements()]));
        out.offset = layout.offset;
        out
    };
    if src.layout.is_contiguous() {
        copy_into(src, &flat(&src.layout), 0, dst, &flat(&dst.layout));
    } else {
        copy_into(src, &src.layout, 0, dst, &dst.layout);
    }
}

/// A fresh contiguous copy of `t`.
fn fresh_copy<R: Runtime>(t: &CubeTensor<R>) -> CubeTensor<R> {
    let out = CubeTensor::empty(&t.client, &t.device, t.layout.shape.clone(), t.dtype);
    copy_to(t, &out);
    out
}

fn check_devices<R: Runtime>(device: &R::Device, inputs: &[CubeTensor<R>]) -> Result<(), PipelineError> {
    for (index, t) in inputs.iter().enumerate() {
        if t.device.to_id() != device.to_id() {
            return Err(PipelineError::WrongDevice { index, expected: format!("{device:?}"), got: format!("{:?}", t.device) });
        }
    }
    Ok(())
}

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}

/// Burn tensor kinds whose tensors on [`ExCubeclBackend`] convert to and from the
/// [`CubeTensor`] primitive that pipelines and command queues take: `Float`, `Int` and
/// `Bool`.
pub trait CubeKind<R: Runtime>: BasicOps<ExCubeclBackend<R>>
where
    R::Device: DeviceOps,
{
    /// The primitive of a tensor of this kind.
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R>;
    /// A tensor of this kind over `tensor`.
    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive;
}

impl<R: Runtime> CubeKind<R> for Float
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        match primitive {
            TensorPrimitive::Float(t) => t,
            TensorPrimitive::QFloat(q) => panic!(
                "ex_cubecl: pipeline: quantized tensor of shape {:?} ({:?}) cannot be a pipeline input or output; dequantize it first",
                q.shape().to_vec(),
                q.dtype()
            ),
        }
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        TensorPrimitive::Float(tensor)
    }
}

impl<R: Runtime> CubeKind<R> for Int
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        primitive
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        tensor
    }
}

impl<R: Runtime> CubeKind<R> for Bool
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        primitive
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        tensor
    }
}

/// The primitive of a Burn tensor on [`ExCubeclBackend`] (a cheap handle move).
///
/// # Panics
/// For quantized float tensors.
pub fn to_cube<R: Runtime, const D: usize, K: CubeKind<R>>(tensor: Tensor<ExCubeclBackend<R>, D, K>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    K::into_cube(tensor.into_primitive())
}

/// A Burn tensor of rank `D` and kind `K` over `tensor`.
///
/// # Panics
/// When `tensor`'s rank is not `D`.
pub fn from_cube<R: Runtime, const D: usize, K: CubeKind<R>>(tensor: CubeTensor<R>) -> Tensor<ExCubeclBackend<R>, D, K>
where
    R::Device: DeviceOps,
{
    if tensor.layout.rank() != D {
        panic!(
            "ex_cubecl: from_cube: tensor of shape {:?} ({:?}) has rank {}, not {D}",
            tensor.dims(),
            tensor.dtype,
            tensor.layout.rank()
        );
    }
    Tensor::from_primitive(K::from_cube(tensor))
}
