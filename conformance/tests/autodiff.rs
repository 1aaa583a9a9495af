//! Gradients of every differentiable float op and activation of Burn 0.21's autodiff
//! (`burn-autodiff-0.21.0/src/ops/{tensor,activation}.rs`, plus the default compositions of
//! `FloatTensorOps` / `ActivationOps` and the Tensor API's activations that autodiff runs
//! through), on `Autodiff<Ex>` vs `Autodiff<NdArray>`, each plain and with
//! `BalancedCheckpointing`, on seeded random inputs, broadcasting and non-contiguous views; plus
//! `require_grad` / `detach` / `grad_remove` behaviour, a leaf reused many times, two backward
//! passes on separate graphs and a graph with int and bool ops in the middle.
//!
//! Not differentiable in Burn 0.21's autodiff, so not here: `float_topk` (autodiff's panics
//! with "not implemented"), argmax / argmin / argsort / comparisons (int and bool outputs),
//! rfft / irfft (autodiff's are `todo!`).
use burn_backend::ops::*;
use burn_backend::{DType, IntDType, Scalar, Shape, TensorMetadata};
use burn_tensor::activation as act;
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;


/// Shapes and views every unary op is differentiated on.
const UNARY_LAYOUTS: [(&[usize], View); 4] = [(&[7], View::Contiguous), (&[3, 5], View::Transposed), (&[2, 3, 4], View::Stepped), (&[4, 3], View::Expanded)];

/// Checks the gradient of a one-input op on every layout of [`UNARY_LAYOUTS`], inputs uniform
/// in `[lo, hi)`: `unary!(suite, "exp", -2.0, 2.0, tol, |B, x| B::float_exp(x))`.
macro_rules! unary {
    ($suite:expr, $name:expr, $lo:expr, $hi:expr, $tol:expr, |$B:ident, $x:ident| $body:expr) => {{
        let name: &str = $name;
        for (n, (shape, view)) in UNARY_LAYOUTS.into_iter().enumerate() {
            let seed = seed_of(name) + n as u64;
            let data = rand(seed, shape, $lo, $hi);
            grad_check!($suite, format!("{name} x={shape:?} {view:?} seed={seed}"), $tol, [$x: &data], |$B| {
                let $x = float_view::<$B>($x, view);
                $body
            });
        }
    }};
}

