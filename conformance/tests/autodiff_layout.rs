//! Gradients of layout ops (reshape, permute, slices, cat, expand, flip, repeat, casts),
//! indexing (gather, scatter, select, masks, gather_nd / scatter_nd, grid_sample), two-input
//! activations and half precision, on `Autodiff<Ex>` vs `Autodiff<NdArray>`, each plain and
//! with `BalancedCheckpointing`. Shared helpers: `ex_cubecl_conformance::grad`.
use burn_backend::ops::*;
use burn_backend::{DType, Scalar, Shape, Slice, TensorData};
use burn_tensor::activation as act;
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;

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
