//! The copy kernel: strided (optionally flipped) read, dtype cast, strided write. It makes
//! views contiguous, casts between dtypes, flips axes and writes `slice_assign` values.
use cubecl::prelude::*;

use cubecl::std::FastDivmod;

use crate::strided::{strided_offset, strided_offset_flipped};

/// How the copy converts each element.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CopyConvert {
    /// Numeric cast (`as`-like).
    Cast,
    /// To bool storage: `x != 0 ? 1 : 0`.
    ToBool,
}

/// `output[view pos] = convert(input[view pos])`, `pos` running over the iteration shape,
/// which both views share. `flip_mask` mirrors input coordinates of the flagged dimensions.
#[cube(launch_unchecked)]
pub fn copy_view<I: Numeric, O: Numeric>(
    input: &Tensor<I>,
    output: &mut Tensor<O>,
    in_offset: usize,
    out_offset: usize,
    num_elems: usize,
    flip_mask: u32,
    #[comptime] convert: CopyConvert,
    #[comptime] out_linear: bool,
    #[define(I, O)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_elems {
        terminate!();
    }
    let x = input[in_offset + strided_offset_flipped::<I>(input, ABSOLUTE_POS, flip_mask)];
    let y = match convert {
        CopyConvert::Cast => O::cast_from(x),
        CopyConvert::ToBool => O::cast_from(!(x == I::cast_from(0u32))),
    };
    if out_linear {
        output[out_offset + ABSOLUTE_POS] = y;
    } else {
        output[out_offset + strided_offset::<O>(output, ABSOLUTE_POS)] = y;
    }
}

/// `output[out_offset + r * out_stride + c] = input[in_offset + r * in_stride + c]` for every
/// row `r` and column `c < cols`: a same-dtype copy between two views whose rows are
/// contiguous (cat, slice_assign, contiguous copies), in vectors of `N`. Offsets, strides and
/// `cols` count vectors; `vectors` is `rows * cols`.
#[cube(launch_unchecked)]
pub fn copy_rows<T: Numeric, N: Size>(
    input: &Tensor<Vector<T, N>>,
    output: &mut Tensor<Vector<T, N>>,
    in_offset: usize,
    in_stride: usize,
    out_offset: usize,
    out_stride: usize,
    cols: FastDivmod<usize>,
    vectors: usize,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let (r, c) = cols.div_mod(ABSOLUTE_POS);
    output[out_offset + r * out_stride + c] = input[in_offset + r * in_stride + c];
}

/// Fills a contiguous buffer with one value.
#[cube(launch_unchecked)]
pub fn fill<T: Numeric>(output: &mut Tensor<T>, value: InputScalar, #[define(T)] _dtype: StorageType) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    output[ABSOLUTE_POS] = value.get::<T>();
}
