//! Matrix products: odd and tile-aligned sizes, broadcast and empty batches, `k = 0`, and
//! operands seen through transposed, stepped, offset and expanded views, on every float dtype
//! (f32 exactly and through TF32 where the device has it) and on ints.
//!
//! On wgpu (lavapipe) every product runs the tiled kernel on plain units; on CUDA the f16,
//! bf16 and TF32 products of 16 or more rows and columns run the tensor-core kernels (manual
//! MMA for f16 and bf16 operands read in 16-byte chunks, WMMA otherwise), so the same cases
//! check all of them.
use burn_backend::ops::*;
use burn_backend::{Backend, BackendTypes, DType, Shape, Slice, TensorData};
use ex_cubecl::{MatmulPrecision, matmul_precision, set_matmul_precision};
use ex_cubecl_conformance::*;

/// How an operand reaches the product.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Operand {
    /// Uploaded as is.
    Contiguous,
    /// Uploaded with its last two dimensions swapped, then swapped back (column-major).
    Transposed,
    /// Every second column of a twice-as-wide upload (inner stride 2).
    Stepped,
    /// Rows `1..` of an upload with one more row (an offset into the buffer).
    Offset,
    /// The first dimension broadcast (stride 0) from an upload of size 1.
    Expanded,
}

const OPERANDS: [Operand; 5] =
    [Operand::Contiguous, Operand::Transposed, Operand::Stepped, Operand::Offset, Operand::Expanded];

/// The shape to upload so that `view` turns it into `shape`.
fn upload_shape(shape: &[usize], view: Operand) -> Vec<usize> {
    let r = shape.len();
    let mut s = shape.to_vec();
    match view {
        Operand::Contiguous => {}
        Operand::Transposed => s.swap(r - 2, r - 1),
        Operand::Stepped => s[r - 1] *= 2,
        Operand::Offset => s[r - 2] += 1,
        Operand::Expanded => s[0] = 1,
    }
    s
}

/// Applies `view` to an uploaded operand (the inverse of [`upload_shape`]).
fn view<B: Backend>(t: <B as BackendTypes>::FloatTensorPrimitive, shape: &[usize], view: Operand) -> <B as BackendTypes>::FloatTensorPrimitive {
    let r = shape.len();
    let mut s = vec![Slice::new(0, None, 1); r];
    match view {
        Operand::Contiguous => t,
        Operand::Transposed => B::float_swap_dims(t, r - 2, r - 1),
        Operand::Stepped => {
            s[r - 1] = Slice::new(0, None, 2);
            B::float_slice(t, &s)
        }
        Operand::Offset => {
            s[r - 2] = Slice::new(1, None, 1);
            B::float_slice(t, &s)
        }
        Operand::Expanded => B::float_expand(t, Shape::from(shape.to_vec())),
    }
}

/// `(lhs shape, rhs shape)` pairs: odd sizes around the tile edges (1, 3, 17, 63, 65, 130),
/// sizes whose rows are 16-byte aligned (vector loads; asynchronous copies on CUDA), partial
/// tiles and K slices, and batches with broadcasting.
fn cases() -> Vec<(Vec<usize>, Vec<usize>)> {
    vec![
        (vec![1, 1], vec![1, 1]),
        (vec![1, 3], vec![3, 17]),
        (vec![3, 17], vec![17, 1]),
        (vec![17, 63], vec![63, 65]),
        (vec![63, 65], vec![65, 17]),
        (vec![65, 130], vec![130, 3]),
        (vec![130, 17], vec![17, 130]),
        (vec![16, 16], vec![16, 16]),
        (vec![64, 32], vec![32, 64]),
        (vec![129, 40], vec![40, 131]),
        (vec![65, 40], vec![40, 136]),
        (vec![2, 20, 48], vec![2, 48, 24]),
        (vec![2, 17, 33], vec![2, 33, 19]),
        (vec![2, 1, 20, 8], vec![1, 3, 8, 36]),
        (vec![1, 17, 8], vec![3, 8, 20]),
        (vec![1, 2, 3, 4, 5], vec![1, 2, 3, 5, 6]),
    ]
}

