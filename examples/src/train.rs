//! The training loop (generic over any `AutodiffBackend`), evaluation, and saving and
//! loading a model with Burn's recorder.
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module};
use burn::record::{FullPrecisionSettings, NamedMpkFileRecorder, RecorderError};
use burn_nn::loss::CrossEntropyLossConfig;
use burn_autodiff::Autodiff;
use burn_backend::DeviceOps;
use burn_optim::adaptor::OptimizerAdaptor;
use burn_optim::{GradientsParams, Optimizer};
use burn_tensor::Tensor;
use burn_tensor::backend::{AutodiffBackend, Backend};
use indicatif::{ProgressBar, ProgressStyle};

use crate::checkpoint::{self, Checkpointing};
use crate::data::{Digits, Split, epoch_batches};
use crate::model::Classifier;

/// A backend with the Adam it trains with: on ours, `ex_cubecl::optim`'s (one fused kernel
/// per parameter update); on other backends, burn-optim's. Both have burn-optim's defaults
/// and math.
pub trait AdamBackend: AutodiffBackend {
    /// Adam for the module `M`.
    type Adam<M: AutodiffModule<Self>>: Optimizer<M, Self>;

    /// A fresh Adam with the default configuration.
    fn adam<M: AutodiffModule<Self>>() -> Self::Adam<M>;
}

impl<R: cubecl::Runtime> AdamBackend for Autodiff<ex_cubecl::ExCubeclBackend<R>>
where
    R::Device: DeviceOps,
{
    type Adam<M: AutodiffModule<Self>> = OptimizerAdaptor<ex_cubecl::optim::Adam, M, Self>;

    fn adam<M: AutodiffModule<Self>>() -> Self::Adam<M> {
        ex_cubecl::optim::AdamConfig::new().init()
    }
}

/// With fusion, burn-optim's Adam: its tensor ops fuse into a few launches per parameter.
impl<R: cubecl::Runtime> AdamBackend for Autodiff<burn_fusion::Fusion<ex_cubecl::ExCubeclBackend<R>>>
where
    R::Device: DeviceOps,
{
    type Adam<M: AutodiffModule<Self>> = OptimizerAdaptor<burn_optim::Adam, M, Self>;

    fn adam<M: AutodiffModule<Self>>() -> Self::Adam<M> {
        burn_optim::AdamConfig::new().init()
    }
}

#[cfg(feature = "peer")]
impl<R: burn_cubecl::CubeRuntime> AdamBackend for Autodiff<burn_cubecl::CubeBackend<R, f32, i32, u8>> {
    type Adam<M: AutodiffModule<Self>> = OptimizerAdaptor<burn_optim::Adam, M, Self>;

    fn adam<M: AutodiffModule<Self>>() -> Self::Adam<M> {
        burn_optim::AdamConfig::new().init()
    }
}

/// How to train.
#[derive(Clone, Debug)]
pub struct TrainConfig {
    /// Passes over the training set.
    pub epochs: usize,
    /// Images per optimizer step.
    pub batch_size: usize,
    /// Adam's learning rate at the first step; it decays to 0 along a cosine over the run
    /// ([`cosine_lr`]), which steadies the last epochs' test accuracy.
    pub lr: f64,
    /// Seeds the model's initial weights and the order of the batches.
    pub seed: u64,
    /// Draw a progress bar per epoch (only drawn when stderr is a terminal).
    pub progress: bool,
    /// Write a checkpoint after each epoch, resume from one, stop early
    /// ([`crate::checkpoint`]); `None`: none of it.
    pub checkpoint: Option<Checkpointing>,
}

/// What one epoch did.
#[derive(Clone, Debug)]
pub struct EpochStats {
    /// 1-based epoch number.
    pub epoch: usize,
    /// Mean training loss over the epoch's steps.
    pub loss: f64,
    /// Share of training images classified correctly while training (before each step).
    pub train_accuracy: f64,
    /// Share of test images classified correctly after the epoch.
    pub test_accuracy: f64,
    /// Training images per second of training time.
    pub samples_per_sec: f64,
    /// Time of the training steps (forward, backward, optimizer, one read of the loss each).
    pub train_time: Duration,
    /// Time of the test-set evaluation after the epoch.
    pub eval_time: Duration,
}

