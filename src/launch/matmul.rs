//! Batched matrix multiplication with broadcast batch dimensions.
//!
//! Three kernels (crate `ex_cubecl_kernels`, module `matmul`): f16, bf16 and (under the TF32
//! precision) f32 products run on manual MMA (`mma.sync`, see [`super::matmul_mma`]) where the
//! device has it and the operands can be read in 16-byte chunks; otherwise a tensor-core kernel through
//! cubecl's `cmma` runs f16, bf16 and (when chosen, see [`MatmulPrecision`]) f32 rounded to
//! TF32 on devices whose matrix units take those types, and a tiled kernel on plain arithmetic
//! units everything else (ints, exact f32, devices without matrix units such as wgpu on
//! lavapipe, and outputs narrower than 16 rows or columns). Both read their inputs through
//! the views' strides, in vectors where the inner dimension is contiguous and aligned, and
//! accumulate half-precision inputs in f32.
use std::sync::atomic::{AtomicU8, Ordering};

use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::prelude::{ComputeClient, CubeDim};
use ex_cubecl_kernels::matmul::cmma::{matmul_cmma, matmul_cmma_async};
use ex_cubecl_kernels::matmul::tiled::{TiledConfig, matmul_tiled};

use super::bf16;
use super::copy::into_contiguous;
use super::matmul_mma::{MmaOperands, has_mma, launch_mma, mma_operands, mma_tiling, tf32_k_major};
use super::{accumulator, check_same_dtype};
use crate::runtime::{Geometry, Layout, launch, storage_type};
use crate::tensor::CubeTensor;

/// How f32 matrix products use the device's matrix units.
///
/// The default is [`MatmulPrecision::Exact`], as PyTorch's default
/// `set_float32_matmul_precision("highest")`: f32 products are exact f32 arithmetic, so that
/// algorithms built on them (Burn's LU decomposition and determinant, iterative solvers)
/// keep f32 accuracy. [`MatmulPrecision::Tf32`] (PyTorch's `"high"`, burn-cubecl's
/// behaviour) rounds f32 operands to TF32 (a 10-bit mantissa, relative error about 5e-4 per
/// operand) on devices with TF32 matrix units (NVIDIA Ampere and later) and multiplies them
/// on tensor cores with f32 accumulation, several times faster; devices without TF32 units
/// compute exactly either way. f16 and bf16 products always use the matrix units where the
/// device has them (their operands are exact there), with f32 accumulation.
///
/// Choose it with [`set_matmul_precision`], or with the environment variable
/// `EX_CUBECL_MATMUL_PRECISION` (`exact` or `tf32`), read at the first matrix product when
/// `set_matmul_precision` was not called before. It applies to every device of the process
/// and to every f32 product that runs on matrix units: matmul, convolutions and attention.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulPrecision {
    /// Exact f32 arithmetic (fused multiply-adds on plain units).
    #[default]
    Exact,
    /// f32 operands rounded to TF32 on devices with TF32 matrix units; exact elsewhere.
    Tf32,
}

/// The environment variable that picks the initial [`MatmulPrecision`].
pub const MATMUL_PRECISION_ENV: &str = "EX_CUBECL_MATMUL_PRECISION";

/// 0: not chosen yet (read the environment); 1: exact; 2: TF32.
static PRECISION: AtomicU8 = AtomicU8::new(0);

/// Sets how f32 matrix products are computed from now on (see [`MatmulPrecision`]).
pub fn set_matmul_precision(precision: MatmulPrecision) {
    PRECISION.store(code(precision), Ordering::Relaxed);
}

thread_local! {
    /// This thread's precision for the duration of [`with_matmul_precision`], if any.
    static OVERRIDE: std::cell::Cell<Option<MatmulPrecision>> = const { std::cell::Cell::new(None) };
}

/// Runs `f` with f32 matrix products of this thread computed at `precision` (where it is
/// `Some`), whatever the process-wide choice: a compiled program's own precision (EXLA's
/// `:precision` option), chosen where its products launch (a pipeline records the choice).
pub fn with_matmul_precision<T>(precision: Option<MatmulPrecision>, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<MatmulPrecision>);
    impl Drop for Restore {
        fn drop(&mut self) {
            OVERRIDE.with(|o| o.set(self.0));
        }
    }
    let Some(precision) = precision else { return f() };
    let _restore = Restore(OVERRIDE.with(|o| o.replace(Some(precision))));
    f()
}

