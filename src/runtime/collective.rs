//! All-reduces across the devices of one process, without Burn's `distributed` feature (the
//! NIF's `all_reduce` and the `DistributedBackend` of `crate::distributed` both run here).
//!
//! On CUDA with NCCL ([`peer_to_peer`]) a device's all-reduce is NCCL's, through cubecl-cuda's
//! communicator of the group's devices, and [`sync_collective`] makes the device's stream
//! wait for it. Elsewhere it is host-staged: the `k`-th all-reduce of every device of a group
//! is one round. Each device's call reads its tensor to the host and, while the round waits
//! for other devices, gets an empty output; the call that completes the round sums the
//! contributions in f64 in the order of the device ids (so every device gets bit-identical
//! values, whatever the order of the calls), divides for a mean, uploads the result to every
//! device and copies it into the waiting outputs. [`sync_collective`] on a device waits until
//! its rounds are complete.
use std::any::{Any, TypeId};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use burn_backend::{DType, DeviceId, DeviceOps, Shape, TensorData};
use cubecl::Runtime;
use cubecl::stream_id::StreamId;

use super::{DeviceContext, exact_buffer, peer_to_peer};
use crate::launch::copy::copy_into;
use crate::launch::data::{from_data, into_data};
use crate::tensor::CubeTensor;

/// How an all-reduce combines the devices' tensors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    /// The sum.
    Sum,
    /// The mean: the sum divided by the number of devices.
    Mean,
}

/// The dtypes an all-reduce takes.
pub const REDUCIBLE_DTYPES: [DType; 4] = [DType::F32, DType::F16, DType::BF16, DType::F64];

/// The all-reduce of `tensors`, one per device of one runtime: each result, on its input's
/// device, holds the sum or mean of all of them. Waits until the results are ready.
///
/// # Panics
/// When `tensors` is empty, two are on one device, their shapes or dtypes differ, or a dtype
/// is not one of [`REDUCIBLE_DTYPES`].
pub fn all_reduce<R: Runtime>(tensors: Vec<CubeTensor<R>>, op: ReduceOp) -> Vec<CubeTensor<R>>
where
    R::Device: DeviceOps,
{
    let Some(first) = tensors.first() else {
        panic!("ex_cubecl: all_reduce: no tensors (one per device expected)");
    };
    let (shape, dtype) = (first.dims().to_vec(), first.dtype);
    let ids: Vec<DeviceId> = tensors.iter().map(|t| t.device.id()).collect();
    for (i, t) in tensors.iter().enumerate() {
        if t.dims() != shape.as_slice() || t.dtype != dtype {
            panic!(
                "ex_cubecl: all_reduce: tensor {i} is {:?} ({:?}), tensor 0 {shape:?} ({dtype:?}); every device's tensor must have one shape and dtype",
                t.dims(),
                t.dtype
            );
        }
        if let Some(j) = ids[..i].iter().position(|d| *d == ids[i]) {
            panic!("ex_cubecl: all_reduce: tensors {j} and {i} are both on device {:?} (one tensor per device)", t.device);
        }
    }
    let devices: Vec<R::Device> = tensors.iter().map(|t| t.device.clone()).collect();
    let out: Vec<CubeTensor<R>> = match peer_to_peer::<R>() {
        // NCCL: a communicator's first use joins every device of the group, and each call
        // waits for the others', so one thread can't make the calls of several devices in
        // turn: each device's share runs on a thread of its own.
        true => on_threads(tensors, |t| all_reduce_one(t, op, ids.clone())),
        false => tensors.into_iter().map(|t| all_reduce_one(t, op, ids.clone())).collect(),
    };
    devices.iter().for_each(sync_collective::<R>);
    out
}

