//! Pooling, resampling (interpolate), attention and layer norm, and their backward passes,
//! compared with burn-ndarray on seeded random inputs and edge cases (odd sizes, ceil mode,
//! dilation, empty batches, non-contiguous inputs, attention tiles and masks).
use burn_backend::ops::*;
use burn_backend::{DType, TensorData};
use ex_cubecl_conformance::*;

mod module_common;
use module_common::*;

/// (x, kernel, stride, padding, dilation, ceil_mode)
type PoolCase = ([usize; 4], [usize; 2], [usize; 2], [usize; 2], [usize; 2], bool);

const POOL_CASES: [PoolCase; 7] = [
    ([2, 3, 7, 6], [3, 3], [2, 2], [1, 1], [1, 1], false),
    // ResNet's stem pooling; 17 x 17 windows a plane, more than one cube's units.
    ([1, 2, 34, 34], [3, 3], [2, 2], [1, 1], [1, 1], false),
    ([1, 2, 8, 5], [2, 3], [2, 1], [1, 1], [1, 1], true),
    ([2, 1, 5, 5], [3, 2], [3, 3], [0, 1], [1, 1], true),
    ([1, 2, 9, 7], [3, 2], [1, 2], [1, 0], [2, 3], false),
    ([3, 2, 1, 1], [1, 1], [1, 1], [0, 0], [1, 1], false),
    ([0, 2, 4, 4], [2, 2], [2, 2], [0, 0], [1, 1], false),
];

fn pool_out(x: usize, k: usize, s: usize, p: usize, d: usize, ceil: bool) -> usize {
    let n = x + 2 * p - d * (k - 1) - 1;
    if ceil { n.div_ceil(s) + 1 } else { n / s + 1 }
}