/// The current [`MatmulPrecision`] (this thread's within [`with_matmul_precision`]).
///
/// # Panics
/// At the first call, when `EX_CUBECL_MATMUL_PRECISION` is set to something other than
/// `exact` or `tf32`.
pub fn matmul_precision() -> MatmulPrecision {
    if let Some(precision) = OVERRIDE.with(|o| o.get()) {
        return precision;
    }
    match PRECISION.load(Ordering::Relaxed) {
        1 => MatmulPrecision::Exact,
        2 => MatmulPrecision::Tf32,
        _ => {
            let chosen = match std::env::var(MATMUL_PRECISION_ENV).as_deref() {
                Err(_) | Ok("") | Ok("exact") => MatmulPrecision::Exact,
                Ok("tf32") => MatmulPrecision::Tf32,
                Ok(other) => panic!(
                    "ex_cubecl: matmul: {MATMUL_PRECISION_ENV}={other:?} is not a precision (exact or tf32)"
                ),
            };
            // A concurrent `set_matmul_precision` wins over the environment.
            let _ = PRECISION.compare_exchange(0, code(chosen), Ordering::Relaxed, Ordering::Relaxed);
            matmul_precision()
        }
    }
}

fn code(precision: MatmulPrecision) -> u8 {
    match precision {
        MatmulPrecision::Exact => 1,
        MatmulPrecision::Tf32 => 2,
    }
}

/// The tiling of the tensor-core kernel: a `block_m` × `block_n` output tile per cube,
/// K slices of `block_k`, and `warps_m` × `warps_n` planes of 32 units, each owning a
/// `(block_m / warps_m)` × `(block_n / warps_n)` part of the tile; `stages` K slices are in
/// flight at once where inputs are copied asynchronously (16-byte aligned rows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmmaTiling {
    /// Output rows per cube.
    pub block_m: usize,
    /// Output columns per cube.
    pub block_n: usize,
    /// K elements staged per step.
    pub block_k: usize,
    /// Planes along M.
    pub warps_m: usize,
    /// Planes along N.
    pub warps_n: usize,
    /// Shared-memory stages of the asynchronous-copy pipeline (at least 2).
    pub stages: usize,
}

/// The tiling for f16 and bf16 products (measured on an H200, 4096³ f16: 0.586 ms with 128 ×
/// 128 tiles, 0.578 ms with 256 × 128 tiles on 16 planes; bf16 needs 16 planes per cube to
/// stay at 128 registers, where 8-plane cubes run one per multiprocessor).
pub const HALF_TILING: CmmaTiling = CmmaTiling { block_m: 128, block_n: 128, block_k: 32, warps_m: 2, warps_n: 4, stages: 4 };
/// The tiling for f16 and bf16 products of 256 rows or more.
pub const HALF_TILING_LARGE: CmmaTiling = CmmaTiling { block_m: 256, block_n: 128, block_k: 32, warps_m: 4, warps_n: 4, stages: 3 };
/// The tiling for f32 products on TF32 units (4096³ on an H200: 2.21 ms with 128 × 128 tiles).
pub const TF32_TILING: CmmaTiling = CmmaTiling { block_m: 128, block_n: 128, block_k: 16, warps_m: 2, warps_n: 4, stages: 4 };
/// The tiling for f32 products on TF32 units of 256 columns or more (4096³: 1.67 ms).
pub const TF32_TILING_LARGE: CmmaTiling = CmmaTiling { block_m: 128, block_n: 256, block_k: 16, warps_m: 2, warps_n: 4, stages: 4 };

/// The tiling of the plain-units kernel: `block_m` × `block_n` outputs per cube, K slices of
/// `block_k`, `unit_m` × `unit_n` outputs per unit.
#[derive(Clone, Copy, Debug)]
struct Tiling {
    block_m: usize,
    block_n: usize,
    block_k: usize,
    unit_m: usize,
    unit_n: usize,
}

const SMALL: Tiling = Tiling { block_m: 64, block_n: 64, block_k: 16, unit_m: 4, unit_n: 4 };
const LARGE: Tiling = Tiling { block_m: 128, block_n: 128, block_k: 8, unit_m: 8, unit_n: 8 };

/// `lhs @ rhs` over the last two dimensions, broadcasting the others.
pub fn matmul<R: Runtime>(op: &str, lhs: CubeTensor<R>, rhs: CubeTensor<R>) -> CubeTensor<R> {
    matmul_with(op, lhs, rhs, None)
}

