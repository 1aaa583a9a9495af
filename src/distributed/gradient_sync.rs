//! The gradient sync of data-parallel training on [`ExCubeclBackend`], overlapped with the
//! backward pass and bucketed the way PyTorch's DDP does it, behind Burn's own hooks.
//!
//! Burn's data-parallel machinery marks each replica's parameters distributed
//! (`Tensor::set_distributed`, [`mark_distributed`]); `backward` then calls the backend's
//! `register_sync_parameters` at its start, `submit_gradient_sync` for each parameter as soon
//! as its gradient is complete, and `submit_sync_collective` at its end, on the thread that
//! runs it. burn-backend's default hooks send everything to one sync server thread, which makes
//! the all-reduce of every device in turn from that one thread (the pattern that hung with
//! NCCL on two H200s, and that NCCL only supports inside a group call), one all-reduce per
//! parameter. [`ExCubeclBackend`] implements the hooks itself, here:
//!
//! - a group per runtime ([`start_gradient_sync`], or `DistributedBackend::
//!   start_communication_server`) knows its devices; each backward pass is a step of it;
//! - a parameter whose gradient every device has completed joins the open bucket of its dtype;
//!   a bucket closes when it holds [`GradientSyncConfig::bucket_bytes`] (25 MiB as DDP; the
//!   first [`GradientSyncConfig::first_bucket_bytes`], 1 MiB, so communication starts early),
//!   and the rest close when every parameter is complete. The closed buckets form one list per
//!   step, the same for every device;
//! - each device launches the buckets in that order from its own thread, at its next hook
//!   call: the gradients are copied into one buffer (one launch for several parameters), the
//!   buffer's all-reduce starts (NCCL on cubecl-cuda's communication stream, which waits for the
//!   copy on the compute stream; host-staged elsewhere), and the gradients are replaced by
//!   views of the result, while the backward pass goes on;
//! - `submit_sync_collective` launches what is left, waits for the other devices' buckets,
//!   then makes the compute stream wait for the communication stream (`sync_collective`): the
//!   only point where computation waits for the all-reduces. The buffers NCCL writes are kept
//!   until then (and those it reads, by `runtime::collective`), so the compute stream never
//!   reuses their memory while NCCL works on it.
//!
//! Each device makes only its own all-reduces, all in the one order, so NCCL sees matching
//! calls on every rank and the host-staged rounds pair up. A parameter is reduced once per
//! step (a second gradient for it in one step is an error), and every parameter completed on
//! every device is reduced; the reduced values are the same as those of reducing every
//! gradient after the backward pass (elementwise sums, whatever the buckets).
//!
//! [`ExCubeclBackend`]: crate::ExCubeclBackend
use std::any::{Any, TypeId};
use std::collections::{HashMap, HashSet};
use std::sync::{Condvar, LazyLock, Mutex, MutexGuard};
use std::time::Instant;

use burn_backend::distributed::{DistributedParamId, DistributedParams, ReduceOperation};
use burn_backend::{DType, DeviceId, DeviceOps, Shape};
use cubecl::Runtime;

use crate::launch::copy::{cat_into, copy_into, into_contiguous};
use crate::runtime::collective::{all_reduce_one, collective_timeout, sync_collective};
use crate::runtime::{COLLECTIVE_TIMEOUT_ENV, Layout, elem_size};
use crate::tensor::CubeTensor;

/// How [`start_gradient_sync`] reduces and buckets the gradients.
#[derive(Clone, Debug, PartialEq)]
pub struct GradientSyncConfig {
    /// Sum or mean across the devices (burn-train's `ddp` strategy: mean).
    pub op: ReduceOperation,
    /// Bytes of gradients in one bucket before its all-reduce starts (PyTorch DDP's
    /// `bucket_cap_mb`, 25 MiB). 0: one all-reduce per parameter.
    pub bucket_bytes: usize,
    /// The first bucket's bytes (DDP's first bucket: 1 MiB), so the first all-reduce starts
    /// early in the backward pass.
    pub first_bucket_bytes: usize,
}

impl GradientSyncConfig {
    /// DDP's buckets (1 MiB first, then 25 MiB) with `op`.
    pub fn new(op: ReduceOperation) -> Self {
        Self { op, bucket_bytes: 25 << 20, first_bucket_bytes: 1 << 20 }
    }