#[test]
fn unary_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff unary");
    let s = &mut suite;
    let t = Tol::of(1e-4);
    unary!(s, "exp", -2.0, 2.0, t, |B, x| B::float_exp(x));
    unary!(s, "log", 0.2, 4.0, t, |B, x| B::float_log(x));
    unary!(s, "log1p", -0.6, 3.0, t, |B, x| B::float_log1p(x));
    unary!(s, "sqrt", 0.2, 4.0, t, |B, x| B::float_sqrt(x));
    unary!(s, "abs", -2.0, 2.0, t, |B, x| B::float_abs(x));
    unary!(s, "neg", -2.0, 2.0, t, |B, x| B::float_neg(x));
    unary!(s, "recip", 0.3, 3.0, t, |B, x| B::float_recip(x));
    unary!(s, "cos", -3.0, 3.0, t, |B, x| B::float_cos(x));
    unary!(s, "sin", -3.0, 3.0, t, |B, x| B::float_sin(x));
    unary!(s, "tan", -1.2, 1.2, Tol::of(5e-4), |B, x| B::float_tan(x));
    unary!(s, "cosh", -2.0, 2.0, t, |B, x| B::float_cosh(x));
    unary!(s, "sinh", -2.0, 2.0, t, |B, x| B::float_sinh(x));
    unary!(s, "tanh", -2.0, 2.0, t, |B, x| B::float_tanh(x));
    unary!(s, "asin", -0.9, 0.9, t, |B, x| B::float_asin(x));
    unary!(s, "acos", -0.9, 0.9, t, |B, x| B::float_acos(x));
    unary!(s, "atan", -3.0, 3.0, t, |B, x| B::float_atan(x));
    unary!(s, "asinh", -3.0, 3.0, t, |B, x| B::float_asinh(x));
    unary!(s, "acosh", 1.2, 4.0, t, |B, x| B::float_acosh(x));
    unary!(s, "atanh", -0.9, 0.9, t, |B, x| B::float_atanh(x));
    unary!(s, "erf", -2.0, 2.0, t, |B, x| B::float_erf(x));
    unary!(s, "round", -3.0, 3.0, t, |B, x| B::float_round(x));
    unary!(s, "floor", -3.0, 3.0, t, |B, x| B::float_floor(x));
    unary!(s, "ceil", -3.0, 3.0, t, |B, x| B::float_ceil(x));
    unary!(s, "trunc", -3.0, 3.0, t, |B, x| B::float_trunc(x));
    unary!(s, "sign", -3.0, 3.0, t, |B, x| B::float_sign(x));
    unary!(s, "powf_scalar 2.5", 0.2, 3.0, t, |B, x| B::float_powf_scalar(x, Scalar::Float(2.5)));
    unary!(s, "powf_scalar -1.5", 0.3, 3.0, t, |B, x| B::float_powf_scalar(x, Scalar::Float(-1.5)));
    unary!(s, "powf_scalar 3 (integer)", -2.0, 2.0, t, |B, x| B::float_powf_scalar(x, Scalar::Float(3.0)));
    unary!(s, "powi_scalar 2", -2.0, 2.0, t, |B, x| B::float_powi_scalar(x, Scalar::Int(2)));
    unary!(s, "powi_scalar 3", -2.0, 2.0, t, |B, x| B::float_powi_scalar(x, Scalar::Int(3)));
    unary!(s, "powi_scalar -2", 0.4, 2.0, t, |B, x| B::float_powi_scalar(x, Scalar::Int(-2)));
    unary!(s, "powi_scalar -3", 0.4, 2.0, t, |B, x| B::float_powi_scalar(x, Scalar::Int(-3)));
    unary!(s, "powi_scalar -3 (negative bases)", -2.0, -0.4, t, |B, x| B::float_powi_scalar(x, Scalar::Int(-3)));
    unary!(s, "powf_scalar -1 (negative bases)", -2.0, -0.4, t, |B, x| B::float_powf_scalar_impl(x, Scalar::Float(-1.0)));
    unary!(s, "powi_scalar 0", -2.0, 2.0, t, |B, x| B::float_powi_scalar(x, Scalar::Int(0)));
    unary!(s, "add_scalar", -2.0, 2.0, t, |B, x| B::float_add_scalar(x, Scalar::Float(1.5)));
    unary!(s, "sub_scalar", -2.0, 2.0, t, |B, x| B::float_sub_scalar(x, Scalar::Float(0.75)));
    unary!(s, "mul_scalar", -2.0, 2.0, t, |B, x| B::float_mul_scalar(x, Scalar::Float(-2.5)));
    unary!(s, "div_scalar", -2.0, 2.0, t, |B, x| B::float_div_scalar(x, Scalar::Float(0.7)));
    unary!(s, "remainder_scalar", -3.0, 3.0, t, |B, x| B::float_remainder_scalar(x, Scalar::Float(1.3)));
    unary!(s, "clamp", -2.0, 2.0, t, |B, x| B::float_clamp(x, Scalar::Float(-0.5), Scalar::Float(0.7)));
    unary!(s, "clamp_min", -2.0, 2.0, t, |B, x| B::float_clamp_min(x, Scalar::Float(-0.3)));
    unary!(s, "clamp_max", -2.0, 2.0, t, |B, x| B::float_clamp_max(x, Scalar::Float(0.4)));
    unary!(s, "relu", -2.0, 2.0, t, |B, x| B::relu(x));
    unary!(s, "gelu", -3.0, 3.0, t, |B, x| B::gelu(x));
    unary!(s, "sigmoid", -4.0, 4.0, t, |B, x| B::sigmoid(x));
    unary!(s, "log_sigmoid", -4.0, 4.0, t, |B, x| B::log_sigmoid(x));
    unary!(s, "leaky_relu", -2.0, 2.0, t, |B, x| B::leaky_relu(x, Scalar::Float(0.1)));
    unary!(s, "hard_sigmoid", -4.0, 4.0, t, |B, x| B::hard_sigmoid(x, Scalar::Float(0.2), Scalar::Float(0.5)));
    // The Tensor API's activations (compositions of the ops above).
    unary!(s, "silu", -3.0, 3.0, t, |B, x| flat::<B>(x, act::silu));
    unary!(s, "softplus", -3.0, 3.0, t, |B, x| flat::<B>(x, |t| act::softplus(t, 1.5)));
    unary!(s, "mish", -3.0, 3.0, t, |B, x| flat::<B>(x, act::mish));
    unary!(s, "elu", -3.0, 3.0, t, |B, x| flat::<B>(x, |t| act::elu(t, 0.8)));
    unary!(s, "celu", -3.0, 3.0, t, |B, x| flat::<B>(x, |t| act::celu(t, 1.2)));
    unary!(s, "selu", -3.0, 3.0, t, |B, x| flat::<B>(x, act::selu));
    unary!(s, "hard_swish", -4.0, 4.0, t, |B, x| flat::<B>(x, act::hard_swish));
    unary!(s, "softsign", -3.0, 3.0, t, |B, x| flat::<B>(x, act::softsign));
    unary!(s, "gelu_approximate", -3.0, 3.0, t, |B, x| flat::<B>(x, act::gelu_approximate));
    unary!(s, "thresholded_relu", -2.0, 2.0, t, |B, x| flat::<B>(x, |t| act::thresholded_relu(t, 0.3)));
    unary!(s, "hard_shrink", -2.0, 2.0, t, |B, x| flat::<B>(x, |t| act::hard_shrink(t, 0.5)));
    unary!(s, "soft_shrink", -2.0, 2.0, t, |B, x| flat::<B>(x, |t| act::soft_shrink(t, 0.5)));
    // An op chain: every intermediate is recomputed under checkpointing.
    unary!(s, "chain exp-sin-mul-tanh", -1.5, 1.5, t, |B, x| B::float_tanh(B::float_mul(B::float_sin(B::float_exp(x.clone())), x)));
    suite.finish();
}

