//! Scale-out on several logical wgpu devices of one adapter (lavapipe where there is no GPU),
//! in one process: the host-staged all-reduce of `DistributedBackend` for every reducible
//! dtype, through `Autodiff` and `Autodiff<Fusion>`; data-parallel training equal to
//! single-device training, with the gradients reduced after `backward` and during it (Burn's
//! hooks, our bucketed sync); the process-group API where it has no NCCL.
//!
//! `cargo test -p ex_cubecl --features distributed --test distributed` (the feature stays out
//! of the workspace's own test run: see `ex_cubecl::distributed`).

// burn-derive's `#[derive(Module)]` names its paths `burn::...`.
extern crate burn_core as burn;

use burn::module::{AutodiffModule, Module, ModuleMapper, Param};
use burn_backend::distributed::DistributedBackend;
use burn_backend::{DType, TensorData};
use burn_nn::{Linear, LinearConfig, Relu};
use burn_optim::{GradientsParams, Optimizer, SgdConfig};
use burn_tensor::backend::{AutodiffBackend, Backend};
use burn_tensor::{FloatDType, Int, Tensor};
use ex_cubecl::distributed::{
    DistributedConfig, DistributedError, DistributedParamId, GradientSyncConfig, GradientSyncStats, ProcessGroupConfig,
    ReduceOperation, UniqueId, all_reduce, all_reduce_gradients, init, mark_distributed, start_gradient_sync,
    stop_gradient_sync, wgpu_devices,
};
use ex_cubecl::cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use ex_cubecl::{ExWgpu, ExWgpuAutodiff, ExWgpuFusionAutodiff};

/// The tests share the logical devices, and the all-reduces of one group of devices pair up
/// in order: they run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Seeded values in [-2, 2): a small xorshift, so each device's input is known on the host.
fn values(seed: u64, n: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 * 4.0 - 2.0
        })
        .collect()
}

fn host(t: Tensor<impl Backend, 2>) -> Vec<f32> {
    t.into_data().convert::<f32>().to_vec::<f32>().unwrap()
}

/// Every device gets the sum (or the mean) of all devices' tensors, for f32, f16 and bf16,
/// with results identical across devices; each within the dtype's rounding of the exact
/// value (the host adds in f64 and rounds once).
fn check_all_reduce<B: DistributedBackend>(devices: &[B::Device]) {
    let shape = [3, 5];
    let inputs: Vec<Vec<f32>> = (0..devices.len()).map(|k| values(k as u64 + 7, 15)).collect();
    for (dtype, tol) in [(FloatDType::F32, 1e-6), (FloatDType::F16, 2e-3), (FloatDType::BF16, 1e-2)] {
        for op in [ReduceOperation::Sum, ReduceOperation::Mean] {
            let tensors: Vec<Tensor<B, 2>> = devices
                .iter()
                .zip(&inputs)
                .map(|(d, v)| Tensor::<B, 2>::from_data(TensorData::new(v.clone(), shape), d).cast(dtype))
                .collect();
            // What each device holds after the cast (the rounded inputs).
            let rounded: Vec<Vec<f32>> = tensors.iter().map(|t| host(t.clone())).collect();
            let reduced = all_reduce(tensors, op);
            assert_eq!(reduced.len(), devices.len());
            let scale = if op == ReduceOperation::Mean { 1.0 / devices.len() as f64 } else { 1.0 };
            let expected: Vec<f64> =
                (0..15).map(|i| rounded.iter().map(|v| v[i] as f64).sum::<f64>() * scale).collect();
            let first = host(reduced[0].clone());
            for (k, t) in reduced.into_iter().enumerate() {
                assert_eq!(t.device(), devices[k], "result {k} stays on its device");
                assert_eq!(t.dtype(), DType::from(dtype), "{dtype:?} {op:?}: result {k} keeps the dtype");
                let got = host(t);
                assert_eq!(got, first, "{dtype:?} {op:?}: device {k} differs from device 0");
                for (i, (g, e)) in got.iter().zip(&expected).enumerate() {
                    assert!(
                        (*g as f64 - e).abs() <= tol * (1.0 + e.abs()),
                        "{dtype:?} {op:?}: element {i} is {g}, expected {e}"
                    );
                }
            }
        }
    }
}

