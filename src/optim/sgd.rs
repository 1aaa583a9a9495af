//! SGD (optional L2 penalty, momentum, Nesterov), one fused kernel per parameter update.
use burn_core as burn;

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::record::Record;
use burn::tensor::Tensor;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn_backend::DeviceOps;
use burn_optim::decay::WeightDecayConfig;
use burn_optim::grad_clipping::GradientClippingConfig;
use burn_optim::momentum::MomentumConfig;
use burn_optim::{LearningRate, SimpleOptimizer, adaptor::OptimizerAdaptor};
use cubecl::Runtime;

use super::{Ex, float, primitive};
use crate::launch::optim::{SgdMomentum, SgdRule, sgd_step};

/// [`Sgd`]'s configuration: burn-optim's `SgdConfig` (same fields).
#[derive(Config, Debug)]
pub struct SgdConfig {
    /// L2 penalty added to the gradients.
    weight_decay: Option<WeightDecayConfig>,
    /// Momentum.
    momentum: Option<MomentumConfig>,
    /// Gradient clipping, applied by the adaptor before the update.
    gradient_clipping: Option<GradientClippingConfig>,
}

/// Stochastic gradient descent, as burn-optim's `Sgd`, in one kernel per parameter.
#[derive(Clone, Debug)]
pub struct Sgd {
    penalty: Option<f32>,
    momentum: Option<SgdMomentum>,
}

/// [`Sgd`]'s state of one parameter: the velocity, with momentum.
#[derive(Record, Clone)]
pub struct SgdState<B: Backend, const D: usize> {
    /// The momentum's velocity.
    pub velocity: Option<Tensor<B, D>>,
}

impl SgdConfig {
    /// The optimizer.
    pub fn build(&self) -> Sgd {
        Sgd {
            penalty: self.weight_decay.as_ref().map(|d| d.penalty),
            momentum: self.momentum.as_ref().map(|m| SgdMomentum {
                momentum: m.momentum,
                dampening: m.dampening,
                nesterov: m.nesterov,
            }),
        }
    }

    /// The optimizer for a module, with the configured gradient clipping.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<Sgd, M, B>
    where
        Sgd: SimpleOptimizer<B::InnerBackend>,
    {
        let optim = OptimizerAdaptor::from(self.build());
        match &self.gradient_clipping {
            Some(config) => optim.with_grad_clipping(config.init()),
            None => optim,
        }
    }
}

impl<R: Runtime> SimpleOptimizer<Ex<R>> for Sgd
where
    R::Device: DeviceOps,
{
    type State<const D: usize> = SgdState<Ex<R>, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<Ex<R>, D>,
        grad: Tensor<Ex<R>, D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<Ex<R>, D>, Option<Self::State<D>>) {
        let rule = SgdRule { lr, penalty: self.penalty.map(f64::from), momentum: self.momentum };
        let velocity = state.and_then(|s| s.velocity).map(primitive);
        let (param, velocity) = sgd_step(primitive(tensor), primitive(grad), velocity, &rule);
        (float(param), Some(SgdState { velocity: velocity.map(float) }))
    }

    fn to_device<const D: usize>(state: Self::State<D>, device: &burn::tensor::Device<Ex<R>>) -> Self::State<D> {
        SgdState { velocity: state.velocity.map(|v| v.to_device(device)) }
    }
}
