//! `mask_where` and `mask_fill`: pick `value` where the mask is set.
use cubecl::prelude::*;

use crate::strided::strided_offset;

/// `out = mask != 0 ? value : tensor`; all three operands are views over the output shape.
/// With `value_scalar`, the value is the scalar argument and `value` is unused.
#[cube(launch_unchecked)]
pub fn mask_where<T: Numeric, B: Numeric>(
    tensor: &Tensor<T>,
    mask: &Tensor<B>,
    value: &Tensor<T>,
    output: &mut Tensor<T>,
    tensor_offset: usize,
    mask_offset: usize,
    value_offset: usize,
    scalar: InputScalar,
    #[comptime] value_scalar: bool,
    #[define(T, B)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let m = mask[mask_offset + strided_offset::<B>(mask, ABSOLUTE_POS)];
    let out = if !(m == B::cast_from(0u32)) {
        if value_scalar {
            scalar.get::<T>()
        } else {
            value[value_offset + strided_offset::<T>(value, ABSOLUTE_POS)]
        }
    } else {
        tensor[tensor_offset + strided_offset::<T>(tensor, ABSOLUTE_POS)]
    };
    output[ABSOLUTE_POS] = out;
}
