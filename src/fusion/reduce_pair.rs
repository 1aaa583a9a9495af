//! The reduction-pair fuser: a reduction and a reduction of its result along another axis,
//! each line short, in one launch ([`reduce_pair`]).
//!
//! Autodiff sums a broadcast gradient back to its input's shape one axis at a time: a batch
//! norm's `[N, C, H, W]` gradient to `[1, C, 1, 1]` over `N` (fused with the work before it),
//! then `H`, then `W`. The last two are tiny reductions, each its own launch of a few
//! microseconds (ResNet-50's step ran 638 of them). Here they are one launch with their bits;
//! where the layout or the lines' lengths don't allow it, the two run as they are.
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::{OperationIr, ReduceDimOpIr, TensorId, TensorStatus};
use cubecl::Runtime;

use super::program::BlockProgram;
use super::reduce::reduction;
use super::{ExFusionRuntime, IrHandle, dropped, replayed, run_unfused};
use crate::launch::fused_reduce::ReduceOp;
use crate::launch::reduce_pair::reduce_pair;

/// Takes two reductions along different axes, the second reading the first's result for the
/// last time.
#[derive(Clone, Debug)]
pub struct ReducePairFuser {
    /// The operations taken, drops included: the optimization's state.
    operations: Vec<OperationIr>,
    /// The reductions taken.
    reductions: Vec<(ReduceOp, ReduceDimOpIr)>,
    status: FuserStatus,
}

impl Default for ReducePairFuser {
    fn default() -> Self {
        Self { operations: Vec::new(), reductions: Vec::new(), status: FuserStatus::Open }
    }
}

impl ReducePairFuser {
    /// Adds `op`, or closes the fuser when it doesn't fit; closes after the second reduction.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        match self.add(op) {
            Some(()) => self.operations.push(op.clone()),
            None => self.status = FuserStatus::Closed,
        }
        if self.reductions.len() == 2 {
            self.status = FuserStatus::Closed;
        }
    }

    fn add(&mut self, op: &OperationIr) -> Option<()> {
        if let OperationIr::Drop(_) = op {
            return (!self.reductions.is_empty()).then_some(());
        }
        let (kind, r) = reduction(op)?;
        (r.input.dtype == r.out.dtype).then_some(())?;
        if let Some((_, first)) = self.reductions.first() {
            (r.input.id == first.out.id && r.input.status == TensorStatus::ReadWrite && r.axis != first.axis).then_some(())?;
        }
        self.reductions.push((kind, r.clone()));
        Some(())
    }

    /// The two reductions, to run as one launch.
    pub fn finish(&self) -> ReducePairOptimization {
        let [(op_a, a), (op_b, b)] = self.reductions.clone().try_into().expect("ex_cubecl: fusion: a reduction pair without its two reductions");
        ReducePairOptimization { ops: [op_a, op_b], first: a, second: b, dropped: dropped(&self.operations), operations: self.operations.clone() }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Open until it has both reductions or an op that doesn't fit.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready with both reductions, scored by the launch and the write and read saved.
    pub fn properties(&self) -> FuserProperties {
        let ready = self.reductions.len() == 2;
        FuserProperties { score: ready as u64 * 200, ready }
    }

    /// The operations taken, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// Two reductions in a row ready to run.
#[derive(Clone, Debug)]
pub struct ReducePairOptimization {
    ops: [ReduceOp; 2],
    first: ReduceDimOpIr,
    second: ReduceDimOpIr,
    /// Dropped inside the block.
    dropped: Vec<TensorId>,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
}

impl ReducePairOptimization {
    /// The optimization of `operations` (its state), taken again.
    pub fn from_operations(operations: &[OperationIr]) -> Self {
        replayed(ReducePairFuser::default(), operations, ReducePairFuser::fuse, ReducePairFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs both reductions in one launch, or one after the other where [`reduce_pair`]
    /// doesn't take them; registers the output and frees the input where it was its last
    /// read, and the tensors dropped.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>, execution: &OrderedExecution<ExFusionRuntime<R>>)
    where
        R::Device: burn_backend::DeviceOps,
    {
        let x = BlockProgram::handles(context, std::slice::from_ref(&self.first.input)).remove(0);
        let Some(y) = reduce_pair(&x, [self.first.axis, self.second.axis], self.ops) else {
            return run_unfused(self.operations.len(), context, execution);
        };
        BlockProgram::register_single(context, &self.second.out, y, &self.first.input, &self.dropped);
    }
}
