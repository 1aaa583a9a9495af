//! Indexed reads and writes along one dimension: gather, select, scatter and select with
//! accumulation. Indices out of `[0, size)` read 0 and write nothing.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::strided::view_offsets;

/// How indexed writes combine with the destination.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ScatterOp {
    /// `dst += value`.
    Add,
    /// `dst |= value` (bool storage).
    Or,
}

/// Converts an index to a position in `[0, size)`, or `size` when out of range.
#[cube]
fn checked_index<I: Int>(index: I, size: usize) -> usize {
    let valid = index >= I::new(0) && u64::cast_from(index) < size as u64;
    cubecl::prelude::select(valid, usize::cast_from(index), size)
}

/// `out[c] = tensor[c with c[dim] = indices[c]]`; `output` (contiguous) has the indices'
/// shape `shape`, and `tensor` is a view whose shape is that shape except along `dim`.
/// `tensor_strides` are the tensor's strides with `dim`'s set to 0 (the index supplies that
/// coordinate); `indices_linear` says the indices are contiguous, when `indices_strides` are
/// unused.
#[cube(launch_unchecked)]
pub fn gather<T: Numeric, I: Int>(
    tensor: &Tensor<T>,
    indices: &Tensor<I>,
    output: &mut Tensor<T>,
    tensor_offset: usize,
    indices_offset: usize,
    dim_size: usize,
    dim_stride: usize,
    shape: Sequence<FastDivmod<usize>>,
    tensor_strides: Sequence<usize>,
    indices_strides: Sequence<usize>,
    #[comptime] indices_linear: bool,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let (offset, at) = view_offsets(ABSOLUTE_POS, &shape, &tensor_strides, &indices_strides);
    let at = if indices_linear { ABSOLUTE_POS } else { at };
    let k = checked_index::<I>(indices[indices_offset + at], dim_size);
    let mut value = T::from_int(0);
    if k < dim_size {
        value = tensor[tensor_offset + offset + k * dim_stride];
    }
    output[ABSOLUTE_POS] = value;
}

/// `out[c] = tensor[c with c[dim] = indices[c[dim]]]` for a 1-D `indices`; `output` has the
/// tensor's shape with `dim` resized to the number of indices.
#[cube(launch_unchecked)]
pub fn index_select<T: Numeric, I: Int>(
    tensor: &Tensor<T>,
    indices: &Tensor<I>,
    output: &mut Tensor<T>,
    tensor_offset: usize,
    indices_offset: usize,
    dim: usize,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let rank = output.rank();
    let mut offset = tensor_offset;
    let mut rem = ABSOLUTE_POS;
    let mut k = 0;
    for i in 0..rank {
        let d = rank - 1 - i;
        let size = output.shape(d);
        let coord = rem % size;
        rem /= size;
        if d == dim {
            k = coord;
        } else {
            offset += coord * tensor.stride(d);
        }
    }
    let size = tensor.shape(dim);
    let index = checked_index::<I>(indices[indices_offset + k * indices.stride(0)], size);
    let mut value = T::from_int(0);
    if index < size {
        value = tensor[offset + index * tensor.stride(dim)];
    }
    output[ABSOLUTE_POS] = value;
}

#[cube]
fn combine<T: Numeric>(dst: T, value: T, #[comptime] op: ScatterOp) -> T {
    match op {
        ScatterOp::Add => dst + value,
        ScatterOp::Or => select(!(dst == T::from_int(0)) || !(value == T::from_int(0)), T::from_int(1), T::from_int(0)),
    }
}

/// Where line `line` of a scatter along `dim` starts in `indices`, `value` and `output`.
#[derive(CubeType)]
struct LineStart {
    indices: usize,
    value: usize,
    output: usize,
}

/// The starts of line `line` (lines numbered over the dimensions other than `dim`, the last
/// fastest) for [`scatter`] and [`scatter_plane`].
#[cube]
fn line_start<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    line: usize,
) -> LineStart {
    let rank = indices.rank();
    let mut start = LineStart { indices: indices_offset, value: value_offset, output: 0 };
    let mut rem = line;
    for i in 0..rank {
        let d = rank - 1 - i;
        if !(d == dim) {
            let size = indices.shape(d);
            let coord = rem % size;
            rem /= size;
            start.indices += coord * indices.stride(d);
            start.value += coord * value.stride(d);
            start.output += coord * output.stride(d);
        }
    }
    start
}

