//! Softmax and log-softmax along one dimension, fused: one unit per line makes the three
//! passes (max, sum of exponentials, normalisation) without intermediate tensors.
use cubecl::prelude::*;

use crate::strided::line_start;

/// `output` is contiguous with the input view's shape. Sums run in `A` (f32 for half-precision
/// inputs, `T` otherwise). With `log`, writes log-softmax.
#[cube(launch_unchecked)]
pub fn softmax<T: Float, A: Float>(
    input: &Tensor<T>,
    output: &mut Tensor<T>,
    offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] log: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_lines {
        terminate!();
    }
    let start = line_start::<T, T>(input, output, ABSOLUTE_POS, dim);
    let in_start = offset + start.input;
    let out_start = start.output;
    let len = input.shape(dim);
    let in_stride = input.stride(dim);
    let out_stride = output.stride(dim);

    let mut max = A::cast_from(input[in_start]);
    for k in 1..len {
        let x = A::cast_from(input[in_start + k * in_stride]);
        max = select(x > max, x, max);
    }
    let mut sum = A::new(0.0);
    for k in 0..len {
        sum += A::exp(A::cast_from(input[in_start + k * in_stride]) - max);
    }
    let log_sum = A::ln(sum);
    for k in 0..len {
        let z = A::cast_from(input[in_start + k * in_stride]) - max;
        let y = if log { z - log_sum } else { A::exp(z) / sum };
        output[out_start + k * out_stride] = T::cast_from(y);
    }
}
