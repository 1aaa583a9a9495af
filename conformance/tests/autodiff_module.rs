//! Gradients of the module ops under autodiff (`burn-autodiff-0.21.0/src/ops/module.rs`, plus
//! the `ModuleOps` defaults autodiff runs as compositions: attention, layer norm, unfold4d,
//! embedding), and CTC loss, on `Autodiff<Ex>` vs `Autodiff<NdArray>`, plain and with
//! `BalancedCheckpointing`: convolutions 1-3d (groups, stride, padding, dilation, bias),
//! transposed convolutions 1-3d, deformable convolution, pooling, interpolation, attention,
//! layer norm, embedding, linear and unfold4d.
//!
//! Where burn-ndarray 0.21 has no backward pass (bilinear, bicubic and Lanczos3 interpolation)
//! or a wrong one (deform_conv2d's offset and mask gradients with offset groups > 1), our
//! gradients are checked as directional derivatives of our own forward pass instead.
//! rfft / irfft have no autodiff support in Burn 0.21 (`todo!`).
use burn_backend::ops::*;
use burn_backend::tensor::FloatTensor;
use burn_backend::{Backend, DType, TensorData};
use ex_cubecl_conformance::grad::*;
use ex_cubecl_conformance::*;

const TOL: Tol = Tol { abs: 2e-4, rel: 2e-4 };

fn arr<const N: usize>(v: &[usize]) -> [usize; N] {
    v.try_into().expect("rank")
}

/// Output size of a convolution along one dimension.
fn conv_out(x: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (x + 2 * p - d * (k - 1) - 1) / s + 1
}

/// A (transposed) convolution case: x, weight, stride, padding, dilation, groups, bias,
/// padding_out (transposed only), and whether x is uploaded with its last two dimensions
/// swapped and swapped back as a view (non-contiguous input).
#[derive(Clone, Debug)]
struct Conv {
    x: Vec<usize>,
    w: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    bias: bool,
    padding_out: Vec<usize>,
    swapped: bool,
}

#[allow(clippy::too_many_arguments)]
fn conv(x: &[usize], w: &[usize], s: &[usize], p: &[usize], d: &[usize], groups: usize, bias: bool, swapped: bool) -> Conv {
    let n = x.len() - 2;
    Conv { x: x.to_vec(), w: w.to_vec(), stride: s.to_vec(), padding: p.to_vec(), dilation: d.to_vec(), groups, bias, padding_out: vec![0; n], swapped }
}

impl Conv {
    fn with_padding_out(mut self, p: &[usize]) -> Self {
        self.padding_out = p.to_vec();
        self
    }

    /// x as stored: the last two dimensions swapped when the case uses a swapped view.
    fn stored_x(&self) -> Vec<usize> {
        let mut s = self.x.clone();
        if self.swapped {
            let r = s.len();
            s.swap(r - 2, r - 1);
        }
        s
    }

    fn view<B: Backend>(&self, x: FloatTensor<B>) -> FloatTensor<B> {
        let r = self.x.len();
        if self.swapped { B::float_swap_dims(x, r - 2, r - 1) } else { x }
    }

    /// The forward convolution of `B`, N = rank - 2.
    fn forward<B: Backend>(&self, x: FloatTensor<B>, w: FloatTensor<B>, b: Option<FloatTensor<B>>) -> FloatTensor<B> {
        let x = self.view::<B>(x);
        let (s, p, d, g) = (&self.stride, &self.padding, &self.dilation, self.groups);
        match self.x.len() - 2 {
            1 => B::conv1d(x, w, b, ConvOptions::new(arr(s), arr(p), arr(d), g)),
            2 => B::conv2d(x, w, b, ConvOptions::new(arr(s), arr(p), arr(d), g)),
            _ => B::conv3d(x, w, b, ConvOptions::new(arr(s), arr(p), arr(d), g)),
        }
    }

