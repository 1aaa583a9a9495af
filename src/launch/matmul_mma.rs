//! The matmul on manual MMA (`ex_cubecl_kernels::matmul::mma`): which products it runs, its
//! tilings and its launch.
//!
//! It runs f16 and bf16 products where the device has `mma.sync` m16n8k16 and `ldmatrix` for
//! the dtype (CUDA on Ampere and later), and f32 products under the TF32 precision setting
//! where it has `mma.sync` m16n8k8 for TF32, when each operand can be read in 16-byte chunks
//! along one of its two matrix dimensions, whichever is contiguous (so a transposed operand is
//! read as it lies). Other tensor-core products run the WMMA kernel of `matmul::cmma`.
use burn_backend::DType;
use cubecl::Runtime;
use cubecl::features::MmaConfig;
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::prelude::{ComputeClient, CubeDim};
use ex_cubecl_kernels::matmul::mma::{MmaTile, matmul_mma};

use super::copy::into_contiguous;
use super::matmul::{CmmaTiling, MatmulPrecision, matmul_precision};
use super::view::swap_dims;
use crate::runtime::{Geometry, Layout, launch, storage_type};
use crate::tensor::CubeTensor;

/// The tiling of products with at least 128 rows and columns: 2 × 2 planes of 64 × 64
/// outputs, K slices of 64 (128-byte rows of a K-major operand), 3 stages (96 KiB, two cubes
/// per multiprocessor). On an H100 at 4096³ it ran 0.44-0.62 ms (f16 and bf16 alike) where
/// 128 × 256 tiles on 8 planes and K slices of 32 ran 0.59-0.67 ms; see `benches/RESULTS.md`.
pub const MMA_TILING: CmmaTiling = CmmaTiling { block_m: 128, block_n: 128, block_k: 64, warps_m: 2, warps_n: 2, stages: 3 };
/// The tiling of smaller products.
pub const MMA_TILING_SMALL: CmmaTiling = CmmaTiling { block_m: 64, block_n: 64, block_k: 32, warps_m: 2, warps_n: 2, stages: 4 };
/// The tiling of f32 (TF32) products with at least 128 rows and columns: 256 × 128 tiles on
/// 4 × 2 planes, K slices of 32 (128-byte rows of a K-major operand), 3 stages (144 KiB, one
/// cube per multiprocessor). On an H100 at 4096³ it ran 1.58 ms where 128 × 128 tiles on 2 × 2
/// planes ran 2.04 ms (same session), and 1.51 against 1.68 ms in another.
pub const MMA_TILING_TF32: CmmaTiling = CmmaTiling { block_m: 256, block_n: 128, block_k: 32, warps_m: 4, warps_n: 2, stages: 3 };

/// How the manual-MMA kernel reads the operands of a product it can run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MmaOperands {
    lhs_k_major: bool,
    rhs_k_major: bool,
    /// f32 operands multiplied as TF32.
    tf32: bool,
}

impl MmaOperands {
    /// Elements of a 16-byte chunk.
    fn chunk(&self) -> usize {
        if self.tf32 { 4 } else { 8 }
    }
}

/// The operand layouts for the manual-MMA kernel, or `None` where it can't run the product.
pub(crate) fn mma_operands<R: Runtime>(
    client: &ComputeClient<R>,
    dtype: DType,
    lhs: &Layout,
    rhs: &Layout,
) -> Option<MmaOperands> {
    let tf32 = match dtype {
        DType::F16 | DType::BF16 => false,
        DType::F32 if matmul_precision() == MatmulPrecision::Tf32 => true,
        _ => return None,
    };
    if !has_mma(client, dtype, tf32) {
        return None;
    }
    let chunk = if tf32 { 4 } else { 8 };
    let rank = lhs.rank();
    let (inner, outer) = (rank - 1, rank - 2);
    let lhs_k_major = [(inner, true), (outer, false)].into_iter().find(|&(d, _)| chunked(lhs, d, chunk))?.1;
    let rhs_k_major = [(inner, false), (outer, true)].into_iter().find(|&(d, _)| chunked(rhs, d, chunk))?.1;
    Some(MmaOperands { lhs_k_major, rhs_k_major, tf32 })
}

