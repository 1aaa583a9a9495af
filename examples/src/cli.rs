//! The `digits` command: its options, the devices and backends this build has, and the run
//! itself (train, report, save, reload, compare).
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use burn::module::AutodiffModule;
use burn_tensor::Tensor;
use burn_tensor::backend::Backend;

use crate::checkpoint::Checkpointing;
use crate::data::{Digits, Split};
use crate::export::export_data;
use crate::model::{Classifier, Cnn, Mlp, ModelKind};
use crate::train::{AdamBackend, EpochStats, TrainConfig, TrainError, accuracy, load, predict, save, train};

/// `digits --help`.
pub const USAGE: &str = "\
Trains classifiers of the 8x8 handwritten digits (smartcore's copy, 1797 images) on ExCubecl
with Burn's autodiff, evaluates them on a held-out test split, saves them with Burn's recorder
and reloads them for inference.

usage: digits [--device wgpu|cuda] [--model mlp|cnn|all] [--epochs N] [--batch N] [--lr X]
              [--seed N] [--test-fraction X] [--out DIR] [--backend ex-cubecl|burn-cubecl]
              [--fusion] [--devices N] [--no-progress] [--export-data PATH]
              [--checkpoint DIR [--resume] [--stop-after K]]

  --device    the runtime (default: wgpu, or cuda in a build without wgpu; wgpu runs on
              Mesa's lavapipe where there is no GPU)
  --model     which model to train (default: all = mlp, then cnn)
  --epochs    passes over the training set (default: 10 for mlp, 8 for cnn)
  --batch     images per step (default: 32)
  --lr        Adam's learning rate at the first step, decaying to 0 along a cosine
              (default: 0.003)
  --seed      seeds the split, the initial weights and the batch order (default: 42)
  --test-fraction  share of the images held out for testing (default: 0.2)
  --out       folder for the saved models (default: the system's temporary folder)
  --backend   ex-cubecl (default), or burn-cubecl to time the same code on Burn's own
              CubeCL backend (builds with the `peer` feature only)
  --fusion    ex-cubecl with kernel fusion (Fusion<ExCubeclBackend>: Burn's fusion engine
              with our fusers; Adam is burn-optim's, whose tensor ops fuse)
  --devices   data-parallel training on N devices (default: 1; builds with the
              `distributed` feature): N CUDA GPUs, or N logical devices of one wgpu adapter;
              each step's batch is split between them and their gradients all-reduced
  --no-progress  no progress bar (it is only drawn on a terminal anyway)
  --export-data  write the split that --seed and --test-fraction give (standardised images,
              labels, per-pixel mean and std) to PATH as a Burn record (.mpk), for the
              Elixir job's ExBurn.Record.load, and exit without training
  --checkpoint  after each epoch, write a checkpoint of the model and Adam's state to DIR
              (each file replaced atomically; see examples/src/checkpoint.rs)
  --resume    start from DIR's checkpoint (same --epochs, --batch, --lr, --seed): the run
              ends bit for bit where an uninterrupted one ends
  --stop-after  stop after epoch K (its checkpoint written), as an interrupted run would";

/// A runtime the command can train on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceName {
    /// wgpu: Vulkan, Metal, DX12; Mesa's lavapipe on machines without a GPU.
    Wgpu,
    /// CUDA, loaded at run time.
    Cuda,
}

impl DeviceName {
    /// Every runtime the command knows of.
    pub const ALL: [DeviceName; 2] = [DeviceName::Wgpu, DeviceName::Cuda];

    /// The name used on the command line (and the cargo feature that compiles it in).
    pub fn name(self) -> &'static str {
        match self {
            DeviceName::Wgpu => "wgpu",
            DeviceName::Cuda => "cuda",
        }
    }

    /// Whether this build has the runtime.
    pub fn compiled(self) -> bool {
        match self {
            DeviceName::Wgpu => cfg!(feature = "wgpu"),
            DeviceName::Cuda => cfg!(feature = "cuda"),
        }
    }
}

/// The backend the training code runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BackendName {
    /// `Autodiff<ExCubeclBackend<R>>`: ours.
    ExCubecl,
    /// `Autodiff<burn_cubecl::CubeBackend<R, f32, i32, u8>>`: Burn's own CubeCL backend, for
    /// timing comparisons (the `peer` feature).
    BurnCubecl,
}

