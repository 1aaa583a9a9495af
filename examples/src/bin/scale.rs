//! Scaling on several devices of one host (feature `distributed`; CUDA when built with `cuda`,
//! else logical wgpu devices): the f32 all-reduce bus bandwidth of
//! `DistributedBackend::all_reduce` (one thread per device) from 1 MiB to 1 GiB, and weak scaling (a fixed batch
//! per device) of the training step of the MLP 784-4096-4096-10 (f32, TF32 products, batch
//! 1024 per device) and of ResNet-50 (bf16, 224x224, batch 128 per device), data-parallel with
//! one thread per device (`ex_cubecl_examples::scale`). Prints a markdown table; `--out FILE`
//! writes the figures as JSON (the format `benches/torch_ddp.py` writes for PyTorch, which
//! `benches/scale_report.py` puts side by side).
//!
//! ```text
//! scale [--devices 1,2,4] [--only allreduce,mlp,resnet] [--mlp-batch N] [--resnet-batch N]
//!       [--resnet-dtype bf16|f32] [--warmup N] [--steps N] [--max-bytes N] [--quick] [--out FILE]
//!       [--grad-sync overlap|after] [--bucket-mb N] [--kernel-cache DIR] [--fusion] [--captured]
//! ```
//! `--fusion` (with `--devices 1`) times the training steps under Burn's fusion engine with
//! our fusers, `Autodiff<Fusion<ExCubeclBackend>>`, and Burn's own SGD. `--captured` (with
//! `--devices 1`) times the same step captured once in a pipeline and replayed
//! (`ex_cubecl_examples::captured`).
//! `--grad-sync after` (default) all-reduces each gradient after the backward pass; `overlap`
//! in buckets of `--bucket-mb` MiB (default 25, as PyTorch's DDP) during it (over NCCL only
//! with `EX_CUBECL_ALLOW_NCCL_OVERLAP=1`, see `ex_cubecl::distributed::start_gradient_sync`).
//! `--kernel-cache DIR` keeps the compiled kernels (PTX) in DIR (cubecl's compilation
//! cache): the devices after the first, and later runs, load them instead of compiling again.
//! `--devices` lists the device counts to measure (each uses devices `0..n`; default 1,2);
//! `--quick` runs tiny sizes (all-reduces of 4 KiB to 256 KiB, an MLP 784-64-64-10 at batch 8,
//! a ResNet with one block per stage on 32x32 images at batch 2, f32) to check the logic on
//! lavapipe.
use std::fmt::Write as _;

use burn_tensor::FloatDType;
use ex_cubecl_examples::captured::captured;
use ex_cubecl_examples::scale::{
    Bandwidth, GradSync, MlpWorkload, ResNetWorkload, Throughput, Train, TrainFused, Workload, all_reduce_bandwidth,
    one_device, weak_scaling,
};

#[cfg(feature = "cuda")]
type Rt = cubecl::cuda::CudaRuntime;
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
type Rt = cubecl::wgpu::WgpuRuntime;

/// The first `n` devices.
#[cfg(feature = "cuda")]
fn devices(n: usize) -> Vec<cubecl::cuda::CudaDevice> {
    (0..n).map(cubecl::cuda::CudaDevice::new).collect()
}

/// `n` logical devices of the default adapter.
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
fn devices(n: usize) -> Vec<cubecl::wgpu::WgpuDevice> {
    ex_cubecl::distributed::wgpu_devices(n)
}

