//! Symmetric 8-bit quantization (Burn's `Q8F` and `Q8S` values), per tensor or per block of
//! `block` consecutive elements, and back.
//!
//! `q = clamp(round(x / s), lo, hi)`, rounding half away from zero, and `x = s * q`, in f32;
//! a scale of 0 (an all-zero tensor or block) is read as 0.1, as burn-ndarray does. Scales are
//! f32. Quantized values live in an i8 buffer, and element `p` of that buffer (its position
//! there, not its place in a view) belongs to block `p / block`: views over the values keep
//! their scales without moving them.
use cubecl::prelude::*;

use crate::strided::{read_view, strided_offset, strided_offset_flipped};

/// The integer range of the quantized values.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum QuantRange {
    /// `[-128, 127]` (Burn's `Q8F`).
    Full,
    /// `[-127, 127]` (Burn's `Q8S`).
    Symmetric,
}

/// How [`requantize_blocks`](fn@requantize_blocks) finds the source of each output element.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Gather {
    /// Through the values' view (its shape is the output's), mirrored on `flip_mask`.
    View,
    /// `select` along `dim`: the output's coordinate on `dim` indexes a 1-D index tensor.
    Select,
}

#[cube]
fn range_lo(#[comptime] range: QuantRange) -> f32 {
    match range {
        QuantRange::Full => f32::new(-128.0),
        QuantRange::Symmetric => f32::new(-127.0),
    }
}

#[cube]
fn range_hi(#[comptime] _range: QuantRange) -> f32 {
    f32::new(127.0)
}

/// The scale of a block whose largest magnitude is `max_abs`: `2 max_abs / (hi - lo)`, the
/// operations Burn's `compute_q_params` does.
#[cube]
fn scale_of(max_abs: f32, #[comptime] range: QuantRange) -> f32 {
    (max_abs * 2.0f32) / (range_hi(range) - range_lo(range))
}

/// The scale used to compute: 0 becomes 0.1.
#[cube]
fn usable_scale(scale: f32) -> f32 {
    select(scale == 0.0f32, 0.1f32, scale)
}

/// `clamp(round(x / scale), lo, hi)`, rounding half away from zero like Rust's `f32::round`;
/// NaN gives 0.
#[cube]
fn quantize_one(x: f32, scale: f32, #[comptime] range: QuantRange) -> i8 {
    let y = x / usable_scale(scale);
    let a = f32::abs(y);
    let whole = f32::floor(a);
    // `a - whole` is exact, so the tie test is too (`floor(a + 0.5)` is not).
    let mut r = whole;
    if a - whole >= 0.5f32 {
        r = whole + 1.0f32;
    }
    if y < 0.0f32 {
        r = 0.0f32 - r;
    }
    let lo = range_lo(range);
    let hi = range_hi(range);
    if r < lo {
        r = lo;
    }
    if r > hi {
        r = hi;
    }
    if !(y == y) {
        r = 0.0f32;
    }
    i8::cast_from(r)
}

/// `s * q` in f32.
#[cube]
fn dequantize_one(q: i8, scale: f32) -> f32 {
    usable_scale(scale) * f32::cast_from(q)
}

/// Turns the largest magnitude of each block into its scale, in place.
#[cube(launch_unchecked)]
pub fn scales_from_max_abs(max_abs: &mut Tensor<f32>, blocks: usize, #[comptime] range: QuantRange) {
    if ABSOLUTE_POS >= blocks {
        terminate!();
    }
    max_abs[ABSOLUTE_POS] = scale_of(max_abs[ABSOLUTE_POS], range);
}

/// Quantizes the `n` elements of a float view (row-major order) into a contiguous i8 output;
/// element `pos` uses `scales[pos / block]` (`block >= n` for one scale per tensor).
#[cube(launch_unchecked)]
pub fn quantize_symmetric<F: Float>(
    input: &Tensor<F>,
    scales: &Tensor<f32>,
    output: &mut Tensor<i8>,
    offset: usize,
    n: usize,
    block: usize,
    #[comptime] range: QuantRange,
    #[comptime] linear: bool,
    #[define(F)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= n {
        terminate!();
    }
    let x = f32::cast_from(read_view::<F>(input, offset, ABSOLUTE_POS, linear));
    output[ABSOLUTE_POS] = quantize_one(x, scales[ABSOLUTE_POS / block], range);
}

