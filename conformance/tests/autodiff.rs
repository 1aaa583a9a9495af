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
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, Backend, BoolStore, DType, IntDType, Scalar, Shape, Slice, TensorData, TensorMetadata};
use burn_tensor::{Tensor, TensorPrimitive, activation as act};
use ex_cubecl::{MatmulPrecision, set_matmul_precision};
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;

/// Exact f32 matrix products (TF32 on devices that have it would need looser tolerances).
fn setup() {
    set_matmul_precision(MatmulPrecision::Exact);
}

fn seed_of(name: &str) -> u64 {
    name.bytes().fold(17u64, |h, c| h.wrapping_mul(131).wrapping_add(c as u64)) % 100_000
}

fn rand(seed: u64, shape: &[usize], lo: f64, hi: f64) -> TensorData {
    float_data(&mut Rng::new(seed), shape, DType::F32, lo, hi)
}

/// Applies a Tensor-API function to a primitive of any rank, flattened to 1-D and back.
fn flat<B: Backend>(x: FloatTensor<B>, f: impl FnOnce(Tensor<B, 1>) -> Tensor<B, 1>) -> FloatTensor<B> {
    let shape = x.shape();
    let n = shape.num_elements();
    let t = Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(B::float_reshape(x, Shape::new([n]))));
    B::float_reshape(f(t).into_primitive().tensor(), shape)
}

/// A rank-`D` primitive as a Tensor.
fn tensor<B: Backend, const D: usize>(x: FloatTensor<B>) -> Tensor<B, D> {
    Tensor::from_primitive(TensorPrimitive::Float(x))
}

/// A Tensor's primitive.
fn prim<B: Backend, const D: usize>(t: Tensor<B, D>) -> FloatTensor<B> {
    t.into_primitive().tensor()
}

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