struct Options {
    counts: Vec<usize>,
    only: Vec<String>,
    mlp_batch: usize,
    resnet_batch: usize,
    resnet_dtype: FloatDType,
    warmup: usize,
    steps: usize,
    max_bytes: usize,
    quick: bool,
    out: Option<String>,
    grad_sync: GradSync,
    kernel_cache: Option<String>,
    engine: Engine,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        counts: vec![1, 2],
        only: vec!["allreduce".into(), "mlp".into(), "resnet".into()],
        mlp_batch: 1024,
        resnet_batch: 128,
        resnet_dtype: FloatDType::BF16,
        warmup: 3,
        steps: 10,
        max_bytes: 1 << 30,
        quick: false,
        out: None,
        grad_sync: GradSync::AfterBackward,
        kernel_cache: None,
        engine: Engine::Plain,
    };
    let mut bucket_mb = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("scale: {arg} needs a value"));
        let number = |v: String, what: &str| v.parse::<usize>().map_err(|_| format!("scale: {what} takes a number, not {v}"));
        match arg.as_str() {
            "--devices" => {
                o.counts = value()?.split(',').map(|c| number(c.to_string(), "--devices")).collect::<Result<_, _>>()?;
                if o.counts.contains(&0) {
                    return Err("scale: --devices counts must be at least 1".into());
                }
            }
            "--only" => o.only = value()?.split(',').map(str::to_string).collect(),
            "--mlp-batch" => o.mlp_batch = number(value()?, "--mlp-batch")?,
            "--resnet-batch" => o.resnet_batch = number(value()?, "--resnet-batch")?,
            "--resnet-dtype" => {
                o.resnet_dtype = match value()?.as_str() {
                    "bf16" => FloatDType::BF16,
                    "f16" => FloatDType::F16,
                    "f32" => FloatDType::F32,
                    other => return Err(format!("scale: --resnet-dtype bf16|f16|f32, not {other}")),
                }
            }
            "--warmup" => o.warmup = number(value()?, "--warmup")?,
            "--steps" => o.steps = number(value()?, "--steps")?,
            "--max-bytes" => o.max_bytes = number(value()?, "--max-bytes")?,
            "--quick" => o.quick = true,
            // `--captured` wins over `--fusion`: it runs the fused step, replayed.
            "--fusion" if o.engine != Engine::Captured => o.engine = Engine::Fusion,
            "--fusion" => {}
            "--captured" => o.engine = Engine::Captured,
            "--out" => o.out = Some(value()?),
            "--grad-sync" => {
                o.grad_sync = match value()?.as_str() {
                    "overlap" => GradSync::DDP,
                    "after" => GradSync::AfterBackward,
                    other => return Err(format!("scale: --grad-sync overlap|after, not {other}")),
                }
            }
            "--bucket-mb" => bucket_mb = Some(number(value()?, "--bucket-mb")?),
            "--kernel-cache" => o.kernel_cache = Some(value()?),
            "-h" | "--help" => return Err(usage()),
            other => return Err(format!("scale: unknown argument {other}\n{}", usage())),
        }
    }
    if let Some(mb) = bucket_mb {
        match o.grad_sync {
            GradSync::Overlap { .. } => o.grad_sync = GradSync::Overlap { bucket_bytes: mb << 20 },
            GradSync::AfterBackward => return Err("scale: --bucket-mb goes with --grad-sync overlap".into()),
        }
    }
    if o.engine != Engine::Plain && o.counts != [1] {
        return Err("scale: --fusion and --captured time one device: give --devices 1".into());
    }
    for part in &o.only {
        if !["allreduce", "mlp", "resnet"].contains(&part.as_str()) {
            return Err(format!("scale: --only takes allreduce, mlp, resnet, not {part}"));
        }
    }
    Ok(o)
}

fn usage() -> String {
    "usage: scale [--devices 1,2,4] [--only allreduce,mlp,resnet] [--mlp-batch N] [--resnet-batch N] \
     [--resnet-dtype bf16|f32] [--warmup N] [--steps N] [--max-bytes N] [--quick] [--out FILE] [--fusion] [--captured] \
     [--grad-sync overlap|after] [--bucket-mb N] [--kernel-cache DIR]"
        .into()
}

