//! Fused optimizer updates: one launch per parameter tensor updates the parameter and its
//! optimizer state in place (see the kernels' module, `ex_cubecl_kernels::optim`). The
//! Burn-facing optimizers built on these are in [`crate::optim`].
use burn_backend::{DType, Scalar};
use cubecl::Runtime;
use cubecl::device::Device;
use cubecl::prelude::InputScalar;
use ex_cubecl_kernels::optim::{
    AdamArgsLaunch, Decay, SgdArgsLaunch, adam_amsgrad_step, adam_amsgrad_step_at, adam_step as adam_kernel,
    adam_step_at, next_step_count as next_step_kernel, sgd_momentum_step, sgd_step as sgd_kernel,
};

use super::bf16;
use super::copy::{copy_as, full, into_contiguous};
use super::elementwise::flat_vector_size;
use super::{accumulator_dtype, float_arg};
use crate::runtime::{Geometry, donated_state, is_capturing, launch, storage_type};
use crate::tensor::CubeTensor;

/// SGD's momentum: `vel = momentum * vel + (1 - dampening) * g` (`g` on the first step).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdMomentum {
    /// Momentum factor.
    pub momentum: f64,
    /// Dampening of the gradient in the velocity.
    pub dampening: f64,
    /// Step along `g + momentum * vel` instead of `vel`.
    pub nesterov: bool,
}

/// One SGD update: `p -= lr * step`, where `step` is the gradient (plus `penalty * p`) or
/// the momentum's.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SgdRule {
    /// Learning rate.
    pub lr: f64,
    /// L2 penalty added to the gradient.
    pub penalty: Option<f64>,
    /// Momentum, when the update keeps a velocity.
    pub momentum: Option<SgdMomentum>,
}

/// How Adam's update decays the weights.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AdamDecay {
    /// No decay.
    None,
    /// L2 penalty added to the gradient (Adam's weight decay).
    L2(f64),
    /// Decoupled decay `p * (1 - lr * rate)` (AdamW); `cautious` skips it where the
    /// parameter and the first moment differ in sign.
    Decoupled {
        /// Decay per unit of learning rate.
        rate: f64,
        /// Cautious weight decay.
        cautious: bool,
    },
}

/// The step count of an Adam update, this update included (from 1).
#[derive(Clone, Debug)]
pub enum AdamTime<R: Runtime> {
    /// Known on the host: the bias corrections are computed there (in f64) and passed to the
    /// kernel as scalars. A pipeline replays them as captured.
    Host(usize),
    /// A one-element tensor on the device (any float or int dtype), read by the kernel, which
    /// computes the bias corrections itself, in the compute type (f32 for f32, f16 and bf16
    /// parameters) from the betas rounded to it: with f32 they differ from the host's by about
    /// 1e-5 relatively (`1 - 0.999` loses digits), so results agree with [`AdamTime::Host`]'s
    /// closely, not bit for bit. For captured steps: keep the count in the pipeline's state,
    /// advance it with [`next_step_count`] in the step, and each replay applies its own step's
    /// corrections. The moments are then always read: a first step's state is zeros, not
    /// `None` (a `None` state is made of zeros).
    Device(CubeTensor<R>),
}

/// One Adam or AdamW update at step `time` (from 1). The learning rate and the other scalars
/// are host values (a pipeline replays them as captured).
#[derive(Clone, Debug)]
pub struct AdamRule<R: Runtime> {
    /// Learning rate.
    pub lr: f64,
    /// First moment decay.
    pub beta_1: f64,
    /// Second moment decay.
    pub beta_2: f64,
    /// Added to the root of the bias-corrected second moment.
    pub epsilon: f64,
    /// Weight decay.
    pub decay: AdamDecay,
    /// Step count including this update.
    pub time: AdamTime<R>,
}

/// Adam's per-parameter state: the moments, and the running maximum of the second moment
/// with AMSGrad.
#[derive(Clone, Debug)]
pub struct AdamMoments<R: Runtime> {
    /// First moment.
    pub moment_1: CubeTensor<R>,
    /// Second moment.
    pub moment_2: CubeTensor<R>,
    /// Running maximum of the second moment (AMSGrad).
    pub max_moment_2: Option<CubeTensor<R>>,
}