/// Runs every float case at `dtype`, with both operands through every view (each operand's
/// view is checked against a contiguous other operand, plus both transposed together), or
/// only contiguous operands and a transposed lhs unless `all_views`.
fn float_cases(suite: &mut Suite, dtype: DType, tol: Tol, label: &str, rng: &mut Rng, seed: u64, all_views: bool) {
    for (ls, rs) in cases() {
        let mut pairs: Vec<(Operand, Operand)> = OPERANDS.iter().map(|&v| (v, Operand::Contiguous)).collect();
        pairs.extend(OPERANDS[1..].iter().map(|&v| (Operand::Contiguous, v)));
        pairs.push((Operand::Transposed, Operand::Transposed));
        if !all_views {
            pairs.retain(|p| matches!(p, (Operand::Contiguous | Operand::Transposed, Operand::Contiguous)));
        }
        for (lv, rv) in pairs {
            // Broadcasting a dimension needs one to broadcast.
            if (lv == Operand::Expanded && (ls.len() < 3 || ls[0] < 2)) || (rv == Operand::Expanded && (rs.len() < 3 || rs[0] < 2)) {
                continue;
            }
            let a = float_data(rng, &upload_shape(&ls, lv), dtype, -1.0, 1.0);
            let b = float_data(rng, &upload_shape(&rs, rv), dtype, -1.0, 1.0);
            let r = on_both!(|B| rf::<B>(B::float_matmul(view::<B>(f::<B>(&a), &ls, lv), view::<B>(f::<B>(&b), &rs, rv))));
            suite.check(format!("float_matmul {ls:?} ({lv:?}) x {rs:?} ({rv:?}) {dtype:?} {label} seed={seed}"), tol, r);
        }
    }
}

