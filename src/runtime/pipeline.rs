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
//!   (shape, dtype, device). One that is contiguous from its buffer's start is *bound*: the
//!   replayed launches read the caller's buffer in place of the pipeline's, with no copy.
//!   One of any other layout is copied into the pipeline's buffer. Either way the caller's
//!   tensors are never written.
//! - **Intermediates** are the buffers the ops allocated during the capture. The recorded
//!   launches hold them, so they live as long as the pipeline and every replay reuses them:
//!   they are the pipeline's pool, and a replay allocates nothing for them. Buffers that the
//!   closure uploaded (constants made with `from_data`) are held the same way and keep their
//!   values; no op of this backend writes into a buffer that another tensor still holds.
//! - **Outputs** are fresh tensors that the caller owns, so the next replay cannot overwrite
//!   what the caller holds. An output that views an intermediate is written there directly:
//!   the run binds that intermediate's buffer to a fresh one, which the recorded launches
//!   write and the caller gets. An output that views a bound input is a view of the
//!   caller's tensor. Others (views of the state or of constants) are copied out.
//! - **State** ([`Pipeline::capture_with_state`]): what a step reads and replaces, such as
//!   parameters, optimizer moments and a step count. It is copied once into contiguous
//!   buffers that the pipeline keeps; the closure gets them besides the inputs and returns
//!   the new state besides the outputs (as many tensors, each of its state's shape and
//!   dtype). After each run each state buffer holds the new state: a new state that *is* its
//!   buffer (whole, as the closure got it) costs nothing, any other is copied into it after
//!   the outputs are copied out (a new state that shares memory with a buffer that another
//!   copy writes, e.g. two state tensors that swap, is copied aside first). The capture runs
//!   the step once like any capture, so the state after `capture_with_state` is one step
//!   on. [`Pipeline::state`] and [`Pipeline::set_state`] copy the state out and in (e.g. a
//!   checkpoint, or the state before the capture's step).
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
//!   tensors or keep them in the state), branches on shapes, the matmul precision, the
//!   choice of kernel. Only launches made on the capturing thread are recorded. The fused
//!   Adam takes its step count from the device for this ([`AdamTime::Device`] with
//!   [`next_step_count`] on a count kept in the state); its learning rate stays frozen.
//! - State is donated to the step (as JAX's `donate_argnums`): the fused optimizers
//!   ([`sgd_step`], [`adam_step`], [`next_step_count`]) write a state buffer they get whole
//!   in place, during the capture and then on every run, with no copy. Once an op has
//!   updated a state tensor in place, the closure must not use that tensor's old value: a
//!   read of it after the update reads the new value. The capture refuses an output or
//!   another state's new value that shares the buffer of a state updated in place
//!   ([`PipelineError::DonatedStateAliased`]); other reads of the old value go unseen. A
//!   state also can't be "none yet": a fused update given state reads it (SGD's first
//!   velocity with dampening differs from Burn's, which starts from the gradient). Over the
//!   fused backend ([`Pipeline::capture_fused_with_state`]) a fused block (elementwise, or a
//!   matrix product's epilogue) that reads a state tensor for the last time writes one of its
//!   outputs over it: a step that moves each state tensor into its last read (Burn's engine
//!   then knows nothing reads it later) updates its state with no copy. That needs nothing
//!   of the closure: a buffer another live tensor shares (a view of the old state) is never
//!   written over, and where the output written over a state is not that state's new value,
//!   the new value is copied as above.
//! - Random ops draw their key when their kernel launches, so **every replay draws fresh
//!   random numbers** (dropout masks change from step to step, as in eager training), and
//!   after the same `Backend::seed` a replay repeats the numbers of an eager run.
//!
//! Costs: besides the recorded launches, a replay launches one copy kernel per input that is
//! not contiguous from its buffer's start and per output that is copied out
//! ([`Pipeline::num_copies`]; none in a training step fed its own outputs), and one per
//! state tensor whose new value is not its buffer (two for those copied aside). It looks
//! each kernel argument's buffer up in its bindings (two words compared per binding, no
//! allocation). A pipeline keeps every intermediate of the captured closure alive at once
//! (eager execution frees and reuses them within the step).
//!
//! [`AdamTime::Device`]: crate::launch::optim::AdamTime::Device
//! [`next_step_count`]: crate::launch::optim::next_step_count
//! [`sgd_step`]: crate::launch::optim::sgd_step
//! [`adam_step`]: crate::launch::optim::adam_step
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
//!
//! The same model with the fused SGD with momentum, the weights and the velocity kept in the
//! pipeline's state and updated in place on every run:
//!
//! ```
//! # use burn_autodiff::Autodiff;
//! # use burn_tensor::{Tensor, TensorData};
//! # use ex_cubecl::runtime::{Pipeline, from_cube, to_cube};
//! # use ex_cubecl::ExWgpu;
//! # type B = ExWgpu;
//! # type A = Autodiff<ExWgpu>;
//! # let device = Default::default();
//! # let x = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 4.0], [2, 2]), &device);
//! # let y = Tensor::<B, 2>::from_data(TensorData::new(vec![1.0f32, 0.0, 0.0, 1.0], [2, 2]), &device);
//! use ex_cubecl::launch::optim::{SgdMomentum, SgdRule, sgd_step};
//!
//! let momentum = SgdMomentum { momentum: 0.5, dampening: 0.0, nesterov: false };
//! let rule = SgdRule { lr: 0.01, penalty: None, momentum: Some(momentum) };
//! let inputs = [to_cube(x), to_cube(y)];
//! let state = [to_cube(Tensor::<B, 2>::zeros([2, 2], &device)), to_cube(Tensor::<B, 2>::zeros([2, 2], &device))];
//! let (step, first) = Pipeline::capture_with_state(&device, &inputs, &state, |inputs, state| {
//!     let [x, y] = <[_; 2]>::try_from(inputs).unwrap();
//!     let [w, velocity] = <[_; 2]>::try_from(state).unwrap();
//!     let w = Tensor::<A, 2>::from_inner(from_cube(w)).require_grad();
//!     let prediction = Tensor::<A, 2>::from_inner(from_cube(x)).matmul(w.clone());
//!     let loss = (prediction - Tensor::from_inner(from_cube(y))).powi_scalar(2).mean();
//!     let grad = w.grad(&loss.backward()).unwrap();
//!     let (w, velocity) = sgd_step(to_cube(w.inner()), to_cube(grad), Some(velocity), &rule);
//!     (vec![to_cube(loss.inner())], vec![w, velocity.unwrap()])
//! })
//! .unwrap();
//! assert_eq!(step.num_state_copies(), 0); // both updated in place
//!
//! // Each run is one more step; the capture ran the first.
//! let loss = |out: &[ex_cubecl::CubeTensor<_>]| from_cube::<_, 1, burn_tensor::Float>(out[0].clone()).into_scalar();
//! let mut last = loss(&first);
//! for _ in 0..3 {
//!     let next = loss(&step.run(&inputs).unwrap());
//!     assert!(next < last);
//!     last = next;
//! }
//! // The state: read it, or set it back (a checkpoint) to start again.
//! let [w, _velocity] = <[_; 2]>::try_from(step.state().unwrap()).unwrap();
//! assert_eq!(w.dims(), &[2, 2]);
//! step.set_state(&state).unwrap();
//! ```
use std::collections::BTreeSet;
use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

