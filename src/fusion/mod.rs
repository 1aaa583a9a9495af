//! Kernel fusion on Burn's fusion engine: `Fusion<ExCubeclBackend<R>>`.
//!
//! `burn-fusion` records the ops of a `Fusion<B>` backend lazily in streams, searches each
//! stream for runs of ops that a backend's fusers accept, caches what it found per pattern,
//! and runs the rest op by op on `B`. This module plugs our backend into it: the engine is
//! Burn's, the fusers and the kernels they launch are ours.
//!
//! - [`ExFusionRuntime`] names our fusers and optimizations; `ExCubeclBackend<R>` is a
//!   [`FusionBackend`] (and a `BackendIr`, the engine's view of tensors as [`IrHandle`]s).
//! - The elementwise fuser ([`elementwise`]) turns a run of elementwise ops over one shape
//!   (float math, scalars, comparisons, masks, bool logic, float/bool casts, fills; inputs
//!   broadcast, any layout) into one launch of `ex_cubecl_kernels::fused`. Ops over a
//!   shape that broadcasts to the block's (a batch norm's per-channel statistics beside its
//!   per-element work) join it: a launch over their shape computes them once, before the
//!   block's, so that they no longer cut the block in two. A block of fills alone
//!   (autodiff's `ones * scalar`) is one launch on the fuser's device.
//! - The reduction fuser ([`reduce`]) turns elementwise work (over two shapes, as above),
//!   a reduction along an axis (sum, mean, product, max, min) and elementwise work on its
//!   result into one launch of `ex_cubecl_kernels::fused_reduce`.
//!
//! - The matrix-product fuser ([`matmul`]) turns a product (`matmul`, or `linear` with its
//!   bias) and elementwise work on its result into one launch of
//!   `ex_cubecl_kernels::fused_matmul` where our tiled kernel runs the product.
//!
//! - The softmax fuser ([`softmax`]) recognises Burn's decomposition of `softmax` and
//!   `log_softmax` and runs our softmax kernel, as the unfused backend does.
//!
//! - The view-reduction fuser ([`view_reduce`]) runs a reduction of a reshaped view
//!   (batch norm's `x.swap_dims(0, 1).reshape([C, N*H*W]).mean_dim(1)`) as one reduction
//!   that reads `x` where it lies, without the copy the reshape makes.
//!
//! - The reduction-pair fuser ([`reduce_pair`]) runs a reduction and a reduction of its
//!   result along another axis, each line short (autodiff's `[1, C, H, W]` gradients summed
//!   over `H`, then `W`), as one launch.
//!
//! - The lead fuser ([`lead`]) runs the first op of a block that nothing else fuses (a
//!   convolution, say) alone, so that the ops after it are explored again rather than run
//!   one by one in its block.
//!
//! [`Pipeline::capture_fused`](crate::runtime::Pipeline::capture_fused) captures a step
//! written on the fused backend and replays its fused launches without the engine
//! ([`pipeline`]).
//!
//! The elementwise, reduction, matrix-product, view-reduction and reduction-pair fusers'
//! launches give the bits of their ops run one launch at a time.
//!
//! ```
//! use burn_tensor::Tensor;
//! use ex_cubecl::ExWgpuFusion;
//!
//! let device = Default::default();
//! let x = Tensor::<ExWgpuFusion, 1>::from_floats([1.0, -2.0, 3.0], &device);
//! let y = (x.clone() * 2.0 + 1.0 - x).abs(); // one launch
//! assert_eq!(y.into_data().to_vec::<f32>().unwrap(), vec![2.0, 1.0, 4.0]);
//! ```
mod block;
pub mod elementwise;
mod in_place;
mod lead;
pub mod matmul;
pub mod pipeline;
mod program;
pub mod reduce;
mod reduce_pair;
pub mod softmax;
mod view_reduce;

use core::marker::PhantomData;
use std::sync::Arc;

use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor, QuantizedTensor};
use burn_backend::{DType, DeviceOps};
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FuserProperties, FuserStatus, FusionBackend, FusionRuntime, NumOperations, Optimization, OperationFuser};
use burn_ir::{BackendIr, OperationIr, TensorHandle, TensorId};
use cubecl::Runtime;
use cubecl::device::Device;
use serde::{Deserialize, Serialize};

use crate::ExCubeclBackend;
use crate::launch::{copy, view};
use crate::runtime::DeviceContext;
use crate::tensor::{CubeTensor, QuantizedTensor as QTensor};
use elementwise::{ElementwiseFuser, ElementwiseOptimization};
use lead::{LeadFuser, LeadOptimization};
use matmul::{MatmulFuser, MatmulOptimization};
use reduce::{ReduceFuser, ReduceOptimization};
use reduce_pair::{ReducePairFuser, ReducePairOptimization};
use softmax::{SoftmaxFuser, SoftmaxOptimization};
use view_reduce::{ViewReduceFuser, ViewReduceOptimization};