    /// The transposed convolution of `B`.
    fn transposed<B: Backend>(&self, x: FloatTensor<B>, w: FloatTensor<B>, b: Option<FloatTensor<B>>) -> FloatTensor<B> {
        let x = self.view::<B>(x);
        let (s, p, po, d, g) = (&self.stride, &self.padding, &self.padding_out, &self.dilation, self.groups);
        match self.x.len() - 2 {
            1 => B::conv_transpose1d(x, w, b, ConvTransposeOptions::new(arr(s), arr(p), arr(po), arr(d), g)),
            2 => B::conv_transpose2d(x, w, b, ConvTransposeOptions::new(arr(s), arr(p), arr(po), arr(d), g)),
            _ => B::conv_transpose3d(x, w, b, ConvTransposeOptions::new(arr(s), arr(p), arr(po), arr(d), g)),
        }
    }
}

fn run_convs(suite: &mut Suite, name: &str, transposed: bool, cases: &[Conv]) {
    for (n, c) in cases.iter().enumerate() {
        let seed = if transposed { 2000 } else { 1000 } + 10 * c.x.len() as u64 + n as u64;
        let x = rand(seed, &c.stored_x(), -1.0, 1.0);
        let w = rand(seed + 1, &c.w, -1.0, 1.0);
        let c_out = if transposed { c.w[1] * c.groups } else { c.w[0] };
        let b = rand(seed + 2, &[c_out], -1.0, 1.0);
        let case = format!("{name} {c:?} seed={seed}");
        match (transposed, c.bias) {
            (false, true) => grad_check!(suite, case, TOL, [x: &x, w: &w, b: &b], |B| c.forward::<B>(x, w, Some(b))),
            (false, false) => grad_check!(suite, case, TOL, [x: &x, w: &w], |B| c.forward::<B>(x, w, None)),
            (true, true) => grad_check!(suite, case, TOL, [x: &x, w: &w, b: &b], |B| c.transposed::<B>(x, w, Some(b))),
            (true, false) => grad_check!(suite, case, TOL, [x: &x, w: &w], |B| c.transposed::<B>(x, w, None)),
        }
    }
}

#[test]
fn conv_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff conv");
    run_convs(&mut suite, "conv1d", false, &[
        conv(&[2, 3, 9], &[4, 3, 3], &[1], &[1], &[1], 1, true, false),
        conv(&[1, 4, 7], &[6, 2, 2], &[3], &[0], &[2], 2, false, false),
        // padding larger than the kernel
        conv(&[2, 2, 5], &[2, 2, 1], &[2], &[4], &[1], 1, true, false),
    ]);
    run_convs(&mut suite, "conv2d", false, &[
        conv(&[2, 3, 7, 6], &[4, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, false),
        // groups > 1, stride > kernel, odd sizes, non-contiguous x
        conv(&[1, 4, 9, 11], &[6, 2, 2, 3], &[3, 4], &[0, 1], &[1, 1], 2, true, true),
        // padding larger than the kernel, dilation
        conv(&[2, 2, 5, 4], &[3, 2, 2, 2], &[1, 2], &[3, 2], &[2, 1], 1, false, false),
        // 1×1 image, depthwise
        conv(&[3, 4, 1, 1], &[4, 1, 1, 1], &[1, 1], &[0, 0], &[1, 1], 4, true, false),
        // more than 16 output channels per group, two groups
        conv(&[2, 6, 6, 5], &[40, 3, 3, 2], &[1, 1], &[1, 0], &[1, 1], 2, true, false),
    ]);
    run_convs(&mut suite, "conv3d", false, &[
        conv(&[1, 2, 4, 5, 3], &[3, 2, 2, 3, 2], &[1, 2, 1], &[1, 0, 1], &[1, 1, 2], 1, true, false),
        conv(&[2, 4, 3, 3, 3], &[2, 2, 1, 2, 2], &[2, 1, 1], &[0, 1, 0], &[1, 1, 1], 2, false, true),
    ]);
    suite.finish();
}