impl BackendName {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            BackendName::ExCubecl => "ex-cubecl",
            BackendName::BurnCubecl => "burn-cubecl",
        }
    }
}

/// Everything the command line sets.
#[derive(Clone, Debug)]
pub struct Options {
    /// Runtime.
    pub device: DeviceName,
    /// Backend.
    pub backend: BackendName,
    /// `--fusion`: the backend wrapped in Burn's fusion engine with our fusers.
    pub fusion: bool,
    /// Models, trained one after the other.
    pub models: Vec<ModelKind>,
    /// Epochs for every model; `None`: each model's default ([`default_epochs`]).
    pub epochs: Option<usize>,
    /// Images per step.
    pub batch_size: usize,
    /// Adam's learning rate.
    pub lr: f64,
    /// Seed of the split, the initial weights and the batch order.
    pub seed: u64,
    /// Share of the images held out for testing.
    pub test_fraction: f64,
    /// Folder for the saved models.
    pub out: PathBuf,
    /// `--devices`: devices to train on, data-parallel when more than one.
    pub devices: usize,
    /// Draw progress bars.
    pub progress: bool,
    /// `--export-data`: write the split here ([`crate::export`]) instead of training.
    pub export_data: Option<PathBuf>,
    /// `--checkpoint`: the folder of the checkpoints ([`crate::checkpoint`]).
    pub checkpoint: Option<PathBuf>,
    /// `--resume`: start from the checkpoint.
    pub resume: bool,
    /// `--stop-after`: the last epoch to run.
    pub stop_after: Option<usize>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            device: if cfg!(feature = "wgpu") { DeviceName::Wgpu } else { DeviceName::Cuda },
            backend: BackendName::ExCubecl,
            fusion: false,
            models: vec![ModelKind::Mlp, ModelKind::Cnn],
            epochs: None,
            batch_size: 32,
            lr: 3e-3,
            seed: 42,
            test_fraction: 0.2,
            out: std::env::temp_dir(),
            devices: 1,
            progress: true,
            export_data: None,
            checkpoint: None,
            resume: false,
            stop_after: None,
        }
    }
}

/// Epochs of `model` when `--epochs` is not given: enough for at least 95% test accuracy.
pub fn default_epochs(model: ModelKind) -> usize {
    match model {
        ModelKind::Mlp => 10,
        ModelKind::Cnn => 8,
    }
}

/// Why the command stopped: a message for stderr and the exit code.
#[derive(Clone, Debug, PartialEq)]
pub struct Failure {
    /// Starts with `ex_cubecl digits:`.
    pub message: String,
    /// 2 for bad input, 1 for a failed run.
    pub code: i32,
}

impl Failure {
    fn usage(message: String) -> Self {
        Self { message: format!("ex_cubecl digits: {message}"), code: 2 }
    }

    fn run(message: String) -> Self {
        Self { message: format!("ex_cubecl digits: {message}"), code: 1 }
    }
}

