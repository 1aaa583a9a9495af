//! `mask_where` and `mask_fill`: pick `value` where the mask is set.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::strided::seq_offset;

/// `out = mask != 0 ? value : tensor`; all three operands are views over the output shape
/// `shape` (their buffers, offsets and strides: see [`seq_offset`](fn@seq_offset)).
/// With `value_scalar`, the value is the scalar argument and `value` is unused. With `bits`
/// (a scalar value on bf16 held as bits in u16), the scalar is an f32 stored rounded to bf16
/// and every other element goes through f32 and back ([`load`](fn@crate::bf16::load),
/// [`store`](fn@crate::bf16::store)), as a select computed in f32 would give it.
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
    #[comptime] bits: bool,
    #[define(T, B)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let m = mask[mask_offset + seq_offset(ABSOLUTE_POS, &shape, &mask_strides)];
    let out = if !(m == B::cast_from(0u32)) {
        if value_scalar {
            if bits { store::<T, f32>(scalar.get::<f32>(), true) } else { scalar.get::<T>() }
        } else {
            value[value_offset + seq_offset(ABSOLUTE_POS, &shape, &value_strides)]
        }
    } else {
        let x = tensor[tensor_offset + seq_offset(ABSOLUTE_POS, &shape, &tensor_strides)];
        if bits { store::<T, f32>(load::<T, f32>(x, true), true) } else { x }
    };
    output[ABSOLUTE_POS] = out;
}