/// Why training stopped early.
#[derive(Clone, Debug, PartialEq)]
pub enum TrainError {
    /// The loss of a step was NaN or infinite.
    NonFiniteLoss {
        /// 1-based epoch.
        epoch: usize,
        /// 1-based step within the epoch.
        step: usize,
        /// Steps per epoch.
        steps: usize,
        /// The loss read back.
        loss: f32,
    },
    /// A checkpoint could not be written or resumed from.
    Checkpoint(String),
}

impl fmt::Display for TrainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TrainError::NonFiniteLoss { epoch, step, steps, loss } => write!(
                f,
                "the loss is {loss} at epoch {epoch}, step {step} of {steps}; training stopped \
                 (try a smaller --lr)"
            ),
            TrainError::Checkpoint(reason) => write!(f, "checkpoint: {reason}"),
        }
    }
}

impl std::error::Error for TrainError {}

/// Trains `model` on `split.train` with Adam ([`AdamBackend`]) and cross-entropy, evaluating on `split.test`
/// after each epoch and handing each epoch's numbers to `on_epoch`. Every step reads its loss
/// back (one device sync) and stops with [`TrainError::NonFiniteLoss`] if it is not finite.
/// With `config.checkpoint`, each epoch ends with a checkpoint, a run can resume from one
/// (starting at the epoch after it, bit for bit as if it had not stopped) and can stop early.
pub fn train<B, M>(
    mut model: M,
    split: &Split,
    config: &TrainConfig,
    device: &B::Device,
    mut on_epoch: impl FnMut(&EpochStats),
) -> Result<M, TrainError>
where
    B: AdamBackend,
    M: AutodiffModule<B> + Classifier<B>,
    M::InnerModule: Classifier<B::InnerBackend>,
{
    let mut optimizer = B::adam::<M>();
    let mut first = 1;
    if let Some(ck) = config.checkpoint.as_ref().filter(|ck| ck.resume) {
        let (epoch, resumed, state) = checkpoint::load::<B, M>(ck, config, model, optimizer, device).map_err(TrainError::Checkpoint)?;
        (model, optimizer, first) = (resumed, state, epoch + 1);
    }
    let last = config.checkpoint.as_ref().and_then(|ck| ck.stop_after).map_or(config.epochs, |k| k.min(config.epochs));
    let loss_fn = CrossEntropyLossConfig::new().init(device);
    let steps_per_epoch = split.train.len().div_ceil(config.batch_size);
    let total_steps = config.epochs * steps_per_epoch;
    for epoch in first..=last {
        let batches = epoch_batches(split.train.len(), config.batch_size, config.seed.wrapping_add(epoch as u64));
        let bar = progress_bar(config.progress, epoch, config.epochs, batches.len());
        let start = Instant::now();
        let (mut loss_sum, mut correct) = (0.0f64, 0usize);
        for (step, indices) in batches.iter().enumerate() {
            let (images, labels) = split.train.batch::<B>(indices, device);
            let logits = model.forward(images);
            let loss = loss_fn.forward(logits.clone(), labels.clone());
            let hits = logits.inner().argmax(1).squeeze_dim::<1>(1).equal(labels.inner()).int().sum().float();
            let read = Tensor::cat(vec![loss.clone().inner(), hits], 0);
            let grads = GradientsParams::from_grads(loss.backward(), &model);
            let done = (epoch - 1) * steps_per_epoch + step;
            model = optimizer.step(cosine_lr(config.lr, done, total_steps), model, grads);
            // One read per step, after the backward pass and the update are queued.
            let read = read.into_data().convert::<f32>().to_vec::<f32>().expect("ex_cubecl digits: loss values");
            if !read[0].is_finite() {
                bar.abandon();
                return Err(TrainError::NonFiniteLoss { epoch, step: step + 1, steps: batches.len(), loss: read[0] });
            }
            loss_sum += read[0] as f64;
            correct += read[1] as usize;
            bar.set_message(format!("loss {:.4}", loss_sum / (step + 1) as f64));
            bar.inc(1);
        }
        let train_time = start.elapsed();
        bar.finish_and_clear();
        let start = Instant::now();
        let test_accuracy = accuracy(&predict(&model.valid(), &split.test, device), &split.test.labels);
        let eval_time = start.elapsed();
        if let Some(ck) = &config.checkpoint {
            checkpoint::save::<B, M>(ck, epoch, config, &model, &optimizer).map_err(TrainError::Checkpoint)?;
        }
        on_epoch(&EpochStats {
            epoch,
            loss: loss_sum / batches.len().max(1) as f64,
            train_accuracy: correct as f64 / split.train.len().max(1) as f64,
            test_accuracy,
            samples_per_sec: split.train.len() as f64 / train_time.as_secs_f64(),
            train_time,
            eval_time,
        });
    }
    Ok(model)
}

