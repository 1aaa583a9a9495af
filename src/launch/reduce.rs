//! Reductions along a dimension and over the whole tensor.
use std::fmt::Display;

use burn_backend::{DType, Shape};
use cubecl::prelude::{ComputeClient, CubeDim};
use cubecl::Runtime;
use ex_cubecl_kernels::reduce::{Bf16Bits, ReduceOp, reduce_per_cube, reduce_per_unit, reduce_split, reduce_split_merge};
use ex_cubecl_kernels::reduce_vec::reduce_per_unit_vec;

use super::views::Views;
use super::{accumulator_dtype, check_dim, divmods, usizes};
use super::copy::into_contiguous;
use crate::runtime::{Geometry, OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// Units per cube when one cube reduces one line.
pub const CUBE_SIZE: usize = 256;

/// Cubes a reduction of few long lines is spread over (a few per multiprocessor of a large
/// GPU): each line is split into chunks reduced by separate cubes, then merged.
const SPLIT_CUBES: usize = 1024;

/// Units per multiprocessor that a reduction of vectors of lines (`reduce_per_unit_vec`, and
/// the fused `fused_reduce_vec`) needs at least. Each unit walks its lines' whole length
/// either way, so with fewer units the device has fewer loads in flight with vectors than
/// with one line per unit, and is slower (ResNet-50's `[1, C, h, w]` sums on an H200).
const VECTOR_UNITS_PER_SM: usize = 512;

/// The fewest units a reduction of vectors of lines runs on, on `client`'s device: none
/// where the device doesn't say how many multiprocessors it has (wgpu).
pub(crate) fn vector_min_units<R: Runtime>(client: &ComputeClient<R>) -> usize {
    client.properties().hardware.num_streaming_multiprocessors.unwrap_or(0) as usize * VECTOR_UNITS_PER_SM
}

/// Fewest elements per unit in a chunk of a split reduction.
const SPLIT_MIN_PER_UNIT: usize = 8;

/// Reduces `dim` to size 1, giving `out_dtype` elements.
pub fn reduce_dim<R: Runtime>(tensor: CubeTensor<R>, dim: usize, op: ReduceOp, out_dtype: DType) -> CubeTensor<R> {
    launch_reduce(tensor, dim, op, out_dtype, None).0
}

/// `reduce_dim(reshape(tensor, shape), dim, op, out_dtype)` without the copy that a reshape
/// of a view makes, where every dimension of `shape` but `dim` is one strided run of
/// `tensor`'s dimensions and `dim` at most two: burn-nn batch norm's statistics,
/// `x.swap_dims(0, 1).reshape([C, N*H*W]).mean_dim(1)`, read `x` where it lies. The elements
/// fold as they would in the copy (the same strategy, the same order), so the bits are the
/// copy's. `None` where the reshape doesn't allow it.
pub fn reduce_reshaped<R: Runtime>(tensor: &CubeTensor<R>, shape: &Shape, dim: usize, op: ReduceOp, out_dtype: DType) -> Option<CubeTensor<R>> {
    let bits = Bf16Bits { input: tensor.bf16_bits(), output: super::bf16::held_as_bits(&tensor.client, out_dtype) };
    let shape = shape.as_slice();
    (dim < shape.len() && shape.iter().product::<usize>() == tensor.num_elements() && !(bits.output && !bits.input)).then_some(())?;
    let lines = Lines::of_reshaped(tensor, shape, dim)?;
    let mut out_shape = shape.to_vec();
    out_shape[dim] = 1;
    // The copy is contiguous: its lines are contiguous where `dim` is the last of size > 1.
    let strategy = Strategy::of(lines.len, out_shape.iter().product(), shape[dim + 1..].iter().product::<usize>() == 1);
    Some(launch_lines(tensor.clone(), lines, Shape::from(out_shape), strategy, None, op, out_dtype, None, bits).0)
}

/// The max (`ArgMax`) or min (`ArgMin`) along `dim` and its first index, in one pass.
pub fn reduce_dim_with_indices<R: Runtime>(
    tensor: CubeTensor<R>,
    dim: usize,
    op: ReduceOp,
    index_dtype: DType,
) -> (CubeTensor<R>, CubeTensor<R>) {
    let dtype = tensor.dtype;
    let (values, indices) = launch_reduce(tensor, dim, op, dtype, Some(index_dtype));
    (values, indices.expect("indices"))
}

fn launch_reduce<R: Runtime>(
    tensor: CubeTensor<R>,
    dim: usize,
    op: ReduceOp,
    out_dtype: DType,
    index_dtype: Option<DType>,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    // bf16 held as bits (see `super::bf16`) is read (and, as the values' dtype, written) as
    // its bits by the kernels, which accumulate in f32; only an output of bf16 from another
    // dtype goes through f32.
    let bits = Bf16Bits { input: tensor.bf16_bits(), output: super::bf16::held_as_bits(&tensor.client, out_dtype) };
    if bits.output && !bits.input {
        let wide = if out_dtype == DType::BF16 { DType::F32 } else { out_dtype };
        let (values, indices) = launch_reduce(super::bf16::widen(tensor), dim, op, wide, index_dtype);
        return (super::bf16::narrow(values, out_dtype), indices);
    }
    let name = OpName("reduce", &op);
    check_dim(&name, &tensor, dim);
    let mut shape = tensor.dims().to_vec();
    let len = shape[dim];
    shape[dim] = 1;
    let outputs = shape.iter().product::<usize>();
    // Elements fold in an order set by the strategy alone, which bf16 held as bits picks as
    // for its f32 widening (contiguous), so that its sums are those of the widened tensor.
    let contiguous = match bits.input {
        true => tensor.dims()[dim + 1..].iter().product::<usize>() == 1,
        false => tensor.layout.strides[dim] == 1,
    };
    let strategy = Strategy::of(len, outputs, contiguous);
    let vector = (strategy == Strategy::PerUnit).then(|| line_vector(&tensor, dim, outputs)).flatten();
    let lines = Lines::of(&tensor, dim);
    launch_lines(tensor, lines, Shape::from(shape), strategy, vector, op, out_dtype, index_dtype, bits)
}

/// Reduces `tensor`'s `lines` into a contiguous tensor of `out_shape` as `strategy` says
/// (`vector` adjacent lines per unit where given), giving `out_dtype` elements and, with
/// `index_dtype`, the arg reductions' indices.
#[allow(clippy::too_many_arguments)]
fn launch_lines<R: Runtime>(
    tensor: CubeTensor<R>,
    lines: Lines,
    out_shape: Shape,
    strategy: Strategy,
    vector: Option<usize>,
    op: ReduceOp,
    out_dtype: DType,
    index_dtype: Option<DType>,
    bits: Bf16Bits,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    let name = OpName("reduce", &op);
    let len = lines.len;
    let out = CubeTensor::empty(&tensor.client, &tensor.device, out_shape, out_dtype);
    let outputs = out.num_elements();
    let with_indices = index_dtype.is_some();
    // Without indices, a placeholder of one word (one vector, the least a binding of vectors
    // may hold) fills the unused binding.
    let indices = match index_dtype {
        Some(dtype) => CubeTensor::empty(&tensor.client, &tensor.device, out.layout.shape.clone(), dtype),
        None => CubeTensor::empty(&tensor.client, &tensor.device, Shape::from(vec![vector.unwrap_or(1)]), DType::U32),
    };
    let dtypes = [tensor.storage(), storage_type(accumulator_dtype(tensor.dtype)), out.storage(), indices.storage()];
    if strategy != Strategy::PerUnit {
        if let Strategy::Split(splits) = strategy {
            launch_split(&name, &tensor, &out, &indices, lines, op, splits, with_indices, bits);
        } else {
            let geometry = Geometry::Cubes { count: outputs, dim: CubeDim::new_1d(CUBE_SIZE as u32) };
            let (o, idx) = (out.clone(), indices.clone());
            launch(&out.client, &name, geometry, move |client, count, cube_dim| {
                // SAFETY: cubes past the output leave before any access; every read is inside the line.
                unsafe {
                    reduce_per_cube::launch_unchecked::<R>(
                        client, count, cube_dim, tensor.buffer_arg(), o.buffer_arg(), idx.buffer_arg(),
                        tensor.layout.offset, lines.views.shape(), lines.views.strides(0), len, lines.stride,
                        divmods(&lines.axis), usizes(&lines.axis_strides), op, CUBE_SIZE, with_indices, bits, dtypes,
                    )
                }
            });
        }
    } else if let Some(v) = vector {
        let (o, idx, units) = (out.clone(), indices.clone(), outputs / v);
        launch(&out.client, &name, Geometry::Units(units), move |client, count, cube_dim| {
            // SAFETY: the kernel guards `pos < units`; `line_vector` checked that every
            // vector read is whole, aligned and inside the line; `out` holds `units` vectors.
            unsafe {
                reduce_per_unit_vec::launch_unchecked::<R>(
                    client, count, cube_dim, v, tensor.buffer_arg(), o.buffer_arg(), idx.buffer_arg(),
                    tensor.layout.offset, lines.views.shape(), lines.views.strides(0), len, lines.stride, units, op,
                    with_indices, bits, dtypes,
                )
            }
        });
    } else {
        let (o, idx) = (out.clone(), indices.clone());
        launch(&out.client, &name, Geometry::Units(outputs), move |client, count, cube_dim| {
            // SAFETY: the kernel guards `pos < outputs`; every read is inside the line.
            unsafe {
                reduce_per_unit::launch_unchecked::<R>(
                    client, count, cube_dim, tensor.buffer_arg(), o.buffer_arg(), idx.buffer_arg(),
                    tensor.layout.offset, lines.views.shape(), lines.views.strides(0), len, lines.stride,
                    divmods(&lines.axis), usizes(&lines.axis_strides), op, with_indices, bits, dtypes,
                )
            }
        });
    }
    (out, with_indices.then_some(indices))
}

/// The vector size at which `reduce_per_unit_vec` reads `tensor`'s lines along `dim`, `v`
/// adjacent lines per unit: the largest the device loads at once that divides the innermost
/// dimension (contiguous, and not `dim`), the offset, the stride along `dim` and every other
/// stride, and leaves [`vector_min_units`] units at least of the `lines`; `None` where none
/// does.
fn line_vector<R: Runtime>(tensor: &CubeTensor<R>, dim: usize, lines: usize) -> Option<usize> {
    let (shape, strides) = (&tensor.layout.shape, &tensor.layout.strides);
    let last = shape.len().checked_sub(1)?;
    (dim < last && strides[last] == 1).then_some(())?;
    let min_units = vector_min_units(&tensor.client);
    let units = |v: usize| lines / v >= min_units;
    let aligned = |v: usize| units(v) && shape[last] % v == 0 && tensor.layout.offset % v == 0 && strides[..last].iter().all(|&s| s % v == 0);
    tensor.client.io_optimized_vector_sizes(tensor.storage().size()).filter(|&v| v > 1).find(|&v| aligned(v))
}

/// How a reduction spreads its lines over units.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// One unit per line (`reduce_per_unit`).
    PerUnit,
    /// One cube of [`CUBE_SIZE`] units per line (`reduce_per_cube`).
    PerCube,
    /// Each line in this many chunks, one cube each, then merged (`reduce_split`).
    Split(usize),
}