#[test]
fn pooling_matches_ndarray() {
    let mut suite = Suite::new("pool2d");
    for dtype in module_dtypes() {
        for (n, (xs, k, s, p, d, ceil)) in POOL_CASES.into_iter().enumerate() {
            for lay in [Lay::Contig, Lay::Swapped] {
                let seed = 5000 + n as u64;
                let mut rng = Rng::new(seed);
                let mut shape = xs.to_vec();
                if lay == Lay::Swapped {
                    shape.swap(2, 3);
                }
                let x = rand(&mut rng, &shape, dtype);
                let out = [xs[0], xs[1], pool_out(xs[2], k[0], s[0], p[0], d[0], ceil), pool_out(xs[3], k[1], s[1], p[1], d[1], ceil)];
                let avg_out = [xs[0], xs[1], pool_out(xs[2], k[0], s[0], p[0], 1, ceil), pool_out(xs[3], k[1], s[1], p[1], 1, ceil)];
                let g = rand(&mut rng, &out, dtype);
                let ga = rand(&mut rng, &avg_out, dtype);
                let case = format!("x={xs:?} k={k:?} stride={s:?} pad={p:?} dil={d:?} ceil={ceil} {lay:?} {dtype:?} seed={seed}");
                let t = tol(dtype);
                for include_pad in [true, false] {
                    let r = on_both!(|B| rf::<B>(B::avg_pool2d(up::<B>(&x, lay), k, s, p, include_pad, ceil)));
                    suite.check(format!("avg_pool2d include_pad={include_pad} {case}"), t, r);
                    let r = on_both!(|B| rf::<B>(B::avg_pool2d_backward(up::<B>(&x, lay), f::<B>(&ga), k, s, p, include_pad, ceil)));
                    suite.check(format!("avg_pool2d_backward include_pad={include_pad} {case}"), t, r);
                }
                let r = on_both!(|B| rf::<B>(B::max_pool2d(up::<B>(&x, lay), k, s, p, d, ceil)));
                suite.check(format!("max_pool2d {case}"), Tol::EXACT, r);
                let r = on_both!(|B| ri::<B>(B::max_pool2d_with_indices(up::<B>(&x, lay), k, s, p, d, ceil).indices));
                suite.check(format!("max_pool2d_with_indices [indices] {case}"), Tol::EXACT, r);
                let r = on_both!(|B| {
                    let indices = B::max_pool2d_with_indices(up::<B>(&x, lay), k, s, p, d, ceil).indices;
                    rf::<B>(B::max_pool2d_with_indices_backward(up::<B>(&x, lay), k, s, p, d, ceil, f::<B>(&g), indices).x_grad)
                });
                suite.check(format!("max_pool2d_with_indices_backward {case}"), t, r);
            }
        }
        // Adaptive pooling: down, up and uneven.
        for (n, (xs, out)) in [([2, 3, 7, 5], [3, 2]), ([1, 2, 3, 4], [5, 7]), ([1, 1, 6, 6], [6, 6]), ([2, 2, 5, 1], [1, 1])].into_iter().enumerate() {
            let mut rng = Rng::new(6000 + n as u64);
            let x = rand(&mut rng, &xs, dtype);
            let g = rand(&mut rng, &[xs[0], xs[1], out[0], out[1]], dtype);
            let case = format!("x={xs:?} out={out:?} {dtype:?}");
            let r = on_both!(|B| rf::<B>(B::adaptive_avg_pool2d(up::<B>(&x, Lay::Expanded), out)));
            suite.check(format!("adaptive_avg_pool2d {case}"), tol(dtype), r);
            let r = on_both!(|B| rf::<B>(B::adaptive_avg_pool2d_backward(f::<B>(&x), f::<B>(&g))));
            suite.check(format!("adaptive_avg_pool2d_backward {case}"), tol(dtype), r);
        }
        // 1-D pooling goes through the 2-D kernels.
        let mut rng = Rng::new(6100);
        let x = rand(&mut rng, &[2, 3, 9], dtype);
        let g = rand(&mut rng, &[2, 3, 5], dtype);
        let r = on_both!(|B| rf::<B>(B::avg_pool1d(f::<B>(&x), 3, 2, 1, false, true)));
        suite.check(format!("avg_pool1d {dtype:?}"), tol(dtype), r);
        let r = on_both!(|B| rf::<B>(B::avg_pool1d_backward(f::<B>(&x), f::<B>(&g), 3, 2, 1, false, true)));
        suite.check(format!("avg_pool1d_backward {dtype:?}"), tol(dtype), r);
        let r = on_both!(|B| rf::<B>(B::max_pool1d(f::<B>(&x), 3, 2, 1, 1, true)));
        suite.check(format!("max_pool1d {dtype:?}"), Tol::EXACT, r);
        let r = on_both!(|B| {
            let indices = B::max_pool1d_with_indices(f::<B>(&x), 3, 2, 1, 1, true).indices;
            rf::<B>(B::max_pool1d_with_indices_backward(f::<B>(&x), 3, 2, 1, 1, true, f::<B>(&g), indices).x_grad)
        });
        suite.check(format!("max_pool1d_with_indices_backward {dtype:?}"), tol(dtype), r);
        let g4 = rand(&mut rng, &[2, 3, 4], dtype);
        let r = on_both!(|B| rf::<B>(B::adaptive_avg_pool1d(f::<B>(&x), 4)));
        suite.check(format!("adaptive_avg_pool1d {dtype:?}"), tol(dtype), r);
        let r = on_both!(|B| rf::<B>(B::adaptive_avg_pool1d_backward(f::<B>(&x), f::<B>(&g4))));
        suite.check(format!("adaptive_avg_pool1d_backward {dtype:?}"), tol(dtype), r);
    }
    // Max pooling: NaN never wins, -inf everywhere gives -inf.
    let special = TensorData::new(vec![f32::NAN, 1.0, f32::NEG_INFINITY, f32::NEG_INFINITY, 2.0, f32::NAN, f32::NEG_INFINITY, f32::NEG_INFINITY], [1, 1, 2, 4]);
    let r = on_both!(|B| rf::<B>(B::max_pool2d(f::<B>(&special), [2, 2], [2, 2], [0, 0], [1, 1], false)));
    suite.check("max_pool2d NaN and -inf windows", Tol::EXACT, r);
    // A window with no maximum (only -inf and NaN) records index 0, and its gradient goes to
    // the plane's first element, which it need not cover.
    for dtype in module_dtypes() {
        for (k, s, p) in [([2, 2], [2, 2], [0, 0]), ([3, 3], [2, 2], [1, 1]), ([3, 3], [1, 1], [0, 0])] {
            let mut rng = Rng::new(6200);
            let mut values = rand(&mut rng, &[2, 2, 6, 6], DType::F32).to_vec::<f32>().unwrap();
            for plane in 1..4 {
                for (h, w) in (2..6).flat_map(|h| (2..6).map(move |w| (h, w))) {
                    values[plane * 36 + h * 6 + w] = if (h + w + plane) % 3 == 0 { f32::NAN } else { f32::NEG_INFINITY };
                }
            }
            let x = TensorData::new(values, [2, 2, 6, 6]).convert_dtype(dtype);
            let out = [2, 2, pool_out(6, k[0], s[0], p[0], 1, false), pool_out(6, k[1], s[1], p[1], 1, false)];
            let g = rand(&mut rng, &out, dtype);
            let case = format!("k={k:?} stride={s:?} pad={p:?} {dtype:?}");
            let r = on_both!(|B| ri::<B>(B::max_pool2d_with_indices(f::<B>(&x), k, s, p, [1, 1], false).indices));
            suite.check(format!("max_pool2d_with_indices [indices] windows without a maximum {case}"), Tol::EXACT, r);
            let r = on_both!(|B| {
                let indices = B::max_pool2d_with_indices(f::<B>(&x), k, s, p, [1, 1], false).indices;
                rf::<B>(B::max_pool2d_with_indices_backward(f::<B>(&x), k, s, p, [1, 1], false, f::<B>(&g), indices).x_grad)
            });
            suite.check(format!("max_pool2d_with_indices_backward windows without a maximum {case}"), tol(dtype), r);
        }
    }
    suite.finish();
}

