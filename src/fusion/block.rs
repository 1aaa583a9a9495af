//! A block of elementwise work: Burn's relative operations lowered, one by one, to ops of our
//! fused kernel over virtual registers, with the tensors the block reads and writes. The
//! elementwise fuser is one block; the reduction fuser a block on each side of its reduction.
use std::collections::HashMap;

use burn_backend::{DType, Shape};
use burn_ir::{
    BaseOperationIr, BinaryOpIr, BoolOperationIr, FloatOperationIr, NumericOperationIr, OperationIr, ScalarIr, ScalarOpIr,
    TensorId, TensorIr, TensorStatus, UnaryOpIr,
};

use super::program::{BlockProgram, SmallLaunch, Source, operands, remap};
use crate::launch::fused::{BinaryFloatOp as B, CompareOp as C, FusedOp, PredicateOp as P, UnaryFloatOp as U};

/// What a register of the block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Value {
    /// Float input `k`.
    Float(usize),
    /// Bool input `k`.
    Bool(usize),
    /// The result of op `i`.
    Op(usize),
}

/// A block being fused: its inputs, its ops over virtual registers (indices into `values`),
/// and every tensor it reads or writes with its latest status.
#[derive(Clone, Debug, Default)]
pub(super) struct ElementwiseBlock {
    /// The float dtype of every float tensor of the block.
    pub(super) dtype: Option<DType>,
    /// The dtype of every bool tensor of the block.
    pub(super) bool_dtype: Option<DType>,
    /// The (relative) shape of every tensor the block writes.
    pub(super) shape: Option<Shape>,
    /// Float inputs, then bool inputs, each as last read.
    pub(super) floats: Vec<TensorIr>,
    pub(super) bools: Vec<TensorIr>,
    /// What each virtual register holds.
    pub(super) values: Vec<Value>,
    /// The ops; their operands are virtual registers.
    pub(super) ops: Vec<FusedOp>,
    pub(super) scalars: Vec<Source>,
    pub(super) params: Vec<Source>,
    /// Every tensor of the block and its virtual register.
    pub(super) registers: HashMap<TensorId, usize>,
    /// Tensors the block writes (casts and fills included), each as last read.
    pub(super) written: Vec<TensorIr>,
    /// Views of tensors the block doesn't compute, made when it runs: (source as last read,
    /// view). A view is an input of the block like any tensor it doesn't compute.
    pub(super) views: Vec<(TensorIr, TensorIr)>,
    /// Tensors dropped inside the block.
    pub(super) dropped: Vec<TensorId>,
    /// Operations accepted, drops excluded.
    pub(super) real_ops: usize,
    /// Reads and writes of the accepted operations run one by one.
    pub(super) unfused_io: usize,
    /// Whether the block may widen (the elementwise fuser's blocks and the reduction fuser's
    /// read blocks do): ops over a shape that broadcasts to the block's, such as a batch
    /// norm's per-channel statistics among its per-element work, join the block, computed
    /// once by a launch over their shape ([`ElementwiseBlock::lower_small`]) instead of
    /// cutting the block in two.
    pub(super) widens: bool,
    /// The smaller shape of a widened block.
    pub(super) small: Option<Shape>,
    /// Whether each op of `ops` computes a value of the smaller shape.
    pub(super) small_ops: Vec<bool>,
}

impl ElementwiseBlock {
    /// Adds `op`, or gives `None` (and the block is to be discarded) when it doesn't fuse.
    pub(super) fn add(&mut self, op: &OperationIr) -> Option<()> {
        match op {
            OperationIr::Drop(tensor) => {
                (self.real_ops > 0).then_some(())?;
                self.dropped.push(tensor.id);
                return Some(());
            }
            // A view (no launch) of a tensor that the block doesn't compute.
            OperationIr::BaseFloat(BaseOperationIr::Reshape(op)) => {
                (!self.writes(op.input.id)).then_some(())?;
                self.mark_read(&op.input);
                self.views.push((op.input.clone(), op.out.clone()));
                return Some(());
            }
            OperationIr::NumericFloat(dtype, op) => self.numeric(*dtype, op)?,
            OperationIr::Float(dtype, op) => self.float(*dtype, op)?,
            OperationIr::BaseFloat(op) => self.base_float(op)?,
            OperationIr::BaseBool(BaseOperationIr::Equal(op)) => self.binary(op, |x, y| FusedOp::Compare(C::Equal, x, y))?,
            OperationIr::Bool(op) => self.bool(op)?,
            _ => return None,
        }
        // The ops it added (its result, and a scalar's register) are of its output's shape.
        let small = op.outputs().next().is_some_and(|out| self.is_small(out));
        self.small_ops.resize(self.ops.len(), small);
        self.real_ops += 1;
        self.unfused_io += op.inputs().count() + op.outputs().count();
        Some(())
    }