#[test]
fn float_matmul_matches_ndarray() {
    let mut suite = Suite::new("matmul float");
    let seed = 23;
    let mut rng = Rng::new(seed);
    // Exact f32 is the default (unless the environment asks for TF32).
    if std::env::var(ex_cubecl::MATMUL_PRECISION_ENV).is_err() {
        suite.record("matmul_precision default", match matmul_precision() {
            MatmulPrecision::Exact => Ok(()),
            other => Err(format!("default is {other:?}, expected Exact")),
        });
    }
    // The precision is process-wide: every f32 check of this binary runs in this test.
    set_matmul_precision(MatmulPrecision::Exact);
    for dtype in float_dtypes() {
        let tol = Tol::of(1e-4).for_dtype(dtype);
        float_cases(&mut suite, dtype, tol, "exact", &mut rng, seed, true);
    }
    // TF32 rounds each operand to a 10-bit mantissa: products of values in [-1, 1] over at
    // most 130 terms stay well within 1e-2 (devices without TF32 units compute exactly).
    set_matmul_precision(MatmulPrecision::Tf32);
    float_cases(&mut suite, DType::F32, Tol::of(1e-2), "tf32", &mut rng, seed, false);
    // f32 on the manual-MMA kernel (m16n8k8 TF32, fragments gathered from shared memory).
    {
        use ex_cubecl::launch::matmul::CmmaTiling;
        use ex_cubecl::launch::matmul_mma::{MMA_TILING_SMALL, MMA_TILING_TF32};
        let wide = CmmaTiling { block_m: 128, block_n: 256, block_k: 32, warps_m: 2, warps_n: 4, stages: 4 };
        mma_layout_cases(&mut suite, &mut rng, DType::F32, &[MMA_TILING_SMALL, MMA_TILING_TF32, wide], &mma_shapes(), &MMA_LAYOUTS, seed);
    }
    // In large products, f32 operands that the TF32 kernel would read element by element
    // (lhs M-major, rhs N-major) are copied K-major first (2^31 multiply-adds and more).
    let (ls, rs) = (vec![1288, 1296], vec![1296, 1304]);
    for (lv, rv) in [(Operand::Contiguous, Operand::Contiguous), (Operand::Transposed, Operand::Transposed)] {
        let a = float_data(&mut rng, &upload_shape(&ls, lv), DType::F32, -1.0, 1.0);
        let b = float_data(&mut rng, &upload_shape(&rs, rv), DType::F32, -1.0, 1.0);
        let r = on_both!(|B| rf::<B>(B::float_matmul(view::<B>(f::<B>(&a), &ls, lv), view::<B>(f::<B>(&b), &rs, rv))));
        // TF32 rounding over 1296 terms: about 0.006 per element (one sigma), so 0.05 absolute.
        suite.check(format!("float_matmul tf32 {ls:?} ({lv:?}) x {rs:?} ({rv:?}) seed={seed}"), Tol { abs: 5e-2, rel: 1e-2 }, r);
    }
    suite.record("matmul_precision round trip", match matmul_precision() {
        MatmulPrecision::Tf32 => Ok(()),
        other => Err(format!("set Tf32, read {other:?}")),
    });

    // Large operands with strided rows are copied to contiguous rows first.
    for dtype in float_dtypes() {
        let (ls, rs) = (vec![257, 256], vec![256, 130]);
        for (lv, rv) in [(Operand::Transposed, Operand::Contiguous), (Operand::Contiguous, Operand::Stepped)] {
            let a = float_data(&mut rng, &upload_shape(&ls, lv), dtype, -1.0, 1.0);
            let b = float_data(&mut rng, &upload_shape(&rs, rv), dtype, -1.0, 1.0);
            let r = on_both!(|B| rf::<B>(B::float_matmul(view::<B>(f::<B>(&a), &ls, lv), view::<B>(f::<B>(&b), &rs, rv))));
            let tol = if dtype == DType::F32 { Tol::of(1e-2) } else { Tol::of(1e-2).for_dtype(dtype) };
            suite.check(format!("float_matmul {ls:?} ({lv:?}) x {rs:?} ({rv:?}) {dtype:?} seed={seed}"), tol, r);
        }
    }

    for dtype in float_dtypes() {
        // k = 0: zeros (burn-ndarray divides by zero on empty operands, so the reference is
        // written out).
        let a = float_data(&mut rng, &[3, 0], dtype, -1.0, 1.0);
        let b = float_data(&mut rng, &[0, 17], dtype, -1.0, 1.0);
        let zeros = TensorData::new(vec![0.0f32; 3 * 17], [3, 17]);
        let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
        suite.check(format!("float_matmul [3, 0] x [0, 17] {dtype:?}"), Tol::EXACT, (ours, zeros));
        let a = float_data(&mut rng, &[20, 0], dtype, -1.0, 1.0);
        let b = float_data(&mut rng, &[0, 32], dtype, -1.0, 1.0);
        let zeros = TensorData::new(vec![0.0f32; 20 * 32], [20, 32]);
        let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
        suite.check(format!("float_matmul [20, 0] x [0, 32] {dtype:?}"), Tol::EXACT, (ours, zeros));
        let a = float_data(&mut rng, &[2, 20, 0], dtype, -1.0, 1.0);
        let b = float_data(&mut rng, &[2, 0, 33], dtype, -1.0, 1.0);
        let zeros = TensorData::new(vec![0.0f32; 2 * 20 * 33], [2, 20, 33]);
        let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
        suite.check(format!("float_matmul [2, 20, 0] x [2, 0, 33] {dtype:?}"), Tol::EXACT, (ours, zeros));
        // Empty batches, rows and columns: empty results of the right shape.
        for (ls, rs, out) in [
            (vec![0, 3, 4], vec![0, 4, 5], vec![0, 3, 5]),
            (vec![2, 0, 3, 4], vec![1, 4, 5], vec![2, 0, 3, 5]),
            (vec![0, 3], vec![3, 4], vec![0, 4]),
            (vec![3, 4], vec![4, 0], vec![3, 0]),
        ] {
            let a = float_data(&mut rng, &ls, dtype, -1.0, 1.0);
            let b = float_data(&mut rng, &rs, dtype, -1.0, 1.0);
            let empty = TensorData::new(Vec::<f32>::new(), out);
            let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
            suite.check(format!("float_matmul {ls:?} x {rs:?} {dtype:?}"), Tol::EXACT, (ours, empty));
        }
    }
    suite.finish();
}

