//! Optimizer updates, one fused kernel per parameter tensor: SGD (with or without momentum)
//! and Adam / AdamW (with or without AMSGrad). Each reads the parameter, its gradient and the
//! optimizer state once and writes the new parameter and state in place, where Burn's
//! optimizers launch one kernel per tensor op (about ten for an Adam step).
//!
//! Every tensor is contiguous with the same length and read in vectors of `N`; the math runs
//! in `A` (f32 for half-precision parameters, the parameter type otherwise); with `bits` the
//! tensors are bf16 held as bits in u16, read through [`load`](fn@crate::bf16::load) and written
//! through [`store`](fn@crate::bf16::store). On the first
//! step (`first`) the state is not read: it starts from zero as Burn's optimizers define it.
//! Adam's bias corrections come folded into its scalars from the host, or (`*_at` kernels)
//! are computed from a step count the kernel reads from device memory, so that a recorded
//! launch replayed at later steps applies their corrections.
use cubecl::prelude::*;

use crate::bf16::{load, store};
use crate::math::powf;

/// How the weight decay enters an update.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Decay {
    /// No decay.
    None,
    /// L2 penalty added to the gradient: `g + penalty * p` (SGD, Adam).
    L2,
    /// Decoupled decay of the parameter: `p * (1 - rate)` (AdamW).
    Decoupled,
    /// Decoupled decay only where the parameter and the first moment agree in sign (AdamW's
    /// cautious weight decay).
    Cautious,
}

/// The scalars of an SGD update, of the compute type.
#[derive(CubeLaunch, CubeType)]
pub struct SgdArgs {
    /// Learning rate.
    pub lr: InputScalar,
    /// L2 penalty (used with [`Decay::L2`]).
    pub penalty: InputScalar,
    /// Momentum factor.
    pub momentum: InputScalar,
    /// Dampening of the gradient in the velocity.
    pub dampening: InputScalar,
}

/// The scalars of an Adam or AdamW update, of the compute type. The update is
/// `p' = decay(p) - step * m / (sqrt(v * v_scale) + eps)`, which folds both bias corrections
/// into `step`, `v_scale` and `eps` (computed on the host per step). The kernels that read
/// the step count on the device ([`adam_step_at`](fn@adam_step_at)) take the learning rate as `step` and
/// epsilon as `eps` and fold the corrections themselves.
#[derive(CubeLaunch, CubeType)]
pub struct AdamArgs {
    /// First moment decay.
    pub beta_1: InputScalar,
    /// Second moment decay.
    pub beta_2: InputScalar,
    /// Step size applied to the first moment.
    pub step: InputScalar,
    /// Factor of the second moment under the square root.
    pub v_scale: InputScalar,
    /// Added to the root.
    pub eps: InputScalar,
    /// L2 penalty ([`Decay::L2`]) or decoupled decay rate (`lr * weight_decay`).
    pub decay: InputScalar,
}

/// `p -= lr * (g + penalty * p)`: SGD without momentum.
#[cube(launch_unchecked)]
pub fn sgd_step<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    args: &SgdArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let (p, g) = (param[ABSOLUTE_POS], grad[ABSOLUTE_POS]);
    let lr = args.lr.get::<A>();
    let mut out = Vector::<F, N>::empty();
    #[unroll]
    for i in 0..p.vector_size() {
        let x = load::<F, A>(p[i], bits);
        let dx = decayed_grad::<A>(load::<F, A>(g[i], bits), x, args.penalty.get::<A>(), decay);
        out[i] = store::<F, A>(x - lr * dx, bits);
    }
    param[ABSOLUTE_POS] = out;
}