/// `f` of each item, each on a scoped thread of its own, in the items' order; a panic in
/// one is this thread's panic, once every thread has ended.
pub(crate) fn on_threads<T: Send, U: Send>(items: Vec<T>, f: impl Fn(T) -> U + Sync) -> Vec<U> {
    std::thread::scope(|s| {
        let handles: Vec<_> = items.into_iter().map(|item| s.spawn(|| f(item))).collect();
        let results: Vec<_> = handles.into_iter().map(|h| h.join()).collect();
        results.into_iter().map(|r| r.unwrap_or_else(|p| std::panic::resume_unwind(p))).collect()
    })
}

/// This device's share of an all-reduce over `device_ids` (one call per device of the group,
/// in the same order on every device); the output is valid after [`sync_collective`], and
/// until then the input is kept alive here (NCCL reads it on the communication stream).
///
/// # Panics
/// For a dtype that is not one of [`REDUCIBLE_DTYPES`], or a device not in `device_ids`.
pub fn all_reduce_one<R: Runtime>(tensor: CubeTensor<R>, op: ReduceOp, device_ids: Vec<DeviceId>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    if !REDUCIBLE_DTYPES.contains(&tensor.dtype) {
        panic!(
            "ex_cubecl: all_reduce: dtype {:?} (shape {:?}) is not supported: f32, f16, bf16 and f64 are",
            tensor.dtype,
            tensor.dims()
        );
    }
    if !device_ids.contains(&tensor.device.id()) {
        panic!(
            "ex_cubecl: all_reduce: the tensor of shape {:?} ({:?}) is on device {:?}, which is not among the group's devices {device_ids:?}",
            tensor.dims(),
            tensor.dtype,
            tensor.device
        );
    }
    match peer_to_peer::<R>() {
        true => nccl_all_reduce(tensor, op, device_ids),
        false => staged_all_reduce(tensor, op, device_ids),
    }
}

/// Waits until `device`'s all-reduces are done (NCCL: its stream waits for the communication
/// stream; host-staged: until its rounds are complete).
///
/// # Panics
/// When a host-staged round waits longer than [`COLLECTIVE_TIMEOUT_ENV`] says.
pub fn sync_collective<R: Runtime>(device: &R::Device)
where
    R::Device: DeviceOps,
{
    match peer_to_peer::<R>() {
        true => {
            DeviceContext::client::<R>(device).sync_collective();
            // The stream now waits for the all-reduces: their inputs may go back to the pools.
            drop(take_inputs::<R>(device));
        }
        false => wait_for_rounds::<R>(device),
    }
}

/// NCCL's all-reduce on cubecl-cuda's communication stream (its communicator of
/// `device_ids`, made on first use).
fn nccl_all_reduce<R: Runtime>(tensor: CubeTensor<R>, op: ReduceOp, device_ids: Vec<DeviceId>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    let source = exact_buffer(tensor, "all_reduce");
    let op = match op {
        ReduceOp::Sum => cubecl::server::ReduceOperation::Sum,
        ReduceOp::Mean => cubecl::server::ReduceOperation::Mean,
    };
    // cubecl's all-reduce takes source and destination on one stream: the source's.
    let out = StreamId::executes(source.handle.stream, || {
        let out = CubeTensor::empty(&source.client, &source.device, Shape::from(source.dims().to_vec()), source.dtype);
        let mut client = source.client.clone();
        client.all_reduce(source.handle.clone(), out.handle.clone(), source.storage().elem_type(), device_ids, op);
        out
    });
    keep_input(source);
    out
}

/// The inputs of each device's NCCL all-reduces, until its next [`sync_collective`]. NCCL
/// reads them on the communication stream, which cubecl's memory pools don't see: an input
/// dropped at once (a gradient replaced by its all-reduce, a copy made for NCCL) could be
/// handed to the next work on the compute stream and written over before NCCL reads it.
static INPUTS: Mutex<Vec<((TypeId, DeviceId), Box<dyn Any + Send>)>> = Mutex::new(Vec::new());

