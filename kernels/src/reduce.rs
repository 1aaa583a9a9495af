//! Reductions along one dimension.
//!
//! The input view is `[outer.., dim, inner..]`; the output is contiguous with `dim` of size 1.
//! Line `l` (numbered row-major over every dimension but `dim`) starts at
//! `offset + seq_offset(l, lines, line_strides)` and has `len` elements `stride` apart, or,
//! where `axis` is not empty, elements that lie row-major over the dimensions `axis` with
//! `axis_strides` (a reduced dimension merged from several by a reshape of a view, which no
//! single stride describes: batch norm's `x.swap_dims(0, 1).reshape([C, N*H*W])`).
//! Two strategies share one accumulation routine: one unit per output element (short reduced
//! dimensions, many outputs) and one cube per output element with a shared-memory tree
//! (long reduced dimensions, few outputs). Elements are folded in an accumulator type `A`
//! (f32 for f16 and bf16 inputs, so that sums and means of many elements don't overflow).
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::strided::seq_offset;

/// Where element `k` of a line lies from the line's start: `k * stride`, or row-major over
/// `axis` with `axis_strides` where `axis` is not empty (see the module docs).
#[cube]
fn element(k: usize, stride: usize, axis: &Sequence<FastDivmod<usize>>, axis_strides: &Sequence<usize>) -> usize {
    if comptime!(axis.len() == 0) { k * stride } else { seq_offset(k, axis, axis_strides) }
}

/// A reduction.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    Prod,
    Mean,
    Max,
    Min,
    /// Max of absolute values.
    MaxAbs,
    /// Max that is NaN where any element is NaN (Nx's `reduce_max`).
    NanMax,
    /// Min that is NaN where any element is NaN (Nx's `reduce_min`).
    NanMin,
    /// First index of the max (output: an int dtype).
    ArgMax,
    /// First index of the min (output: an int dtype).
    ArgMin,
    /// Any element != 0 (output: bool storage).
    Any,
    /// All elements != 0 (output: bool storage).
    All,
}

/// Accumulator state: a value and, for arg reductions, its index.
#[derive(CubeType, Clone, Copy)]
pub struct Acc<T: Numeric> {
    /// The running value.
    pub value: T,
    /// The running index (arg reductions).
    pub index: u32,
}

#[cube]
pub(crate) fn acc_init<T: Numeric>(#[comptime] op: ReduceOp) -> Acc<T> {
    // `let mut` makes cubecl declare runtime variables instead of constants: the
    // accumulator's fields are updated in place afterwards.
    let mut value = T::from_int(0);
    #[allow(unused_mut)]
    let mut index = 0u32;
    match op {
        ReduceOp::Prod | ReduceOp::All => {
            value = T::from_int(1);
        }
        ReduceOp::Max | ReduceOp::ArgMax | ReduceOp::NanMax => {
            value = T::min_value();
        }
        ReduceOp::Min | ReduceOp::ArgMin | ReduceOp::NanMin => {
            value = T::max_value();
        }
        _ => {}
    }
    Acc::<T> { value, index }
}

/// Folds element `x` (at index `k` of the reduced dimension) into the accumulator; `first`
/// says the accumulator holds nothing yet. Max/min skip NaN unless every element is NaN, as
/// burn-ndarray does, NanMax/NanMin keep the first NaN they meet, and arg reductions keep the
/// first index on ties.
#[cube]
pub(crate) fn acc_push<T: Numeric>(acc: &mut Acc<T>, x: T, k: u32, first: bool, #[comptime] op: ReduceOp) {
    match op {
        ReduceOp::Sum | ReduceOp::Mean => {
            acc.value += x;
        }
        ReduceOp::Prod => {
            acc.value *= x;
        }
        ReduceOp::Max => {
            if first || x > acc.value || !(acc.value == acc.value) {
                acc.value = x;
            }
        }
        ReduceOp::Min => {
            if first || x < acc.value || !(acc.value == acc.value) {
                acc.value = x;
            }
        }
        ReduceOp::NanMax => {
            if first || !(x == x) || (acc.value == acc.value && x > acc.value) {
                acc.value = x;
            }
        }
        ReduceOp::NanMin => {
            if first || !(x == x) || (acc.value == acc.value && x < acc.value) {
                acc.value = x;
            }
        }
        ReduceOp::MaxAbs => {
            let a = select(x < T::from_int(0), T::from_int(0) - x, x);
            if first || a > acc.value || !(acc.value == acc.value) {
                acc.value = a;
            }
        }
        ReduceOp::ArgMax => {
            if first || x > acc.value || (!(acc.value == acc.value) && x == x) {
                acc.value = x;
                acc.index = k;
            }
        }
        ReduceOp::ArgMin => {
            if first || x < acc.value || (!(acc.value == acc.value) && x == x) {
                acc.value = x;
                acc.index = k;
            }
        }
        ReduceOp::Any => {
            if !(x == T::from_int(0)) {
                acc.value = T::from_int(1);
            }
        }
        ReduceOp::All => {
            if x == T::from_int(0) {
                acc.value = T::from_int(0);
            }
        }
    }
}

