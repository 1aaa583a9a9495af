//! Autodiff behaviour on ExCubecl against `Autodiff<NdArray>`: `require_grad` on some leaves
//! only, `detach`, `grad_remove`, a leaf reused many times, two backward passes on separate
//! graphs, int and bool ops inside the graph, and a training step through the Tensor API.
use burn_backend::ops::*;
use burn_backend::tensor::FloatTensor;
use burn_backend::{AutodiffBackend, BoolStore, DType, IntDType, Scalar, Shape, TensorData, TensorMetadata};
use burn_tensor::{Tensor, activation as act};
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;

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
