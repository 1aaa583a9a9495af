//! [`reduce_per_unit`](fn@crate::reduce::reduce_per_unit) on `N` adjacent lines per unit, for
//! reductions along a dimension that is not the innermost (a bias gradient's sum over the
//! batch, batch norm's statistics): each step along the reduced dimension loads one vector
//! holding the `N` lines' elements, where the scalar kernel loads one element per unit. The
//! lines fold lane by lane in the scalar kernel's order, so the bits are its bits.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::load;
use crate::reduce::{Acc, Bf16Bits, ReduceOp, acc_init, acc_push, write_output};
use crate::strided::seq_offset;

/// Unit `ABSOLUTE_POS` reduces lines `N * ABSOLUTE_POS ..` (row-major over every dimension
/// but the reduced one, whose innermost dimension is the input's contiguous innermost one);
/// line `l` starts at element `offset + seq_offset(l, lines, line_strides)` and has `len`
/// elements `stride` apart. `N` divides the innermost dimension, `offset`, `stride` and every
/// other line stride, so each load is one whole, aligned vector. `count` is the number of
/// units (`output` holds `count` vectors, and `indices` too with `with_indices`).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn reduce_per_unit_vec<T: Numeric, A: Numeric, O: Numeric, I: Numeric, N: Size>(
    input: &Array<Vector<T, N>>,
    output: &mut Array<Vector<O, N>>,
    indices: &mut Array<Vector<I, N>>,
    offset: usize,
    lines: Sequence<FastDivmod<usize>>,
    line_strides: Sequence<usize>,
    len: usize,
    stride: usize,
    count: usize,
    #[comptime] op: ReduceOp,
    #[comptime] with_indices: bool,
    #[comptime] bits: Bf16Bits,
    #[define(T, A, O, I)] _dtypes: [StorageType; 4],
) {
    if ABSOLUTE_POS >= count {
        terminate!();
    }
    let start = (offset + seq_offset(ABSOLUTE_POS * N::value(), &lines, &line_strides)) / N::value();
    let step = stride / N::value();
    let init = acc_init::<A>(op);
    let mut values = Vector::<A, N>::new(init.value);
    let mut found = Vector::<u32, N>::new(0u32);
    for k in 0..len {
        let v = input[start + k * step];
        #[unroll]
        for lane in 0..N::value() {
            let mut acc = Acc::<A> { value: values[lane], index: found[lane] };
            acc_push::<A>(&mut acc, load::<T, A>(v[lane], bits.input), k as u32, k == 0, op);
            values[lane] = acc.value;
            found[lane] = acc.index;
        }
    }
    let mut out = Vector::<O, N>::empty();
    let mut out_indices = Vector::<I, N>::empty();
    #[unroll]
    for lane in 0..N::value() {
        let acc = Acc::<A> { value: values[lane], index: found[lane] };
        out[lane] = write_output::<A, O>(acc, len, op, with_indices, bits.output);
        out_indices[lane] = I::cast_from(found[lane]);
    }
    output[ABSOLUTE_POS] = out;
    if with_indices {
        indices[ABSOLUTE_POS] = out_indices;
    }
}
