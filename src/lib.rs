//! # ExCubecl
//!
//! [`ExCubeclBackend`] implements Burn 0.21's `Backend` trait on ExCubecl's own device
//! buffers and hand-written CubeCL kernels (crate `ex_cubecl_kernels`). Pick the backend by
//! type as with any Burn backend:
//!
//! ```no_run
//! use burn_tensor::Tensor;
//! use ex_cubecl::ExWgpu;
//!
//! let device = Default::default();
//! let x = Tensor::<ExWgpu, 2>::ones([2, 3], &device);
//! let y = (x.clone() + x).sum();
//! println!("{}", y.into_scalar());
//! ```
//!
//! With `burn_autodiff`, `ExWgpuAutodiff` (= `Autodiff<ExWgpu>`) trains with Burn's autodiff.
//!
//! Matrix products use the device's matrix units where it has them for f16 and bf16. f32
//! products are exact by default (as PyTorch's default precision is); call
//! `set_matmul_precision(MatmulPrecision::Tf32)`, or set `EX_CUBECL_MATMUL_PRECISION=tf32`,
//! to round f32 operands to TF32 on tensor cores (several times faster on NVIDIA GPUs,
//! relative error about 1e-3 instead of 1e-6); see [`MatmulPrecision`].
//!
//! ## Pipelines and asynchronous commands
//!
//! A [`Pipeline`] records the kernel launches of a closure of backend ops (a forward pass,
//! or a whole training step with `backward` and the optimizer update) once, and replays them
//! on new inputs of the same shapes without re-running the host-side logic of the ops; its
//! intermediate buffers are allocated once and reused by every replay. A [`CommandQueue`]
//! runs pipeline replays and closures of ops off the caller's thread, in submission order,
//! with `submit` / `poll` / `wait` and completion callbacks. See [`runtime::Pipeline`] and
//! [`runtime::CommandQueue`] for the rules and examples; in short:
//!
//! ```
//! use burn_tensor::{Float, Tensor};
//! use ex_cubecl::{CommandQueue, Pipeline, Work, from_cube, to_cube};
//! use ex_cubecl::ExWgpu;
//! use std::sync::Arc;
//!
//! let device = Default::default();
//! let x = Tensor::<ExWgpu, 2>::ones([2, 3], &device);
//! let pipeline = Pipeline::capture(&device, &[to_cube(x.clone())], |inputs| {
//!     let x = from_cube::<_, 2, Float>(inputs[0].clone());
//!     vec![to_cube((x.clone() * x).sum())]
//! })
//! .unwrap();
//! let y = from_cube::<_, 1, Float>(pipeline.run(&[to_cube(x.clone() * 2.0)]).unwrap().remove(0));
//! assert_eq!(y.into_scalar(), 24.0);
//!
//! let queue = CommandQueue::for_device(&device);
//! let id = queue.submit(Work::replay(&Arc::new(pipeline), vec![to_cube(x)]));
//! let outputs = queue.wait(id).unwrap();
//! assert_eq!(from_cube::<_, 1, Float>(outputs[0].clone()).into_scalar(), 6.0);
//! ```
//!
//! Layers: [`runtime`] (buffers, layouts, device contexts, the single launcher, pipelines
//! and command queues),
//! [`tensor`] (the one primitive for float, int and bool tensors), `launch` (host side of
//! each kernel family) and `ops` (Burn's ops traits, one file each).
#![warn(missing_docs)]

mod backend;
#[cfg(feature = "distributed")]
pub mod distributed;
#[cfg(feature = "fusion")]
pub mod fusion;
pub mod launch;
mod ops;
#[cfg(feature = "optim")]
pub mod optim;
pub mod runtime;
pub mod tensor;

pub use backend::ExCubeclBackend;
/// The CubeCL version the backend is built on (its runtimes name the backend's type
/// parameter, e.g. `cubecl::wgpu::WgpuRuntime`).
pub use cubecl;
pub use launch::matmul::{MATMUL_PRECISION_ENV, MatmulPrecision, matmul_precision, set_matmul_precision, with_matmul_precision};
pub use runtime::{
    CommandError, CommandId, CommandQueue, CommandStatus, Pipeline, PipelineError, StepResults, Work, from_cube, to_cube,
};
pub use tensor::{CubeTensor, QuantizedTensor};

/// The backend on wgpu (Vulkan, Metal, DX12; Mesa's lavapipe on machines without a GPU).
#[cfg(feature = "wgpu-wgsl")]
pub type ExWgpu = ExCubeclBackend<cubecl::wgpu::WgpuRuntime>;

/// [`ExWgpu`] with Burn's autodiff.
#[cfg(feature = "wgpu-wgsl")]
pub type ExWgpuAutodiff = burn_autodiff::Autodiff<ExWgpu>;

/// [`ExWgpu`] with kernel fusion: Burn's fusion engine with our fusers (see [`fusion`]).
#[cfg(all(feature = "wgpu-wgsl", feature = "fusion"))]
pub type ExWgpuFusion = burn_fusion::Fusion<ExWgpu>;

/// [`ExWgpuFusion`] with Burn's autodiff.
#[cfg(all(feature = "wgpu-wgsl", feature = "fusion"))]
pub type ExWgpuFusionAutodiff = burn_autodiff::Autodiff<ExWgpuFusion>;

/// The backend on CUDA (loaded at run time).
#[cfg(feature = "cuda")]
pub type ExCuda = ExCubeclBackend<cubecl::cuda::CudaRuntime>;

/// [`ExCuda`] with Burn's autodiff.
#[cfg(feature = "cuda")]
pub type ExCudaAutodiff = burn_autodiff::Autodiff<ExCuda>;

/// [`ExCuda`] with kernel fusion: Burn's fusion engine with our fusers (see [`fusion`]).
#[cfg(all(feature = "cuda", feature = "fusion"))]
pub type ExCudaFusion = burn_fusion::Fusion<ExCuda>;

/// [`ExCudaFusion`] with Burn's autodiff.
#[cfg(all(feature = "cuda", feature = "fusion"))]
pub type ExCudaFusionAutodiff = burn_autodiff::Autodiff<ExCudaFusion>;
