//! ExCubecl's benchmarks: each case runs on ExCubecl and on burn-cubecl (the peer: Burn's own
//! CubeCL backend, matmul autotuning on, no fusion) in one process, on the same runtime and
//! device, and the `bench` binary prints a markdown table.
//!
//! A case implements [`Case`]: a name, a size label, the work it does (floating-point
//! operations or bytes moved, for the rate column) and `prepare`, which builds the inputs on
//! a backend and returns the closure that runs the op once. Cases are generic over Burn's
//! `Backend`, so one definition runs on both backends. Add a family as a file under
//! `cases/` and list its cases in [`cases::all`].
#![warn(missing_docs)]

pub mod cases;
pub mod cli;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use burn_backend::Backend;
use burn_tensor::{Tensor, TensorData};

/// The runtime the benchmarks run on: CUDA with the `cuda` feature, wgpu otherwise.
#[cfg(feature = "cuda")]
pub type Runtime = cubecl::cuda::CudaRuntime;
/// The runtime the benchmarks run on: CUDA with the `cuda` feature, wgpu otherwise.
#[cfg(all(feature = "wgpu", not(feature = "cuda")))]
pub type Runtime = cubecl::wgpu::WgpuRuntime;

/// ExCubecl on [`Runtime`].
pub type Ours = ex_cubecl::ExCubeclBackend<Runtime>;
/// burn-cubecl on [`Runtime`].
pub type Peer = burn_cubecl::CubeBackend<Runtime, f32, i32, u8>;
/// [`Ours`] with kernel fusion: Burn's fusion engine with our fusers (`bench --fusion`).
pub type OursFused = burn_fusion::Fusion<Ours>;
/// [`Peer`] with kernel fusion: Burn's fusion engine with burn-cubecl's fusers, its default.
pub type PeerFused = burn_fusion::Fusion<Peer>;
/// burn-ndarray on the CPU.
pub type Cpu = burn_ndarray::NdArray<f32>;

/// Benchmark sizes: `Small` fits a software rasteriser (lavapipe), `Full` fills a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Size {
    /// Quick runs, e.g. 256² matrices.
    Small,
    /// Sizes that fill a data-centre GPU, e.g. 4096² matrices.
    Full,
}

/// What one run of a case does, for the rate and floor columns.
#[derive(Clone, Copy, Debug)]
pub enum Work {
    /// Floating-point operations (a multiply-add counts 2) at a precision: rate in TFLOP/s,
    /// floor = flops over the device's peak at that precision.
    Flops(f64, Precision),
    /// Bytes read plus bytes written: rate in GB/s, floor = bytes over the memory bandwidth.
    Bytes(f64),
}

/// The arithmetic a case's flops run on, which sets the peak its floor is taken against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Precision {
    /// f32 on tensor cores rounded to TF32 (the default of both backends for f32 products).
    Tf32,
    /// f16 or bf16 on tensor cores.
    Half,
    /// Exact f32 on the ordinary arithmetic units.
    F32,
}

impl Work {
    fn rate(self, seconds: f64) -> String {
        match self {
            Work::Flops(f, _) => format!("{} TFLOP/s", significant(f / seconds / 1e12)),
            Work::Bytes(b) => format!("{} GB/s", significant(b / seconds / 1e9)),
        }
    }

    /// The shortest time this work can take on `gpu`: bytes over bandwidth or flops over peak.
    pub fn floor(self, gpu: &Gpu) -> f64 {
        match self {
            Work::Bytes(b) => b / gpu.bandwidth,
            Work::Flops(f, Precision::Tf32) => f / gpu.tf32,
            Work::Flops(f, Precision::Half) => f / gpu.half,
            Work::Flops(f, Precision::F32) => f / gpu.f32,
        }
    }
}

/// A device's datasheet peaks (dense, no sparsity), for the floor column.
#[derive(Clone, Debug)]
pub struct Gpu {
    /// The name it is known by.
    pub name: &'static str,
    /// Memory bandwidth in bytes per second.
    pub bandwidth: f64,
    /// f32 flops per second on the ordinary arithmetic units.
    pub f32: f64,
    /// TF32 tensor-core flops per second.
    pub tf32: f64,
    /// f16 / bf16 tensor-core flops per second.
    pub half: f64,
}

/// Datasheet peaks of the GPUs the benchmarks are run on (NVIDIA's published figures).
pub const GPUS: [Gpu; 3] = [
    Gpu { name: "H200", bandwidth: 4.8e12, f32: 67e12, tf32: 494.7e12, half: 989.4e12 },
    Gpu { name: "H100 PCIe", bandwidth: 2.0e12, f32: 51e12, tf32: 378e12, half: 756e12 },
    Gpu { name: "H100", bandwidth: 3.35e12, f32: 67e12, tf32: 494.7e12, half: 989.4e12 },
];

/// The entry of [`GPUS`] whose name `device` (as `nvidia-smi` prints it) contains, if any.
pub fn gpu_named(device: &str) -> Option<&'static Gpu> {
    GPUS.iter().find(|g| g.name.split(' ').all(|word| device.contains(word)))
}