#[test]
fn layout_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff layout");
    let s = &mut suite;
    let t = Tol::of(1e-5);
    let full = |r: usize| vec![Slice::new(0, None, 1); r];
    let xd = rand(500, &[3, 4], -2.0, 2.0);
    let x3 = rand(501, &[2, 3, 4], -2.0, 2.0);
    grad_check!(s, "reshape [3, 4] -> [2, 6]", t, [x: &xd], |B| B::float_reshape(x, Shape::new([2, 6])));
    grad_check!(s, "reshape of a transposed view [4, 3] -> [12]", t, [x: &xd], |B| B::float_reshape(B::float_swap_dims(x, 0, 1), Shape::new([12])));
    grad_check!(s, "swap_dims [2, 3, 4] (0, 2)", t, [x: &x3], |B| B::float_swap_dims(x, 0, 2));
    grad_check!(s, "transpose [2, 3, 4]", t, [x: &x3], |B| B::float_transpose(x));
    grad_check!(s, "permute [2, 3, 4] [2, 0, 1]", t, [x: &x3], |B| B::float_permute(x, &[2, 0, 1]));
    grad_check!(s, "flip [2, 3, 4] [0, 2]", t, [x: &x3], |B| B::float_flip(x, &[0, 2]));
    grad_check!(s, "expand [3, 1] -> [3, 5]", t, [x: &rand(502, &[3, 1], -2.0, 2.0)], |B| B::float_expand(x, Shape::new([3, 5])));
    grad_check!(s, "expand [4] -> [2, 3, 4]", t, [x: &rand(503, &[4], -2.0, 2.0)], |B| B::float_expand(x, Shape::new([2, 3, 4])));
    grad_check!(s, "expand [1, 3, 1] -> [2, 3, 4] then mul", t, [x: &rand(504, &[1, 3, 1], -2.0, 2.0), y: &x3], |B| B::float_mul(B::float_expand(x, Shape::new([2, 3, 4])), y));
    grad_check!(s, "slice [2, 3, 4] [.., 1..3, ::2]", t, [x: &x3], |B| {
        let mut sl = full(3);
        sl[1] = Slice::new(1, Some(3), 1);
        sl[2] = Slice::new(0, None, 2);
        B::float_slice(x, &sl)
    });
    grad_check!(s, "slice [2, 3, 4] [.., ::-1, 1..]", t, [x: &x3], |B| {
        let mut sl = full(3);
        sl[1] = Slice::new(0, None, -1);
        sl[2] = Slice::new(1, None, 1);
        B::float_slice(x, &sl)
    });
    grad_check!(s, "slice_assign [3, 4] [1..3, 1..4]", t, [x: &xd, v: &rand(505, &[2, 3], -2.0, 2.0)], |B| {
        let mut sl = full(2);
        sl[0] = Slice::new(1, Some(3), 1);
        sl[1] = Slice::new(1, Some(4), 1);
        B::float_slice_assign(B::float_mul_scalar(x, Scalar::Float(2.0)), &sl, B::float_exp(v))
    });
    grad_check!(s, "slice_assign [2, 3, 4] [.., .., ::2] with a stepped slice", t, [x: &x3, v: &rand(506, &[2, 3, 2], -2.0, 2.0)], |B| {
        let mut sl = full(3);
        sl[2] = Slice::new(0, None, 2);
        B::float_slice_assign(x, &sl, v)
    });
    for dim in 0..3 {
        let mut shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]];
        shapes[1][dim] = 1;
        shapes[2][dim] = 3;
        let (a, b, c) = (rand(510, &shapes[0], -2.0, 2.0), rand(511, &shapes[1], -2.0, 2.0), rand(512, &shapes[2], -2.0, 2.0));
        grad_check!(s, format!("cat dim={dim} {shapes:?}"), t, [a: &a, b: &b, c: &c], |B| B::float_cat(vec![a, B::float_exp(b), c], dim));
    }
    grad_check!(s, "cat of a tensor with itself", t, [x: &xd], |B| B::float_cat(vec![x.clone(), B::float_swap_dims(B::float_swap_dims(x.clone(), 0, 1), 0, 1), x], 0));
    for dim in 0..3 {
        grad_check!(s, format!("repeat_dim [2, 3, 4] dim={dim} times=3"), t, [x: &x3], |B| B::float_repeat_dim(x, dim, 3));
    }
    for (dim, size, step) in [(0, 2, 1), (1, 2, 1), (2, 3, 1), (2, 2, 2), (2, 1, 3)] {
        grad_check!(s, format!("unfold [2, 3, 4] dim={dim} size={size} step={step}"), t, [x: &x3], |B| B::float_unfold(x, dim, size, step));
    }
    grad_check!(s, "narrow (Tensor API) [2, 3, 4] dim=2 1..3", t, [x: &x3], |B| prim(tensor::<B, 3>(x).narrow(2, 1, 2)));
    grad_check!(s, "squeeze/unsqueeze (Tensor API)", t, [x: &rand(513, &[3, 1, 4], -2.0, 2.0)], |B| prim(tensor::<B, 3>(x).squeeze_dim::<2>(1).unsqueeze_dim::<3>(0)));
    // burn-ndarray has no f16 (it panics "Unsupported dtype: F16"): the gradient of
    // cast(cast(x, f16) · 1, f32) is the loss weight rounded to f16, checked exactly.
    for dtype in float_dtypes().into_iter().filter(|d| *d == DType::F16) {
        let expected = loss_weight(&[3, 4], DType::F32).convert_dtype(dtype).convert_dtype(DType::F32);
        macro_rules! cast_chain {
            ($ad:ty, $label:literal) => {{
                type B = $ad;
                let r = catch(|| run::<B, 1>(&[&xd], |[x]| B::float_cast(B::float_mul(B::float_cast(x, dtype.into()), B::float_ones(Shape::new([3, 4]), &dev::<B>(), dtype.into())), DType::F32.into())));
                s.record(format!("cast f32 -> {dtype:?} -> f32 {}: grad = w rounded to {dtype:?}", $label), match r {
                    Ok(GradRun { grads, .. }) => grads[0].as_ref().map_or(Err("no gradient".into()), |g| compare(g, &expected, Tol::EXACT)),
                    Err(e) => Err(format!("panicked: {e}")),
                });
            }};
        }
        cast_chain!(AdEx, "plain");
        cast_chain!(AdExCk, "checkpointed");
    }
    suite.finish();
}

