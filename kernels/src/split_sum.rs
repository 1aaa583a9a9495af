//! The second pass of a split-K product (the manual-MMA convolution and matrix products,
//! [`crate::conv_mma`] and [`crate::matmul::mma`] / [`crate::matmul::tma`]): the `splits`
//! f32 partial sums, each a contiguous copy of the output, added in split order (no atomics:
//! the same bits on every run), plus the bias of the element's channel, cast to the output's
//! dtype once.
use cubecl::prelude::*;

/// `output[i] = T(Σ_s partial[s · vectors + i] + bias[channel])`, in vectors of `N`: `partial`
/// holds `splits` contiguous f32 copies of the output (`vectors` vectors each), summed in
/// order `s = 0, 1, ..`. With `has_bias`, element `e` belongs to channel `(e / spatial) %
/// channels` and gets `bias[bias_offset + channel · bias.stride(0)]` (a convolution's
/// `[b, c_out, spatial]` output).
///
/// The launcher guarantees: `partial` holds `splits · vectors` vectors, `splits` ≥ 1, and `N`
/// divides `spatial` (one channel per vector).
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn split_sum<T: Float, N: Size>(
    partial: &Array<Vector<f32, N>>,
    bias: &Tensor<T>,
    output: &mut Array<Vector<T, N>>,
    vectors: usize,
    splits: usize,
    bias_offset: usize,
    spatial: usize,
    channels: usize,
    #[comptime] has_bias: bool,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let i = ABSOLUTE_POS;
    let nv = output.vector_size();
    let mut sum = partial[i];
    for s in 1..splits {
        sum += partial[s * vectors + i];
    }
    let mut shift = 0.0f32;
    if has_bias {
        let channel = (i * nv / spatial) % channels;
        shift = f32::cast_from(bias[bias_offset + channel * bias.stride(0)]);
    }
    let mut out = Vector::<T, N>::empty();
    #[unroll]
    for e in 0..nv {
        out[e] = T::cast_from(sum[e] + shift);
    }
    output[i] = out;
}
