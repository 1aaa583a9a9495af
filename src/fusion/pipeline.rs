//! Pipelines over `Fusion<ExCubeclBackend<R>>`: a step written on the fused backend is
//! captured with the launches that Burn's fusion engine makes for it (our fused kernels, and
//! our other kernels where nothing fuses), then replayed without the engine: a replay costs
//! the fused launches alone, none of the engine's work per operation.
//!
//! The engine runs a device's operations on a thread of its own. The capture begins there
//! once the caller's earlier operations have run and ends there once the step's have, so
//! every launch in between is recorded: no other thread may run operations on the same
//! fused device during a capture.
use burn_backend::{DType, DeviceOps, Shape};
use burn_fusion::client::GlobalFusionClient;
use burn_fusion::stream::OperationStreams;
use burn_fusion::{FusionTensor, NoOp};
use burn_ir::{InitOperationIr, OperationIr};
use cubecl::Runtime;
use cubecl::stream_id::StreamId;

use super::{ExFusionRuntime, IrHandle};
use crate::ExCubeclBackend;
use crate::runtime::buffer_id::BufferId;
use crate::runtime::capture::{self, Recording};
use crate::runtime::pipeline_record::{CaptureSite, record_step};
use crate::runtime::{Pipeline, PipelineError};
use crate::tensor::CubeTensor;

/// A tensor of `Fusion<ExCubeclBackend<R>>` (any kind: float, int or bool).
pub type FusedTensor<R> = FusionTensor<ExFusionRuntime<R>>;

/// What a captured fused step returns: its outputs and its new state.
pub type FusedStepResults<R> = (Vec<FusedTensor<R>>, Vec<FusedTensor<R>>);

/// The fusion engine's thread of a device.
struct EngineThread<R: Runtime>(GlobalFusionClient<ExFusionRuntime<R>>)
where
    R::Device: DeviceOps;

impl<R: Runtime> CaptureSite for EngineThread<R>
where
    R::Device: DeviceOps,
{
    fn begin(&self, state: Vec<(BufferId, usize)>) -> bool {
        self.0.sync(move || capture::begin(state))
    }

    fn end(&self) -> (Option<Recording>, StreamId) {
        self.0.sync(|| (capture::end(), StreamId::current()))
    }
}

impl<R: Runtime> Pipeline<R>
where
    R::Device: DeviceOps,
{
    /// [`Pipeline::capture`] for a step written on `Fusion<ExCubeclBackend<R>>`: `f` receives
    /// the inputs as fused tensors (wrap them with `Tensor::from_primitive`) and returns the
    /// outputs; the pipeline replays the launches the fusion engine made for them.
    ///
    /// # Errors
    /// As [`Pipeline::capture`].
    pub fn capture_fused<F>(device: &R::Device, inputs: &[CubeTensor<R>], f: F) -> Result<Self, PipelineError>
    where
        F: FnOnce(Vec<FusedTensor<R>>) -> Vec<FusedTensor<R>>,
    {
        Self::capture_fused_with_state(device, inputs, &[], |inputs, _| (f(inputs), Vec::new())).map(|(pipeline, _)| pipeline)
    }

    /// [`Pipeline::capture_with_state`] for a step written on `Fusion<ExCubeclBackend<R>>`
    /// (see [`Pipeline::capture_fused`]). A fused block that reads a state tensor for the last
    /// time writes a new state over it (see the pipeline module's docs): move each state
    /// tensor into its last use, and the step's new state costs no copy.
    ///
    /// # Errors
    /// As [`Pipeline::capture_with_state`].
    pub fn capture_fused_with_state<F>(
        device: &R::Device,
        inputs: &[CubeTensor<R>],
        state: &[CubeTensor<R>],
        f: F,
    ) -> Result<(Self, Vec<CubeTensor<R>>), PipelineError>
    where
        F: FnOnce(Vec<FusedTensor<R>>, Vec<FusedTensor<R>>) -> FusedStepResults<R>,
    {
        let client = GlobalFusionClient::<ExFusionRuntime<R>>::load(device);
        let site = EngineThread(client.clone());
        Self::capture_recorded(device, inputs, state, |owned, buffers| {
            record_step(owned, buffers, &site, |inputs, state| {
                let fused = |ts: Vec<CubeTensor<R>>| ts.into_iter().map(|t| to_fused(&client, t)).collect();
                let (outputs, new_state) = f(fused(inputs), fused(state));
                // Resolving runs the step's operations on the engine's thread, recorded there.
                let resolved = |ts: Vec<FusedTensor<R>>| ts.into_iter().map(|t| resolve(&client, t)).collect();
                (resolved(outputs), resolved(new_state))
            })
        })
    }
}

/// `tensor` handed to the fusion engine, as `Fusion` does with a tensor it creates.
fn to_fused<R: Runtime>(client: &GlobalFusionClient<ExFusionRuntime<R>>, tensor: CubeTensor<R>) -> FusedTensor<R>
where
    R::Device: DeviceOps,
{
    let (shape, dtype) = (Shape::from(tensor.dims().to_vec()), tensor.dtype);
    let init = InitOperationIr::create(shape, dtype, || client.register_tensor_handle(IrHandle::Tensor(tensor)));
    client.register(OperationStreams::default(), OperationIr::Init(init), NoOp::<ExCubeclBackend<R>>::new()).remove(0)
}

/// Our tensor behind a fused one, once the operations that compute it have run.
fn resolve<R: Runtime>(client: &GlobalFusionClient<ExFusionRuntime<R>>, tensor: FusedTensor<R>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    match tensor.dtype {
        DType::Bool(_) => client.resolve_tensor_bool::<ExCubeclBackend<R>>(tensor),
        dtype if dtype.is_float() => client.resolve_tensor_float::<ExCubeclBackend<R>>(tensor),
        _ => client.resolve_tensor_int::<ExCubeclBackend<R>>(tensor),
    }
}