use burn_backend::DType;
use cubecl::Runtime;
use cubecl::device::Device;
use cubecl::prelude::ComputeClient;
use cubecl::stream_id::StreamId;

use super::buffer_id::BufferId;
use super::capture::{self, RecordedLaunch, Recording};
use super::bindings::with_bindings;
use super::launcher::replay;
use super::pipeline_io::Io;
use super::pipeline_record::{ThisThread, record_step};
use super::Layout;
pub use super::pipeline_error::PipelineError;
use crate::launch::copy::copy_into;
use crate::tensor::CubeTensor;

/// The recorded launches of a closure of backend ops, replayable on new inputs of the same
/// shapes and dtypes (see the [module docs](self)).
pub struct Pipeline<R: Runtime> {
    device: R::Device,
    client: ComputeClient<R>,
    /// Pipeline-owned contiguous input buffers, as the closure saw them.
    inputs: Vec<CubeTensor<R>>,
    /// Pipeline-owned contiguous state buffers: the state before a run, and after it.
    state: Vec<CubeTensor<R>>,
    /// The closure's outputs: views of intermediates, inputs, state or constants.
    outputs: Vec<CubeTensor<R>>,
    /// Which inputs and outputs a run binds rather than copies.
    io: Io,
    /// The launches; the lock serialises runs and state copies.
    replay: Mutex<Replayer>,
}

