//! The matmul on manual MMA (`ex_cubecl_kernels::matmul::mma`): which products it runs, its
//! tilings and its launch.
//!
//! It runs f16 and bf16 products where the device has `mma.sync` m16n8k16 and `ldmatrix` for
//! the dtype (CUDA on Ampere and later), and f32 products under the TF32 precision setting
//! where it has `mma.sync` m16n8k8 for TF32, when each operand can be read in 16-byte chunks
//! along one of its two matrix dimensions, whichever is contiguous (so a transposed operand is
//! read as it lies). Other tensor-core products run the WMMA kernel of `matmul::cmma`.
//!
//! On devices with the Tensor Memory Accelerator (CUDA, compute capability 9.0 and later),
//! f16 and bf16 products on tilings with K slices of 64 and tiles of 64 to 256 rows and
//! columns run `matmul::tma` instead, its operands loaded through tensor maps, when each
//! operand's matrices start at its buffer's start and lie as a tensor map can describe them
//! (see `tma_layout`). `EX_CUBECL_TMA=0` keeps every product on the asynchronous copies. On an
//! H200 at 4096³ the TMA kernel ran the f16 row in 0.375 ms and bf16 in 0.363 (366 and 378
//! TFLOP/s, op + sync) where the copies ran 0.460 and 0.445, same call; Nsight Compute timed
//! the f16 kernel alone at 0.308 ms (447 TFLOP/s, SM clock 1.66 GHz).
//!
//! A product whose output tiles fill less than a wave splits its K, on either kernel
//! (`super::split_k`).
use burn_backend::DType;
use cubecl::Runtime;
use std::sync::OnceLock;

use burn_backend::Shape;
use cubecl::features::{MmaConfig, Tma};
use cubecl::ir::{ElemType, FloatKind, StorageType};
use cubecl::prelude::{ComputeClient, CubeDim, TensorMapArg, TensorMapSwizzle, Tiled, TiledArgs};
use cubecl::zspace::Shape as ZShape;
use ex_cubecl_kernels::matmul::mma::{MmaTile, matmul_mma};
use ex_cubecl_kernels::matmul::tma::{box_rows, matmul_mma_tma};
use ex_cubecl_kernels::tensor_core::BOX_INNER;

use super::copy::into_contiguous;
use super::matmul::{CmmaTiling, MatmulPrecision, matmul_precision};
use super::split_k::{SplitK, launch_split_sum, partials, plan};
use super::view::swap_dims;
use crate::runtime::{Geometry, Layout, elem_size, launch, storage_type};
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
/// output's batch shape): split-K into f32 partials and their sum where [`plan`] splits it.
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
    let no = if n % 2 == 0 { 2 } else { 1 };
    let tiles = batches * m.div_ceil(t.block_m) * n.div_ceil(t.block_n);
    let k = lhs_view.shape[lhs_view.rank() - 1];
    let split = plan(lhs, tiles, k.div_ceil(t.block_k), t.block_k);
    // Split: f32 partials `[splits, out's shape..]`, summed into `out` afterwards.
    let target = if split.splits == 1 { out.clone() } else { partials(lhs, split.splits, out.dims()) };
    let cubes = split.splits * tiles;
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_1d(units as u32) };
    match tma_maps(lhs, (lhs_view, rhs_view), tile, max_shared) {
        Some(maps) => launch_tma(op, lhs, rhs, &target, maps, tile, no, (tiles, split), geometry),
        None => {
            let dtypes = [lhs.storage(), fragment_type(lhs.dtype, operands.tf32), target.storage()];
            let (l, r, o, lv, rv) = (lhs.clone(), rhs.clone(), target.clone(), lhs_view.clone(), rhs_view.clone());
            launch(&lhs.client, op, geometry, move |client, count, dim| {
                // SAFETY: cubes past `cubes` leave before any access; `mma_operands` checked that
                // each operand is read in whole chunks inside its buffer (chunks outside the
                // matrices read nothing and are zero-filled); stores are guarded by m and n, each
                // split's inside its copy of the output, and `no` divides n; every split starts
                // before K's last slice (`SplitK::even`); shared-memory indices stay inside the
                // stages.
                unsafe {
                    matmul_mma::launch_unchecked::<R>(
                        client, count, dim, chunk, no, l.view_arg(&lv), r.view_arg(&rv), o.as_arg(), lv.offset,
                        rv.offset, tiles, split.len, cubes, tile, dtypes,
                    )
                }
            });
        }
    }
    if split.splits > 1 && out.num_elements() > 0 {
        launch_split_sum(op, &target, split.splits, out, None, n, 1, no);
    }
}

