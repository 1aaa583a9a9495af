//! Convolutions (1-3d, transposed, deformable, unfold) and their backward passes, compared
//! with burn-ndarray on seeded random inputs and edge cases: odd sizes, padding larger than
//! the kernel, groups > 1, stride > kernel, 1×1 images, empty batches and non-contiguous
//! inputs; and the module ops' errors.
use burn_backend::ops::*;
use burn_backend::{Backend, DType, TensorData};
use ex_cubecl_conformance::*;

mod module_common;
use module_common::*;

struct ConvCase {
    x: Vec<usize>,
    w: Vec<usize>,
    stride: Vec<usize>,
    padding: Vec<usize>,
    dilation: Vec<usize>,
    groups: usize,
    bias: bool,
    lay: Lay,
}

fn conv_case(x: &[usize], w: &[usize], s: &[usize], p: &[usize], d: &[usize], groups: usize, bias: bool, lay: Lay) -> ConvCase {
    ConvCase { x: x.to_vec(), w: w.to_vec(), stride: s.to_vec(), padding: p.to_vec(), dilation: d.to_vec(), groups, bias, lay }
}

fn arr<const N: usize>(v: &[usize]) -> [usize; N] {
    v.try_into().expect("rank")
}

/// Forward, x, weight and bias gradients of an N-d convolution on backend `B`.
fn conv_all<B: Backend, const N: usize>(c: &ConvCase, x: &TensorData, w: &TensorData, b: &TensorData, g: &TensorData) -> Vec<TensorData> {
    let bias = c.bias.then(|| f::<B>(b));
    let (xt, wt) = (|| up::<B>(x, c.lay), || up::<B>(w, Lay::Contig));
    let gt = || f::<B>(g);
    let (out, xg, wg) = match N {
        1 => {
            let o1 = ConvOptions::<1>::new(arr(&c.stride), arr(&c.padding), arr(&c.dilation), c.groups);
            (B::conv1d(xt(), wt(), bias, o1.clone()), B::conv1d_x_backward(xt(), wt(), gt(), o1.clone()), B::conv1d_weight_backward(xt(), wt(), gt(), o1))
        }
        2 => {
            let o2 = ConvOptions::<2>::new(arr(&c.stride), arr(&c.padding), arr(&c.dilation), c.groups);
            (B::conv2d(xt(), wt(), bias, o2.clone()), B::conv2d_x_backward(xt(), wt(), gt(), o2.clone()), B::conv2d_weight_backward(xt(), wt(), gt(), o2))
        }
        _ => {
            let o3 = ConvOptions::<3>::new(arr(&c.stride), arr(&c.padding), arr(&c.dilation), c.groups);
            (B::conv3d(xt(), wt(), bias, o3.clone()), B::conv3d_x_backward(xt(), wt(), gt(), o3.clone()), B::conv3d_weight_backward(xt(), wt(), gt(), o3))
        }
    };
    let bg = match N {
        1 => B::conv1d_bias_backward(xt(), f::<B>(b), gt()),
        2 => B::conv2d_bias_backward(xt(), f::<B>(b), gt()),
        _ => B::conv3d_bias_backward(xt(), f::<B>(b), gt()),
    };
    vec![rf::<B>(out), rf::<B>(xg), rf::<B>(wg), rf::<B>(bg)]
}

/// Output spatial size of a convolution.
fn conv_out(x: usize, k: usize, s: usize, p: usize, d: usize) -> usize {
    (x + 2 * p - d * (k - 1) - 1) / s + 1
}

fn run_conv<const N: usize>(suite: &mut Suite, name: &str, cases: &[ConvCase]) {
    for dtype in module_dtypes() {
        for (n, c) in cases.iter().enumerate() {
            let seed = 1000 + n as u64;
            let mut rng = Rng::new(seed);
            let mut x_shape = c.x.clone();
            if c.lay == Lay::Swapped {
                x_shape.swap(N, N + 1);
            }
            let x = rand(&mut rng, &x_shape, dtype);
            let w = rand(&mut rng, &c.w, dtype);
            let b = rand(&mut rng, &[c.w[0]], dtype);
            let mut out = vec![c.x[0], c.w[0]];
            out.extend((0..N).map(|i| conv_out(c.x[i + 2], c.w[i + 2], c.stride[i], c.padding[i], c.dilation[i])));
            let g = rand(&mut rng, &out, dtype);
            let case = format!(
                "{name} x={:?} w={:?} stride={:?} pad={:?} dil={:?} groups={} bias={} {:?} {dtype:?} seed={seed}",
                c.x, c.w, c.stride, c.padding, c.dilation, c.groups, c.bias, c.lay
            );
            let ours = catch(|| conv_all::<Ex, N>(c, &x, &w, &b, &g));
            let reference = conv_all::<Ref, N>(c, &x, &w, &b, &g);
            // The convolution and both its gradients are products, on TF32 matrix units where
            // the device has them and TF32 is chosen; the bias gradient is a plain sum.
            for (k, name) in ["out", "x_grad", "weight_grad", "bias_grad"].into_iter().enumerate() {
                let t = if k < 3 { product_tol(dtype) } else { tol(dtype) };
                let mine = ours.as_ref().map(|v| v[k].clone()).map_err(|e| e.clone());
                suite.check(format!("{case} [{name}]"), t, (mine, reference[k].clone()));
            }
        }
    }
}