/// Merges two partial accumulators; `other` covers later indices than `acc`.
#[cube]
pub(crate) fn acc_merge<T: Numeric>(acc: &mut Acc<T>, other: Acc<T>, other_valid: bool, #[comptime] op: ReduceOp) {
    if other_valid {
        match op {
            ReduceOp::Sum | ReduceOp::Mean => {
                acc.value += other.value;
            }
            ReduceOp::Prod => {
                acc.value *= other.value;
            }
            ReduceOp::Max | ReduceOp::MaxAbs => {
                if other.value > acc.value || !(acc.value == acc.value) {
                    acc.value = other.value;
                }
            }
            ReduceOp::Min => {
                if other.value < acc.value || !(acc.value == acc.value) {
                    acc.value = other.value;
                }
            }
            ReduceOp::NanMax => {
                if !(other.value == other.value) || (acc.value == acc.value && other.value > acc.value) {
                    acc.value = other.value;
                }
            }
            ReduceOp::NanMin => {
                if !(other.value == other.value) || (acc.value == acc.value && other.value < acc.value) {
                    acc.value = other.value;
                }
            }
            ReduceOp::ArgMax => {
                let better = other.value > acc.value
                    || (!(acc.value == acc.value) && other.value == other.value);
                let tie_earlier = other.value == acc.value && other.index < acc.index;
                if better || tie_earlier {
                    acc.value = other.value;
                    acc.index = other.index;
                }
            }
            ReduceOp::ArgMin => {
                let better = other.value < acc.value
                    || (!(acc.value == acc.value) && other.value == other.value);
                let tie_earlier = other.value == acc.value && other.index < acc.index;
                if better || tie_earlier {
                    acc.value = other.value;
                    acc.index = other.index;
                }
            }
            ReduceOp::Any => {
                acc.value = select(!(other.value == T::from_int(0)), T::from_int(1), acc.value);
            }
            ReduceOp::All => {
                acc.value = select(other.value == T::from_int(0), T::from_int(0), acc.value);
            }
        }
    }
}

/// The value written to the main output. With `with_indices`, arg reductions write their
/// value there and their index to the indices output.
#[cube]
pub(crate) fn acc_write<T: Numeric, O: Numeric>(acc: Acc<T>, len: usize, #[comptime] op: ReduceOp, #[comptime] with_indices: bool) -> O {
    if with_indices {
        O::cast_from(acc.value)
    } else {
        match op {
            ReduceOp::ArgMax | ReduceOp::ArgMin => O::cast_from(acc.index),
            ReduceOp::Mean => O::cast_from(acc.value / T::cast_from(len)),
            _ => O::cast_from(acc.value),
        }
    }
}

/// Which of a reduction's buffers hold bf16 as its bits in u16 (read through
/// [`load`](fn@crate::bf16::load), written through [`store`](fn@crate::bf16::store); the accumulator is f32).
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Bf16Bits {
    /// The input.
    pub input: bool,
    /// The output (the values; never the indices).
    pub output: bool,
}

/// [`acc_write`](fn@acc_write) to an output element of `O`, or with `bits` the bits of the bf16 nearest to the
/// value ([`store`](fn@crate::bf16::store)).
#[cube]
pub(crate) fn write_output<A: Numeric, O: Numeric>(acc: Acc<A>, len: usize, #[comptime] op: ReduceOp, #[comptime] with_indices: bool, #[comptime] bits: bool) -> O {
    if bits {
        store::<O, A>(acc_write::<A, A>(acc, len, op, with_indices), true)
    } else {
        acc_write::<A, O>(acc, len, op, with_indices)
    }
}