/// Parses the arguments after the program name; `Ok(None)` for `--help`.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Option<Options>, Failure> {
    let mut opts = Options::default();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag.to_string(), Some(value.to_string())),
            _ => (arg.clone(), None),
        };
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| Failure::usage(format!("{flag} needs a value\n\n{USAGE}")))
        };
        fn number<T: std::str::FromStr>(flag: &str, text: String) -> Result<T, Failure> {
            text.parse().map_err(|_| Failure::usage(format!("{flag} takes a number, not `{text}`")))
        }
        match flag.as_str() {
            "--help" | "-h" => return Ok(None),
            "--device" => opts.device = parse_device(&value()?)?,
            "--backend" => {
                opts.backend = match value()?.as_str() {
                    "ex-cubecl" | "ex_cubecl" => BackendName::ExCubecl,
                    "burn-cubecl" | "burn_cubecl" if cfg!(feature = "peer") => BackendName::BurnCubecl,
                    "burn-cubecl" | "burn_cubecl" => {
                        return Err(Failure::usage(
                            "--backend burn-cubecl needs a build with the `peer` feature \
                             (cargo run -p ex_cubecl_examples --features peer ...); this build has: ex-cubecl"
                                .into(),
                        ));
                    }
                    other => {
                        let peer = if cfg!(feature = "peer") { ", burn-cubecl" } else { "" };
                        return Err(Failure::usage(format!("unknown backend `{other}`; this build has: ex-cubecl{peer}")));
                    }
                }
            }
            "--fusion" => opts.fusion = true,
            "--model" => {
                opts.models = match value()?.as_str() {
                    "mlp" => vec![ModelKind::Mlp],
                    "cnn" => vec![ModelKind::Cnn],
                    "all" => vec![ModelKind::Mlp, ModelKind::Cnn],
                    other => return Err(Failure::usage(format!("unknown model `{other}`; choose mlp, cnn or all"))),
                }
            }
            "--epochs" => opts.epochs = Some(number(&flag, value()?)?),
            "--batch" => opts.batch_size = number(&flag, value()?)?,
            "--lr" => opts.lr = number(&flag, value()?)?,
            "--seed" => opts.seed = number(&flag, value()?)?,
            "--test-fraction" => opts.test_fraction = number(&flag, value()?)?,
            "--out" => opts.out = PathBuf::from(value()?),
            "--devices" => opts.devices = number(&flag, value()?)?,
            "--no-progress" => opts.progress = false,
            "--export-data" => opts.export_data = Some(PathBuf::from(value()?)),
            "--checkpoint" => opts.checkpoint = Some(PathBuf::from(value()?)),
            "--resume" => opts.resume = true,
            "--stop-after" => opts.stop_after = Some(number(&flag, value()?)?),
            other => return Err(Failure::usage(format!("unknown argument `{other}`\n\n{USAGE}"))),
        }
    }
    if opts.batch_size == 0 || opts.epochs == Some(0) {
        return Err(Failure::usage("--batch and --epochs must be at least 1".into()));
    }
    if opts.devices == 0 || opts.devices > opts.batch_size {
        return Err(Failure::usage(format!(
            "--devices must be between 1 and the batch size ({}), not {}",
            opts.batch_size, opts.devices
        )));
    }
    if opts.devices > 1 && !cfg!(feature = "distributed") {
        return Err(Failure::usage(
            "--devices N needs a build with the `distributed` feature \
             (cargo run -p ex_cubecl_examples --features distributed --bin digits -- --devices 2)"
                .into(),
        ));
    }
    if opts.devices > 1 && opts.backend == BackendName::BurnCubecl {
        return Err(Failure::usage("--devices N runs on ex-cubecl only".into()));
    }
    if (opts.resume || opts.stop_after.is_some()) && opts.checkpoint.is_none() {
        return Err(Failure::usage("--resume and --stop-after need --checkpoint DIR".into()));
    }
    if opts.stop_after == Some(0) {
        return Err(Failure::usage("--stop-after must be at least 1".into()));
    }
    if !(opts.lr > 0.0 && opts.lr.is_finite()) {
        return Err(Failure::usage(format!("--lr must be a positive number, not {}", opts.lr)));
    }
    if !(0.05..=0.9).contains(&opts.test_fraction) {
        return Err(Failure::usage(format!("--test-fraction must be in [0.05, 0.9], not {}", opts.test_fraction)));
    }
    Ok(Some(opts))
}

/// The runtime named `name`, if this build has it; otherwise a message listing what it has.
pub fn parse_device(name: &str) -> Result<DeviceName, Failure> {
    match DeviceName::ALL.into_iter().find(|d| d.name() == name) {
        Some(device) if device.compiled() => Ok(device),
        Some(device) => Err(Failure::usage(format!(
            "device `{name}` is not compiled into this build (rebuild with --features {}).\n{}",
            device.name(),
            device_listing()
        ))),
        None => Err(Failure::usage(format!("unknown device `{name}`.\n{}", device_listing()))),
    }
}