    fn numeric(&mut self, dtype: DType, op: &NumericOperationIr) -> Option<()> {
        self.float_dtype(dtype)?;
        use NumericOperationIr as N;
        let bin = |b| move |x, y| FusedOp::Binary(b, x, y);
        let cmp = |c| move |x, y| FusedOp::Compare(c, x, y);
        match op {
            N::Add(op) => self.binary(op, bin(B::Add)),
            N::Sub(op) => self.binary(op, bin(B::Sub)),
            N::Mul(op) => self.binary(op, bin(B::Mul)),
            N::Div(op) => self.binary(op, bin(B::Div)),
            N::Rem(op) => self.binary(op, bin(B::Rem)),
            N::AddScalar(op) => self.scalar(op, bin(B::Add)),
            N::SubScalar(op) => self.scalar(op, bin(B::Sub)),
            N::MulScalar(op) => self.scalar(op, bin(B::Mul)),
            N::DivScalar(op) => self.scalar(op, bin(B::Div)),
            N::RemScalar(op) => self.scalar(op, bin(B::Rem)),
            N::Abs(op) => self.unary(op, U::Abs),
            N::Greater(op) => self.binary(op, cmp(C::Greater)),
            N::GreaterEqual(op) => self.binary(op, cmp(C::GreaterEqual)),
            N::Lower(op) => self.binary(op, cmp(C::Lower)),
            N::LowerEqual(op) => self.binary(op, cmp(C::LowerEqual)),
            N::GreaterElem(op) => self.scalar(op, cmp(C::Greater)),
            N::GreaterEqualElem(op) => self.scalar(op, cmp(C::GreaterEqual)),
            N::LowerElem(op) => self.scalar(op, cmp(C::Lower)),
            N::LowerEqualElem(op) => self.scalar(op, cmp(C::LowerEqual)),
            N::Clamp(op) => {
                self.output_shape(&op.out)?;
                let x = self.input(&op.tensor)?;
                let (a, b) = (self.param(&op.min), self.param(&op.max));
                self.define(&op.out, FusedOp::UnaryWith(U::Clamp, x, a, b))
            }
            N::Full(op) => {
                self.output_shape(&op.out)?;
                let source = match source(&op.value) {
                    Source::Stream(id) => Source::Fill(id),
                    literal => literal,
                };
                self.scalars.push(source);
                self.define(&op.out, FusedOp::Scalar(self.scalars.len() - 1))
            }
            _ => None,
        }
    }

    fn float(&mut self, dtype: DType, op: &FloatOperationIr) -> Option<()> {
        self.float_dtype(dtype)?;
        use FloatOperationIr as F;
        match op {
            F::Exp(op) => self.unary(op, U::Exp),
            F::Log(op) => self.unary(op, U::Log),
            F::Log1p(op) => self.unary(op, U::Log1p),
            F::Erf(op) => self.unary(op, U::Erf),
            F::Sqrt(op) => self.unary(op, U::Sqrt),
            F::Cos(op) => self.unary(op, U::Cos),
            F::Cosh(op) => self.unary(op, U::Cosh),
            F::Sin(op) => self.unary(op, U::Sin),
            F::Sinh(op) => self.unary(op, U::Sinh),
            F::Tan(op) => self.unary(op, U::Tan),
            F::Tanh(op) => self.unary(op, U::Tanh),
            F::ArcCos(op) => self.unary(op, U::Acos),
            F::ArcCosh(op) => self.unary(op, U::Acosh),
            F::ArcSin(op) => self.unary(op, U::Asin),
            F::ArcSinh(op) => self.unary(op, U::Asinh),
            F::ArcTan(op) => self.unary(op, U::Atan),
            F::ArcTanh(op) => self.unary(op, U::Atanh),
            F::Round(op) => self.unary(op, U::Round),
            F::Floor(op) => self.unary(op, U::Floor),
            // burn-fusion 0.21.0 records `trunc` as `Ceil` in the relative stream the fusers
            // see (`stream/context.rs`), so a relative `Ceil` may be either: neither fuses,
            // and both run as their own ops (the engine runs the recorded op, which is right).
            F::Ceil(_) | F::Trunc(_) => None,
            F::Recip(op) => self.unary(op, U::Recip),
            F::ArcTan2(op) => self.binary(op, |x, y| FusedOp::Binary(B::Atan2, x, y)),
            F::Powf(op) => self.binary(op, |x, y| FusedOp::Binary(B::Powf, x, y)),
            F::IsNan(op) => self.unary_op(op, |x| FusedOp::Predicate(P::IsNan, x)),
            F::IsInf(op) => self.unary_op(op, |x| FusedOp::Predicate(P::IsInf, x)),
            F::PowfScalar(op) => {
                // `PowScalar` or `PowInt` by the exponent's value, chosen at each launch.
                self.output_shape(&op.out)?;
                let x = self.input(&op.lhs)?;
                let (a, b) = (self.param(&op.rhs), self.literal_param(0.0));
                self.define(&op.out, FusedOp::UnaryWith(U::PowScalar, x, a, b))
            }
            _ => None,
        }
    }