/// Whether the device runs `mma.sync` on `dtype`'s fragments (m16n8k16 for f16 / bf16, with
/// `ldmatrix`; m16n8k8 on TF32 for f32 when `tf32`), f32 accumulators, on 32-unit planes.
pub(crate) fn has_mma<R: Runtime>(client: &ComputeClient<R>, dtype: DType, tf32: bool) -> bool {
    let hardware = &client.properties().hardware;
    if hardware.plane_size_min != 32 || hardware.plane_size_max != 32 {
        return false;
    }
    let operand = fragment_type(dtype, tf32);
    let k = if tf32 { 8 } else { 16 };
    let config = MmaConfig { a_type: operand, b_type: operand, cd_type: storage_type(DType::F32), m: 16, n: 8, k };
    let features = &client.features().matmul;
    features.mma.contains(&config) && (tf32 || features.ldmatrix.contains(&operand))
}

/// Products of at least this many multiply-adds in all (`batches * m * n * k`) whose operands
/// the TF32 kernel would read element by element (`lhs` M-major, `rhs` N-major) copy those
/// operands K-major first: on an H100 at 4096³ the product ran 1.79 ms with `rhs` N-major and
/// 1.32 ms with it K-major (same session), and the copy moves 128 MB (about 0.1 ms). Smaller
/// products keep their operands: there the copy's launch costs more than it saves. A batch
/// counts whole: 64 products of 512³ are as much work as one of 2048³.
const TF32_COPY_WORK: usize = 1 << 31;

/// `lhs` and `rhs` (`[.., m, k]` and `[.., k, n]`) for the TF32 kernel: in large products,
/// operands read element by element are copied so that K is contiguous (when K divides into chunks), with the
/// operand layouts updated. f16 / bf16 operands, read by `ldmatrix` either way, are left.
pub(crate) fn tf32_k_major<R: Runtime>(
    lhs: CubeTensor<R>,
    rhs: CubeTensor<R>,
    operands: MmaOperands,
) -> (CubeTensor<R>, CubeTensor<R>, MmaOperands) {
    let rank = lhs.layout.rank();
    let (m, k) = (lhs.dims()[rank - 2], lhs.dims()[rank - 1]);
    let n = rhs.dims()[rhs.layout.rank() - 1];
    if !operands.tf32 || k % operands.chunk() != 0 {
        return (lhs, rhs, operands);
    }
    let batches: usize = lhs.dims()[..rank - 2].iter().product();
    let large = batches * m * n * k >= TF32_COPY_WORK;
    let copy_lhs = large && !operands.lhs_k_major;
    let copy_rhs = large && !operands.rhs_k_major;
    let lhs = if copy_lhs { into_contiguous(lhs) } else { lhs };
    let rhs = if copy_rhs { k_contiguous(rhs) } else { rhs };
    let operands = MmaOperands {
        lhs_k_major: operands.lhs_k_major || copy_lhs,
        rhs_k_major: operands.rhs_k_major || copy_rhs,
        tf32: true,
    };
    (lhs, rhs, operands)
}

/// `[.., k, n]` with a contiguous copy of its transpose behind it (K contiguous); a view.
fn k_contiguous<R: Runtime>(t: CubeTensor<R>) -> CubeTensor<R> {
    let rank = t.layout.rank();
    swap_dims(into_contiguous(swap_dims(t, rank - 2, rank - 1)), rank - 2, rank - 1)
}

/// The fragments' element type: the dtype's own, or TF32 for f32.
pub(crate) fn fragment_type(dtype: DType, tf32: bool) -> StorageType {
    match tf32 {
        true => StorageType::Scalar(ElemType::Float(FloatKind::TF32)),
        false => storage_type(dtype),
    }
}

