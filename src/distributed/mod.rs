//! Scale-out: all-reduces across devices, Burn's data-parallel training, and NCCL across
//! processes and hosts (feature `distributed`).
//!
//! - [`ExCubeclBackend`] implements burn-backend's `DistributedBackend`, so Burn's
//!   data-parallel machinery (the gradient sync server behind burn-train's `ddp` strategy,
//!   `Tensor::set_distributed`) runs on it, and through `Autodiff<_>` and
//!   `Autodiff<Fusion<_>>`, which forward it. On CUDA with NCCL the all-reduce is NCCL's,
//!   through cubecl-cuda's communicator of the devices; elsewhere (wgpu; CUDA without NCCL, or
//!   with `EX_CUBECL_NCCL=0`) it is host-staged: each device's tensor is read back, the host
//!   sums them in f64 in the order of the device ids and every device gets the same result. So
//!   the same training code runs on any machine, several logical wgpu devices of one adapter
//!   included ([`wgpu_devices`]).
//! - [`all_reduce`]: the all-reduce of one tensor per device, for any backend that implements
//!   `DistributedBackend`; [`all_reduce_gradients`] does it for every parameter of replicated
//!   models (the loop of data-parallel training: each replica computes the gradients of its
//!   shard, the gradients are averaged, every replica takes the same optimizer step).
//! - [`start_gradient_sync`] / [`mark_distributed`]: the same loop with the all-reduces
//!   overlapped with the backward pass, in buckets, as PyTorch's DDP does it, through Burn's own
//!   hooks (`Tensor::set_distributed`; `backward` reduces the marked parameters' gradients).
//! - [`init`] / [`ProcessGroup`]: several processes, on one host or several, each with its own
//!   GPU, joined in one NCCL communicator the way `torchrun` does it: rank 0 makes NCCL's unique
//!   id, a launcher hands it to every process (environment or a shared file), each process
//!   joins with its rank (`scripts/launch_distributed.sh`). CUDA only: wgpu has no collective
//!   library, so on wgpu the scale-out is single-process (several devices of one process).
//!
//! Every device of a group must make the same all-reduces in the same order (as NCCL
//! requires): the host-staged path pairs the `k`-th all-reduce of each device of a group. The
//! all-reduces themselves live in [`crate::runtime::collective`], which builds without this
//! feature (the NIF's `all_reduce` uses it).
//!
//! Keep this feature out of builds that also compile `Autodiff<NdArray>` (the conformance
//! suite's oracle): burn-autodiff's `distributed` feature makes every inner backend implement
//! `DistributedBackend`, which burn-ndarray doesn't.
//!
//! [`ExCubeclBackend`]: crate::ExCubeclBackend
mod backend;
#[cfg(feature = "wgpu")]
mod devices;
mod gradient_sync;
#[cfg(feature = "optim")]
mod gradients;
mod process_group;

use burn_backend::distributed::DistributedBackend;
use burn_backend::{DeviceOps, TensorPrimitive};
use burn_tensor::Tensor;

pub use burn_backend::distributed::{DistributedConfig, DistributedParamId, ReduceOperation};
#[cfg(feature = "wgpu")]
pub use devices::wgpu_devices;
pub use gradient_sync::{GradientSyncConfig, GradientSyncStats, start_gradient_sync, stop_gradient_sync};
#[cfg(feature = "optim")]
pub use gradient_sync::mark_distributed;
#[cfg(feature = "optim")]
pub use gradients::all_reduce_gradients;
pub use process_group::{
    DistributedError, LOCAL_RANK_ENV, NCCL_ID_ENV, NCCL_ID_FILE_ENV, ProcessGroup, ProcessGroupConfig, RANK_ENV,
    UniqueId, WORLD_SIZE_ENV, init, init_from_env,
};
pub use crate::runtime::{COLLECTIVE_TIMEOUT_ENV, NCCL_ENV, nccl_status, peer_to_peer};

/// The all-reduce of `tensors`, one per device (all of one shape and dtype), in this
/// process: every returned tensor, on its input's device, holds the sum (or mean) of all
/// inputs. Works for any backend that implements `DistributedBackend` (ours, and `Autodiff`
/// and `Fusion` over it); float dtypes f32, f16, bf16 and f64.
///
/// # Panics
/// When `tensors` is empty, two tensors are on one device, or their shapes differ.
pub fn all_reduce<B: DistributedBackend, const D: usize>(tensors: Vec<Tensor<B, D>>, op: ReduceOperation) -> Vec<Tensor<B, D>> {
    let Some(first) = tensors.first() else {
        panic!("ex_cubecl: all_reduce: no tensors (one per device expected)");
    };
    let shape = first.shape();
    let devices: Vec<B::Device> = tensors.iter().map(Tensor::device).collect();
    let ids: Vec<_> = devices.iter().map(DeviceOps::id).collect();
    for (i, tensor) in tensors.iter().enumerate() {
        if tensor.shape() != shape {
            panic!(
                "ex_cubecl: all_reduce: tensor {i} has shape {:?}, tensor 0 {:?} (every device's tensor must have one shape)",
                tensor.shape().to_vec(),
                shape.to_vec()
            );
        }
        if ids[..i].contains(&ids[i]) {
            panic!("ex_cubecl: all_reduce: tensors {i} and {} are both on device {:?} (one tensor per device)", ids[..i].iter().position(|d| *d == ids[i]).unwrap_or(0), devices[i]);
        }
    }
    // One thread per device, each making its device's all-reduce and waiting for it: NCCL's
    // calls of the devices of one group wait for each other (a communicator's first use joins
    // them all), and a lazy backend (Fusion) makes the call when its stream is flushed.
    let jobs: Vec<_> = tensors.into_iter().zip(devices).collect();
    crate::runtime::collective::on_threads(jobs, |(tensor, device)| {
        let collective = B::all_reduce(tensor.into_primitive().tensor(), op, ids.clone());
        if let Err(e) = B::sync(&device) {
            panic!("ex_cubecl: all_reduce: device {device:?} failed: {e:?}");
        }
        Tensor::from_primitive(TensorPrimitive::Float(collective.resolve()))
    })
}