/// One line per runtime the command knows of: not compiled in, compiled in but without a
/// device, or present (with the backend's name for it).
pub fn device_listing() -> String {
    let mut lines = vec!["devices of this build:".to_string()];
    for device in DeviceName::ALL {
        let state = if !device.compiled() {
            format!("not compiled in (build with --features {})", device.name())
        } else {
            match probe_device(device) {
                Ok(name) => format!("present ({name})"),
                Err(reason) => format!("compiled in, no device: {reason}"),
            }
        };
        lines.push(format!("  {:5} {state}", device.name()));
    }
    lines.join("\n")
}

/// Runs a tiny computation on `device` with our backend: `Ok(backend name)` or why it failed.
pub fn probe_device(device: DeviceName) -> Result<String, String> {
    match device {
        #[cfg(feature = "wgpu")]
        DeviceName::Wgpu => probe::<ex_cubecl::ExWgpu>(&Default::default()),
        #[cfg(feature = "cuda")]
        DeviceName::Cuda => probe::<ex_cubecl::ExCuda>(&Default::default()),
        #[allow(unreachable_patterns)]
        other => Err(format!("{} is not compiled in", other.name())),
    }
}

/// Sums two numbers on `device`, catching the panic of a runtime that finds no device. The
/// panic messages are kept for the listing, not printed: the first one names the cause (a
/// runtime may panic on its own device thread, and the caller then sees a closed channel).
fn probe<B: Backend>(device: &B::Device) -> Result<String, String> {
    let messages = Arc::new(Mutex::new(Vec::<String>::new()));
    let hook = std::panic::take_hook();
    let sink = Arc::clone(&messages);
    std::panic::set_hook(Box::new(move |info| {
        let payload = info.payload();
        let text = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "the runtime panicked".into());
        sink.lock().unwrap_or_else(|e| e.into_inner()).push(text);
    }));
    let result = catch_unwind(AssertUnwindSafe(|| {
        let sum: f32 = Tensor::<B, 1>::from_floats([1.0, 2.0], device).sum().into_data().to_vec::<f32>().unwrap()[0];
        (sum, B::name(device))
    }));
    std::panic::set_hook(hook);
    match result {
        Ok((sum, name)) if sum == 3.0 => Ok(name),
        Ok((sum, _)) => Err(format!("1 + 2 gave {sum}")),
        Err(_) => {
            let messages = messages.lock().unwrap_or_else(|e| e.into_inner());
            let first = messages.first().map_or("the runtime panicked", String::as_str);
            Err(shorten(first.lines().next().unwrap_or_default(), 160))
        }
    }
}

/// `text` cut to at most `max` characters, with "..." where it was cut (a runtime's reason
/// can list dozens of library names).
fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some(_) => format!("{}...", text.chars().take(max - 3).collect::<String>()),
        None => text.to_string(),
    }
}

/// Runs the command: parses `args` (without the program name) and trains.
pub fn main(args: impl IntoIterator<Item = String>) -> Result<(), Failure> {
    let Some(opts) = parse(args)? else {
        println!("{USAGE}");
        return Ok(());
    };
    if let Err(reason) = probe_device(opts.device) {
        return Err(Failure::usage(format!(
            "device `{}` is compiled in but not present: {reason}\n{}",
            opts.device.name(),
            device_listing()
        )));
    }
    run_backend(&opts).map(|_| ())
}

#[cfg(all(feature = "wgpu", feature = "peer"))]
type WgpuRuntime = cubecl::wgpu::WgpuRuntime;
#[cfg(all(feature = "cuda", feature = "peer"))]
type CudaRuntime = cubecl::cuda::CudaRuntime;
#[cfg(feature = "peer")]
type Peer<R> = burn_autodiff::Autodiff<burn_cubecl::CubeBackend<R, f32, i32, u8>>;