#[test]
fn conv_transpose_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff conv_transpose");
    run_convs(&mut suite, "conv_transpose1d", true, &[
        conv(&[2, 3, 5], &[3, 2, 3], &[2], &[1], &[1], 1, true, false).with_padding_out(&[1]),
        conv(&[1, 4, 4], &[4, 3, 2], &[1], &[0], &[2], 2, false, false),
    ]);
    run_convs(&mut suite, "conv_transpose2d", true, &[
        conv(&[2, 3, 4, 5], &[3, 2, 3, 3], &[2, 1], &[1, 1], &[1, 1], 1, true, false).with_padding_out(&[1, 0]),
        conv(&[1, 4, 3, 3], &[4, 1, 2, 3], &[3, 2], &[0, 1], &[1, 2], 2, true, true).with_padding_out(&[2, 1]),
        conv(&[2, 2, 1, 1], &[2, 3, 2, 2], &[1, 1], &[0, 0], &[1, 1], 1, false, false),
    ]);
    run_convs(&mut suite, "conv_transpose3d", true, &[
        conv(&[1, 2, 2, 3, 2], &[2, 2, 2, 2, 2], &[2, 1, 2], &[0, 1, 1], &[1, 1, 1], 1, true, false).with_padding_out(&[1, 0, 0]),
    ]);
    suite.finish();
}

#[test]
fn deform_conv_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff deform_conv2d");
    let s = &mut suite;
    // (x, weight, stride, padding, dilation, weight groups, offset groups, mask, bias)
    type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 2], [usize; 2], usize, usize, bool, bool);
    let cases: [Case; 4] = [
        ([1, 2, 5, 5], [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1, 1, true, true),
        ([2, 4, 4, 6], [4, 2, 2, 2], [2, 1], [0, 1], [1, 2], 2, 2, false, true),
        ([1, 3, 3, 3], [2, 3, 1, 1], [1, 1], [0, 0], [1, 1], 1, 3, true, false),
        ([1, 2, 6, 4], [2, 1, 3, 2], [3, 2], [2, 0], [1, 1], 2, 1, true, true),
    ];
    let tol = Tol::of(1e-3);
    for (n, (xs, ws, st, p, d, wg, og, has_mask, has_bias)) in cases.into_iter().enumerate() {
        let seed = 3000 + n as u64;
        let oh = conv_out(xs[2], ws[2], st[0], p[0], d[0]);
        let ow = conv_out(xs[3], ws[3], st[1], p[1], d[1]);
        let taps = og * ws[2] * ws[3];
        let x = rand(seed, &xs, -1.0, 1.0);
        let offset = rand(seed + 1, &[xs[0], 2 * taps, oh, ow], -1.5, 1.5);
        let w = rand(seed + 2, &ws, -1.0, 1.0);
        let mask = rand(seed + 3, &[xs[0], taps, oh, ow], 0.0, 1.0);
        let b = rand(seed + 4, &[ws[0]], -1.0, 1.0);
        let o = || DeformConvOptions::new(st, p, d, wg, og);
        let case = format!("deform_conv2d x={xs:?} w={ws:?} stride={st:?} pad={p:?} dil={d:?} groups=({wg},{og}) mask={has_mask} bias={has_bias} seed={seed}");
        if og == 1 {
            match (has_mask, has_bias) {
                (true, true) => grad_check!(s, case, tol, [x: &x, offset: &offset, w: &w, mask: &mask, b: &b], |B| B::deform_conv2d(x, offset, w, Some(mask), Some(b), o())),
                (true, false) => grad_check!(s, case, tol, [x: &x, offset: &offset, w: &w, mask: &mask], |B| B::deform_conv2d(x, offset, w, Some(mask), None, o())),
                (false, true) => grad_check!(s, case, tol, [x: &x, offset: &offset, w: &w, b: &b], |B| B::deform_conv2d(x, offset, w, None, Some(b), o())),
                (false, false) => grad_check!(s, case, tol, [x: &x, offset: &offset, w: &w], |B| B::deform_conv2d(x, offset, w, None, None, o())),
            }
            continue;
        }
        // burn-ndarray 0.21 reads the first offset group's column gradients for every offset
        // group, so its offset and mask gradients are wrong for offset groups > 1: x, weight
        // and bias are compared with it (offset and mask as untracked inputs), offset and mask
        // gradients are checked as directional derivatives of our forward pass.
        let m = |on: bool| if on { Some(&mask) } else { None };
        match has_bias {
            true => grad_check!(s, format!("{case} [x, weight, bias]"), tol, [x: &x, w: &w, b: &b], |B| {
                B::deform_conv2d(x, leaf::<B>(&offset, false), w, m(has_mask).map(|d| leaf::<B>(d, false)), Some(b), o())
            }),
            false => grad_check!(s, format!("{case} [x, weight]"), tol, [x: &x, w: &w], |B| {
                B::deform_conv2d(x, leaf::<B>(&offset, false), w, m(has_mask).map(|d| leaf::<B>(d, false)), None, o())
            }),
        }
        if has_mask {
            fd_check!(s, format!("{case} [offset, mask]"), 1e-3, 2e-2, [x: &x, offset: &offset, w: &w, mask: &mask], [1, 3], |B| B::deform_conv2d(x, offset, w, Some(mask), None, o()));
        } else {
            fd_check!(s, format!("{case} [offset]"), 1e-3, 2e-2, [x: &x, offset: &offset, w: &w], [1], |B| B::deform_conv2d(x, offset, w, None, None, o()));
        }
    }
    suite.finish();
}