#[test]
fn conv_matches_ndarray() {
    let mut suite = Suite::new("conv");
    use Lay::*;
    run_conv::<1>(&mut suite, "conv1d", &[
        conv_case(&[2, 3, 9], &[4, 3, 3], &[1], &[1], &[1], 1, true, Contig),
        conv_case(&[1, 4, 7], &[6, 2, 2], &[3], &[0], &[2], 2, false, Swapped),
        conv_case(&[2, 2, 5], &[2, 2, 1], &[2], &[4], &[1], 1, true, Expanded),
    ]);
    run_conv::<2>(&mut suite, "conv2d", &[
        conv_case(&[2, 3, 7, 6], &[4, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
        // groups > 1, stride > kernel, odd sizes
        conv_case(&[1, 4, 9, 11], &[6, 2, 2, 3], &[3, 4], &[0, 1], &[1, 1], 2, true, Swapped),
        // padding larger than the kernel, dilation
        conv_case(&[2, 2, 5, 4], &[3, 2, 2, 2], &[1, 2], &[3, 2], &[2, 1], 1, false, Contig),
        // 1×1 image, depthwise
        conv_case(&[3, 4, 1, 1], &[4, 1, 1, 1], &[1, 1], &[0, 0], &[1, 1], 4, true, Expanded),
        // wide tiles (more than 16 output channels per group), two groups
        conv_case(&[2, 6, 6, 5], &[40, 3, 3, 2], &[1, 1], &[1, 0], &[1, 1], 2, true, Contig),
        // empty batch
        conv_case(&[0, 3, 5, 5], &[2, 3, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
    ]);
    // Groups of 16 or more output channels run on tensor cores where the device has them:
    // channel and pixel tiles with remainders, pixel tiles across batch entries, reductions
    // that are and aren't a multiple of the K slice, strides, dilation, padding and groups.
    run_conv::<2>(&mut suite, "conv2d (wide groups)", &[
        conv_case(&[2, 16, 9, 11], &[24, 16, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
        conv_case(&[1, 64, 7, 6], &[64, 32, 3, 3], &[2, 2], &[2, 2], &[2, 2], 2, true, Swapped),
        conv_case(&[1, 32, 18, 18], &[160, 32, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, false, Contig),
        conv_case(&[3, 5, 6, 20], &[16, 5, 1, 3], &[1, 2], &[0, 1], &[1, 1], 1, true, Expanded),
        // Channels in whole 16-byte chunks (the manual-MMA kernel where the device has it):
        // channel tiles with remainders, K not a multiple of the slice, strides, a 1×1 kernel.
        conv_case(&[2, 24, 13, 12], &[72, 24, 3, 3], &[1, 2], &[1, 1], &[1, 1], 1, true, Swapped),
        conv_case(&[2, 32, 5, 7], &[48, 32, 1, 1], &[1, 1], &[0, 0], &[1, 1], 1, false, Contig),
    ]);
    run_conv::<1>(&mut suite, "conv1d (wide groups)", &[
        conv_case(&[3, 8, 40], &[20, 8, 5], &[1], &[2], &[1], 1, true, Contig),
        conv_case(&[2, 32, 19], &[48, 16, 3], &[2], &[1], &[3], 2, false, Swapped),
    ]);
    run_conv::<3>(&mut suite, "conv3d (wide groups)", &[
        conv_case(&[1, 4, 5, 6, 7], &[16, 4, 2, 3, 3], &[1, 2, 1], &[1, 0, 1], &[1, 1, 1], 1, true, Contig),
    ]);
    run_conv::<3>(&mut suite, "conv3d", &[
        conv_case(&[1, 2, 4, 5, 3], &[3, 2, 2, 3, 2], &[1, 2, 1], &[1, 0, 1], &[1, 1, 2], 1, true, Contig),
        conv_case(&[2, 4, 3, 3, 3], &[2, 2, 1, 2, 2], &[2, 1, 1], &[0, 1, 0], &[1, 1, 1], 2, false, Swapped),
    ]);
    suite.finish();
}

/// The forward convolution alone of an N-d case on backend `B`.
fn conv_forward<B: Backend, const N: usize>(c: &ConvCase, x: &TensorData, w: &TensorData, b: &TensorData) -> TensorData {
    let bias = c.bias.then(|| f::<B>(b));
    let (xt, wt) = (up::<B>(x, c.lay), f::<B>(w));
    let (s, p, d, g) = (&c.stride, &c.padding, &c.dilation, c.groups);
    rf::<B>(match N {
        1 => B::conv1d(xt, wt, bias, ConvOptions::new(arr(s), arr(p), arr(d), g)),
        2 => B::conv2d(xt, wt, bias, ConvOptions::new(arr(s), arr(p), arr(d), g)),
        _ => B::conv3d(xt, wt, bias, ConvOptions::new(arr(s), arr(p), arr(d), g)),
    })
}

/// The forward convolution of each case in each of `dtypes` (f16 / bf16), where the device
/// has TMA also checking that the TMA kernel (`conv_tma`) ran it; elsewhere the same
/// convolutions run the asynchronous copies, the WMMA or the plain implicit GEMM. Prints a
/// line per case: kernels compile for seconds each on CUDA, and a run cut short still says
/// which cases passed.
fn run_conv_tma<const N: usize>(suite: &mut Suite, name: &str, dtypes: &[DType], cases: &[ConvCase]) {
    run_conv_tma_split::<N>(suite, name, dtypes, cases, 1);
}

/// [`run_conv_tma`] with every product split into `splits` K runs (`with_splits`; 1: the
/// default plan, unsplit for f16 and bf16): split launches stay on the asynchronous copies,
/// so with more than one split the TMA kernel must not run.
fn run_conv_tma_split<const N: usize>(suite: &mut Suite, name: &str, dtypes: &[DType], cases: &[ConvCase], splits: usize) {
    use ex_cubecl::launch::conv_tma::{conv_tma_device, tma_convolutions};
    use ex_cubecl::launch::split_k::with_splits;
    let tma = conv_tma_device(&f::<Ex>(&TensorData::new(vec![0.0f32], [1])));
    for &dtype in dtypes.iter().filter(|d| module_dtypes().contains(d)) {
        for (n, c) in cases.iter().enumerate() {
            let seed = 3000 + n as u64;
            let mut rng = Rng::new(seed);
            let mut x_shape = c.x.clone();
            if c.lay == Lay::Swapped {
                x_shape.swap(N, N + 1);
            }
            let x = rand(&mut rng, &x_shape, dtype);
            let w = rand(&mut rng, &c.w, dtype);
            let b = rand(&mut rng, &[c.w[0]], dtype);
            let case = format!(
                "{name} x={:?} w={:?} stride={:?} pad={:?} dil={:?} groups={} bias={} {:?} {dtype:?} seed={seed}",
                c.x, c.w, c.stride, c.padding, c.dilation, c.groups, c.bias, c.lay
            );
            let before = tma_convolutions();
            let ours = catch(|| with_splits(splits, || conv_forward::<Ex, N>(c, &x, &w, &b)));
            let ran = tma_convolutions() > before;
            let reference = conv_forward::<Ref, N>(c, &x, &w, &b);
            suite.check(format!("{case} splits={splits} [out]"), product_tol(dtype), (ours, reference));
            if tma {
                let expected = splits == 1;
                let outcome = if ran == expected { Ok(()) } else { Err(format!("ran on the TMA kernel: {ran}, expected {expected}")) };
                suite.record(format!("{case} splits={splits} [kernel]"), outcome);
            }
        }
    }
}

#[test]
fn conv_tma_matches_ndarray() {
    // Input channels per group a multiple of 64 (the TMA kernel's K slice): padding, strides
    // (equal and not), 1 × 1 kernels, dilation, batch entries that pixel tiles cross, pixel
    // counts and output channels that aren't a multiple of the tile, groups, a long reduction
    // over few tiles (also split, on the copies), a non-contiguous input, and 1D and 3D. Each case
    // compiles kernels of its own on CUDA (seconds each): every case in f16, a few in bf16.
    let mut suite = Suite::new("conv tma");
    use Lay::*;
    let (f16, both) = ([DType::F16], [DType::F16, DType::BF16]);
    run_conv_tma::<2>(&mut suite, "conv2d", &both, &[
        conv_case(&[2, 64, 14, 14], &[96, 64, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
        conv_case(&[1, 128, 15, 15], &[64, 128, 3, 3], &[2, 2], &[1, 1], &[1, 1], 1, true, Contig),
        conv_case(&[1, 256, 7, 7], &[256, 256, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
    ]);
    run_conv_tma::<2>(&mut suite, "conv2d", &f16, &[
        conv_case(&[2, 64, 9, 9], &[128, 64, 1, 1], &[2, 2], &[0, 0], &[1, 1], 1, true, Contig),
        conv_case(&[1, 64, 12, 11], &[40, 64, 3, 3], &[1, 1], &[2, 2], &[2, 2], 1, true, Contig),
        conv_case(&[3, 64, 20, 20], &[64, 64, 7, 7], &[2, 2], &[3, 3], &[1, 1], 1, true, Contig),
        conv_case(&[1, 64, 10, 13], &[48, 64, 2, 3], &[1, 2], &[0, 1], &[1, 1], 1, false, Contig),
        conv_case(&[1, 128, 8, 8], &[64, 64, 3, 3], &[1, 1], &[1, 1], &[1, 1], 2, true, Contig),
        conv_case(&[2, 64, 6, 7], &[16, 64, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Swapped),
    ]);
    // Split K (forced: f16 and bf16 don't split by default) on the copies, on the TMA tiling.
    run_conv_tma_split::<2>(&mut suite, "conv2d", &f16, &[
        conv_case(&[1, 256, 7, 7], &[256, 256, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig),
    ], 3);
    run_conv_tma::<1>(&mut suite, "conv1d", &f16, &[conv_case(&[2, 64, 50], &[32, 64, 5], &[1], &[2], &[1], 1, true, Contig)]);
    run_conv_tma::<3>(&mut suite, "conv3d", &f16, &[
        conv_case(&[1, 64, 5, 6, 7], &[32, 64, 3, 3, 3], &[1, 1, 1], &[1, 1, 1], &[1, 1, 1], 1, true, Contig),
        conv_case(&[2, 64, 4, 5, 6], &[64, 64, 2, 1, 3], &[2, 1, 2], &[0, 1, 1], &[1, 1, 2], 1, true, Contig),
    ]);
    suite.finish();
}

/// The input gradient alone of an N-d convolution case on backend `B` (Burn's composition: a
/// transposed convolution of the output gradient `g`).
fn conv_x_grad<B: Backend, const N: usize>(c: &ConvCase, x: &TensorData, w: &TensorData, g: &TensorData) -> TensorData {
    let (xt, wt, gt) = (f::<B>(x), f::<B>(w), f::<B>(g));
    let (s, p, d, groups) = (&c.stride, &c.padding, &c.dilation, c.groups);
    rf::<B>(match N {
        1 => B::conv1d_x_backward(xt, wt, gt, ConvOptions::new(arr(s), arr(p), arr(d), groups)),
        2 => B::conv2d_x_backward(xt, wt, gt, ConvOptions::new(arr(s), arr(p), arr(d), groups)),
        _ => B::conv3d_x_backward(xt, wt, gt, ConvOptions::new(arr(s), arr(p), arr(d), groups)),
    })
}

/// The f16 input gradient of each stride-1 case, run as the forward convolution with the
/// flipped weight (`with_transposed_as_forward`: on any device, so that devices without TMA
/// check the rewrite too), where the device has TMA also checking that the TMA kernel ran it.
fn run_x_grad_tma<const N: usize>(suite: &mut Suite, name: &str, cases: &[ConvCase]) {
    use ex_cubecl::launch::conv_tma::{conv_tma_device, tma_convolutions, with_transposed_as_forward};
    let tma = conv_tma_device(&f::<Ex>(&TensorData::new(vec![0.0f32], [1])));
    for dtype in module_dtypes().into_iter().filter(|&d| d == DType::F16) {
        for (n, c) in cases.iter().enumerate() {
            let seed = 3100 + n as u64;
            let mut rng = Rng::new(seed);
            let x = rand(&mut rng, &c.x, dtype);
            let w = rand(&mut rng, &c.w, dtype);
            let mut out = vec![c.x[0], c.w[0]];
            out.extend((0..N).map(|i| conv_out(c.x[i + 2], c.w[i + 2], c.stride[i], c.padding[i], c.dilation[i])));
            let g = rand(&mut rng, &out, dtype);
            let case = format!(
                "{name} x_grad x={:?} w={:?} pad={:?} dil={:?} groups={} {dtype:?} seed={seed}",
                c.x, c.w, c.padding, c.dilation, c.groups
            );
            let before = tma_convolutions();
            let ours = catch(|| with_transposed_as_forward(|| conv_x_grad::<Ex, N>(c, &x, &w, &g)));
            let ran = tma_convolutions() > before;
            suite.check(format!("{case} [x_grad]"), product_tol(dtype), (ours, conv_x_grad::<Ref, N>(c, &x, &w, &g)));
            if tma {
                suite.record(format!("{case} [on the TMA kernel]"), if ran { Ok(()) } else { Err("ran on another kernel".into()) });
            }
        }
    }
}

#[test]
fn conv_tma_input_gradients_match_ndarray() {
    // Stride-1 input gradients whose output channels (the transposed convolution's input
    // channels) per group are a multiple of 64: padding below, at and (dilated) far below
    // the kernel's reach, groups, 1D and 3D.
    let mut suite = Suite::new("conv tma x_grad");
    use Lay::*;
    run_x_grad_tma::<2>(&mut suite, "conv2d", &[
        conv_case(&[2, 96, 14, 14], &[128, 96, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, false, Contig),
        conv_case(&[1, 32, 12, 11], &[64, 32, 3, 3], &[1, 1], &[1, 0], &[2, 2], 1, false, Contig),
        conv_case(&[1, 64, 8, 8], &[128, 32, 3, 3], &[1, 1], &[2, 2], &[1, 1], 2, false, Contig),
    ]);
    run_x_grad_tma::<1>(&mut suite, "conv1d", &[conv_case(&[2, 32, 40], &[64, 32, 5], &[1], &[2], &[1], 1, false, Contig)]);
    run_x_grad_tma::<3>(&mut suite, "conv3d", &[
        conv_case(&[1, 32, 4, 5, 6], &[64, 32, 3, 3, 3], &[1, 1, 1], &[1, 1, 1], &[1, 1, 1], 1, false, Contig),
    ]);
    suite.finish();
}

struct TransposeCase {
    conv: ConvCase,
    padding_out: Vec<usize>,
}

/// Forward, x, weight and bias gradients of an N-d transposed convolution on `B`.
fn transpose_all<B: Backend, const N: usize>(c: &TransposeCase, x: &TensorData, w: &TensorData, b: &TensorData, g: &TensorData) -> Vec<TensorData> {
    let k = &c.conv;
    let bias = k.bias.then(|| f::<B>(b));
    let (xt, wt, gt) = (|| up::<B>(x, k.lay), || f::<B>(w), || f::<B>(g));
    let (out, xg, wg) = match N {
        1 => {
            let o = ConvTransposeOptions::<1>::new(arr(&k.stride), arr(&k.padding), arr(&c.padding_out), arr(&k.dilation), k.groups);
            (B::conv_transpose1d(xt(), wt(), bias, o.clone()), B::conv_transpose1d_x_backward(wt(), gt(), o.clone()), B::conv_transpose1d_weight_backward(xt(), wt(), gt(), o))
        }
        2 => {
            let o = ConvTransposeOptions::<2>::new(arr(&k.stride), arr(&k.padding), arr(&c.padding_out), arr(&k.dilation), k.groups);
            (B::conv_transpose2d(xt(), wt(), bias, o.clone()), B::conv_transpose2d_x_backward(wt(), gt(), o.clone()), B::conv_transpose2d_weight_backward(xt(), wt(), gt(), o))
        }
        _ => {
            let o = ConvTransposeOptions::<3>::new(arr(&k.stride), arr(&k.padding), arr(&c.padding_out), arr(&k.dilation), k.groups);
            (B::conv_transpose3d(xt(), wt(), bias, o.clone()), B::conv_transpose3d_x_backward(wt(), gt(), o.clone()), B::conv_transpose3d_weight_backward(xt(), wt(), gt(), o))
        }
    };
    let bg = match N {
        1 => B::conv_transpose1d_bias_backward(xt(), f::<B>(b), gt()),
        2 => B::conv_transpose2d_bias_backward(xt(), f::<B>(b), gt()),
        _ => B::conv_transpose3d_bias_backward(xt(), f::<B>(b), gt()),
    };
    vec![rf::<B>(out), rf::<B>(xg), rf::<B>(wg), rf::<B>(bg)]
}

fn run_transpose<const N: usize>(suite: &mut Suite, name: &str, cases: &[TransposeCase]) {
    for dtype in module_dtypes() {
        for (n, c) in cases.iter().enumerate() {
            let k = &c.conv;
            let seed = 2000 + n as u64;
            let mut rng = Rng::new(seed);
            let mut x_shape = k.x.clone();
            if k.lay == Lay::Swapped {
                x_shape.swap(N, N + 1);
            }
            let x = rand(&mut rng, &x_shape, dtype);
            let w = rand(&mut rng, &k.w, dtype);
            let c_out = k.w[1] * k.groups;
            let b = rand(&mut rng, &[c_out], dtype);
            let mut out = vec![k.x[0], c_out];
            out.extend((0..N).map(|i| (k.x[i + 2] - 1) * k.stride[i] + k.dilation[i] * (k.w[i + 2] - 1) + 1 + c.padding_out[i] - 2 * k.padding[i]));
            let g = rand(&mut rng, &out, dtype);
            let case = format!(
                "{name} x={:?} w={:?} stride={:?} pad={:?} pad_out={:?} dil={:?} groups={} bias={} {:?} {dtype:?} seed={seed}",
                k.x, k.w, k.stride, k.padding, c.padding_out, k.dilation, k.groups, k.bias, k.lay
            );
            let ours = catch(|| transpose_all::<Ex, N>(c, &x, &w, &b, &g));
            let reference = transpose_all::<Ref, N>(c, &x, &w, &b, &g);
            check_outputs(suite, &case, &["out", "x_grad", "weight_grad", "bias_grad"], tol(dtype), ours, reference);
        }
    }
}

#[test]
fn conv_transpose_matches_ndarray() {
    let mut suite = Suite::new("conv_transpose");
    use Lay::*;
    let t = |conv: ConvCase, padding_out: &[usize]| TransposeCase { conv, padding_out: padding_out.to_vec() };
    run_transpose::<1>(&mut suite, "conv_transpose1d", &[
        t(conv_case(&[2, 3, 5], &[3, 2, 3], &[2], &[1], &[1], 1, true, Contig), &[1]),
        t(conv_case(&[1, 4, 4], &[4, 3, 2], &[1], &[0], &[2], 2, false, Swapped), &[0]),
    ]);
    run_transpose::<2>(&mut suite, "conv_transpose2d", &[
        t(conv_case(&[2, 3, 4, 5], &[3, 2, 3, 3], &[2, 1], &[1, 1], &[1, 1], 1, true, Contig), &[1, 0]),
        t(conv_case(&[1, 4, 3, 3], &[4, 1, 2, 3], &[3, 2], &[0, 1], &[1, 2], 2, true, Swapped), &[2, 1]),
        t(conv_case(&[2, 2, 1, 1], &[2, 3, 2, 2], &[1, 1], &[0, 0], &[1, 1], 1, false, Expanded), &[0, 0]),
        t(conv_case(&[0, 2, 3, 3], &[2, 2, 3, 3], &[1, 1], &[1, 1], &[1, 1], 1, true, Contig), &[0, 0]),
    ]);
    run_transpose::<3>(&mut suite, "conv_transpose3d", &[
        t(conv_case(&[1, 2, 2, 3, 2], &[2, 2, 2, 2, 2], &[2, 1, 2], &[0, 1, 1], &[1, 1, 1], 1, true, Contig), &[1, 0, 0]),
    ]);
    suite.finish();
}

/// Forward and all gradients of a deformable convolution on `B`.
#[allow(clippy::too_many_arguments)]
fn deform_all<B: Backend>(x: &TensorData, offset: &TensorData, w: &TensorData, mask: Option<&TensorData>, b: Option<&TensorData>, g: &TensorData, o: &DeformConvOptions<2>) -> Vec<TensorData> {
    let out = B::deform_conv2d(f::<B>(x), f::<B>(offset), f::<B>(w), mask.map(f::<B>), b.map(f::<B>), o.clone());
    let grads = B::deform_conv2d_backward(f::<B>(x), f::<B>(offset), f::<B>(w), mask.map(f::<B>), b.map(f::<B>), f::<B>(g), o.clone());
    let mut v = vec![rf::<B>(out), rf::<B>(grads.x_grad), rf::<B>(grads.offset_grad), rf::<B>(grads.weight_grad)];
    v.extend(grads.mask_grad.map(rf::<B>));
    v.extend(grads.bias_grad.map(rf::<B>));
    v
}

#[test]
fn deform_conv_matches_ndarray() {
    let mut suite = Suite::new("deform_conv2d");
    // (x, weight, stride, padding, dilation, weight groups, offset groups, mask, bias)
    type Case = ([usize; 4], [usize; 4], [usize; 2], [usize; 2], [usize; 2], usize, usize, bool, bool);
    let cases: [Case; 4] = [
        ([1, 2, 5, 5], [3, 2, 3, 3], [1, 1], [1, 1], [1, 1], 1, 1, true, true),
        ([2, 4, 4, 6], [4, 2, 2, 2], [2, 1], [0, 1], [1, 2], 2, 2, false, true),
        ([1, 3, 3, 3], [2, 3, 1, 1], [1, 1], [0, 0], [1, 1], 1, 3, true, false),
        ([1, 2, 6, 4], [2, 1, 3, 2], [3, 2], [2, 0], [1, 1], 2, 1, false, false),
    ];
    for dtype in module_dtypes() {
        for (n, (xs, ws, s, p, d, wg, og, has_mask, has_bias)) in cases.into_iter().enumerate() {
            let seed = 3000 + n as u64;
            let mut rng = Rng::new(seed);
            let oh = conv_out(xs[2], ws[2], s[0], p[0], d[0]);
            let ow = conv_out(xs[3], ws[3], s[1], p[1], d[1]);
            let taps = og * ws[2] * ws[3];
            let x = rand(&mut rng, &xs, dtype);
            let offset = float_data(&mut rng, &[xs[0], 2 * taps, oh, ow], dtype, -1.5, 1.5);
            let w = rand(&mut rng, &ws, dtype);
            let mask = float_data(&mut rng, &[xs[0], taps, oh, ow], dtype, 0.0, 1.0);
            let b = rand(&mut rng, &[ws[0]], dtype);
            let g = rand(&mut rng, &[xs[0], ws[0], oh, ow], dtype);
            let o = DeformConvOptions::new(s, p, d, wg, og);
            let (m, bb) = (has_mask.then_some(&mask), has_bias.then_some(&b));
            let case = format!("deform_conv2d x={xs:?} w={ws:?} stride={s:?} pad={p:?} dil={d:?} groups=({wg},{og}) mask={has_mask} bias={has_bias} {dtype:?} seed={seed}");
            let ours = catch(|| deform_all::<Ex>(&x, &offset, &w, m, bb, &g, &o));
            let reference = deform_all::<Ref>(&x, &offset, &w, m, bb, &g, &o);
            let mut names = vec!["out", "x_grad", "offset_grad", "weight_grad"];
            if has_mask {
                names.push("mask_grad");
            }
            if has_bias {
                names.push("bias_grad");
            }
            if og == 1 {
                check_outputs(&mut suite, &case, &names, Tol::of(1e-3).for_dtype(dtype), ours, reference);
                continue;
            }
            // burn-ndarray 0.21 reads the first offset group's column gradients for every
            // offset group (its `columns[channel]` lacks the group's channel offset), so its
            // offset and mask gradients are wrong for offset_groups > 1. Ours are checked as
            // directional derivatives of <deform_conv2d(..), g> instead.
            let skip = |n: &str| n != "offset_grad" && n != "mask_grad";
            let keep: Vec<usize> = (0..names.len()).filter(|&k| skip(names[k])).collect();
            let pick = |v: &Vec<TensorData>| keep.iter().map(|&k| v[k].clone()).collect::<Vec<_>>();
            let kept_names: Vec<&str> = keep.iter().map(|&k| names[k]).collect();
            check_outputs(&mut suite, &case, &kept_names, Tol::of(1e-3).for_dtype(dtype), ours.as_ref().map(pick).map_err(|e| e.clone()), pick(&reference));
            if dtype != DType::F32 {
                continue;
            }
            let loss = |offset: &TensorData, mask: &TensorData| {
                let out = rf::<Ex>(Ex::deform_conv2d(f::<Ex>(&x), f::<Ex>(offset), f::<Ex>(&w), has_mask.then(|| f::<Ex>(mask)), None, o.clone()));
                dot(&out, &g)
            };
            let shifted = |base: &TensorData, dir: &TensorData, eps: f64| {
                let v: Vec<f32> = values(base).iter().zip(values(dir)).map(|(a, d)| (a + eps * d) as f32).collect();
                TensorData::new(v, base.shape.clone())
            };
            let u = rand(&mut rng, &offset.shape, dtype);
            let um = rand(&mut rng, &mask.shape, dtype);
            let ok = catch(|| {
                let grads = deform_all::<Ex>(&x, &offset, &w, m, None, &g, &o);
                let eps = 1e-3;
                let fd = (loss(&shifted(&offset, &u, eps), &mask) - loss(&shifted(&offset, &u, -eps), &mask)) / (2.0 * eps);
                let analytic = dot(&grads[2], &u);
                let mut errs = Vec::new();
                if (fd - analytic).abs() > 2e-2 * (1.0 + analytic.abs()) {
                    errs.push(format!("offset: finite difference {fd} vs gradient {analytic}"));
                }
                if has_mask {
                    let fd = (loss(&offset, &shifted(&mask, &um, eps)) - loss(&offset, &shifted(&mask, &um, -eps))) / (2.0 * eps);
                    let analytic = dot(&grads[4], &um);
                    if (fd - analytic).abs() > 2e-2 * (1.0 + analytic.abs()) {
                        errs.push(format!("mask: finite difference {fd} vs gradient {analytic}"));
                    }
                }
                errs
            });
            suite.record(format!("{case} [offset/mask grads as directional derivatives]"), match ok {
                Ok(errs) if errs.is_empty() => Ok(()),
                Ok(errs) => Err(errs.join("; ")),
                Err(e) => Err(format!("panicked: {e}")),
            });
        }
    }
    suite.finish();
}

#[test]
fn unfold4d_matches_ndarray() {
    let mut suite = Suite::new("unfold4d");
    let cases = [
        ([2, 3, 5, 6], [2, 3], [1, 1], [0, 0], [1, 1]),
        ([1, 2, 7, 5], [3, 2], [2, 3], [1, 2], [2, 1]),
        ([1, 1, 1, 1], [1, 1], [1, 1], [0, 0], [1, 1]),
    ];
    for dtype in module_dtypes() {
        for (n, (xs, k, s, p, d)) in cases.into_iter().enumerate() {
            let mut rng = Rng::new(4000 + n as u64);
            let x = rand(&mut rng, &xs, dtype);
            let r = on_both!(|B| rf::<B>(B::unfold4d(up::<B>(&x, Lay::Contig), k, UnfoldOptions::new(s, p, d))));
            suite.check(format!("unfold4d x={xs:?} k={k:?} stride={s:?} pad={p:?} dil={d:?} {dtype:?}"), Tol::EXACT, r);
        }
    }
    suite.finish();
}

#[test]
fn module_ops_reject_bad_input() {
    let mut suite = Suite::new("module errors");
    let data = |shape: &[usize]| TensorData::new(vec![0.5f32; shape.iter().product()], shape.to_vec());
    let conv = |x: &[usize], w: &[usize], b: Option<&[usize]>, o: ConvOptions<2>| {
        let (x, w, b) = (data(x), data(w), b.map(data));
        catch(|| rf::<Ex>(Ex::conv2d(f::<Ex>(&x), f::<Ex>(&w), b.as_ref().map(f::<Ex>), o)))
    };
    let o = |s: usize, p: usize, d: usize, g: usize| ConvOptions { stride: [s, s], padding: [p, p], dilation: [d, d], groups: g };
    suite.check_panics("conv2d mismatched channels", "conv2d: x [1, 3, 5, 5] has 3 channels", conv(&[1, 3, 5, 5], &[2, 4, 3, 3], None, o(1, 0, 1, 1)));
    suite.check_panics("conv2d kernel larger than the padded input", "conv2d: kernel [7, 7]", conv(&[1, 2, 4, 4], &[2, 2, 7, 7], None, o(1, 1, 1, 1)));
    suite.check_panics("conv2d zero stride", "conv2d: stride [0, 0]", conv(&[1, 2, 4, 4], &[2, 2, 3, 3], None, o(0, 0, 1, 1)));
    suite.check_panics("conv2d zero dilation", "must be non-zero", conv(&[1, 2, 4, 4], &[2, 2, 3, 3], None, o(1, 0, 0, 1)));
    suite.check_panics("conv2d wrong bias shape", "conv2d: bias must have shape [2], got [3]", conv(&[1, 2, 4, 4], &[2, 2, 3, 3], Some(&[3]), o(1, 0, 1, 1)));
    suite.check_panics("conv2d wrong rank", "conv2d: x must have rank 4", {
        let (x, w) = (data(&[2, 4, 4]), data(&[2, 2, 3, 3]));
        catch(|| rf::<Ex>(Ex::conv2d(f::<Ex>(&x), f::<Ex>(&w), None, o(1, 0, 1, 1))))
    });
    suite.check_panics("conv_transpose2d mismatched channels", "conv_transpose2d: x [1, 3, 4, 4] has 3 channels", {
        let (x, w) = (data(&[1, 3, 4, 4]), data(&[2, 2, 3, 3]));
        catch(|| rf::<Ex>(Ex::conv_transpose2d(f::<Ex>(&x), f::<Ex>(&w), None, ConvTransposeOptions::new([1, 1], [0, 0], [0, 0], [1, 1], 1))))
    });
    suite.check_panics("max_pool2d window larger than the padded input", "max_pool2d: window [5, 5]", {
        let x = data(&[1, 1, 3, 3]);
        catch(|| rf::<Ex>(Ex::max_pool2d(f::<Ex>(&x), [5, 5], [1, 1], [0, 0], [1, 1], false)))
    });
    suite.check_panics("avg_pool2d zero stride", "avg_pool2d: kernel [2, 2], stride [0, 1]", {
        let x = data(&[1, 1, 3, 3]);
        catch(|| rf::<Ex>(Ex::avg_pool2d(f::<Ex>(&x), [2, 2], [0, 1], [0, 0], true, false)))
    });
    suite.check_panics("attention mismatched head dims", "attention: expected query [b, h, sq, d]", {
        let (q, k) = (data(&[1, 1, 2, 3]), data(&[1, 1, 2, 4]));
        catch(|| rf::<Ex>(Ex::attention(f::<Ex>(&q), f::<Ex>(&k), f::<Ex>(&k), None, None, Default::default())))
    });
    suite.check_panics("layer_norm wrong gamma", "layer_norm: gamma must have shape [4]", {
        let (x, g) = (data(&[2, 4]), data(&[3]));
        catch(|| rf::<Ex>(Ex::layer_norm(f::<Ex>(&x), f::<Ex>(&g), None, 1e-5)))
    });
    suite.check_panics("deform_conv2d wrong offset shape", "deform_conv2d: offset must have shape", {
        let (x, off, w) = (data(&[1, 2, 4, 4]), data(&[1, 3, 2, 2]), data(&[2, 2, 3, 3]));
        catch(|| rf::<Ex>(Ex::deform_conv2d(f::<Ex>(&x), f::<Ex>(&off), f::<Ex>(&w), None, None, DeformConvOptions::new([1, 1], [0, 0], [1, 1], 1, 1))))
    });
    suite.finish();
}
