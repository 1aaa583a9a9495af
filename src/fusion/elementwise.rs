//! The elementwise fuser: a run of Burn's elementwise operations (float math, scalars,
//! comparisons, masks, bool logic, casts between floats and bools, fills) over one output
//! shape, lowered to one program of our fused kernel (`ex_cubecl_kernels::fused`). Ops over
//! a smaller shape that broadcasts to it join the block: a launch over that shape computes
//! them first (`ElementwiseBlock::lower_small`), writing those that live on after the block
//! and handing those the block reads to its launch. Both launches give the bits of the ops
//! run one by one.
//!
//! The fuser sees the stream's *relative* operations: tensor ids, dims and scalars are
//! numbered by first appearance, so the program it builds serves every run of the same
//! pattern. At execution the [`Context`] maps them back: relative tensors to global ones
//! (with their real shapes and handles), relative scalars to their values.
use burn_fusion::stream::Context;
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::OperationIr;
use cubecl::Runtime;
use cubecl::device::{Device, DeviceId};

use super::{IrHandle, replayed};
use super::block::ElementwiseBlock;
use super::program::{BlockProgram, SmallLaunch};
use super::in_place::donated_outputs;
use crate::launch::fused::{fused_chain_into, fused_chain_on};

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
    /// The device it fuses for, where a block of fills alone (no inputs) launches.
    device: DeviceId,
}

impl ElementwiseFuser {
    /// A fuser for `device`, which binds `max_bindings` buffers to a kernel.
    pub fn new(max_bindings: usize, device: DeviceId) -> Self {
        let block = ElementwiseBlock { widens: true, ..ElementwiseBlock::default() };
        Self { block, operations: Vec::new(), status: FuserStatus::Open, max_bindings, device }
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
        *self = replayed(Self::new(self.max_bindings, self.device), &self.operations, Self::fuse, Self::len);
        self.status = FuserStatus::Closed;
    }

    /// The program of the operations fused so far.
    pub fn finish(&self) -> ElementwiseOptimization {
        let (program, small) = (self.block.lower(), self.block.lower_small());
        ElementwiseOptimization { program, small, operations: self.operations.clone(), device: self.device }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::new(self.max_bindings, self.device);
    }

    /// Open while operations may still join the block.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready once it holds an operation (a block of fills alone, such as autodiff's
    /// `ones * scalar`, writes its result in one launch on the fuser's device); scored by the
    /// reads, writes and launches it saves (0, never chosen, for a single operation).
    pub fn properties(&self) -> FuserProperties {
        FuserProperties { score: self.block.score(), ready: self.block.real_ops > 0 }
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
    /// The launch over a widened block's smaller shape, which runs first.
    small: Option<SmallLaunch>,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
    /// Where a block without inputs launches.
    device: DeviceId,
}

impl ElementwiseOptimization {
    /// The optimization of `operations` (its state), fused again.
    pub fn from_operations(max_bindings: usize, device: DeviceId, operations: &[OperationIr]) -> Self {
        replayed(ElementwiseFuser::new(max_bindings, device), operations, ElementwiseFuser::fuse, ElementwiseFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the block: one launch over the global tensors of `context` (for a widened block,
    /// the launch over the smaller shape first), whose outputs are registered there; inputs
    /// read for the last time, and dropped tensors, leave it.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        let p = &self.program;
        p.views(context);
        let passed = match &self.small {
            Some(small) => small.run(context, &R::Device::from_id(self.device)),
            None => Vec::new(),
        };
        let (mut floats, bools) = (BlockProgram::handles(context, &p.floats), BlockProgram::handles(context, &p.bools));
        if let Some((t, _)) = p.outputs.first().or(p.bool_outputs.first()) {
            let shape = BlockProgram::global(context, t).shape;
            let into = donated_outputs(context, p, 0, &floats, &shape);
            floats.extend(passed);
            let chain = p.chain(context);
            let (outs, bool_outs) = match floats.is_empty() && bools.is_empty() {
                true => fused_chain_on(&R::Device::from_id(self.device), floats, bools, shape, p.dtype, chain, &into),
                false => fused_chain_into(floats, bools, shape, p.dtype, chain, &into),
            };
            p.register(context, outs, bool_outs);
        }
        p.release(context);
    }
}