struct Replayer {
    launches: Vec<RecordedLaunch>,
    /// The copies of the new state into the state buffers, after the outputs are copied out.
    state_copies: Vec<RecordedLaunch>,
    /// The stream (thread) of the last capture or run.
    stream: StreamId,
}

impl<R: Runtime> fmt::Debug for Pipeline<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Pipeline")
            .field("device", &self.device)
            .field("inputs", &self.input_specs())
            .field("state", &self.state_specs())
            .field("outputs", &self.output_specs())
            .field("launches", &self.num_launches())
            .finish()
    }
}

/// What a captured step returns: its outputs and its new state.
pub type StepResults<R> = (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>);

/// A step as a capture recorded it: its outputs, its new state, the recording and the stream
/// it launched on.
pub(crate) type RecordedStep<R> = (Vec<CubeTensor<R>>, Vec<CubeTensor<R>>, Recording, StreamId);

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
        Self::capture_with_state(device, inputs, &[], |inputs, _| (f(inputs), Vec::new()))
    }

    /// Captures a step that carries state from run to run (a training step's parameters and
    /// optimizer state). The state is copied once into contiguous buffers that the pipeline
    /// keeps; `f` receives the inputs and those state buffers and returns the outputs and the
    /// new state (as many tensors as the state, each of its shape and dtype). Each run then
    /// advances the state by one step, and so does the capture itself, which runs `f` once:
    /// the pipeline's state after the capture is the state after one step, whose outputs are
    /// given with the pipeline. [`Pipeline::state`] reads the state, [`Pipeline::set_state`]
    /// writes it (e.g. back to `state`, to count the capture's step out).
    ///
    /// State is donated to the step: the fused optimizers update state buffers in place, and
    /// a new state that is its state buffer costs nothing; any other new state is copied
    /// into its buffer after the outputs (see the [module docs](self)).
    ///
    /// # Errors
    /// As [`Pipeline::capture`]; and when a state tensor is on another device, when the new
    /// state doesn't match the state (count, shape or dtype, naming the index), or when a
    /// state tensor updated in place shares its buffer with an output or another new state.
    pub fn capture_with_state<F>(
        device: &R::Device,
        inputs: &[CubeTensor<R>],
        state: &[CubeTensor<R>],
        f: F,
    ) -> Result<(Self, Vec<CubeTensor<R>>), PipelineError>
    where
        F: FnOnce(Vec<CubeTensor<R>>, Vec<CubeTensor<R>>) -> StepResults<R>,
    {
        Self::capture_recorded(device, inputs, state, |owned, buffers| record_step(owned, buffers, &ThisThread, f))
    }

    /// A pipeline from the recording that `record` makes of a step on copies of `inputs` and
    /// `state` (pipeline-owned buffers): the step's outputs, its new state, the recording and
    /// the stream it launched on.
    pub(crate) fn capture_recorded(
        device: &R::Device,
        inputs: &[CubeTensor<R>],
        state: &[CubeTensor<R>],
        record: impl FnOnce(&[CubeTensor<R>], &[CubeTensor<R>]) -> Result<RecordedStep<R>, PipelineError>,
    ) -> Result<(Self, Vec<CubeTensor<R>>), PipelineError> {
        if capture::is_capturing() {
            return Err(PipelineError::NestedCapture);
        }
        check_devices(device, inputs)?;
        check_state_devices(device, state)?;
        let client = super::DeviceContext::client::<R>(device);
        let owned: Vec<CubeTensor<R>> = inputs.iter().map(fresh_copy).collect();
        let buffers: Vec<CubeTensor<R>> = state.iter().map(fresh_copy).collect();
        let (outputs, new_state, recording, stream) = record(&owned, &buffers)?;
        let copies = StateCopies::plan(&buffers, &new_state, &outputs, &recording.updated)?;
        let io = Io::plan(&owned, &outputs, &recording.scratch);
        let fresh = outputs.iter().map(fresh_copy).collect();
        let state_copies = copies.record()?;
        let pipeline = Self {
            device: device.clone(),
            client,
            inputs: owned,
            state: buffers,
            outputs,
            io,
            replay: Mutex::new(Replayer { launches: recording.launches, state_copies, stream }),
        };
        Ok((pipeline, fresh))
    }

    /// Replays the recorded launches on `inputs` (same count, shapes, dtypes and device as at
    /// capture; any layout) and gives fresh output tensors. A pipeline with state advances it
    /// by one step.
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
        if let Some((index, expected, got)) = first_mismatch(inputs, &self.inputs) {
            return Err(PipelineError::InputMismatch {
                index,
                expected_shape: expected.0,
                expected_dtype: expected.1,
                got_shape: got.0,
                got_dtype: got.1,
            });
        }
        let mut replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        catch_unwind(AssertUnwindSafe(|| {
            self.align_streams(&mut replayer);
            for (new, owned) in inputs.iter().zip(&self.inputs).filter(|(new, _)| !Io::binds(new)) {
                copy_to(new, owned);
            }
            let mut run = self.io.bind(inputs, &self.client);
            with_bindings(std::mem::take(&mut run.bindings), || {
                replayer.launches.iter().for_each(replay);
                let give = |(k, output)| self.io.give(k, output, inputs, &run, fresh_copy);
                let outputs = self.outputs.iter().enumerate().map(give).collect();
                replayer.state_copies.iter().for_each(replay);
                outputs
            })
        }))
        .map_err(|payload| PipelineError::ReplayPanicked { message: panic_message(payload.as_ref()) })
    }

    /// Fresh contiguous copies of the state (empty for a pipeline without state).
    ///
    /// # Errors
    /// When a capture is active on this thread, or when the device fails.
    pub fn state(&self) -> Result<Vec<CubeTensor<R>>, PipelineError> {
        self.with_state(|| self.state.iter().map(fresh_copy).collect())
    }

    /// Copies `state` (same count, shapes, dtypes and device as the pipeline's; any layout)
    /// into the pipeline's state buffers, e.g. to load a checkpoint. `state` is not written.
    ///
    /// # Errors
    /// When a tensor doesn't match (the error names it and both shapes and dtypes), when a
    /// capture is active on this thread, or when the device fails.
    pub fn set_state(&self, state: &[CubeTensor<R>]) -> Result<(), PipelineError> {
        if state.len() != self.state.len() {
            return Err(PipelineError::StateCount { expected: self.state.len(), got: state.len() });
        }
        check_state_devices(&self.device, state)?;
        if let Some((index, expected, got)) = first_mismatch(state, &self.state) {
            return Err(PipelineError::StateMismatch {
                index,
                expected_shape: expected.0,
                expected_dtype: expected.1,
                got_shape: got.0,
                got_dtype: got.1,
            });
        }
        self.with_state(|| state.iter().zip(&self.state).for_each(|(new, owned)| copy_to(new, owned)))
    }

    /// Runs `f`, which copies the state in or out, ordered after the previous run.
    fn with_state<T>(&self, f: impl FnOnce() -> T) -> Result<T, PipelineError> {
        if capture::is_capturing() {
            return Err(PipelineError::RunDuringCapture);
        }
        let mut replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        catch_unwind(AssertUnwindSafe(|| {
            self.align_streams(&mut replayer);
            f()
        }))
        .map_err(|payload| PipelineError::StateCopyFailed { message: panic_message(payload.as_ref()) })
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
            if let Err(e) = super::wait::sync(&client) {
                panic!("ex_cubecl: pipeline run: syncing the previous run's stream: {e:?}");
            }
            replayer.stream = current;
        }
    }

    /// The device the pipeline runs on.
    pub fn device(&self) -> &R::Device {
        &self.device
    }

    /// Number of kernel launches a run replays: the closure's and the state copies (input
    /// and output copies aside).
    pub fn num_launches(&self) -> usize {
        let replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        replayer.launches.len() + replayer.state_copies.len()
    }

    /// Number of copy launches a run on `inputs` makes for its inputs and outputs: one per
    /// input not contiguous from its buffer's start, and one per output that views the
    /// state, a constant, or an input so copied (see the [module docs](self)).
    pub fn num_copies(&self, inputs: &[CubeTensor<R>]) -> usize {
        self.io.copies(inputs)
    }

    /// Number of copy launches a run makes to write the new state into the state buffers:
    /// 0 when every state tensor is updated in place or left as it is.
    pub fn num_state_copies(&self) -> usize {
        self.replay.lock().unwrap_or_else(|e| e.into_inner()).state_copies.len()
    }

    /// The operation of each launch a run replays, in order (the state copies last).
    pub fn ops(&self) -> Vec<String> {
        let replayer = self.replay.lock().unwrap_or_else(|e| e.into_inner());
        replayer.launches.iter().chain(&replayer.state_copies).map(|l| l.op.clone()).collect()
    }

    /// Shape and dtype of each input.
    pub fn input_specs(&self) -> Vec<(Vec<usize>, DType)> {
        self.inputs.iter().map(|t| (t.dims().to_vec(), t.dtype)).collect()
    }

    /// Shape and dtype of each state tensor.
    pub fn state_specs(&self) -> Vec<(Vec<usize>, DType)> {
        self.state.iter().map(|t| (t.dims().to_vec(), t.dtype)).collect()
    }

    /// Shape and dtype of each output.
    pub fn output_specs(&self) -> Vec<(Vec<usize>, DType)> {
        self.outputs.iter().map(|t| (t.dims().to_vec(), t.dtype)).collect()
    }
}