/// The learning rate after `done` of `total` steps: `peak · (1 + cos(π · done / total)) / 2`.
pub fn cosine_lr(peak: f64, done: usize, total: usize) -> f64 {
    peak * 0.5 * (1.0 + (std::f64::consts::PI * done as f64 / total.max(1) as f64).cos())
}

fn progress_bar(enabled: bool, epoch: usize, epochs: usize, steps: usize) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("epoch {prefix} [{bar:30}] {pos}/{len} steps {elapsed_precise} {msg}")
            .expect("ex_cubecl digits: progress template")
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("{epoch}/{epochs}"));
    bar
}

/// Images predicted at once by [`predict`].
pub const EVAL_BATCH: usize = 512;

/// The predicted class of every image of `data`, in batches of [`EVAL_BATCH`].
pub fn predict<B: Backend, M: Classifier<B>>(model: &M, data: &Digits, device: &B::Device) -> Vec<i64> {
    let indices: Vec<usize> = (0..data.len()).collect();
    let mut predictions = Vec::with_capacity(data.len());
    for chunk in indices.chunks(EVAL_BATCH) {
        let (images, _) = data.batch::<B>(chunk, device);
        let classes = model.forward(images).argmax(1).into_data();
        predictions.extend(classes.convert::<i64>().to_vec::<i64>().expect("ex_cubecl digits: predicted classes"));
    }
    predictions
}

/// Share of `predictions` equal to `labels`.
pub fn accuracy(predictions: &[i64], labels: &[i64]) -> f64 {
    assert_eq!(predictions.len(), labels.len(), "ex_cubecl digits: one prediction per label");
    let hits = predictions.iter().zip(labels).filter(|(p, l)| p == l).count();
    hits as f64 / labels.len().max(1) as f64
}

/// Burn's named MessagePack recorder at full precision, so that a reloaded model has exactly
/// the trained weights.
pub type Recorder = NamedMpkFileRecorder<FullPrecisionSettings>;

/// Saves `model` with [`Recorder`] under `path` (the recorder sets the `.mpk` extension) and
/// returns the file's path. The file is replaced atomically (`ex_cubecl_record::replace_file`):
/// a crash while saving leaves the previous file or the new one, never a torn one.
pub fn save<B: Backend, M: Module<B>>(model: M, path: &Path) -> Result<PathBuf, RecorderError> {
    let target = path.with_extension("mpk");
    ex_cubecl_record::replace_file(&target, |tmp| model.save_file(tmp, &Recorder::new())).map_err(RecorderError::Unknown)?;
    Ok(target)
}

/// Loads the weights saved by [`save`] at `path` into `fresh`, a model of the same kind.
pub fn load<B: Backend, M: Module<B>>(fresh: M, path: &Path, device: &B::Device) -> Result<M, RecorderError> {
    fresh.load_file(path, &Recorder::new(), device)
}