impl Strategy {
    /// The strategy for `outputs` lines of `len` elements, `contiguous` when a line's
    /// elements are adjacent: one cube per line when lines are long and either few (not
    /// enough lines for a unit each) or contiguous (a cube reads a line coalesced; a unit per
    /// line would not); split when such lines are too few to fill the device.
    pub fn of(len: usize, outputs: usize, contiguous: bool) -> Self {
        if len >= 2 * CUBE_SIZE && (outputs < 8192 || contiguous) {
            let splits = (SPLIT_CUBES.div_ceil(outputs.max(1))).min(len / (CUBE_SIZE * SPLIT_MIN_PER_UNIT));
            if splits > 1 { Strategy::Split(splits) } else { Strategy::PerCube }
        } else {
            Strategy::PerUnit
        }
    }
}

/// The lines of a tensor along a dimension, as the kernels take them.
struct Lines {
    /// Where each line starts: a view over every other dimension.
    views: Views,
    /// The length of a line.
    len: usize,
    /// The distance between a line's elements.
    stride: usize,
    /// Where not empty, the dimensions (outermost first) over which a line's elements lie
    /// instead, row-major, with `axis_strides` (`ex_cubecl_kernels::reduce`).
    axis: Vec<usize>,
    axis_strides: Vec<usize>,
}