/// A tensor-core kernel and its tiling, for [`matmul_with`].
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TensorCoreKernel {
    /// The WMMA kernel (`matmul::cmma`).
    Wmma(CmmaTiling),
    /// The manual-MMA kernel (`matmul::mma`) where it can run the product, else the WMMA
    /// kernel with the same tiling.
    Mma(CmmaTiling),
}

/// [`matmul`] with the tensor-core kernel and its tiling chosen by the caller (for benchmarks
/// and tuning); `None` picks the default for the dtype and shapes. The choice is ignored
/// where no tensor-core kernel runs.
///
/// # Panics
/// On shapes that don't multiply or broadcast, differing dtypes, or a tiling that doesn't fit
/// (planes must divide the tile into 16 × 16 fragments, and the K slice must be a multiple of
/// the matrix instruction's K).
#[doc(hidden)]
pub fn matmul_with<R: Runtime>(
    op: &str,
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
    kernel: Option<TensorCoreKernel>,
) -> CubeTensor<R> {
    check_same_dtype(op, &lhs, &rhs);
    let product = Product::of(op, &lhs, &rhs);
    // bf16 held as bits: the tiled kernel stages the bits widened to f32 and rounds its stores
    // (see `super::bf16`), where the f32 widening would run it; the tensor-core kernels go
    // through f32.
    let bits = lhs.bf16_bits();
    if bits && !product.tiled_in_f32(&lhs.client) {
        return bf16::map2(op, lhs, rhs, |lhs, rhs| matmul_with(op, lhs, rhs, kernel));
    }
    let out = CubeTensor::empty(&lhs.client, &lhs.device, product.out_shape(), lhs.dtype);
    let chosen = match bits {
        true => Kernel::Tiled,
        false => product.kernel(&lhs, &rhs, kernel),
    };
    match chosen {
        Kernel::Mma(operands) => {
            let (lhs, rhs, operands) = tf32_k_major(lhs, rhs, operands);
            let (lhs_view, rhs_view) = product.views(&lhs, &rhs);
            let tiling = match kernel {
                Some(TensorCoreKernel::Mma(t)) => t,
                _ => mma_tiling(product.m, product.n, lhs.dtype),
            };
            launch_mma(op, &lhs, &rhs, &out, (&lhs_view, &rhs_view), product.batches(), tiling, operands);
        }
        Kernel::Cmma(operand, frag_k) => {
            let (lhs, rhs) = product.contiguous_rows(lhs, rhs);
            let (lhs_view, rhs_view) = product.views(&lhs, &rhs);
            let default = match lhs.dtype {
                DType::F32 if product.n >= 256 => TF32_TILING_LARGE,
                DType::F32 => TF32_TILING,
                _ if product.m >= 256 => HALF_TILING_LARGE,
                _ => HALF_TILING,
            };
            let tiling = match kernel {
                Some(TensorCoreKernel::Wmma(t) | TensorCoreKernel::Mma(t)) => t,
                None => default,
            };
            check_tiling(op, tiling, frag_k, lhs.dtype);
            launch_cmma(op, &lhs, &rhs, &out, (&lhs_view, &rhs_view), product.batches(), tiling, operand, frag_k);
        }
        Kernel::Tiled => {
            let (lhs, rhs) = product.contiguous_rows(lhs, rhs);
            let (lhs_view, rhs_view) = product.views(&lhs, &rhs);
            launch_tiled(op, &lhs, &rhs, &out, (&lhs_view, &rhs_view), product.batches());
        }
    }
    out
}

/// The shapes of a product `lhs @ rhs`: `[batch.., M, K] @ [batch.., K, N]`, the batch
/// dimensions broadcast.
#[derive(Clone, Debug)]
pub(crate) struct Product {
    pub(crate) m: usize,
    pub(crate) k: usize,
    pub(crate) n: usize,
    pub(crate) batch: Vec<usize>,
}

/// The kernel that runs a product.
pub(crate) enum Kernel {
    /// Manual MMA, with its operands.
    Mma(MmaOperands),
    /// WMMA through `cmma`, with the operand type and instruction K.
    Cmma(StorageType, usize),
    /// The tiled kernel on plain arithmetic units.
    Tiled,
}