#[test]
fn tensor_core_tilings_match_ndarray() {
    use ex_cubecl::launch::matmul::{CmmaTiling, HALF_TILING, HALF_TILING_LARGE, TF32_TILING, TF32_TILING_LARGE, TensorCoreKernel, matmul_with};
    // Where the device has matrix units each tiling runs the tensor-core kernel (asynchronous
    // copies for the aligned shapes, register staging for the others); elsewhere the tiling is
    // ignored and the tiled kernel runs.
    let mut suite = Suite::new("matmul tilings");
    let seed = 37;
    let mut rng = Rng::new(seed);
    let small = CmmaTiling { block_m: 64, block_n: 128, block_k: 32, warps_m: 2, warps_n: 2, stages: 2 };
    let shapes: [(Vec<usize>, Vec<usize>); 3] = [
        (vec![65, 40], vec![40, 136]),
        (vec![70, 33], vec![33, 50]),
        (vec![2, 260, 48], vec![2, 48, 264]),
    ];
    for dtype in float_dtypes() {
        // f32 runs exactly or through TF32, depending on what the other tests of this binary
        // have set: the tolerance covers both.
        let tol = if dtype == DType::F32 { Tol::of(1e-2) } else { Tol::of(1e-2).for_dtype(dtype) };
        for tiling in [HALF_TILING, HALF_TILING_LARGE, TF32_TILING, TF32_TILING_LARGE, small] {
            if dtype == DType::F32 && tiling.block_k % 8 != 0 || dtype != DType::F32 && tiling.block_k % 16 != 0 {
                continue;
            }
            for (ls, rs) in &shapes {
                let a = float_data(&mut rng, ls, dtype, -1.0, 1.0);
                let b = float_data(&mut rng, rs, dtype, -1.0, 1.0);
                let ours = catch(|| rf::<Ex>(matmul_with("float_matmul", f::<Ex>(&a), f::<Ex>(&b), Some(TensorCoreKernel::Wmma(tiling)))));
                let reference = rf::<Ref>(Ref::float_matmul(f::<Ref>(&a), f::<Ref>(&b)));
                suite.check(format!("float_matmul {ls:?} x {rs:?} {dtype:?} {tiling:?} seed={seed}"), tol, (ours, reference));
            }
        }
    }
    suite.finish();
}

#[test]
fn manual_mma_layouts_match_ndarray() {
    use ex_cubecl::launch::matmul::CmmaTiling;
    use ex_cubecl::launch::matmul_mma::{MMA_TILING, MMA_TILING_SMALL};
    // Where the device has manual MMA (CUDA on Ampere and later), f16 and bf16 products whose
    // operands are read in 16-byte chunks run it; f32 (TF32) runs in float_matmul_matches_ndarray,
    // which owns the process-wide precision.
    let mut suite = Suite::new("matmul manual mma");
    let seed = 41;
    let mut rng = Rng::new(seed);
    let wide = CmmaTiling { block_m: 128, block_n: 256, block_k: 32, warps_m: 2, warps_n: 4, stages: 4 };
    for dtype in float_dtypes().into_iter().filter(|d| matches!(d, DType::F16 | DType::BF16)) {
        mma_layout_cases(&mut suite, &mut rng, dtype, &[MMA_TILING_SMALL, MMA_TILING, wide], &mma_shapes(), &MMA_LAYOUTS, seed);
    }
    suite.finish();
}