    /// Every bucket, the first included, holds `bytes`.
    pub fn with_bucket_bytes(mut self, bytes: usize) -> Self {
        self.bucket_bytes = bytes;
        self.first_bucket_bytes = bytes;
        self
    }
}

/// What a group did, summed over its devices and steps ([`stop_gradient_sync`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GradientSyncStats {
    /// Backward passes that ended in a sync, summed over the devices.
    pub steps: usize,
    /// Buckets all-reduced, summed over the devices.
    pub buckets: usize,
    /// Of those, the buckets launched while the device's backward pass was still running.
    pub buckets_during_backward: usize,
    /// Parameter gradients reduced, summed over the devices (each once per step).
    pub gradients: usize,
    /// Bytes all-reduced, summed over the devices.
    pub bytes: usize,
}

/// Starts the gradient sync of `devices` (every device that trains a replica, in one order
/// for every call; the order names the all-reduce group) for runtime `R`, replacing the group
/// a previous call started. Parameters marked distributed ([`mark_distributed`]) then have
/// their gradients reduced during `backward` on each of these devices. A group of one device
/// reduces nothing.
///
/// No tensor may move between the group's devices while a step runs (NCCL's order:
/// docs/distributed.md): make the replicas with `load_record` rather than `fork`, which shares
/// batch norm's running statistics across them.
///
/// Not over NCCL by default yet: after the fix of its first hang (each device's launched
/// buckets now reach its device thread before it waits for the others), it ran the MLP on two
/// and four H200s, but a variant of the flush hung in some first steps on two and four H200s
/// (2026-11-28) for a reason not found yet; so a group whose
/// all-reduces would be NCCL's is refused unless `EX_CUBECL_ALLOW_NCCL_OVERLAP=1`. Devices
/// without NCCL (wgpu, or CUDA without the library) reduce host-staged.
///
/// # Panics
/// When `devices` is empty or names a device twice, or when the runtime's all-reduces are
/// NCCL's and `EX_CUBECL_ALLOW_NCCL_OVERLAP` is not `1`.
pub fn start_gradient_sync<R: Runtime>(devices: &[R::Device], config: GradientSyncConfig)
where
    R::Device: DeviceOps,
{
    let ids: Vec<DeviceId> = devices.iter().map(DeviceOps::id).collect();
    if ids.is_empty() {
        panic!("ex_cubecl: start_gradient_sync: no devices");
    }
    let allowed = std::env::var("EX_CUBECL_ALLOW_NCCL_OVERLAP").is_ok_and(|v| v == "1");
    if ids.len() > 1 && crate::runtime::peer_to_peer::<R>() && !allowed {
        panic!(
            "ex_cubecl: start_gradient_sync: the gradient sync overlapped with backward is not available over NCCL \
             by default yet (some first steps hung on H200s, issue 51; EX_CUBECL_ALLOW_NCCL_OVERLAP=1 lets it run); \
             all-reduce the gradients after the backward pass (DistributedBackend::all_reduce, then sync_collective) \
             on {devices:?}"
        );
    }
    for (i, id) in ids.iter().enumerate() {
        if ids[..i].contains(id) {
            panic!("ex_cubecl: start_gradient_sync: device {:?} is named twice in {devices:?}", devices[i]);
        }
    }
    let group = Group::<R> { ids, config, steps: HashMap::new(), devices: HashMap::new(), stats: GradientSyncStats::default() };
    groups().insert(TypeId::of::<R>(), Box::new(group));
}

/// Ends the gradient sync of runtime `R` (gradients then stay on their device) and returns
/// what it did; `None` when none was started.
pub fn stop_gradient_sync<R: Runtime>() -> Option<GradientSyncStats> {
    let group = groups().remove(&TypeId::of::<R>())?;
    group.downcast::<Group<R>>().ok().map(|g| g.stats)
}

/// `module` with every parameter that takes a gradient marked distributed
/// (`Tensor::set_distributed`, with the parameter's id, which replicas made by `fork` or
/// `to_device` share): its gradient is then reduced during `backward` by the group of
/// [`start_gradient_sync`]. Burn's optimizers drop the mark with the step (burn-optim's
/// `distributed` feature, which would keep it, pulls in burn-router): mark the model before
/// each step's forward pass.
#[cfg(feature = "optim")]
pub fn mark_distributed<B, M>(module: M) -> M
where
    B: burn_tensor::backend::AutodiffBackend,
    M: burn_core::module::Module<B>,
{
    module.map(&mut Marker)
}