/// (lhs shape, rhs shape, view applied to both).
const BINARY_LAYOUTS: [(&[usize], &[usize], View); 6] = [
    (&[3, 4], &[3, 4], View::Contiguous),
    (&[3, 4], &[3, 4], View::Transposed),
    (&[2, 6], &[2, 6], View::Stepped),
    (&[3, 1, 4], &[1, 5, 4], View::Contiguous),
    (&[2, 3], &[1, 1], View::Contiguous),
    (&[4, 1], &[1, 3], View::Reversed),
];

/// burn-ndarray 0.21's forward passes of these ops broadcast one side at most (`powf`, `atan2`:
/// `elementwise_op` broadcasts lhs to rhs or rhs to lhs; `remainder`: its `Zip` takes no
/// broadcast at all) and panic on the broadcasting layouts: there our gradients are checked as
/// directional derivatives of our forward pass.
const NDARRAY_CANNOT_BROADCAST: [&str; 3] = ["remainder", "powf", "atan2"];

/// Checks the gradients of a two-input op on every layout of [`BINARY_LAYOUTS`] (broadcasting
/// included), inputs uniform in the ranges given.
macro_rules! binary {
    ($suite:expr, $name:expr, ($llo:expr, $lhi:expr), ($rlo:expr, $rhi:expr), $tol:expr, |$B:ident, $x:ident, $y:ident| $body:expr) => {{
        let name: &str = $name;
        for (n, (ls, rs, view)) in BINARY_LAYOUTS.into_iter().enumerate() {
            let seed = seed_of(name) + n as u64;
            let (xd, yd) = (rand(seed, ls, $llo, $lhi), rand(seed + 1000, rs, $rlo, $rhi));
            let case = format!("{name} lhs={ls:?} rhs={rs:?} {view:?} seed={seed}");
            if ls != rs && NDARRAY_CANNOT_BROADCAST.contains(&name) {
                fd_check!($suite, case, 1e-3, 1e-2, [$x: &xd, $y: &yd], [0, 1], |$B| {
                    let ($x, $y) = (float_view::<$B>($x, view), float_view::<$B>($y, view));
                    $body
                });
            } else {
                grad_check!($suite, case, $tol, [$x: &xd, $y: &yd], |$B| {
                    let ($x, $y) = (float_view::<$B>($x, view), float_view::<$B>($y, view));
                    $body
                });
            }
        }
    }};
}