impl Product {
    /// The product's shapes; panics, naming `op`, on shapes that don't multiply or broadcast.
    pub(crate) fn of<R: Runtime>(op: &str, lhs: &CubeTensor<R>, rhs: &CubeTensor<R>) -> Self {
        let (a, b) = (lhs.dims(), rhs.dims());
        if a.len() < 2 || b.len() < 2 || a[a.len() - 1] != b[b.len() - 2] {
            panic!("ex_cubecl: {op}: cannot multiply shapes {a:?} and {b:?} ({:?})", lhs.dtype);
        }
        let (m, k, n) = (a[a.len() - 2], a[a.len() - 1], b[b.len() - 1]);
        let batch = super::broadcast_dims(&a[..a.len() - 2], &b[..b.len() - 2]).unwrap_or_else(|| {
            panic!("ex_cubecl: {op}: cannot broadcast the batch dimensions of {a:?} and {b:?} ({:?})", lhs.dtype)
        });
        Self { m, k, n, batch }
    }

    fn with(&self, tail: [usize; 2]) -> Shape {
        Shape::from(self.batch.iter().copied().chain(tail).collect::<Vec<_>>())
    }

    /// The output's shape, `[batch.., M, N]`.
    pub(crate) fn out_shape(&self) -> Shape {
        self.with([self.m, self.n])
    }

    /// The number of matrices multiplied.
    pub(crate) fn batches(&self) -> usize {
        self.batch.iter().product()
    }

    /// The operands' views with the output's batch shape.
    pub(crate) fn views<R: Runtime>(&self, lhs: &CubeTensor<R>, rhs: &CubeTensor<R>) -> (Layout, Layout) {
        let lhs_view = lhs.layout.broadcast_to(&self.with([self.m, self.k])).expect("batch broadcast");
        (lhs_view, rhs.layout.broadcast_to(&self.with([self.k, self.n])).expect("batch broadcast"))
    }

    /// Large operands whose rows aren't contiguous, copied first: one pass over them costs far
    /// less than the product's strided, unvectorised loads.
    pub(crate) fn contiguous_rows<R: Runtime>(&self, lhs: CubeTensor<R>, rhs: CubeTensor<R>) -> (CubeTensor<R>, CubeTensor<R>) {
        (contiguous_rows(lhs, self.m * self.k), contiguous_rows(rhs, self.k * self.n))
    }

    /// Whether the product in f32 runs the tiled kernel whatever its operands' layouts: too
    /// small for tensor cores, or a device with neither TF32 MMA nor WMMA for f32.
    pub(crate) fn tiled_in_f32<R: Runtime>(&self, client: &ComputeClient<R>) -> bool {
        let tf32 = matmul_precision() == MatmulPrecision::Tf32;
        self.m < 16 || self.n < 16 || !((tf32 && has_mma(client, DType::F32, true)) || cmma_operand(client, DType::F32).is_some())
    }

    /// The kernel for operands of one dtype (`kernel` as [`matmul_with`] takes it).
    pub(crate) fn kernel<R: Runtime>(&self, lhs: &CubeTensor<R>, rhs: &CubeTensor<R>, kernel: Option<TensorCoreKernel>) -> Kernel {
        if self.m < 16 || self.n < 16 {
            return Kernel::Tiled;
        }
        let (lhs_view, rhs_view) = self.views(lhs, rhs);
        let mma = match kernel {
            Some(TensorCoreKernel::Wmma(_)) => None,
            _ => mma_operands(&lhs.client, lhs.dtype, &lhs_view, &rhs_view),
        };
        match (mma, cmma_operand(&lhs.client, lhs.dtype)) {
            (Some(operands), _) => Kernel::Mma(operands),
            (None, Some((operand, frag_k))) => Kernel::Cmma(operand, frag_k),
            (None, None) => Kernel::Tiled,
        }
    }
}

/// Operands of at least this many elements per matrix are made row-contiguous before the
/// product when their last dimension has a stride other than 1 (see
/// [`Product::contiguous_rows`]).
const COPY_THRESHOLD: usize = 1 << 16;

/// `t` itself, or a contiguous copy when its matrices are large and their rows strided.
fn contiguous_rows<R: Runtime>(t: CubeTensor<R>, matrix: usize) -> CubeTensor<R> {
    let last = t.layout.rank() - 1;
    if matrix >= COPY_THRESHOLD && t.layout.strides[last] != 1 && t.layout.shape[last] > 1 {
        into_contiguous(t)
    } else {
        t
    }
}