#[cfg(feature = "optim")]
struct Marker;

#[cfg(feature = "optim")]
impl<B: burn_tensor::backend::AutodiffBackend> burn_core::module::ModuleMapper<B> for Marker {
    fn map_float<const D: usize>(
        &mut self,
        param: burn_core::module::Param<burn_tensor::Tensor<B, D>>,
    ) -> burn_core::module::Param<burn_tensor::Tensor<B, D>> {
        let id = DistributedParamId::from(param.id.val());
        param.map(|t| if t.is_require_grad() { t.set_distributed(id) } else { t })
    }
}

/// The hook `register_sync_parameters`: `device`'s backward pass starts a step.
pub(super) fn register<R: Runtime>(device: &R::Device, params: &[DistributedParams])
where
    R::Device: DeviceOps,
{
    let id = device.id();
    let mut guard = groups();
    let Some(group) = group_mut::<R>(&mut guard) else { return };
    if group.ids.len() < 2 {
        return;
    }
    if !group.ids.contains(&id) {
        panic!("ex_cubecl: gradient sync: device {device:?} is not among the group's devices {:?}", group.ids);
    }
    let n = group.ids.len();
    let local = group.devices.entry(id).or_insert_with(Local::new);
    if !local.pending.is_empty() || !local.keep.is_empty() {
        panic!(
            "ex_cubecl: gradient sync: device {device:?} starts a backward pass while {} gradient(s) of its previous one \
             were not reduced (the previous backward pass did not end)",
            local.pending.len()
        );
    }
    local.step = local.next_step;
    local.next_step += 1;
    local.launched = 0;
    let step = group.steps.entry(local.step).or_default();
    step.registered += 1;
    step.expected.extend(params.iter().map(|p| p.param_id));
    step.close_when_complete(n);
    drop(guard);
    SYNC.notify_all();
}

/// The hook `submit_gradient_sync`: the gradient in `slot` (of parameter `param`) is complete
/// on its device. Launches the buckets this device may launch.
///
/// # Safety
/// `slot` points at a gradient of `Gradients`' container that stays there, untouched by
/// others, until this device's [`finish`] returns (what burn-autodiff guarantees).
pub(super) unsafe fn submit<R: Runtime>(slot: *mut CubeTensor<R>, param: DistributedParamId)
where
    R::Device: DeviceOps,
{
    // SAFETY: the caller's guarantee.
    let (device, shape, dtype) = unsafe { ((*slot).device.clone(), (*slot).dims().to_vec(), (*slot).dtype) };
    let id = device.id();
    let mut guard = groups();
    let Some(group) = group_mut::<R>(&mut guard) else { return };
    let n = group.ids.len();
    if n < 2 {
        return;
    }
    let Some(local) = group.devices.get_mut(&id) else {
        panic!("ex_cubecl: gradient sync: device {device:?} submits a gradient without having started a backward pass of the group");
    };
    if local.pending.insert(param, Slot(slot)).is_some() || local.reduced.contains(&param) {
        panic!("ex_cubecl: gradient sync: device {device:?} submits the gradient of parameter {param:?} twice in one backward pass");
    }
    let step = group.steps.entry(local.step).or_default();
    let produced = step.produced.entry(param).or_insert_with(|| Produced { devices: 0, shape: shape.clone(), dtype });
    if produced.shape != shape || produced.dtype != dtype {
        step.error.get_or_insert(format!(
            "the gradient of parameter {param:?} is {shape:?} ({dtype:?}) on device {device:?} and {:?} ({:?}) on another device",
            produced.shape, produced.dtype
        ));
    } else {
        produced.devices += 1;
        if produced.devices == n {
            step.complete(param, &group.config);
        }
    }
    step.close_when_complete(n);
    let work = group.take_work(id);
    drop(guard);
    SYNC.notify_all();
    launch::<R>(work, true);
}