#[test]
fn index_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff index");
    let s = &mut suite;
    let t = Tol::of(1e-5);
    let x3 = rand(600, &[2, 3, 4], -2.0, 2.0);
    for dim in 0..3 {
        let n = x3.shape[dim];
        let mut ishape = vec![2, 3, 4];
        ishape[dim] = 5;
        let idx = int_data(&mut Rng::new(601 + dim as u64), &ishape, DType::I64, 0, n as i64);
        grad_check!(s, format!("gather [2, 3, 4] dim={dim} indices={ishape:?}"), t, [x: &x3], |B| B::float_gather(dim, x, i::<B>(&idx)));
        // scatter_add: indices and values of the shape of the tensor with `dim` resized.
        let vd = rand(610 + dim as u64, &ishape, -2.0, 2.0);
        grad_check!(s, format!("scatter_add [2, 3, 4] dim={dim} values={ishape:?}"), t, [x: &x3, v: &vd], |B| B::float_scatter_add(dim, B::float_exp(x), i::<B>(&idx), v));
        // select / select_add: 1-D indices with repeats.
        let sel = TensorData::new(vec![n as i64 - 1, 0, n as i64 - 1, 0, (n / 2) as i64], [5]);
        let mut sshape = vec![2, 3, 4];
        sshape[dim] = 5;
        let sv = rand(620 + dim as u64, &sshape, -2.0, 2.0);
        grad_check!(s, format!("select [2, 3, 4] dim={dim} indices={:?}", sel.to_vec::<i64>().unwrap()), t, [x: &x3], |B| B::float_select(x, dim, i::<B>(&sel)));
        grad_check!(s, format!("select_add [2, 3, 4] dim={dim} indices={:?}", sel.to_vec::<i64>().unwrap()), t, [x: &x3, v: &sv], |B| B::float_select_add(B::float_sin(x), dim, i::<B>(&sel), v));
    }
    let md = bool_data(&mut Rng::new(630), &[2, 3, 4]);
    let yd = rand(631, &[2, 3, 4], -2.0, 2.0);
    grad_check!(s, "mask_where [2, 3, 4]", t, [x: &x3, y: &yd], |B| B::float_mask_where(x, b::<B>(&md), y));
    grad_check!(s, "mask_where broadcast value [1, 3, 1]", t, [x: &x3, y: &rand(632, &[1, 3, 1], -2.0, 2.0)], |B| {
        B::float_mask_where(x, b::<B>(&md), B::float_expand(y, Shape::new([2, 3, 4])))
    });
    grad_check!(s, "mask_fill [2, 3, 4]", t, [x: &x3], |B| B::float_mask_fill(x, b::<B>(&md), Scalar::Float(0.5)));
    grad_check!(s, "mask_where on a transposed view", t, [x: &x3, y: &yd], |B| {
        let m = B::bool_swap_dims(b::<B>(&md), 0, 2);
        B::float_mask_where(B::float_swap_dims(x, 0, 2), m, B::float_swap_dims(y, 0, 2))
    });
    // grid_sample_2d (Burn's default composition): bilinear, zero padding, both alignments.
    let img = rand(640, &[1, 2, 4, 5], -1.0, 1.0);
    let grid = rand(641, &[1, 3, 2, 2], -1.1, 1.1);
    for align in [false, true] {
        use burn_backend::ops::{GridSampleOptions, GridSamplePaddingMode, InterpolateMode};
        let o = || GridSampleOptions { mode: InterpolateMode::Bilinear, padding_mode: GridSamplePaddingMode::Zeros, align_corners: align };
        grad_check!(s, format!("grid_sample_2d bilinear align_corners={align}"), Tol::of(1e-4), [x: &img, g: &grid], |B| B::float_grid_sample_2d(x, g, o()));
    }
    // gather_nd / scatter_nd: k = 1 and 2 coordinates, repeated tuples (gradients accumulate).
    let nd1 = TensorData::new(vec![1i64, 0, 1], [3, 1]);
    let nd2 = TensorData::new(vec![1i64, 2, 0, 1, 1, 2], [3, 2]);
    grad_check!(s, "gather_nd [2, 3, 4] k=1", t, [x: &x3], |B| B::float_gather_nd(x, i::<B>(&nd1)));
    grad_check!(s, "gather_nd [2, 3, 4] k=2", t, [x: &x3], |B| B::float_gather_nd(x, i::<B>(&nd2)));
    let v2 = rand(650, &[3, 4], -2.0, 2.0);
    grad_check!(s, "scatter_nd add [2, 3, 4] k=2", t, [x: &x3, v: &v2], |B| {
        B::float_scatter_nd(B::float_exp(x), i::<B>(&nd2), v, burn_backend::tensor::IndexingUpdateOp::Add)
    });
    suite.finish();
}

#[test]
fn two_input_activations_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff activation");
    let s = &mut suite;
    let t = Tol::of(1e-4);
    // prelu: alpha per channel (dim 1), or one alpha for all.
    let xd = rand(700, &[2, 3, 4], -2.0, 2.0);
    grad_check!(s, "prelu alpha [3]", t, [x: &xd, a: &rand(701, &[3], 0.05, 0.5)], |B| prim(act::prelu(tensor::<B, 3>(x), tensor::<B, 1>(a))));
    grad_check!(s, "prelu alpha [1]", t, [x: &xd, a: &rand(702, &[1], 0.05, 0.5)], |B| prim(act::prelu(tensor::<B, 3>(x), tensor::<B, 1>(a))));
    grad_check!(s, "prelu (backend op) alpha [2, 3, 4]", t, [x: &xd, a: &rand(703, &[2, 3, 4], 0.05, 0.5)], |B| B::prelu(x, a));
    for dim in 0..3 {
        let mut shape = vec![2, 3, 4];
        shape[dim] = 6;
        let gd = rand(710 + dim as u64, &shape, -2.0, 2.0);
        grad_check!(s, format!("glu {shape:?} dim={dim}"), t, [x: &gd], |B| prim(act::glu(tensor::<B, 3>(x), dim)));
    }
    suite.finish();
}

