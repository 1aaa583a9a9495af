//! The lead fuser: a block's first op, run alone as the unfused backend runs it, where no
//! other fuser fuses the block.
//!
//! Burn's search (burn-fusion 0.21) adds every op that reads a block's tensors to that
//! block, also once its fusers have closed; a block none of them is ready for then runs all
//! its ops one by one. A convolution (which no fuser of ours takes) collected the batch norm
//! after it this way (its statistics, `x - mean`, the square), a reduction with nothing to
//! fuse the ops after it. This fuser takes the first op alone and is ready with it, so such a
//! block's optimization covers that op only, and the engine explores the ops after it again,
//! where the other fusers take them. Its score (1) is below every real fusion's, so it never
//! displaces one; it closes at once, so it never keeps a search going.
use burn_fusion::stream::{Context, OrderedExecution};
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::OperationIr;
use cubecl::Runtime;

use super::{ExFusionRuntime, IrHandle, replayed, run_unfused};

/// Takes a block's first op, and nothing after it.
#[derive(Clone, Debug)]
pub struct LeadFuser {
    /// The op taken, if any: the optimization's state.
    operation: Option<OperationIr>,
    status: FuserStatus,
}

impl Default for LeadFuser {
    fn default() -> Self {
        Self { operation: None, status: FuserStatus::Open }
    }
}

impl LeadFuser {
    /// Takes `op` when it is the block's first op, and closes.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.operation.is_none() {
            self.operation = Some(op.clone());
        }
        self.status = FuserStatus::Closed;
    }

    /// The op, to run alone.
    pub fn finish(&self) -> LeadOptimization {
        LeadOptimization { operations: self.operation.iter().cloned().collect() }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::default();
    }

    /// Open until it has its op.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready with its op, scored 1.
    pub fn properties(&self) -> FuserProperties {
        FuserProperties { score: self.operation.is_some() as u64, ready: self.operation.is_some() }
    }

    /// The operations taken: 0 or 1.
    pub fn len(&self) -> usize {
        self.operation.is_some() as usize
    }
}

/// The op that led a block, run as the unfused backend runs it.
#[derive(Clone, Debug)]
pub struct LeadOptimization {
    /// The op (its serialisable state).
    operations: Vec<OperationIr>,
}

impl LeadOptimization {
    /// The optimization of `operations` (its state: one op).
    pub fn from_operations(operations: &[OperationIr]) -> Self {
        replayed(LeadFuser::default(), operations, LeadFuser::fuse, LeadFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the op through the engine's own unfused operation.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>, execution: &OrderedExecution<ExFusionRuntime<R>>)
    where
        R::Device: burn_backend::DeviceOps,
    {
        run_unfused(1, context, execution);
    }
}