#[test]
fn binary_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff binary");
    let s = &mut suite;
    let t = Tol::of(1e-4);
    binary!(s, "add", (-2.0, 2.0), (-2.0, 2.0), t, |B, x, y| B::float_add(x, y));
    binary!(s, "sub", (-2.0, 2.0), (-2.0, 2.0), t, |B, x, y| B::float_sub(x, y));
    binary!(s, "mul", (-2.0, 2.0), (-2.0, 2.0), t, |B, x, y| B::float_mul(x, y));
    binary!(s, "div", (-2.0, 2.0), (0.5, 2.0), t, |B, x, y| B::float_div(x, y));
    binary!(s, "remainder", (-3.0, 3.0), (0.5, 2.0), t, |B, x, y| B::float_remainder(x, y));
    binary!(s, "powf", (0.3, 2.0), (-2.0, 2.0), t, |B, x, y| B::float_powf(x, y));
    binary!(s, "atan2", (-2.0, 2.0), (-2.0, 2.0), t, |B, x, y| B::float_atan2(x, y));
    // Tensor API compositions of two inputs.
    binary!(s, "max_pair", (-2.0, 2.0), (-2.0, 2.0), t, |B, x, y| prim(tensor::<B, 3>(B::float_reshape(x.clone(), unsqueeze3(&x))).max_pair(tensor::<B, 3>(B::float_reshape(y.clone(), unsqueeze3(&y))))));
    // powi: an int exponent tensor (not differentiable), negative bases included.
    let (xd, ed) = (rand(180, &[3, 4], -2.0, 2.0), int_data(&mut Rng::new(181), &[3, 4], DType::I64, -2, 4));
    grad_check!(s, "powi [3, 4] int exponents in -2..4", t, [x: &xd], |B| B::float_powi(x, i::<B>(&ed)));
    binary!(s, "mul then div", (-2.0, 2.0), (0.5, 2.0), t, |B, x, y| B::float_div(B::float_mul(x.clone(), y.clone()), B::float_add(y, x)));
    suite.finish();
}

/// A shape of rank 3 with `x`'s dims, padded with leading ones.
fn unsqueeze3<T: TensorMetadata>(x: &T) -> Shape {
    let dims = x.shape().to_vec();
    let mut out = vec![1; 3 - dims.len()];
    out.extend(dims);
    Shape::from(out)
}

#[test]
fn matmul_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff matmul");
    let t = Tol::of(2e-4);
    // (lhs, rhs, lhs given transposed and swapped back as a view)
    let cases: [(&[usize], &[usize], bool); 8] = [
        (&[3, 4], &[4, 5], false),
        (&[3, 4], &[4, 5], true),
        (&[1, 6], &[6, 1], false),
        (&[5, 1], &[1, 4], false),
        (&[2, 3, 4], &[2, 4, 5], false),
        (&[2, 3, 4], &[1, 4, 2], true),
        (&[2, 1, 3, 4], &[1, 3, 4, 2], false),
        (&[17, 9], &[9, 19], false),
    ];
    for (n, (ls, rs, transposed)) in cases.into_iter().enumerate() {
        let seed = 300 + n as u64;
        let mut stored = ls.to_vec();
        let r = stored.len();
        if transposed {
            stored.swap(r - 2, r - 1);
        }
        let (xd, yd) = (rand(seed, &stored, -1.0, 1.0), rand(seed + 1, rs, -1.0, 1.0));
        grad_check!(&mut suite, format!("matmul {ls:?} x {rs:?} lhs_transposed={transposed} seed={seed}"), t, [x: &xd, y: &yd], |B| {
            let x = if transposed { B::float_swap_dims(x, r - 2, r - 1) } else { x };
            B::float_matmul(x, y)
        });
    }
    // A product of products: x·(y·x) with x reused.
    let (xd, yd) = (rand(320, &[4, 4], -1.0, 1.0), rand(321, &[4, 4], -1.0, 1.0));
    grad_check!(&mut suite, "matmul chain x(yx) seed=320", t, [x: &xd, y: &yd], |B| B::float_matmul(x.clone(), B::float_matmul(y, x)));
    // Cross product along a dimension of size 3.
    for (n, (shape, dim)) in [(&[4, 3][..], 1), (&[3, 2][..], 0), (&[2, 3, 2][..], 1)].into_iter().enumerate() {
        let seed = 330 + n as u64;
        let (xd, yd) = (rand(seed, shape, -1.0, 1.0), rand(seed + 1, shape, -1.0, 1.0));
        grad_check!(&mut suite, format!("cross {shape:?} dim={dim} seed={seed}"), t, [x: &xd, y: &yd], |B| B::float_cross(x, y, dim));
    }
    suite.finish();
}

/// Checks the gradient of a per-dimension op on every dimension of a few shapes (contiguous
/// and transposed), inputs uniform in `[lo, hi)`.
macro_rules! per_dim {
    ($suite:expr, $name:expr, $lo:expr, $hi:expr, $tol:expr, |$B:ident, $x:ident, $dim:ident| $body:expr) => {{
        let name: &str = $name;
        for (n, (shape, view)) in [(&[5][..], View::Contiguous), (&[3, 4][..], View::Contiguous), (&[2, 3, 4][..], View::Transposed)].into_iter().enumerate() {
            for $dim in 0..shape.len() {
                let seed = seed_of(name) + 10 * n as u64 + $dim as u64;
                let data = rand(seed, shape, $lo, $hi);
                grad_check!($suite, format!("{name}({}) x={shape:?} {view:?} seed={seed}", $dim), $tol, [$x: &data], |$B| {
                    let $x = float_view::<$B>($x, view);
                    $body
                });
            }
        }
    }};
}