/// Whether products may load their operands by TMA: unless `EX_CUBECL_TMA` is `0` (read once).
fn tma_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| !std::env::var("EX_CUBECL_TMA").is_ok_and(|v| v == "0"))
}

/// Whether kernels may load their operands by TMA on `client`'s device: it has TMA and
/// `EX_CUBECL_TMA` isn't `0`.
#[doc(hidden)]
pub fn tma_available<R: Runtime>(client: &ComputeClient<R>) -> bool {
    tma_enabled() && client.features().tma.contains(Tma::Base)
}

/// The tensor maps' layouts of a product's operands for `matmul::tma` (each with whether it has
/// a batch dimension), or `None` where that kernel can't run it: no TMA on the device, TF32,
/// a tiling other than K slices of [`BOX_INNER`] with 64 to 256 rows and columns, not even
/// two stages fitting, or an operand `tma_layout` refuses.
fn tma_maps<R: Runtime>(
    lhs: &CubeTensor<R>,
    (lhs_view, rhs_view): (&Layout, &Layout),
    tile: MmaTile,
    max_shared: usize,
) -> Option<((Layout, bool), (Layout, bool))> {
    let tiled = |s: usize| s % BOX_INNER == 0 && s <= 256;
    let stage_bytes = (tile.stage_a() + tile.stage_b()) * 16;
    // The stages, their 1024-byte alignment and the barriers.
    let fits = tile.stages * stage_bytes + 1024 <= max_shared;
    let usable = tma_available(&lhs.client)
        && !tile.tf32
        && tile.block_k == BOX_INNER
        && tiled(tile.block_m)
        && tiled(tile.block_n)
        && fits;
    if !usable {
        return None;
    }
    let elem = elem_size(lhs.dtype);
    let r = lhs_view.rank();
    // lhs is [.., M, K] and rhs [.., K, N]: dimension r - 2 then r - 1.
    let (rows, cols) = (r - 2, r - 1);
    let a = if tile.lhs_k_major { tma_layout(lhs_view, rows, cols, elem) } else { tma_layout(lhs_view, cols, rows, elem) }?;
    let b = if tile.rhs_k_major { tma_layout(rhs_view, cols, rows, elem) } else { tma_layout(rhs_view, rows, cols, elem) }?;
    Some((a, b))
}

/// `view` (`[batch.., .., ..]`) as a tensor map sees it: `[rows, elements]` with `outer` the
/// rows' dimension and `inner` the contiguous one, behind one batch dimension when the view's
/// batch dimensions step (then their strides must collapse into one: each the next one's
/// stride times its size). `None` when the view starts past its buffer's start, is not
/// contiguous along `inner`, broadcasts some batch dimensions but not all, has strides a
/// tensor map can't take (a multiple of 16 bytes, each at least the span of the dimensions
/// inside it) or an empty dimension.
pub(crate) fn tma_layout(view: &Layout, outer: usize, inner: usize, elem: usize) -> Option<(Layout, bool)> {
    let rank = view.rank();
    if view.offset != 0 || view.strides[inner] != 1 {
        return None;
    }
    let stepped: Vec<(usize, usize)> = (0..rank - 2).filter(|&d| view.shape[d] > 1).map(|d| (view.shape[d], view.strides[d])).collect();
    let batched = stepped.iter().any(|&(_, s)| s != 0);
    let mut shape = Vec::with_capacity(3);
    let mut strides = Vec::with_capacity(3);
    if batched {
        let collapses = stepped.windows(2).all(|w| w[0].1 == w[1].0 * w[1].1);
        if stepped.iter().any(|&(_, s)| s == 0) || !collapses {
            return None;
        }
        shape.push(stepped.iter().map(|&(n, _)| n).product());
        strides.push(stepped[stepped.len() - 1].1);
    }
    shape.extend([view.shape[outer], view.shape[inner]]);
    strides.extend([view.strides[outer], 1]);
    let nested = (1..shape.len()).all(|d| strides[d - 1] >= shape[d] * strides[d]);
    let aligned = strides[..strides.len() - 1].iter().all(|&s| (s * elem) % 16 == 0);
    let sized = shape.iter().all(|&d| d > 0 && d <= u32::MAX as usize);
    (nested && aligned && sized).then(|| (Layout { shape: Shape::from(shape), strides, offset: 0 }, batched))
}