    fn base_float(&mut self, op: &BaseOperationIr) -> Option<()> {
        use BaseOperationIr as Base;
        match op {
            Base::Equal(op) => self.binary(op, |x, y| FusedOp::Compare(C::Equal, x, y)),
            Base::EqualElem(op) => self.scalar(op, |x, y| FusedOp::Compare(C::Equal, x, y)),
            Base::MaskWhere(op) => {
                self.output_shape(&op.out)?;
                let (t, m, v) = (self.input(&op.tensor)?, self.input(&op.mask)?, self.input(&op.value)?);
                self.define(&op.out, FusedOp::Select(m, v, t))
            }
            Base::MaskFill(op) => {
                self.output_shape(&op.out)?;
                let (t, m) = (self.input(&op.tensor)?, self.input(&op.mask)?);
                let v = self.scalar_register(&op.value);
                self.define(&op.out, FusedOp::Select(m, v, t))
            }
            // A float cast within the block's dtype is the value itself.
            Base::Cast(op) if op.input.dtype == op.out.dtype => {
                self.output_shape(&op.out)?;
                let x = self.input(&op.input)?;
                self.alias(&op.out, x)
            }
            Base::Zeros(op) => self.fill(&op.out, 0.0),
            Base::Ones(op) => self.fill(&op.out, 1.0),
            _ => None,
        }
    }

    fn bool(&mut self, op: &BoolOperationIr) -> Option<()> {
        match op {
            BoolOperationIr::Not(op) => self.unary_op(op, FusedOp::Not),
            BoolOperationIr::And(op) => self.binary(op, |x, y| FusedOp::Binary(B::Mul, x, y)),
            BoolOperationIr::Or(op) => self.binary(op, |x, y| FusedOp::Binary(B::Max, x, y)),
            // 0 / 1 as a float: the register itself (bools are held as 0.0 / 1.0).
            BoolOperationIr::IntoFloat(op) => {
                self.output_shape(&op.out)?;
                let x = self.input(&op.input)?;
                self.alias(&op.out, x)
            }
            _ => None,
        }
    }

    fn unary(&mut self, op: &UnaryOpIr, u: U) -> Option<()> {
        self.unary_op(op, |x| FusedOp::Unary(u, x))
    }

    fn unary_op(&mut self, op: &UnaryOpIr, f: impl FnOnce(usize) -> FusedOp) -> Option<()> {
        self.output_shape(&op.out)?;
        let x = self.input(&op.input)?;
        self.define(&op.out, f(x))
    }

    fn binary(&mut self, op: &BinaryOpIr, f: impl FnOnce(usize, usize) -> FusedOp) -> Option<()> {
        self.output_shape(&op.out)?;
        let (x, y) = (self.input(&op.lhs)?, self.input(&op.rhs)?);
        self.define(&op.out, f(x, y))
    }

    fn scalar(&mut self, op: &ScalarOpIr, f: impl FnOnce(usize, usize) -> FusedOp) -> Option<()> {
        self.output_shape(&op.out)?;
        let x = self.input(&op.lhs)?;
        let s = self.scalar_register(&op.rhs);
        self.define(&op.out, f(x, s))
    }

