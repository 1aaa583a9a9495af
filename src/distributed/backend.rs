//! `DistributedBackend` for [`ExCubeclBackend`], on [`crate::runtime::collective`]: NCCL
//! through cubecl-cuda's communicator where the runtime has it, the host-staged all-reduce
//! everywhere else. The gradient-sync hooks that `backward` calls (Burn's data-parallel
//! training) are [`super::gradient_sync`]'s bucketed, overlapped sync, not burn-backend's
//! sync server.
use burn_backend::DeviceId;
use burn_backend::DeviceOps;
use burn_backend::distributed::{
    CollectiveTensor, DistributedBackend, DistributedConfig, DistributedParams, ReduceOperation, TensorRef,
};
use cubecl::Runtime;

use crate::ExCubeclBackend;
use crate::runtime::{ReduceOp, collective};
use crate::tensor::CubeTensor;

use super::gradient_sync::{self, GradientSyncConfig};

impl<R: Runtime> DistributedBackend for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn all_reduce(tensor: CubeTensor<R>, op: ReduceOperation, device_ids: Vec<DeviceId>) -> CollectiveTensor<Self> {
        CollectiveTensor::new(collective::all_reduce_one(tensor, reduce_op(op), device_ids))
    }

    fn sync_collective(device: &R::Device) {
        collective::sync_collective::<R>(device);
    }

    fn start_communication_server(devices: &[R::Device], config: DistributedConfig) {
        gradient_sync::start_gradient_sync::<R>(devices, GradientSyncConfig::new(config.all_reduce_op));
    }

    fn close_communication_server(_device: &R::Device) {
        gradient_sync::stop_gradient_sync::<R>();
    }

    fn register_sync_parameters(device: &R::Device, distributed_params: Vec<DistributedParams>) {
        gradient_sync::register::<R>(device, &distributed_params);
    }

    fn submit_gradient_sync(tensor: TensorRef<Self>, distributed_params: DistributedParams) {
        // SAFETY: burn-autodiff hands the gradient's place in its container, which stays there
        // untouched until the backward pass's `submit_sync_collective` returns on this thread.
        unsafe { gradient_sync::submit::<R>(tensor.0, distributed_params.param_id) }
    }

    fn submit_sync_collective(device: &R::Device) {
        gradient_sync::finish::<R>(device);
    }
}

/// Burn's reduce operation as the runtime's.
pub(super) fn reduce_op(op: ReduceOperation) -> ReduceOp {
    match op {
        ReduceOperation::Sum => ReduceOp::Sum,
        ReduceOperation::Mean => ReduceOp::Mean,
    }
}