#[test]
fn all_reduce_on_three_logical_devices() {
    let _serial = serial();
    check_all_reduce::<ExWgpu>(&wgpu_devices(3));
}

#[test]
fn all_reduce_through_autodiff_and_fusion() {
    let _serial = serial();
    let devices = wgpu_devices(2);
    check_all_reduce::<ExWgpuAutodiff>(&devices);
    check_all_reduce::<ExWgpuFusionAutodiff>(&devices);
}

#[test]
fn all_reduce_of_one_device_is_the_identity() {
    let _serial = serial();
    let device = wgpu_devices(1).remove(0);
    let t = Tensor::<ExWgpu, 2>::from_data(TensorData::new(values(3, 6), [2, 3]), &device);
    let out = all_reduce(vec![t.clone()], ReduceOperation::Sum);
    assert_eq!(host(out[0].clone()), host(t));
}

#[test]
#[should_panic(expected = "ex_cubecl: all_reduce: tensor 1 has shape [2, 2], tensor 0 [2, 3]")]
fn all_reduce_refuses_different_shapes() {
    let _serial = serial();
    let devices = wgpu_devices(2);
    let a = Tensor::<ExWgpu, 2>::zeros([2, 3], &devices[0]);
    let b = Tensor::<ExWgpu, 2>::zeros([2, 2], &devices[1]);
    all_reduce(vec![a, b], ReduceOperation::Sum);
}

#[test]
#[should_panic(expected = "are both on device")]
fn all_reduce_refuses_two_tensors_of_one_device() {
    let _serial = serial();
    let device = wgpu_devices(1).remove(0);
    let a = Tensor::<ExWgpu, 2>::zeros([2, 3], &device);
    all_reduce(vec![a.clone(), a], ReduceOperation::Sum);
}

#[test]
#[should_panic(expected = "ex_cubecl: all_reduce: dtype I32")]
fn all_reduce_refuses_int_dtypes() {
    let _serial = serial();
    let devices = wgpu_devices(2);
    let ids = devices.iter().map(burn_backend::DeviceOps::id).collect::<Vec<_>>();
    let ints = Tensor::<ExWgpu, 1, Int>::zeros([4], &devices[0]).into_primitive();
    let _ = ExWgpu::all_reduce(ints, ReduceOperation::Sum, ids);
}

/// A small MLP, as a burn-nn user writes it.
#[derive(Module, Debug)]
struct Mlp<B: Backend> {
    hidden: Linear<B>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Mlp<B> {
    fn new(device: &B::Device) -> Self {
        Self {
            hidden: LinearConfig::new(6, 16).init(device),
            output: LinearConfig::new(16, 3).init(device),
            activation: Relu::new(),
        }
    }

    fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.output.forward(self.activation.forward(self.hidden.forward(x)))
    }
}

const BATCH: usize = 12;
const STEPS: usize = 4;
const LR: f64 = 0.05;

/// Rows `rows` of the seeded batch: inputs `[rows, 6]` and targets `[rows, 3]`.
fn batch<B: Backend>(step: usize, rows: std::ops::Range<usize>, device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 2>) {
    let x = values(100 + step as u64, BATCH * 6);
    let y = values(200 + step as u64, BATCH * 3);
    let n = rows.len();
    let x = TensorData::new(x[rows.start * 6..rows.end * 6].to_vec(), [n, 6]);
    let y = TensorData::new(y[rows.start * 3..rows.end * 3].to_vec(), [n, 3]);
    (Tensor::from_data(x, device), Tensor::from_data(y, device))
}

fn mse<B: Backend>(model: &Mlp<B>, x: Tensor<B, 2>, y: Tensor<B, 2>) -> Tensor<B, 1> {
    (model.forward(x) - y).powi_scalar(2).mean()
}

