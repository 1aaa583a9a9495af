//! The elementwise fuser: a run of Burn's elementwise operations (float math, scalars,
//! comparisons, masks, bool logic, casts between floats and bools, fills) over one output
//! shape, lowered to one program of our fused kernel (`ex_cubecl_kernels::fused`).
//!
//! The fuser sees the stream's *relative* operations: tensor ids, dims and scalars are
//! numbered by first appearance, so the program it builds serves every run of the same
//! pattern. At execution the [`Context`] maps them back: relative tensors to global ones
//! (with their real shapes and handles), relative scalars to their values.
use burn_fusion::stream::Context;
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::OperationIr;
use cubecl::Runtime;

use super::{IrHandle, replayed};
use super::block::ElementwiseBlock;
use super::program::BlockProgram;
use super::in_place::donated_outputs;
use crate::launch::fused::fused_chain_into;

/// Bindings kept free for the launch's scalar and metadata buffers.
pub(super) const RESERVED_BINDINGS: usize = 4;

/// Fuses a run of elementwise operations into one block.
#[derive(Clone, Debug)]
pub struct ElementwiseFuser {
    block: ElementwiseBlock,
    /// The operations accepted, in order (drops included): the optimization's state.
    operations: Vec<OperationIr>,
    status: FuserStatus,
    max_bindings: usize,
}

impl ElementwiseFuser {
    /// A fuser for a device that binds `max_bindings` buffers to a kernel.
    pub fn new(max_bindings: usize) -> Self {
        Self { block: ElementwiseBlock::default(), operations: Vec::new(), status: FuserStatus::Open, max_bindings }
    }

    /// Adds `op`, or closes the fuser when it doesn't fuse.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        match self.block.add(op) {
            Some(()) if self.block.bindings() + RESERVED_BINDINGS <= self.max_bindings => self.operations.push(op.clone()),
            _ => self.close(),
        }
    }

    /// Closed, with the block of the operations it took (built again: see [`replayed`]).
    fn close(&mut self) {
        *self = replayed(Self::new(self.max_bindings), &self.operations, Self::fuse, Self::len);
        self.status = FuserStatus::Closed;
    }

    /// The program of the operations fused so far.
    pub fn finish(&self) -> ElementwiseOptimization {
        ElementwiseOptimization { program: self.block.lower(), operations: self.operations.clone() }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::new(self.max_bindings);
    }

    /// Open while operations may still join the block.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready once it holds an operation and reads a tensor (a block of fills alone has no
    /// device to launch on: its ops run one by one); scored by the reads, writes and launches
    /// it saves (0, never chosen, for a single operation).
    pub fn properties(&self) -> FuserProperties {
        let ready = self.block.real_ops > 0 && self.block.reads_memory();
        FuserProperties { score: self.block.score(), ready }
    }

    /// The operations accepted, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// A fused elementwise block ready to run.
#[derive(Clone, Debug)]
pub struct ElementwiseOptimization {
    program: BlockProgram,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
}

impl ElementwiseOptimization {
    /// The optimization of `operations` (its state), fused again.
    pub fn from_operations(max_bindings: usize, operations: &[OperationIr]) -> Self {
        replayed(ElementwiseFuser::new(max_bindings), operations, ElementwiseFuser::fuse, ElementwiseFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the block: one launch over the global tensors of `context`, whose outputs are
    /// registered there; inputs read for the last time, and dropped tensors, leave it.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        let p = &self.program;
        p.views(context);
        let (floats, bools) = (BlockProgram::handles(context, &p.floats), BlockProgram::handles(context, &p.bools));
        if let Some((t, _)) = p.outputs.first().or(p.bool_outputs.first()) {
            let shape = BlockProgram::global(context, t).shape;
            let into = donated_outputs(context, p, 0, &floats, &shape);
            let (outs, bool_outs) = fused_chain_into(floats, bools, shape, p.dtype, p.chain(context), &into);
            p.register(context, outs, bool_outs);
        }
        p.release(context);
    }
}