/// Whether `layout` can be read in chunks of `chunk` elements along `dim`: contiguous there,
/// and the chunk dividing that dimension's length, the offset and every other stride that is
/// stepped.
pub(crate) fn chunked(layout: &Layout, dim: usize, chunk: usize) -> bool {
    let steps = layout.strides.iter().zip(layout.shape.iter()).enumerate();
    layout.strides[dim] == 1
        && layout.shape[dim] % chunk == 0
        && layout.offset % chunk == 0
        && steps.filter(|&(d, _)| d != dim).all(|(_, (s, &len))| len == 1 || s % chunk == 0)
}

/// The default tiling for an `m` × `n` output of `dtype`.
pub(crate) fn mma_tiling(m: usize, n: usize, dtype: DType) -> CmmaTiling {
    match (m >= 128 && n >= 128, dtype) {
        (true, DType::F32) if m >= 256 => MMA_TILING_TF32,
        (true, DType::F16 | DType::BF16) => MMA_TILING,
        _ => MMA_TILING_SMALL,
    }
}

/// Launches the manual-MMA kernel for `out = lhs @ rhs` (views already broadcast to the
/// output's batch shape).
///
/// # Panics
/// On a tiling the kernel can't take (sizes not powers of two, planes not dividing the tile
/// into 16 × 16 parts, K slices not a multiple of 16, staged chunks not dividing evenly over
/// the units, TF32 slices with rows under 8 chunks, or not even two stages fitting in shared
/// memory).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_mma<R: Runtime>(
    op: &str,
    lhs: &CubeTensor<R>,
    rhs: &CubeTensor<R>,
    out: &CubeTensor<R>,
    (lhs_view, rhs_view): (&Layout, &Layout),
    batches: usize,
    t: CmmaTiling,
    operands: MmaOperands,
) {
    let dims = out.dims();
    let (m, n) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let units = t.warps_m * t.warps_n * 32;
    let chunk = operands.chunk();
    let (chunks_a, chunks_b) = (t.block_m * t.block_k / chunk, t.block_k * t.block_n / chunk);
    let max_shared = lhs.client.properties().hardware.max_shared_memory_size;
    let stages = (2..=t.stages).rev().find(|s| s * (chunks_a + chunks_b) * 16 <= max_shared);
    let fits = [t.block_m, t.block_n, t.block_k].iter().all(|s| s.is_power_of_two())
        && t.warps_m > 0
        && t.warps_n > 0
        && t.block_m % (16 * t.warps_m) == 0
        && t.block_n % (16 * t.warps_n) == 0
        && t.block_k % 16 == 0
        && chunks_a % units == 0
        && chunks_b % units == 0
        // TF32 fragment loads are conflict-free with 8 chunks or more per staged row.
        && (!operands.tf32 || [t.block_m, t.block_n, t.block_k].iter().all(|&s| s >= 8 * chunk));
    let (Some(stages), true) = (stages, fits) else {
        panic!("ex_cubecl: {op}: tiling {t:?} does not fit the manual-MMA kernel for {:?}", lhs.dtype);
    };
    let tile = MmaTile {
        block_m: t.block_m,
        block_n: t.block_n,
        block_k: t.block_k,
        warps_m: t.warps_m,
        warps_n: t.warps_n,
        stages,
        lhs_k_major: operands.lhs_k_major,
        rhs_k_major: operands.rhs_k_major,
        tf32: operands.tf32,
    };
    let dtypes = [lhs.storage(), fragment_type(lhs.dtype, operands.tf32)];
    let no = if n % 2 == 0 { 2 } else { 1 };
    let cubes = batches * m.div_ceil(t.block_m) * n.div_ceil(t.block_n);
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_1d(units as u32) };
    let (l, r, o, lv, rv) = (lhs.clone(), rhs.clone(), out.clone(), lhs_view.clone(), rhs_view.clone());
    launch(&lhs.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave before any access; `mma_operands` checked that each
        // operand is read in whole chunks inside its buffer (chunks outside the matrices read
        // nothing and are zero-filled); stores are guarded by m and n and `no` divides n;
        // shared-memory indices stay inside the stages.
        unsafe {
            matmul_mma::launch_unchecked::<R>(
                client, count, dim, chunk, no, l.view_arg(&lv), r.view_arg(&rv), o.as_arg(), lv.offset,
                rv.offset, cubes, tile, dtypes,
            )
        }
    });
}
