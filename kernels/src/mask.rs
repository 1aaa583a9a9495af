//! `mask_where` and `mask_fill`: pick `value` where the mask is set.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::strided::seq_offset;

/// `out = mask != 0 ? value : tensor`; all three operands are views over the output shape
/// `shape` (their buffers, offsets and strides: see [`seq_offset`](fn@seq_offset)).
/// With `value_scalar`, the value is the scalar argument and `value` is unused.
#[cube(launch_unchecked)]
pub fn mask_where<T: Numeric, B: Numeric>(
    tensor: &Array<T>,
    mask: &Array<B>,
    value: &Array<T>,
    output: &mut Array<T>,
    tensor_offset: usize,
    mask_offset: usize,
    value_offset: usize,
    shape: Sequence<FastDivmod<usize>>,
    tensor_strides: Sequence<usize>,
    mask_strides: Sequence<usize>,
    value_strides: Sequence<usize>,
    scalar: InputScalar,
    #[comptime] value_scalar: bool,
    #[define(T, B)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let m = mask[mask_offset + seq_offset(ABSOLUTE_POS, &shape, &mask_strides)];
    let out = if !(m == B::cast_from(0u32)) {
        if value_scalar {
            scalar.get::<T>()
        } else {
            value[value_offset + seq_offset(ABSOLUTE_POS, &shape, &value_strides)]
        }
    } else {
        tensor[tensor_offset + seq_offset(ABSOLUTE_POS, &shape, &tensor_strides)]
    };
    output[ABSOLUTE_POS] = out;
}