/// `x` with three significant digits.
fn significant(x: f64) -> String {
    let digits = if x >= 100.0 { 0 } else if x >= 10.0 { 1 } else if x >= 1.0 { 2 } else { 3 };
    format!("{x:.digits$}")
}

/// The closure a case runs once per iteration; it returns the op's output, flattened, so the
/// runner can wait for it, drop it, and compare the two backends' results.
pub type RunFn<B> = Box<dyn FnMut() -> Tensor<B, 1>>;

/// One benchmark case.
pub trait Case {
    /// Operation and dtype, e.g. `matmul f32`.
    fn name(&self) -> String;
    /// The size label, e.g. `4096x4096x4096`.
    fn size(&self) -> String;
    /// The work of one run.
    fn work(&self) -> Work;
    /// Builds the inputs on `device` and returns the closure that runs the op once (without
    /// waiting for it). `None` when the case doesn't apply to backend `B` (a variant of ours
    /// only, say).
    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>>;
    /// Whether burn-ndarray on the CPU is timed too (where a CPU run is a useful reference
    /// and finishes in reasonable time).
    fn on_cpu(&self) -> bool {
        false
    }
}

/// A [`Case`] behind a trait object, run on both backends.
pub trait DynCase {
    /// See [`Case::name`].
    fn name(&self) -> String;
    /// See [`Case::size`].
    fn size(&self) -> String;
    /// See [`Case::work`].
    fn work(&self) -> Work;
    /// Times the case on ExCubecl.
    fn run_ours(&self, opts: &Options) -> Option<Timing>;
    /// Times the case on burn-cubecl.
    fn run_peer(&self, opts: &Options) -> Option<Timing>;
    /// Times the case on burn-ndarray (CPU) where [`Case::on_cpu`] says so.
    fn run_cpu(&self, opts: &Options) -> Option<Timing>;
}

impl<C: Case> DynCase for C {
    fn name(&self) -> String {
        Case::name(self)
    }
    fn size(&self) -> String {
        Case::size(self)
    }
    fn work(&self) -> Work {
        Case::work(self)
    }
    fn run_ours(&self, opts: &Options) -> Option<Timing> {
        match opts.fusion {
            true => time::<OursFused, C>(self, opts),
            false => time::<Ours, C>(self, opts),
        }
    }
    fn run_peer(&self, opts: &Options) -> Option<Timing> {
        match opts.fusion {
            true => time::<PeerFused, C>(self, opts),
            false => time::<Peer, C>(self, opts),
        }
    }
    fn run_cpu(&self, opts: &Options) -> Option<Timing> {
        if self.on_cpu() { time::<Cpu, C>(self, opts) } else { None }
    }
}

/// How to run the cases.
#[derive(Clone, Debug)]
pub struct Options {
    /// Warm-up runs (compilation, autotuning) before timing.
    pub warmup: usize,
    /// Timed runs; the median is reported.
    pub iters: usize,
    /// Case sizes.
    pub size: Size,
    /// Both backends under Burn's fusion engine: ours with our fusers, burn-cubecl with its
    /// own (`--fusion`).
    pub fusion: bool,
}

/// The result of timing a case on one backend.
pub struct Timing {
    /// Median wall time of one run, each run ending in a device sync.
    pub median: Duration,
    /// The output of a fresh preparation's first run, read back.
    pub output: TensorData,
    /// Kernels our launcher launched in one run (after the warm-up): 0 on backends other
    /// than ours.
    pub launches: u64,
}

/// Runs `case` on backend `B`: `warmup` runs, then at least `iters` timed runs that each end
/// in a device sync (more for short cases, up to [`MAX_ITERS`] or about half a second, so that
/// latencies of microseconds get a stable median); the output is dropped after the sync.
pub fn time<B: Backend, C: Case>(case: &C, opts: &Options) -> Option<Timing> {
    let device = B::Device::default();
    let mut run = case.prepare::<B>(&device)?;
    B::sync(&device).expect("sync");
    let start = Instant::now();
    for _ in 0..opts.warmup {
        let out = run();
        B::sync(&device).expect("sync");
        drop(out);
    }
    let per_run = start.elapsed().as_secs_f64() / opts.warmup.max(1) as f64;
    let iters = ((0.5 / per_run.max(1e-9)) as usize).clamp(opts.iters, MAX_ITERS.max(opts.iters));
    // The output lives until the sync: a fusion engine runs nothing for a dropped result.
    let before = ex_cubecl::runtime::launch_count();
    let out = run();
    B::sync(&device).expect("sync");
    let launches = ex_cubecl::runtime::launch_count() - before;
    drop(out);
    let mut times = Vec::with_capacity(iters);
    for _ in 0..iters {
        let start = Instant::now();
        let out = run();
        B::sync(&device).expect("sync");
        times.push(start.elapsed());
        drop(out);
    }
    times.sort();
    // The output compared between backends comes from a fresh preparation's first run, so
    // that stateful cases (training steps) compare the same step whatever the run counts.
    drop(run);
    let output = case.prepare::<B>(&device)?().into_data();
    Some(Timing { median: times[times.len() / 2], output, launches })
}