fn main() {
    let opts = parse(std::env::args().skip(1)).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    if let Some(dir) = &opts.kernel_cache {
        kernel_cache(dir);
    }
    // f32 products on TF32 tensor cores, as PyTorch's side sets allow_tf32.
    ex_cubecl::set_matmul_precision(ex_cubecl::MatmulPrecision::Tf32);
    if let Err(reason) = ex_cubecl::distributed::nccl_status() {
        eprintln!("scale: NCCL is not used: {reason}; all-reduces are host-staged");
    }
    let runtime = std::any::type_name::<Rt>().rsplit("::").next().unwrap_or("?").to_string();
    let wants = |part: &str| opts.only.iter().any(|p| p == part);
    let mut json = Json { runtime: runtime.to_lowercase(), quick: opts.quick, ..Json::default() };
    let mut report = String::new();

    if wants("allreduce") {
        let sizes: Vec<usize> = match opts.quick {
            true => (12..=18).step_by(2).map(|k| 1usize << k).collect(),
            false => (20..=30).map(|k| 1usize << k).filter(|&b| b <= opts.max_bytes).collect(),
        };
        let _ = writeln!(report, "\n## all-reduce f32 (sum), DistributedBackend::all_reduce, one thread per device\n");
        let _ = writeln!(report, "| devices | size | time (ms) | algbw (GB/s) | busbw (GB/s) |\n|---|---|---|---|---|");
        for &n in opts.counts.iter().filter(|&&n| n > 1) {
            let devs = devices(n);
            for &bytes in &sizes {
                let iters = if opts.quick { 3 } else if bytes >= 256 << 20 { 10 } else { 20 };
                let b = all_reduce_bandwidth::<Rt>(&devs, bytes, 2, iters);
                eprintln!("scale: all-reduce {n} devices {}: {:.3} ms, busbw {:.1} GB/s", size(bytes), b.seconds * 1e3, b.busbw() / 1e9);
                let _ = writeln!(report, "| {n} | {} | {:.3} | {:.1} | {:.1} |", size(bytes), b.seconds * 1e3, b.algbw() / 1e9, b.busbw() / 1e9);
                json.allreduce.push(b);
                json.save(opts.out.as_deref());
            }
        }
    }

    let (warmup, steps) = if opts.quick { (1, 2) } else { (opts.warmup, opts.steps) };
    let mut trained: Vec<(&str, String, Throughput)> = Vec::new();
    if wants("mlp") {
        let mlp = match opts.quick {
            true => MlpWorkload { batch: 8, widths: vec![784, 64, 64, 10] },
            false => MlpWorkload { batch: opts.mlp_batch, widths: ex_cubecl_examples::scale::MLP_WIDTHS.to_vec() },
        };
        for &n in &opts.counts {
            let t = measure(&mlp, n, warmup, steps, opts.grad_sync, opts.engine, "mlp");
            json.train.push(("mlp".into(), "f32".into(), t.clone()));
            json.save(opts.out.as_deref());
            trained.push(("mlp", "f32".into(), t));
        }
    }
    if wants("resnet") {
        let resnet = match opts.quick {
            true => ResNetWorkload { batch: 2, side: 32, dtype: FloatDType::F32, blocks: [1, 1, 1, 1], classes: 10 },
            false => ResNetWorkload {
                batch: opts.resnet_batch,
                side: 224,
                dtype: opts.resnet_dtype,
                blocks: ex_cubecl_examples::resnet::RESNET50_BLOCKS,
                classes: 1000,
            },
        };
        let dtype = dtype_name(resnet.dtype);
        for &n in &opts.counts {
            let t = measure(&resnet, n, warmup, steps, opts.grad_sync, opts.engine, "resnet50");
            json.train.push(("resnet50".into(), dtype.to_string(), t.clone()));
            json.save(opts.out.as_deref());
            trained.push(("resnet50", dtype.to_string(), t));
        }
    }
    if !trained.is_empty() {
        let how = match opts.grad_sync {
            GradSync::Overlap { bucket_bytes } => format!("gradients all-reduced during backward in {} MiB buckets", bucket_bytes >> 20),
            GradSync::AfterBackward => "gradients all-reduced after backward".to_string(),
        };
        let how = match opts.engine {
            Engine::Fusion => "one device, under Burn's fusion engine with our fusers".to_string(),
            Engine::Captured => "one device, the fused step captured in a pipeline and replayed".to_string(),
            Engine::Plain => format!("data-parallel (thread per device; {how})"),
        };
        let _ = writeln!(report, "\n## weak scaling: one SGD step per device batch, {how}\n");
        let _ = writeln!(
            report,
            "| model | dtype | devices | batch per device | step (ms) | samples/s | speed-up over 1 device |\n|---|---|---|---|---|---|---|"
        );
        for (model, dtype, t) in &trained {
            let one = trained.iter().find(|(m, _, o)| m == model && o.devices == 1).map(|(_, _, o)| o.samples_per_second());
            let speedup = one.map_or("-".into(), |one| format!("{:.2}x", t.samples_per_second() / one));
            let _ = writeln!(
                report,
                "| {model} | {dtype} | {} | {} | {:.2} | {:.0} | {speedup} |",
                t.devices,
                t.batch_per_device,
                t.step_seconds * 1e3,
                t.samples_per_second()
            );
        }
    }
    println!("# ex_cubecl scaling ({runtime}{})\n{report}", if opts.quick { ", --quick sizes" } else { "" });
}

