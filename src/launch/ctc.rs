//! CTC loss: the alpha and beta recursions (`ex_cubecl_kernels::ctc`, a launch per time step), in f32
//! whatever the input's float dtype, and the gradient composed from them by Burn's own
//! `ctc_grad_from_alpha_beta_default`.
//!
//! Burn's default decomposition runs the recursion as a chain of tensor ops per time step in
//! the input's dtype; in f16 or bf16 its sums of log-probabilities lose a unit in the third
//! digit per step (gradient errors of 5e-2 after a dozen steps). Here the recursions run in
//! f32, and only the results are rounded to the input's dtype.
use burn_backend::ops::ctc::ctc_grad_from_alpha_beta_default;
use burn_backend::{DType, DeviceOps, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::ctc::{ctc_alpha_step, ctc_beta_step, ctc_nll};

use super::copy::{cast, into_contiguous};
use crate::ExCubeclBackend;
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// The recursions' results, in f32: `alpha` and `beta` `[T, N, 2S + 1]`, `nll` `[N]`.
struct Recursions<R: Runtime> {
    alpha: CubeTensor<R>,
    beta: CubeTensor<R>,
    nll: CubeTensor<R>,
}

/// Per-sample CTC loss `[N]` (`+inf` where the target cannot be aligned) of `log_probs`
/// `[T, N, C]`, in the dtype of `log_probs`.
pub fn ctc_loss<R: Runtime>(
    log_probs: CubeTensor<R>,
    targets: CubeTensor<R>,
    input_lengths: CubeTensor<R>,
    target_lengths: CubeTensor<R>,
    blank: usize,
) -> CubeTensor<R> {
    let dtype = log_probs.dtype;
    let nll = recursions(log_probs, targets, input_lengths, target_lengths, blank).nll;
    narrow(nll, dtype)
}

/// The gradient of `sum(ctc_loss(..) * grad_loss)` with respect to `log_probs`; samples whose
/// target cannot be aligned get zeros, and so do time steps past a sample's input length.
pub fn ctc_loss_backward<R: Runtime>(
    log_probs: CubeTensor<R>,
    targets: CubeTensor<R>,
    input_lengths: CubeTensor<R>,
    target_lengths: CubeTensor<R>,
    grad_loss: CubeTensor<R>,
    blank: usize,
) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    let dtype = log_probs.dtype;
    let rec = recursions(log_probs.clone(), targets.clone(), input_lengths.clone(), target_lengths, blank);
    let grad = ctc_grad_from_alpha_beta_default::<ExCubeclBackend<R>>(
        widen(log_probs),
        targets,
        input_lengths,
        widen(grad_loss),
        rec.alpha,
        rec.beta,
        rec.nll,
        blank,
    );
    narrow(grad, dtype)
}

fn recursions<R: Runtime>(
    log_probs: CubeTensor<R>,
    targets: CubeTensor<R>,
    input_lengths: CubeTensor<R>,
    target_lengths: CubeTensor<R>,
    blank: usize,
) -> Recursions<R> {
    let dims = log_probs.dims().to_vec();
    let (t_dims, il, tl) = (targets.dims().to_vec(), input_lengths.dims().to_vec(), target_lengths.dims().to_vec());
    let valid = dims.len() == 3 && t_dims.len() == 2 && t_dims[0] == dims[1] && il == [dims[1]] && tl == [dims[1]];
    if !valid || blank >= dims[2].max(1) || !log_probs.dtype.is_float() {
        panic!(
            "ex_cubecl: ctc_loss: expected log_probs [T, N, C] (float), targets [N, S], input_lengths [N] and \
             target_lengths [N] with blank < C; got {dims:?} ({:?}), {t_dims:?} ({:?}), {il:?}, {tl:?}, blank {blank}",
            log_probs.dtype, targets.dtype
        );
    }
    let (t, n, l) = (dims[0], dims[1], 2 * t_dims[1] + 1);
    let client = log_probs.client.clone();
    let device = log_probs.device.clone();
    let ints = |x: CubeTensor<R>| into_contiguous(cast(x, DType::I32));
    let (lp, tg, il, tl) = (into_contiguous(widen(log_probs)), ints(targets), ints(input_lengths), ints(target_lengths));
    let alpha = CubeTensor::empty(&client, &device, Shape::from(vec![t, n, l]), DType::F32);
    let beta = CubeTensor::empty(&client, &device, Shape::from(vec![t, n, l]), DType::F32);
    let nll = CubeTensor::empty(&client, &device, Shape::from(vec![n]), DType::F32);
    // SAFETY (every launch below): the kernels guard `pos < N * L` (`pos < N`), clamp lengths
    // to the tensors' extents, and read a class only when it lies in `0..C`.
    for step in 0..t {
        let (lp, tg, il, tl, a) = (lp.clone(), tg.clone(), il.clone(), tl.clone(), alpha.clone());
        launch(&client, "ctc_loss alpha", Geometry::Units(n * l), move |client, count, cube_dim| unsafe {
            ctc_alpha_step::launch_unchecked::<R>(
                client, count, cube_dim, lp.as_arg(), tg.as_arg(), il.as_arg(), tl.as_arg(), a.as_arg(), step,
                blank as i32, f32::NEG_INFINITY,
            )
        });
    }
    for step in (0..t).rev() {
        let (lp, tg, il, tl, b) = (lp.clone(), tg.clone(), il.clone(), tl.clone(), beta.clone());
        launch(&client, "ctc_loss beta", Geometry::Units(n * l), move |client, count, cube_dim| unsafe {
            ctc_beta_step::launch_unchecked::<R>(
                client, count, cube_dim, lp.as_arg(), tg.as_arg(), il.as_arg(), tl.as_arg(), b.as_arg(), step,
                blank as i32, f32::NEG_INFINITY,
            )
        });
    }
    let (a, o) = (alpha.clone(), nll.clone());
    launch(&client, "ctc_loss", Geometry::Units(n), move |client, count, cube_dim| unsafe {
        ctc_nll::launch_unchecked::<R>(client, count, cube_dim, tg.as_arg(), il.as_arg(), tl.as_arg(), a.as_arg(), o.as_arg(), f32::NEG_INFINITY)
    });
    Recursions { alpha, beta, nll }
}

/// The recursions and the gradient run in f32.
fn widen<R: Runtime>(t: CubeTensor<R>) -> CubeTensor<R> {
    narrow(t, DType::F32)
}

fn narrow<R: Runtime>(t: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
    if t.dtype == dtype { t } else { cast(t, dtype) }
}
