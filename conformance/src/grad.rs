//! Gradient checks: the same graph runs on `Autodiff<Ex>` and `Autodiff<Ref>`, each with and
//! without gradient checkpointing, and every input's gradient is compared.
//!
//! A check builds a graph from leaf tensors (every one requires a gradient), reduces its output
//! to the scalar loss `Σ out · w` with a random weight `w` of the output's shape (so that every
//! output element matters), runs `backward`, and reads each leaf's gradient. [`grad_check!`]
//! does this on the four backends [`AdEx`], [`AdExCk`], [`AdRef`], [`AdRefCk`] and compares ours
//! with the reference of the same checkpointing strategy. Where the reference is missing or
//! wrong, [`fd_check!`] checks our gradients as directional derivatives of our own forward pass
//! (central finite differences, accumulated in f64 on the host).
use std::any::TypeId;

use burn_autodiff::Autodiff;
use burn_autodiff::checkpoint::strategy::BalancedCheckpointing;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, DType, Shape, TensorData, TensorMetadata};
use burn_tensor::{Tensor, TensorPrimitive};
use ex_cubecl::{MatmulPrecision, set_matmul_precision};

use crate::{Ex, Ref, Rng, Suite, Tol, compare, dev, float_data, rf, values};

pub use burn_autodiff;

/// Our backend with autodiff.
pub type AdEx = Autodiff<Ex>;
/// Our backend with autodiff and balanced gradient checkpointing (memory-bound ops are
/// recomputed during the backward pass instead of kept).
pub type AdExCk = Autodiff<Ex, BalancedCheckpointing>;
/// The reference with autodiff.
pub type AdRef = Autodiff<Ref>;
/// The reference with autodiff and balanced gradient checkpointing.
pub type AdRefCk = Autodiff<Ref, BalancedCheckpointing>;

/// Whether `AD` wraps the reference backend.
fn is_reference<AD: AutodiffBackend>() -> bool {
    TypeId::of::<AD::InnerBackend>() == TypeId::of::<Ref>()
}

/// Uploads float data as a tensor of `AD`, tracked when `require_grad`. The reference computes
/// half-precision data in f32 (burn-ndarray lacks f16 and bf16).
pub fn leaf<AD: AutodiffBackend>(data: &TensorData, require_grad: bool) -> FloatTensor<AD> {
    let data = if is_reference::<AD>() && matches!(data.dtype, DType::F16 | DType::BF16) {
        data.clone().convert_dtype(DType::F32)
    } else {
        data.clone()
    };
    let t = AD::float_from_data(data, &dev::<AD>());
    if require_grad { AD::float_set_require_grad(t, true) } else { t }
}

/// The loss weight for an output of `shape`: uniform in [-1, 1), a function of the shape only,
/// so both backends use the same one. Rounded to `dtype` so that the reference sees the values
/// a half-precision run sees.
pub fn loss_weight(shape: &[usize], dtype: DType) -> TensorData {
    let seed = shape.iter().fold(0x5eed_u64, |h, &d| h.wrapping_mul(31).wrapping_add(d as u64));
    float_data(&mut Rng::new(seed), shape, dtype, -1.0, 1.0)
}

/// `Σ out · w` with `w` from [`loss_weight`].
pub fn weighted_loss<AD: AutodiffBackend>(out: FloatTensor<AD>, dtype: DType) -> FloatTensor<AD> {
    let w = leaf::<AD>(&loss_weight(out.shape().as_slice(), dtype), false);
    AD::float_sum(AD::float_mul(out, w))
}

/// What one run of a gradient check gives.
#[derive(Clone, Debug)]
pub struct GradRun {
    /// The forward output.
    pub out: TensorData,
    /// Each leaf's gradient (`None` where the graph registered none).
    pub grads: Vec<Option<TensorData>>,
}