/// Half precision: a few ops on f16 where the device has it, against the f32 reference.
#[test]
fn half_precision_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff f16");
    let s = &mut suite;
    for dtype in float_dtypes().into_iter().filter(|d| *d == DType::F16) {
        let t = Tol::of(1e-3).for_dtype(dtype);
        let x = float_data(&mut Rng::new(800), &[3, 4], dtype, -1.0, 1.0);
        let y = float_data(&mut Rng::new(801), &[1, 4], dtype, -1.0, 1.0);
        let z = float_data(&mut Rng::new(802), &[4, 5], dtype, -1.0, 1.0);
        grad_check!(s, format!("exp {dtype:?}"), t, [x: &x], |B| B::float_exp(x));
        grad_check!(s, format!("tanh {dtype:?}"), t, [x: &x], |B| B::float_tanh(x));
        grad_check!(s, format!("sigmoid {dtype:?}"), t, [x: &x], |B| B::sigmoid(x));
        grad_check!(s, format!("mul broadcast [3, 4] x [1, 4] {dtype:?}"), t, [x: &x, y: &y], |B| B::float_mul(x, y));
        grad_check!(s, format!("matmul [3, 4] x [4, 5] {dtype:?}"), t, [x: &x, z: &z], |B| B::float_matmul(x, z));
        grad_check!(s, format!("softmax dim=1 {dtype:?}"), t, [x: &x], |B| B::softmax(x, 1));
        grad_check!(s, format!("sum_dim dim=0 {dtype:?}"), t, [x: &x], |B| B::float_sum_dim(x, 0));
        grad_check!(s, format!("gelu {dtype:?}"), t, [x: &x], |B| B::gelu(x));
    }
    suite.finish();
}

/// Leaves of `AD`: `x` tracked, `y` untracked, `z` tracked; reads `(grad x, grad y, grad z,
/// is_require_grad of each)`.
fn partial_require_grad<AD: AutodiffBackend>(x: &TensorData, y: &TensorData, z: &TensorData) -> (Vec<Option<TensorData>>, Vec<bool>) {
    let (xt, yt, zt) = (leaf::<AD>(x, true), leaf::<AD>(y, false), leaf::<AD>(z, true));
    let flags = vec![AD::float_is_require_grad(&xt), AD::float_is_require_grad(&yt), AD::float_is_require_grad(&zt)];
    let out = AD::float_add(AD::float_mul(xt.clone(), yt.clone()), AD::float_exp(AD::float_mul(zt.clone(), yt.clone())));
    let grads = AD::backward(weighted_loss::<AD>(out, DType::F32));
    let read = |t: &FloatTensor<AD>| AD::grad(t, &grads).map(rf::<AD::InnerBackend>);
    (vec![read(&xt), read(&yt), read(&zt)], flags)
}

/// `x · detach(exp(x)) + y`: the gradient of x is `exp(x) · w`, nothing flows through the
/// detached branch.
fn detached<AD: AutodiffBackend>(x: &TensorData, y: &TensorData) -> Vec<Option<TensorData>> {
    let (xt, yt) = (leaf::<AD>(x, true), leaf::<AD>(y, true));
    let cut = AD::float_detach(AD::float_exp(xt.clone()));
    let out = AD::float_add(AD::float_mul(xt.clone(), cut.clone()), yt.clone());
    let grads = AD::backward(weighted_loss::<AD>(out, DType::F32));
    vec![AD::grad(&xt, &grads).map(rf::<AD::InnerBackend>), AD::grad(&yt, &grads).map(rf::<AD::InnerBackend>), AD::grad(&cut, &grads).map(rf::<AD::InnerBackend>)]
}

/// `grad_remove` gives x's gradient once; a second `grad` / `grad_remove` of x gives `None`
/// while y's gradient stays. Returns (removed x, grad x after, grad_remove x after, grad y).
fn removed<AD: AutodiffBackend>(x: &TensorData, y: &TensorData) -> Vec<Option<TensorData>> {
    let (xt, yt) = (leaf::<AD>(x, true), leaf::<AD>(y, true));
    let out = AD::float_mul(AD::float_sin(xt.clone()), yt.clone());
    let mut grads = AD::backward(weighted_loss::<AD>(out, DType::F32));
    let first = AD::grad_remove(&xt, &mut grads).map(rf::<AD::InnerBackend>);
    let again = AD::grad(&xt, &grads).map(rf::<AD::InnerBackend>);
    let again_removed = AD::grad_remove(&xt, &mut grads).map(rf::<AD::InnerBackend>);
    let other = AD::grad(&yt, &grads).map(rf::<AD::InnerBackend>);
    vec![first, again, again_removed, other]
}