/// (x, kernel, stride, padding, dilation, ceil_mode)
type PoolCase = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);

const POOL_CASES: [PoolCase; 5] = [
    ([2, 3, 7, 6], [3, 3], [2, 2], [1, 1], [1, 1], false),
    ([1, 2, 8, 5], [2, 3], [2, 1], [1, 1], [1, 1], true),
    ([2, 1, 5, 5], [3, 2], [3, 3], [0, 1], [1, 1], true),
    ([1, 2, 9, 7], [3, 2], [1, 2], [1, 0], [2, 3], false),
    ([3, 2, 1, 1], [1, 1], [1, 1], [0, 0], [1, 1], false),
];

#[test]
fn pool_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff pool");
    let s = &mut suite;
    for (n, (xs, k, st, p, d, ceil)) in POOL_CASES.into_iter().enumerate() {
        for swapped in [false, true] {
            let seed = 5000 + n as u64;
            let mut stored = xs;
            if swapped {
                stored.swap(2, 3);
            }
            let x = rand(seed, &stored, -1.0, 1.0);
            let case = format!("x={xs:?} k={k:?} stride={st:?} pad={p:?} dil={d:?} ceil={ceil} swapped={swapped} seed={seed}");
            for include_pad in [true, false] {
                grad_check!(s, format!("avg_pool2d include_pad={include_pad} {case}"), TOL, [x: &x], |B| {
                    let x = if swapped { B::float_swap_dims(x, 2, 3) } else { x };
                    B::avg_pool2d(x, k, st, p, include_pad, ceil)
                });
            }
            grad_check!(s, format!("max_pool2d {case}"), TOL, [x: &x], |B| {
                let x = if swapped { B::float_swap_dims(x, 2, 3) } else { x };
                B::max_pool2d(x, k, st, p, d, ceil)
            });
            grad_check!(s, format!("max_pool2d_with_indices {case}"), TOL, [x: &x], |B| {
                let x = if swapped { B::float_swap_dims(x, 2, 3) } else { x };
                B::max_pool2d_with_indices(x, k, st, p, d, ceil).output
            });
        }
    }
    // Overlapping windows with a repeated maximum in the input: the gradient of the winner
    // accumulates over every window it wins.
    let x = TensorData::new(vec![0.1f32, 0.9, 0.2, 0.3, 0.8, 0.4, 0.5, 0.6, 0.7, 0.95, 0.05, 0.15, 0.25, 0.35, 0.45, 0.55], [1, 1, 4, 4]);
    grad_check!(s, "max_pool2d overlapping windows k=3 stride=1", TOL, [x: &x], |B| B::max_pool2d(x, [3, 3], [1, 1], [1, 1], [1, 1], false));
    for (n, (xs, out)) in [([2, 3, 7, 5], [3, 2]), ([1, 2, 3, 4], [5, 7]), ([1, 1, 6, 6], [6, 6]), ([2, 2, 5, 1], [1, 1])].into_iter().enumerate() {
        let seed = 6000 + n as u64;
        let x = rand(seed, &xs, -1.0, 1.0);
        grad_check!(s, format!("adaptive_avg_pool2d x={xs:?} out={out:?} seed={seed}"), TOL, [x: &x], |B| B::adaptive_avg_pool2d(x, out));
    }
    // 1-D pooling.
    let x = rand(6100, &[2, 3, 9], -1.0, 1.0);
    for (k, st, p, ceil) in [(3, 2, 1, false), (2, 3, 0, true), (4, 1, 2, false)] {
        let case = format!("x=[2, 3, 9] k={k} stride={st} pad={p} ceil={ceil}");
        for include_pad in [true, false] {
            grad_check!(s, format!("avg_pool1d include_pad={include_pad} {case}"), TOL, [x: &x], |B| B::avg_pool1d(x, k, st, p, include_pad, ceil));
        }
        grad_check!(s, format!("max_pool1d dil=1 {case}"), TOL, [x: &x], |B| B::max_pool1d(x, k, st, p, 1, ceil));
        grad_check!(s, format!("max_pool1d_with_indices dil=2 {case}"), TOL, [x: &x], |B| B::max_pool1d_with_indices(x, k, st, p.min(k / 2), 2, ceil).output);
    }
    for out in [4, 1, 9, 13] {
        grad_check!(s, format!("adaptive_avg_pool1d x=[2, 3, 9] out={out}"), TOL, [x: &x], |B| B::adaptive_avg_pool1d(x, out));
    }
    suite.finish();
}

