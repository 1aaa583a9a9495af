//! `DistributedBackend` for [`ExCubeclBackend`], on [`crate::runtime::collective`]: NCCL
//! through cubecl-cuda's communicator where the runtime has it, the host-staged all-reduce
//! everywhere else.
use burn_backend::DeviceId;
use burn_backend::DeviceOps;
use burn_backend::distributed::{CollectiveTensor, DistributedBackend, ReduceOperation};
use cubecl::Runtime;

use crate::ExCubeclBackend;
use crate::runtime::{ReduceOp, collective};
use crate::tensor::CubeTensor;

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
}

/// Burn's reduce operation as the runtime's.
pub(super) fn reduce_op(op: ReduceOperation) -> ReduceOp {
    match op {
        ReduceOperation::Sum => ReduceOp::Sum,
        ReduceOperation::Mean => ReduceOp::Mean,
    }
}
