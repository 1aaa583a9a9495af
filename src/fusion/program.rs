//! A fused block lowered for launching: its program over final registers and the relative
//! tensors and scalars it names, with what running it takes from and gives back to the
//! engine's [`Context`] (the global tensors and handles, the stream's scalars).
use burn_backend::{BoolStore, DType};
use burn_fusion::stream::{Context, ScalarId};
use burn_ir::{TensorId, TensorIr, TensorStatus};
use cubecl::Runtime;

use super::IrHandle;
use crate::launch::fused::{Chain, FusedOp, UnaryFloatOp as U, fused_chain_on};
use crate::launch::view::reshape;
use crate::tensor::CubeTensor;

/// Where a scalar of the program comes from.
#[derive(Clone, Copy, Debug)]
pub(super) enum Source {
    /// A value fixed in the operation (a fill's 0 or 1, a parameter's unused 0).
    Literal(f64),
    /// The stream's scalar of this relative id, which changes from run to run.
    Stream(u64),
    /// A stream scalar filled into a tensor: rounded to the block's dtype first, as a
    /// fill of that dtype holds it.
    Fill(u64),
}

/// A block's program over final registers (float inputs, bool inputs, ops' results), with the
/// relative tensors it reads and writes.
#[derive(Clone, Debug)]
pub(super) struct BlockProgram {
    pub(super) dtype: DType,
    pub(super) bool_dtype: Option<DType>,
    /// Inputs, each as last read.
    pub(super) floats: Vec<TensorIr>,
    pub(super) bools: Vec<TensorIr>,
    pub(super) ops: Vec<FusedOp>,
    pub(super) scalars: Vec<Source>,
    pub(super) params: Vec<Source>,
    /// Written out: (relative tensor, register); float and bool outputs.
    pub(super) outputs: Vec<(TensorIr, usize)>,
    pub(super) bool_outputs: Vec<(TensorIr, usize)>,
    /// Views made before the block runs: (source, view).
    pub(super) views: Vec<(TensorIr, TensorIr)>,
    /// Dropped inside the block.
    pub(super) dropped: Vec<TensorId>,
}

impl BlockProgram {
    /// The global tensor of a relative one.
    pub(super) fn global<H>(context: &Context<H>, t: &TensorIr) -> TensorIr {
        context.tensors.get(&t.id).unwrap_or_else(|| panic!("ex_cubecl: fusion: no global tensor for {t:?}")).clone()
    }

    /// The handles of `tensors` (kept in the context: [`BlockProgram::release`] frees those
    /// read for the last time once the launch is queued).
    pub(super) fn handles<R: Runtime>(context: &mut Context<IrHandle<R>>, tensors: &[TensorIr]) -> Vec<CubeTensor<R>> {
        let ids: Vec<TensorId> = tensors.iter().map(|t| Self::global(context, t).id).collect();
        ids.iter().map(|id| context.handles.get_handle(id, &TensorStatus::ReadOnly).into_tensor("fused block")).collect()
    }

    /// Registers `y` as `out`, the one output of an optimization that read `input`, then
    /// frees `input` where that was its last read, and the tensors `dropped` inside it.
    pub(super) fn register_single<R: Runtime>(context: &mut Context<IrHandle<R>>, out: &TensorIr, y: CubeTensor<R>, input: &TensorIr, dropped: &[TensorId]) {
        let id = Self::global(context, out).id;
        context.handles.register_handle(id, IrHandle::Tensor(y));
        let last_read = (input.status == TensorStatus::ReadWrite).then_some(input.id);
        for id in last_read.into_iter().chain(dropped.iter().copied()) {
            if let Some(t) = context.tensors.get(&id) {
                context.handles.remove_handle(t.id);
            }
        }
    }

    /// The program as the launcher takes it: the ops, the values of its scalars and
    /// parameters from the stream, its outputs' registers.
    pub(super) fn chain<H>(&self, context: &Context<H>) -> Chain {
        let stream = |id: u64| context.scalars.get(&ScalarId { value: id }).expect("ex_cubecl: fusion: a scalar of the stream").elem::<f64>();
        let value = |s: &Source| match *s {
            Source::Literal(v) => v,
            Source::Stream(id) => stream(id),
            Source::Fill(id) => round_to(stream(id), self.dtype),
        };
        let params: Vec<f64> = self.params.iter().map(value).collect();
        // `PowScalar` or `PowInt` by the exponent's value, as `float_powf_scalar` picks.
        let ops = self.ops.iter().map(|&op| match op {
            FusedOp::UnaryWith(U::PowScalar, x, a, b) => FusedOp::UnaryWith(U::pow_scalar(params[a]), x, a, b),
            op => op,
        });
        Chain {
            ops: ops.collect(),
            scalars: self.scalars.iter().map(value).collect(),
            params,
            outputs: self.outputs.iter().map(|(_, r)| *r).collect(),
            bool_outputs: self.bool_outputs.iter().map(|(_, r)| *r).collect(),
            bool_dtype: Some(self.bool_dtype.unwrap_or(DType::Bool(BoolStore::U32))),
        }
    }