/// One unit per output element. With `with_indices`, arg reductions also write their index
/// to `indices` (otherwise `indices` is unused).
#[cube(launch_unchecked)]
pub fn reduce_per_unit<T: Numeric, A: Numeric, O: Numeric, I: Numeric>(
    input: &Array<T>,
    output: &mut Array<O>,
    indices: &mut Array<I>,
    offset: usize,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    len: usize,
    stride: usize,
    axis: Sequence<FastDivmod<usize>>,
    axis_strides: Sequence<usize>,
    #[comptime] op: ReduceOp,
    #[comptime] with_indices: bool,
    #[comptime] bits: Bf16Bits,
    #[define(T, A, O, I)] _dtypes: [StorageType; 4],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let start = offset + seq_offset(ABSOLUTE_POS, &lines, &line_strides);
    let mut acc = acc_init::<A>(op);
    for k in 0..len {
        acc_push::<A>(&mut acc, load::<T, A>(input[start + element(k, stride, &axis, &axis_strides)], bits.input), k as u32, k == 0, op);
    }
    output[ABSOLUTE_POS] = write_output::<A, O>(acc, len, op, with_indices, bits.output);
    if with_indices {
        indices[ABSOLUTE_POS] = I::cast_from(acc.index);
    }
}

/// `cube_size` units of one cube fold `[lo, hi)` of the line that starts at `start`, then merge
/// their partial results through a shared-memory tree. Every unit gets the cube's total;
/// `lo < hi` for every cube (uniform), so the total is always valid.
#[cube]
fn cube_fold<T: Numeric, A: Numeric>(
    input: &Array<T>,
    start: usize,
    stride: usize,
    axis: &Sequence<FastDivmod<usize>>,
    axis_strides: &Sequence<usize>,
    lo: usize,
    hi: usize,
    #[comptime] op: ReduceOp,
    #[comptime] cube_size: usize,
    #[comptime] bits: bool,
) -> Acc<A> {
    let mut acc = acc_init::<A>(op);
    let mut k = lo + UNIT_POS as usize;
    let mut first = true;
    while k < hi {
        acc_push::<A>(&mut acc, load::<T, A>(input[start + element(k, stride, axis, axis_strides)], bits), k as u32, first, op);
        first = false;
        k += cube_size;
    }
    cube_merge::<A>(acc, !first, op, cube_size)
}

/// Merges the partial accumulators of a cube's `cube_size` units (`valid`: the unit folded at
/// least one element; unit `u` folded the elements after unit `u - 1`'s in each stride)
/// through a shared-memory tree. Every unit gets the cube's total.
#[cube]
pub(crate) fn cube_merge<A: Numeric>(acc: Acc<A>, valid: bool, #[comptime] op: ReduceOp, #[comptime] cube_size: usize) -> Acc<A> {
    let unit = UNIT_POS as usize;
    let mut shared_values = SharedMemory::<A>::new(cube_size);
    let mut shared_indices = SharedMemory::<u32>::new(cube_size);
    let mut shared_valid = SharedMemory::<u32>::new(cube_size);
    shared_values[unit] = acc.value;
    shared_indices[unit] = acc.index;
    shared_valid[unit] = select(valid, 1u32, 0u32);
    sync_cube();

    // A runtime value (cube_size is comptime and constants cannot be updated).
    let mut half = CUBE_DIM as usize / 2;
    while half > 0 {
        if unit < half {
            let mut mine = Acc::<A> {
                value: shared_values[unit],
                index: shared_indices[unit],
            };
            let other = Acc::<A> {
                value: shared_values[unit + half],
                index: shared_indices[unit + half],
            };
            let mine_valid = shared_valid[unit] == 1;
            let other_valid = shared_valid[unit + half] == 1;
            if mine_valid {
                acc_merge::<A>(&mut mine, other, other_valid, op);
            } else {
                mine.value = other.value;
                mine.index = other.index;
            }
            shared_values[unit] = mine.value;
            shared_indices[unit] = mine.index;
            shared_valid[unit] = select(mine_valid || other_valid, 1u32, 0u32);
        }
        sync_cube();
        half /= 2;
    }
    Acc::<A> {
        value: shared_values[0],
        index: shared_indices[0],
    }
}