/// The hook `submit_sync_collective`: `device`'s backward pass is over. Launches its
/// remaining buckets as the other devices complete them, then makes its compute stream wait
/// for the all-reduces.
///
/// # Panics
/// When the devices' gradients disagree (a parameter with a gradient on some devices only, or
/// of other shapes), or the other devices don't end their backward pass within
/// [`COLLECTIVE_TIMEOUT_ENV`] seconds (default 600).
pub(super) fn finish<R: Runtime>(device: &R::Device)
where
    R::Device: DeviceOps,
{
    let id = device.id();
    let limit = collective_timeout();
    let start = Instant::now();
    let mut guard = groups();
    let Some(group) = group_mut::<R>(&mut guard) else { return };
    let n = group.ids.len();
    if n < 2 || !group.devices.contains_key(&id) {
        return;
    }
    let s = group.devices[&id].step;
    let step = group.steps.entry(s).or_default();
    step.done += 1;
    step.close_when_complete(n);
    SYNC.notify_all();
    loop {
        let group = group_mut::<R>(&mut guard).expect("the group lives until its steps end");
        let step = &group.steps[&s];
        if let Some(error) = step.error.clone() {
            drop(guard);
            SYNC.notify_all();
            panic!("ex_cubecl: gradient sync: {error}");
        }
        let work = group.take_work(id);
        let step = &group.steps[&s];
        let all = step.all_closed && group.devices[&id].launched == step.buckets.len();
        if !work.is_empty() {
            drop(guard);
            launch::<R>(work, false);
            guard = groups();
            continue;
        }
        if all {
            break;
        }
        let left = limit.saturating_sub(start.elapsed());
        if left.is_zero() {
            drop(guard);
            panic!(
                "ex_cubecl: gradient sync: device {device:?} waited {:.0} s for the other devices' gradients \
                 ({COLLECTIVE_TIMEOUT_ENV} sets the limit); every device of the group must run the same backward pass",
                limit.as_secs_f64()
            );
        }
        guard = SYNC.wait_timeout(guard, left).unwrap_or_else(|e| e.into_inner()).0;
    }
    drop(guard);
    // Every all-reduce of this device is launched: the compute stream now waits for them.
    sync_collective::<R>(device);
    let mut guard = groups();
    let Some(group) = group_mut::<R>(&mut guard) else { return };
    let local = group.devices.get_mut(&id).expect("registered");
    // After `sync_collective`: the compute stream may reuse these buffers now.
    let kept = std::mem::take(&mut local.keep);
    local.reduced.clear();
    group.stats.steps += 1;
    let step = group.steps.get_mut(&s).expect("the step ends here");
    step.finished += 1;
    if step.finished == n {
        group.steps.remove(&s);
    }
    drop(guard);
    drop(kept);
}

/// Copies each bucket's gradients into one buffer, starts its all-reduce and replaces the
/// gradients by views of the result; records the buffers to keep until the sync.
fn launch<R: Runtime>(work: Vec<Work<R>>, during_backward: bool)
where
    R::Device: DeviceOps,
{
    if work.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(work.len());
    let mut stats = GradientSyncStats::default();
    let mut device = None;
    for bucket in work {
        // SAFETY: `submit`'s caller guarantees the slots until this device's `finish`.
        let grads: Vec<CubeTensor<R>> = bucket.slots.iter().map(|s| unsafe { (*s.0).clone() }).collect();
        let flat = flatten(&grads);
        let (dtype, id) = (flat.dtype, flat.device.id());
        // The input stays alive until the sync (`all_reduce_one` keeps it); the output, here.
        let reduced = all_reduce_one(flat, super::backend::reduce_op(bucket.op), bucket.ids);
        let mut offset = 0;
        for (slot, grad) in bucket.slots.iter().zip(&grads) {
            let layout = Layout { offset, ..Layout::contiguous(grad.layout.shape.clone()) };
            offset += grad.num_elements();
            // SAFETY: as above; the gradient is replaced by the reduced one, valid after the sync.
            unsafe { *slot.0 = reduced.with_layout(layout) };
        }
        stats.buckets += 1;
        stats.buckets_during_backward += usize::from(during_backward);
        stats.gradients += grads.len();
        stats.bytes += offset * elem_size(dtype);
        device = Some(id);
        kept.push(reduced);
    }
    if let Some(reduced) = kept.first() {
        // cubecl's device thread takes queued work in batches: without a flush, the
        // all-reduces would wait in the queue for this device's next kernels (none while
        // `finish` waits for the other devices), and the other devices' NCCL calls wait for
        // it: NCCL's first all-reduce of a communicator joins its ranks on their device
        // threads (connection set-up), which then hold up the threads that wait on them (two
        // H200s hung in the first step without this flush after the last buckets, and ran with
        // it, 2026-11-28). A round trip to the device thread, which also waits for the device to
        // reach the previous flush; a bare round trip (`exclusive`) was faster on two H200s
        // but hung in some first steps (see `start_gradient_sync`).
        if let Err(e) = reduced.client.flush() {
            panic!("ex_cubecl: gradient sync: device {:?} failed: {e:?}", reduced.device);
        }
    }
    let mut guard = groups();
    if let Some(group) = group_mut::<R>(&mut guard) {
        let s = &mut group.stats;
        s.buckets += stats.buckets;
        s.buckets_during_backward += stats.buckets_during_backward;
        s.gradients += stats.gradients;
        s.bytes += stats.bytes;
        if let Some(local) = device.and_then(|d| group.devices.get_mut(&d)) {
            local.keep.extend(kept);
        }
    }
}

