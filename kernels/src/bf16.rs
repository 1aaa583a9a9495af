//! bf16 in f32 arithmetic, for devices without bf16 (where the backend holds bf16 tensors as
//! their bits in u16 and computes them in f32).
//!
//! Kernels that compute take such a tensor's u16 buffer directly: [`load`] widens each element
//! as it is read, the kernel computes in f32, [`store`] rounds each result as it is written.
//! One launch per op, and the bits that widening, computing and narrowing in three launches
//! (the copy kernel's `WidenBf16` and `NarrowBf16`) give.
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

/// An element `x` of a float kernel's buffer (of storage type `S`) in the compute type `A`:
/// with `bits`, `S` is u16 holding a bf16's bits and `A` is f32, which holds it exactly (the
/// bits are the upper half of the f32's); otherwise a cast.
#[cube]
pub fn load<S: Numeric, A: Numeric>(x: S, #[comptime] bits: bool) -> A {
    if bits {
        A::cast_from(f32::reinterpret(u32::cast_from(x) << 16))
    } else {
        A::cast_from(x)
    }
}

/// A result `y` (of the compute type `A`) as an element of a float kernel's buffer (of storage
/// type `S`): with `bits`, the bits of the bf16 nearest to `y` ([`bf16_bits`](fn@bf16_bits));
/// otherwise a cast.
#[cube]
pub fn store<S: Numeric, A: Numeric>(y: A, #[comptime] bits: bool) -> S {
    if bits {
        S::cast_from(bf16_bits(f32::cast_from(y)))
    } else {
        S::cast_from(y)
    }
}