/// A tensor as Burn's fusion engine holds it: ours, of any kind.
#[derive(Clone, Debug)]
pub enum IrHandle<R: Runtime> {
    /// A float, int or bool tensor.
    Tensor(CubeTensor<R>),
    /// A quantized tensor.
    Quantized(QTensor<R>),
}

impl<R: Runtime> IrHandle<R> {
    /// The float, int or bool tensor; panics, naming `op`, on a quantized one.
    pub fn into_tensor(self, op: &str) -> CubeTensor<R> {
        match self {
            IrHandle::Tensor(t) => t,
            IrHandle::Quantized(q) => panic!("ex_cubecl: {op}: expected a float, int or bool tensor, got a quantized {:?} one", q.scheme),
        }
    }
}

/// The tensor of `handle` with the engine's `shape` (a view of the same buffer where the
/// engine records a reshaped handle).
fn with_shape<R: Runtime>(handle: TensorHandle<IrHandle<R>>, op: &str) -> CubeTensor<R> {
    let tensor = handle.handle.into_tensor(op);
    match tensor.dims() == handle.shape.as_slice() {
        true => tensor,
        false => view::reshape(tensor, handle.shape),
    }
}

impl<R: Runtime> BackendIr for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    type Handle = IrHandle<R>;

    fn float_tensor(handle: TensorHandle<Self::Handle>) -> FloatTensor<Self> {
        with_shape(handle, "float tensor")
    }

    fn int_tensor(handle: TensorHandle<Self::Handle>) -> IntTensor<Self> {
        with_shape(handle, "int tensor")
    }

    fn bool_tensor(handle: TensorHandle<Self::Handle>) -> BoolTensor<Self> {
        with_shape(handle, "bool tensor")
    }

    fn quantized_tensor(handle: TensorHandle<Self::Handle>) -> QuantizedTensor<Self> {
        match handle.handle {
            IrHandle::Quantized(q) => q,
            IrHandle::Tensor(t) => panic!("ex_cubecl: quantized tensor: expected a quantized tensor, got {:?} {:?}", t.dims(), t.dtype),
        }
    }

    fn float_tensor_handle(tensor: FloatTensor<Self>) -> Self::Handle {
        IrHandle::Tensor(tensor)
    }

    fn int_tensor_handle(tensor: IntTensor<Self>) -> Self::Handle {
        IrHandle::Tensor(tensor)
    }

    fn bool_tensor_handle(tensor: BoolTensor<Self>) -> Self::Handle {
        IrHandle::Tensor(tensor)
    }

    fn quantized_tensor_handle(tensor: QuantizedTensor<Self>) -> Self::Handle {
        IrHandle::Quantized(tensor)
    }
}

/// Our fusers and optimizations for Burn's fusion engine.
pub struct ExFusionRuntime<R: Runtime> {
    _runtime: PhantomData<fn() -> R>,
}

impl<R: Runtime> core::fmt::Debug for ExFusionRuntime<R> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "ExFusionRuntime<{}>", core::any::type_name::<R>())
    }
}

impl<R: Runtime> FusionRuntime for ExFusionRuntime<R>
where
    R::Device: DeviceOps,
{
    type OptimizationState = ExOptimizationState;
    type Optimization = ExOptimization;
    type FusionHandle = IrHandle<R>;
    type FusionDevice = R::Device;

    fn fusers(device: R::Device) -> Vec<Box<dyn OperationFuser<ExOptimization>>> {
        let max_bindings = max_bindings::<R>(&device);
        vec![
            Box::new(ExFuser::Elementwise(Arc::new(ElementwiseFuser::new(max_bindings, device.to_id())))),
            Box::new(ExFuser::Reduce(Arc::new(ReduceFuser::new(max_bindings)))),
            Box::new(ExFuser::Softmax(Arc::new(SoftmaxFuser::new(max_bindings)))),
            Box::new(ExFuser::Matmul(Arc::new(MatmulFuser::new(max_bindings)))),
            Box::new(ExFuser::ViewReduce(Arc::new(ViewReduceFuser::default()))),
            Box::new(ExFuser::ReducePair(Arc::new(ReducePairFuser::default()))),
            Box::new(ExFuser::Lead(Arc::new(LeadFuser::default()))),
        ]
    }
}

/// The buffers the device binds to one kernel.
fn max_bindings<R: Runtime>(device: &R::Device) -> usize {
    DeviceContext::client::<R>(device).properties().hardware.max_bindings as usize
}

impl<R: Runtime> FusionBackend for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    type FusionRuntime = ExFusionRuntime<R>;
    type FullPrecisionBackend = Self;

    fn cast_float(tensor: FloatTensor<Self>, dtype: DType) -> Self::Handle {
        IrHandle::Tensor(copy::cast(tensor, dtype))
    }
}