#[test]
fn interpolate_grads() {
    setup();
    let mut suite = Suite::new("autodiff interpolate");
    let s = &mut suite;
    use InterpolateMode::*;
    let sizes = [([2, 3, 4, 5], [7, 9]), ([1, 2, 8, 7], [3, 4]), ([1, 1, 1, 3], [4, 2]), ([2, 1, 5, 5], [5, 5])];
    for (mode, align) in [(Nearest, false), (Bilinear, true), (Bilinear, false), (Bicubic, true), (Bicubic, false), (Lanczos3, true), (Lanczos3, false)] {
        for (n, (xs, out)) in sizes.into_iter().enumerate() {
            let seed = 7000 + n as u64;
            let mut stored = xs;
            stored.swap(2, 3);
            let x = rand(seed, &stored, -1.0, 1.0);
            let opts = || InterpolateOptions::new(mode.clone()).with_align_corners(align);
            let case = format!("interpolate {mode:?} align_corners={align} x={xs:?} out={out:?} seed={seed}");
            if matches!(mode, Nearest) {
                grad_check!(s, case, TOL, [x: &x], |B| B::interpolate(B::float_swap_dims(x, 2, 3), out, opts()));
            } else {
                // burn-ndarray has no backward pass for these modes. The op is linear in x, so
                // the central difference is exact up to f32 rounding for any step.
                fd_check!(s, case, 0.5, 1e-3, [x: &x], [0], |B| B::interpolate(B::float_swap_dims(x, 2, 3), out, opts()));
            }
        }
    }
    suite.finish();
}

