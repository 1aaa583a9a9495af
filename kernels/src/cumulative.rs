//! Cumulative scans along one dimension: one unit per line, a sequential scan.
use cubecl::prelude::*;

use crate::strided::line_start;

/// A scan.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ScanOp {
    Sum,
    Prod,
    Min,
    Max,
}

/// `output` is contiguous with the input view's shape; one unit per line along `dim`. The
/// running value is kept in `A` (f32 for half-precision inputs, `T` otherwise).
#[cube(launch_unchecked)]
pub fn cumulative<T: Numeric, A: Numeric>(
    input: &Tensor<T>,
    output: &mut Tensor<T>,
    offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] op: ScanOp,
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
    let mut acc = A::cast_from(input[in_start]);
    output[out_start] = T::cast_from(acc);
    for k in 1..len {
        let x = A::cast_from(input[in_start + k * in_stride]);
        acc = match op {
            ScanOp::Sum => acc + x,
            ScanOp::Prod => acc * x,
            ScanOp::Min => select(x < acc || !(x == x), x, acc),
            ScanOp::Max => select(x > acc || !(x == x), x, acc),
        };
        output[out_start + k * out_stride] = T::cast_from(acc);
    }
}
