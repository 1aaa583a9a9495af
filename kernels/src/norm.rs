//! Layer normalisation over the last dimension, fused: one unit per row computes the mean,
//! the (biased) variance of the centred values, and writes `(x - mean) / sqrt(var + eps) ·
//! gamma + beta`.
use cubecl::prelude::*;

use crate::bf16::{load, store};

/// `x` is a view `[rows.., d]`; `gamma` and `beta` views of length `d`; `output` contiguous.
/// With `bits`, all four are bf16 held as bits in u16 ([`load`](fn@crate::bf16::load),
/// [`store`](fn@crate::bf16::store)); the math runs in `A`.
#[cube(launch_unchecked)]
pub fn layer_norm<T: Numeric, A: Float>(
    x: &Tensor<T>,
    gamma: &Tensor<T>,
    beta: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    gamma_offset: usize,
    beta_offset: usize,
    epsilon: InputScalar,
    num_rows: usize,
    #[comptime] has_beta: bool,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    let row = ABSOLUTE_POS;
    if row >= num_rows {
        terminate!();
    }
    let rank = x.rank();
    let d = x.shape(rank - 1);
    let stride = x.stride(rank - 1);
    // Offset of the row in the (strided) input.
    let mut start = x_offset;
    let mut rem = row;
    for i in 1..rank {
        let dim = rank - 1 - i;
        start += (rem % x.shape(dim)) * x.stride(dim);
        rem /= x.shape(dim);
    }
    let mut sum = A::new(0.0);
    for k in 0..d {
        sum += load::<T, A>(x[start + k * stride], bits);
    }
    let mean = sum / A::cast_from(d);
    let mut sq = A::new(0.0);
    for k in 0..d {
        let c = load::<T, A>(x[start + k * stride], bits) - mean;
        sq += c * c;
    }
    let denom = A::sqrt(sq / A::cast_from(d) + epsilon.get::<A>());
    for k in 0..d {
        let c = load::<T, A>(x[start + k * stride], bits) - mean;
        let mut y = c / denom * load::<T, A>(gamma[gamma_offset + k * gamma.stride(0)], bits);
        if has_beta {
            y += load::<T, A>(beta[beta_offset + k * beta.stride(0)], bits);
        }
        output[row * d + k] = store::<T, A>(y, bits);
    }
}