/// Runs `f` on leaves made from `inputs` (all tracked), backpropagates the weighted loss of its
/// output and reads every leaf's gradient. The weight's dtype is the first input's.
pub fn run<AD: AutodiffBackend, const N: usize>(inputs: &[&TensorData; N], f: impl FnOnce([FloatTensor<AD>; N]) -> FloatTensor<AD>) -> GradRun {
    let leaves: [FloatTensor<AD>; N] = std::array::from_fn(|k| leaf::<AD>(inputs[k], true));
    let out = f(leaves.clone());
    let dtype = inputs.first().map_or(DType::F32, |d| d.dtype);
    let grads = AD::backward(weighted_loss::<AD>(out.clone(), dtype));
    let grads = leaves.iter().map(|l| AD::grad(l, &grads).map(rf::<AD::InnerBackend>)).collect();
    GradRun { out: rf::<AD>(out), grads }
}

/// Compares one strategy's runs (ours, reference): the output, then each named gradient.
pub fn compare_runs(suite: &mut Suite, case: &str, names: &[&str], tol: Tol, ours: Result<GradRun, String>, reference: Result<GradRun, String>) {
    let reference = match reference {
        Ok(r) => r,
        Err(e) => return suite.record(case, Err(format!("the reference panicked: {e}"))),
    };
    let ours = match ours {
        Ok(r) => r,
        Err(e) => return suite.record(case, Err(format!("panicked: {e}"))),
    };
    suite.record(format!("{case} [out]"), compare(&ours.out, &reference.out, tol));
    for (k, name) in names.iter().enumerate() {
        let ok = match (&ours.grads[k], &reference.grads[k]) {
            (Some(a), Some(b)) => compare(a, b, tol),
            (None, None) => Ok(()),
            (Some(_), None) => Err("a gradient where the reference has none".into()),
            (None, Some(_)) => Err("no gradient where the reference has one".into()),
        };
        suite.record(format!("{case} [grad {name}]"), ok);
    }
}

/// Runs a gradient check on all four autodiff backends and records the comparisons, plain and
/// checkpointed: `grad_check!(suite, case, tol, [x: &xd, y: &yd], |B| B::float_mul(x, y))`.
/// In the body, `B` is the autodiff backend and each name a tracked leaf of it.
#[macro_export]
macro_rules! grad_check {
    ($suite:expr, $case:expr, $tol:expr, [$($name:ident : $data:expr),+ $(,)?], |$B:ident| $body:expr) => {{
        let inputs = [$($data),+];
        let names = [$(stringify!($name)),+];
        let case: String = $case.into();
        macro_rules! one {
            ($ad:ty) => {
                $crate::catch(|| {
                    #[allow(dead_code)]
                    type $B = $ad;
                    $crate::grad::run::<$B, _>(&inputs, |[$($name),+]| $body)
                })
            };
        }
        let (ours, reference) = (one!($crate::grad::AdEx), one!($crate::grad::AdRef));
        $crate::grad::compare_runs($suite, &format!("{case} plain"), &names, $tol, ours, reference);
        let (ours, reference) = (one!($crate::grad::AdExCk), one!($crate::grad::AdRefCk));
        $crate::grad::compare_runs($suite, &format!("{case} checkpointed"), &names, $tol, ours, reference);
    }};
}

/// Gives `f` back, typed as a forward pass over `N` inputs like `inputs`.
pub fn forward_fn<const N: usize, F: Fn([TensorData; N]) -> TensorData>(_inputs: &[&TensorData; N], f: F) -> F {
    f
}

/// `data + eps · dir`, in `data`'s dtype.
pub fn shifted(data: &TensorData, dir: &TensorData, eps: f64) -> TensorData {
    let v: Vec<f32> = values(data).iter().zip(values(dir)).map(|(a, d)| (a + eps * d) as f32).collect();
    TensorData::new(v, data.shape.clone()).convert_dtype(data.dtype)
}

/// Σ a·b in f64.
pub fn dot(a: &TensorData, b: &TensorData) -> f64 {
    values(a).iter().zip(values(b)).map(|(x, y)| x * y).sum()
}

