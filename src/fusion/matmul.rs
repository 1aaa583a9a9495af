//! The matrix-product fuser: a product and elementwise work on its result (the *epilogue*:
//! bias, activation, scaling, casts), in one launch of
//! `ex_cubecl_kernels::fused_matmul` where our tiled kernel runs the product: `relu(x @ w +
//! b)` reads `x`, `w` and `b` and writes the activation only. Where a tensor-core kernel runs
//! the product, the epilogue is one fused launch after it.
//!
//! The epilogue is an elementwise block over the product's shape whose float input 0 is the
//! product, which no memory holds (it is written out only when a later operation reads it).
//! Burn's `linear` (a view of the weight, the product, a view of the bias, the addition) is
//! one block.
use burn_backend::DType;
use burn_fusion::stream::Context;
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::{BaseOperationIr, FloatOperationIr, OperationIr, TensorIr, TensorStatus};
use cubecl::Runtime;

use super::in_place::donated_outputs;
use super::{IrHandle, replayed};
use super::block::ElementwiseBlock;
use super::elementwise::RESERVED_BINDINGS;
use super::program::BlockProgram;
use crate::launch::fused_matmul::fused_matmul;

/// The product of a fused block: `lhs @ rhs`.
#[derive(Clone, Debug)]
struct Product {
    lhs: TensorIr,
    rhs: TensorIr,
}

/// Fuses a matrix product and elementwise work on its result.
#[derive(Clone, Debug)]
pub struct MatmulFuser {
    product: Option<Product>,
    epilogue: ElementwiseBlock,
    /// The operations accepted, in order (drops included): the optimization's state.
    operations: Vec<OperationIr>,
    status: FuserStatus,
    max_bindings: usize,
}

impl MatmulFuser {
    /// A fuser for a device that binds `max_bindings` buffers to a kernel.
    pub fn new(max_bindings: usize) -> Self {
        Self { product: None, epilogue: ElementwiseBlock::default(), operations: Vec::new(), status: FuserStatus::Open, max_bindings }
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

    /// Closed, with the product and epilogue of the operations it took (built again: see [`replayed`]).
    fn close(&mut self) {
        *self = replayed(Self::new(self.max_bindings), &self.operations, Self::fuse, Self::len);
        self.status = FuserStatus::Closed;
    }

    fn add(&mut self, op: &OperationIr) -> Option<()> {
        match (op, &self.product) {
            (OperationIr::Drop(t), Some(_)) => {
                self.epilogue.dropped.push(t.id);
                Some(())
            }
            (OperationIr::Float(dtype, FloatOperationIr::Matmul(m)), None) => {
                self.epilogue.seed(&m.out)?;
                self.product(*dtype, &m.lhs, &m.rhs)
            }
            // Views of the operands (Burn's `linear` gives its weight leading dimensions).
            (OperationIr::BaseFloat(BaseOperationIr::Reshape(_)), None) => self.epilogue.add(op),
            (_, Some(_)) if !matches!(op, OperationIr::Float(_, FloatOperationIr::Matmul(_))) => self.epilogue.add(op),
            _ => None,
        }
    }

    fn product(&mut self, dtype: DType, lhs: &TensorIr, rhs: &TensorIr) -> Option<()> {
        (dtype.is_float() && lhs.dtype == dtype && rhs.dtype == dtype && lhs.shape.rank() >= 2).then_some(())?;
        self.product = Some(Product { lhs: lhs.clone(), rhs: rhs.clone() });
        Some(())
    }

    /// Buffers bound to the launch: the operands, the epilogue's inputs (but the product)
    /// and its outputs.
    fn bindings(&self) -> usize {
        2 + self.epilogue.bindings() - self.product.is_some() as usize
    }

    /// The program of the operations fused so far.
    pub fn finish(&self) -> MatmulOptimization {
        let product = self.product.clone().expect("ex_cubecl: fusion: a matmul block without its product");
        MatmulOptimization { product, epilogue: self.epilogue.lower(), operations: self.operations.clone() }
    }

    /// Back to an empty block.
    pub fn reset(&mut self) {
        *self = Self::new(self.max_bindings);
    }

    /// Open while operations may still join the block.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready once it holds a product and elementwise work on it (a product alone runs as its
    /// own operation); scored by the reads, writes and launches it saves.
    pub fn properties(&self) -> FuserProperties {
        let ready = self.product.is_some() && self.epilogue.real_ops > 0;
        if !ready {
            return FuserProperties { score: 0, ready: false };
        }
        // The product alone reads two tensors and writes one.
        let saved_io = (3 + self.epilogue.unfused_io).saturating_sub(self.bindings()) as u64;
        FuserProperties { score: saved_io * 100 + self.epilogue.real_ops as u64 * 10, ready }
    }

    /// The operations accepted, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// A fused product ready to run.
#[derive(Clone, Debug)]
pub struct MatmulOptimization {
    product: Product,
    epilogue: BlockProgram,
    /// The operations it stands for (its serialisable state).
    operations: Vec<OperationIr>,
}

impl MatmulOptimization {
    /// The optimization of `operations` (its state), fused again.
    pub fn from_operations(max_bindings: usize, operations: &[OperationIr]) -> Self {
        replayed(MatmulFuser::new(max_bindings), operations, MatmulFuser::fuse, MatmulFuser::len).finish()
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the block (one launch, or the product then the epilogue), outputs registered in
    /// `context`, last reads and drops freed.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        let (p, e) = (&self.product, &self.epilogue);
        e.views(context);
        let [lhs, rhs] = [&p.lhs, &p.rhs].map(|t| BlockProgram::handles(context, std::slice::from_ref(t)).remove(0));
        if !(e.outputs.is_empty() && e.bool_outputs.is_empty()) {
            let (floats, bools) = (BlockProgram::handles(context, &e.floats[1..]), BlockProgram::handles(context, &e.bools));
            let shape = BlockProgram::global(context, &e.outputs.first().or(e.bool_outputs.first()).expect("an output").0).shape;
            let into = donated_outputs(context, e, 1, &floats, &shape);
            let (outs, bool_outs) = fused_matmul("fused matmul", lhs, rhs, floats, bools, e.chain(context), &into);
            e.register(context, outs, bool_outs);
        }
        // The operands read for the last time, then the epilogue's.
        let last_reads = [&p.lhs, &p.rhs].into_iter().filter(|t| t.status == TensorStatus::ReadWrite).map(|t| t.id);
        for id in last_reads.collect::<Vec<_>>() {
            if let Some(t) = context.tensors.get(&id) {
                context.handles.remove_handle(t.id);
            }
        }
        e.release(context);
    }
}