/// The matrix units' operand type and instruction K for `dtype`, when the device multiplies
/// it on matrix units (16 × 16 fragments, f32 accumulators, 32-unit planes) and the
/// precision setting allows it.
pub(crate) fn cmma_operand<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> Option<(StorageType, usize)> {
    let (operand, k) = match dtype {
        DType::F16 | DType::BF16 => (storage_type(dtype), 16),
        DType::F32 if matmul_precision() == MatmulPrecision::Tf32 => {
            (StorageType::Scalar(ElemType::Float(FloatKind::TF32)), 8)
        }
        _ => return None,
    };
    let hardware = &client.properties().hardware;
    if hardware.plane_size_min != 32 || hardware.plane_size_max != 32 {
        return None;
    }
    let config = MmaConfig {
        a_type: operand,
        b_type: operand,
        cd_type: storage_type(DType::F32),
        m: 16,
        n: 16,
        k: k as u32,
    };
    client.features().matmul.cmma.contains(&config).then_some((operand, k))
}

fn check_tiling(op: &str, t: CmmaTiling, frag_k: usize, dtype: DType) {
    let fits = t.warps_m > 0
        && t.warps_n > 0
        && t.block_m % (16 * t.warps_m) == 0
        && t.block_n % (16 * t.warps_n) == 0
        && t.block_k % frag_k == 0
        && t.block_k > 0
        && t.stages >= 2
        && (t.block_m * t.block_k) % (t.warps_m * t.warps_n * 32) == 0
        && (t.block_k * t.block_n) % (t.warps_m * t.warps_n * 32) == 0;
    if !fits {
        panic!("ex_cubecl: {op}: tiling {t:?} does not fit the tensor-core kernel for {dtype:?}");
    }
}

/// The widest vector (among the device's efficient sizes, at most `max`) in which `layout`
/// can be read along its last dimension (`inner`): that dimension contiguous, and the vector
/// size dividing its length, every other stride and the offset.
pub(crate) fn vector_size<R: Runtime>(client: &ComputeClient<R>, layout: &Layout, dtype: DType, max: usize) -> usize {
    let rank = layout.rank();
    let inner = layout.shape[rank - 1];
    if layout.strides[rank - 1] != 1 && inner > 1 {
        return 1;
    }
    client
        .io_optimized_vector_sizes(storage_type(dtype).size())
        .filter(|&v| v <= max)
        .find(|&v| {
            inner % v == 0
                && layout.offset % v == 0
                && layout.strides[..rank - 1].iter().zip(layout.shape.iter()).all(|(s, &d)| d == 1 || s % v == 0)
        })
        .unwrap_or(1)
}

#[allow(clippy::too_many_arguments)]
fn launch_cmma<R: Runtime>(
    op: &str,
    lhs: &CubeTensor<R>,
    rhs: &CubeTensor<R>,
    out: &CubeTensor<R>,
    (lhs_view, rhs_view): (&Layout, &Layout),
    batches: usize,
    t: CmmaTiling,
    operand: StorageType,
    frag_k: usize,
) {
    let dims = out.dims();
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let units = t.warps_m * t.warps_n * 32;
    // The staged slices must split evenly over the units, in whole vectors.
    let max_a = (t.block_m * t.block_k / units).min(8);
    let max_b = (t.block_k * t.block_n / units).min(8);
    let na = vector_size(&lhs.client, lhs_view, lhs.dtype, max_a);
    let nb = vector_size(&lhs.client, rhs_view, lhs.dtype, max_b);
    let no = vector_size(&lhs.client, &out.layout, out.dtype, 8);
    // 16 bytes of padding per shared-memory row, in operand elements.
    let pad = 16 / operand.size();
    let cubes = batches * m.div_ceil(t.block_m) * n.div_ceil(t.block_n);
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_1d(units as u32) };
    let elem = lhs.storage().size();
    // Asynchronous copies move 16-byte vectors; the stages (and the epilogue's staging, 1 KiB
    // per plane) must fit in shared memory.
    let stage_bytes = (t.block_m * (t.block_k + 16 / elem) + t.block_k * (t.block_n + 16 / elem)) * elem;
    let max_shared = lhs.client.properties().hardware.max_shared_memory_size;
    let stages = (2..=t.stages).rev().find(|s| s * stage_bytes + units * 32 <= max_shared);
    let (l, r, o, lv, rv) = (lhs.clone(), rhs.clone(), out.clone(), lhs_view.clone(), rhs_view.clone());
    match stages {
        Some(stages) if na * elem == 16 && nb * elem == 16 => {
            let pad = 16 / elem;
            launch(&lhs.client, op, geometry, move |client, count, dim| {
                // SAFETY: cubes past `cubes` leave before any access; copies of vectors
                // outside the matrices read nothing (length 0, zero-filled), the vector sizes
                // divide the dimensions, strides and offsets they step over, and stores are
                // guarded by m and n; shared-memory indices stay inside the stages.
                unsafe {
                    matmul_cmma_async::launch_unchecked::<R>(
                        client, count, dim, na, nb, no, l.view_arg(&lv),
                        r.view_arg(&rv), o.as_arg(), lv.offset, rv.offset,
                        cubes, t.block_m, t.block_n, t.block_k, t.warps_m, t.warps_n, frag_k, pad,
                        stages, [l.storage(), operand],
                    )
                }
            });
        }
        _ => launch(&lhs.client, op, geometry, move |client, count, dim| {
            // SAFETY: cubes past `cubes` leave before any access; global loads and stores are
            // guarded by m, n and k, and vector sizes divide the dimensions, strides and
            // offsets they step over (see `vector_size`); shared-memory indices stay inside
            // the tiles.
            unsafe {
                matmul_cmma::launch_unchecked::<R>(
                    client, count, dim, na, nb, no, l.view_arg(&lv),
                    r.view_arg(&rv), o.as_arg(), lv.offset, rv.offset, cubes,
                    t.block_m, t.block_n, t.block_k, t.warps_m, t.warps_n, frag_k, pad,
                    [l.storage(), operand],
                )
            }
        }),
    }
}

