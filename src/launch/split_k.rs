//! Split-K for the manual-MMA products (`launch::conv_mma`'s convolution, `launch::matmul_mma`'s
//! matrix product, on the asynchronous copies or TMA): when a product's output tiles fill less
//! than a wave of the device, its K slices are split into runs, each run on cubes of its own
//! writing an f32 partial product, and `ex_cubecl_kernels::split_sum` adds the partials in
//! split order (the same bits on every run: no atomics), with the bias and the cast to the
//! output's dtype, into the output.
//!
//! [`plan`] picks the splits of f32 (TF32) products from the device's multiprocessor count
//! ([`splits_for`]); f16 and bf16 products measured no faster split.
//! `EX_CUBECL_SPLIT_K=0` turns split-K off; `EX_CUBECL_SPLIT_K=N` splits every such product
//! into N runs (at most one per K slice), for tuning.
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use std::cell::Cell;
use std::sync::OnceLock;

use ex_cubecl_kernels::split_sum::split_sum;

use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// Cubes that one multiprocessor holds at once, taken as the wave's unit: the manual-MMA
/// kernels' tilings run two or three cubes per multiprocessor (150 to 252 registers per unit,
/// 48 to 96 KiB of stages).
const CUBES_PER_SM: usize = 2;
/// At most this many splits...
const MAX_SPLITS: usize = 16;
/// ...each at least this many K slices long.
const MIN_SPLIT_SLICES: usize = 4;
/// Each split's partial costs about as much as this many elements of K in every output
/// element: its f32 copy of the output written by the product and read by the sum, against
/// the product's two operations per element of K (one H100's ~3 TB/s against ~60 TFLOP/s).
const PARTIAL_K: usize = 64;

/// How a product's K slices split: `splits` runs of `len` slices (the last may be shorter,
/// none is empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SplitK {
    /// Runs, each on cubes of its own.
    pub splits: usize,
    /// K slices per run.
    pub len: usize,
}

impl SplitK {
    /// `slices` K slices in (up to) `splits` runs of equal length, none empty.
    pub fn even(splits: usize, slices: usize) -> SplitK {
        let len = slices.div_ceil(splits.clamp(1, slices.max(1))).max(1);
        SplitK { splits: slices.div_ceil(len).max(1), len }
    }
}

/// The splits of a product of `tiles` output tiles and `slices` K slices of `block_k`
/// elements on `sms` multiprocessors: the count in `1..=MAX_SPLITS` (each split at least
/// [`MIN_SPLIT_SLICES`] slices) that minimises the estimated time, in units of one tile's
/// whole-K time: the waves of [`CUBES_PER_SM`] cubes per multiprocessor the split grid takes
/// over the splits, plus [`PARTIAL_K`] elements of K per split for the partials; the fewest
/// splits among equals, and one where the tiles fill a wave already.
pub fn splits_for(tiles: usize, slices: usize, block_k: usize, sms: usize) -> usize {
    let slots = sms * CUBES_PER_SM;
    if tiles == 0 || slots == 0 || tiles >= slots {
        return 1;
    }
    let k = (slices * block_k).max(1) as f64;
    let cost = |s: usize| (tiles * s).div_ceil(slots) as f64 / s as f64 + (s - 1) as f64 * PARTIAL_K as f64 / k;
    let most = MAX_SPLITS.min(slices / MIN_SPLIT_SLICES).max(1);
    (1..=most).fold(1, |best, s| if cost(s) < cost(best) { s } else { best })
}

/// The split of a product of `tiles` output tiles and `slices` K slices of `block_k` on
/// `tensor`'s device: [`splits_for`] on its multiprocessor count (none known: no split) for
/// f32 operands (TF32), unless [`with_splits`] or `EX_CUBECL_SPLIT_K` says otherwise.
///
/// f16 and bf16 are not split by the plan: on an H200 the ResNet-like convolution
/// ([32,256,14,14] x [256,256,3,3], 98 tiles) ran 0.114 ms unsplit, 0.126 in four splits and
/// 0.151 in five, where TF32 went from 0.270 to 0.218 and 0.234 (benches/RESULTS.md).
pub(crate) fn plan<R: Runtime>(tensor: &CubeTensor<R>, tiles: usize, slices: usize, block_k: usize) -> SplitK {
    let forced = FORCED.with(Cell::get).or_else(env_splits);
    let splits = forced.unwrap_or_else(|| match tensor.dtype {
        DType::F32 => {
            let sms = tensor.client.properties().hardware.num_streaming_multiprocessors.unwrap_or(0);
            splits_for(tiles, slices, block_k, sms as usize)
        }
        _ => 1,
    });
    SplitK::even(splits, slices)
}

