//! The fusion engine's host cost when a segment's plan misses Burn's plan cache: our fusers on
//! `Fusion<Ours>` against burn-cubecl's on `Fusion<Peer>`, same engine, same device.
//!
//! Each step computes a small elementwise block (an Adam-like update of a kept tensor from
//! three of 30 fresh tensors) and then drops the 30 tensors, then syncs. With the drops in a
//! fixed order every step's segment is the same relative sequence and Burn's engine finds its
//! plan in its cache; in an order shuffled per step (Burn's autodiff releases a step's
//! tensors from hash maps, so its order changes from step to step) the sequence differs and
//! the engine explores the segment again with the backend's fusers: the difference is the
//! exploration's cost, most of a fused training step's engine time. Tensors of 64 elements:
//! the device work is negligible. Prints a markdown table of median ms per step.
//!
//! ```text
//! engine [--iters N] [--warmup N] [--only ours|burn-cubecl]
//! ```
use std::time::{Duration, Instant};

use burn_backend::Backend;
use burn_tensor::Tensor;
use ex_cubecl_benches::{OursFused, PeerFused};

const TENSORS: usize = 30;

/// A permutation of `0..n` from `seed` (xorshift, Fisher-Yates).
fn shuffled(n: usize, seed: &mut u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        *seed ^= *seed << 13;
        *seed ^= *seed >> 7;
        *seed ^= *seed << 17;
        order.swap(i, (*seed % (i as u64 + 1)) as usize);
    }
    order
}

/// Median ms per step (block, drops, sync) over `iters` steps after `warmup`.
fn segment<B: Backend>(warmup: usize, iters: usize, shuffle: bool) -> f64 {
    let device = Default::default();
    let base = Tensor::<B, 1>::ones([64], &device);
    let mut keep = base.clone();
    let mut seed = 0x9e37_79b9_7f4a_7c15;
    let mut times = Vec::with_capacity(iters);
    for i in 0..warmup + iters {
        let mut fresh: Vec<Option<Tensor<B, 1>>> = (0..TENSORS).map(|k| Some(base.clone().add_scalar(k as f64 + 1.0))).collect();
        let order = match shuffle {
            true => shuffled(TENSORS, &mut seed),
            false => (0..TENSORS).collect(),
        };
        B::sync(&device).expect("sync");
        let start = Instant::now();
        let get = |k: usize| fresh[k].clone().unwrap();
        let update = ((get(0) / get(1)).sqrt() + 1e-8) / get(2);
        keep = keep - update * 1e-3;
        order.into_iter().for_each(|k| drop(fresh[k].take()));
        B::sync(&device).expect("sync");
        if i >= warmup {
            times.push(start.elapsed());
        }
    }
    assert!(keep.into_data().to_vec::<f32>().expect("f32").iter().all(|v| v.is_finite()), "engine: non-finite result");
    times.sort();
    let median: Duration = times[times.len() / 2];
    median.as_secs_f64() * 1e3
}

fn main() {
    let (mut warmup, mut iters, mut only) = (20, 200, None);
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = || args.next().and_then(|v| v.parse().ok()).expect("engine: a number after the flag");
        match arg.as_str() {
            "--iters" => iters = value(),
            "--warmup" => warmup = value(),
            "--only" => only = args.next(),
            other => panic!("engine: unknown argument {other} (--iters N, --warmup N, --only ours|burn-cubecl)"),
        }
    }
    println!("| {TENSORS} drops after a 5-op block, ms per step | fixed order (plan cached) | shuffled (explored) | exploration |");
    println!("|---|---|---|---|");
    let backends = [("ours", segment::<OursFused> as fn(usize, usize, bool) -> f64), ("burn-cubecl", segment::<PeerFused>)];
    for (name, run) in backends.into_iter().filter(|(name, _)| only.as_deref().is_none_or(|o| o == *name)) {
        let (fixed, shuffled) = (run(warmup, iters, false), run(warmup, iters, true));
        println!("| Fusion<{name}> | {fixed:.3} | {shuffled:.3} | {:.3} |", shuffled - fixed);
    }
}
