//! The middle of scaled dot-product attention: from raw scores `Q·Kᵀ` to probabilities, in
//! one pass per row: scale, soft cap, boolean and causal masks, additive bias, and a
//! NaN-safe softmax (a fully masked row gives zeros).
use cubecl::prelude::*;

/// `scores` is contiguous `[batch, heads, seq_q, seq_k]`; `mask` and `bias` are views with
/// the same shape (stride 0 where broadcast). One unit per row writes `probs` (contiguous).
///
/// `lowest` is the dtype's most negative finite value and `tiny` its smallest positive normal:
/// the row maximum is at least `lowest` and the row sum at least `tiny`, as in Burn's
/// reference attention.
#[cube(launch_unchecked)]
pub fn attention_probs<T: Float, B: Numeric, A: Float>(
    scores: &Tensor<T>,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    probs: &mut Tensor<T>,
    mask_offset: usize,
    bias_offset: usize,
    scale: InputScalar,
    softcap: InputScalar,
    lowest: InputScalar,
    tiny: InputScalar,
    num_rows: usize,
    #[comptime] has_mask: bool,
    #[comptime] has_bias: bool,
    #[comptime] has_softcap: bool,
    #[comptime] causal: bool,
    #[define(T, B, A)] _dtypes: [StorageType; 3],
) {
    let row = ABSOLUTE_POS;
    if row >= num_rows {
        terminate!();
    }
    let seq_q = scores.shape(2);
    let seq_k = scores.shape(3);
    let heads = scores.shape(1);
    let i = row % seq_q;
    let h = (row / seq_q) % heads;
    let b = row / (seq_q * heads);
    let start = row * seq_k;
    let mask_start = mask_offset + b * mask.stride(0) + h * mask.stride(1) + i * mask.stride(2);
    let bias_start = bias_offset + b * bias.stride(0) + h * bias.stride(1) + i * bias.stride(2);
    let scale = scale.get::<A>();
    let cap = softcap.get::<A>();
    // Keys after `i + seq_k - seq_q` are in the future (causal attention, aligned bottom-right).
    let last = i + seq_k;

    let mut max = lowest.get::<A>();
    for j in 0..seq_k {
        let s = logit::<T, B, A>(scores, mask, bias, start, mask_start, bias_start, j, scale, cap, last, seq_q, has_mask, has_bias, has_softcap, causal);
        if s.keep && s.value > max {
            max = s.value;
        }
    }
    let mut sum = A::new(0.0);
    for j in 0..seq_k {
        let s = logit::<T, B, A>(scores, mask, bias, start, mask_start, bias_start, j, scale, cap, last, seq_q, has_mask, has_bias, has_softcap, causal);
        if s.keep {
            sum += crate::math::exp::<A>(s.value - max);
        }
    }
    let t = tiny.get::<A>();
    sum = select(sum < t, t, sum);
    for j in 0..seq_k {
        let s = logit::<T, B, A>(scores, mask, bias, start, mask_start, bias_start, j, scale, cap, last, seq_q, has_mask, has_bias, has_softcap, causal);
        probs[start + j] = T::cast_from(select(s.keep, crate::math::exp::<A>(s.value - max) / sum, A::new(0.0)));
    }
}

/// A score after scaling, capping and bias, and whether a mask leaves it in.
#[derive(CubeType, Clone, Copy)]
pub struct Logit<A: Float> {
    pub value: A,
    pub keep: bool,
}

#[cube]
#[allow(clippy::too_many_arguments)]
fn logit<T: Float, B: Numeric, A: Float>(
    scores: &Tensor<T>,
    mask: &Tensor<B>,
    bias: &Tensor<T>,
    start: usize,
    mask_start: usize,
    bias_start: usize,
    j: usize,
    scale: A,
    cap: A,
    last: usize,
    seq_q: usize,
    #[comptime] has_mask: bool,
    #[comptime] has_bias: bool,
    #[comptime] has_softcap: bool,
    #[comptime] causal: bool,
) -> Logit<A> {
    let mut value = A::cast_from(scores[start + j]) * scale;
    if has_softcap {
        value = cap * crate::math::tanh::<A>(value / cap);
    }
    let mut keep = true;
    if has_mask {
        keep = mask[mask_start + j * mask.stride(3)] == B::from_int(0);
    }
    if causal {
        // j > i + (seq_k - seq_q)  ⟺  j + seq_q > i + seq_k
        keep = keep && j + seq_q <= last;
    }
    if has_bias {
        value += A::cast_from(bias[bias_start + j * bias.stride(3)]);
    }
    Logit::<A> { value, keep }
}
