//! Adam and AdamW, one fused kernel per parameter update.
use burn_core as burn;

use burn::config::Config;
use burn::module::AutodiffModule;
use burn::tensor::backend::AutodiffBackend;
use burn_backend::DeviceOps;
use burn_optim::decay::WeightDecayConfig;
use burn_optim::grad_clipping::GradientClippingConfig;
use burn_optim::{AdamState, AdamWState, AdaptiveMomentumState, LearningRate, SimpleOptimizer, adaptor::OptimizerAdaptor};
use cubecl::Runtime;

use super::{Ex, float, primitive};
use crate::launch::optim::{AdamDecay, AdamMoments, AdamRule, AdamTime, adam_step};

/// [`Adam`]'s configuration: burn-optim's `AdamConfig` (same fields and defaults).
#[derive(Config, Debug)]
pub struct AdamConfig {
    /// First moment decay.
    #[config(default = 0.9)]
    beta_1: f32,
    /// Second moment decay.
    #[config(default = 0.999)]
    beta_2: f32,
    /// Added to the root of the second moment.
    #[config(default = 1e-5)]
    epsilon: f32,
    /// Use the running maximum of the second moment (AMSGrad).
    #[config(default = false)]
    amsgrad: bool,
    /// L2 penalty added to the gradients.
    weight_decay: Option<WeightDecayConfig>,
    /// Gradient clipping, applied by the adaptor before the update.
    grad_clipping: Option<GradientClippingConfig>,
}

/// [`AdamW`]'s configuration: burn-optim's `AdamWConfig` (same fields and defaults).
#[derive(Config, Debug)]
pub struct AdamWConfig {
    /// First moment decay.
    #[config(default = 0.9)]
    beta_1: f32,
    /// Second moment decay.
    #[config(default = 0.999)]
    beta_2: f32,
    /// Added to the root of the bias-corrected second moment.
    #[config(default = 1e-5)]
    epsilon: f32,
    /// Decoupled weight decay per unit of learning rate.
    #[config(default = 1e-4)]
    weight_decay: f32,
    /// Decay only where the parameter and the first moment agree in sign.
    #[config(default = false)]
    cautious_weight_decay: bool,
    /// Use the running maximum of the second moment (AMSGrad).
    #[config(default = false)]
    amsgrad: bool,
    /// Gradient clipping, applied by the adaptor before the update.
    grad_clipping: Option<GradientClippingConfig>,
}

/// Adam with an optional L2 penalty, as burn-optim's `Adam`, in one kernel per parameter.
#[derive(Clone, Debug)]
pub struct Adam {
    moments: Moments,
    penalty: Option<f32>,
}

/// AdamW (decoupled weight decay), as burn-optim's `AdamW`, in one kernel per parameter.
#[derive(Clone, Debug)]
pub struct AdamW {
    moments: Moments,
    weight_decay: f32,
    cautious: bool,
}

/// What Adam and AdamW share.
#[derive(Clone, Copy, Debug)]
struct Moments {
    beta_1: f32,
    beta_2: f32,
    epsilon: f32,
    amsgrad: bool,
}

impl AdamConfig {
    /// The optimizer.
    pub fn build(&self) -> Adam {
        let moments = Moments { beta_1: self.beta_1, beta_2: self.beta_2, epsilon: self.epsilon, amsgrad: self.amsgrad };
        Adam { moments, penalty: self.weight_decay.as_ref().map(|d| d.penalty) }
    }

    /// The optimizer for a module, with the configured gradient clipping.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<Adam, M, B>
    where
        Adam: SimpleOptimizer<B::InnerBackend>,
    {
        with_clipping(OptimizerAdaptor::from(self.build()), &self.grad_clipping)
    }
}

impl AdamWConfig {
    /// The optimizer.
    pub fn build(&self) -> AdamW {
        let moments = Moments { beta_1: self.beta_1, beta_2: self.beta_2, epsilon: self.epsilon, amsgrad: self.amsgrad };
        AdamW { moments, weight_decay: self.weight_decay, cautious: self.cautious_weight_decay }
    }