/// The copies that write a step's new state into the state buffers, in two phases: a new
/// state that shares memory with a state buffer that is written is first copied aside, so
/// that no copy reads a buffer that an earlier copy has written.
struct StateCopies<R: Runtime> {
    /// (new state, a buffer of its own), made first.
    staged: Vec<(CubeTensor<R>, CubeTensor<R>)>,
    /// (new state or its staged copy, state buffer), made after.
    direct: Vec<(CubeTensor<R>, CubeTensor<R>)>,
}

impl<R: Runtime> StateCopies<R> {
    /// The copies for `new_state`, checked against the state `buffers`: count, shapes and
    /// dtypes, and that no result shares a buffer that an op `updated` in place.
    fn plan(
        buffers: &[CubeTensor<R>],
        new_state: &[CubeTensor<R>],
        outputs: &[CubeTensor<R>],
        updated: &BTreeSet<usize>,
    ) -> Result<Self, PipelineError> {
        if new_state.len() != buffers.len() {
            return Err(PipelineError::NewStateCount { expected: buffers.len(), got: new_state.len() });
        }
        if let Some((index, expected, got)) = first_mismatch(new_state, buffers) {
            return Err(PipelineError::NewStateMismatch {
                index,
                expected_shape: expected.0,
                expected_dtype: expected.1,
                got_shape: got.0,
                got_dtype: got.1,
            });
        }
        check_donated(buffers, new_state, outputs, updated)?;
        let written: Vec<usize> = (0..buffers.len()).filter(|&i| !is_buffer(&new_state[i], &buffers[i])).collect();
        let written_ids: Vec<BufferId> = written.iter().map(|&i| BufferId::of(&buffers[i].handle)).collect();
        let mut copies = Self { staged: Vec::new(), direct: Vec::new() };
        for i in written {
            let (source, buffer) = (&new_state[i], &buffers[i]);
            let id = BufferId::of(&source.handle);
            if written_ids.iter().any(|w| w.same_memory(&id)) {
                let aside = CubeTensor::empty(&buffer.client, &buffer.device, buffer.layout.shape.clone(), buffer.dtype);
                copies.staged.push((source.clone(), aside.clone()));
                copies.direct.push((aside, buffer.clone()));
            } else {
                copies.direct.push((source.clone(), buffer.clone()));
            }
        }
        Ok(copies)
    }