#[test]
fn attention_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff attention");
    let s = &mut suite;
    // (batch, heads, seq_q, seq_k, dim, value dim)
    let shapes = [(2, 2, 5, 7, 4, 3), (1, 2, 6, 6, 8, 8), (1, 1, 1, 3, 2, 5)];
    for (n, (b, h, sq, sk, d, dv)) in shapes.into_iter().enumerate() {
        let seed = 8000 + n as u64;
        let q = rand(seed, &[b, h, sq, d], -1.0, 1.0);
        let k = rand(seed + 1, &[b, h, sk, d], -1.0, 1.0);
        let v = rand(seed + 2, &[b, h, sk, dv], -1.0, 1.0);
        let mut mask = bool_data(&mut Rng::new(seed + 3), &[b, h, sq, sk]);
        // One fully masked row (its output is zeros, and so are the gradients through it).
        let mut m = mask.to_vec::<bool>().expect("bools");
        m[..sk].iter_mut().for_each(|x| *x = true);
        mask = TensorData::new(m, [b, h, sq, sk]);
        let bias = rand(seed + 4, &[b, h, sq, sk], -1.0, 1.0);
        let options = [
            AttentionModuleOptions::default(),
            AttentionModuleOptions { scale: Some(0.3), softcap: None, is_causal: true },
            AttentionModuleOptions { scale: None, softcap: Some(2.0), is_causal: false },
        ];
        for (oi, o) in options.into_iter().enumerate() {
            for with_mask in [false, true] {
                let mk = |on: bool| if on { Some(&mask) } else { None };
                let case = format!("attention q={:?} k={:?} v={:?} mask={with_mask} options#{oi}={o:?} seed={seed}", q.shape, k.shape, v.shape);
                grad_check!(s, case.clone(), TOL, [q: &q, k: &k, v: &v], |B| B::attention(q, k, v, mk(with_mask).map(ex_cubecl_conformance::b::<B>), None, o));
                grad_check!(s, format!("{case} bias"), TOL, [q: &q, k: &k, v: &v, bias: &bias], |B| {
                    B::attention(q, B::float_swap_dims(B::float_swap_dims(k, 2, 3), 2, 3), v, mk(with_mask).map(ex_cubecl_conformance::b::<B>), Some(bias), o)
                });
            }
        }
    }
    suite.finish();
}

