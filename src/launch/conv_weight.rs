//! The weight and bias gradients of the convolutions and transposed convolutions of
//! [`super::conv`]: the weight gradient as an implicit GEMM over the batch and pixels, split
//! across cubes and then summed; the bias gradient as two sums.
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::ir::StorageType;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::conv_cmma::ConvKernelLaunch;
use ex_cubecl_kernels::conv_direct::conv_weight_direct;
use ex_cubecl_kernels::conv_weight_cmma::conv_weight_cmma;
use ex_cubecl_kernels::conv_weight_gemm::conv_weight_gemm;
use ex_cubecl_kernels::reduce::ReduceOp;

use super::bf16;
use super::conv::{ConvSpec, ConvTiling, NARROW, WIDE, check_float, check_rank, lift};
use super::conv_mma::{conv_mma_runs, launch_weight_mma};
use super::copy::cast;
use super::matmul::cmma_operand;
use super::{accumulator, accumulator_dtype, cubes_on_cpu, reduce::reduce_dim, view::reshape};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// The weight gradient's pixels are split across cubes until about this many cubes run...
const SPLIT_CUBES: usize = 512;
/// ...as long as each split keeps at least this many slices of pixels.
const MIN_SLICES: usize = 8;

/// Weight gradient of a convolution (`transposed: false`; `x` is the input) or of a
/// transposed convolution (`transposed: true`), for a weight of `weight_shape`: an implicit
/// GEMM over the batch and pixels, split across cubes and then summed (under the rules of
/// [`conv`](super::conv::conv): `conv_weight_mma` on manual MMA where both channel counts per group come in
/// 16-byte chunks, `conv_weight_cmma` on other matrix units, `conv_weight_gemm` on plain
/// units, `conv_weight_direct` on devices that run cubes on CPU cores).
pub fn conv_weight_backward<R: Runtime>(
    op: &str,
    x: CubeTensor<R>,
    output_grad: CubeTensor<R>,
    weight_shape: Shape,
    spec: ConvSpec,
    transposed: bool,
) -> CubeTensor<R> {
    conv_weight_backward_with(op, x, output_grad, weight_shape, spec, transposed, None)
}

/// [`conv_weight_backward`] with the manual-MMA kernel's tiling chosen by the caller (for
/// benchmarks and tuning: `block_co` outer channels, `block_pix` weight columns, `block_k`
/// pixels per slice); `None` picks the default. Ignored where that kernel doesn't run.
///
/// # Panics
/// As [`conv_weight_backward`], or on a tiling that doesn't fit the kernel.
#[doc(hidden)]
pub fn conv_weight_backward_with<R: Runtime>(
    op: &str,
    x: CubeTensor<R>,
    output_grad: CubeTensor<R>,
    weight_shape: Shape,
    spec: ConvSpec,
    transposed: bool,
    tiling: Option<ConvTiling>,
) -> CubeTensor<R> {
    if bf16::any(&[&x, &output_grad]) {
        return bf16::map2(op, x, output_grad, |x, g| conv_weight_backward_with(op, x, g, weight_shape, spec, transposed, tiling));
    }
    let n = spec.n;
    check_rank(op, "x", &x, n + 2);
    check_rank(op, "output_grad", &output_grad, n + 2);
    check_float(op, &[("x", &x), ("output_grad", &output_grad)]);
    let (outer, inner) = if transposed { (&x, &output_grad) } else { (&output_grad, &x) };
    let (outer5, inner5) = (lift(outer, n), lift(inner, n));
    let mut wd = weight_shape.as_slice().to_vec();
    wd.splice(2..2, std::iter::repeat_n(1, 3 - n));
    let groups = spec.groups;
    if wd[0] != outer5.dims()[1] || wd[1] * groups != inner5.dims()[1] {
        panic!(
            "ex_cubecl: {op}: a weight of shape {weight_shape:?} with {groups} groups does not match x {:?} and output_grad {:?} ({:?})",
            x.dims(),
            output_grad.dims(),
            x.dtype
        );
    }
    let reduction = wd[1..].iter().product::<usize>();
    let cmma = cmma_operand(&x.client, x.dtype).filter(|_| wd[0] / groups >= 16 && reduction > 0);
    let partial = match conv_mma_runs(&x, &[wd[0] / groups, wd[1]], wd[0] / groups, reduction) {
        Some(tf32) => launch_weight_mma(op, &outer5, &inner5, &wd, spec, tiling, tf32),
        None if cmma.is_none() && cubes_on_cpu(&x.client) => launch_weight_direct(op, &outer5, &inner5, &wd, spec),
        None => launch_weight_gemm(op, &outer5, &inner5, &wd, spec, cmma),
    };
    let (splits, sum_dtype) = (partial.dims()[0], accumulator_dtype(x.dtype));
    let grad = if splits == 1 { partial } else { reduce_dim(partial, 0, ReduceOp::Sum, sum_dtype) };
    let grad = if grad.dtype == x.dtype { grad } else { cast(grad, x.dtype) };
    reshape(grad, weight_shape)
}

