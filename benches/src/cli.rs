//! The `bench` command line, shared by the `bench` binary and `cargo bench`: times every
//! case on ExCubecl, on burn-cubecl and (where it makes sense) on burn-ndarray, and prints a
//! markdown table.
//!
//! ```text
//! bench [--filter TEXT] [--size small|full] [--iters N] [--warmup N] [--tune] [--fusion]
//!       [--no-cpu] [--no-peer] [--gpu NAME] [--date YYYY-MM-DD] [--out FILE] [--torch FILE]
//! ```
//! `--filter` keeps the cases whose `"name size"` contains TEXT, or one of its `|`-separated
//! alternatives (`--filter "add|sum"`); `--size small` (the default
//! on wgpu) runs sizes a software rasteriser can take, `--size full` (the default on CUDA)
//! sizes that fill a GPU; `--tune` adds tiling variants of our kernels. `--gpu` names the
//! device as `nvidia-smi` does, which picks the datasheet peaks of the floor column (H100,
//! H200); `--fusion` runs both backends under Burn's fusion engine (`Fusion<ExCubecl>` with
//! our fusers, `Fusion<burn-cubecl>` with its own); `--no-cpu` leaves burn-ndarray's column
//! empty (its large rows take seconds each), `--no-peer` burn-cubecl's (its autotuning takes
//! minutes on the convolution, product and training rows); `--out` also writes the report (device, date, commit and the table) to FILE.
//! `--torch` adds a `PyTorch (ms)` column and its speed-up over ours from the JSON object
//! (row key `"name size"` to median milliseconds) that `benches/torch_rows.py` writes,
//! measured on the same device beforehand with the same timing (`scripts/bench_gpu.sh` runs
//! both); rows it has no time for show `-`.
use std::fmt::Write as _;

use crate::{HEADER, HEADER_TORCH, Options, Size, TorchTimes, cases, gpu_named, row};

/// Runs the benchmark command line: `args` without the program name. `--bench`, which
/// `cargo bench` passes, is ignored.
pub fn run(args: impl IntoIterator<Item = String>) {
    let mut filter = String::new();
    let mut size = if cfg!(feature = "cuda") { Size::Full } else { Size::Small };
    let mut opts = Options { warmup: 3, iters: 20, size, fusion: false };
    let (mut tune, mut cpu, mut with_peer) = (false, true, true);
    let (mut gpu_name, mut date, mut out, mut torch) = (String::new(), String::new(), None, None);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().unwrap_or_else(|| panic!("bench: {arg} needs a value"));
        match arg.as_str() {
            "--filter" => filter = value(),
            "--size" => {
                size = match value().as_str() {
                    "small" => Size::Small,
                    "full" => Size::Full,
                    other => panic!("bench: --size small|full, not {other}"),
                }
            }
            "--iters" => opts.iters = value().parse().expect("bench: --iters N"),
            "--warmup" => opts.warmup = value().parse().expect("bench: --warmup N"),
            "--tune" => tune = true,
            "--fusion" => opts.fusion = true,
            "--no-cpu" => cpu = false,
            "--no-peer" => with_peer = false,
            "--gpu" => gpu_name = value(),
            "--date" => date = value(),
            "--out" => out = Some(value()),
            "--torch" => torch = Some(TorchTimes::read(&value()).unwrap_or_else(|e| panic!("bench: --torch: {e}"))),
            "--bench" => {}
            other => panic!("bench: unknown argument {other}"),
        }
    }
    opts.size = size;
    // f32 rows race burn-cubecl, which rounds f32 products to TF32: ours do the same here
    // (the library's default is exact f32; the `exact` variants measure that).
    ex_cubecl::set_matmul_precision(ex_cubecl::MatmulPrecision::Tf32);
    let gpu = gpu_named(&gpu_name);
    let device = Default::default();
    let backend = match opts.fusion {
        true => format!("{} vs {}", <crate::OursFused as burn_backend::Backend>::name(&device), <crate::PeerFused as burn_backend::Backend>::name(&device)),
        false => <crate::Ours as burn_backend::Backend>::name(&device),
    };
    let mut report = String::new();
    let _ = writeln!(report, "device: {} ({backend})", if gpu_name.is_empty() { "unnamed" } else { &gpu_name });
    let _ = writeln!(report, "date: {}", if date.is_empty() { "-" } else { &date });
    let _ = writeln!(report, "commit: {}", option_env!("EX_CUBECL_COMMIT").unwrap_or("unknown (built without scripts/bench_cuda.sh)"));
    let _ = writeln!(
        report,
        "floor: {}\n",
        gpu.map_or("- (no datasheet peaks for this device)".to_string(), |g| format!(
            "datasheet peaks of the {}: {:.2} TB/s, {:.0} TFLOP/s f32, {:.0} TF32, {:.0} f16/bf16 (dense)",
            g.name,
            g.bandwidth / 1e12,
            g.f32 / 1e12,
            g.tf32 / 1e12,
            g.half / 1e12
        ))
    );
    let _ = writeln!(report, "{}", if torch.is_some() { HEADER_TORCH } else { HEADER });
    print!("{report}");
    for case in cases::all(size, tune) {
        let key = format!("{} {}", case.name(), case.size());
        if !filter.is_empty() && !filter.split('|').any(|alternative| key.contains(alternative)) {
            continue;
        }
        let start = std::time::Instant::now();
        let ours = case.run_ours(&opts);
        let peer = if with_peer { case.run_peer(&opts) } else { None };
        let cpu = if cpu { case.run_cpu(&opts) } else { None };
        let launches = ours.as_ref().map_or(String::new(), |t| format!(", ours {} launches per run", t.launches));
        eprintln!("bench: {key}: {:.1} s{launches}", start.elapsed().as_secs_f64());
        if ours.is_none() && peer.is_none() {
            continue;
        }
        let line = row(case.as_ref(), ours.as_ref(), peer.as_ref(), cpu.as_ref(), gpu, torch.as_ref());
        println!("{line}");
        let _ = writeln!(report, "{line}");
        // Written after every row, so a run cut short still leaves its rows.
        if let Some(path) = &out {
            std::fs::write(path, &report).unwrap_or_else(|e| panic!("bench: writing {path}: {e}"));
        }
    }
}