/// x used in 20 ops whose results are summed; returns x's gradient.
fn many_uses<AD: AutodiffBackend>(x: &TensorData) -> Option<TensorData> {
    let xt = leaf::<AD>(x, true);
    let mut acc = AD::float_zeros(xt.shape(), &dev::<AD>(), DType::F32.into());
    for k in 0..20 {
        let term = match k % 5 {
            0 => AD::float_mul_scalar(xt.clone(), Scalar::Float(k as f64 + 1.0)),
            1 => AD::float_exp(xt.clone()),
            2 => AD::float_mul(xt.clone(), xt.clone()),
            3 => AD::float_sin(AD::float_swap_dims(xt.clone(), 0, 1)),
            _ => AD::float_sum_dim(xt.clone(), 1),
        };
        let term = if k % 5 == 3 { AD::float_swap_dims(term, 0, 1) } else { term };
        acc = AD::float_add(acc, term);
    }
    let grads = AD::backward(weighted_loss::<AD>(acc, DType::F32));
    AD::grad(&xt, &grads).map(rf::<AD::InnerBackend>)
}

/// `Σ_k (k + 1) · x` for k < 20: the gradient is exactly `210 · w`.
fn scaled_sum<AD: AutodiffBackend>(x: &TensorData) -> Option<TensorData> {
    let xt = leaf::<AD>(x, true);
    let terms: Vec<_> = (0..20).map(|k| AD::float_mul_scalar(xt.clone(), Scalar::Float(k as f64 + 1.0))).collect();
    let out = terms.into_iter().reduce(AD::float_add).unwrap();
    let grads = AD::backward(weighted_loss::<AD>(out, DType::F32));
    AD::grad(&xt, &grads).map(rf::<AD::InnerBackend>)
}

/// Two graphs on the same leaf, each with its own backward pass: the second gradient is
/// `exp(x) · w`, not accumulated with the first (`w`).
fn two_backwards<AD: AutodiffBackend>(x: &TensorData) -> Vec<Option<TensorData>> {
    let xt = leaf::<AD>(x, true);
    let g1 = AD::backward(weighted_loss::<AD>(AD::float_add_scalar(xt.clone(), Scalar::Float(1.0)), DType::F32));
    let first = AD::grad(&xt, &g1).map(rf::<AD::InnerBackend>);
    let g2 = AD::backward(weighted_loss::<AD>(AD::float_exp(xt.clone()), DType::F32));
    let second = AD::grad(&xt, &g2).map(rf::<AD::InnerBackend>);
    vec![first, second, AD::grad(&xt, &g1).map(rf::<AD::InnerBackend>)]
}

/// A training step's backward pass through the Tensor API: a two-layer perceptron, ReLU,
/// log-softmax and the mean negative log-likelihood of integer labels; returns the gradients
/// of both weights and the first bias.
fn mlp_step<AD: AutodiffBackend>(x: &TensorData, w1: &TensorData, b1: &TensorData, w2: &TensorData, labels: &TensorData) -> Vec<Option<TensorData>> {
    let device = dev::<AD>();
    let param = |d: &TensorData| Tensor::<AD, 2>::from_data(d.clone(), &device).require_grad();
    let (w1, w2) = (param(w1), param(w2));
    let b1 = Tensor::<AD, 1>::from_data(b1.clone(), &device).require_grad();
    let x = Tensor::<AD, 2>::from_data(x.clone(), &device);
    let hidden = act::relu(x.matmul(w1.clone()) + b1.clone().unsqueeze_dim(0));
    let log_probs = act::log_softmax(hidden.matmul(w2.clone()), 1);
    let labels = Tensor::<AD, 2, burn_tensor::Int>::from_data(labels.clone(), &device);
    let loss = log_probs.gather(1, labels).mean().neg();
    let grads = loss.backward();
    vec![w1.grad(&grads).map(|g| g.into_data()), b1.grad(&grads).map(|g| g.into_data()), w2.grad(&grads).map(|g| g.into_data())]
}

/// Runs `f` on our backend and the reference, plain and checkpointed, and compares the
/// gradient lists.
macro_rules! behaviour {
    ($suite:expr, $case:expr, $tol:expr, $f:ident($($arg:expr),*)) => {{
        for (label, ours, reference) in [
            ("plain", catch(|| $f::<AdEx>($($arg),*)), catch(|| $f::<AdRef>($($arg),*))),
            ("checkpointed", catch(|| $f::<AdExCk>($($arg),*)), catch(|| $f::<AdRefCk>($($arg),*))),
        ] {
            let case = format!("{} {label}", $case);
            let grads = |r: Result<Vec<Option<TensorData>>, String>| r;
            match (grads(ours.map(Into::into)), grads(reference.map(Into::into))) {
                (Ok(a), Ok(b)) => {
                    for (k, (a, b)) in a.iter().zip(&b).enumerate() {
                        let ok = match (a, b) {
                            (Some(a), Some(b)) => compare(a, b, $tol),
                            (None, None) => Ok(()),
                            (a, b) => Err(format!("gradient present: ours {}, reference {}", a.is_some(), b.is_some())),
                        };
                        $suite.record(format!("{case} [gradient {k}]"), ok);
                    }
                }
                (Err(e), _) => $suite.record(case, Err(format!("panicked: {e}"))),
                (_, Err(e)) => $suite.record(case, Err(format!("the reference panicked: {e}"))),
            }
        }
    }};
}

