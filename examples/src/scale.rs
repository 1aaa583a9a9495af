//! The `scale` binary's measurements (feature `distributed`): the all-reduce bus bandwidth of
//! `DistributedBackend::all_reduce` (one thread per device), and weak scaling of data-parallel training steps
//! (a fixed batch per device) of two models on 1..N devices of one process.
//!
//! Data parallelism here is one thread per device, each with its replica of the model and its
//! own optimizer: a step is the replica's forward pass on its device's batch, the mean
//! cross-entropy, backward with the gradients averaged across the devices, and the same SGD
//! update on every replica; each step ends with a device sync, as the `bench` rows do. On one
//! device there is no all-reduce. Two ways to average ([`GradSync`]):
//! - [`GradSync::Overlap`], as PyTorch's DDP (over NCCL only with
//!   `EX_CUBECL_ALLOW_NCCL_OVERLAP=1`, see `start_gradient_sync`): the parameters are marked
//!   distributed (`ex_cubecl::distributed::mark_distributed`) and `backward` all-reduces the
//!   gradients in buckets as soon as every device has completed them, on the communication
//!   stream while the backward pass goes on (`ex_cubecl::distributed::start_gradient_sync`);
//! - [`GradSync::AfterBackward`] (the `scale` binary's default): the all-reduce (mean) of every gradient after the backward
//!   pass, through `DistributedBackend::all_reduce`, then one `sync_collective`.
//!
//! Both use NCCL on CUDA and the host-staged all-reduce on wgpu. The replicas are models of
//! their own loaded with device 0's record, not `fork`s of it: forks share batch norm's running
//! statistics across the devices (see `weak_scaling`). With several devices, device
//! 0 first runs one untimed step alone (a copy of its replica), so that its kernels are
//! compiled before the other devices start: with a persistent kernel cache
//! (`scale --kernel-cache DIR`), the other devices then load them instead of compiling them
//! again.
use std::sync::Barrier;
use std::time::{Duration, Instant};

use burn::module::{AutodiffModule, Module, ModuleVisitor, Param};
use burn_backend::distributed::{DistributedBackend, ReduceOperation};
use burn_backend::{DeviceOps, TensorPrimitive};
use burn_nn::loss::CrossEntropyLossConfig;
use burn_nn::{Linear, LinearConfig};
use burn_optim::{GradientsParams, Optimizer};
use burn_tensor::activation::relu;
use burn_tensor::backend::{AutodiffBackend, Backend};
use burn_tensor::{FloatDType, Int, Tensor, TensorData};
use cubecl::Runtime;
use ex_cubecl::ExCubeclBackend;
use ex_cubecl::distributed::{GradientSyncConfig, mark_distributed, start_gradient_sync, stop_gradient_sync};

use crate::resnet::{ResNet, cast_module, labels, synthetic_batch, uniform_values};

/// The backend the scaling runs train on.
pub type Train<R> = burn_autodiff::Autodiff<ExCubeclBackend<R>>;

/// The same under Burn's fusion engine with our fusers (`scale --fusion`, one device).
pub type TrainFused<R> = burn_autodiff::Autodiff<burn_fusion::Fusion<ExCubeclBackend<R>>>;

/// The learning rate of every SGD step (no momentum, no decay; PyTorch's side the same).
pub const LR: f64 = 0.01;

/// One all-reduce measurement.
#[derive(Clone, Debug)]
pub struct Bandwidth {
    /// Devices in the group.
    pub devices: usize,
    /// Bytes of each device's f32 tensor.
    pub bytes: usize,
    /// Median seconds of one all-reduce (each call waits for its results).
    pub seconds: f64,
}

impl Bandwidth {
    /// Algorithm bandwidth, bytes per second: `bytes / seconds` (nccl-tests' algbw).
    pub fn algbw(&self) -> f64 {
        self.bytes as f64 / self.seconds
    }

    /// Bus bandwidth, bytes per second: `algbw * 2 (n - 1) / n` (nccl-tests' busbw for
    /// all-reduce: what each link carries, comparable across device counts).
    pub fn busbw(&self) -> f64 {
        let n = self.devices as f64;
        self.algbw() * 2.0 * (n - 1.0) / n
    }
}