/// cubecl's compilation cache in `dir` (read by each device when it starts, written as
/// kernels compile), over what `cubecl.toml` and the `CUBECL_*` variables say.
fn kernel_cache(dir: &str) {
    use cubecl::config::{CubeClRuntimeConfig, RuntimeConfig, cache::CacheConfig};
    if let Err(e) = std::fs::create_dir_all(dir) {
        eprintln!("scale: --kernel-cache {dir}: {e}");
        std::process::exit(2)
    }
    let mut config = CubeClRuntimeConfig::from_current_dir().override_from_env();
    config.compilation.cache = Some(CacheConfig::File(dir.into()));
    CubeClRuntimeConfig::set(config);
}

/// How the training steps run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// `Train`, data-parallel on the devices ([`weak_scaling`]).
    Plain,
    /// `TrainFused` on one device ([`one_device`]).
    Fusion,
    /// `TrainFused`'s step captured and replayed on one device ([`captured`]).
    Captured,
}

/// [`weak_scaling`] on the first `n` devices, or one device as `engine` says, with progress
/// on stderr.
fn measure<W>(workload: &W, n: usize, warmup: usize, steps: usize, sync: GradSync, engine: Engine, name: &str) -> Throughput
where
    W: Workload<Train<Rt>> + Workload<TrainFused<Rt>>,
{
    let start = std::time::Instant::now();
    let t = match engine {
        Engine::Fusion => one_device::<TrainFused<Rt>, W>(workload, &devices(1)[0], warmup, steps),
        Engine::Captured => captured::<Rt, W>(workload, &devices(1)[0], warmup, steps),
        Engine::Plain => weak_scaling::<Rt, W>(workload, &devices(n), warmup, steps, sync),
    };
    eprintln!(
        "scale: {name} on {n} device(s), batch {} each: {:.2} ms a step, {:.0} samples/s, loss {:.4} ({:.1} s)",
        t.batch_per_device,
        t.step_seconds * 1e3,
        t.samples_per_second(),
        t.last_loss,
        start.elapsed().as_secs_f64()
    );
    t
}

fn dtype_name(dtype: FloatDType) -> &'static str {
    match dtype {
        FloatDType::BF16 => "bf16",
        FloatDType::F16 => "f16",
        _ => "f32",
    }
}

/// `1 MiB`, `64 KiB`, `1 GiB`.
fn size(bytes: usize) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{} GiB", b >> 30),
        b if b >= 1 << 20 => format!("{} MiB", b >> 20),
        b => format!("{} KiB", b >> 10),
    }
}

/// The figures, as the JSON object `benches/scale_report.py` reads (the same keys as
/// `benches/torch_ddp.py` writes).
#[derive(Default)]
struct Json {
    runtime: String,
    quick: bool,
    allreduce: Vec<Bandwidth>,
    train: Vec<(String, String, Throughput)>,
}

impl Json {
    /// Writes the figures so far to `path` (after every measurement: a run cut short keeps
    /// what it measured).
    fn save(&self, path: Option<&str>) {
        if let Some(path) = path {
            std::fs::write(path, self.render()).unwrap_or_else(|e| {
                eprintln!("scale: writing {path}: {e}");
                std::process::exit(1)
            });
        }
    }

    fn render(&self) -> String {
        let (runtime, quick) = (&self.runtime, self.quick);
        let allreduce: Vec<String> = self
            .allreduce
            .iter()
            .map(|b| {
                format!(
                    "    {{\"devices\": {}, \"bytes\": {}, \"ms\": {}, \"algbw_gbs\": {}, \"busbw_gbs\": {}}}",
                    b.devices,
                    b.bytes,
                    b.seconds * 1e3,
                    b.algbw() / 1e9,
                    b.busbw() / 1e9
                )
            })
            .collect();
        let train: Vec<String> = self
            .train
            .iter()
            .map(|(model, dtype, t)| {
                format!(
                    "    {{\"model\": \"{model}\", \"dtype\": \"{dtype}\", \"devices\": {}, \"batch_per_device\": {}, \"ms_per_step\": {}, \"samples_per_s\": {}, \"loss\": {}}}",
                    t.devices,
                    t.batch_per_device,
                    t.step_seconds * 1e3,
                    t.samples_per_second(),
                    if t.last_loss.is_finite() { t.last_loss.to_string() } else { "null".into() }
                )
            })
            .collect();
        format!(
            "{{\n  \"who\": \"ex_cubecl\",\n  \"runtime\": \"{}\",\n  \"quick\": {quick},\n  \"allreduce\": [\n{}\n  ],\n  \"train\": [\n{}\n  ]\n}}\n",
            runtime,
            allreduce.join(",\n"),
            train.join(",\n")
        )
    }
}