/// Picks the backend type for the options and runs every model on it.
fn run_backend(opts: &Options) -> Result<Vec<ModelReport>, Failure> {
    match (opts.device, opts.backend, opts.fusion) {
        #[cfg(feature = "wgpu")]
        (DeviceName::Wgpu, BackendName::ExCubecl, false) => run_on::<ex_cubecl::ExWgpuAutodiff>(opts, &wgpu_devices(opts.devices)),
        #[cfg(feature = "wgpu")]
        (DeviceName::Wgpu, BackendName::ExCubecl, true) => run_on::<ex_cubecl::ExWgpuFusionAutodiff>(opts, &wgpu_devices(opts.devices)),
        #[cfg(feature = "cuda")]
        (DeviceName::Cuda, BackendName::ExCubecl, false) => run_on::<ex_cubecl::ExCudaAutodiff>(opts, &cuda_devices(opts.devices)),
        #[cfg(feature = "cuda")]
        (DeviceName::Cuda, BackendName::ExCubecl, true) => run_on::<ex_cubecl::ExCudaFusionAutodiff>(opts, &cuda_devices(opts.devices)),
        #[cfg(all(feature = "wgpu", feature = "peer"))]
        (DeviceName::Wgpu, BackendName::BurnCubecl, false) => run::<Peer<WgpuRuntime>, OneDevice>(opts, &[Default::default()]),
        #[cfg(all(feature = "cuda", feature = "peer"))]
        (DeviceName::Cuda, BackendName::BurnCubecl, false) => run::<Peer<CudaRuntime>, OneDevice>(opts, &[Default::default()]),
        #[allow(unreachable_patterns)]
        (device, backend, fusion) => {
            let fused = if fusion { " with --fusion" } else { "" };
            Err(Failure::usage(format!("this build can't run {}{fused} on {}", backend.name(), device.name())))
        }
    }
}

/// The devices of `--devices n` on wgpu: the default adapter for one, else `n` logical
/// devices of it (`ex_cubecl::distributed::wgpu_devices`).
#[cfg(feature = "wgpu")]
fn wgpu_devices(n: usize) -> Vec<cubecl::wgpu::WgpuDevice> {
    #[cfg(feature = "distributed")]
    if n > 1 {
        return ex_cubecl::distributed::wgpu_devices(n);
    }
    let _ = n;
    vec![Default::default()]
}

/// The devices of `--devices n` on CUDA: GPUs `0..n`.
#[cfg(feature = "cuda")]
fn cuda_devices(n: usize) -> Vec<cubecl::cuda::CudaDevice> {
    (0..n).map(cubecl::cuda::CudaDevice::new).collect()
}

/// [`run`] on one device, or data-parallel on several.
#[cfg(feature = "distributed")]
fn run_on<B: AdamBackend>(opts: &Options, devices: &[B::Device]) -> Result<Vec<ModelReport>, Failure>
where
    B::InnerBackend: burn_backend::distributed::DistributedBackend,
{
    match devices.len() {
        1 => run::<B, OneDevice>(opts, devices),
        _ => run::<B, DataParallel>(opts, devices),
    }
}

/// [`run`] on one device (this build has no `distributed` feature).
#[cfg(not(feature = "distributed"))]
fn run_on<B: AdamBackend>(opts: &Options, devices: &[B::Device]) -> Result<Vec<ModelReport>, Failure> {
    run::<B, OneDevice>(opts, devices)
}

/// How a model is trained: on one device ([`OneDevice`]) or data-parallel on several
/// (`DataParallel`, feature `distributed`).
pub trait Trainer<B: AdamBackend> {
    /// Trains `model` (on `devices[0]`) and returns it trained, on `devices[0]`.
    fn train<M>(
        model: M,
        split: &Split,
        config: &TrainConfig,
        devices: &[B::Device],
        on_epoch: impl FnMut(&EpochStats),
    ) -> Result<M, TrainError>
    where
        M: AutodiffModule<B> + Classifier<B>,
        M::InnerModule: Classifier<B::InnerBackend>;
}

/// [`train`] on the first device.
pub struct OneDevice;

