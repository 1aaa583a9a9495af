//! Softmax and log-softmax along one dimension, fused: one unit per line makes the three
//! passes (max, sum of exponentials, normalisation) without intermediate tensors.
use cubecl::prelude::*;

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
    let rank = input.rank();
    let mut in_start = offset;
    let mut out_start = 0;
    let mut rem = ABSOLUTE_POS;
    for i in 0..rank {
        let d = rank - 1 - i;
        if !(d == dim) {
            let size = input.shape(d);
            let coord = rem % size;
            in_start += coord * input.stride(d);
            out_start += coord * output.stride(d);
            rem /= size;
        }
    }
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