    /// The optimizer for a module, with the configured gradient clipping.
    pub fn init<B: AutodiffBackend, M: AutodiffModule<B>>(&self) -> OptimizerAdaptor<AdamW, M, B>
    where
        AdamW: SimpleOptimizer<B::InnerBackend>,
    {
        with_clipping(OptimizerAdaptor::from(self.build()), &self.grad_clipping)
    }
}

fn with_clipping<O, M, B>(optim: OptimizerAdaptor<O, M, B>, clipping: &Option<GradientClippingConfig>) -> OptimizerAdaptor<O, M, B>
where
    O: SimpleOptimizer<B::InnerBackend>,
    M: AutodiffModule<B>,
    B: AutodiffBackend,
{
    match clipping {
        Some(config) => optim.with_grad_clipping(config.init()),
        None => optim,
    }
}

impl<R: Runtime> SimpleOptimizer<Ex<R>> for Adam
where
    R::Device: DeviceOps,
{
    type State<const D: usize> = AdamState<Ex<R>, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: burn::tensor::Tensor<Ex<R>, D>,
        grad: burn::tensor::Tensor<Ex<R>, D>,
        state: Option<Self::State<D>>,
    ) -> (burn::tensor::Tensor<Ex<R>, D>, Option<Self::State<D>>) {
        let decay = self.penalty.map_or(AdamDecay::None, |p| AdamDecay::L2(p as f64));
        let momentum = self.moments.step(lr, decay, tensor, grad, state.map(|s| s.momentum));
        (momentum.0, Some(AdamState { momentum: momentum.1 }))
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &burn::tensor::Device<Ex<R>>) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

impl<R: Runtime> SimpleOptimizer<Ex<R>> for AdamW
where
    R::Device: DeviceOps,
{
    type State<const D: usize> = AdamWState<Ex<R>, D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: burn::tensor::Tensor<Ex<R>, D>,
        grad: burn::tensor::Tensor<Ex<R>, D>,
        state: Option<Self::State<D>>,
    ) -> (burn::tensor::Tensor<Ex<R>, D>, Option<Self::State<D>>) {
        let decay = AdamDecay::Decoupled { rate: self.weight_decay as f64, cautious: self.cautious };
        let momentum = self.moments.step(lr, decay, tensor, grad, state.map(|s| s.momentum));
        (momentum.0, Some(AdamWState { momentum: momentum.1 }))
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &burn::tensor::Device<Ex<R>>) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

impl Moments {
    /// One fused update; the state's `time` counts the steps taken, this one included.
    fn step<R: Runtime, const D: usize>(
        &self,
        lr: LearningRate,
        decay: AdamDecay,
        tensor: burn::tensor::Tensor<Ex<R>, D>,
        grad: burn::tensor::Tensor<Ex<R>, D>,
        state: Option<AdaptiveMomentumState<Ex<R>, D>>,
    ) -> (burn::tensor::Tensor<Ex<R>, D>, AdaptiveMomentumState<Ex<R>, D>)
    where
        R::Device: DeviceOps,
    {
        let time = state.as_ref().map_or(1, |s| s.time + 1);
        let moments = state.map(|s| AdamMoments {
            moment_1: primitive(s.moment_1),
            moment_2: primitive(s.moment_2),
            max_moment_2: s.max_moment_2.map(primitive),
        });
        let rule = AdamRule {
            lr,
            beta_1: self.beta_1 as f64,
            beta_2: self.beta_2 as f64,
            epsilon: self.epsilon as f64,
            decay,
            time: AdamTime::Host(time),
        };
        let (param, m) = adam_step(primitive(tensor), primitive(grad), moments, &rule, self.amsgrad);
        let state = AdaptiveMomentumState {
            time,
            moment_1: float(m.moment_1),
            moment_2: float(m.moment_2),
            max_moment_2: m.max_moment_2.map(float),
        };
        (float(param), state)
    }
}
