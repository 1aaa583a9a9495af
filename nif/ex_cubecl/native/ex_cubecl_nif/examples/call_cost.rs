//! The Rust column of `nif/ex_cubecl/bench/call_overhead.exs`: the same ops through the same
//! op table, on the same backend (`Autodiff<ExCubeclBackend<R>>`), without the BEAM.
//!
//! `cargo run --release -p ex_cubecl_nif --example call_cost [DEVICE]` (default: the NIF's
//! default device).
use std::time::Instant;

use ex_cubecl_nif::bench::{Call, device, upload};

fn median(mut f: impl FnMut(), iters: usize) -> f64 {
    for _ in 0..5 {
        f();
    }
    let mut times: Vec<f64> = (0..iters)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[iters / 2]
}

fn main() {
    let device = device(std::env::args().nth(1));
    println!("device: {}", device.spec());
    let x = upload(&device, &(1..=16).map(|v| v as f32).collect::<Vec<_>>(), &[16]);
    let add = Call::new("add", vec![x.clone(), x], &[], &device);
    println!("add 16 f32 + sync: {:.1} us", median(|| add.run_and_sync(), 2000));
    let a = Call::new("random_uniform", vec![], &[("shape", vec![1024, 1024])], &device).run().remove(0);
    let matmul = Call::new("matmul", vec![a.clone(), a], &[], &device);
    println!("matmul 1024^2 f32 + sync: {:.1} us", median(|| matmul.run_and_sync(), 20));
}