/// The single-device reference of the data-parallel tests: an MLP seeded with `seed` on
/// `device`, a probe batch (batch `probe_step`), and the probe's outputs before and after
/// `STEPS` SGD steps of whole batches.
struct Reference<B: AutodiffBackend> {
    initial: Mlp<B>,
    probe: Tensor<B::InnerBackend, 2>,
    before: Vec<f32>,
    expected: Vec<f32>,
}

fn reference<B: AutodiffBackend>(device: &B::Device, seed: u64, probe_step: usize) -> Reference<B> {
    B::seed(device, seed);
    let initial = Mlp::<B>::new(device);
    let probe = batch::<B>(probe_step, 0..BATCH, device).0.inner();
    // burn-nn initialises parameters lazily: this makes them once, before the replicas copy them.
    let before = host(initial.valid().forward(probe.clone()));
    let mut model = initial.clone();
    let mut optim = SgdConfig::new().init::<B, Mlp<B>>();
    for step in 0..STEPS {
        let (x, y) = batch::<B>(step, 0..BATCH, device);
        let grads = GradientsParams::from_grads(mse(&model, x, y).backward(), &model);
        model = optim.step(LR, model, grads);
    }
    let expected = host(model.valid().forward(probe.clone()));
    Reference { initial, probe, before, expected }
}

/// Every replica's probe outputs bit-identical to the others', training moved them, and they
/// equal single-device training's within 2e-5 (f32 sums in another order).
fn assert_matches_one_device(outputs: &[Vec<f32>], before: &[f32], expected: &[f32], what: &str) {
    for (k, out) in outputs.iter().enumerate() {
        assert_eq!(out, &outputs[0], "{what}: replica {k} differs from replica 0");
    }
    let moved = before.iter().zip(expected).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(moved > 1e-3, "{what}: training moved the outputs by only {moved}");
    for (i, (got, want)) in outputs[0].iter().zip(expected).enumerate() {
        assert!((got - want).abs() <= 2e-5 * (1.0 + want.abs()), "{what}: output {i} is {got}, one device gives {want}");
    }
}

/// `STEPS` SGD steps of batch `BATCH` on one device against the same steps on `n` devices,
/// each with `BATCH / n` rows and the gradients averaged by [`all_reduce_gradients`]: every
/// replica ends bit-identical to the others, and equal to the single-device model within
/// 2e-5 (f32 sums in another order), on a probe batch. The models must also have moved.
fn data_parallel_matches_one_device<B: AutodiffBackend<Device = WgpuDevice>>(n: usize)
where
    B::InnerBackend: DistributedBackend,
{
    let devices = wgpu_devices(n);
    let reference_device = devices[0].clone();
    let Reference { initial, probe, before, expected } = reference::<B>(&reference_device, 11, 99);

    let mut replicas: Vec<Mlp<B>> = devices.iter().map(|d| initial.clone().fork(d)).collect();
    let mut optims: Vec<_> = devices.iter().map(|_| SgdConfig::new().init::<B, Mlp<B>>()).collect();
    let rows = BATCH / n;
    for step in 0..STEPS {
        let mut grads: Vec<GradientsParams> = replicas
            .iter()
            .zip(&devices)
            .enumerate()
            .map(|(k, (replica, d))| {
                let (x, y) = batch::<B>(step, k * rows..(k + 1) * rows, d);
                GradientsParams::from_grads(mse(replica, x, y).backward(), replica)
            })
            .collect();
        all_reduce_gradients(&replicas[0], &mut grads, ReduceOperation::Mean);
        replicas = replicas
            .into_iter()
            .zip(grads)
            .zip(&mut optims)
            .map(|((replica, g), optim)| optim.step(LR, replica, g))
            .collect();
    }
    let outputs: Vec<Vec<f32>> = replicas
        .iter()
        .map(|r| host(r.valid().forward(probe.clone().to_device(&r.devices()[0]))))
        .collect();
    assert_matches_one_device(&outputs, &before, &expected, &format!("{n} devices"));
}