/// Scatter along `dim`: `output[c with c[dim] = indices[c]] op= value[c]` for every
/// position `c` of `indices`. `output` is contiguous (a copy of the destination tensor).
/// One unit per line of `indices` along `dim`, so no two units touch the same output line
/// and no atomics are needed; the result is deterministic.
#[cube(launch_unchecked)]
pub fn scatter<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScatterOp,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_lines {
        terminate!();
    }
    let start = line_start::<T, I>(indices, value, output, indices_offset, value_offset, dim, ABSOLUTE_POS);
    let (idx_start, val_start, out_start) = (start.indices, start.value, start.output);
    let size = output.shape(dim);
    for j in 0..indices.shape(dim) {
        let k = checked_index::<I>(indices[idx_start + j * indices.stride(dim)], size);
        if k < size {
            let pos = out_start + k * output.stride(dim);
            output[pos] = combine::<T>(output[pos], value[val_start + j * value.stride(dim)], op);
        }
    }
}

/// [`scatter`] with one plane per line, for devices with plane operations and planes of at
/// most 32 units: the plane reads the line's indices `PLANE_DIM` at a time (coalesced) and
/// broadcasts them; the unit that owns an output position (position modulo `PLANE_DIM`)
/// combines the entries that land there, in the line's order. Every output position is
/// updated by one unit in that order, so the result is the sequential one, deterministic,
/// without atomics, and the units of a plane combine their entries at the same time.
/// `CUBE_DIM / PLANE_DIM` lines per cube.
#[cube(launch_unchecked)]
pub fn scatter_plane<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScatterOp,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    let planes = (CUBE_DIM / PLANE_DIM) as usize;
    let line = CUBE_POS * planes + (UNIT_POS / PLANE_DIM) as usize;
    // Uniform per plane: the shuffles below need every unit of the plane.
    if line >= num_lines {
        terminate!();
    }
    let lane = UNIT_POS_PLANE;
    let start = line_start::<T, I>(indices, value, output, indices_offset, value_offset, dim, line);
    let (idx_start, val_start, out_start) = (start.indices, start.value, start.output);
    let size = output.shape(dim);
    let len = indices.shape(dim);
    let width = PLANE_DIM as usize;
    for j0 in range_stepped(0, len, width) {
        let j = j0 + lane as usize;
        // Past the line: an index no unit owns.
        let mut k = size;
        if j < len {
            k = checked_index::<I>(indices[idx_start + j * indices.stride(dim)], size);
        }
        // The entries of this batch the unit owns, as bits, in the line's order.
        let mut mine = 0u32;
        for s in 0..PLANE_DIM {
            let ks = plane_shuffle(k, s);
            if ks < size && ks % width == lane as usize {
                mine |= 1u32 << s;
            }
        }
        // Every unit combines its own entries at once (about one per unit on random indices),
        // instead of the plane taking the entries one after another.
        while mine != 0u32 {
            let s = mine.trailing_zeros();
            mine &= mine - 1u32;
            let e = j0 + s as usize;
            let ke = checked_index::<I>(indices[idx_start + e * indices.stride(dim)], size);
            let pos = out_start + ke * output.stride(dim);
            let v = value[val_start + e * value.stride(dim)];
            output[pos] = combine::<T>(output[pos], v, op);
        }
    }
}

/// Select-scatter along `dim`: `output[c with c[dim] = indices[j]] op= value[c with c[dim] = j]`
/// for a 1-D `indices`. One unit per output line along `dim`; deterministic, no atomics.
#[cube(launch_unchecked)]
pub fn select_scatter<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScatterOp,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_lines {
        terminate!();
    }
    let rank = output.rank();
    let mut val_start = value_offset;
    let mut out_start = 0;
    let mut rem = ABSOLUTE_POS;
    for i in 0..rank {
        let d = rank - 1 - i;
        if !(d == dim) {
            let size = output.shape(d);
            let coord = rem % size;
            rem /= size;
            val_start += coord * value.stride(d);
            out_start += coord * output.stride(d);
        }
    }
    let size = output.shape(dim);
    for j in 0..indices.shape(0) {
        let k = checked_index::<I>(indices[indices_offset + j * indices.stride(0)], size);
        if k < size {
            let pos = out_start + k * output.stride(dim);
            output[pos] = combine::<T>(output[pos], value[val_start + j * value.stride(dim)], op);
        }
    }
}