/// `grads` (one device, one dtype) side by side in a new contiguous buffer.
fn flatten<R: Runtime>(grads: &[CubeTensor<R>]) -> CubeTensor<R> {
    let first = &grads[0];
    let total: usize = grads.iter().map(CubeTensor::num_elements).sum();
    let flat = CubeTensor::empty(&first.client, &first.device, Shape::from(vec![total]), first.dtype);
    let rows = |t: &CubeTensor<R>| {
        let t = match t.layout.is_contiguous() {
            true => t.clone(),
            false => into_contiguous(t.clone()),
        };
        let n = t.num_elements();
        let offset = t.layout.offset;
        t.with_layout(Layout { shape: Shape::from(vec![n]), strides: vec![1], offset })
    };
    let parts: Vec<CubeTensor<R>> = grads.iter().map(rows).collect();
    if !cat_into(&parts, &flat, 0) {
        let mut offset = 0;
        for part in &parts {
            let n = part.num_elements();
            let view = Layout { shape: Shape::from(vec![n]), strides: vec![1], offset };
            copy_into(part, &part.layout, 0, &flat, &view);
            offset += n;
        }
    }
    flat
}

/// A gradient in burn-autodiff's container, written by its own device's thread only.
struct Slot<R: Runtime>(*mut CubeTensor<R>);

// SAFETY: a slot is only dereferenced on the thread of its device's backward pass (`submit`
// and `finish` of that device); the group only holds it between the two.
unsafe impl<R: Runtime> Send for Slot<R> {}

/// One bucket for one device to launch.
struct Work<R: Runtime> {
    slots: Vec<Slot<R>>,
    op: ReduceOperation,
    ids: Vec<DeviceId>,
}

/// A parameter's gradient as the devices completed it.
struct Produced {
    devices: usize,
    shape: Vec<usize>,
    dtype: DType,
}

/// A bucket: parameters of one dtype, in the order every device copies them.
struct Bucket {
    params: Vec<DistributedParamId>,
    bytes: usize,
    dtype: DType,
}

/// One backward pass of every device of the group.
#[derive(Default)]
struct Step {
    /// Devices that started it.
    registered: usize,
    /// The parameters the devices announced.
    expected: HashSet<DistributedParamId>,
    produced: HashMap<DistributedParamId, Produced>,
    /// The open bucket of each dtype.
    open: Vec<Bucket>,
    /// The closed buckets, in launch order.
    buckets: Vec<Bucket>,
    /// Every bucket is closed.
    all_closed: bool,
    /// Devices whose backward pass is over.
    done: usize,
    /// Devices whose sync is over.
    finished: usize,
    error: Option<String>,
}