#[test]
fn data_parallel_on_two_devices_matches_one_device() {
    let _serial = serial();
    data_parallel_matches_one_device::<ExWgpuAutodiff>(2);
}

#[test]
fn data_parallel_on_three_devices_with_fusion_matches_one_device() {
    let _serial = serial();
    data_parallel_matches_one_device::<ExWgpuFusionAutodiff>(3);
}

#[test]
fn process_groups_without_cuda_are_single_process() {
    let _serial = serial();
    let id = UniqueId([7; 128]);
    let config = |world_size| ProcessGroupConfig { rank: 0, world_size, local_device: 0, id };
    match init(config(2)) {
        Err(DistributedError::SingleProcess(message)) => assert!(message.contains("single-process"), "{message}"),
        other => panic!("a group of two processes without CUDA: {other:?}"),
    }
    let group = init(config(1)).expect("a group of one process");
    assert_eq!((group.rank(), group.world_size()), (0, 1));
    let device = wgpu_devices(1).remove(0);
    let t = Tensor::<ExWgpu, 2>::from_data(TensorData::new(values(5, 4), [2, 2]), &device);
    let out = group.all_reduce(t.clone(), ReduceOperation::Sum).unwrap();
    assert_eq!(host(out), host(t));
}

#[test]
fn unique_ids_round_trip_through_hex() {
    let _serial = serial();
    let mut bytes = [0u8; 128];
    bytes.iter_mut().enumerate().for_each(|(i, b)| *b = (i * 37 % 256) as u8);
    let id = UniqueId(bytes);
    assert_eq!(UniqueId::from_hex(&id.to_hex()), Ok(id));
    assert!(matches!(UniqueId::from_hex("abc"), Err(DistributedError::Config(m)) if m.contains("256 hex digits")));
    assert!(UniqueId::from_hex(&"zz".repeat(128)).is_err());
}

/// Marks every parameter for Burn's gradient sync (`Tensor::set_distributed`), as burn-train's
/// `ddp` strategy does: backward then all-reduces each parameter's gradient as soon as it is
/// complete, through the sync server of `DistributedBackend`.
struct MarkDistributed;

impl<B: AutodiffBackend> ModuleMapper<B> for MarkDistributed {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let id = DistributedParamId::from(param.id.val());
        param.map(|t| t.set_distributed(id))
    }
}