/// SGD with momentum: `vel = first ? g : momentum * vel + (1 - dampening) * g`, then
/// `p -= lr * (nesterov ? g + momentum * vel : vel)`, `g` with the L2 penalty added.
#[cube(launch_unchecked)]
pub fn sgd_momentum_step<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    velocity: &mut Tensor<Vector<F, N>>,
    args: &SgdArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] nesterov: bool,
    #[comptime] first: bool,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let (p, g) = (param[ABSOLUTE_POS], grad[ABSOLUTE_POS]);
    let mut vel_in = Vector::<F, N>::empty();
    if !first {
        vel_in = velocity[ABSOLUTE_POS];
    }
    let (lr, momentum) = (args.lr.get::<A>(), args.momentum.get::<A>());
    let keep = A::new(1.0) - args.dampening.get::<A>();
    let (mut out, mut vel_out) = (Vector::<F, N>::empty(), Vector::<F, N>::empty());
    #[unroll]
    for i in 0..p.vector_size() {
        let x = load::<F, A>(p[i], bits);
        let dx = decayed_grad::<A>(load::<F, A>(g[i], bits), x, args.penalty.get::<A>(), decay);
        let mut vel = dx;
        if !first {
            vel = load::<F, A>(vel_in[i], bits) * momentum + dx * keep;
        }
        let mut step = vel;
        if nesterov {
            step = vel * momentum + dx;
        }
        out[i] = store::<F, A>(x - lr * step, bits);
        vel_out[i] = store::<F, A>(vel, bits);
    }
    param[ABSOLUTE_POS] = out;
    velocity[ABSOLUTE_POS] = vel_out;
}

/// Adam / AdamW: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g²` (from zero on the first
/// step), then the parameter update of [`AdamArgs`].
#[cube(launch_unchecked)]
pub fn adam_step<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    args: &AdamArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] first: bool,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let folded = folded_corrections::<A>(args);
    adam_vectors::<F, A, N>(param, grad, moment_1, moment_2, args, folded, decay, first, bits);
}

/// [`adam_step`](fn@adam_step) at the step count held by `time` (one element, this update included): the
/// kernel computes the bias corrections `1 - beta^t` itself, in `A`, so that a replayed
/// launch applies each step's own. `args.step` is the learning rate and `args.eps` epsilon;
/// `decoupled` picks AdamW's form of the corrections (see [`AdamArgs`]). The moments are
/// always read: a state that starts at zero gives the first step's moments.
#[cube(launch_unchecked)]
pub fn adam_step_at<F: Numeric, A: Float, T: Numeric, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    time: &Tensor<T>,
    args: &AdamArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] decoupled: bool,
    #[comptime] bits: bool,
    #[define(F, A, T)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let corrected = device_corrections::<A>(A::cast_from(time[0]), args, decoupled);
    adam_vectors::<F, A, N>(param, grad, moment_1, moment_2, args, corrected, decay, false, bits);
}

/// [`adam_step`](fn@adam_step) with AMSGrad: the root takes the running maximum of the second moment
/// (`max_moment_2`, which starts as the first step's second moment).
#[cube(launch_unchecked)]
pub fn adam_amsgrad_step<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    max_moment_2: &mut Tensor<Vector<F, N>>,
    args: &AdamArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] first: bool,
    #[comptime] bits: bool,
    #[define(F, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let folded = folded_corrections::<A>(args);
    adam_amsgrad_vectors::<F, A, N>(param, grad, moment_1, moment_2, max_moment_2, args, folded, decay, first, bits);
}

/// [`adam_amsgrad_step`](fn@adam_amsgrad_step) at the step count held by `time`, as [`adam_step_at`](fn@adam_step_at).
#[cube(launch_unchecked)]
pub fn adam_amsgrad_step_at<F: Numeric, A: Float, T: Numeric, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    max_moment_2: &mut Tensor<Vector<F, N>>,
    time: &Tensor<T>,
    args: &AdamArgs,
    vectors: usize,
    #[comptime] decay: Decay,
    #[comptime] decoupled: bool,
    #[comptime] bits: bool,
    #[define(F, A, T)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let corrected = device_corrections::<A>(A::cast_from(time[0]), args, decoupled);
    adam_amsgrad_vectors::<F, A, N>(param, grad, moment_1, moment_2, max_moment_2, args, corrected, decay, false, bits);
}