#[test]
fn tma_tilings_match_ndarray() {
    use ex_cubecl::launch::matmul::CmmaTiling;
    use ex_cubecl::launch::matmul_mma::MMA_TILING;
    // Where the device has TMA (CUDA on Hopper and later), f16 and bf16 products on tilings
    // with K slices of 64 and tiles of 64 to 256 run the TMA kernel (matmul::tma) when their
    // operands start at their buffers' start: here K runs past the stages (the ring refills),
    // tiles and the last K slice are partial (zero fill), one case has two batch dimensions
    // to collapse, one a broadcast rhs (a map without batch). Elsewhere the same products run
    // the manual-MMA, WMMA or tiled kernel.
    let mut suite = Suite::new("matmul tma");
    let seed = 43;
    let mut rng = Rng::new(seed);
    let t = |block_m, block_n, warps_m, warps_n, stages| CmmaTiling { block_m, block_n, block_k: 64, warps_m, warps_n, stages };
    let shapes = [
        (vec![136, 520], vec![520, 136]),
        (vec![2, 2, 40, 200], vec![2, 2, 200, 72]),
        (vec![3, 72, 328], vec![1, 328, 264]),
    ];
    // Each case compiles a kernel of its own on CUDA (seconds each): every layout and shape
    // on the default tiling in f16, fewer in bf16 and on the other tilings.
    let contiguous = [(Operand::Contiguous, Operand::Contiguous)];
    let others = [t(128, 256, 2, 4, 4), t(256, 128, 4, 2, 2), t(64, 64, 2, 2, 5)];
    for dtype in float_dtypes().into_iter().filter(|d| matches!(d, DType::F16 | DType::BF16)) {
        let layouts: &[(Operand, Operand)] = match dtype {
            DType::F16 => &MMA_LAYOUTS,
            _ => &[MMA_LAYOUTS[0], MMA_LAYOUTS[3]],
        };
        mma_layout_cases(&mut suite, &mut rng, dtype, &[MMA_TILING], &shapes, layouts, seed);
        if dtype == DType::F16 {
            mma_layout_cases(&mut suite, &mut rng, dtype, &others, &shapes[..1], &contiguous, seed);
        }
    }
    suite.finish();
}

/// The shapes of [`mma_layout_cases`] for the manual-MMA tilings: partial tiles, K slices
/// beyond the stages with a partial last one, a broadcast batch and a single K chunk.
fn mma_shapes() -> [(Vec<usize>, Vec<usize>); 3] {
    [
        (vec![72, 136], vec![136, 200]),
        (vec![2, 136, 40], vec![2, 40, 264]),
        (vec![3, 24, 8], vec![1, 8, 16]),
    ]
}

/// The four operand layouts of the manual-MMA kernel: lhs contiguous along K or M, rhs along
/// N or K.
const MMA_LAYOUTS: [(Operand, Operand); 4] = [
    (Operand::Contiguous, Operand::Contiguous),
    (Operand::Transposed, Operand::Contiguous),
    (Operand::Contiguous, Operand::Transposed),
    (Operand::Transposed, Operand::Transposed),
];

