//! The view-reduction fuser: a reduction of a reshaped view of a tensor, in one launch that
//! reads the tensor where it lies.
//!
//! burn-nn's batch norm takes its statistics as `x.swap_dims(0, 1).reshape([C, N*H*W])
//! .mean_dim(1)`. The swapped view's reshape is no view (its `N` and `H*W` don't merge), so
//! run op by op it copies the whole tensor before the mean reads it. Here the three ops are
//! one reduction whose lines step through the batch, then the pixels, of `x` itself
//! ([`reduce_reshaped`]), folding in the copy's order: the same bits, without the copy's
//! launch and its write and read of the tensor. Where the layout doesn't allow it (a reshape
//! that splits a dimension of the view), the ops run as the unfused backend runs them.
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::{BaseOperationIr, OperationIr, TensorId, TensorIr, TensorStatus};
use cubecl::Runtime;

use super::program::BlockProgram;
use super::reduce::reduction;
use super::{ExFusionRuntime, IrHandle, dropped, replayed, run_unfused};
use crate::launch::fused_reduce::ReduceOp;
use crate::launch::reduce::reduce_reshaped;
use crate::launch::view;

/// Takes a swap of two dimensions or a permutation, a reshape of its result and a reduction
/// of that, each the last read of the one before.
#[derive(Clone, Debug)]
pub struct ViewReduceFuser {
    /// The operations taken, drops included: the optimization's state.
    operations: Vec<OperationIr>,
    /// The tensor the next op must read for the last time: the view, then the reshape.
    next: Option<TensorIr>,
    /// The reduction's output, once taken.
    reduced: bool,
    status: FuserStatus,
}

impl Default for ViewReduceFuser {
    fn default() -> Self {
        Self { operations: Vec::new(), next: None, reduced: false, status: FuserStatus::Open }
    }
}

impl ViewReduceFuser {
    /// Adds `op`, or closes the fuser when it doesn't fit the pattern.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        match self.add(op) {
            Some(()) => self.operations.push(op.clone()),
            None => self.status = FuserStatus::Closed,
        }
        if self.reduced {
            self.status = FuserStatus::Closed;
        }
    }

    fn add(&mut self, op: &OperationIr) -> Option<()> {
        let last_read_of_next = |t: &TensorIr| self.next.as_ref().is_some_and(|n| n.id == t.id) && t.status == TensorStatus::ReadWrite;
        match (self.operations.is_empty(), op) {
            (false, OperationIr::Drop(_)) => {}
            (true, OperationIr::BaseFloat(BaseOperationIr::SwapDims(op))) => self.next = Some(op.out.clone()),
            (true, OperationIr::BaseFloat(BaseOperationIr::Permute(op))) => self.next = Some(op.out.clone()),
            (false, OperationIr::BaseFloat(BaseOperationIr::Reshape(op))) if last_read_of_next(&op.input) && !self.reshaped() => {
                self.next = Some(op.out.clone());
            }
            (false, op) if self.reshaped() => {
                let (_, reduce) = reduction(op)?;
                (last_read_of_next(&reduce.input) && reduce.input.dtype == reduce.out.dtype).then_some(())?;
                self.reduced = true;
            }
            _ => return None,
        }
        Some(())
    }

    /// Whether the reshape is taken.
    fn reshaped(&self) -> bool {
        self.operations.iter().any(|op| matches!(op, OperationIr::BaseFloat(BaseOperationIr::Reshape(_))))
    }

    /// The three ops, to run as one reduction.
    pub fn finish(&self) -> ViewReduceOptimization {
        ViewReduceOptimization::of(&self.operations).expect("ex_cubecl: fusion: a view reduction without its three ops")
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Open until it has its reduction or an op that doesn't fit.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready with its reduction, scored by the launch and the copy's write and read saved.
    pub fn properties(&self) -> FuserProperties {
        FuserProperties { score: self.reduced as u64 * 200, ready: self.reduced }
    }

    /// The operations taken, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// A reduction of a reshaped view ready to run.
#[derive(Clone, Debug)]
pub struct ViewReduceOptimization {
    /// The tensor viewed, and the view's permutation of its dimensions.
    input: TensorIr,
    axes: Vec<usize>,
    /// The reshape's output (its shape is the engine's at run time), the reduction and its
    /// axis and output.
    reshaped: TensorIr,
    op: ReduceOp,
    axis: usize,
    out: TensorIr,
    /// Dropped inside the block.
    dropped: Vec<TensorId>,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
}

impl ViewReduceOptimization {
    fn of(operations: &[OperationIr]) -> Option<Self> {
        let mut ops = operations.iter().filter(|op| !matches!(op, OperationIr::Drop(_)));
        let (input, axes) = match ops.next()? {
            OperationIr::BaseFloat(BaseOperationIr::SwapDims(op)) => {
                let mut axes: Vec<usize> = (0..op.input.shape.num_dims()).collect();
                axes.swap(op.dim1, op.dim2);
                (op.input.clone(), axes)
            }
            OperationIr::BaseFloat(BaseOperationIr::Permute(op)) => (op.input.clone(), op.axes.clone()),
            _ => return None,
        };
        let OperationIr::BaseFloat(BaseOperationIr::Reshape(reshape)) = ops.next()? else { return None };
        let (op, reduce) = reduction(ops.next()?)?;
        let dropped = dropped(operations);
        Some(Self {
            input,
            axes,
            reshaped: reshape.out.clone(),
            op,
            axis: reduce.axis,
            out: reduce.out.clone(),
            dropped,
            operations: operations.to_vec(),
        })
    }

    /// The optimization of `operations` (its state), taken again.
    pub fn from_operations(operations: &[OperationIr]) -> Self {
        replayed(ViewReduceFuser::default(), operations, ViewReduceFuser::fuse, ViewReduceFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the reduction of the view in one launch, or the ops one by one where the view's
    /// layout doesn't allow it; registers the output and frees the input where it was its
    /// last read, and the tensors dropped.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>, execution: &OrderedExecution<ExFusionRuntime<R>>)
    where
        R::Device: burn_backend::DeviceOps,
    {
        let x = BlockProgram::handles(context, std::slice::from_ref(&self.input)).remove(0);
        let viewed = view::permute(x, &self.axes);
        let shape = BlockProgram::global(context, &self.reshaped).shape;
        let Some(y) = reduce_reshaped(&viewed, &shape, self.axis, self.op, self.out.dtype) else {
            return run_unfused(self.operations.len(), context, execution);
        };
        BlockProgram::register_single(context, &self.out, y, &self.input, &self.dropped);
    }
}