#[test]
fn norm_embedding_linear_unfold_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff layer_norm, embedding, linear, unfold4d, ctc");
    let s = &mut suite;
    for (n, shape) in [vec![4, 7], vec![2, 3, 16], vec![1, 1], vec![3, 2, 33]].into_iter().enumerate() {
        let seed = 9000 + n as u64;
        let d = *shape.last().unwrap();
        let x = rand(seed, &shape, -3.0, 3.0);
        let gamma = rand(seed + 1, &[d], -1.0, 1.0);
        let beta = rand(seed + 2, &[d], -1.0, 1.0);
        let case = format!("layer_norm x={shape:?} seed={seed}");
        grad_check!(s, format!("{case} beta"), Tol::of(5e-4), [x: &x, gamma: &gamma, beta: &beta], |B| B::layer_norm(x, gamma, Some(beta), 1e-5));
        grad_check!(s, case, Tol::of(5e-4), [x: &x, gamma: &gamma], |B| B::layer_norm(x, gamma, None, 1e-5));
    }
    // Embedding: repeated indices accumulate into the same row.
    let weights = rand(9100, &[6, 5], -1.0, 1.0);
    let idx = TensorData::new(vec![0i64, 5, 2, 2, 5, 5, 1, 0], [2, 4]);
    grad_check!(s, "embedding [6, 5] indices [2, 4] with repeats", TOL, [w: &weights], |B| B::embedding(w, i::<B>(&idx)));
    // Linear: weight [d_in, d_out], with and without bias, x of rank 2 and 3.
    for (n, xs) in [vec![5, 4], vec![2, 3, 4]].into_iter().enumerate() {
        let seed = 9200 + n as u64;
        let (x, w, b) = (rand(seed, &xs, -1.0, 1.0), rand(seed + 1, &[4, 6], -1.0, 1.0), rand(seed + 2, &[6], -1.0, 1.0));
        grad_check!(s, format!("linear x={xs:?} w=[4, 6] bias seed={seed}"), TOL, [x: &x, w: &w, b: &b], |B| B::linear(x, w, Some(b)));
        grad_check!(s, format!("linear x={xs:?} w=[4, 6] seed={seed}"), TOL, [x: &x, w: &w], |B| B::linear(x, w, None));
    }
    // unfold4d: padding / dilation take the convolution path, the others the unfold path.
    for (n, (xs, k, st, p, d)) in [([2, 3, 5, 6], [2, 3], [1, 1], [0, 0], [1, 1]), ([1, 2, 7, 5], [3, 2], [2, 3], [1, 2], [2, 1]), ([1, 1, 1, 1], [1, 1], [1, 1], [0, 0], [1, 1])].into_iter().enumerate() {
        let seed = 9300 + n as u64;
        let x = rand(seed, &xs, -1.0, 1.0);
        grad_check!(s, format!("unfold4d x={xs:?} k={k:?} stride={st:?} pad={p:?} dil={d:?} seed={seed}"), TOL, [x: &x], |B| B::unfold4d(x, k, UnfoldOptions::new(st, p, d)));
    }
    // CTC loss of log-softmaxed random logits: our recursion kernel against Burn's default
    // composition on the reference.
    let logits = rand(9400, &[6, 2, 4], -2.0, 2.0);
    let targets = TensorData::new(vec![1i64, 2, 2, 3, 1, 0], [2, 3]);
    let input_lengths = TensorData::new(vec![6i64, 5], [2]);
    let target_lengths = TensorData::new(vec![3i64, 2], [2]);
    grad_check!(s, "ctc_loss T=6 N=2 C=4 targets [[1, 2, 2], [3, 1]] blank=0", Tol::of(5e-4), [x: &logits], |B| {
        B::ctc_loss(B::log_softmax(x, 2), i::<B>(&targets), i::<B>(&input_lengths), i::<B>(&target_lengths), 0)
    });
    suite.finish();
}

/// Half precision: a convolution, a pooling and an attention on f16 where the device has it,
/// against the f32 reference.
#[test]
fn half_precision_module_grads_match_ndarray() {
    setup();
    let mut suite = Suite::new("autodiff module f16");
    let s = &mut suite;
    for dtype in float_dtypes().into_iter().filter(|d| *d == DType::F16) {
        let t = Tol::of(1e-3).for_dtype(dtype);
        let r = |seed: u64, shape: &[usize]| float_data(&mut Rng::new(seed), shape, dtype, -1.0, 1.0);
        let (x, w, b) = (r(9500, &[2, 3, 6, 5]), r(9501, &[4, 3, 3, 3]), r(9502, &[4]));
        grad_check!(s, format!("conv2d x=[2, 3, 6, 5] w=[4, 3, 3, 3] pad=1 {dtype:?}"), t, [x: &x, w: &w, b: &b], |B| {
            B::conv2d(x, w, Some(b), ConvOptions::new([1, 1], [1, 1], [1, 1], 1))
        });
        grad_check!(s, format!("avg_pool2d x=[2, 3, 6, 5] k=2 {dtype:?}"), t, [x: &x], |B| B::avg_pool2d(x, [2, 2], [2, 2], [0, 0], true, false));
        grad_check!(s, format!("max_pool2d x=[2, 3, 6, 5] k=3 stride=2 {dtype:?}"), t, [x: &x], |B| B::max_pool2d(x, [3, 3], [2, 2], [1, 1], [1, 1], false));
        let (q, k, v) = (r(9510, &[1, 2, 4, 8]), r(9511, &[1, 2, 5, 8]), r(9512, &[1, 2, 5, 3]));
        grad_check!(s, format!("attention q=[1, 2, 4, 8] k=[1, 2, 5, 8] {dtype:?}"), t, [q: &q, k: &k, v: &v], |B| B::attention(q, k, v, None, None, Default::default()));
    }
    suite.finish();
}