#[test]
fn reduction_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff reduce");
    let s = &mut suite;
    let t = Tol::of(1e-4);
    unary!(s, "sum", -2.0, 2.0, t, |B, x| B::float_sum(x));
    unary!(s, "mean", -2.0, 2.0, t, |B, x| B::float_mean(x));
    // No ties: the Expanded layout repeats values, so max / min use distinct inputs.
    for (n, shape) in [&[7][..], &[3, 5], &[2, 3, 4]].into_iter().enumerate() {
        let seed = 400 + n as u64;
        let xd = rand(seed, shape, -2.0, 2.0);
        let pd = rand(seed, shape, 0.5, 1.5);
        let case = |op: &str| format!("{op} x={shape:?} seed={seed}");
        grad_check!(s, case("max"), t, [x: &xd], |B| B::float_max(B::float_swap_dims(x, 0, shape.len() - 1)));
        grad_check!(s, case("min"), t, [x: &xd], |B| B::float_min(x));
        grad_check!(s, case("max_abs"), t, [x: &xd], |B| B::float_max_abs(x));
        grad_check!(s, case("prod"), t, [x: &pd], |B| B::float_prod(x));
    }
    per_dim!(s, "sum_dim", -2.0, 2.0, t, |B, x, dim| B::float_sum_dim(x, dim));
    per_dim!(s, "mean_dim", -2.0, 2.0, t, |B, x, dim| B::float_mean_dim(x, dim));
    per_dim!(s, "max_dim", -2.0, 2.0, t, |B, x, dim| B::float_max_dim(x, dim));
    per_dim!(s, "min_dim", -2.0, 2.0, t, |B, x, dim| B::float_min_dim(x, dim));
    per_dim!(s, "max_dim_with_indices", -2.0, 2.0, t, |B, x, dim| B::float_max_dim_with_indices(x, dim, IntDType::I64).0);
    per_dim!(s, "min_dim_with_indices", -2.0, 2.0, t, |B, x, dim| B::float_min_dim_with_indices(x, dim, IntDType::I64).0);
    per_dim!(s, "max_abs_dim", -2.0, 2.0, t, |B, x, dim| B::float_max_abs_dim(x, dim));
    per_dim!(s, "prod_dim", 0.5, 1.5, t, |B, x, dim| B::float_prod_dim(x, dim));
    per_dim!(s, "cumsum", -2.0, 2.0, t, |B, x, dim| B::float_cumsum(x, dim));
    per_dim!(s, "cumprod", 0.5, 1.5, t, |B, x, dim| B::float_cumprod(x, dim));
    per_dim!(s, "cumprod (mixed signs)", -1.5, 1.5, Tol::of(2e-4), |B, x, dim| B::float_cumprod(x, dim));
    per_dim!(s, "cummin", -2.0, 2.0, t, |B, x, dim| B::float_cummin(x, dim));
    per_dim!(s, "cummax", -2.0, 2.0, t, |B, x, dim| B::float_cummax(x, dim));
    per_dim!(s, "sort", -2.0, 2.0, t, |B, x, dim| B::float_sort(x, dim, false));
    per_dim!(s, "sort descending", -2.0, 2.0, t, |B, x, dim| B::float_sort(x, dim, true));
    per_dim!(s, "sort_with_indices", -2.0, 2.0, t, |B, x, dim| B::float_sort_with_indices(x, dim, true, IntDType::I64).0);
    per_dim!(s, "softmax", -3.0, 3.0, t, |B, x, dim| B::softmax(x, dim));
    per_dim!(s, "log_softmax", -3.0, 3.0, t, |B, x, dim| B::log_softmax(x, dim));
    per_dim!(s, "softmin", -3.0, 3.0, t, |B, x, dim| B::softmin(x, dim));
    per_dim!(s, "quiet_softmax", -3.0, 3.0, t, |B, x, dim| {
        let rank = x.shape().num_dims();
        let x3 = B::float_reshape(x.clone(), unsqueeze3(&x));
        let out = prim(act::quiet_softmax(tensor::<B, 3>(x3), dim + 3 - rank));
        B::float_reshape(out, x.shape())
    });
    // softmax then a sum over the same dimension: the gradient is (almost) zero.
    per_dim!(s, "softmax then sum_dim", -3.0, 3.0, t, |B, x, dim| B::float_sum_dim(B::softmax(x, dim), dim));
    suite.finish();
}