/// One cube per output element (`CUBE_POS`), `cube_size` units striding over the line, then a
/// shared-memory tree.
#[cube(launch_unchecked)]
pub fn reduce_per_cube<T: Numeric, A: Numeric, O: Numeric, I: Numeric>(
    input: &Array<T>,
    output: &mut Array<O>,
    indices: &mut Array<I>,
    offset: usize,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    len: usize,
    stride: usize,
    axis: Sequence<FastDivmod<usize>>,
    axis_strides: Sequence<usize>,
    #[comptime] op: ReduceOp,
    #[comptime] cube_size: usize,
    #[comptime] with_indices: bool,
    #[comptime] bits: Bf16Bits,
    #[define(T, A, O, I)] _dtypes: [StorageType; 4],
) {
    let out_pos = CUBE_POS;
    // Uniform per cube: a cube past the end leaves as a whole, before any barrier.
    if out_pos >= output.len() {
        terminate!();
    }
    let start = offset + seq_offset(out_pos, &lines, &line_strides);
    let total = cube_fold::<T, A>(input, start, stride, &axis, &axis_strides, 0, len, op, cube_size, bits.input);
    if UNIT_POS == 0 {
        output[out_pos] = write_output::<A, O>(total, len, op, with_indices, bits.output);
        if with_indices {
            indices[out_pos] = I::cast_from(total.index);
        }
    }
}

/// First pass of a split reduction, for few long lines: cube `CUBE_POS` folds chunk
/// `CUBE_POS % splits` (`chunk` elements, the last one shorter, none empty) of line
/// `CUBE_POS / splits` and writes its partial value and index at `CUBE_POS`.
#[cube(launch_unchecked)]
pub fn reduce_split<T: Numeric, A: Numeric>(
    input: &Array<T>,
    partial_values: &mut Array<A>,
    partial_indices: &mut Array<u32>,
    offset: usize,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    len: usize,
    stride: usize,
    axis: Sequence<FastDivmod<usize>>,
    axis_strides: Sequence<usize>,
    splits: usize,
    chunk: usize,
    #[comptime] op: ReduceOp,
    #[comptime] cube_size: usize,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let pos = CUBE_POS;
    // Uniform per cube: a cube past the end leaves as a whole, before any barrier.
    if pos >= partial_values.len() {
        terminate!();
    }
    let line = pos / splits;
    let lo = (pos % splits) * chunk;
    let hi = select(lo + chunk < len, lo + chunk, len);
    let start = offset + seq_offset(line, &lines, &line_strides);
    let total = cube_fold::<T, A>(input, start, stride, &axis, &axis_strides, lo, hi, op, cube_size, bits);
    if UNIT_POS == 0 {
        partial_values[pos] = total.value;
        partial_indices[pos] = total.index;
    }
}

/// Second pass of a split reduction: one unit per line merges the line's `splits` partial
/// results in order. `len` is the length of the reduced dimension (for `Mean`).
#[cube(launch_unchecked)]
pub fn reduce_split_merge<A: Numeric, O: Numeric, I: Numeric>(
    partial_values: &Array<A>,
    partial_indices: &Array<u32>,
    output: &mut Array<O>,
    indices: &mut Array<I>,
    splits: usize,
    len: usize,
    #[comptime] op: ReduceOp,
    #[comptime] with_indices: bool,
    #[comptime] bits: bool,
    #[define(A, O, I)] _dtypes: [StorageType; 3],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let base = ABSOLUTE_POS * splits;
    let mut acc = Acc::<A> {
        value: partial_values[base],
        index: partial_indices[base],
    };
    for s in 1..splits {
        let other = Acc::<A> {
            value: partial_values[base + s],
            index: partial_indices[base + s],
        };
        acc_merge::<A>(&mut acc, other, true, op);
    }
    output[ABSOLUTE_POS] = write_output::<A, O>(acc, len, op, with_indices, bits);
    if with_indices {
        indices[ABSOLUTE_POS] = I::cast_from(acc.index);
    }
}