/// Burn's own data-parallel machinery on our backend: one thread per device, each replica's
/// parameters marked distributed, the gradient sync server averaging the gradients during
/// `backward` (the host-staged all-reduce, rounds paired across the threads), then each
/// replica's SGD step. The result equals single-device training as in
/// [`data_parallel_matches_one_device`].
fn burn_sync_server_matches_one_device<B>(n: usize)
where
    B: AutodiffBackend<Device = WgpuDevice> + DistributedBackend,
    B::InnerBackend: DistributedBackend,
{
    let devices = wgpu_devices(n);
    let reference_device = devices[0].clone();
    let Reference { initial, probe, before, expected } = reference::<B>(&reference_device, 13, 98);

    B::start_communication_server(&devices, DistributedConfig { all_reduce_op: ReduceOperation::Mean });
    let rows = BATCH / n;
    let outputs: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(k, device)| {
                let (replica, probe) = (initial.clone().fork(device), probe.clone().to_device(device));
                scope.spawn(move || {
                    let mut replica = replica;
                    let mut optim = SgdConfig::new().init::<B, Mlp<B>>();
                    for step in 0..STEPS {
                        replica = replica.map(&mut MarkDistributed);
                        let (x, y) = batch::<B>(step, k * rows..(k + 1) * rows, device);
                        let grads = GradientsParams::from_grads(mse(&replica, x, y).backward(), &replica);
                        replica = optim.step(LR, replica, grads);
                    }
                    host(replica.valid().forward(probe))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a replica's thread")).collect()
    });
    B::close_communication_server(&devices[0]);
    assert_matches_one_device(&outputs, &before, &expected, &format!("{n} devices"));
}

#[test]
fn burn_gradient_sync_server_on_two_devices_matches_one_device() {
    let _serial = serial();
    burn_sync_server_matches_one_device::<ExWgpuAutodiff>(2);
}

/// The overlapped, bucketed gradient sync (`start_gradient_sync` with `config`, parameters
/// marked by `mark_distributed`), with the *sum*: each replica's loss is its shard's mean
/// divided by `n`, so the summed gradient is the whole batch's. A bucket missed leaves a
/// replica with its own shard's gradient over `n`, a bucket reduced twice gives `n` times the
/// gradient: either moves the replicas away from single-device training, which they must
/// match within 2e-5 as in [`data_parallel_matches_one_device`], bit-identical to each other.
/// Returns what the sync did, checked by the callers.
fn overlapped_sync_matches_one_device(n: usize, config: GradientSyncConfig) -> GradientSyncStats {
    type B = ExWgpuAutodiff;
    let devices = wgpu_devices(n);
    let reference_device = devices[0].clone();
    let Reference { initial, probe, before, expected } = reference::<B>(&reference_device, 17, 97);

    start_gradient_sync::<WgpuRuntime>(&devices, config.clone());
    let rows = BATCH / n;
    let outputs: Vec<Vec<f32>> = std::thread::scope(|scope| {
        let handles: Vec<_> = devices
            .iter()
            .enumerate()
            .map(|(k, device)| {
                let (replica, probe) = (initial.clone().fork(device), probe.clone().to_device(device));
                scope.spawn(move || {
                    let mut replica = replica;
                    let mut optim = SgdConfig::new().init::<B, Mlp<B>>();
                    for step in 0..STEPS {
                        replica = mark_distributed(replica);
                        let (x, y) = batch::<B>(step, k * rows..(k + 1) * rows, device);
                        let loss = mse(&replica, x, y).div_scalar(n as f32);
                        let grads = GradientsParams::from_grads(loss.backward(), &replica);
                        replica = optim.step(LR, replica, grads);
                    }
                    host(replica.valid().forward(probe))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a replica's thread")).collect()
    });
    let stats = stop_gradient_sync::<WgpuRuntime>().expect("the sync was started");
    assert_matches_one_device(&outputs, &before, &expected, &format!("{n} devices, {config:?}"));
    // Four parameters (two linear layers), each reduced once per step on every device.
    assert_eq!(stats.steps, STEPS * n, "{stats:?}");
    assert_eq!(stats.gradients, 4 * STEPS * n, "{stats:?}");
    assert_eq!(stats.bytes, (6 * 16 + 16 + 16 * 3 + 3) * 4 * STEPS * n, "{stats:?}");
    stats
}

#[test]
fn overlapped_gradient_sync_reduces_each_bucket_once() {
    let _serial = serial();
    // A bucket per parameter: each launched by the device that completes it, from `backward`.
    let stats = overlapped_sync_matches_one_device(2, GradientSyncConfig::new(ReduceOperation::Sum).with_bucket_bytes(0));
    assert_eq!(stats.buckets, 4 * STEPS * 2, "{stats:?}");
    assert!(stats.buckets_during_backward >= 4 * STEPS, "{stats:?}");
    // Buckets of about two parameters, on three devices.
    let stats = overlapped_sync_matches_one_device(3, GradientSyncConfig::new(ReduceOperation::Sum).with_bucket_bytes(200));
    assert!((2 * STEPS * 3..4 * STEPS * 3).contains(&stats.buckets), "{stats:?}");
    // DDP's sizes: the whole model fits the first bucket, closed when every gradient is complete.
    let stats = overlapped_sync_matches_one_device(2, GradientSyncConfig::new(ReduceOperation::Sum));
    assert_eq!(stats.buckets, STEPS * 2, "{stats:?}");
}