/// Checks our gradients of the inputs picked by `which` as directional derivatives: for two
/// random directions `u` per input, `<grad, u>` must match the central difference
/// `(L(x + eps·u) - L(x - eps·u)) / 2eps` of the loss `L = Σ out · w` that our own forward pass
/// gives (summed in f64 on the host), within `rel · (1 + |<grad, u>|)`. `grads` are our
/// analytic gradients (from [`run`]); `forward` runs the forward pass on perturbed inputs.
pub fn directional_derivatives<const N: usize>(
    inputs: &[&TensorData; N],
    which: &[usize],
    grads: &GradRun,
    forward: impl Fn([TensorData; N]) -> TensorData,
    eps: f64,
    rel: f64,
) -> Result<(), String> {
    let w = loss_weight(&grads.out.shape, grads.out.dtype);
    let loss = |xs: [TensorData; N]| dot(&forward(xs), &w);
    let mut errors = Vec::new();
    for &k in which {
        let Some(grad) = &grads.grads[k] else {
            errors.push(format!("input {k} has no gradient"));
            continue;
        };
        for d in 0..2 {
            let dir = float_data(&mut Rng::new(0xd1f + 7 * k as u64 + d), &inputs[k].shape, DType::F32, -1.0, 1.0);
            let at = |eps: f64| {
                let xs: [TensorData; N] = std::array::from_fn(|j| if j == k { shifted(inputs[j], &dir, eps) } else { inputs[j].clone() });
                loss(xs)
            };
            let fd = (at(eps) - at(-eps)) / (2.0 * eps);
            let analytic = dot(grad, &dir);
            if (fd - analytic).abs() > rel * (1.0 + analytic.abs()) {
                errors.push(format!("input {k}, direction {d}: finite difference {fd} vs gradient {analytic}"));
            }
        }
    }
    if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) }
}

/// Checks our gradients where the reference has none or a wrong one, plain and checkpointed:
/// `fd_check!(suite, case, eps, rel, [x: &xd, y: &yd], [0, 1], |B| body)` computes our
/// gradients with `B` = [`AdEx`] and [`AdExCk`], then compares those of the inputs listed
/// (by position) with central differences of the forward pass on our backend without autodiff
/// (see [`directional_derivatives`]).
#[macro_export]
macro_rules! fd_check {
    ($suite:expr, $case:expr, $eps:expr, $rel:expr, [$($name:ident : $data:expr),+ $(,)?], $which:expr, |$B:ident| $body:expr) => {{
        let inputs = [$($data),+];
        let case: String = $case.into();
        let forward = $crate::grad::forward_fn(&inputs, |xs| {
            #[allow(dead_code)]
            type $B = $crate::Ex;
            let [$($name),+] = xs.each_ref().map(|d| $crate::f::<$B>(d));
            $crate::rf::<$B>($body)
        });
        macro_rules! one {
            ($ad:ty, $label:literal) => {
                let ok = $crate::catch(|| {
                    #[allow(dead_code)]
                    type $B = $ad;
                    let grads = $crate::grad::run::<$B, _>(&inputs, |[$($name),+]| $body);
                    $crate::grad::directional_derivatives(&inputs, &$which, &grads, &forward, $eps, $rel)
                });
                $suite.record(format!("{case} {} [grads as directional derivatives]", $label), ok.unwrap_or_else(|e| Err(format!("panicked: {e}"))));
            };
        }
        one!($crate::grad::AdEx, "plain");
        one!($crate::grad::AdExCk, "checkpointed");
    }};
}

/// Exact f32 matrix products (TF32 on devices that have it would need looser tolerances).
pub fn setup() {
    set_matmul_precision(MatmulPrecision::Exact);
}

/// A seed derived from a case name, so every case draws its own inputs.
pub fn seed_of(name: &str) -> u64 {
    name.bytes().fold(17u64, |h, c| h.wrapping_mul(131).wrapping_add(c as u64)) % 100_000
}

/// f32 data of `shape`, uniform in `[lo, hi)`.
pub fn rand(seed: u64, shape: &[usize], lo: f64, hi: f64) -> TensorData {
    float_data(&mut Rng::new(seed), shape, DType::F32, lo, hi)
}

/// Applies a Tensor-API function to a primitive of any rank, flattened to 1-D and back.
pub fn flat<B: Backend>(x: FloatTensor<B>, f: impl FnOnce(Tensor<B, 1>) -> Tensor<B, 1>) -> FloatTensor<B> {
    let shape = x.shape();
    let n = shape.num_elements();
    let t = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::float_reshape(x, Shape::new([n]))));
    B::float_reshape(f(t).into_primitive().tensor(), shape)
}

/// A rank-`D` primitive as a Tensor.
pub fn tensor<B: Backend, const D: usize>(x: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(x))
}

/// A Tensor's primitive.
pub fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}