impl Lines {
    fn of<R: Runtime>(tensor: &CubeTensor<R>, dim: usize) -> Self {
        let others = |v: &[usize]| v.iter().enumerate().filter(|&(d, _)| d != dim).map(|(_, &x)| x).collect::<Vec<_>>();
        let (shape, strides) = (others(&tensor.layout.shape), others(&tensor.layout.strides));
        let views = Views::new(&shape, &[&strides], false);
        Self { views, len: tensor.layout.shape[dim], stride: tensor.layout.strides[dim], axis: Vec::new(), axis_strides: Vec::new() }
    }

    /// The lines along `dim` of `tensor` reshaped to `shape`, where every dimension of
    /// `shape` but `dim` is one strided run of `tensor`'s dimensions and `dim` at most two.
    fn of_reshaped<R: Runtime>(tensor: &CubeTensor<R>, shape: &[usize], dim: usize) -> Option<Self> {
        let runs = reshape_runs(tensor.dims(), &tensor.layout.strides, shape)?;
        let single = |runs: &[(usize, usize)]| match runs {
            [] => Some(0),
            [(_, stride)] => Some(*stride),
            _ => None,
        };
        let mut others = (Vec::new(), Vec::new());
        for (d, r) in runs.iter().enumerate().filter(|&(d, _)| d != dim) {
            others.0.push(shape[d]);
            others.1.push(single(r)?);
        }
        let views = Views::new(&others.0, &[&others.1], false);
        let (stride, axis, axis_strides) = match runs[dim].as_slice() {
            &[(outer, outer_stride), (inner, inner_stride)] => (inner_stride, vec![outer, inner], vec![outer_stride, inner_stride]),
            r => (single(r)?, Vec::new(), Vec::new()),
        };
        Some(Self { views, len: shape[dim], stride, axis, axis_strides })
    }
}