/// Our fusers, one per kind of optimization, each shared until it changes: the engine's
/// search copies every fuser of a block whenever it opens, copies or merges blocks, and most
/// of those copies are of fusers already closed, which never change again.
#[derive(Clone, Debug)]
pub enum ExFuser {
    /// Runs of elementwise ops.
    Elementwise(Arc<ElementwiseFuser>),
    /// A reduction along an axis with elementwise work on either side.
    Reduce(Arc<ReduceFuser>),
    /// Burn's softmax and log-softmax decompositions.
    Softmax(Arc<SoftmaxFuser>),
    /// A matrix product with elementwise work on its result.
    Matmul(Arc<MatmulFuser>),
    /// A reduction of a reshaped view.
    ViewReduce(Arc<ViewReduceFuser>),
    /// Two reductions in a row.
    ReducePair(Arc<ReducePairFuser>),
    /// A block's first op, alone.
    Lead(Arc<LeadFuser>),
}

/// `$e` with `$f` bound to the fuser or optimization of any kind.
macro_rules! each {
    ($e:expr, $f:ident => $body:expr, $($kind:ident),+) => {
        match $e { $(Self::$kind($f) => $body),+ }
    };
}

impl OperationFuser<ExOptimization> for ExFuser {
    fn fuse(&mut self, operation: &OperationIr) {
        if self.status() == FuserStatus::Closed {
            return;
        }
        each!(self, f => Arc::make_mut(f).fuse(operation), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn finish(&mut self) -> ExOptimization {
        match self {
            ExFuser::Elementwise(f) => ExOptimization::Elementwise(f.finish()),
            ExFuser::Reduce(f) => ExOptimization::Reduce(f.finish()),
            ExFuser::Softmax(f) => ExOptimization::Softmax(f.finish()),
            ExFuser::Matmul(f) => ExOptimization::Matmul(f.finish()),
            ExFuser::ViewReduce(f) => ExOptimization::ViewReduce(f.finish()),
            ExFuser::ReducePair(f) => ExOptimization::ReducePair(f.finish()),
            ExFuser::Lead(f) => ExOptimization::Lead(f.finish()),
        }
    }

    fn reset(&mut self) {
        each!(self, f => Arc::make_mut(f).reset(), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn status(&self) -> FuserStatus {
        each!(self, f => f.status(), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn properties(&self) -> FuserProperties {
        each!(self, f => f.properties(), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn len(&self) -> usize {
        each!(self, f => f.len(), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn clone_dyn(&self) -> Box<dyn OperationFuser<ExOptimization>> {
        Box::new(self.clone())
    }
}

/// `fresh` after `fuse` took each of `operations`, all of which fuse (`taken` counts them).
///
/// Our fusers take an operation in place and close at the first that doesn't fuse; as that one
/// may have changed their state part-way, closing builds the state again from the operations
/// taken: once per fuser, where a copy of the state before each operation cost one per
/// operation (the engine explores a step's operations again whenever its plan isn't cached).
/// Saved optimizations are loaded the same way.
fn replayed<F>(mut fresh: F, operations: &[OperationIr], fuse: fn(&mut F, &OperationIr), taken: fn(&F) -> usize) -> F {
    operations.iter().for_each(|op| fuse(&mut fresh, op));
    let kind = core::any::type_name::<F>().rsplit("::").next().unwrap_or("fuser");
    assert_eq!(taken(&fresh), operations.len(), "ex_cubecl: fusion: operations that fused no longer fuse in a {kind}");
    fresh
}

/// The tensors that `operations` drop.
fn dropped(operations: &[OperationIr]) -> Vec<TensorId> {
    operations.iter().filter_map(|op| if let OperationIr::Drop(t) = op { Some(t.id) } else { None }).collect()
}

/// An optimization's `len` operations run one by one through the engine's own unfused
/// operations (a lone op, or a fusion that the tensors' layout refuses when it runs).
fn run_unfused<R: Runtime>(len: usize, context: &mut Context<IrHandle<R>>, execution: &OrderedExecution<ExFusionRuntime<R>>)
where
    R::Device: DeviceOps,
{
    (0..len).for_each(|k| execution.operation_within_optimization(k).execute(&mut context.handles));
}

/// What our fusers found: each runs in place of the operations it stands for.
#[derive(Debug)]
pub enum ExOptimization {
    /// A run of elementwise ops in one launch.
    Elementwise(ElementwiseOptimization),
    /// A reduction with elementwise work on either side in one launch.
    Reduce(ReduceOptimization),
    /// A softmax or log-softmax in one launch of our softmax kernel.
    Softmax(SoftmaxOptimization),
    /// A matrix product and its epilogue in one launch.
    Matmul(MatmulOptimization),
    /// A reduction of a reshaped view in one launch, without the view's copy.
    ViewReduce(ViewReduceOptimization),
    /// Two reductions in a row in one launch.
    ReducePair(ReducePairOptimization),
    /// A block's first op run alone, as the unfused backend runs it.
    Lead(LeadOptimization),
}

/// An optimization as the engine saves it: the operations it stands for, fused again when
/// loaded.
#[derive(Serialize, Deserialize)]
pub enum ExOptimizationState {
    /// [`ExOptimization::Elementwise`]'s operations.
    Elementwise(Vec<OperationIr>),
    /// [`ExOptimization::Reduce`]'s operations.
    Reduce(Vec<OperationIr>),
    /// [`ExOptimization::Softmax`]'s operations.
    Softmax(Vec<OperationIr>),
    /// [`ExOptimization::Matmul`]'s operations.
    Matmul(Vec<OperationIr>),
    /// [`ExOptimization::ViewReduce`]'s operations.
    ViewReduce(Vec<OperationIr>),
    /// [`ExOptimization::ReducePair`]'s operations.
    ReducePair(Vec<OperationIr>),
    /// [`ExOptimization::Lead`]'s operation.
    Lead(Vec<OperationIr>),
}

impl NumOperations for ExOptimization {
    fn len(&self) -> usize {
        each!(self, o => o.operations().len(), Elementwise, Reduce, Softmax, Matmul, ViewReduce, ReducePair, Lead)
    }

    fn name(&self) -> &'static str {
        match self {
            // The kind's name as Burn's fusion reports (`FusionBlock::fuser_name`) know it.
            ExOptimization::Elementwise(_) => "ElementWise",
            ExOptimization::Reduce(_) => "Reduce",
            ExOptimization::Softmax(_) => "Softmax",
            ExOptimization::Matmul(_) => "Matmul",
            ExOptimization::ViewReduce(_) => "ViewReduce",
            ExOptimization::ReducePair(_) => "ReducePair",
            ExOptimization::Lead(_) => "Lead",
        }
    }
}

impl<R: Runtime> Optimization<ExFusionRuntime<R>> for ExOptimization
where
    R::Device: DeviceOps,
{
    fn execute(&mut self, context: &mut Context<IrHandle<R>>, execution: &OrderedExecution<ExFusionRuntime<R>>) {
        match self {
            ExOptimization::Elementwise(o) => o.execute(context),
            ExOptimization::Reduce(o) => o.execute(context),
            ExOptimization::Softmax(o) => o.execute(context),
            ExOptimization::Matmul(o) => o.execute(context),
            ExOptimization::ViewReduce(o) => o.execute(context, execution),
            ExOptimization::ReducePair(o) => o.execute(context, execution),
            ExOptimization::Lead(o) => o.execute(context, execution),
        }
    }

    fn to_state(&self) -> ExOptimizationState {
        match self {
            ExOptimization::Elementwise(o) => ExOptimizationState::Elementwise(o.operations().to_vec()),
            ExOptimization::Reduce(o) => ExOptimizationState::Reduce(o.operations().to_vec()),
            ExOptimization::Softmax(o) => ExOptimizationState::Softmax(o.operations().to_vec()),
            ExOptimization::Matmul(o) => ExOptimizationState::Matmul(o.operations().to_vec()),
            ExOptimization::ViewReduce(o) => ExOptimizationState::ViewReduce(o.operations().to_vec()),
            ExOptimization::ReducePair(o) => ExOptimizationState::ReducePair(o.operations().to_vec()),
            ExOptimization::Lead(o) => ExOptimizationState::Lead(o.operations().to_vec()),
        }
    }

    fn from_state(device: &R::Device, state: ExOptimizationState) -> Self {
        let max_bindings = max_bindings::<R>(device);
        match state {
            ExOptimizationState::Elementwise(ops) => ExOptimization::Elementwise(ElementwiseOptimization::from_operations(max_bindings, device.to_id(), &ops)),
            ExOptimizationState::Reduce(ops) => ExOptimization::Reduce(ReduceOptimization::from_operations(max_bindings, &ops)),
            ExOptimizationState::Softmax(ops) => ExOptimization::Softmax(SoftmaxOptimization::from_operations(max_bindings, &ops)),
            ExOptimizationState::Matmul(ops) => ExOptimization::Matmul(MatmulOptimization::from_operations(max_bindings, &ops)),
            ExOptimizationState::ViewReduce(ops) => ExOptimization::ViewReduce(ViewReduceOptimization::from_operations(&ops)),
            ExOptimizationState::ReducePair(ops) => ExOptimization::ReducePair(ReducePairOptimization::from_operations(&ops)),
            ExOptimizationState::Lead(ops) => ExOptimization::Lead(LeadOptimization::from_operations(&ops)),
        }
    }
}