/// `count += 1` on a one-element tensor: the step count that [`adam_step_at`](fn@adam_step_at) reads.
#[cube(launch_unchecked)]
pub fn next_step_count<T: Numeric>(count: &mut Tensor<T>, #[define(T)] _dtype: StorageType) {
    if ABSOLUTE_POS == 0 {
        count[0] = count[0] + T::from_int(1);
    }
}

/// The bias-corrected scalars of an update: `p' = decay(p) - step * m / (sqrt(v * v_scale) + eps)`.
#[derive(CubeType, Clone, Copy)]
pub struct Corrected<A: Float> {
    /// Step size applied to the first moment.
    pub step: A,
    /// Factor of the second moment under the square root.
    pub v_scale: A,
    /// Added to the root.
    pub eps: A,
}

/// The corrections folded into `args` on the host.
#[cube]
fn folded_corrections<A: Float>(args: &AdamArgs) -> Corrected<A> {
    Corrected::<A> { step: args.step.get::<A>(), v_scale: args.v_scale.get::<A>(), eps: args.eps.get::<A>() }
}

/// The corrections at step `t` from the learning rate (`args.step`) and epsilon (`args.eps`),
/// in the forms of the host's `adam_scalars`: Adam (Burn's) `lr * sqrt(c2) / c1` with
/// `eps * sqrt(c2)`; AdamW (`decoupled`) `lr / c1` with `v / c2`, where `c = 1 - beta^t`.
#[cube]
fn device_corrections<A: Float>(t: A, args: &AdamArgs, #[comptime] decoupled: bool) -> Corrected<A> {
    let one = A::new(1.0);
    let c1 = one - powf::<A>(args.beta_1.get::<A>(), t);
    let c2 = one - powf::<A>(args.beta_2.get::<A>(), t);
    let (lr, eps) = (args.step.get::<A>(), args.eps.get::<A>());
    if decoupled {
        Corrected::<A> { step: lr / c1, v_scale: one / c2, eps }
    } else {
        let root = A::sqrt(c2);
        Corrected::<A> { step: lr * root / c1, v_scale: one, eps: eps * root }
    }
}

/// The Adam update of the vector at `ABSOLUTE_POS`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn adam_vectors<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    args: &AdamArgs,
    corrected: Corrected<A>,
    #[comptime] decay: Decay,
    #[comptime] first: bool,
    #[comptime] bits: bool,
) {
    let (p, g) = (param[ABSOLUTE_POS], grad[ABSOLUTE_POS]);
    let (mut m_in, mut v_in) = (Vector::<F, N>::empty(), Vector::<F, N>::empty());
    if !first {
        m_in = moment_1[ABSOLUTE_POS];
        v_in = moment_2[ABSOLUTE_POS];
    }
    let (mut out, mut m_out, mut v_out) = (Vector::<F, N>::empty(), Vector::<F, N>::empty(), Vector::<F, N>::empty());
    #[unroll]
    for i in 0..p.vector_size() {
        let x = load::<F, A>(p[i], bits);
        let (m, v) = adam_moments::<A>(load::<F, A>(g[i], bits), x, load::<F, A>(m_in[i], bits), load::<F, A>(v_in[i], bits), args, decay, first);
        out[i] = store::<F, A>(adam_update::<A>(x, m, v, args, corrected, decay), bits);
        m_out[i] = store::<F, A>(m, bits);
        v_out[i] = store::<F, A>(v, bits);
    }
    param[ABSOLUTE_POS] = out;
    moment_1[ABSOLUTE_POS] = m_out;
    moment_2[ABSOLUTE_POS] = v_out;
}

