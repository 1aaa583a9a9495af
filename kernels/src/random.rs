//! Counter-based random numbers: each element hashes (seed, call counter, position), so a
//! seeded device gives the same tensors in the same order on every run, independent of the
//! launch geometry.
use cubecl::prelude::*;

/// A distribution; its parameters are the kernel's `a` and `b`.
#[allow(missing_docs)]
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RandomKind {
    /// Uniform on `[a, b)`.
    Uniform,
    /// Uniform on `[a, b)`, floored (integer outputs).
    UniformInt,
    /// Normal with mean `a` and standard deviation `b`.
    Normal,
    /// 1 with probability `a`, else 0.
    Bernoulli,
}

/// Integer hash with good avalanche (lowbias32).
#[cube]
pub fn hash32(x: u32) -> u32 {
    let mut h = x;
    h ^= h >> 16;
    h *= 0x7feb352du32;
    h ^= h >> 15;
    h *= 0x846ca68bu32;
    h ^= h >> 16;
    h
}

/// A uniform f32 in `[0, 1)` for position `pos` of stream `stream`.
#[cube]
fn uniform01(key: u32, pos: u32, stream: u32) -> f32 {
    let h = hash32(key ^ hash32(pos ^ hash32(stream + 0x9e3779b9u32)));
    f32::cast_from(h >> 8) * (1.0f32 / 16777216.0f32)
}

/// Fills `output` (contiguous) with samples of `kind`.
#[cube(launch_unchecked)]
pub fn random<O: Numeric>(
    output: &mut Tensor<O>,
    seed_lo: u32,
    seed_hi: u32,
    counter: u32,
    a: f32,
    b: f32,
    #[comptime] kind: RandomKind,
    #[define(O)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let key = hash32(seed_lo ^ hash32(seed_hi ^ hash32(counter)));
    let pos = ABSOLUTE_POS as u32;
    let u = uniform01(key, pos, 0u32);
    let value = match kind {
        RandomKind::Uniform => a + (b - a) * u,
        RandomKind::UniformInt => f32::floor(a + (b - a) * u),
        RandomKind::Normal => {
            let u2 = uniform01(key, pos, 1u32);
            let radius = f32::sqrt(-2.0f32 * f32::ln(1.0f32 - u));
            a + b * radius * f32::cos(6.283185307179586f32 * u2)
        }
        RandomKind::Bernoulli => select(u < a, 1.0f32, 0.0f32),
    };
    output[ABSOLUTE_POS] = O::cast_from(value);
}
