//! Burn optimizers whose update of each parameter tensor is one fused kernel (feature
//! `optim`, on by default).
//!
//! [`AdamConfig`], [`AdamWConfig`] and [`SgdConfig`] have the fields, defaults and builder
//! methods of burn-optim's configs of the same names, and `init` gives burn-optim's
//! `OptimizerAdaptor`, so a training loop swaps one import:
//!
//! ```no_run
//! # use burn_autodiff::Autodiff;
//! # use ex_cubecl::ExWgpu;
//! # fn train<M: burn_core::module::AutodiffModule<Autodiff<ExWgpu>>>(model: M) {
//! use burn_optim::Optimizer;
//! use ex_cubecl::optim::AdamConfig; // instead of burn_optim::AdamConfig
//!
//! let mut optimizer = AdamConfig::new().init::<Autodiff<ExWgpu>, M>();
//! # }
//! ```
//!
//! Burn's optimizers launch one kernel per tensor op of the update (about ten for Adam);
//! these read the parameter, its gradient and the state once and write the new parameter and
//! state in place where the buffers are uniquely owned. The math is Burn's (the same
//! formulas, f32 arithmetic for f16 and bf16 parameters). Adam's and AdamW's states are
//! burn-optim's `AdamState` and `AdamWState`, so their records load into either; SGD's is
//! [`SgdState`].
mod adam;
mod sgd;

pub use adam::{Adam, AdamConfig, AdamW, AdamWConfig};
pub use sgd::{Sgd, SgdConfig, SgdState};

use burn_backend::TensorPrimitive;
use burn_tensor::Tensor;
use burn_tensor::backend::Backend;

use crate::tensor::CubeTensor;
use crate::ExCubeclBackend;

type Ex<R> = ExCubeclBackend<R>;

/// The backend tensor of a float `Tensor`.
fn primitive<R: cubecl::Runtime, const D: usize>(tensor: Tensor<Ex<R>, D>) -> CubeTensor<R>
where
    Ex<R>: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    tensor.into_primitive().tensor()
}

/// A float `Tensor` of a backend tensor.
fn float<R: cubecl::Runtime, const D: usize>(tensor: CubeTensor<R>) -> Tensor<Ex<R>, D>
where
    Ex<R>: Backend<FloatTensorPrimitive = CubeTensor<R>>,
{
    Tensor::from_primitive(TensorPrimitive::Float(tensor))
}
