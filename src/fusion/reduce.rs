//! The reduction fuser: elementwise work over a tensor (the *read* block), its reduction along
//! one axis (sum, mean, product, max, min), and elementwise work over the result (the *write*
//! block), in one launch of `ex_cubecl_kernels::fused_reduce` (or `fused_reduce_vec`, a
//! vector of adjacent lines per unit, for an axis that is not the innermost):
//! `exp(x - m).sum_dim(1).log()` reads `x` and `m` once and writes the log only.
//!
//! The write block's float input 0 is the reduction's result, which no memory holds; it
//! can't read what the read block computes (that would be the input shape read at the
//! reduced shape: a later block's work).
use burn_backend::DType;
use burn_fusion::stream::Context;
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::{NumericOperationIr, OperationIr, ReduceDimOpIr, TensorIr};
use cubecl::Runtime;

use super::{IrHandle, replayed};
use super::block::ElementwiseBlock;
use super::elementwise::RESERVED_BINDINGS;
use super::program::{BlockProgram, SmallLaunch};
use crate::launch::fused_reduce::{ReduceChain, ReduceInputs, ReduceOp, fused_reduce, shift_constants};

/// The reduction of a fused block.
#[derive(Clone, Debug)]
struct Reduction {
    op: ReduceOp,
    axis: usize,
    /// The tensor reduced (relative), as the reduction reads it.
    input: TensorIr,
    /// Its virtual register in the read block.
    register: usize,
}

/// Fuses elementwise work, one reduction along an axis and elementwise work on its result.
#[derive(Clone, Debug)]
pub struct ReduceFuser {
    read: ElementwiseBlock,
    reduction: Option<Reduction>,
    write: ElementwiseBlock,
    /// The operations accepted, in order (drops included): the optimization's state.
    operations: Vec<OperationIr>,
    /// Reads and writes of the reduction run on its own.
    reduce_io: usize,
    status: FuserStatus,
    max_bindings: usize,
}

impl ReduceFuser {
    /// A fuser for a device that binds `max_bindings` buffers to a kernel.
    pub fn new(max_bindings: usize) -> Self {
        Self {
            read: ElementwiseBlock { widens: true, ..ElementwiseBlock::default() },
            reduction: None,
            write: ElementwiseBlock::default(),
            operations: Vec::new(),
            reduce_io: 0,
            status: FuserStatus::Open,
            max_bindings,
        }
    }

    /// Adds `op`, or closes the fuser when it doesn't fuse.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        match self.add(op) {
            Some(()) if self.bindings() + RESERVED_BINDINGS <= self.max_bindings => self.operations.push(op.clone()),
            _ => self.close(),
        }
    }

    /// Closed, with the blocks of the operations it took (built again: see [`replayed`]).
    fn close(&mut self) {
        *self = replayed(Self::new(self.max_bindings), &self.operations, Self::fuse, Self::len);
        self.status = FuserStatus::Closed;
    }

    fn add(&mut self, op: &OperationIr) -> Option<()> {
        if let OperationIr::Drop(t) = op {
            (!self.operations.is_empty()).then_some(())?;
            let block = if self.read.registers.contains_key(&t.id) { &mut self.read } else { &mut self.write };
            block.dropped.push(t.id);
            return Some(());
        }
        match (&self.reduction, reduction(op)) {
            (None, Some((op, reduce))) => self.reduce(op, reduce),
            (None, None) => self.read.add(op),
            (Some(_), Some(_)) => None,
            (Some(_), None) => {
                // The write block can't read what the read block computes.
                op.inputs().all(|t| !self.read.writes(t.id)).then_some(())?;
                self.write.add(op)
            }
        }
    }

    fn reduce(&mut self, op: ReduceOp, reduce: &ReduceDimOpIr) -> Option<()> {
        // A reduction opens a block only after elementwise work: the engine hands a fuser
        // that is still open every next op, and after `m = x.max_dim(1)` the next is most
        // often `x - m` (softmax, layer norm), which reads `x` at the input shape and can't
        // join. Held open here, it would sink into this block unfused instead of starting
        // the next one (`x - m`, `exp`, `sum_dim`: one launch).
        (self.read.real_ops > 0).then_some(())?;
        (reduce.input.dtype.is_float() && reduce.out.dtype == reduce.input.dtype).then_some(())?;
        // The read block works over the reduced tensor's shape exactly.
        (*self.read.shape.get_or_insert_with(|| reduce.input.shape.clone()) == reduce.input.shape).then_some(())?;
        let register = self.read.input(&reduce.input)?;
        self.write.seed(&reduce.out)?;
        (self.read.bool_dtype.is_none() || self.write.bool_dtype.is_none() || self.read.bool_dtype == self.write.bool_dtype).then_some(())?;
        self.reduction = Some(Reduction { op, axis: reduce.axis, input: reduce.input.clone(), register });
        self.reduce_io = 2;
        Some(())
    }

    /// Buffers bound to the launch: both blocks' inputs and outputs (the write block's input
    /// 0 is no buffer).
    fn bindings(&self) -> usize {
        let seeded = self.reduction.is_some() as usize;
        self.read.bindings() + self.write.bindings() - seeded
    }

    /// The program of the operations fused so far.
    pub fn finish(&self) -> ReduceOptimization {
        let reduction = self.reduction.clone().expect("ex_cubecl: fusion: a reduce block without its reduction");
        ReduceOptimization {
            read: self.read.lower(),
            read_small: self.read.lower_small(),
            write: self.write.lower(),
            reduced: self.read.final_register(reduction.register),
            reduction,
            operations: self.operations.clone(),
        }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::new(self.max_bindings);
    }

    /// The buffers the device binds to one kernel.
    pub fn max_bindings(&self) -> usize {
        self.max_bindings
    }

    /// Open while operations may still join the block.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready once it holds a reduction, elementwise work around it and a tensor it reads;
    /// scored by the reads, writes and launches it saves.
    pub fn properties(&self) -> FuserProperties {
        let elementwise = self.read.real_ops + self.write.real_ops;
        let ready = self.reduction.is_some() && elementwise > 0 && self.read.reads_memory();
        if !ready {
            return FuserProperties { score: 0, ready: false };
        }
        let unfused_io = self.read.unfused_io + self.write.unfused_io + self.reduce_io;
        let saved_io = unfused_io.saturating_sub(self.bindings()) as u64;
        FuserProperties { score: saved_io * 100 + elementwise as u64 * 10, ready }
    }

    /// The operations accepted, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// The reduction of `op`, if it is one the fusers take (sum, mean, product, max, min along
