//! The convolutions on manual MMA (`ex_cubecl_kernels::conv_mma`): which ones run there, their
//! tiling and their launch.
//!
//! A convolution (or a transposed one: a convolution's input gradient) and a weight gradient
//! run there in f16 or bf16, or in f32 under the TF32 precision, on a device with `mma.sync`
//! for the fragments (CUDA on Ampere and later), when each group has at least 16 output
//! channels and its staged channels come in whole 16-byte chunks (8 of f16 or bf16, 4 of
//! f32). The tensors are read channels-last: a contiguous `[b, d, h, w, c]` copy unless they
//! already lie so. A convolution whose output tiles fill less than a wave splits its K
//! (`super::split_k`). On devices with TMA, f16 and bf16 convolutions whose groups have a
//! multiple of 64 input channels load their operands by TMA instead (`super::conv_tma`).
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::conv_cmma::ConvKernelLaunch;
use ex_cubecl_kernels::conv_mma::{TapDivisorsLaunch, conv_mma};
use ex_cubecl_kernels::conv_weight_mma::{PixelDivisorsLaunch, conv_weight_mma};
use ex_cubecl_kernels::matmul::mma::MmaTile;

use super::conv::{ConvSpec, ConvTiling, lift, weight_rows};
use super::conv_tma::{ConvTmaGeometry, conv_tma_tiling, im2col_map, launch_conv_tma};
use super::conv_weight::{partial_dtype, split_pixels};
use super::copy::into_contiguous;
use super::matmul::{MatmulPrecision, matmul_precision};
use super::matmul_mma::{fragment_type, has_mma};
use super::split_k::{launch_split_sum, plan};
use crate::runtime::{Geometry, elem_size, launch};
use crate::tensor::CubeTensor;

/// Whether the manual-MMA kernels run a convolution (or its weight gradient) of `x`'s dtype
/// whose staged channel counts per group are `chunked` (each a multiple of the chunk), with
/// `rows` output rows per group (channels; at least 16) and a non-empty reduction;
/// `Some(tf32)` where they do.
pub(crate) fn conv_mma_runs<R: Runtime>(x: &CubeTensor<R>, chunked: &[usize], rows: usize, reduction: usize) -> Option<bool> {
    let tf32 = match x.dtype {
        DType::F16 | DType::BF16 => false,
        DType::F32 if matmul_precision() == MatmulPrecision::Tf32 => true,
        _ => return None,
    };
    let chunk = if tf32 { 4 } else { 8 };
    let fits = rows >= 16 && reduction > 0 && chunked.iter().all(|c| c % chunk == 0);
    (fits && has_mma(&x.client, x.dtype, tf32)).then_some(tf32)
}

/// The default tiling for `cout_g` output channels per group: 128 pixels per cube on four
/// planes, as many channels as the group has (32 to 128), K slices of 32 (64 bytes of f16,
/// 128 of f32: TF32 reads want 8 chunks per staged row). On an H200, for [64, 64, 56, 56] x
/// [64, 64, 3, 3] in one process, f16: 0.185 ms with K slices of 32 against 0.187-0.192 with
/// 64 and the other tilings of the bench's `--tune`; f32 (TF32): 0.528 against 0.549-0.587.
pub fn conv_mma_tiling(cout_g: usize) -> ConvTiling {
    let (block_co, warps_co, warps_pix) = match cout_g {
        65.. => (128, 2, 2),
        33.. => (64, 2, 2),
        _ => (32, 1, 4),
    };
    ConvTiling { block_co, block_pix: 128, block_k: 32, warps_co, warps_pix }
}

/// The default tiling of the weight gradient (`block_co` outer channels, `block_pix` weight
/// columns, `block_k` pixels per slice) for `outer_g` outer channels per group. On an H200, for
/// the [64, 64, 56, 56] x [64, 64, 3, 3] convolution's f16 gradient in one process: 0.234 ms
/// with 64 × 64 tiles and slices of 64 against 0.246-0.257 with other plane shapes or slices
/// of 32, and 0.43 with 128 columns or slices of 128.
pub fn weight_mma_tiling(tf32: bool, outer_g: usize) -> ConvTiling {
    let block_k = if tf32 { 32 } else { 64 };
    let (block_co, warps_co, warps_pix) = if outer_g > 32 { (64, 2, 2) } else { (32, 1, 4) };
    ConvTiling { block_co, block_pix: 64, block_k, warps_co, warps_pix }
}