    /// Makes the copies (the capture's step) and gives their launches, recorded as a capture
    /// of their own so that a run replays them after copying the outputs out.
    fn record(self) -> Result<Vec<RecordedLaunch>, PipelineError> {
        if !capture::begin(Vec::new()) {
            return Err(PipelineError::NestedCapture);
        }
        let result = catch_unwind(AssertUnwindSafe(|| {
            self.staged.iter().chain(&self.direct).for_each(|(source, buffer)| copy_to(source, buffer))
        }));
        let recording = capture::end().unwrap_or_default();
        result.map_err(|payload| PipelineError::StateCopyFailed { message: panic_message(payload.as_ref()) })?;
        Ok(recording.launches)
    }
}

/// Refuses a result that shares the buffer of a state tensor that an op updated in place
/// during the capture, other than that state's own new value being the buffer itself: the
/// result may stand for the state's old value, which the update overwrote.
fn check_donated<R: Runtime>(
    buffers: &[CubeTensor<R>],
    new_state: &[CubeTensor<R>],
    outputs: &[CubeTensor<R>],
    updated: &BTreeSet<usize>,
) -> Result<(), PipelineError> {
    for &index in updated {
        let id = BufferId::of(&buffers[index].handle);
        let shares = |t: &CubeTensor<R>| BufferId::of(&t.handle).same_memory(&id);
        let output = outputs.iter().position(shares).map(|j| format!("output {j}"));
        let other = (0..new_state.len())
            .find(|&j| shares(&new_state[j]) && !(j == index && is_buffer(&new_state[j], &buffers[index])))
            .map(|j| format!("new state {j}"));
        if let Some(alias) = output.or(other) {
            return Err(PipelineError::DonatedStateAliased { index, alias });
        }
    }
    Ok(())
}