fn launch_tiled<R: Runtime>(
    op: &str,
    lhs: &CubeTensor<R>,
    rhs: &CubeTensor<R>,
    out: &CubeTensor<R>,
    (lhs_view, rhs_view): (&Layout, &Layout),
    batches: usize,
) {
    let t = TiledLaunch::of(lhs, (lhs_view, rhs_view), &out.dims(), batches);
    let (l, r, o, lv, rv) = (lhs.clone(), rhs.clone(), out.clone(), lhs_view.clone(), rhs_view.clone());
    launch(&lhs.client, op, t.geometry(), move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave before any access; loads are guarded by m, n and
        // k, and vector sizes divide the dimensions, strides and offsets they step over.
        unsafe {
            matmul_tiled::launch_unchecked::<R>(
                client, count, dim, t.na, t.nb, l.view_arg(&lv), r.view_arg(&rv),
                o.as_arg(), lv.offset, rv.offset, t.cubes, t.config, l.bf16_bits(), [l.storage(), accumulator(l.dtype)],
            )
        }
    });
}

/// How the tiled kernels (`matmul_tiled`, `fused_matmul`) run a product: the tiling, the
/// operands' vector sizes and the cubes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TiledLaunch {
    pub(crate) config: TiledConfig,
    pub(crate) na: usize,
    pub(crate) nb: usize,
    pub(crate) cubes: usize,
}

impl TiledLaunch {
    /// The launch for an output of shape `out` (`batches` matrices) from the operands' views.
    pub(crate) fn of<R: Runtime>(lhs: &CubeTensor<R>, (lhs_view, rhs_view): (&Layout, &Layout), out: &[usize], batches: usize) -> Self {
        let (m, n) = (out[out.len() - 2], out[out.len() - 1]);
        let t = if m > 64 && n > 64 { LARGE } else { SMALL };
        let units = (t.block_m / t.unit_m) * (t.block_n / t.unit_n);
        let max_a = (t.block_m * t.block_k / units).min(4);
        let max_b = (t.block_k * t.block_n / units).min(4);
        // Vulkan drivers compile the fully unrolled kernel slowly (seconds on lavapipe).
        let unroll_k = !R::name(&lhs.client).starts_with("wgpu");
        Self {
            config: TiledConfig { block_m: t.block_m, block_n: t.block_n, block_k: t.block_k, unit_m: t.unit_m, unit_n: t.unit_n, unroll_k },
            na: vector_size(&lhs.client, lhs_view, lhs.dtype, max_a),
            nb: vector_size(&lhs.client, rhs_view, lhs.dtype, max_b),
            cubes: batches * m.div_ceil(t.block_m) * n.div_ceil(t.block_n),
        }
    }

    /// One cube per output tile.
    pub(crate) fn geometry(&self) -> Geometry {
        let units = (self.config.block_m / self.config.unit_m) * (self.config.block_n / self.config.unit_n);
        Geometry::Cubes { count: self.cubes, dim: CubeDim::new_1d(units as u32) }
    }
}