/// The kernels' comptime tile for `t` (`block_co` the product's M, `block_pix` its N), both
/// operands K-major (the convolution) or neither (the weight gradient): up to three stages, as
/// many as fit in shared memory.
///
/// # Panics
/// On a tiling the kernel can't take (see `matmul_mma::launch_mma`; the cube's units must
/// also be a multiple of the chunks per row of the gathered operand).
fn mma_tile<R: Runtime>(op: &str, x: &CubeTensor<R>, t: ConvTiling, tf32: bool, k_major: bool) -> MmaTile {
    let chunk = if tf32 { 4 } else { 8 };
    let units = t.warps_co * t.warps_pix * 32;
    let chunks_a = t.block_co * t.block_k / chunk;
    let chunks_b = t.block_pix * t.block_k / chunk;
    // Chunks per staged row of the gathered operand, and whether TF32 reads find 8 chunks or
    // more per staged row.
    let (gather_cpr, tf32_fits) = match k_major {
        true => (t.block_k / chunk, t.block_k >= 8 * chunk),
        false => (t.block_pix / chunk, [t.block_co, t.block_pix, t.block_k].iter().all(|&s| s >= 8 * chunk)),
    };
    let max_shared = x.client.properties().hardware.max_shared_memory_size;
    let stages = (2..=3).rev().find(|s| s * (chunks_a + chunks_b) * 16 <= max_shared);
    let fits = [t.block_co, t.block_pix, t.block_k].iter().all(|s| s.is_power_of_two())
        && t.warps_co > 0
        && t.warps_pix > 0
        && t.block_co % (16 * t.warps_co) == 0
        && t.block_pix % (16 * t.warps_pix) == 0
        && t.block_k % 16 == 0
        && gather_cpr > 0
        && units % gather_cpr == 0
        && chunks_a % units == 0
        && chunks_b % units == 0
        && (!tf32 || tf32_fits);
    let (Some(stages), true) = (stages, fits) else {
        panic!("ex_cubecl: {op}: tiling {t:?} does not fit the manual-MMA convolution kernels for {:?}", x.dtype);
    };
    MmaTile {
        block_m: t.block_co,
        block_n: t.block_pix,
        block_k: t.block_k,
        warps_m: t.warps_co,
        warps_n: t.warps_pix,
        stages,
        lhs_k_major: k_major,
        rhs_k_major: k_major,
        tf32,
    }
}

/// `t` (`[b, c, d, h, w]`) channels-last: a contiguous `[b, d, h, w, c]` copy, unless it lies
/// so already.
fn channels_last<R: Runtime>(t: &CubeTensor<R>) -> CubeTensor<R> {
    into_contiguous(t.with_layout(t.layout.permute(&[0, 2, 3, 4, 1])))
}

/// Launches the manual-MMA convolution (`transposed`: the transposed convolution's gather) of
/// `x` with the convolution weight `weight` into a new tensor of `out_shape`: split-K into f32
/// partials and their sum where [`plan`] splits it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_conv_mma<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: Vec<usize>,
    spec: ConvSpec,
    tiling: Option<ConvTiling>,
    tf32: bool,
    transposed: bool,
) -> CubeTensor<R> {
    let n = out_shape.len() - 2;
    let out = CubeTensor::empty(&x.client, &x.device, Shape::from(out_shape), x.dtype);
    let out5 = lift(&out, n);
    let x5 = lift(x, n);
    let x_last = channels_last(&x5);
    let (w_rows, [kd, kh, kw]) = weight_rows(weight, n);
    let cin_g = x.dims()[1] / spec.groups;
    let c_out = weight.dims()[0];

    let cout_g = c_out / spec.groups;
    // The TMA kernel where it runs (`super::conv_tma`), else the asynchronous copies.
    let tma = conv_tma_tiling(x, cin_g, cout_g, tiling, tf32, transposed)
        .and_then(|t| Some((t, im2col_map(&x_last.layout, n, [kd, kh, kw], &spec, elem_size(x.dtype))?)))
        .filter(|_| w_rows.layout.offset == 0);
    let t = match &tma {
        Some((t, _)) => *t,
        None => tiling.unwrap_or_else(|| conv_mma_tiling(cout_g)),
    };
    let tile = mma_tile(op, x, t, tf32, true);
    let od = out5.dims();
    let spatial = od[2] * od[3] * od[4];
    let no = if spatial % 2 == 0 { 2 } else { 1 };
    let pixels = od[0] * spatial;
    let tiles = spec.groups * cout_g.div_ceil(t.block_co) * pixels.div_ceil(t.block_pix);
    let split = plan(x, tiles, w_rows.dims()[1].div_ceil(t.block_k), t.block_k);
    // Split: f32 partials `[splits · b, c_out, od, oh, ow]`, the bias added by their sum.
    let target = match split.splits {
        1 => out5.clone(),
        s => CubeTensor::empty(&x.client, &x.device, Shape::from(vec![s * od[0], od[1], od[2], od[3], od[4]]), DType::F32),
    };
    let cubes = split.splits * tiles;
    let units = t.warps_co * t.warps_pix * 32;
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(units as u32) };
    let has_bias = bias.is_some() && split.splits == 1;
    let bias_arg = bias.cloned().unwrap_or_else(|| x.clone());
    // Split launches stay on the copies (on the TMA tiling, which they take too): the TMA
    // kernel's split-K has not run on a device yet.
    if let Some((_, map)) = tma.filter(|_| split.splits == 1) {
        let g = ConvTmaGeometry { map, spec, kernel: [kd, kh, kw], cin_g, batch: od[0] };
        launch_conv_tma(op, &x_last, &w_rows, (&bias_arg, has_bias), &target, g, tile, no, (tiles, split), geometry);
    } else {
        launch_copies(op, (&x_last, &w_rows, &bias_arg, &target), spec, [kh, kw], cin_g, tile, (has_bias, transposed), no, split.len, cubes, geometry);
    }
    if split.splits > 1 && out.num_elements() > 0 {
        launch_split_sum(op, &target, split.splits, &out, bias, spatial, c_out, no);
    }
    out
}