/// The SGD update of `param` by `grad`, in place where `param` (and `velocity`) are uniquely
/// owned. `velocity` is the state of the previous step (`None` on the first). Returns the new
/// parameter and the new velocity (with momentum).
pub fn sgd_step<R: Runtime>(
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    velocity: Option<CubeTensor<R>>,
    rule: &SgdRule,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    check("sgd step", &param, &[Some(&grad), velocity.as_ref()]);
    // bf16 held as bits is read and written as its bits, computed in f32 (`super::bf16`).
    let bits = param.bf16_bits();
    let compute = accumulator_dtype(param.dtype);
    let dtypes = [param.storage(), storage_type(compute)];
    let momentum = rule.momentum.unwrap_or(SgdMomentum { momentum: 0.0, dampening: 0.0, nesterov: false });
    let scalars = [rule.lr, rule.penalty.unwrap_or(0.0), momentum.momentum, momentum.dampening].map(|x| float_arg(x, compute));
    let decay = if rule.penalty.is_some() { Decay::L2 } else { Decay::None };
    let (param, grad) = (owned(param), into_contiguous(grad));
    let (n, v) = vectors(&param);
    let (p, g) = (param.clone(), grad);
    let Some(m) = rule.momentum else {
        launch(&param.client, "sgd step", Geometry::Units(n), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < n`; every tensor holds `n * v` contiguous elements.
            unsafe {
                sgd_kernel::launch_unchecked::<R>(client, count, dim, v, p.as_arg(), g.as_arg(), sgd_args(&scalars), n, decay, bits, dtypes)
            }
        });
        return (param, None);
    };
    let first = velocity.is_none();
    let velocity = match velocity {
        Some(velocity) => owned(velocity),
        None => CubeTensor::empty(&param.client, &param.device, param.layout.shape.clone(), param.dtype),
    };
    let vel = velocity.clone();
    launch(&param.client, "sgd step", Geometry::Units(n), move |client, count, dim| {
        // SAFETY: as above; `vel` is not read on the first step.
        unsafe {
            sgd_momentum_step::launch_unchecked::<R>(
                client, count, dim, v, p.as_arg(), g.as_arg(), vel.as_arg(), sgd_args(&scalars), n, decay, m.nesterov,
                first, bits, dtypes,
            )
        }
    });
    (param, Some(velocity))
}

/// The Adam or AdamW update of `param` by `grad`, in place where `param` and the moments are
/// uniquely owned; `state` is the previous step's (`None` on the first). With `amsgrad` the
/// returned state keeps the running maximum of the second moment.
pub fn adam_step<R: Runtime>(
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    state: Option<AdamMoments<R>>,
    rule: &AdamRule<R>,
    amsgrad: bool,
) -> (CubeTensor<R>, AdamMoments<R>) {
    let op = "adam step";
    let states = state.as_ref().map(|s| [Some(&s.moment_1), Some(&s.moment_2), s.max_moment_2.as_ref()]);
    check(op, &param, &[&[Some(&grad)][..], states.as_ref().map_or(&[][..], |s| &s[..])].concat());
    let time = device_time(op, &param, &rule.time);
    let compute = accumulator_dtype(param.dtype);
    let (scalars, decay) = adam_scalars(rule, compute);
    let (param, grad) = (owned(param), into_contiguous(grad));
    // With the step count on the device the kernel always reads the state: it starts at zero.
    let first = state.is_none() && time.is_none();
    let zeros = || full(&param.device, param.layout.shape.clone(), Scalar::Float(0.0), param.dtype);
    let new = || match first {
        true => CubeTensor::empty(&param.client, &param.device, param.layout.shape.clone(), param.dtype),
        false => zeros(),
    };
    let (m1, m2, max) = match state {
        Some(s) => (owned(s.moment_1), owned(s.moment_2), s.max_moment_2.map(owned)),
        None => (new(), new(), None),
    };
    // A state without the maximum (AMSGrad switched on later) starts it at zero: the second
    // moment is never negative, so the first maximum is the second moment, as Burn's is.
    let max = amsgrad.then(|| max.unwrap_or_else(zeros));
    let decoupled = matches!(rule.decay, AdamDecay::Decoupled { .. });
    let kernel = AdamLaunch { param: param.clone(), grad, m1: m1.clone(), m2: m2.clone(), max: max.clone(), time, scalars, decay, first, decoupled };
    kernel.launch(op, compute);
    (param, AdamMoments { moment_1: m1, moment_2: m2, max_moment_2: max })
}

/// `count + 1` for a step count on the device ([`AdamTime::Device`]): one launch, in place
/// where `count` is uniquely owned or, during a pipeline capture, the pipeline's state (so a
/// captured step keeps its count in the state without a copy).
///
/// # Panics
/// Unless `count` holds one float or int element.
pub fn next_step_count<R: Runtime>(count: CubeTensor<R>) -> CubeTensor<R> {
    check_count("next step count", &count);
    if count.bf16_bits() {
        return bf16::map(count, next_step_count);
    }
    let count = owned(count);
    let c = count.clone();
    launch(&count.client, "next step count", Geometry::Units(1), move |client, cubes, dim| {
        // SAFETY: one unit writes the one element.
        unsafe { next_step_kernel::launch_unchecked::<R>(client, cubes, dim, c.as_arg(), c.storage()) }
    });
    count
}

/// Panics unless `count` holds one float or int element.
fn check_count<R: Runtime>(op: &str, count: &CubeTensor<R>) {
    let numeric = count.dtype.is_float() || count.dtype.is_int() || count.dtype.is_uint();
    if count.num_elements() != 1 || !numeric {
        panic!(
            "ex_cubecl: {op}: the step count must be one float or int element, got {:?} with shape {:?}",
            count.dtype,
            count.dims()
        );
    }
}

/// The step-count tensor of a device-side `time` (contiguous), checked: one float or int
/// element on `param`'s device. `None` for a host time.
fn device_time<R: Runtime>(op: &str, param: &CubeTensor<R>, time: &AdamTime<R>) -> Option<CubeTensor<R>> {
    let AdamTime::Device(time) = time else { return None };
    check_count(op, time);
    if time.device.to_id() != param.device.to_id() {
        panic!("ex_cubecl: {op}: the step count is on {:?}, the parameter on {:?}", time.device, param.device);
    }
    Some(into_contiguous(time.clone()))
}

/// The tensors and scalars of one fused Adam launch.
struct AdamLaunch<R: Runtime> {
    param: CubeTensor<R>,
    grad: CubeTensor<R>,
    m1: CubeTensor<R>,
    m2: CubeTensor<R>,
    max: Option<CubeTensor<R>>,
    time: Option<CubeTensor<R>>,
    scalars: [InputScalar; 6],
    decay: Decay,
    first: bool,
    decoupled: bool,
}

impl<R: Runtime> AdamLaunch<R> {
    /// Launches the kernel for the state (with or without the AMSGrad maximum) and the time
    /// (host or device).
    fn launch(self, op: &str, compute: DType) {
        let (n, v) = vectors(&self.param);
        let client = self.param.client.clone();
        let dtypes = [self.param.storage(), storage_type(compute)];
        // bf16 held as bits is read and written as its bits, computed in f32 (`super::bf16`).
        let bits = self.param.bf16_bits();
        let Self { param: p, grad: g, m1: a, m2: b, max, time, scalars, decay, first, decoupled } = self;
        // SAFETY (every arm): the kernel guards `pos < n`; every tensor holds `n * v`
        // contiguous elements and the time one; the moments are not read on the first step.
        match (max, time) {
            (None, None) => launch(&client, op, Geometry::Units(n), move |client, count, dim| unsafe {
                adam_kernel::launch_unchecked::<R>(
                    client, count, dim, v, p.as_arg(), g.as_arg(), a.as_arg(), b.as_arg(), adam_args(&scalars), n,
                    decay, first, bits, dtypes,
                )
            }),
            (Some(c), None) => launch(&client, op, Geometry::Units(n), move |client, count, dim| unsafe {
                adam_amsgrad_step::launch_unchecked::<R>(
                    client, count, dim, v, p.as_arg(), g.as_arg(), a.as_arg(), b.as_arg(), c.as_arg(),
                    adam_args(&scalars), n, decay, first, bits, dtypes,
                )
            }),
            (None, Some(t)) => launch(&client, op, Geometry::Units(n), move |client, count, dim| unsafe {
                adam_step_at::launch_unchecked::<R>(
                    client, count, dim, v, p.as_arg(), g.as_arg(), a.as_arg(), b.as_arg(), t.as_arg(),
                    adam_args(&scalars), n, decay, decoupled, bits, [dtypes[0], dtypes[1], t.storage()],
                )
            }),
            (Some(c), Some(t)) => launch(&client, op, Geometry::Units(n), move |client, count, dim| unsafe {
                adam_amsgrad_step_at::launch_unchecked::<R>(
                    client, count, dim, v, p.as_arg(), g.as_arg(), a.as_arg(), b.as_arg(), c.as_arg(), t.as_arg(),
                    adam_args(&scalars), n, decay, decoupled, bits, [dtypes[0], dtypes[1], t.storage()],
                )
            }),
        }
    }
}

/// Adam's scalars for the kernel and its decay mode. With a host time the bias corrections
/// are folded in; with a device time the kernel folds them, from the learning rate (`step`)
/// and epsilon (`eps`).
fn adam_scalars<R: Runtime>(rule: &AdamRule<R>, compute: DType) -> ([InputScalar; 6], Decay) {
    let (decay, rate) = adam_decay(rule);
    let [step, v_scale, eps] = match rule.time {
        AdamTime::Host(time) => folded_corrections(rule, time),
        AdamTime::Device(_) => [rule.lr, 1.0, rule.epsilon],
    };
    let scalars = [rule.beta_1, rule.beta_2, step, v_scale, eps, rate].map(|x| float_arg(x, compute));
    (scalars, decay)
}

/// The kernel's decay mode and its scalar: the L2 penalty, or AdamW's `lr * rate`.
fn adam_decay<R: Runtime>(rule: &AdamRule<R>) -> (Decay, f64) {
    match rule.decay {
        AdamDecay::Decoupled { rate, cautious } => {
            let rate = rule.lr * rate;
            let mode = match (rate == 0.0, cautious) {
                (true, _) => Decay::None,
                (false, false) => Decay::Decoupled,
                (false, true) => Decay::Cautious,
            };
            (mode, rate)
        }
        AdamDecay::L2(penalty) => (Decay::L2, penalty),
        AdamDecay::None => (Decay::None, 0.0),
    }
}

/// `step`, `v_scale` and `eps` with the bias corrections of step `time` folded in. Adam
/// (Burn's form): lr * sqrt(c2) / c1 * m / (sqrt(v) + eps * sqrt(c2)); AdamW:
/// lr / c1 * m / (sqrt(v / c2) + eps).
fn folded_corrections<R: Runtime>(rule: &AdamRule<R>, time: usize) -> [f64; 3] {
    let t = time.max(1) as i32;
    let (c1, c2) = (1.0 - rule.beta_1.powi(t), 1.0 - rule.beta_2.powi(t));
    match rule.decay {
        AdamDecay::Decoupled { .. } => [rule.lr / c1, 1.0 / c2, rule.epsilon],
        AdamDecay::L2(_) | AdamDecay::None => [rule.lr * c2.sqrt() / c1, 1.0, rule.epsilon * c2.sqrt()],
    }
}

fn sgd_args<R: Runtime>(s: &[InputScalar; 4]) -> SgdArgsLaunch<R> {
    SgdArgsLaunch::new(s[0], s[1], s[2], s[3])
}

fn adam_args<R: Runtime>(s: &[InputScalar; 6]) -> AdamArgsLaunch<R> {
    AdamArgsLaunch::new(s[0], s[1], s[2], s[3], s[4], s[5])
}

/// Panics unless `param` is a float tensor and every other tensor has its shape and dtype.
fn check<R: Runtime>(op: &str, param: &CubeTensor<R>, others: &[Option<&CubeTensor<R>>]) {
    if !param.dtype.is_float() {
        panic!("ex_cubecl: {op}: parameters must be float tensors, got {:?} with shape {:?}", param.dtype, param.dims());
    }
    for other in others.iter().flatten() {
        if other.dims() != param.dims() || other.dtype != param.dtype {
            panic!(
                "ex_cubecl: {op}: the parameter is {:?} with shape {:?} but its gradient or state is {:?} with shape {:?}",
                param.dtype,
                param.dims(),
                other.dtype,
                other.dims()
            );
        }
    }
}

/// `tensor`, when a kernel may write into it in place (uniquely owned, contiguous from its
/// buffer's start); otherwise a contiguous copy that is. While a pipeline captures, only the
/// pipeline's state buffers are written in place (state is donated to the step): any other
/// buffer may be a constant of the pipeline, which every replay must find unchanged.
fn owned<R: Runtime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    let in_place = match is_capturing() {
        true => donated_state(&tensor),
        false => tensor.can_mut() && tensor.layout.is_contiguous_from_start(),
    };
    match in_place {
        true => tensor,
        false => copy_as(&tensor, tensor.dtype, 0),
    }
}

/// The number of vectors the update runs over and their size.
fn vectors<R: Runtime>(param: &CubeTensor<R>) -> (usize, usize) {
    let n = param.num_elements();
    let v = flat_vector_size(&param.client, param.dtype, n, &[0]);
    (n / v, v)
}