/// Wraps one optional gradient as a list, for [`behaviour!`].
struct One(Option<TensorData>);

impl From<One> for Vec<Option<TensorData>> {
    fn from(o: One) -> Self {
        vec![o.0]
    }
}

fn one_many_uses<AD: AutodiffBackend>(x: &TensorData) -> One {
    One(many_uses::<AD>(x))
}

fn one_scaled_sum<AD: AutodiffBackend>(x: &TensorData) -> One {
    One(scaled_sum::<AD>(x))
}

fn partial<AD: AutodiffBackend>(x: &TensorData, y: &TensorData, z: &TensorData) -> Vec<Option<TensorData>> {
    partial_require_grad::<AD>(x, y, z).0
}

/// `Some(data)` must equal `expected` within `tol`.
fn expect(got: &Result<Vec<Option<TensorData>>, String>, k: usize, expected: Option<&TensorData>, tol: Tol) -> Result<(), String> {
    let got = got.as_ref().map_err(|e| format!("panicked: {e}"))?;
    match (&got[k], expected) {
        (Some(g), Some(e)) => compare(g, e, tol),
        (None, None) => Ok(()),
        (g, e) => Err(format!("gradient {k} present: {}, expected {}", g.is_some(), e.is_some())),
    }
}

/// Elementwise `f(x) · w` for the loss weight of `x`'s shape.
fn times_weight(x: &TensorData, f: impl Fn(f64) -> f64) -> TensorData {
    let w = values(&loss_weight(&x.shape, DType::F32));
    let v: Vec<f32> = values(x).iter().zip(w).map(|(&a, w)| (f(a) * w) as f32).collect();
    TensorData::new(v, x.shape.clone())
}