/// Whether `tensor` is the whole of `buffer` (a contiguous tensor from its start), as it is.
fn is_buffer<R: Runtime>(tensor: &CubeTensor<R>, buffer: &CubeTensor<R>) -> bool {
    tensor.layout.is_contiguous_from_start()
        && tensor.num_elements() == buffer.num_elements()
        && BufferId::of(&tensor.handle) == BufferId::of(&buffer.handle)
}

/// Whether an op may write `tensor` in place: during a capture, when it is one of the
/// capture's state buffers, whole and contiguous from its start (state is donated to the
/// step; see the [module docs](self)). The capture notes the update.
pub(crate) fn donated_state<R: Runtime>(tensor: &CubeTensor<R>) -> bool {
    capture::is_capturing()
        && tensor.layout.is_contiguous_from_start()
        && capture::update_in_place(BufferId::of(&tensor.handle), tensor.num_elements())
}

/// The first of `given` whose shape or dtype differs from its counterpart in `expected`:
/// its index, the expected and the given shape and dtype.
#[allow(clippy::type_complexity)]
fn first_mismatch<R: Runtime>(
    given: &[CubeTensor<R>],
    expected: &[CubeTensor<R>],
) -> Option<(usize, (Vec<usize>, DType), (Vec<usize>, DType))> {
    let spec = |t: &CubeTensor<R>| (t.dims().to_vec(), t.dtype);
    given.iter().zip(expected).enumerate().find(|(_, (g, e))| spec(g) != spec(e)).map(|(i, (g, e))| (i, spec(e), spec(g)))
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
    match inputs.iter().position(|t| t.device.to_id() != device.to_id()) {
        Some(index) => {
            Err(PipelineError::WrongDevice { index, expected: format!("{device:?}"), got: format!("{:?}", inputs[index].device) })
        }
        None => Ok(()),
    }
}

fn check_state_devices<R: Runtime>(device: &R::Device, state: &[CubeTensor<R>]) -> Result<(), PipelineError> {
    check_devices(device, state).map_err(|e| match e {
        PipelineError::WrongDevice { index, expected, got } => PipelineError::StateWrongDevice { index, expected, got },
        other => other,
    })
}

/// The message of a panic payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic without a message".into())
}