/// The AMSGrad update of the vector at `ABSOLUTE_POS`.
#[cube]
#[allow(clippy::too_many_arguments)]
fn adam_amsgrad_vectors<F: Numeric, A: Float, N: Size>(
    param: &mut Tensor<Vector<F, N>>,
    grad: &Tensor<Vector<F, N>>,
    moment_1: &mut Tensor<Vector<F, N>>,
    moment_2: &mut Tensor<Vector<F, N>>,
    max_moment_2: &mut Tensor<Vector<F, N>>,
    args: &AdamArgs,
    corrected: Corrected<A>,
    #[comptime] decay: Decay,
    #[comptime] first: bool,
    #[comptime] bits: bool,
) {
    let (p, g) = (param[ABSOLUTE_POS], grad[ABSOLUTE_POS]);
    let (mut m_in, mut v_in, mut max_in) = (Vector::<F, N>::empty(), Vector::<F, N>::empty(), Vector::<F, N>::empty());
    if !first {
        m_in = moment_1[ABSOLUTE_POS];
        v_in = moment_2[ABSOLUTE_POS];
        max_in = max_moment_2[ABSOLUTE_POS];
    }
    let mut out = Vector::<F, N>::empty();
    let (mut m_out, mut v_out, mut max_out) = (Vector::<F, N>::empty(), Vector::<F, N>::empty(), Vector::<F, N>::empty());
    #[unroll]
    for i in 0..p.vector_size() {
        let x = load::<F, A>(p[i], bits);
        let (m, v) = adam_moments::<A>(load::<F, A>(g[i], bits), x, load::<F, A>(m_in[i], bits), load::<F, A>(v_in[i], bits), args, decay, first);
        let mut v_max = v;
        if !first {
            v_max = A::max(load::<F, A>(max_in[i], bits), v);
        }
        out[i] = store::<F, A>(adam_update::<A>(x, m, v_max, args, corrected, decay), bits);
        m_out[i] = store::<F, A>(m, bits);
        v_out[i] = store::<F, A>(v, bits);
        max_out[i] = store::<F, A>(v_max, bits);
    }
    param[ABSOLUTE_POS] = out;
    moment_1[ABSOLUTE_POS] = m_out;
    moment_2[ABSOLUTE_POS] = v_out;
    max_moment_2[ABSOLUTE_POS] = max_out;
}

/// The gradient with the L2 penalty added when `decay` is [`Decay::L2`].
#[cube]
fn decayed_grad<A: Float>(g: A, p: A, penalty: A, #[comptime] decay: Decay) -> A {
    match decay {
        Decay::L2 => g + penalty * p,
        _ => g,
    }
}

/// The new first and second moments.
#[cube]
fn adam_moments<A: Float>(g: A, p: A, m: A, v: A, args: &AdamArgs, #[comptime] decay: Decay, #[comptime] first: bool) -> (A, A) {
    let g = decayed_grad::<A>(g, p, args.decay.get::<A>(), decay);
    let (beta_1, beta_2) = (args.beta_1.get::<A>(), args.beta_2.get::<A>());
    let one = A::new(1.0);
    let mut m_new = (one - beta_1) * g;
    let mut v_new = (one - beta_2) * g * g;
    if !first {
        m_new += beta_1 * m;
        v_new += beta_2 * v;
    }
    (m_new, v_new)
}

/// The updated parameter from its moments (`v` is the second moment the root takes).
#[cube]
fn adam_update<A: Float>(p: A, m: A, v: A, args: &AdamArgs, corrected: Corrected<A>, #[comptime] decay: Decay) -> A {
    let delta = corrected.step * m / (A::sqrt(v * corrected.v_scale) + corrected.eps);
    let rate = args.decay.get::<A>();
    let decayed = match decay {
        Decay::Decoupled => p * (A::new(1.0) - rate),
        Decay::Cautious => select((p >= A::new(0.0)) == (m >= A::new(0.0)), p - p * rate, p),
        _ => p,
    };
    decayed - delta
}