#[test]
fn autodiff_behaviour() {
    setup();
    let mut suite = Suite::new("autodiff behaviour");
    let s = &mut suite;
    let t = Tol::of(1e-5);
    let x = rand(900, &[3, 4], -1.0, 1.0);
    let y = rand(901, &[3, 4], -1.0, 1.0);
    let z = rand(902, &[3, 4], -1.0, 1.0);

    // require_grad on some inputs only.
    behaviour!(s, "require_grad on x and z only", t, partial(&x, &y, &z));
    for (label, r) in [("plain", catch(|| partial_require_grad::<AdEx>(&x, &y, &z))), ("checkpointed", catch(|| partial_require_grad::<AdExCk>(&x, &y, &z)))] {
        s.record(format!("require_grad {label}: is_require_grad is [true, false, true] and only y has no gradient"), match r {
            Ok((g, flags)) if flags == [true, false, true] && g[0].is_some() && g[1].is_none() && g[2].is_some() => Ok(()),
            Ok((g, flags)) => Err(format!("flags {flags:?}, gradients present {:?}", g.iter().map(Option::is_some).collect::<Vec<_>>())),
            Err(e) => Err(format!("panicked: {e}")),
        });
    }

    // detach cuts the graph.
    behaviour!(s, "detach", t, detached(&x, &y));
    for (label, r) in [("plain", catch(|| detached::<AdEx>(&x, &y))), ("checkpointed", catch(|| detached::<AdExCk>(&x, &y)))] {
        s.record(format!("detach {label}: grad x = exp(x) w"), expect(&r, 0, Some(&times_weight(&x, f64::exp)), Tol::of(1e-5)));
        s.record(format!("detach {label}: grad y = w"), expect(&r, 1, Some(&loss_weight(&[3, 4], DType::F32)), Tol::EXACT));
        s.record(format!("detach {label}: the detached tensor has no gradient"), expect(&r, 2, None, Tol::EXACT));
    }

    // grad_remove removes.
    behaviour!(s, "grad_remove", t, removed(&x, &y));
    for (label, r) in [("plain", catch(|| removed::<AdEx>(&x, &y))), ("checkpointed", catch(|| removed::<AdExCk>(&x, &y)))] {
        let yw = times_weight(&x, f64::cos);
        let yv: Vec<f32> = values(&yw).iter().zip(values(&y)).map(|(a, b)| (a * b) as f32).collect();
        s.record(format!("grad_remove {label}: gives cos(x) y w"), expect(&r, 0, Some(&TensorData::new(yv, [3, 4])), Tol::of(1e-5)));
        s.record(format!("grad_remove {label}: then grad is None"), expect(&r, 1, None, Tol::EXACT));
        s.record(format!("grad_remove {label}: then grad_remove is None"), expect(&r, 2, None, Tol::EXACT));
        s.record(format!("grad_remove {label}: y's gradient stays"), expect(&r, 3, Some(&times_weight(&x, f64::sin)), Tol::of(1e-5)));
    }

    // A leaf used in 20 ops: the gradients accumulate.
    behaviour!(s, "x used in 20 ops", Tol::of(1e-4), one_many_uses(&x));
    behaviour!(s, "x used in 20 scaled copies", t, one_scaled_sum(&x));
    for (label, r) in [("plain", catch(|| Vec::from(one_scaled_sum::<AdEx>(&x)))), ("checkpointed", catch(|| Vec::from(one_scaled_sum::<AdExCk>(&x))))] {
        s.record(format!("x used in 20 scaled copies {label}: grad = 210 w"), expect(&r, 0, Some(&times_weight(&x, |_| 210.0)), Tol::of(1e-5)));
    }

    // Two backward passes on separate graphs from the same leaf.
    behaviour!(s, "two backward passes", t, two_backwards(&x));
    for (label, r) in [("plain", catch(|| two_backwards::<AdEx>(&x))), ("checkpointed", catch(|| two_backwards::<AdExCk>(&x)))] {
        s.record(format!("two backward passes {label}: first = w"), expect(&r, 0, Some(&times_weight(&x, |_| 1.0)), Tol::EXACT));
        s.record(format!("two backward passes {label}: second = exp(x) w, not accumulated"), expect(&r, 1, Some(&times_weight(&x, f64::exp)), Tol::of(1e-5)));
        s.record(format!("two backward passes {label}: the first gradients are unchanged"), expect(&r, 2, Some(&times_weight(&x, |_| 1.0)), Tol::EXACT));
    }

    // A training step through the Tensor API (Tensor::backward, Tensor::grad).
    let (xs, w1, b1, w2) = (rand(910, &[8, 5], -1.0, 1.0), rand(911, &[5, 16], -1.0, 1.0), rand(912, &[16], -0.5, 0.5), rand(913, &[16, 3], -1.0, 1.0));
    let labels = int_data(&mut Rng::new(914), &[8, 1], DType::I64, 0, 3);
    behaviour!(s, "Tensor API training step: linear-relu-linear-log_softmax-nll", Tol::of(1e-5), mlp_step(&xs, &w1, &b1, &w2, &labels));

    // Int and bool ops in the middle of the graph: argmax picks, a comparison masks, an int
    // tensor round-trips through float; the gradient flows through the float path only.
    grad_check!(s, "argmax + gather + comparison + mask_where + int round trip", Tol::of(1e-5), [x: &x, y: &y], |B| {
        let idx = B::float_argmax(x.clone(), 1, IntDType::I64);
        let picked = B::float_gather(1, x.clone(), idx);
        let mask = B::float_greater(x.clone(), y.clone(), BoolStore::Native);
        let masked = B::float_mask_where(B::float_mul_scalar(x.clone(), Scalar::Float(2.0)), mask, B::float_exp(y.clone()));
        let as_int = B::int_into_float(B::float_into_int(B::float_mul_scalar(y.clone(), Scalar::Float(3.0)), IntDType::I64), DType::F32.into());
        let lower = B::float_lower_elem(x.clone(), Scalar::Float(0.0), BoolStore::Native);
        let filled = B::float_mask_fill(B::float_mul(masked, as_int), lower, Scalar::Float(1.0));
        B::float_mul(filled, B::float_expand(picked, Shape::new([3, 4])))
    });
    suite.finish();
}