    fn fill(&mut self, out: &TensorIr, value: f64) -> Option<()> {
        self.float_dtype(out.dtype)?;
        self.output_shape(out)?;
        self.scalars.push(Source::Literal(value));
        self.define(out, FusedOp::Scalar(self.scalars.len() - 1))
    }

    /// Checks `dtype` against the block's float dtype (setting it first time).
    fn float_dtype(&mut self, dtype: DType) -> Option<()> {
        (dtype.is_float() && *self.dtype.get_or_insert(dtype) == dtype).then_some(())
    }

    /// Checks a written tensor's shape against the block's (setting it first time); a block
    /// that widens takes one other shape that broadcasts to the block's, or widens to one
    /// that the block's broadcasts to (what it computed so far is then of the smaller shape).
    fn output_shape(&mut self, out: &TensorIr) -> Option<()> {
        let shape = self.shape.get_or_insert_with(|| out.shape.clone());
        if *shape == out.shape || self.small.as_ref() == Some(&out.shape) {
            return Some(());
        }
        (self.widens && self.small.is_none()).then_some(())?;
        if broadcasts(shape, &out.shape) {
            self.small = Some(core::mem::replace(shape, out.shape.clone()));
            self.small_ops.iter_mut().for_each(|small| *small = true);
        } else if broadcasts(&out.shape, shape) {
            self.small = Some(out.shape.clone());
        } else {
            return None;
        }
        Some(())
    }

    /// Whether `t` is of the smaller shape of a widened block.
    fn is_small(&self, t: &TensorIr) -> bool {
        self.small.as_ref() == Some(&t.shape)
    }

    /// The register of a tensor an op reads: one the block has, or a new input (of the
    /// block's float or bool dtype, broadcasting to the block's shape).
    pub(super) fn input(&mut self, tensor: &TensorIr) -> Option<usize> {
        self.mark_read(tensor);
        if let Some(&r) = self.registers.get(&tensor.id) {
            return Some(r);
        }
        let shape = self.shape.as_ref().expect("the output's shape is set first");
        if !broadcasts(&tensor.shape, shape) {
            return None;
        }
        let value = if tensor.dtype.is_float() {
            self.float_dtype(tensor.dtype)?;
            self.floats.push(tensor.clone());
            Value::Float(self.floats.len() - 1)
        } else if self.is_bool(tensor.dtype) {
            self.bools.push(tensor.clone());
            Value::Bool(self.bools.len() - 1)
        } else {
            return None;
        };
        self.values.push(value);
        self.registers.insert(tensor.id, self.values.len() - 1);
        Some(self.values.len() - 1)
    }

    /// Records `tensor`'s status as its latest read, wherever the block holds it.
    fn mark_read(&mut self, tensor: &TensorIr) {
        let sources = self.views.iter_mut().map(|(source, _)| source);
        let seen = self.floats.iter_mut().chain(&mut self.bools).chain(&mut self.written).chain(sources);
        seen.filter(|t| t.id == tensor.id).for_each(|t| t.status = tensor.status);
    }

    /// Whether `dtype` is the block's bool dtype (setting it first time).
    fn is_bool(&mut self, dtype: DType) -> bool {
        matches!(dtype, DType::Bool(_)) && *self.bool_dtype.get_or_insert(dtype) == dtype
    }

    /// Registers `op` as the value of the tensor `out` (of the block's float or bool dtype).
    fn define(&mut self, out: &TensorIr, op: FusedOp) -> Option<()> {
        self.ops.push(op);
        self.values.push(Value::Op(self.ops.len() - 1));
        self.alias(out, self.values.len() - 1)
    }

    /// Makes register `r` the value of the tensor `out`.
    fn alias(&mut self, out: &TensorIr, r: usize) -> Option<()> {
        let fits = match out.dtype.is_float() {
            true => self.float_dtype(out.dtype).is_some(),
            false => self.is_bool(out.dtype),
        };
        fits.then_some(())?;
        self.registers.insert(out.id, r);
        self.written.push(out.clone());
        Some(())
    }

    /// A new register holding the scalar `s`.
    fn scalar_register(&mut self, s: &ScalarIr) -> usize {
        self.scalars.push(source(s));
        let k = self.scalars.len() - 1;
        self.ops.push(FusedOp::Scalar(k));
        self.values.push(Value::Op(self.ops.len() - 1));
        self.values.len() - 1
    }