/// The most timed runs of one case.
pub const MAX_ITERS: usize = 2000;

/// Largest |a - b| over the largest |b|: how far our output is from the peer's.
pub fn relative_difference(ours: &TensorData, peer: &TensorData) -> f64 {
    let a = ours.clone().convert::<f64>().to_vec::<f64>().expect("values");
    let b = peer.clone().convert::<f64>().to_vec::<f64>().expect("values");
    let scale = b.iter().fold(0.0f64, |m, x| m.max(x.abs())).max(f64::MIN_POSITIVE);
    let diff = a.iter().zip(&b).fold(0.0f64, |m, (x, y)| if (x - y).is_nan() { f64::NAN } else { m.max((x - y).abs()) });
    diff / scale
}

/// Milliseconds with at least three significant digits.
fn millis(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 1.0 { format!("{ms:.3}") } else { format!("{}", significant_ms(ms)) }
}

fn significant_ms(ms: f64) -> String {
    let digits = (2 - ms.log10().floor() as i32).clamp(3, 6) as usize;
    format!("{ms:.digits$}")
}

/// PyTorch's times for the `PyTorch (ms)` column: row key (`"<name> <size>"`) to median
/// milliseconds, as `benches/torch_rows.py` writes them (a JSON object).
#[derive(Clone, Debug, Default)]
pub struct TorchTimes(pub HashMap<String, f64>);

impl TorchTimes {
    /// Reads the JSON object that `benches/torch_rows.py` wrote to `path`.
    pub fn read(path: &str) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("reading {path}: {e}"))?;
        serde_json::from_str(&text).map(TorchTimes).map_err(|e| format!("parsing {path}: {e}"))
    }

    /// PyTorch's median time for `case`, if it was measured.
    pub fn get(&self, case: &dyn DynCase) -> Option<Duration> {
        self.0.get(&format!("{} {}", case.name(), case.size())).map(|ms| Duration::from_secs_f64(ms / 1e3))
    }
}

/// One row of the results table; `gpu` gives the floor column, `torch` (when given) the
/// PyTorch columns.
pub fn row(case: &dyn DynCase, ours: Option<&Timing>, peer: Option<&Timing>, cpu: Option<&Timing>, gpu: Option<&Gpu>, torch: Option<&TorchTimes>) -> String {
    let ms = |t: Option<&Timing>| t.map_or("-".to_string(), |t| millis(t.median));
    let rate = |t: Option<&Timing>| t.map_or("-".to_string(), |t| case.work().rate(t.median.as_secs_f64()));
    let ratio = |other: Option<Duration>| match (ours, other) {
        (Some(o), Some(p)) => format!("{:.2}x", p.as_secs_f64() / o.median.as_secs_f64()),
        _ => "-".into(),
    };
    let torch_cells = torch.map_or(String::new(), |times| {
        let time = times.get(case);
        format!(" {} | {} |", time.map_or("-".to_string(), millis), ratio(time))
    });
    let floor = gpu.map(|g| case.work().floor(g));
    let floor_ms = floor.map_or("-".to_string(), |f| millis(Duration::from_secs_f64(f)));
    let of_floor = match (ours, floor) {
        (Some(o), Some(f)) => format!("{:.2}x", o.median.as_secs_f64() / f),
        _ => "-".into(),
    };
    let diff = match (ours, peer) {
        (Some(o), Some(p)) => format!("{:.1e}", relative_difference(&o.output, &p.output)),
        _ => "-".into(),
    };
    format!(
        "| {} | {} | {} | {} | {} |{torch_cells} {} | {} | {} | {} | {} | {} |",
        case.name(),
        case.size(),
        ms(ours),
        ms(peer),
        ratio(peer.map(|p| p.median)),
        rate(ours),
        rate(peer),
        floor_ms,
        of_floor,
        ms(cpu),
        diff
    )
}

/// The table's header, without the PyTorch columns.
pub const HEADER: &str = "| op | size | ours (ms) | burn-cubecl (ms) | speed-up (burn-cubecl / ours) | ours | burn-cubecl | floor (ms) | ours / floor | burn-ndarray CPU (ms) | max diff / max |\n|---|---|---|---|---|---|---|---|---|---|---|";

/// The table's header with the PyTorch columns (after burn-cubecl's speed-up), to print above
/// [`row`]s given PyTorch's times.
pub const HEADER_TORCH: &str = "| op | size | ours (ms) | burn-cubecl (ms) | speed-up (burn-cubecl / ours) | PyTorch (ms) | speed-up (PyTorch / ours) | ours | burn-cubecl | floor (ms) | ours / floor | burn-ndarray CPU (ms) | max diff / max |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|";
