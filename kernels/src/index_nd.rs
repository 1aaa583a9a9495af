//! Multi-dimensional gather and scatter (`gather_nd`, `scatter_nd`): the last dimension of
//! `indices` ([n, k] once flattened) holds k coordinates into the first k dimensions of
//! `data`, each naming a slice `data[c0, .., ck-1, ..]` of `slice` elements. Every tensor is
//! contiguous. Out-of-range coordinates read 0 and write nothing.
//!
//! `scatter_nd` applies the updates in index order, as a sequential loop would: when several
//! index tuples name the same slice, the first of them (found with an atomic minimum) owns
//! the slice and folds every later tuple's values into it in order. The result is
//! deterministic for every reduction, including `Assign` (the last write wins); the owner's
//! scan costs O(n) per slice element, which suits the small and medium n these ops see.
use cubecl::prelude::*;

/// How `scatter_nd` combines the destination with a value (Burn's `IndexingUpdateOp`).
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ScatterNdOp {
    Assign,
    Add,
    Mul,
    Min,
    Max,
}

/// No slice: the row of an index tuple with a coordinate out of range.
const NO_ROW: u32 = u32::MAX;

/// The slice (row) that index tuple `n` names, counted in slices, or `NO_ROW`.
#[cube]
fn row_of<T: Numeric, I: Int>(data: &Tensor<T>, indices: &Tensor<I>, n: usize, k: usize) -> u32 {
    let mut row = 0u64;
    let mut valid = true;
    let mut mult = 1u64;
    for i in 0..k {
        let j = k - 1 - i;
        let index = indices[n * k + j];
        let size = data.shape(j);
        valid = valid && index >= I::new(0) && u64::cast_from(index) < size as u64;
        row += u64::cast_from(index) * mult;
        mult *= size as u64;
    }
    select(valid, u32::cast_from(row), comptime!(NO_ROW))
}

/// `output[n, s] = data[indices[n], s]` for every tuple `n` and slice element `s`.
#[cube(launch_unchecked)]
pub fn gather_nd<T: Numeric, I: Int>(
    data: &Tensor<T>,
    indices: &Tensor<I>,
    output: &mut Tensor<T>,
    k: usize,
    slice: usize,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let n = ABSOLUTE_POS / slice;
    let s = ABSOLUTE_POS % slice;
    let row = row_of::<T, I>(data, indices, n, k);
    let mut value = T::from_int(0);
    if !(row == comptime!(NO_ROW)) {
        value = data[row as usize * slice + s];
    }
    output[ABSOLUTE_POS] = value;
}

/// First pass of `scatter_nd`: `rows[n]` = the row tuple `n` names, and `owner[row]` = the
/// smallest tuple naming it (`owner` starts at `u32::MAX`).
#[cube(launch_unchecked)]
pub fn scatter_nd_rows<T: Numeric, I: Int>(
    data: &Tensor<T>,
    indices: &Tensor<I>,
    rows: &mut Tensor<u32>,
    owner: &mut Tensor<Atomic<u32>>,
    k: usize,
    #[define(T, I)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= rows.len() {
        terminate!();
    }
    let row = row_of::<T, I>(data, indices, ABSOLUTE_POS, k);
    rows[ABSOLUTE_POS] = row;
    if !(row == comptime!(NO_ROW)) {
        owner[row as usize].fetch_min(ABSOLUTE_POS as u32);
    }
}

/// Second pass of `scatter_nd`: the unit of (tuple `n`, element `s`) where `n` owns its row
/// folds the values of `n` and of every later tuple naming the same row, in order, into
/// `output` (a copy of the destination).
#[cube(launch_unchecked)]
pub fn scatter_nd_apply<T: Numeric>(
    rows: &Tensor<u32>,
    owner: &Tensor<Atomic<u32>>,
    values: &Tensor<T>,
    output: &mut Tensor<T>,
    slice: usize,
    #[comptime] op: ScatterNdOp,
    #[define(T)] _dtype: StorageType,
) {
    let tuples = rows.len();
    if ABSOLUTE_POS >= tuples * slice {
        terminate!();
    }
    let n = ABSOLUTE_POS / slice;
    let s = ABSOLUTE_POS % slice;
    let row = rows[n];
    if !(row == comptime!(NO_ROW)) {
        if owner[row as usize].load() == n as u32 {
            let pos = row as usize * slice + s;
            let mut acc = output[pos];
            for m in n..tuples {
                if rows[m] == row {
                    acc = combine::<T>(acc, values[m * slice + s], op);
                }
            }
            output[pos] = acc;
        }
    }
}

#[cube]
fn combine<T: Numeric>(dst: T, value: T, #[comptime] op: ScatterNdOp) -> T {
    match op {
        ScatterNdOp::Assign => value,
        ScatterNdOp::Add => dst + value,
        ScatterNdOp::Mul => dst * value,
        // Comparisons as a sequential loop makes them: a NaN value never replaces.
        ScatterNdOp::Min => select(value < dst, value, dst),
        ScatterNdOp::Max => select(value > dst, value, dst),
    }
}