/// The dtype of the weight gradient's partial sums over `splits` splits: the gradient's own
/// when there is nothing to sum, the accumulator's otherwise.
pub(crate) fn partial_dtype(dtype: DType, splits: usize) -> DType {
    if splits == 1 { dtype } else { accumulator_dtype(dtype) }
}

/// How a weight gradient of `tiles` output tiles splits its `pixels` in slices of `block_k`:
/// enough splits to fill the device, each at least [`MIN_SLICES`] slices long; `(splits,
/// pixels per split)`, every split starting before the last pixel.
pub(crate) fn split_pixels(pixels: usize, tiles: usize, block_k: usize) -> (usize, usize) {
    let slices = pixels.div_ceil(block_k);
    let splits = (SPLIT_CUBES / tiles.max(1)).clamp(1, slices.div_ceil(MIN_SLICES).max(1));
    let split_len = slices.div_ceil(splits).max(1) * block_k;
    (pixels.div_ceil(split_len).max(1), split_len)
}

/// The weight gradient's partial sums `[splits, weight elements]` on (tensor-core or plain)
/// shared-memory GEMMs, the pixels split across cubes; `wd` is the lifted weight shape.
fn launch_weight_gemm<R: Runtime>(
    op: &str,
    outer5: &CubeTensor<R>,
    inner5: &CubeTensor<R>,
    wd: &[usize],
    spec: ConvSpec,
    cmma: Option<(StorageType, usize)>,
) -> CubeTensor<R> {
    let (outer_g, n_cols) = (wd[0] / spec.groups, wd[1] * wd[2] * wd[3] * wd[4]);
    let od = outer5.dims();
    let pixels = od[0] * od[2] * od[3] * od[4];
    let t = match cmma {
        Some((_, frag_k)) => weight_tiling_cmma(outer_g, frag_k),
        None => weight_tiling(outer_g),
    };
    let tiles = spec.groups * outer_g.div_ceil(t.block_r) * n_cols.div_ceil(t.block_c);
    let (splits, split_len) = split_pixels(pixels, tiles, t.block_k);
    let w_elems = wd.iter().product::<usize>();
    let partial = CubeTensor::empty(&outer5.client, &outer5.device, Shape::new([splits, w_elems]), partial_dtype(outer5.dtype, splits));
    let cubes = if w_elems == 0 { 0 } else { splits * tiles };
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_1d(t.units as u32) };
    let (outer5, inner5, out, wd) = (outer5.clone(), inner5.clone(), partial.clone(), wd.to_vec());
    launch(&partial.client, op, geometry, move |client, count, dim| {
        let (o, i, p) = (outer5.as_arg(), inner5.as_arg(), out.as_arg());
        let kernel = ConvKernelLaunch::new(wd[2], wd[3], wd[4]);
        let (oo, io, spec) = (outer5.layout.offset, inner5.layout.offset, spec.arg());
        let (storage, part) = (outer5.storage(), out.storage());
        // SAFETY: cubes past `cubes` leave uniformly before any barrier; reads are guarded by
        // the split's pixels, the group's channels and the input's extents, writes by the
        // group's channels and the weight's columns; the tilings satisfy the kernels'
        // divisibility rules (`weight_tiling*`).
        unsafe {
            match cmma {
                Some((operand, frag_k)) => conv_weight_cmma::launch_unchecked::<R>(
                    client, count, dim, o, i, p, oo, io, spec, kernel, split_len, cubes, t.block_r, t.block_c,
                    t.block_k, t.warps_r, t.warps_c, frag_k, 16 / operand.size(), [storage, operand, part],
                ),
                None => conv_weight_gemm::launch_unchecked::<R>(
                    client, count, dim, o, i, p, oo, io, spec, kernel, split_len, cubes, t.block_r, t.block_c,
                    t.block_k, t.warps_r, t.warps_c, [storage, accumulator(outer5.dtype), part],
                ),
            }
        }
    });
    partial
}

/// Outer channels × weight columns per unit of the barrier-free weight gradient.
const DIRECT_BLOCK: [usize; 2] = [8, 4];
/// Its batch entries are split until about this many units run.
const DIRECT_UNITS: usize = 1024;