fn keep_input<R: Runtime>(input: CubeTensor<R>)
where
    R::Device: DeviceOps,
{
    let key = (TypeId::of::<R>(), input.device.id());
    INPUTS.lock().unwrap_or_else(|e| e.into_inner()).push((key, Box::new(input)));
}

/// The inputs kept for `device`'s all-reduces, taken out of [`INPUTS`].
fn take_inputs<R: Runtime>(device: &R::Device) -> Vec<Box<dyn Any + Send>>
where
    R::Device: DeviceOps,
{
    let key = (TypeId::of::<R>(), device.id());
    let mut inputs = INPUTS.lock().unwrap_or_else(|e| e.into_inner());
    let (mine, others) = std::mem::take(&mut *inputs).into_iter().partition(|(k, _)| *k == key);
    *inputs = others;
    mine.into_iter().map(|(_, input)| input).collect()
}

/// Seconds `sync_collective` waits for the other devices of a round before it fails
/// (default 600): a device that never makes its all-reduce would otherwise hang the others.
pub const COLLECTIVE_TIMEOUT_ENV: &str = "EX_CUBECL_COLLECTIVE_TIMEOUT";

/// How long a device waits for the others' share of a collective: [`COLLECTIVE_TIMEOUT_ENV`]
/// seconds, 600 where it is unset or not a number.
pub(crate) fn collective_timeout() -> Duration {
    std::env::var(COLLECTIVE_TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .map_or(Duration::from_secs(600), Duration::from_secs_f64)
}

/// One device's share of a round: its values, and the output it was handed (a
/// `CubeTensor<R>`) until the round completes.
struct Contribution {
    values: Vec<f64>,
    output: Box<dyn Any + Send>,
}

/// The `k`-th all-reduce of a group.
struct Round {
    shape: Shape,
    dtype: DType,
    contributions: BTreeMap<DeviceId, Contribution>,
}

/// The devices of one all-reduce group, in one runtime.
#[derive(Default)]
struct Group {
    /// How many all-reduces each device has made in this group.
    made: HashMap<DeviceId, u64>,
    rounds: BTreeMap<u64, Round>,
}

#[derive(Default)]
struct State {
    groups: HashMap<(TypeId, Vec<DeviceId>), Group>,
    /// Rounds a device has contributed to that are not complete yet.
    waiting: HashMap<(TypeId, DeviceId), usize>,
}

static STATE: LazyLock<Mutex<State>> = LazyLock::new(Default::default);
static ROUND_DONE: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|e| e.into_inner())
}