#[test]
fn edge_case_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff edge cases");
    let s = &mut suite;
    let t = Tol::of(1e-4);
    // Empty tensors: empty gradients of the input's shape (zeros where the input is not empty).
    let e03 = rand(1000, &[0, 3], -1.0, 1.0);
    let e30 = rand(1001, &[3, 0], -1.0, 1.0);
    let r13 = rand(1002, &[1, 3], -1.0, 1.0);
    let r04 = rand(1003, &[0, 4], -1.0, 1.0);
    let r43 = rand(1004, &[4, 3], -1.0, 1.0);
    let r23 = rand(1005, &[2, 3], -1.0, 1.0);
    let r02 = rand(1006, &[0, 2], -1.0, 1.0);
    grad_check!(s, "exp [0, 3]", t, [x: &e03], |B| B::float_exp(x));
    grad_check!(s, "add [0, 3] + [1, 3]", t, [x: &e03, y: &r13], |B| B::float_add(x, y));
    // burn-ndarray's matmul divides by zero on empty operands: the answers are known (an
    // empty or all-zero output, gradients of zeros of the inputs' shapes).
    let zeros = |shape: &[usize]| TensorData::new(vec![0.0f32; shape.iter().product()], shape.to_vec());
    for (x, y, out) in [(&r04, &r43, [0, 3]), (&e30, &r02, [3, 2])] {
        for (label, r) in [
            ("plain", catch(|| run::<AdEx, 2>(&[x, y], |[x, y]| AdEx::float_matmul(x, y)))),
            ("checkpointed", catch(|| run::<AdExCk, 2>(&[x, y], |[x, y]| AdExCk::float_matmul(x, y)))),
        ] {
            let case = format!("matmul {:?} x {:?} {label}", x.shape, y.shape);
            s.record(format!("{case}: output and gradients are zeros"), match r {
                Ok(GradRun { out: o, grads }) => compare(&o, &zeros(&out), Tol::EXACT)
                    .and_then(|_| grads[0].as_ref().map_or(Err("no gradient of x".into()), |g| compare(g, &zeros(&x.shape), Tol::EXACT)))
                    .and_then(|_| grads[1].as_ref().map_or(Err("no gradient of y".into()), |g| compare(g, &zeros(&y.shape), Tol::EXACT))),
                Err(e) => Err(format!("panicked: {e}")),
            });
        }
    }
    grad_check!(s, "sum [3, 0]", t, [x: &e30], |B| B::float_sum(x));
    grad_check!(s, "sum_dim [3, 0] dim=1", t, [x: &e30], |B| B::float_sum_dim(x, 1));
    grad_check!(s, "softmax [0, 3] dim=1", t, [x: &e03], |B| B::softmax(x, 1));
    grad_check!(s, "cat [0, 3] and [2, 3] dim=0", t, [x: &e03, y: &r23], |B| B::float_cat(vec![x, y], 0));
    // Non-differentiable points, where Burn's formulas pick a value: zeros for relu, abs and
    // sign, values on the clamp bounds, and ties of max / min.
    let special = TensorData::new(vec![0.0f32, -0.0, 0.5, -0.5, 1.0, -1.0, 2.0, 0.0], [2, 4]);
    grad_check!(s, "relu at 0", t, [x: &special], |B| B::relu(x));
    grad_check!(s, "abs at 0", t, [x: &special], |B| B::float_abs(x));
    grad_check!(s, "sign at 0", t, [x: &special], |B| B::float_sign(x));
    grad_check!(s, "powi 2 at 0", t, [x: &special], |B| B::float_powi_scalar(x, Scalar::Int(2)));
    grad_check!(s, "clamp on the bounds [-0.5, 0.5]", t, [x: &special], |B| B::float_clamp(x, Scalar::Float(-0.5), Scalar::Float(0.5)));
    grad_check!(s, "leaky_relu at 0", t, [x: &special], |B| B::leaky_relu(x, Scalar::Float(0.1)));
    let ties = TensorData::new(vec![1.0f32, 3.0, 3.0, -1.0, 2.0, 2.0, 1.0, 2.0, -4.0, 5.0, -4.0, 5.0], [3, 4]);
    for dim in 0..2 {
        grad_check!(s, format!("max_dim with ties dim={dim}"), t, [x: &ties], |B| B::float_max_dim(x, dim));
        grad_check!(s, format!("min_dim with ties dim={dim}"), t, [x: &ties], |B| B::float_min_dim(x, dim));
        grad_check!(s, format!("cummax with ties dim={dim}"), t, [x: &ties], |B| B::float_cummax(x, dim));
    }
    grad_check!(s, "max with ties", t, [x: &ties], |B| B::float_max(x));
    // Longer lines: the multi-cube reduction and scan paths, a tiled matrix product.
    let long = rand(1010, &[3, 700], -1.0, 1.0);
    grad_check!(s, "sum_dim [3, 700] dim=1", Tol::of(1e-4), [x: &long], |B| B::float_sum_dim(x, 1));
    grad_check!(s, "max_dim [3, 700] dim=1", t, [x: &long], |B| B::float_max_dim(x, 1));
    grad_check!(s, "softmax [3, 700] dim=1", t, [x: &long], |B| B::softmax(x, 1));
    grad_check!(s, "log_softmax [3, 700] dim=1", t, [x: &long], |B| B::log_softmax(x, 1));
    grad_check!(s, "cumsum [3, 700] dim=1", Tol::of(1e-3), [x: &long], |B| B::float_cumsum(x, 1));
    grad_check!(s, "mean [3, 700]", t, [x: &long], |B| B::float_mean(x));
    let (a, b) = (rand(1011, &[40, 70], -1.0, 1.0), rand(1012, &[70, 33], -1.0, 1.0));
    grad_check!(s, "matmul [40, 70] x [70, 33]", Tol::of(5e-4), [x: &a, y: &b], |B| B::float_matmul(x, y));
    suite.finish();
}