/// For each dimension of `shape`, the runs `(length, stride)` (outermost first, each one
/// stride apart) of the view `dims` / `strides` that a reshape to `shape` merges into it;
/// `None` where the reshape splits a dimension of the view.
fn reshape_runs(dims: &[usize], strides: &[usize], shape: &[usize]) -> Option<Vec<Vec<(usize, usize)>>> {
    let mut view = dims.iter().zip(strides).filter(|&(&n, _)| n != 1);
    let mut runs = Vec::with_capacity(shape.len());
    for &n in shape {
        let (mut group, mut product): (Vec<(usize, usize)>, usize) = (Vec::new(), 1);
        while product < n {
            let (&m, &stride) = view.next()?;
            product *= m;
            match group.last_mut() {
                Some(last) if last.1 == m * stride => *last = (last.0 * m, stride),
                _ => group.push((m, stride)),
            }
        }
        (product == n).then_some(())?;
        runs.push(group);
    }
    view.next().is_none().then_some(runs)
}

/// Reduces the whole tensor to shape `[1]`.
pub fn reduce_all<R: Runtime>(tensor: CubeTensor<R>, op: ReduceOp, out_dtype: DType) -> CubeTensor<R> {
    let n = tensor.num_elements();
    let flat = match tensor.layout.reshape(Shape::from(vec![n])) {
        Some(layout) => tensor.with_layout(layout),
        None => {
            let t = into_contiguous(tensor);
            let layout = t.layout.reshape(Shape::from(vec![n])).expect("contiguous");
            t.with_layout(layout)
        }
    };
    reduce_dim(flat, 0, op, out_dtype)
}

/// A reduction of few long lines in two passes: each line is cut into `splits` chunks of at
/// least `CUBE_SIZE * SPLIT_MIN_PER_UNIT` elements, one cube folds each chunk into a partial
/// result (value and index, in the accumulator's dtype: f32 for f16 and bf16, whose sums of
/// many elements overflow long before their means do), and one unit per line merges its partials.
#[allow(clippy::too_many_arguments)]
fn launch_split<R: Runtime>(
    name: impl Display + Copy,
    tensor: &CubeTensor<R>,
    out: &CubeTensor<R>,
    indices: &CubeTensor<R>,
    lines: Lines,
    op: ReduceOp,
    splits: usize,
    with_indices: bool,
    bits: Bf16Bits,
) {
    let len = lines.len;
    let chunk = len.div_ceil(splits);
    // With `chunk` rounded up, fewer chunks may cover the line; none is empty.
    let splits = len.div_ceil(chunk);
    let count = out.num_elements();
    let (client, device) = (&tensor.client, &tensor.device);
    let acc = accumulator_dtype(tensor.dtype);
    let partial_values = CubeTensor::empty(client, device, Shape::from(vec![count * splits]), acc);
    let partial_indices = CubeTensor::empty(client, device, Shape::from(vec![count * splits]), DType::U32);
    let geometry = Geometry::Cubes { count: count * splits, dim: CubeDim::new_1d(CUBE_SIZE as u32) };
    let (t, pv, pi) = (tensor.clone(), partial_values.clone(), partial_indices.clone());
    launch(client, name, geometry, move |client, count, cube_dim| {
        // SAFETY: cubes past the partials leave before any access; chunks lie inside the line.
        unsafe {
            reduce_split::launch_unchecked::<R>(
                client, count, cube_dim, t.buffer_arg(), pv.buffer_arg(), pi.buffer_arg(), t.layout.offset,
                lines.views.shape(), lines.views.strides(0), len, lines.stride, divmods(&lines.axis),
                usizes(&lines.axis_strides), splits, chunk, op, CUBE_SIZE,
                bits.input, [t.storage(), storage_type(acc)],
            )
        }
    });
    let dtypes = [storage_type(acc), out.storage(), indices.storage()];
    let (o, idx) = (out.clone(), indices.clone());
    launch(client, name, Geometry::Units(count), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < count`; it reads the line's `splits` partials.
        unsafe {
            reduce_split_merge::launch_unchecked::<R>(
                client, count, cube_dim, partial_values.buffer_arg(), partial_indices.buffer_arg(), o.buffer_arg(),
                idx.buffer_arg(), splits, len, op, with_indices, bits.output, dtypes,
            )
        }
    });
}
