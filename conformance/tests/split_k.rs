//! Split-K of the manual-MMA products (`ex_cubecl::launch::split_k`): convolutions, a
//! convolution's input gradient and matrix products forced into several K runs
//! (`with_splits`), against burn-ndarray and against the same launch unsplit, and run twice
//! for the same bits (the partials are summed in a fixed order). The cases have K not a
//! multiple of the runs (a shorter last run) nor of the K slice (a partial last slice),
//! partial output tiles, groups, a stride, bias, batches and a broadcast operand.
//!
//! The split runs only where the manual-MMA kernels run (CUDA on Ampere and later; the f16 /
//! bf16 products on TMA on Hopper): elsewhere the same calls run the other kernels unsplit
//! and the cases still check them against the reference.
use burn_backend::ops::*;
use burn_backend::{Backend, DType, TensorData};
use ex_cubecl::launch::split_k::with_splits;
use ex_cubecl::{MatmulPrecision, with_matmul_precision};
use ex_cubecl_conformance::*;

/// `dtype` where this device has it.
fn has(dtype: DType) -> bool {
    float_dtypes().contains(&dtype)
}

/// `f` with f32 products on TF32 (the manual-MMA kernels' f32), in `splits` runs.
fn split<T>(splits: usize, f: impl FnOnce() -> T) -> T {
    with_matmul_precision(Some(MatmulPrecision::Tf32), || with_splits(splits, f))
}

/// A product's tolerance: TF32's for f32, the dtype's rounding otherwise.
fn product_tol(dtype: DType) -> Tol {
    Tol::of(1e-2).for_dtype(dtype)
}

/// Checks `run` in `splits` runs against `reference`, against itself run again (bit for bit)
/// and against the unsplit launch.
fn check_split(suite: &mut Suite, case: &str, dtype: DType, splits: usize, reference: &TensorData, run: &dyn Fn() -> TensorData) {
    eprintln!("split-k: {case} in {splits} runs");
    let ours = catch(|| split(splits, run));
    let again = catch(|| split(splits, run));
    let whole = catch(|| split(1, run));
    suite.check(format!("{case} in {splits} runs"), product_tol(dtype), (ours.clone(), reference.clone()));
    suite.check(format!("{case} unsplit"), product_tol(dtype), (whole, reference.clone()));
    match ours {
        Ok(first) => suite.check(format!("{case} in {splits} runs, twice"), Tol::EXACT, (again, first)),
        Err(e) => suite.record(format!("{case} in {splits} runs, twice"), Err(e)),
    }
}

/// `(x, w, stride, padding, groups, bias, splits)` of the convolution cases.
type ConvCase = ([usize; 4], [usize; 4], usize, usize, usize, bool, usize);

#[test]
fn split_f16_convolutions_match_ndarray_and_the_unsplit_kernel() {
    split_convolutions(DType::F16, 61);
}

#[test]
fn split_f32_convolutions_match_ndarray_and_the_unsplit_kernel() {
    split_convolutions(DType::F32, 62);
}

#[test]
fn split_bf16_convolutions_match_ndarray_and_the_unsplit_kernel() {
    split_convolutions(DType::BF16, 63);
}

/// The convolution cases in `dtype` (f32: on TF32), where the device has it.
fn split_convolutions(dtype: DType, seed: u64) {
    if !has(dtype) {
        return;
    }
    let mut suite = Suite::new("split-k conv");
    let mut rng = Rng::new(seed);
    let cases: [ConvCase; 4] = [
        // K = 576: 18 slices of 32 in runs of 5, 5, 5, 3; 162 pixels and 48 channels: partial
        // tiles.
        ([2, 64, 9, 9], [48, 64, 3, 3], 1, 1, 1, true, 4),
        // K = 216: 7 slices (the last of 24) in runs of 3, 3, 1; stride 2.
        ([2, 24, 8, 8], [32, 24, 3, 3], 2, 1, 1, true, 3),
        // Two groups of 24 input and 16 output channels, 7 slices asked for 9 runs (7 of one).
        ([1, 48, 6, 6], [32, 24, 3, 3], 1, 1, 2, false, 9),
        // A 1 x 1 kernel: K = 256, 8 slices in two runs; an odd number of pixels.
        ([3, 256, 5, 5], [64, 256, 1, 1], 1, 0, 1, true, 2),
    ];
    {
        for (n, &(xs, ws, stride, pad, groups, bias, splits)) in cases.iter().enumerate() {
            let x = float_data(&mut rng, &xs, dtype, -1.0, 1.0);
            let w = float_data(&mut rng, &ws, dtype, -1.0, 1.0);
            let b = float_data(&mut rng, &[ws[0]], dtype, -1.0, 1.0);
            let options = ConvOptions::<2>::new([stride; 2], [pad; 2], [1, 1], groups);
            let reference = rf::<Ref>(Ref::conv2d(f::<Ref>(&x), f::<Ref>(&w), bias.then(|| f::<Ref>(&b)), options.clone()));
            let case = format!("conv2d x={xs:?} w={ws:?} stride={stride} pad={pad} groups={groups} bias={bias} {dtype:?} case={n} seed={seed}");
            let o = options.clone();
            let run = || rf::<Ex>(Ex::conv2d(f::<Ex>(&x), f::<Ex>(&w), bias.then(|| f::<Ex>(&b)), o.clone()));
            check_split(&mut suite, &case, dtype, splits, &reference, &run);

            // The input gradient: the transposed convolution's gather, K = c_out · taps.
            let side = |i: usize| (xs[i] + 2 * pad - ws[i]) / stride + 1;
            let out_shape = [xs[0], ws[0], side(2), side(3)];
            let g = float_data(&mut rng, &out_shape, dtype, -1.0, 1.0);
            let reference = rf::<Ref>(Ref::conv2d_x_backward(f::<Ref>(&x), f::<Ref>(&w), f::<Ref>(&g), options.clone()));
            let o = options.clone();
            let run = || rf::<Ex>(Ex::conv2d_x_backward(f::<Ex>(&x), f::<Ex>(&w), f::<Ex>(&g), o.clone()));
            check_split(&mut suite, &format!("{case} [x_grad]"), dtype, splits, &reference, &run);
        }
    }
    suite.finish();
}