/// Launches `conv_mma` (the asynchronous copies) for [`launch_conv_mma`] on its tensors:
/// the channels-last input, the weight matrix, the bias (or any tensor, without one) and the
/// target; `kernel` is the lifted kernel's height and width.
#[allow(clippy::too_many_arguments)]
fn launch_copies<R: Runtime>(
    op: &str,
    (x_last, w_rows, bias, target): (&CubeTensor<R>, &CubeTensor<R>, &CubeTensor<R>, &CubeTensor<R>),
    spec: ConvSpec,
    [kh, kw]: [usize; 2],
    cin_g: usize,
    tile: MmaTile,
    (has_bias, transposed): (bool, bool),
    no: usize,
    split_len: usize,
    cubes: usize,
    geometry: Geometry,
) {
    let dtypes = [x_last.storage(), fragment_type(x_last.dtype, tile.tf32), target.storage()];
    let (chunk, unit_stride) = (tile.chunk(), spec.stride == [1; 3]);
    let (x, w, b, o) = (x_last.clone(), w_rows.clone(), bias.clone(), target.clone());
    launch(&x_last.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave before any access; the channels-last input and the
        // weight rows are contiguous from their first element, with the chunk dividing the
        // group's channels and K, so every copied chunk lies inside its tensor (chunks outside
        // read nothing and are zero-filled); writes are guarded by the group's channels and the
        // pixels, each split's inside its batch entries of the target, and `no` divides the
        // spatial size; every split starts before K's last slice (`SplitK::even`);
        // shared-memory indices stay inside the stages.
        unsafe {
            conv_mma::launch_unchecked::<R>(
                client, count, dim, chunk, no, x.as_arg(), w.as_arg(), b.as_arg(), o.as_arg(), b.layout.offset, spec.arg(),
                TapDivisorsLaunch::new(cin_g, kw, kh), split_len, cubes, tile, has_bias, transposed, unit_stride, dtypes,
            )
        }
    });
}

/// The weight gradient's partial sums `[splits, weight elements]` on the manual-MMA kernel, the
/// pixels split across cubes (see `conv::conv_weight_backward`); `wd` is the lifted weight
/// shape, `outer5` and `inner5` the lifted tensors.
pub(crate) fn launch_weight_mma<R: Runtime>(
    op: &str,
    outer5: &CubeTensor<R>,
    inner5: &CubeTensor<R>,
    wd: &[usize],
    spec: ConvSpec,
    tiling: Option<ConvTiling>,
    tf32: bool,
) -> CubeTensor<R> {
    let (outer_g, n_cols) = (wd[0] / spec.groups, wd[1] * wd[2] * wd[3] * wd[4]);
    let od = outer5.dims();
    let pixels = od[0] * od[2] * od[3] * od[4];
    let (od2, od3, od4) = (od[2], od[3], od[4]);
    let t = tiling.unwrap_or_else(|| weight_mma_tiling(tf32, outer_g));
    let tile = mma_tile(op, outer5, t, tf32, false);
    let tiles = spec.groups * outer_g.div_ceil(t.block_co) * n_cols.div_ceil(t.block_pix);
    let (splits, split_len) = split_pixels(pixels, tiles, t.block_k);
    let w_elems = wd.iter().product::<usize>();
    let partial = CubeTensor::empty(&outer5.client, &outer5.device, Shape::new([splits, w_elems]), partial_dtype(outer5.dtype, splits));
    let cubes = if w_elems == 0 { 0 } else { splits * tiles };
    let units = t.warps_co * t.warps_pix * 32;
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_1d(units as u32) };
    let (outer, inner) = (channels_last(outer5), channels_last(inner5));
    let dtypes = [outer5.storage(), fragment_type(outer5.dtype, tf32), partial.storage()];
    let (out, [kd, kh, kw], chunk) = (partial.clone(), [wd[2], wd[3], wd[4]], tile.chunk());
    launch(&partial.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave before any access; both channels-last tensors are
        // contiguous from their first element with the chunk dividing their channels per
        // group, so every copied chunk lies inside its tensor (chunks outside the split, the
        // group's channels, the columns or the input read nothing and are zero-filled); writes
        // are guarded by the group's channels and the weight's columns; every split starts
        // before the last pixel; shared-memory indices stay inside the stages.
        unsafe {
            conv_weight_mma::launch_unchecked::<R>(
                client, count, dim, chunk, outer.as_arg(), inner.as_arg(), out.as_arg(), spec.arg(), ConvKernelLaunch::new(kd, kh, kw), split_len,
                cubes, PixelDivisorsLaunch::new(od2 * od3 * od4, od3 * od4, od4), tile, dtypes,
            )
        }
    });
    partial
}