/// an axis).
pub(super) fn reduction(op: &OperationIr) -> Option<(ReduceOp, &ReduceDimOpIr)> {
    let OperationIr::NumericFloat(_, op) = op else { return None };
    match op {
        NumericOperationIr::SumDim(r) => Some((ReduceOp::Sum, r)),
        NumericOperationIr::MeanDim(r) => Some((ReduceOp::Mean, r)),
        NumericOperationIr::ProdDim(r) => Some((ReduceOp::Prod, r)),
        NumericOperationIr::MaxDim(r) => Some((ReduceOp::Max, r)),
        NumericOperationIr::MinDim(r) => Some((ReduceOp::Min, r)),
        _ => None,
    }
}

/// A fused reduction ready to run.
#[derive(Clone, Debug)]
pub struct ReduceOptimization {
    read: BlockProgram,
    /// The launch over a widened read block's smaller shape, which runs first.
    read_small: Option<SmallLaunch>,
    write: BlockProgram,
    /// The read block's register reduced.
    reduced: usize,
    reduction: Reduction,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
}

impl ReduceOptimization {
    /// The optimization of `operations` (its state), fused again.
    pub fn from_operations(max_bindings: usize, operations: &[OperationIr]) -> Self {
        replayed(ReduceFuser::new(max_bindings), operations, ReduceFuser::fuse, ReduceFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the block: one launch (or the read block, the reduction and the write block where
    /// one launch can't), outputs registered in `context`, last reads and drops freed.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        let (r, w) = (&self.read, &self.write);
        r.views(context);
        w.views(context);
        let mut inputs = ReduceInputs {
            floats: BlockProgram::handles(context, &r.floats),
            bools: BlockProgram::handles(context, &r.bools),
            write_floats: BlockProgram::handles(context, &w.floats[1..]),
            write_bools: BlockProgram::handles(context, &w.bools),
        };
        if let Some(small) = &self.read_small {
            let device = inputs.floats.first().or(inputs.bools.first()).expect("checked: the read block reads memory").device.clone();
            inputs.floats.extend(small.run(context, &device));
        }
        let shape = BlockProgram::global(context, &self.reduction.input).shape;
        let (mut read, mut write) = (r.chain(context), w.chain(context));
        // One list of scalars and parameters for both programs, and one bool dtype.
        write.ops = write.ops.iter().map(|&op| shift_constants(op, read.scalars.len(), read.params.len())).collect();
        read.scalars.append(&mut write.scalars);
        read.params.append(&mut write.params);
        let bool_dtype = r.bool_dtype.or(w.bool_dtype);
        (read.bool_dtype, write.bool_dtype) = (bool_dtype.or(read.bool_dtype), bool_dtype.or(write.bool_dtype));
        let chain = ReduceChain { read, reduced: self.reduced, op: self.reduction.op, axis: self.reduction.axis, write };
        let dtype: DType = r.dtype;
        let [outs, bool_outs, write_outs, write_bool_outs] = fused_reduce(inputs, shape, dtype, chain);
        r.register(context, outs, bool_outs);
        w.register(context, write_outs, write_bool_outs);
        r.release(context);
        w.release(context);
    }
}