    fn param(&mut self, s: &ScalarIr) -> usize {
        self.params.push(source(s));
        self.params.len() - 1
    }

    fn literal_param(&mut self, value: f64) -> usize {
        self.params.push(Source::Literal(value));
        self.params.len() - 1
    }

    /// The tensors the block writes out: those still alive after it (not dropped, not last
    /// read inside it).
    pub(super) fn outputs(&self) -> impl Iterator<Item = &TensorIr> {
        self.written.iter().filter(|t| t.status != TensorStatus::ReadWrite && !self.dropped.contains(&t.id))
    }

    /// Makes `out`, a value the block doesn't read from memory (a reduction's result), its
    /// float input 0; it is written out like the values the block computes.
    pub(super) fn seed(&mut self, out: &TensorIr) -> Option<()> {
        self.float_dtype(out.dtype)?;
        self.shape = Some(out.shape.clone());
        self.floats.push(out.clone());
        self.values.push(Value::Float(0));
        self.registers.insert(out.id, 0);
        self.written.push(out.clone());
        Some(())
    }

    /// Whether the block computes `id` (rather than reading it).
    pub(super) fn writes(&self, id: TensorId) -> bool {
        self.written.iter().any(|t| t.id == id)
    }

    /// The final register of virtual register `v` in the block's program ([`lower`](Self::lower)):
    /// float inputs, the values of the smaller shape handed over by the smaller launch, bool
    /// inputs, the ops' results (of the block's shape, where it widened).
    pub(super) fn final_register(&self, v: usize) -> usize {
        self.register_in(&self.split(), v)
    }

    /// [`final_register`](Self::final_register) with the block's split made.
    fn register_in(&self, ops: &Split, v: usize) -> usize {
        let (floats, passed) = (self.floats.len(), ops.passed.len());
        match self.values[v] {
            Value::Float(k) => k,
            Value::Bool(k) => floats + passed + k,
            Value::Op(i) if self.small_ops[i] => floats + position(&ops.passed, v),
            Value::Op(i) => floats + passed + self.bools.len() + position(&ops.large, i),
        }
    }

    /// The block's program: its ops of the block's shape over final registers (see
    /// [`final_register`](Self::final_register)), writing its outputs of that shape. A
    /// widened block's ops of the smaller shape are [`lower_small`](Self::lower_small)'s:
    /// that launch hands over the values these ops read, appended to the float inputs.
    pub(super) fn lower(&self) -> BlockProgram {
        let ops = self.split();
        let final_register = |v: usize| self.register_in(&ops, v);
        let (outputs, bool_outputs) = self
            .outputs()
            .filter(|t| !self.is_small(t))
            .map(|t| (t.clone(), final_register(self.registers[&t.id])))
            .partition(|(t, _)| t.dtype.is_float());
        BlockProgram {
            dtype: self.dtype.unwrap_or(DType::F32),
            bool_dtype: self.bool_dtype,
            floats: self.floats.clone(),
            bools: self.bools.clone(),
            ops: ops.large.iter().map(|&i| remap(self.ops[i], final_register)).collect(),
            scalars: self.scalars.clone(),
            params: self.params.clone(),
            outputs,
            bool_outputs,
            views: self.views.clone(),
            dropped: self.dropped.clone(),
        }
    }

