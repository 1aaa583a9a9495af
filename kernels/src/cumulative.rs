//! Cumulative scans along one dimension: one unit per line, a sequential scan.
use cubecl::prelude::*;

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