fn modes() -> Vec<(InterpolateMode, bool)> {
    use InterpolateMode::*;
    vec![(Nearest, false), (Bilinear, true), (Bilinear, false), (Bicubic, true), (Bicubic, false), (Lanczos3, true), (Lanczos3, false)]
}

#[test]
fn interpolate_matches_ndarray() {
    let mut suite = Suite::new("interpolate");
    let sizes = [([2, 3, 4, 5], [7, 9]), ([1, 2, 8, 7], [3, 4]), ([1, 1, 1, 3], [4, 2]), ([2, 1, 5, 5], [5, 5])];
    for dtype in module_dtypes() {
        for (mode, align) in modes() {
            for (n, (xs, out)) in sizes.into_iter().enumerate() {
                let seed = 7000 + n as u64;
                let mut rng = Rng::new(seed);
                let x = rand(&mut rng, &xs, dtype);
                let g = rand(&mut rng, &[xs[0], xs[1], out[0], out[1]], dtype);
                let opts = || InterpolateOptions::new(mode.clone()).with_align_corners(align);
                let case = format!("{mode:?} align_corners={align} x={xs:?} out={out:?} {dtype:?} seed={seed}");
                let r = on_both!(|B| rf::<B>(B::interpolate(up::<B>(&x, Lay::Swapped), out, opts())));
                suite.check(format!("interpolate {case}"), Tol::of(1e-4).for_dtype(dtype), r);
                if matches!(mode, InterpolateMode::Nearest) {
                    let r = on_both!(|B| rf::<B>(B::interpolate_backward(f::<B>(&x), f::<B>(&g), out, opts())));
                    suite.check(format!("interpolate_backward {case}"), tol(dtype), r);
                } else {
                    // burn-ndarray has no backward for these modes; the backward pass must be
                    // the adjoint of the (checked) forward pass: <A x, g> == <x, Aᵀ g>.
                    let ours = catch(|| {
                        let y = rf::<Ex>(Ex::interpolate(f::<Ex>(&x), out, opts()));
                        let xg = rf::<Ex>(Ex::interpolate_backward(f::<Ex>(&x), f::<Ex>(&g), out, opts()));
                        (dot(&y, &g), dot(&x, &xg))
                    });
                    let ok = match ours {
                        Ok((lhs, rhs)) if (lhs - rhs).abs() <= 1e-3 * (1.0 + lhs.abs()) * if dtype == DType::F32 { 1.0 } else { 20.0 } => Ok(()),
                        Ok((lhs, rhs)) => Err(format!("<Ax, g> = {lhs} but <x, A^T g> = {rhs}")),
                        Err(e) => Err(format!("panicked: {e}")),
                    };
                    suite.record(format!("interpolate_backward is the adjoint {case}"), ok);
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn attention_matches_ndarray() {
    let mut suite = Suite::new("attention");
    // (batch, heads, seq_q, seq_k, dim, value dim)
    let shapes = [(2, 3, 5, 7, 4, 3), (1, 2, 6, 6, 8, 8), (1, 1, 1, 3, 2, 5), (2, 1, 4, 2, 3, 2)];
    for dtype in module_dtypes() {
        for (n, (b, h, sq, sk, d, dv)) in shapes.into_iter().enumerate() {
            let seed = 8000 + n as u64;
            let mut rng = Rng::new(seed);
            let q = rand(&mut rng, &[b, h, sq, d], dtype);
            let k = rand(&mut rng, &[b, h, sk, d], dtype);
            let v = rand(&mut rng, &[b, h, sk, dv], dtype);
            let mut mask = bool_data(&mut rng, &[b, h, sq, sk]);
            // One fully masked row (gives zeros).
            if let Ok(mut m) = mask.to_vec::<bool>() {
                m[..sk].iter_mut().for_each(|x| *x = true);
                mask = TensorData::new(m, [b, h, sq, sk]);
            }
            let bias = rand(&mut rng, &[b, h, sq, sk], dtype);
            let options = [
                AttentionModuleOptions::default(),
                AttentionModuleOptions { scale: Some(0.3), softcap: None, is_causal: true },
                AttentionModuleOptions { scale: None, softcap: Some(2.0), is_causal: false },
            ];
            for (oi, o) in options.into_iter().enumerate() {
                for (with_mask, with_bias) in [(false, false), (true, false), (false, true), (true, true)] {
                    let case = format!("attention q={:?} k={:?} v={:?} mask={with_mask} bias={with_bias} options#{oi}={o:?} {dtype:?} seed={seed}", q.shape, k.shape, v.shape);
                    let r = on_both!(|B| rf::<B>(B::attention(
                        up::<B>(&q, Lay::Contig),
                        f::<B>(&k),
                        up::<B>(&v, Lay::Expanded),
                        with_mask.then(|| ex_cubecl_conformance::b::<B>(&mask)),
                        with_bias.then(|| f::<B>(&bias)),
                        o,
                    )));
                    suite.check(case, attention_tol(dtype), r);
                }
            }
        }
    }
    suite.finish();
}

/// Attention's tolerance: scores and weighted sums on TF32 units where f32 products use them.
fn attention_tol(dtype: DType) -> Tol {
    if dtype == DType::F32 && tf32_products() { Tol::of(5e-3) } else { Tol::of(1e-4).for_dtype(dtype) }
}

#[test]
fn attention_tiles_match_ndarray() {
    let mut suite = Suite::new("attention tiles");
    // (batch, heads, seq_q, seq_k, dim, value dim): query and key tiles of the fused kernel
    // with remainders, head dimensions it pads, more queries than keys (causal rows that see
    // no key), and a head wider than it takes (the unfused path).
    let shapes = [(1, 2, 70, 130, 40, 24), (2, 1, 33, 20, 64, 64), (1, 3, 17, 100, 16, 8), (1, 1, 5, 9, 136, 4)];
    let options = [
        AttentionModuleOptions::default(),
        AttentionModuleOptions { scale: Some(0.2), softcap: None, is_causal: true },
        AttentionModuleOptions { scale: None, softcap: Some(1.5), is_causal: true },
    ];
    for dtype in module_dtypes() {
        for (n, (nb, h, sq, sk, d, dv)) in shapes.into_iter().enumerate() {
            let seed = 8100 + n as u64;
            let mut rng = Rng::new(seed);
            let q = rand(&mut rng, &[nb, h, sq, d], dtype);
            let k = rand(&mut rng, &[nb, h, sk, d], dtype);
            let v = rand(&mut rng, &[nb, h, sk, dv], dtype);
            // The mask is broadcast over the batch (with a fully masked first row), the bias
            // over heads and queries.
            let mut mask = bool_data(&mut rng, &[1, h, sq, sk]);
            if let Ok(mut m) = mask.to_vec::<bool>() {
                m[..sk].iter_mut().for_each(|x| *x = true);
                mask = TensorData::new(m, [1, h, sq, sk]);
            }
            let bias = float_data(&mut rng, &[nb, 1, 1, sk], dtype, -2.0, 2.0);
            let full = burn_backend::Shape::new([nb, h, sq, sk]);
            for (oi, o) in options.into_iter().enumerate() {
                for (with_mask, with_bias) in [(false, false), (true, false), (true, true)] {
                    let case = format!(
                        "attention q={:?} k={:?} v={:?} mask {:?}={with_mask} bias {:?}={with_bias} options#{oi}={o:?} {dtype:?} seed={seed}",
                        q.shape, k.shape, v.shape, mask.shape, bias.shape
                    );
                    let ours = catch(|| {
                        rf::<Ex>(Ex::attention(
                            f::<Ex>(&q),
                            f::<Ex>(&k),
                            f::<Ex>(&v),
                            with_mask.then(|| ex_cubecl_conformance::b::<Ex>(&mask)),
                            with_bias.then(|| f::<Ex>(&bias)),
                            o,
                        ))
                    });
                    // The reference gets the broadcast masks and bias expanded.
                    let reference = rf::<Ref>(Ref::attention(
                        f::<Ref>(&q),
                        f::<Ref>(&k),
                        f::<Ref>(&v),
                        with_mask.then(|| Ref::bool_expand(ex_cubecl_conformance::b::<Ref>(&mask), full.clone())),
                        with_bias.then(|| Ref::float_expand(f::<Ref>(&bias), full.clone())),
                        o,
                    ));
                    suite.check(case, attention_tol(dtype), (ours, reference));
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn attention_heads_interleaved_match_ndarray() {
    let mut suite = Suite::new("attention heads interleaved");
    // (batch, heads, seq_q, seq_k, dim, value dim), uploaded as [b, seq, h, dim] and seen as
    // [b, h, seq, dim] (head dimension contiguous, other strides not a contiguous tensor's):
    // several key tiles of the tensor-core kernel (an odd count, and one with a remainder),
    // query tiles with a remainder, the widest head it takes, and padded head dimensions.
    let shapes = [(2, 3, 70, 200, 64, 64), (1, 2, 40, 72, 128, 128), (1, 2, 33, 129, 32, 16), (1, 1, 20, 30, 24, 40)];
    let options = [
        AttentionModuleOptions::default(),
        AttentionModuleOptions { scale: Some(0.25), softcap: None, is_causal: true },
        AttentionModuleOptions { scale: None, softcap: Some(3.0), is_causal: false },
    ];
    for dtype in module_dtypes() {
        for (n, (nb, h, sq, sk, d, dv)) in shapes.into_iter().enumerate() {
            let seed = 8200 + n as u64;
            let mut rng = Rng::new(seed);
            let q = rand(&mut rng, &[nb, sq, h, d], dtype);
            let k = rand(&mut rng, &[nb, sk, h, d], dtype);
            let v = rand(&mut rng, &[nb, sk, h, dv], dtype);
            let mask = bool_data(&mut rng, &[nb, h, sq, sk]);
            let bias = float_data(&mut rng, &[1, h, sq, sk], dtype, -2.0, 2.0);
            let full = burn_backend::Shape::new([nb, h, sq, sk]);
            for (oi, o) in options.into_iter().enumerate() {
                for (with_mask, with_bias) in [(false, false), (true, true)] {
                    let case = format!(
                        "attention [b, seq, h, dim] views q={:?} k={:?} v={:?} mask={with_mask} bias={with_bias} options#{oi}={o:?} {dtype:?} seed={seed}",
                        q.shape, k.shape, v.shape
                    );
                    let ours = catch(|| {
                        let heads = |t| Ex::float_swap_dims(f::<Ex>(t), 1, 2);
                        rf::<Ex>(Ex::attention(
                            heads(&q),
                            heads(&k),
                            heads(&v),
                            with_mask.then(|| ex_cubecl_conformance::b::<Ex>(&mask)),
                            with_bias.then(|| f::<Ex>(&bias)),
                            o,
                        ))
                    });
                    let heads = |t| Ref::float_swap_dims(f::<Ref>(t), 1, 2);
                    let reference = rf::<Ref>(Ref::attention(
                        heads(&q),
                        heads(&k),
                        heads(&v),
                        with_mask.then(|| ex_cubecl_conformance::b::<Ref>(&mask)),
                        with_bias.then(|| Ref::float_expand(f::<Ref>(&bias), full.clone())),
                        o,
                    ));
                    suite.check(case, attention_tol(dtype), (ours, reference));
                }
            }
        }
    }
    suite.finish();
}

#[test]
fn attention_tma_matches_ndarray() {
    use ex_cubecl::launch::attention::attention_uses_tma;
    use ex_cubecl::launch::matmul_mma::tma_available;
    let mut suite = Suite::new("attention tma");
    // (batch, heads, seq_q, seq_k, dim, value dim), contiguous: where the device has TMA
    // (CUDA on Hopper and later), f16 and bf16 take the kernel whose keys and values come by
    // TMA. Several key tiles with a remainder (zero fill past the keys), two boxes per row
    // (128), dimensions padded inside a box (96, 40: zero fill past them), and one head (a
    // map without a batch dimension). Elsewhere the same calls run the other kernels.
    let shapes = [(2, 3, 70, 200, 64, 64), (1, 2, 40, 130, 128, 128), (2, 2, 33, 129, 96, 40), (1, 1, 16, 64, 64, 64)];
    // (options, mask, bias): each a kernel of its own on CUDA (seconds to compile).
    let cases = [
        (AttentionModuleOptions::default(), false, false),
        (AttentionModuleOptions { scale: Some(0.25), softcap: None, is_causal: true }, true, true),
        (AttentionModuleOptions { scale: None, softcap: Some(3.0), is_causal: false }, false, true),
    ];
    for dtype in module_dtypes().into_iter().filter(|d| matches!(d, DType::F16 | DType::BF16)) {
        for (n, (nb, h, sq, sk, d, dv)) in shapes.into_iter().enumerate() {
            let seed = 8300 + n as u64;
            let mut rng = Rng::new(seed);
            let q = rand(&mut rng, &[nb, h, sq, d], dtype);
            let k = rand(&mut rng, &[nb, h, sk, d], dtype);
            let v = rand(&mut rng, &[nb, h, sk, dv], dtype);
            let mask = bool_data(&mut rng, &[nb, h, sq, sk]);
            let bias = float_data(&mut rng, &[nb, h, sq, sk], dtype, -2.0, 2.0);
            for (oi, (o, with_mask, with_bias)) in cases.into_iter().enumerate() {
                let case = format!(
                    "attention by tma q={:?} k={:?} v={:?} mask={with_mask} bias={with_bias} options#{oi}={o:?} {dtype:?} seed={seed}",
                    q.shape, k.shape, v.shape
                );
                let (qe, ke, ve) = (f::<Ex>(&q), f::<Ex>(&k), f::<Ex>(&v));
                if tma_available(&qe.client) {
                    assert!(attention_uses_tma(&qe, &ke, &ve, (with_mask, with_bias), o), "{case}: expected the TMA kernel");
                }
                let r = on_both!(|B| rf::<B>(B::attention(
                    f::<B>(&q),
                    f::<B>(&k),
                    f::<B>(&v),
                    with_mask.then(|| ex_cubecl_conformance::b::<B>(&mask)),
                    with_bias.then(|| f::<B>(&bias)),
                    o,
                )));
                suite.check(case, attention_tol(dtype), r);
            }
        }
    }
    suite.finish();
}

#[test]
fn layer_norm_matches_ndarray() {
    let mut suite = Suite::new("layer_norm");
    for dtype in module_dtypes() {
        // burn-ndarray's layer norm fails on empty inputs; ours is checked on [0, 5] below.
        for (n, shape) in [vec![4, 7], vec![2, 3, 16], vec![1, 1], vec![3, 2, 2, 33]].into_iter().enumerate() {
            let mut rng = Rng::new(9000 + n as u64);
            let d = *shape.last().unwrap();
            let mut swapped = shape.clone();
            let r = swapped.len();
            swapped.swap(r - 2, r - 1);
            let x = float_data(&mut rng, &swapped, dtype, -3.0, 3.0);
            let gamma = rand(&mut rng, &[d], dtype);
            let beta = rand(&mut rng, &[d], dtype);
            for with_beta in [true, false] {
                let r = on_both!(|B| rf::<B>(B::layer_norm(up::<B>(&x, Lay::Swapped), f::<B>(&gamma), with_beta.then(|| f::<B>(&beta)), 1e-5)));
                suite.check(format!("layer_norm {shape:?} beta={with_beta} {dtype:?}"), Tol::of(1e-4).for_dtype(dtype), r);
            }
        }
        let (x, gamma) = (float_data(&mut Rng::new(9100), &[0, 5], dtype, -1.0, 1.0), float_data(&mut Rng::new(9101), &[5], dtype, -1.0, 1.0));
        let ours = catch(|| rf::<Ex>(Ex::layer_norm(f::<Ex>(&x), f::<Ex>(&gamma), None, 1e-5)));
        suite.record(format!("layer_norm of an empty batch [0, 5] {dtype:?}"), match ours {
            Ok(d) if d.shape.as_slice() == [0, 5] => Ok(()),
            Ok(d) => Err(format!("shape {:?}", d.shape)),
            Err(e) => Err(e),
        });
    }
    suite.finish();
}