impl<B: AdamBackend> Trainer<B> for OneDevice {
    fn train<M>(model: M, split: &Split, config: &TrainConfig, devices: &[B::Device], on_epoch: impl FnMut(&EpochStats)) -> Result<M, TrainError>
    where
        M: AutodiffModule<B> + Classifier<B>,
        M::InnerModule: Classifier<B::InnerBackend>,
    {
        train(model, split, config, &devices[0], on_epoch)
    }
}

/// `crate::parallel::train_data_parallel` on every device.
#[cfg(feature = "distributed")]
pub struct DataParallel;

#[cfg(feature = "distributed")]
impl<B: AdamBackend> Trainer<B> for DataParallel
where
    B::InnerBackend: burn_backend::distributed::DistributedBackend,
{
    fn train<M>(model: M, split: &Split, config: &TrainConfig, devices: &[B::Device], on_epoch: impl FnMut(&EpochStats)) -> Result<M, TrainError>
    where
        M: AutodiffModule<B> + Classifier<B>,
        M::InnerModule: Classifier<B::InnerBackend>,
    {
        crate::parallel::train_data_parallel(model, split, config, devices, on_epoch)
    }
}

/// What a finished model run reports.
#[derive(Clone, Debug)]
pub struct ModelReport {
    /// The model.
    pub model: ModelKind,
    /// Test accuracy after the last epoch.
    pub test_accuracy: f64,
    /// The epochs' numbers.
    pub epochs: Vec<EpochStats>,
    /// Where the model was saved.
    pub saved: PathBuf,
    /// Whether the reloaded model predicted the test set exactly as the trained one.
    pub identical: bool,
}

/// Loads and splits the data, then trains (with `T`: on `devices[0]`, or data-parallel on
/// every device), reports, saves and reloads every model of `opts` on backend `B`, printing as
/// it goes; with `--export-data`, writes the split instead and trains nothing.
pub fn run<B: AdamBackend, T: Trainer<B>>(opts: &Options, devices: &[B::Device]) -> Result<Vec<ModelReport>, Failure> {
    let device = &devices[0];
    let split = Split::new(&Digits::load(), opts.test_fraction, opts.seed);
    if let Some(path) = &opts.export_data {
        let written = export_data::<B>(&split, path, device)
            .map_err(|e| Failure::run(format!("exporting the data to {}: {e}", path.display())))?;
        println!(
            "digits: wrote {} training and {} test images (seed {}, test fraction {}) to {} ({})",
            split.train.len(),
            split.test.len(),
            opts.seed,
            opts.test_fraction,
            written.display(),
            file_size(&written)
        );
        return Ok(Vec::new());
    }
    println!(
        "digits: {} training and {} test images of 8x8 pixels, 10 classes; backend {} ({}), seed {}",
        split.train.len(),
        split.test.len(),
        opts.backend.name(),
        B::name(device),
        opts.seed
    );
    if devices.len() > 1 {
        println!("digits: data-parallel on {} devices: {devices:?}", devices.len());
    }
    let mut reports = Vec::new();
    for &model in &opts.models {
        B::seed(device, opts.seed);
        let report = match model {
            ModelKind::Mlp => run_model::<B, Mlp<B>, T>(model, opts, &split, devices)?,
            ModelKind::Cnn => run_model::<B, Cnn<B>, T>(model, opts, &split, devices)?,
        };
        reports.push(report);
    }
    Ok(reports)
}