/// Times the f32 all-reduce (sum) of `bytes` per device on `devices` through
/// `DistributedBackend::all_reduce`, one thread per device (as the training steps run):
/// `warmup` calls, then `iters` calls started together on every device (a barrier), each
/// ending when the result is on its device (`resolve` and a device sync); the median over
/// the calls of the slowest device's time.
///
/// One thread driving every device (`ex_cubecl::distributed::all_reduce`) hung with NCCL on
/// two H200s (2026-11-28), which is why this takes a thread per device.
pub fn all_reduce_bandwidth<R: Runtime>(devices: &[R::Device], bytes: usize, warmup: usize, iters: usize) -> Bandwidth
where
    R::Device: DeviceOps,
{
    let len = bytes / 4;
    let ids: Vec<_> = devices.iter().map(DeviceOps::id).collect();
    let barrier = Barrier::new(devices.len());
    let per_device: Vec<Vec<f64>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .map(|device| {
                let (ids, barrier) = (&ids, &barrier);
                scope.spawn(move || {
                    let input = Tensor::<ExCubeclBackend<R>, 1>::ones([len], device);
                    let run = || {
                        let primitive = input.clone().into_primitive().tensor();
                        let collective = <ExCubeclBackend<R> as DistributedBackend>::all_reduce(primitive, ReduceOperation::Sum, ids.clone());
                        let out = collective.resolve();
                        sync::<R>(device);
                        drop(out);
                    };
                    (0..warmup).for_each(|_| run());
                    (0..iters.max(1))
                        .map(|_| {
                            barrier.wait();
                            let start = Instant::now();
                            run();
                            start.elapsed().as_secs_f64()
                        })
                        .collect()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    let mut times: Vec<f64> = (0..iters.max(1)).map(|i| per_device.iter().map(|t| t[i]).fold(0.0, f64::max)).collect();
    times.sort_by(f64::total_cmp);
    Bandwidth { devices: devices.len(), bytes: len * 4, seconds: times[times.len() / 2] }
}

/// A model trained data-parallel by [`weak_scaling`]: how to build it and a device's batch,
/// and its loss.
pub trait Workload<B: AutodiffBackend>: Sync {
    /// The model.
    type Model: AutodiffModule<B> + 'static;
    /// One device's inputs and labels.
    type Batch: Clone;
    /// Samples in one device's batch.
    fn batch_size(&self) -> usize;
    /// A freshly initialised model on `device`.
    fn model(&self, device: &B::Device) -> Self::Model;
    /// The fixed batch of device number `rank`, made on `device`.
    fn batch(&self, rank: usize, device: &B::Device) -> Self::Batch;
    /// The mean loss of `model` on `batch`.
    fn loss(&self, model: &Self::Model, batch: Self::Batch) -> Tensor<B, 1>;
}

/// One weak-scaling measurement.
#[derive(Clone, Debug)]
pub struct Throughput {
    /// Devices trained on.
    pub devices: usize,
    /// Samples per device and step.
    pub batch_per_device: usize,
    /// Seconds of one step (the slowest device's mean over the timed steps).
    pub step_seconds: f64,
    /// The loss of device 0's last step (a finite number: the step really trained).
    pub last_loss: f32,
}

impl Throughput {
    /// Samples per second over all devices.
    pub fn samples_per_second(&self) -> f64 {
        (self.devices * self.batch_per_device) as f64 / self.step_seconds
    }
}

/// How data-parallel steps average the gradients (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GradSync {
    /// During the backward pass, in buckets of this many bytes (PyTorch DDP's 25 MiB; the
    /// first bucket 1 MiB, or this when smaller).
    Overlap {
        /// Bytes of one bucket.
        bucket_bytes: usize,
    },
    /// After the backward pass, one all-reduce per gradient.
    AfterBackward,
}

impl GradSync {
    /// DDP's buckets.
    pub const DDP: GradSync = GradSync::Overlap { bucket_bytes: 25 << 20 };
}

/// Trains `workload` data-parallel on `devices` (one thread each; see the module docs), the
/// gradients averaged as `grad_sync` says: `warmup` steps, then `steps` timed steps started
/// together on every device.
///
/// # Panics
/// When a loss is not finite or a device fails.
pub fn weak_scaling<R, W>(workload: &W, devices: &[R::Device], warmup: usize, steps: usize, grad_sync: GradSync) -> Throughput
where
    R: Runtime,
    R::Device: DeviceOps,
    W: Workload<Train<R>>,
{
    let n = devices.len();
    let ids: Vec<_> = devices.iter().map(DeviceOps::id).collect();
    let first = workload.model(&devices[0]);
    let started = Instant::now();
    if n > 1 {
        // Device 0's kernels compiled (and cached) before the other devices start.
        let batch = workload.batch(0, &devices[0]);
        let mut optimizer = ex_cubecl::optim::SgdConfig::new().init::<Train<R>, W::Model>();
        let model = first.clone();
        let loss = workload.loss(&model, batch);
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        drop(optimizer.step(LR, model, grads));
        sync::<R>(&devices[0]);
        eprintln!("scale: {n} devices: device 0's first step alone done at {:.1} s", started.elapsed().as_secs_f64());
    }
    // Each replica a model of its own holding `first`'s values. `fork` would leave burn's
    // `RunningState` (batch norm's running statistics) shared by the replicas, and its sync
    // then copies the replicas' statistics between devices in the forward pass of whichever
    // thread gets there first: over NCCL that copy (send and receive on the devices'
    // communication streams) lands between the other devices' all-reduces in another order
    // than theirs, and the step hangs (ResNet-50 on two H200s, 2026-11-28).
    let replicas: Vec<W::Model> = devices.iter().map(|d| workload.model(d).load_record(first.clone().into_record()).fork(d)).collect();
    drop(first);
    if n > 1 {
        eprintln!("scale: {n} devices: replicas made at {:.1} s", started.elapsed().as_secs_f64());
    }
    let overlap = match grad_sync {
        GradSync::Overlap { bucket_bytes } if n > 1 => {
            let mut config = GradientSyncConfig::new(ReduceOperation::Mean);
            config.bucket_bytes = bucket_bytes;
            config.first_bucket_bytes = config.first_bucket_bytes.min(bucket_bytes);
            start_gradient_sync::<R>(devices, config);
            true
        }
        _ => false,
    };
    let barrier = Barrier::new(n);
    let results: Vec<(Duration, f32)> = std::thread::scope(|scope| {
        let handles: Vec<_> = replicas
            .into_iter()
            .zip(devices)
            .enumerate()
            .map(|(rank, (mut model, device))| {
                let (barrier, ids) = (&barrier, &ids);
                scope.spawn(move || {
                    let batch = workload.batch(rank, device);
                    let mut optimizer = ex_cubecl::optim::SgdConfig::new().init::<Train<R>, W::Model>();
                    let mut step = |model: W::Model| {
                        // Marked each step: the optimizer's step drops the mark.
                        let model = if overlap { mark_distributed(model) } else { model };
                        let loss = workload.loss(&model, batch.clone());
                        // With `overlap`, backward returns the averaged gradients.
                        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
                        if n > 1 && !overlap {
                            all_reduce_mean::<R, _>(&model, &mut grads, ids.clone(), device);
                        }
                        let model = optimizer.step(LR, model, grads);
                        sync::<R>(device);
                        (model, loss)
                    };
                    // A first step compiles (or loads) every kernel: said as it ends, for long ones.
                    for i in 0..warmup {
                        model = step(model).0;
                        eprintln!("scale: {n} devices: device {rank}'s warm-up step {} done at {:.1} s", i + 1, started.elapsed().as_secs_f64());
                    }
                    barrier.wait();
                    timed(model, steps, step)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });
    if overlap {
        stop_gradient_sync::<R>();
    }
    let slowest = results.iter().map(|r| r.0).max().expect("one device at least");
    let last_loss = results[0].1;
    if !last_loss.is_finite() {
        panic!("scale: the loss on device 0 is {last_loss} after the timed steps");
    }
    Throughput {
        devices: n,
        batch_per_device: workload.batch_size(),
        step_seconds: slowest.as_secs_f64() / steps.max(1) as f64,
        last_loss,
    }
}

/// `workload`'s SGD step on one device under any autodiff backend `B`, with Burn's own SGD
/// (the same update as ours: no momentum, no decay): `warmup` steps, then the mean of `steps`
/// timed ones, each ending in a sync. How `scale --fusion` times `TrainFused`.
///
/// # Panics
/// When the loss is not finite or the device fails.
pub fn one_device<B: AutodiffBackend, W: Workload<B>>(workload: &W, device: &B::Device, warmup: usize, steps: usize) -> Throughput {
    let mut model = workload.model(device);
    let batch = workload.batch(0, device);
    let mut optimizer = burn_optim::SgdConfig::new().init::<B, W::Model>();
    let mut step = |model: W::Model| {
        let loss = workload.loss(&model, batch.clone());
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let model = optimizer.step(LR, model, grads);
        B::sync(device).unwrap_or_else(|e| panic!("scale: device {device:?} failed: {e:?}"));
        (model, loss)
    };
    for _ in 0..warmup {
        model = step(model).0;
    }
    let (elapsed, last_loss) = timed(model, steps, step);
    if !last_loss.is_finite() {
        panic!("scale: the loss is {last_loss} after the timed steps");
    }
    Throughput { devices: 1, batch_per_device: workload.batch_size(), step_seconds: elapsed.as_secs_f64() / steps.max(1) as f64, last_loss }
}

/// `steps` steps (at least one) from `model`, each `step` returning the next model and its
/// loss: their wall time, and the last loss (read after the clock stops).
fn timed<M, B: Backend>(mut model: M, steps: usize, mut step: impl FnMut(M) -> (M, Tensor<B, 1>)) -> (Duration, f32) {
    let start = Instant::now();
    let mut last = None;
    for _ in 0..steps.max(1) {
        let (next, loss) = step(model);
        model = next;
        last = Some(loss);
    }
    let elapsed = start.elapsed();
    let loss = last.expect("at least one step").into_data().convert::<f32>().to_vec::<f32>().expect("the loss")[0];
    (elapsed, loss)
}

fn sync<R: Runtime>(device: &R::Device)
where
    R::Device: DeviceOps,
{
    if let Err(e) = <ExCubeclBackend<R> as Backend>::sync(device) {
        panic!("scale: device {device:?} failed: {e:?}");
    }
}

/// This device's share of the gradients' all-reduce: every parameter's gradient, in the
/// module's order (the same on every device), replaced by its mean across `ids`.
fn all_reduce_mean<R, M>(model: &M, grads: &mut GradientsParams, ids: Vec<burn_backend::DeviceId>, device: &R::Device)
where
    R: Runtime,
    R::Device: DeviceOps,
    M: AutodiffModule<Train<R>>,
{
    let mut reducer = Reducer::<R> { grads, ids, pending: Vec::new(), _runtime: std::marker::PhantomData };
    model.visit(&mut reducer);
    let Reducer { grads, pending, .. } = reducer;
    // One wait covers every all-reduce this device made (NCCL: the compute stream waits for
    // the communication stream; host-staged: until every round is complete).
    <ExCubeclBackend<R> as DistributedBackend>::sync_collective(device);
    for register in pending {
        register(&mut *grads);
    }
}

type Register<'a> = Box<dyn FnOnce(&mut GradientsParams) + 'a>;

struct Reducer<'a, R: Runtime> {
    grads: &'a mut GradientsParams,
    ids: Vec<burn_backend::DeviceId>,
    pending: Vec<Register<'a>>,
    _runtime: std::marker::PhantomData<R>,
}

impl<'a, R: Runtime> ModuleVisitor<Train<R>> for Reducer<'a, R>
where
    R::Device: DeviceOps,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<Train<R>, D>>) {
        let id = param.id;
        let Some(grad) = self.grads.remove::<ExCubeclBackend<R>, D>(id) else {
            return;
        };
        let collective = <ExCubeclBackend<R> as DistributedBackend>::all_reduce(
            grad.into_primitive().tensor(),
            ReduceOperation::Mean,
            self.ids.clone(),
        );
        self.pending.push(Box::new(move |grads: &mut GradientsParams| {
            // SAFETY: `all_reduce_mean` called `sync_collective` on this device after every
            // all-reduce of the step and before this runs, which is what `resolve` does.
            let reduced = unsafe { collective.assume_resolved() };
            grads.register::<ExCubeclBackend<R>, D>(id, Tensor::from_primitive(TensorPrimitive::Float(reduced)));
        }));
    }
}

/// An MLP with ReLU (784-4096-4096-10 in the benchmarks: [`MLP_WIDTHS`]), f32 (TF32 products
/// where the process asks for them), on random inputs.
pub struct MlpWorkload {
    /// Samples per device.
    pub batch: usize,
    /// Layer widths, input first.
    pub widths: Vec<usize>,
}

/// The MLP of [`MlpWorkload`].
#[derive(burn::module::Module, Debug)]
pub struct WideMlp<B: Backend> {
    layers: Vec<Linear<B>>,
}

/// The widths of [`WideMlp`].
pub const MLP_WIDTHS: [usize; 4] = [784, 4096, 4096, 10];

impl<B: AutodiffBackend> Workload<B> for MlpWorkload {
    type Model = WideMlp<B>;
    type Batch = (Tensor<B, 2>, Tensor<B, 1, Int>);

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn model(&self, device: &B::Device) -> WideMlp<B> {
        WideMlp { layers: self.widths.windows(2).map(|w| LinearConfig::new(w[0], w[1]).init(device)).collect() }
    }

    fn batch(&self, rank: usize, device: &B::Device) -> Self::Batch {
        let (inputs, classes) = (self.widths[0], self.widths[self.widths.len() - 1]);
        let values = uniform_values(self.batch * inputs, 100 + rank as u64);
        let x = Tensor::from_data(TensorData::new(values, [self.batch, inputs]), device);
        (x, labels(self.batch, classes, device))
    }

    fn loss(&self, model: &WideMlp<B>, (x, labels): Self::Batch) -> Tensor<B, 1> {
        let mut h = x;
        for (i, layer) in model.layers.iter().enumerate() {
            h = layer.forward(h);
            if i + 1 < model.layers.len() {
                h = relu(h);
            }
        }
        CrossEntropyLossConfig::new().init(&h.device()).forward(h, labels)
    }
}

/// ResNet-50 ([`crate::resnet`]; other depths by `blocks`) on random `side`x`side` images, in
/// `dtype` (parameters, activations and gradients; the loss in f32).
pub struct ResNetWorkload {
    /// Bottleneck blocks per stage ([`crate::resnet::RESNET50_BLOCKS`] for ResNet-50).
    pub blocks: [usize; 4],
    /// Classes (1000 for ImageNet).
    pub classes: usize,
    /// Samples per device.
    pub batch: usize,
    /// Image side (224 in the benchmarks).
    pub side: usize,
    /// The model's dtype.
    pub dtype: FloatDType,
}

impl<B: AutodiffBackend> Workload<B> for ResNetWorkload {
    type Model = ResNet<B>;
    type Batch = (Tensor<B, 4>, Tensor<B, 1, Int>);

    fn batch_size(&self) -> usize {
        self.batch
    }

    fn model(&self, device: &B::Device) -> ResNet<B> {
        cast_module(ResNet::new(self.blocks, self.classes, device), self.dtype)
    }

    fn batch(&self, rank: usize, device: &B::Device) -> Self::Batch {
        synthetic_batch::<B>(self.batch, self.side, self.classes, 200 + rank as u64, self.dtype, device)
    }

    fn loss(&self, model: &ResNet<B>, (images, labels): Self::Batch) -> Tensor<B, 1> {
        model.loss(images, labels)
    }
}