/// Launches `matmul::tma` for `out = lhs @ rhs` on the operands' tensor-map layouts (from
/// `tma_maps`), `tiles` cubes per split of `split` (`out` then holds the splits' partials).
#[allow(clippy::too_many_arguments)]
fn launch_tma<R: Runtime>(
    op: &str,
    lhs: &CubeTensor<R>,
    rhs: &CubeTensor<R>,
    out: &CubeTensor<R>,
    ((lhs_map, lhs_batched), (rhs_map, rhs_batched)): ((Layout, bool), (Layout, bool)),
    tile: MmaTile,
    no: usize,
    (tiles, split): (usize, SplitK),
    geometry: Geometry,
) {
    let cubes = tiles * split.splits;
    let k = lhs.dims()[lhs.layout.rank() - 1];
    let (storage, out_storage) = (lhs.storage(), out.storage());
    // Boxes of [rows, BOX_INNER] elements, a batch of one in front for a batched map.
    let boxes = |map: &Layout, k_major: bool, mn: usize| {
        let mut size = vec![box_rows(k_major, mn, tile.block_k), BOX_INNER];
        if map.rank() == 3 {
            size.insert(0, 1);
        }
        TiledArgs { tile_size: ZShape::from(size) }
    };
    let (a_box, b_box) = (boxes(&lhs_map, tile.lhs_k_major, tile.block_m), boxes(&rhs_map, tile.rhs_k_major, tile.block_n));
    let (l, r, o) = (lhs.clone(), rhs.clone(), out.clone());
    launch(&lhs.client, op, geometry, move |client, count, dim| {
        let map = |t: &CubeTensor<R>, layout: &Layout, args: &TiledArgs| {
            TensorMapArg::<R, Tiled>::new(args.clone(), t.view_arg(layout), storage).with_swizzle(TensorMapSwizzle::B128)
        };
        // SAFETY: cubes past `cubes` leave before any access; the tensor maps describe each
        // operand inside its buffer (`tma_layout`), and TMA fills what lies past the matrices
        // with zeros; stores are guarded by m and n, each split's inside its copy of the
        // output, and `no` divides n; every split starts before K's last slice
        // (`SplitK::even`); shared-memory indices stay inside the stages.
        unsafe {
            matmul_mma_tma::launch_unchecked::<R>(
                client, count, dim, 8, no, map(&l, &lhs_map, &a_box), map(&r, &rhs_map, &b_box), o.as_arg(), k, tiles,
                split.len, cubes, tile, lhs_batched, rhs_batched, [storage, out_storage],
            )
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(shape: &[usize], strides: &[usize], offset: usize) -> Layout {
        Layout { shape: Shape::from(shape.to_vec()), strides: strides.to_vec(), offset }
    }

    #[test]
    fn tma_layout_collapses_batches_and_refuses_what_a_tensor_map_cannot_describe() {
        // [2, 3, 40, 64] f16, contiguous: one batch dimension of 6, K-major rows of 64.
        let (map, batched) = tma_layout(&layout(&[2, 3, 40, 64], &[7680, 2560, 64, 1], 0), 2, 3, 2).expect("contiguous");
        assert!(batched);
        assert_eq!((map.shape.as_slice().to_vec(), map.strides.clone()), (vec![6, 40, 64], vec![2560, 64, 1]));
        // The same matrix seen M-major ([K, M] rows of M).
        let (map, _) = tma_layout(&layout(&[40, 64], &[1, 40], 0), 1, 0, 2).expect("transposed");
        assert_eq!((map.shape.as_slice().to_vec(), map.strides.clone()), (vec![64, 40], vec![40, 1]));
        // Every batch dimension broadcast: one matrix, no batch dimension.
        let (map, batched) = tma_layout(&layout(&[4, 40, 64], &[0, 64, 1], 0), 1, 2, 2).expect("broadcast");
        assert!(!batched);
        assert_eq!(map.shape.as_slice().to_vec(), vec![40, 64]);
        // Refused: an offset, a broadcast beside a stepped batch dimension, batch strides that
        // don't collapse, rows not a multiple of 16 bytes, a non-contiguous inner dimension, an
        // empty dimension.
        assert!(tma_layout(&layout(&[40, 64], &[64, 1], 64), 0, 1, 2).is_none());
        assert!(tma_layout(&layout(&[2, 3, 40, 64], &[2560, 0, 64, 1], 0), 2, 3, 2).is_none());
        assert!(tma_layout(&layout(&[2, 3, 40, 64], &[2560, 7680, 64, 1], 0), 2, 3, 2).is_none());
        assert!(tma_layout(&layout(&[40, 60], &[60, 1], 0), 0, 1, 2).is_none());
        assert!(tma_layout(&layout(&[40, 64], &[128, 2], 0), 0, 1, 2).is_none());
        assert!(tma_layout(&layout(&[0, 64], &[64, 1], 0), 0, 1, 2).is_none());
    }
}