/// This device's host-staged all-reduce of `tensor` over `device_ids` (see the module docs).
fn staged_all_reduce<R: Runtime>(tensor: CubeTensor<R>, op: ReduceOp, mut device_ids: Vec<DeviceId>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    device_ids.sort();
    device_ids.dedup();
    if device_ids.len() == 1 {
        return tensor;
    }
    let me = tensor.device.id();
    let (shape, dtype) = (tensor.layout.shape.clone(), tensor.dtype);
    let values = host_values(tensor.clone());
    let runtime = TypeId::of::<R>();

    let mut guard = state();
    let group = guard.groups.entry((runtime, device_ids.clone())).or_default();
    let made = group.made.entry(me).or_insert(0);
    let index = *made;
    *made += 1;
    let round = group.rounds.entry(index).or_insert_with(|| Round {
        shape: shape.clone(),
        dtype,
        contributions: BTreeMap::new(),
    });
    if round.shape != shape || round.dtype != dtype {
        let (theirs, their_dtype) = (round.shape.to_vec(), round.dtype);
        drop(guard);
        panic!(
            "ex_cubecl: all_reduce: device {:?} reduces shape {:?} ({dtype:?}) where the other devices of {device_ids:?} \
             reduce {theirs:?} ({their_dtype:?}) in their all-reduce number {index}; every device must make the same \
             all-reduces in the same order",
            tensor.device,
            shape.to_vec()
        );
    }
    if round.contributions.len() + 1 < device_ids.len() {
        let output = CubeTensor::empty(&tensor.client, &tensor.device, shape, dtype);
        round.contributions.insert(me, Contribution { values, output: Box::new(output.clone()) });
        *guard.waiting.entry((runtime, me)).or_insert(0) += 1;
        return output;
    }
    let mut round = group.rounds.remove(&index).expect("the round was just found");
    if group.rounds.is_empty() && group.made.values().all(|&n| n == group.made[&me]) {
        guard.groups.remove(&(runtime, device_ids.clone()));
    }
    drop(guard);

    round.contributions.insert(me, Contribution { values, output: Box::new(()) });
    let reduced = reduce(&round.contributions, op, device_ids.len(), shape.clone(), dtype);
    let mut result = None;
    for (id, contribution) in round.contributions {
        if id == me {
            result = Some(from_data(reduced.clone(), &tensor.device, dtype));
            continue;
        }
        let output = *contribution.output.downcast::<CubeTensor<R>>().expect("one runtime per group");
        let staged = from_data(reduced.clone(), &output.device, dtype);
        copy_into(&staged, &staged.layout, 0, &output, &output.layout);
        // Done before the waiting device is told, so its reads see the values.
        if let Err(e) = super::wait::sync(&output.client) {
            panic!("ex_cubecl: all_reduce: writing the result on device {:?} failed: {e}", output.device);
        }
    }
    let mut guard = state();
    for id in device_ids.iter().filter(|&&id| id != me) {
        if let Some(n) = guard.waiting.get_mut(&(runtime, *id)) {
            *n = n.saturating_sub(1);
        }
    }
    drop(guard);
    ROUND_DONE.notify_all();
    result.expect("this device contributed")
}

/// Waits until every round `device` contributed to is complete.
///
/// # Panics
/// After [`COLLECTIVE_TIMEOUT_ENV`] seconds (default 600) without completion.
fn wait_for_rounds<R: Runtime>(device: &R::Device)
where
    R::Device: DeviceOps,
{
    let key = (TypeId::of::<R>(), device.id());
    let limit = collective_timeout();
    let start = Instant::now();
    let mut guard = state();
    while guard.waiting.get(&key).is_some_and(|&n| n > 0) {
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            let pending = guard.waiting[&key];
            drop(guard);
            panic!(
                "ex_cubecl: sync_collective: device {device:?} waited {:.0} s for the other devices of {pending} \
                 all-reduce(s); every device of a group must make the same all-reduces ({COLLECTIVE_TIMEOUT_ENV} sets the limit)",
                limit.as_secs_f64()
            );
        }
        guard = ROUND_DONE.wait_timeout(guard, left).unwrap_or_else(|e| e.into_inner()).0;
    }
}

/// The values of `tensor` on the host, as f64.
fn host_values<R: Runtime>(tensor: CubeTensor<R>) -> Vec<f64> {
    let device = tensor.device.clone();
    let data = cubecl::future::block_on(into_data(tensor))
        .unwrap_or_else(|e| panic!("ex_cubecl: all_reduce: reading the tensor of device {device:?}: {e:?}"));
    data.convert::<f64>().to_vec::<f64>().expect("f64 data after convert")
}

/// The sum (or mean) of the contributions, added in the order of the device ids, as `dtype`.
fn reduce(contributions: &BTreeMap<DeviceId, Contribution>, op: ReduceOp, n: usize, shape: Shape, dtype: DType) -> TensorData {
    let mut parts = contributions.values();
    let mut acc = parts.next().map(|c| c.values.clone()).unwrap_or_default();
    for part in parts {
        acc.iter_mut().zip(&part.values).for_each(|(a, v)| *a += v);
    }
    if op == ReduceOp::Mean {
        acc.iter_mut().for_each(|a| *a /= n as f64);
    }
    TensorData::new(acc, shape.to_vec()).convert_dtype(dtype)
}