/// The weight gradient's partial sums `[splits, weight elements]` without barriers, the batch
/// entries split across units; `wd` is the lifted weight shape.
fn launch_weight_direct<R: Runtime>(op: &str, outer5: &CubeTensor<R>, inner5: &CubeTensor<R>, wd: &[usize], spec: ConvSpec) -> CubeTensor<R> {
    let (outer_g, n_cols) = (wd[0] / spec.groups, wd[1] * wd[2] * wd[3] * wd[4]);
    let batch = outer5.dims()[0];
    let [ur, uc] = DIRECT_BLOCK;
    let per_split = spec.groups * outer_g.div_ceil(ur) * n_cols.div_ceil(uc);
    let splits = (DIRECT_UNITS / per_split.max(1)).clamp(1, batch.max(1));
    let split_len = batch.div_ceil(splits).max(1);
    let splits = batch.div_ceil(split_len).max(1);
    let w_elems = wd.iter().product::<usize>();
    let partial = CubeTensor::empty(&outer5.client, &outer5.device, Shape::new([splits, w_elems]), partial_dtype(outer5.dtype, splits));
    let units = if w_elems == 0 { 0 } else { splits * per_split };
    let (outer5, inner5, out, wd) = (outer5.clone(), inner5.clone(), partial.clone(), wd.to_vec());
    launch(&partial.client, op, Geometry::Units(units), move |client, count, dim| {
        let dtypes = [outer5.storage(), accumulator(outer5.dtype), out.storage()];
        // SAFETY: units past `units` leave at once; reads are guarded by the split's batch
        // entries, the group's channels and the input's extents, writes by the channels.
        unsafe {
            conv_weight_direct::launch_unchecked::<R>(
                client, count, dim, outer5.as_arg(), inner5.as_arg(), out.as_arg(), outer5.layout.offset,
                inner5.layout.offset, spec.arg(), wd[2], wd[3], wd[4], split_len, units, ur, uc, dtypes,
            )
        }
    });
    partial
}

/// The tiling of a weight gradient: `block_r` outer channels × `block_c` weight columns per
/// cube, pixel slices of `block_k`, and `units`; `warps_r` × `warps_c` are planes on tensor
/// cores, units per row and column of the tile's register blocks (`unit_r`, `unit_c` of the
/// plain kernel) otherwise.
#[derive(Clone, Copy, Debug)]
struct WeightTiling {
    block_r: usize,
    block_c: usize,
    block_k: usize,
    warps_r: usize,
    warps_c: usize,
    units: usize,
}

/// The plain kernel's tiling: 256 units of 1 × 4 or 4 × 4 accumulators.
fn weight_tiling(outer_g: usize) -> WeightTiling {
    let [block_r, block_c, block_k, warps_r, warps_c] = if outer_g <= NARROW[0] { NARROW } else { WIDE };
    WeightTiling { block_r, block_c, block_k, warps_r, warps_c, units: block_r / warps_r * block_c / warps_c }
}

/// The tensor-core kernel's tiling: 8 planes, 128 columns, up to 64 outer channels.
fn weight_tiling_cmma(outer_g: usize, frag_k: usize) -> WeightTiling {
    let (block_r, warps_r) = match outer_g {
        64.. => (64, 2),
        32.. => (32, 2),
        _ => (16, 1),
    };
    WeightTiling { block_r, block_c: 128, block_k: 2 * frag_k, warps_r, warps_c: 8 / warps_r, units: 256 }
}

/// Bias gradient: the output gradient summed over every dimension but the channels (in f32
/// for half-precision gradients, whose long sums would lose too much in their own type).
pub fn bias_backward<R: Runtime>(output_grad: CubeTensor<R>) -> CubeTensor<R> {
    if output_grad.bf16_bits() {
        return bf16::map(output_grad, bias_backward);
    }
    let dtype = output_grad.dtype;
    let sum_dtype = accumulator_dtype(dtype);
    let output_grad = if sum_dtype == dtype { output_grad } else { cast(output_grad, sum_dtype) };
    let channels = output_grad.dims()[1];
    let per_batch = reduce_dim(output_grad, 0, ReduceOp::Sum, sum_dtype);
    let rest = per_batch.num_elements() / channels.max(1);
    let flat = reshape(per_batch, Shape::new([channels, rest]));
    let summed = reshape(reduce_dim(flat, 1, ReduceOp::Sum, sum_dtype), Shape::new([channels]));
    if sum_dtype == dtype { summed } else { cast(summed, dtype) }
}
