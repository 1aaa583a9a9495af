//! bf16 in f32 arithmetic, for devices without bf16 (where the backend holds bf16 tensors as
//! their bits in u16 and computes them in f32).
use cubecl::prelude::*;

/// The bf16 nearest to `x` (ties to even), as its 16 bits in the low half of a u32; NaN stays
/// a quiet NaN of its sign (rounding could carry its payload into infinity).
#[cube]
pub fn bf16_bits(x: f32) -> u32 {
    let bits = u32::reinterpret(x);
    let rounded = (bits + 0x7fffu32 + ((bits >> 16) & 1)) >> 16;
    let nan = (bits & 0x7fffffffu32) > 0x7f800000u32;
    select(nan, ((bits >> 16) & 0x8000) | 0x7fc0, rounded)
}

/// The f32 value of the bf16 nearest to `x`: what storing `x` as bf16 and reading it back
/// gives.
#[cube]
pub fn round_to_bf16(x: f32) -> f32 {
    f32::reinterpret(bf16_bits(x) << 16)
}
