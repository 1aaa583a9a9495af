//! The f16 / bf16 matmul on manual MMA (`ex_cubecl_kernels::matmul::mma`): which products it
//! runs, its tilings and its launch.
//!
//! It runs where the device has `mma.sync` m16n8k16 and `ldmatrix` for the dtype (CUDA on
//! Ampere and later) and each operand can be read in 16-byte chunks along one of its two
//! matrix dimensions, whichever is contiguous (so a transposed operand is read as it lies).
//! Other f16 / bf16 products run the WMMA kernel of `matmul::cmma`.
use burn_backend::DType;
use cubecl::Runtime;
use cubecl::features::MmaConfig;
use cubecl::prelude::{ComputeClient, CubeDim};
use ex_cubecl_kernels::matmul::mma::{MmaTile, matmul_mma};

use super::matmul::CmmaTiling;
use crate::runtime::{Geometry, Layout, launch, storage_type};
use crate::tensor::CubeTensor;

/// Elements of a 16-byte chunk of the operands.
const CHUNK: usize = 8;

/// The tiling of products with at least 128 rows and columns: 2 × 2 planes of 64 × 64
/// outputs, K slices of 64 (128-byte rows of a K-major operand), 3 stages (96 KiB, two cubes
/// per multiprocessor). On an H100 at 4096³ it ran 0.44-0.62 ms (f16 and bf16 alike) where
/// 128 × 256 tiles on 8 planes and K slices of 32 ran 0.59-0.67 ms; see the README.
pub const MMA_TILING: CmmaTiling = CmmaTiling { block_m: 128, block_n: 128, block_k: 64, warps_m: 2, warps_n: 2, stages: 3 };
/// The tiling of smaller products.
pub const MMA_TILING_SMALL: CmmaTiling = CmmaTiling { block_m: 64, block_n: 64, block_k: 32, warps_m: 2, warps_n: 2, stages: 4 };

/// How the manual-MMA kernel reads the operands of a product it can run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MmaOperands {
    lhs_k_major: bool,
    rhs_k_major: bool,
}

/// The operand layouts for the manual-MMA kernel, or `None` where it can't run the product.
pub(crate) fn mma_operands<R: Runtime>(
    client: &ComputeClient<R>,
    dtype: DType,
    lhs: &Layout,
    rhs: &Layout,
) -> Option<MmaOperands> {
    if !matches!(dtype, DType::F16 | DType::BF16) {
        return None;
    }
    let hardware = &client.properties().hardware;
    if hardware.plane_size_min != 32 || hardware.plane_size_max != 32 {
        return None;
    }
    let operand = storage_type(dtype);
    let config = MmaConfig { a_type: operand, b_type: operand, cd_type: storage_type(DType::F32), m: 16, n: 8, k: 16 };
    let features = &client.features().matmul;
    if !features.mma.contains(&config) || !features.ldmatrix.contains(&operand) {
        return None;
    }
    let rank = lhs.rank();
    let (inner, outer) = (rank - 1, rank - 2);
    let lhs_k_major = [(inner, true), (outer, false)].into_iter().find(|&(d, _)| chunked(lhs, d))?.1;
    let rhs_k_major = [(inner, false), (outer, true)].into_iter().find(|&(d, _)| chunked(rhs, d))?.1;
    Some(MmaOperands { lhs_k_major, rhs_k_major })
}

/// Whether `layout` can be read in chunks along `dim`: contiguous there, and the chunk
/// dividing that dimension's length, the offset and every other stride that is stepped.
fn chunked(layout: &Layout, dim: usize) -> bool {
    let steps = layout.strides.iter().zip(layout.shape.iter()).enumerate();
    layout.strides[dim] == 1
        && layout.shape[dim] % CHUNK == 0
        && layout.offset % CHUNK == 0
        && steps.filter(|&(d, _)| d != dim).all(|(_, (s, &len))| len == 1 || s % CHUNK == 0)
}

/// The default tiling for an `m` × `n` output.
pub(crate) fn mma_tiling(m: usize, n: usize) -> CmmaTiling {
    if m >= 128 && n >= 128 { MMA_TILING } else { MMA_TILING_SMALL }
}

/// Launches the manual-MMA kernel for `out = lhs @ rhs` (views already broadcast to the
/// output's batch shape).
///
/// # Panics
/// On a tiling the kernel can't take (sizes not powers of two, planes not dividing the tile
/// into 16 × 16 parts, K slices not a multiple of 16, staged chunks not dividing evenly over
/// the units, or not even two stages fitting in shared memory).
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
    let (chunks_a, chunks_b) = (t.block_m * t.block_k / CHUNK, t.block_k * t.block_n / CHUNK);
    let max_shared = lhs.client.properties().hardware.max_shared_memory_size;
    let stages = (2..=t.stages).rev().find(|s| s * (chunks_a + chunks_b) * 16 <= max_shared);
    let fits = [t.block_m, t.block_n, t.block_k].iter().all(|s| s.is_power_of_two())
        && t.warps_m > 0
        && t.warps_n > 0
        && t.block_m % (16 * t.warps_m) == 0
        && t.block_n % (16 * t.warps_n) == 0
        && t.block_k % 16 == 0
        && chunks_a % units == 0
        && chunks_b % units == 0;
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
    };
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
                client, count, dim, CHUNK, no, l.view_arg(&lv), r.view_arg(&rv), o.as_arg(), lv.offset,
                rv.offset, cubes, tile, l.storage(),
            )
        }
    });
}
