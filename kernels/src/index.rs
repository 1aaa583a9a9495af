//! Indexed reads and writes along one dimension: gather, select, scatter and select with
//! accumulation. Indices out of `[0, size)` read 0 and write nothing.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::strided::{seq_offset, view_offsets};

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
/// unused. The buffers are arrays (no shapes or strides uploaded at launch); `len` is the
/// number of outputs.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gather<T: Numeric, I: Int>(
    tensor: &Array<T>,
    indices: &Array<I>,
    output: &mut Array<T>,
    len: usize,
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
    if ABSOLUTE_POS >= len {
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

/// [`gather`](fn@gather) along the last dimension with contiguous indices, `N` outputs per unit: one
/// vector of indices read, `N` gathered elements written as one vector. Row `r` of the indices
/// (`cols` vectors each) reads the tensor's row at `tensor_offset + seq_offset(r, rows,
/// row_strides)`, its elements `dim_stride` apart. `indices_offset` counts vectors.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn gather_rows<T: Numeric, I: Int, N: Size>(
    tensor: &Array<T>,
    indices: &Array<Vector<I, N>>,
    output: &mut Array<Vector<T, N>>,
    vectors: usize,
    cols: FastDivmod<usize>,
    tensor_offset: usize,
    indices_offset: usize,
    dim_size: usize,
    dim_stride: usize,
    rows: Sequence<FastDivmod<usize>>,
    row_strides: Sequence<usize>,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let (row, _) = cols.div_mod(ABSOLUTE_POS);
    let base = tensor_offset + seq_offset(row, &rows, &row_strides);
    let idx = indices[indices_offset + ABSOLUTE_POS];
    let mut y = Vector::<T, N>::empty();
    #[unroll]
    for j in 0..idx.vector_size() {
        let k = checked_index::<I>(idx[j], dim_size);
        let mut value = T::from_int(0);
        if k < dim_size {
            value = tensor[base + k * dim_stride];
        }
        y[j] = value;
    }
    output[ABSOLUTE_POS] = y;
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

/// [`scatter`](fn@scatter) with one plane of `width` units per line, `planes` lines per cube, for devices
/// with plane operations: the plane reads the line's indices `width` at a time (coalesced)
/// and broadcasts them; the unit that owns an output position (position modulo `width`)
/// combines the entries that land there, in the line's order. Every output position is
/// updated by one unit in that order, so the result is the sequential one, deterministic,
/// without atomics, and the units of a plane combine their entries at the same time. For
/// lines of fewer entries than a cube's units; longer ones go to [`scatter_line`](fn@scatter_line).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn scatter_plane<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScatterOp,
    #[comptime] width: usize,
    #[comptime] planes: usize,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    let line = CUBE_POS * planes + UNIT_POS as usize / width;
    // Uniform per plane: the shuffles below need every unit of the plane.
    if line >= num_lines {
        terminate!();
    }
    let lane = UNIT_POS as usize % width;
    let start = line_start::<T, I>(indices, value, output, indices_offset, value_offset, dim, line);
    let (idx_start, val_start, out_start) = (start.indices, start.value, start.output);
    let size = output.shape(dim);
    let out_stride = output.stride(dim);
    let len = indices.shape(dim);
    for j0 in range_stepped(0, len, width) {
        let j = j0 + lane;
        // Past the line: an index no unit owns.
        let mut k = size;
        if j < len {
            k = checked_index::<I>(indices[idx_start + j * indices.stride(dim)], size);
        }
        // The entries of this batch the unit owns, as bits, in the line's order.
        let mut mine = 0u32;
        #[unroll]
        for s in 0..comptime!(width as u32) {
            let ks = plane_shuffle(k, s);
            if ks < size && ks % width == lane {
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
            let pos = out_start + ke * out_stride;
            output[pos] = combine::<T>(output[pos], value[val_start + e * value.stride(dim)], op);
        }
    }
}

/// No bid yet for a position of [`scatter_line`].
const NO_BID: u32 = u32::MAX;

/// [`scatter`](fn@scatter) with one cube per line, the output line staged in `span` elements of shared
/// memory (at least the line's size), for lines of many entries. The cube takes the entries
/// `CUBE_DIM` at a time (coalesced) and combines those that land on one position in the line's
/// order: in each round, every pending entry bids its place in the batch for its position
/// (`fetch_min` in shared memory), the lowest bidder of each position combines, and the others
/// bid again in the next round (rounds per batch: the most entries of the batch on one
/// position). The result is the sequential one, deterministic, and the updates stay in shared
/// memory.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn scatter_line<T: Numeric, I: Int>(
    indices: &Tensor<I>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    indices_offset: usize,
    value_offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScatterOp,
    #[comptime] span: usize,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_lines {
        terminate!();
    }
    let unit = UNIT_POS as usize;
    let units = CUBE_DIM as usize;
    let start = line_start::<T, I>(indices, value, output, indices_offset, value_offset, dim, CUBE_POS);
    let size = output.shape(dim);
    let out_stride = output.stride(dim);
    let len = indices.shape(dim);
    let mut staged = SharedMemory::<T>::new(span);
    let bids = SharedMemory::<Atomic<u32>>::new(span);
    // Pending entries after each round, counted in two slots used in turn.
    let more = SharedMemory::<Atomic<u32>>::new(2usize);
    for k in range_stepped(unit, size, units) {
        staged[k] = output[start.output + k * out_stride];
        bids[k].store(NO_BID);
    }
    if unit < 2 {
        more[unit].store(0u32);
    }
    sync_cube();
    let mut round = 0usize;
    for j0 in range_stepped(0, len, units) {
        let j = j0 + unit;
        // Past the line: an index no unit bids for.
        let mut k = size;
        let mut v = T::from_int(0);
        if j < len {
            k = checked_index::<I>(indices[start.indices + j * indices.stride(dim)], size);
            v = value[start.value + j * value.stride(dim)];
        }
        let mut pending = k < size;
        let mut again = true;
        while again {
            if pending {
                bids[k].fetch_min(unit as u32);
            }
            sync_cube();
            let mut won = false;
            if pending {
                won = bids[k].load() == unit as u32;
            }
            if won {
                staged[k] = combine::<T>(staged[k], v, op);
            }
            // Every bid is read before the winners clear theirs.
            sync_cube();
            let slot = round % 2;
            if won {
                bids[k].store(NO_BID);
                pending = false;
            }
            if pending {
                more[slot].fetch_add(1u32);
            }
            sync_cube();
            again = more[slot].load() > 0u32;
            // The other slot was last read before this round's first barrier.
            if unit == 0 {
                more[1 - slot].store(0u32);
            }
            round += 1;
        }
    }
    // Each unit writes back the positions it staged; the last round's combines came before
    // its barriers.
    for k in range_stepped(unit, size, units) {
        output[start.output + k * out_stride] = staged[k];
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