    /// Makes the block's views of tensors it doesn't compute and registers them (before
    /// any input is taken: a view is an input like the others).
    pub(super) fn views<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        for (source, view) in &self.views {
            let tensor = Self::handles(context, std::slice::from_ref(source)).remove(0);
            let view = Self::global(context, view);
            context.handles.register_handle(view.id, IrHandle::Tensor(reshape(tensor, view.shape)));
        }
    }

    /// Registers the outputs computed (float, then bool) under their global ids.
    pub(super) fn register<R: Runtime>(&self, context: &mut Context<IrHandle<R>>, outs: Vec<CubeTensor<R>>, bool_outs: Vec<CubeTensor<R>>) {
        let ids: Vec<TensorId> = self.outputs.iter().chain(&self.bool_outputs).map(|(t, _)| Self::global(context, t).id).collect();
        for (id, out) in ids.into_iter().zip(outs.into_iter().chain(bool_outs)) {
            context.handles.register_handle(id, IrHandle::Tensor(out));
        }
    }

    /// Frees the inputs (and views' sources) read for the last time and the tensors dropped
    /// inside the block.
    pub(super) fn release<H: Clone>(&self, context: &mut Context<H>) {
        let sources = self.views.iter().map(|(source, _)| source);
        let read = self.floats.iter().chain(&self.bools).chain(sources);
        let last_reads = read.filter(|t| t.status == TensorStatus::ReadWrite).map(|t| t.id);
        for id in last_reads.chain(self.dropped.iter().copied()).collect::<Vec<_>>() {
            if let Some(t) = context.tensors.get(&id) {
                context.handles.remove_handle(t.id);
            }
        }
    }
}

/// The launch over a widened block's smaller shape
/// ([`lower_small`](super::block::ElementwiseBlock::lower_small)), which runs before the
/// block's own.
#[derive(Clone, Debug)]
pub(super) struct SmallLaunch {
    /// Its program; `outputs` are the values that live on after the block.
    pub(super) program: BlockProgram,
    /// Registers of the values handed to the block's launch, written after `outputs`.
    pub(super) passed: Vec<usize>,
    /// A tensor of the smaller shape (the launch's shape).
    pub(super) like: TensorIr,
}

impl SmallLaunch {
    /// Runs the launch on `device`: registers the values that live on and gives those handed
    /// to the block's launch (its float inputs after its own); it frees nothing.
    pub(super) fn run<R: Runtime>(&self, context: &mut Context<IrHandle<R>>, device: &R::Device) -> Vec<CubeTensor<R>> {
        let p = &self.program;
        let (floats, bools) = (BlockProgram::handles(context, &p.floats), BlockProgram::handles(context, &p.bools));
        let shape = BlockProgram::global(context, &self.like).shape;
        let mut chain = p.chain(context);
        chain.outputs.extend(&self.passed);
        let (mut outs, bool_outs) = fused_chain_on(device, floats, bools, shape, p.dtype, chain, &[]);
        let passed = outs.split_off(p.outputs.len());
        p.register(context, outs, bool_outs);
        passed
    }
}

/// `value` as a tensor of `dtype` holds it.
fn round_to(value: f64, dtype: DType) -> f64 {
    match dtype {
        DType::F32 | DType::Flex32 => value as f32 as f64,
        DType::F16 => burn_backend::f16::from_f64(value).to_f64(),
        DType::BF16 => burn_backend::bf16::from_f64(value).to_f64(),
        _ => value,
    }
}

/// The registers `op` reads.
pub(super) fn operands(op: FusedOp) -> Vec<usize> {
    let read = std::cell::RefCell::new(Vec::new());
    remap(op, |r| {
        read.borrow_mut().push(r);
        r
    });
    read.into_inner()
}

/// `op` with each register operand `r` replaced by `f(r)`.
pub(super) fn remap(op: FusedOp, f: impl Fn(usize) -> usize) -> FusedOp {
    match op {
        FusedOp::Unary(u, x) => FusedOp::Unary(u, f(x)),
        FusedOp::UnaryWith(u, x, a, b) => FusedOp::UnaryWith(u, f(x), a, b),
        FusedOp::Binary(b, x, y) => FusedOp::Binary(b, f(x), f(y)),
        FusedOp::NanMax(x, y) => FusedOp::NanMax(f(x), f(y)),
        FusedOp::NanMin(x, y) => FusedOp::NanMin(f(x), f(y)),
        FusedOp::Compare(c, x, y) => FusedOp::Compare(c, f(x), f(y)),
        FusedOp::Select(p, x, y) => FusedOp::Select(f(p), f(x), f(y)),
        FusedOp::Predicate(p, x) => FusedOp::Predicate(p, f(x)),
        FusedOp::Not(x) => FusedOp::Not(f(x)),
        FusedOp::Const(bits) => FusedOp::Const(bits),
        FusedOp::Scalar(k) => FusedOp::Scalar(k),
    }
}