impl Step {
    /// `param` is complete on every device: it joins its dtype's open bucket, which closes
    /// when full.
    fn complete(&mut self, param: DistributedParamId, config: &GradientSyncConfig) {
        let produced = &self.produced[&param];
        let bytes = produced.shape.iter().product::<usize>() * elem_size(produced.dtype);
        let dtype = produced.dtype;
        let cap = if self.buckets.is_empty() { config.first_bucket_bytes } else { config.bucket_bytes };
        let at = match self.open.iter().position(|b| b.dtype == dtype) {
            Some(at) => at,
            None => {
                self.open.push(Bucket { params: Vec::new(), bytes: 0, dtype });
                self.open.len() - 1
            }
        };
        let bucket = &mut self.open[at];
        bucket.params.push(param);
        bucket.bytes += bytes;
        if bucket.bytes >= cap {
            let full = self.open.remove(at);
            self.buckets.push(full);
        }
    }

    /// Closes the open buckets once no parameter can join them: every device started and
    /// every announced parameter is complete, or every device's backward pass is over (then a
    /// parameter complete on some devices only is an error).
    fn close_when_complete(&mut self, n: usize) {
        if self.all_closed {
            return;
        }
        let complete = |p: &DistributedParamId| self.produced.get(p).is_some_and(|g| g.devices == n);
        let all_complete = self.registered == n && self.expected.iter().all(complete);
        if !all_complete && self.done < n {
            return;
        }
        if !all_complete {
            let partial: Vec<String> =
                self.produced.iter().filter(|(_, g)| g.devices < n).map(|(p, g)| format!("{p:?} ({} of {n})", g.devices)).collect();
            if !partial.is_empty() {
                self.error.get_or_insert(format!(
                    "parameters with a gradient on some devices only: {}; every replica's backward pass must reach the same parameters",
                    partial.join(", ")
                ));
            }
        }
        self.buckets.append(&mut self.open);
        self.all_closed = true;
    }
}

/// One device's side of the group.
struct Local<R: Runtime> {
    /// The step of its current backward pass, and of the next one.
    step: u64,
    next_step: u64,
    /// Its complete gradients not yet in a launched bucket.
    pending: HashMap<DistributedParamId, Slot<R>>,
    /// The parameters already reduced in this step.
    reduced: HashSet<DistributedParamId>,
    /// Buckets of this step it launched.
    launched: usize,
    /// The buffers of its launched all-reduces, until its sync.
    keep: Vec<CubeTensor<R>>,
}

impl<R: Runtime> Local<R> {
    fn new() -> Self {
        Self { step: 0, next_step: 0, pending: HashMap::new(), reduced: HashSet::new(), launched: 0, keep: Vec::new() }
    }
}

/// The devices of one runtime training together.
struct Group<R: Runtime> {
    ids: Vec<DeviceId>,
    config: GradientSyncConfig,
    steps: HashMap<u64, Step>,
    devices: HashMap<DeviceId, Local<R>>,
    stats: GradientSyncStats,
}

impl<R: Runtime> Group<R> {
    /// The closed buckets of its current step that device `id` has not launched, with its
    /// gradients, taken out of its pending ones.
    fn take_work(&mut self, id: DeviceId) -> Vec<Work<R>> {
        let Some(local) = self.devices.get_mut(&id) else { return Vec::new() };
        let Some(step) = self.steps.get(&local.step) else { return Vec::new() };
        let mut work = Vec::new();
        for bucket in &step.buckets[local.launched.min(step.buckets.len())..] {
            let slots: Vec<Slot<R>> = bucket
                .params
                .iter()
                .map(|p| local.pending.remove(p).expect("a parameter joins a bucket once every device completed it"))
                .collect();
            local.reduced.extend(bucket.params.iter().copied());
            work.push(Work { slots, op: self.config.op, ids: self.ids.clone() });
        }
        local.launched = step.buckets.len();
        work
    }
}

type Groups = HashMap<TypeId, Box<dyn Any + Send>>;

static GROUPS: LazyLock<Mutex<Groups>> = LazyLock::new(Default::default);
/// Notified whenever a bucket closes or a device's step moves on.
static SYNC: Condvar = Condvar::new();

fn groups() -> MutexGuard<'static, Groups> {
    GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

fn group_mut<'a, R: Runtime>(groups: &'a mut MutexGuard<'static, Groups>) -> Option<&'a mut Group<R>> {
    groups.get_mut(&TypeId::of::<R>()).and_then(|g| g.downcast_mut::<Group<R>>())
}