/// Trains one model, prints each epoch and a summary, then saves it, reloads it into a fresh
/// model and checks that the reloaded model predicts the test set identically.
pub fn run_model<B, M, T>(kind: ModelKind, opts: &Options, split: &Split, devices: &[B::Device]) -> Result<ModelReport, Failure>
where
    B: AdamBackend,
    M: AutodiffModule<B> + Classifier<B>,
    M::InnerModule: Classifier<B::InnerBackend>,
    T: Trainer<B>,
{
    let device = &devices[0];
    let config = TrainConfig {
        epochs: opts.epochs.unwrap_or_else(|| default_epochs(kind)),
        batch_size: opts.batch_size,
        lr: opts.lr,
        seed: opts.seed,
        progress: opts.progress,
        checkpoint: opts.checkpoint.as_ref().map(|dir| Checkpointing {
            dir: dir.clone(),
            name: kind.name().to_string(),
            resume: opts.resume,
            stop_after: opts.stop_after,
        }),
    };
    let model = M::init(device);
    println!(
        "\n{}: {} parameters; Adam (learning rate {}, cosine decay), batch {}, epochs {}",
        kind.name(),
        model.num_params(),
        if (1e-4..1e3).contains(&config.lr) { config.lr.to_string() } else { format!("{:e}", config.lr) },
        config.batch_size,
        config.epochs
    );
    let mut epochs = Vec::new();
    let model = T::train(model, split, &config, devices, |e| {
        println!(
            "{} epoch {:2}/{}  loss {:.4}  train {:5.1}%  test {:5.1}%  {:7.0} samples/s  {:6.2} s (+{:.2} s test)",
            kind.name(),
            e.epoch,
            config.epochs,
            e.loss,
            100.0 * e.train_accuracy,
            100.0 * e.test_accuracy,
            e.samples_per_sec,
            e.train_time.as_secs_f64(),
            e.eval_time.as_secs_f64()
        );
        epochs.push(e.clone());
    })
    .map_err(|e| Failure::run(format!("{}: {e}", kind.name())))?;
    if let (Some(k), Some(dir)) = (opts.stop_after.filter(|&k| k < config.epochs), &opts.checkpoint) {
        println!("{}: stopped after epoch {k} of {}; its checkpoint is in {} (--resume goes on)", kind.name(), config.epochs, dir.display());
    }

    let trained = model.valid();
    let predictions = predict(&trained, &split.test, device);
    let test_accuracy = accuracy(&predictions, &split.test.labels);
    let hits = (test_accuracy * split.test.len() as f64).round() as usize;
    println!(
        "{}: final test accuracy {:.2}% ({hits}/{}); {}",
        kind.name(),
        100.0 * test_accuracy,
        split.test.len(),
        epoch_time_summary(&epochs)
    );

    let path = opts.out.join(format!("ex_cubecl_digits_{}_{}", kind.name(), opts.backend.name()));
    let saved = save(trained, &path).map_err(|e| Failure::run(format!("saving {}: {e}", path.display())))?;
    let fresh = M::InnerModule::init(device);
    let reloaded = load(fresh, &path, device).map_err(|e| Failure::run(format!("loading {}: {e}", saved.display())))?;
    let again = predict(&reloaded, &split.test, device);
    let same = predictions.iter().zip(&again).filter(|(a, b)| a == b).count();
    let identical = same == predictions.len() && again.len() == predictions.len();
    println!(
        "{}: saved to {} ({}); reloaded into a fresh model: {same}/{} test predictions identical",
        kind.name(),
        saved.display(),
        file_size(&saved),
        predictions.len()
    );
    if !identical {
        return Err(Failure::run(format!(
            "{}: the reloaded model predicts {} of {} test images differently",
            kind.name(),
            predictions.len() - same,
            predictions.len()
        )));
    }
    Ok(ModelReport { model: kind, test_accuracy, epochs, saved, identical })
}

/// "time per epoch X s (median of epochs 2-N; epoch 1, with kernel compilation, Y s)".
pub fn epoch_time_summary(epochs: &[EpochStats]) -> String {
    let total = |e: &EpochStats| e.train_time + e.eval_time;
    match epochs {
        [] => "no epoch".into(),
        [only] => format!("time per epoch {:.2} s (one epoch, kernel compilation included)", total(only).as_secs_f64()),
        [first, rest @ ..] => {
            let mut times: Vec<Duration> = rest.iter().map(total).collect();
            times.sort();
            format!(
                "time per epoch {:.2} s (median of epochs 2-{}; epoch 1, with kernel compilation, {:.2} s)",
                times[times.len() / 2].as_secs_f64(),
                epochs.len(),
                total(first).as_secs_f64()
            )
        }
    }
}

fn file_size(path: &Path) -> String {
    match std::fs::metadata(path) {
        Ok(meta) => format!("{:.1} KiB", meta.len() as f64 / 1024.0),
        Err(_) => "size unknown".into(),
    }
}