thread_local! {
    static FORCED: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `f` with every manual-MMA product launched from this thread split into `splits` runs
/// (at most one per K slice; 1: unsplit) whatever the plan and `EX_CUBECL_SPLIT_K` say; for
/// tests and tuning.
#[doc(hidden)]
pub fn with_splits<T>(splits: usize, f: impl FnOnce() -> T) -> T {
    let before = FORCED.with(|c| c.replace(Some(splits.max(1))));
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORCED.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// `EX_CUBECL_SPLIT_K` (read once): `Some(1)` for `0`, `Some(n)` for a count `n`, `None`
/// (the plan) when unset or unreadable.
fn env_splits() -> Option<usize> {
    static SPLITS: OnceLock<Option<usize>> = OnceLock::new();
    *SPLITS.get_or_init(|| std::env::var("EX_CUBECL_SPLIT_K").ok()?.trim().parse::<usize>().ok().map(|n| n.max(1)))
}

/// The f32 partials of `splits` copies of an output of `shape`: `[splits, shape..]`.
pub(crate) fn partials<R: Runtime>(like: &CubeTensor<R>, splits: usize, shape: &[usize]) -> CubeTensor<R> {
    let mut dims = vec![splits];
    dims.extend_from_slice(shape);
    CubeTensor::empty(&like.client, &like.device, Shape::from(dims), DType::F32)
}

/// Sums the `splits` contiguous f32 copies of `out` in `partial` (whatever its shape says) in
/// order into the contiguous `out`, plus `bias[(e / spatial) % channels]` for element `e`
/// where given, in vectors of `nv` (dividing `out`'s length, and `spatial` where there is a
/// bias).
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_split_sum<R: Runtime>(
    op: &str,
    partial: &CubeTensor<R>,
    splits: usize,
    out: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    spatial: usize,
    channels: usize,
    nv: usize,
) {
    assert_eq!(partial.num_elements(), splits * out.num_elements(), "ex_cubecl: {op}: split-K partials of the wrong size");
    let vectors = out.num_elements() / nv;
    let has_bias = bias.is_some();
    let bias = bias.cloned().unwrap_or_else(|| out.clone());
    let (p, o) = (partial.clone(), out.clone());
    launch(&out.client, op, Geometry::Units(vectors), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < vectors`; `partial` holds `splits` copies of the
        // output's `vectors` vectors, `nv` divides the output's length and `spatial`, so every
        // vector lies in one channel; the bias index stays below `channels`.
        unsafe {
            split_sum::launch_unchecked::<R>(
                client, count, dim, nv, p.buffer_arg(), bias.as_arg(), o.buffer_arg(), vectors, splits, bias.layout.offset,
                spatial, channels, has_bias, o.storage(),
            )
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fill_the_device_when_the_tiles_do_not() {
        // The ResNet-like convolution [32, 256, 14, 14] x [256, 256, 3, 3] on an H100 / H200
        // (132 multiprocessors): 98 tiles of 128 x 128, K = 2304 in 72 slices of 32.
        assert_eq!(splits_for(98, 72, 32, 132), 5);
        // A wave of tiles or more: no split.
        assert_eq!(splits_for(264, 72, 32, 132), 1);
        assert_eq!(splits_for(1568, 18, 32, 132), 1);
        // Few tiles and a short K: no split where each run would take under 4 slices.
        assert_eq!(splits_for(8, 7, 32, 132), 1);
        // One tile and a long K: the most splits.
        assert_eq!(splits_for(1, 1024, 64, 132), MAX_SPLITS);
        // 196 tiles (a ResNet-50 stage-3 layer at batch 64): 784 cubes, three waves.
        assert_eq!(splits_for(196, 72, 32, 132), 4);
        // No multiprocessor count: no split.
        assert_eq!(splits_for(4, 1024, 64, 0), 1);
    }

    #[test]
    fn even_splits_cover_every_slice_with_no_empty_run() {
        for slices in 1..40 {
            for splits in 1..20 {
                let s = SplitK::even(splits, slices);
                assert!(s.splits <= splits.max(1) && s.splits >= 1, "{slices} {splits} {s:?}");
                assert!(s.splits * s.len >= slices, "{slices} {splits} {s:?}");
                assert!((s.splits - 1) * s.len < slices, "{slices} {splits} {s:?}");
            }
        }
        assert_eq!(SplitK::even(5, 72), SplitK { splits: 5, len: 15 });
        assert_eq!(SplitK::even(4, 18), SplitK { splits: 4, len: 5 });
        assert_eq!(SplitK::even(40, 18), SplitK { splits: 18, len: 1 });
        assert_eq!(SplitK::even(1, 18), SplitK { splits: 1, len: 18 });
    }
}