    /// The launch over a widened block's smaller shape, which runs first: its ops of that
    /// shape, computed once, over the inputs they read; its outputs are the values of that
    /// shape that live on after the block (registered), then, as extra float outputs, those
    /// the block's own ops read (handed to its launch, bools as 0.0 / 1.0). `None` where
    /// there is neither. It frees nothing: the block's launch does.
    pub(super) fn lower_small(&self) -> Option<SmallLaunch> {
        let ops = self.split();
        let outputs: Vec<&TensorIr> = self.outputs().filter(|t| self.is_small(t)).collect();
        if outputs.is_empty() && ops.passed.is_empty() {
            return None;
        }
        let mut read = vec![false; self.values.len()];
        let wanted = ops.small.iter().flat_map(|&i| operands(self.ops[i])).chain(outputs.iter().map(|t| self.registers[&t.id]));
        wanted.chain(ops.passed.iter().copied()).for_each(|v| read[v] = true);
        let inputs = |bool: bool| -> Vec<usize> {
            let input = |v: &Value| match (*v, bool) {
                (Value::Float(k), false) | (Value::Bool(k), true) => Some(k),
                _ => None,
            };
            let mut ks: Vec<usize> = self.values.iter().zip(&read).filter(|(_, r)| **r).filter_map(|(v, _)| input(v)).collect();
            ks.sort_unstable();
            ks
        };
        let (floats, bools) = (inputs(false), inputs(true));
        let final_register = |v: usize| match self.values[v] {
            Value::Float(k) => position(&floats, k),
            Value::Bool(k) => floats.len() + position(&bools, k),
            Value::Op(i) => floats.len() + bools.len() + position(&ops.small, i),
        };
        let (outputs, bool_outputs) =
            outputs.into_iter().map(|t| (t.clone(), final_register(self.registers[&t.id]))).partition(|(t, _)| t.dtype.is_float());
        let program = BlockProgram {
            dtype: self.dtype.unwrap_or(DType::F32),
            bool_dtype: self.bool_dtype,
            floats: floats.iter().map(|&k| self.floats[k].clone()).collect(),
            bools: bools.iter().map(|&k| self.bools[k].clone()).collect(),
            ops: ops.small.iter().map(|&i| remap(self.ops[i], final_register)).collect(),
            scalars: self.scalars.clone(),
            params: self.params.clone(),
            outputs,
            bool_outputs,
            views: Vec::new(),
            dropped: Vec::new(),
        };
        let like = self.written.iter().find(|t| self.is_small(t)).expect("a widened block writes a value of the smaller shape").clone();
        Some(SmallLaunch { program, passed: ops.passed.iter().map(|&v| final_register(v)).collect(), like })
    }

    /// The ops of each shape, and the values of the smaller shape that ops of the block's
    /// shape read (virtual registers, in order).
    fn split(&self) -> Split {
        let (small, large): (Vec<usize>, Vec<usize>) = (0..self.ops.len()).partition(|&i| self.small_ops[i]);
        let is_small = |v: usize| matches!(self.values[v], Value::Op(i) if self.small_ops[i]);
        let mut passed: Vec<usize> = large.iter().flat_map(|&i| operands(self.ops[i])).filter(|&v| is_small(v)).collect();
        passed.sort_unstable();
        passed.dedup();
        Split { small, large, passed }
    }

    /// Whether the block reads a tensor from memory (a block of fills alone doesn't).
    pub(super) fn reads_memory(&self) -> bool {
        !(self.floats.is_empty() && self.bools.is_empty())
    }

    /// Buffers bound to the block's launch (the values a widened block's smaller launch
    /// hands over included).
    pub(super) fn bindings(&self) -> usize {
        let passed = match self.small {
            Some(_) => self.split().passed.len(),
            None => 0,
        };
        self.floats.len() + passed + self.bools.len() + self.outputs().count()
    }

    /// Reads and writes saved against running the operations one by one.
    pub(super) fn score(&self) -> u64 {
        if self.real_ops < 2 {
            return 0;
        }
        let fused_io = self.bindings();
        let saved_io = self.unfused_io.saturating_sub(fused_io) as u64;
        saved_io * 100 + (self.real_ops as u64 - 1) * 10
    }
}

/// A widened block's ops by shape ([`ElementwiseBlock::split`]).
struct Split {
    /// Ops of the smaller shape, and of the block's.
    small: Vec<usize>,
    large: Vec<usize>,
    /// Values of the smaller shape that ops of the block's shape read (virtual registers).
    passed: Vec<usize>,
}

/// Where `k` is in `list`.
fn position(list: &[usize], k: usize) -> usize {
    list.iter().position(|&x| x == k).expect("ex_cubecl: fusion: a register of the block's split")
}

/// Whether a tensor of relative shape `from` broadcasts to `to` (relative dims: equal ids are
/// equal sizes, and id 0 is always a size of 1).
fn broadcasts(from: &Shape, to: &Shape) -> bool {
    from.rank() == to.rank() && from.iter().zip(to.iter()).all(|(&d, &s)| d == s || d == 0)
}

/// The relative scalar's source: literal bools, and stream scalars by their relative id.
pub(super) fn source(s: &ScalarIr) -> Source {
    match *s {
        ScalarIr::UInt(id) => Source::Stream(id),
        ScalarIr::Bool(b) => Source::Literal(b as u8 as f64),
        ScalarIr::Float(v) => Source::Literal(v),
        ScalarIr::Int(v) => Source::Literal(v as f64),
    }
}

