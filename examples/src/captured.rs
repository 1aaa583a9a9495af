//! A training step captured once and replayed (`scale --captured`): `workload`'s SGD step
//! written on `Autodiff<Fusion<ExCubeclBackend>>`, as `scale --fusion` runs it, captured with
//! [`Pipeline::capture_fused_with_state`] and then replayed: each replay runs the launches our
//! fusers made for the step (forward, backward and the update), with none of the host's work
//! per operation (Burn's autodiff graph, the fusion engine, shape logic, allocation).
//!
//! The pipeline's state is the trainable parameters, updated in place by every replay; the
//! batch is uploaded inside the capture, so it is a constant of the pipeline, as `one_device`
//! reuses one batch. Batch norm's running statistics are not in the state: the replayed
//! launches compute them as every step does, but each replay starts from the statistics the
//! capture saw (training-mode batch norm normalises with the batch's statistics, so the loss
//! and the parameters are those of eager steps).
use std::time::Instant;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param, ParamId};
use burn_backend::ops::FloatTensorOps;
use burn_backend::{Backend, DeviceOps, TensorData, TensorPrimitive};
use burn_fusion::Fusion;
use burn_optim::GradientsParams;
use burn_tensor::Tensor;
use cubecl::Runtime;
use ex_cubecl::ExCubeclBackend;
use ex_cubecl::fusion::pipeline::{FusedStepResults, FusedTensor};
use ex_cubecl::runtime::Pipeline;
use ex_cubecl::tensor::CubeTensor;

use crate::scale::{LR, Throughput, TrainFused, Workload};

type Ours<R> = ExCubeclBackend<R>;

/// `workload`'s SGD step on one device, captured once (the capture is the first step) and
/// replayed: `warmup` replays, then the mean of `steps` timed ones, each ending in a sync.
///
/// # Panics
/// When the capture fails, a replay fails, the loss is not finite or the device fails.
pub fn captured<R, W>(workload: &W, device: &R::Device, warmup: usize, steps: usize) -> Throughput
where
    R: Runtime,
    R::Device: DeviceOps,
    W: Workload<TrainFused<R>>,
{
    let model = workload.model(device);
    let mut params = Params(Vec::new());
    model.visit(&mut params);
    let state: Vec<CubeTensor<R>> = params.0.into_iter().map(|data| Ours::<R>::float_from_data(data, device)).collect();
    let started = Instant::now();
    let step = |_inputs: Vec<FusedTensor<R>>, state: Vec<FusedTensor<R>>| -> FusedStepResults<R> {
        let model = model.map(&mut Load::<R>(state.into_iter()));
        let loss = workload.loss(&model, workload.batch(0, device));
        let mut grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut update = Update::<R> { grads: &mut grads, new: Vec::new() };
        model.visit(&mut update);
        (vec![loss.inner().into_primitive().tensor()], update.new)
    };
    let (pipeline, _) = Pipeline::capture_fused_with_state(device, &[], &state, step)
        .unwrap_or_else(|e| panic!("scale: capturing the step failed: {e}"));
    eprintln!("scale: step captured in {:.1} s, {} launches a replay", started.elapsed().as_secs_f64(), pipeline.num_launches());
    let replay = || {
        let loss = pipeline.run(&[]).unwrap_or_else(|e| panic!("scale: a replay failed: {e}")).remove(0);
        <Ours<R> as Backend>::sync(device).unwrap_or_else(|e| panic!("scale: device {device:?} failed: {e:?}"));
        loss
    };
    for _ in 0..warmup {
        replay();
    }
    let start = Instant::now();
    let mut last = None;
    for _ in 0..steps.max(1) {
        last = Some(replay());
    }
    let elapsed = start.elapsed();
    let loss = Tensor::<Ours<R>, 1>::from_primitive(TensorPrimitive::Float(last.expect("one step at least")));
    let last_loss = loss.into_data().convert::<f32>().to_vec::<f32>().expect("the loss")[0];
    if !last_loss.is_finite() {
        panic!("scale: the loss is {last_loss} after the timed replays");
    }
    Throughput { devices: 1, batch_per_device: workload.batch_size(), step_seconds: elapsed.as_secs_f64() / steps.max(1) as f64, last_loss }
}

/// The values of a model's trainable parameters, in visiting order.
struct Params(Vec<TensorData>);

impl<R: Runtime> ModuleVisitor<TrainFused<R>> for Params
where
    R::Device: DeviceOps,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<TrainFused<R>, D>>) {
        let value = param.val();
        if value.is_require_grad() {
            self.0.push(value.inner().into_data());
        }
    }
}

/// Puts the pipeline's state (the trainable parameters, in visiting order) into a model.
struct Load<R: Runtime>(std::vec::IntoIter<FusedTensor<R>>)
where
    R::Device: DeviceOps;

impl<R: Runtime> ModuleMapper<TrainFused<R>> for Load<R>
where
    R::Device: DeviceOps,
{
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<TrainFused<R>, D>>) -> Param<Tensor<TrainFused<R>, D>> {
        let (id, tensor, mapper) = param.consume();
        if !tensor.is_require_grad() {
            return Param::from_mapped_value(id, tensor, mapper);
        }
        let value = self.0.next().expect("scale: one state tensor per trainable parameter");
        let inner = Tensor::<Fusion<Ours<R>>, D>::from_primitive(TensorPrimitive::Float(value));
        Param::from_mapped_value(id, Tensor::from_inner(inner).require_grad(), mapper)
    }
}

/// The SGD update of each trainable parameter, in visiting order: `p - LR * grad`.
struct Update<'a, R: Runtime>
where
    R::Device: DeviceOps,
{
    grads: &'a mut GradientsParams,
    new: Vec<FusedTensor<R>>,
}

impl<R: Runtime> ModuleVisitor<TrainFused<R>> for Update<'_, R>
where
    R::Device: DeviceOps,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<TrainFused<R>, D>>) {
        let value = param.val();
        if !value.is_require_grad() {
            return;
        }
        let id: ParamId = param.id;
        let grad = self.grads.remove::<Fusion<Ours<R>>, D>(id).unwrap_or_else(|| panic!("scale: no gradient for parameter {id}"));
        self.new.push((value.inner() - grad.mul_scalar(LR)).into_primitive().tensor());
    }
}