#[test]
fn split_f16_products_match_ndarray_and_the_unsplit_kernel() {
    split_products(DType::F16, 67);
}

#[test]
fn split_f32_products_match_ndarray_and_the_unsplit_kernel() {
    split_products(DType::F32, 68);
}

#[test]
fn split_bf16_products_match_ndarray_and_the_unsplit_kernel() {
    split_products(DType::BF16, 69);
}

/// The matrix product cases in `dtype` (f32: on TF32), where the device has it.
fn split_products(dtype: DType, seed: u64) {
    use ex_cubecl::launch::matmul::{CmmaTiling, TensorCoreKernel, matmul_with};
    use ex_cubecl::launch::matmul_mma::{MMA_TILING, MMA_TILING_SMALL, MMA_TILING_TF32};
    if !has(dtype) {
        return;
    }
    let mut suite = Suite::new("split-k matmul");
    let mut rng = Rng::new(seed);
    // `(lhs, rhs, splits, lhs transposed)`: K = 1000 (16 slices of 64, the last of 40; 32 of
    // 32, the last of 8) in 3 runs; batches of K = 520 in 4; a broadcast rhs in 2; an M-major
    // lhs.
    let shapes: [(Vec<usize>, Vec<usize>, usize, bool); 4] = [
        (vec![72, 1000], vec![1000, 136], 3, false),
        (vec![2, 40, 520], vec![2, 520, 264], 4, false),
        (vec![3, 24, 200], vec![1, 200, 16], 2, false),
        (vec![136, 320], vec![320, 72], 5, true),
    ];
    {
        // f16 / bf16: 128 x 128 tiles with K slices of 64 (TMA on Hopper) and 64 x 64 (the
        // asynchronous copies); f32 (TF32): 256 x 128 and 64 x 64.
        let tilings: [CmmaTiling; 2] = match dtype {
            DType::F32 => [MMA_TILING_TF32, MMA_TILING_SMALL],
            _ => [MMA_TILING, MMA_TILING_SMALL],
        };
        for tiling in tilings {
            for (ls, rs, splits, transposed) in &shapes {
                let upload = if *transposed { vec![ls[1], ls[0]] } else { ls.clone() };
                let a = float_data(&mut rng, &upload, dtype, -1.0, 1.0);
                let b = float_data(&mut rng, rs, dtype, -1.0, 1.0);
                let lhs = |t| if *transposed { swap_last::<Ref>(t) } else { t };
                let reference = rf::<Ref>(Ref::float_matmul(lhs(f::<Ref>(&a)), f::<Ref>(&b)));
                let run = || {
                    let a = if *transposed { swap_last::<Ex>(f::<Ex>(&a)) } else { f::<Ex>(&a) };
                    rf::<Ex>(matmul_with("float_matmul", a, f::<Ex>(&b), Some(TensorCoreKernel::Mma(tiling))))
                };
                let case = format!("float_matmul {ls:?} x {rs:?} lhs transposed={transposed} {dtype:?} {tiling:?} seed={seed}");
                check_split(&mut suite, &case, dtype, *splits, &reference, &run);
            }
        }
    }
    suite.finish();
}

/// A matrix's last two dimensions swapped (a view).
fn swap_last<B: Backend>(t: B::FloatTensorPrimitive) -> B::FloatTensorPrimitive {
    B::float_swap_dims(t, 0, 1)
}