/// The manual-MMA kernel (where the device has it; elsewhere the WMMA or tiled kernel runs)
/// in each of `layouts` (see [`MMA_LAYOUTS`]), with each tiling, on each `(lhs, rhs)` shape
/// pair.
fn mma_layout_cases(
    suite: &mut Suite,
    rng: &mut Rng,
    dtype: DType,
    tilings: &[ex_cubecl::launch::matmul::CmmaTiling],
    shapes: &[(Vec<usize>, Vec<usize>)],
    layouts: &[(Operand, Operand)],
    seed: u64,
) {
    use ex_cubecl::launch::matmul::{TensorCoreKernel, matmul_with};
    for &tiling in tilings {
        for (ls, rs) in shapes {
            for &(lv, rv) in layouts {
                let a = float_data(rng, &upload_shape(ls, lv), dtype, -1.0, 1.0);
                let b = float_data(rng, &upload_shape(rs, rv), dtype, -1.0, 1.0);
                let ours = catch(|| {
                    let (a, b) = (view::<Ex>(f::<Ex>(&a), ls, lv), view::<Ex>(f::<Ex>(&b), rs, rv));
                    rf::<Ex>(matmul_with("float_matmul", a, b, Some(TensorCoreKernel::Mma(tiling))))
                });
                let reference = rf::<Ref>(Ref::float_matmul(view::<Ref>(f::<Ref>(&a), ls, lv), view::<Ref>(f::<Ref>(&b), rs, rv)));
                let label = format!("{ls:?} ({lv:?}) x {rs:?} ({rv:?}) {dtype:?} {tiling:?} seed={seed}");
                suite.check(format!("float_matmul mma {label}"), Tol::of(1e-2).for_dtype(dtype), (ours, reference));
            }
        }
    }
}

#[test]
fn int_matmul_matches_ndarray() {
    let mut suite = Suite::new("matmul int");
    let seed = 29;
    let mut rng = Rng::new(seed);
    for dtype in int_dtypes().into_iter().filter(|d| matches!(d, DType::I32 | DType::I64)) {
        for (ls, rs) in cases() {
            let a = int_data(&mut rng, &ls, dtype, -5, 6);
            let b = int_data(&mut rng, &rs, dtype, -5, 6);
            let r = on_both!(|B| ri::<B>(B::int_matmul(i::<B>(&a), i::<B>(&b))));
            suite.check(format!("int_matmul {ls:?} x {rs:?} {dtype:?} seed={seed}"), Tol::EXACT, r);
            // A transposed (column-major) lhs.
            let rank = ls.len();
            let r = on_both!(|B| {
                let at = B::int_swap_dims(i::<B>(&a), rank - 1, rank - 2);
                let at = B::int_swap_dims(B::int_add_scalar(at, 0.into()), rank - 1, rank - 2);
                ri::<B>(B::int_matmul(at, i::<B>(&b)))
            });
            suite.check(format!("int_matmul transposed lhs {ls:?} x {rs:?} {dtype:?} seed={seed}"), Tol::EXACT, r);
        }
        let a = int_data(&mut rng, &[4, 0], dtype, -5, 6);
        let b = int_data(&mut rng, &[0, 3], dtype, -5, 6);
        let zeros = TensorData::new(vec![0i64; 12], [4, 3]).convert_dtype(dtype);
        let ours = catch(|| ri::<Ex>(Ex::int_matmul(i::<Ex>(&a), i::<Ex>(&b))));
        suite.check(format!("int_matmul [4, 0] x [0, 3] {dtype:?}"), Tol::EXACT, (ours, zeros));
    }
    suite.finish();
}

#[test]
fn bad_matmul_shapes_panic() {
    let mut suite = Suite::new("matmul errors");
    let mut rng = Rng::new(31);
    let a = float_data(&mut rng, &[3, 4], DType::F32, -1.0, 1.0);
    let b = float_data(&mut rng, &[5, 6], DType::F32, -1.0, 1.0);
    let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
    suite.check_panics("float_matmul [3, 4] x [5, 6]", "ex_cubecl: float_matmul: cannot multiply", ours);
    let a = float_data(&mut rng, &[2, 3, 4], DType::F32, -1.0, 1.0);
    let b = float_data(&mut rng, &[3, 4, 6], DType::F32, -1.0, 1.0);
    let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&b))));
    suite.check_panics("float_matmul [2, 3, 4] x [3, 4, 6]", "cannot broadcast the batch dimensions", ours);
    let a = float_data(&mut rng, &[4], DType::F32, -1.0, 1.0);
    let ours = catch(|| rf::<Ex>(Ex::float_matmul(f::<Ex>(&a), f::<Ex>(&a))));
    suite.check_panics("float_matmul [4] x [4]", "cannot multiply", ours);
    suite.finish();
}