/// Dequantizes the `n` elements of a view over quantized values into a contiguous float
/// output; the value at buffer position `p` uses `scales[p / block]`.
#[cube(launch_unchecked)]
pub fn dequantize_symmetric<F: Float>(
    values: &Tensor<i8>,
    scales: &Tensor<f32>,
    output: &mut Tensor<F>,
    offset: usize,
    n: usize,
    block: usize,
    #[define(F)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= n {
        terminate!();
    }
    let p = offset + strided_offset::<i8>(values, ABSOLUTE_POS);
    output[ABSOLUTE_POS] = F::cast_from(dequantize_one(values[p], scales[p / block]));
}

/// Where an output element of [`requantize_blocks`] comes from.
#[derive(CubeType, Clone, Copy)]
struct Source {
    /// Buffer position of the value (0 when `valid` is false).
    pos: usize,
    /// False for a `select` index out of range (the element reads as 0).
    valid: bool,
}

#[cube]
fn source<I: Int>(
    values: &Tensor<i8>,
    indices: &Tensor<I>,
    out_values: &Tensor<i8>,
    values_offset: usize,
    indices_offset: usize,
    pos: usize,
    flip_mask: u32,
    dim: usize,
    #[comptime] gather: Gather,
) -> Source {
    match gather {
        Gather::View => Source {
            pos: values_offset + strided_offset_flipped::<i8>(values, pos, flip_mask),
            valid: true,
        },
        Gather::Select => {
            let rank = out_values.rank();
            let mut offset = values_offset;
            let mut rem = pos;
            let mut k = 0;
            for i in 0..rank {
                let d = rank - 1 - i;
                let size = out_values.shape(d);
                let coord = rem % size;
                rem /= size;
                if d == dim {
                    k = coord;
                } else {
                    offset += coord * values.stride(d);
                }
            }
            let index = indices[indices_offset + k * indices.stride(0)];
            let size = values.shape(dim);
            let valid = index >= I::new(0) && u64::cast_from(index) < size as u64;
            let at = select(valid, usize::cast_from(index), 0);
            Source {
                pos: select(valid, offset + at * values.stride(dim), 0),
                valid,
            }
        }
    }
}

/// Copies per-block quantized values into a new contiguous layout, chunk by chunk: chunk `c`
/// (output elements `[c block, (c + 1) block)`, the last one possibly shorter) keeps its
/// values and their scale when all of them come from one source block, and is requantized
/// from the dequantized values with a fresh scale otherwise. `n` output elements, `chunks`
/// chunks; with [`Gather::View`], `indices` is unused.
#[cube(launch_unchecked)]
pub fn requantize_blocks<I: Int>(
    values: &Tensor<i8>,
    scales: &Tensor<f32>,
    indices: &Tensor<I>,
    out_values: &mut Tensor<i8>,
    out_scales: &mut Tensor<f32>,
    values_offset: usize,
    indices_offset: usize,
    n: usize,
    chunks: usize,
    block: usize,
    flip_mask: u32,
    dim: usize,
    #[comptime] range: QuantRange,
    #[comptime] gather: Gather,
    #[define(I)] _dtype: StorageType,
) {
    let chunk = ABSOLUTE_POS;
    if chunk >= chunks {
        terminate!();
    }
    let start = chunk * block;
    let mut end = start + block;
    if end > n {
        end = n;
    }
    let first = source::<I>(values, indices, out_values, values_offset, indices_offset, start, flip_mask, dim, gather);
    let first_block = first.pos / block;
    let mut same = first.valid;
    let mut max_abs = 0.0f32;
    for pos in start..end {
        let src = source::<I>(values, indices, out_values, values_offset, indices_offset, pos, flip_mask, dim, gather);
        let b = src.pos / block;
        if !src.valid || !(b == first_block) {
            same = false;
        }
        let v = select(src.valid, f32::abs(dequantize_one(values[src.pos], scales[b])), 0.0f32);
        if v > max_abs {
            max_abs = v;
        }
    }
    if same {
        out_scales[chunk] = scales[first_block];
        for pos in start..end {
            let src = source::<I>(values, indices, out_values, values_offset, indices_offset, pos, flip_mask, dim, gather);
            out_values[pos] = values[src.pos];
        }
    } else {
        let scale = scale_of(max_abs, range);
        out_scales[chunk] = scale;
        for pos in start..end {
            let src = source::<I>(values, indices, out_values, values_offset, indices_offset, pos, flip_mask, dim, gather);
            let v = select(src.valid, dequantize_one(values[src.pos], scales[src.pos / block]), 0.0f32);
            out_values[pos] = quantize_one(v, scale, range);
        }
    }
}
