//! The softmax fuser: Burn's decomposition of `softmax` and `log_softmax` (its default
//! `ActivationOps`, which `Fusion<B>` runs) recognised op by op and run as our one-kernel
//! softmax (`launch::softmax`), as the unfused backend runs `softmax` itself:
//!
//! ```text
//! m = max_dim(x, d); s = x - m; e = exp(s); z = sum_dim(e, d);  y = e / z          (softmax)
//!                                                                y = s - log(z)    (log_softmax)
//! ```
//!
//! The kernel gives no intermediate, so it runs only where every intermediate dies inside
//! the run. Where one lives on (autodiff keeps `e` and `z` for the backward pass, a caller
//! keeps `m`), the fuser gives what the other fusers would have: the max on its own, then the
//! rest as far as the reduction fuser takes it (`x - m`, `exp`, `sum_dim`, `log`: one
//! launch); held open through the pattern, the fuser has these ops in its block, and giving
//! nothing would leave them all to run one by one. The reduction fuser can't take the whole
//! pattern, whose second reduction reads values of the first one's input shape.
use burn_backend::DType;
use burn_fusion::stream::Context;
use burn_fusion::{FuserProperties, FuserStatus};
use burn_ir::{FloatOperationIr, NumericOperationIr, OperationIr, TensorId, TensorIr, TensorStatus};
use cubecl::Runtime;

use super::IrHandle;
use super::program::BlockProgram;
use super::reduce::{ReduceFuser, ReduceOptimization};
use crate::launch::reduce::reduce_dim;
use crate::launch::softmax::softmax;
use ex_cubecl_kernels::reduce::ReduceOp;

/// What the fuser has matched so far.
#[derive(Clone, Debug, Default)]
struct Matched {
    /// The input, as last read; the axis; the dtype.
    input: Option<(TensorIr, usize, DType)>,
    /// The intermediates in order (`m`, `s`, `e`, `z`, and `log z` for log-softmax), each as
    /// last read.
    values: Vec<TensorIr>,
    /// The result, once matched, and whether it is the log-softmax.
    output: Option<(TensorIr, bool)>,
    /// Tensors dropped inside the run.
    dropped: Vec<TensorId>,
}

impl Matched {
    /// Takes `op` as the next step of the pattern; refused, nothing changes.
    fn add(&mut self, op: &OperationIr) -> Option<()> {
        if let OperationIr::Drop(t) = op {
            self.input.as_ref()?;
            self.dropped.push(t.id);
            return Some(());
        }
        self.output.is_none().then_some(())?;
        let step = self.values.len();
        let id = |k: usize| self.values.get(k).map(|t| t.id);
        match (step, op) {
            (0, OperationIr::NumericFloat(dtype, NumericOperationIr::MaxDim(r))) => {
                self.input = Some((r.input.clone(), r.axis, *dtype));
                self.values.push(r.out.clone());
            }
            (1, OperationIr::NumericFloat(_, NumericOperationIr::Sub(b))) if Some(b.lhs.id) == self.input_id() && Some(b.rhs.id) == id(0) => {
                self.read(&b.lhs);
                self.read(&b.rhs);
                self.values.push(b.out.clone());
            }
            (2, OperationIr::Float(_, FloatOperationIr::Exp(u))) if Some(u.input.id) == id(1) => {
                self.read(&u.input);
                self.values.push(u.out.clone());
            }
            (3, OperationIr::NumericFloat(_, NumericOperationIr::SumDim(r))) if Some(r.input.id) == id(2) && Some(r.axis) == self.axis() => {
                self.read(&r.input);
                self.values.push(r.out.clone());
            }
            (4, OperationIr::NumericFloat(_, NumericOperationIr::Div(b))) if Some(b.lhs.id) == id(2) && Some(b.rhs.id) == id(3) => {
                self.read(&b.lhs);
                self.read(&b.rhs);
                self.output = Some((b.out.clone(), false));
            }
            (4, OperationIr::Float(_, FloatOperationIr::Log(u))) if Some(u.input.id) == id(3) => {
                self.read(&u.input);
                self.values.push(u.out.clone());
            }
            (5, OperationIr::NumericFloat(_, NumericOperationIr::Sub(b))) if Some(b.lhs.id) == id(1) && Some(b.rhs.id) == id(4) => {
                self.read(&b.lhs);
                self.read(&b.rhs);
                self.output = Some((b.out.clone(), true));
            }
            _ => return None,
        }
        Some(())
    }

    fn input_id(&self) -> Option<TensorId> {
        self.input.as_ref().map(|(t, _, _)| t.id)
    }

    fn axis(&self) -> Option<usize> {
        self.input.as_ref().map(|(_, axis, _)| *axis)
    }

    /// Records the status `t` is read with.
    fn read(&mut self, t: &TensorIr) {
        if let Some((input, _, _)) = self.input.as_mut().filter(|(i, _, _)| i.id == t.id) {
            input.status = t.status;
        }
        self.values.iter_mut().filter(|v| v.id == t.id).for_each(|v| v.status = t.status);
    }

    /// Whether the whole pattern matched and every intermediate dies inside it.
    fn complete(&self) -> bool {
        self.output.is_some() && self.values.iter().all(|v| v.status == TensorStatus::ReadWrite || self.dropped.contains(&v.id))
    }
}

/// Fuses Burn's softmax and log-softmax decompositions into our softmax kernel.
#[derive(Clone, Debug)]
pub struct SoftmaxFuser {
    matched: Matched,
    /// The ops after the max, fused as the reduction fuser fuses them: what runs where the
    /// kernel can't.
    rest: ReduceFuser,
    /// The operations accepted, in order (drops included): the optimization's state.
    operations: Vec<OperationIr>,
    status: FuserStatus,
}

impl SoftmaxFuser {
    /// A fuser for a device that binds `max_bindings` buffers to a kernel.
    pub fn new(max_bindings: usize) -> Self {
        Self { matched: Matched::default(), rest: ReduceFuser::new(max_bindings), operations: Vec::new(), status: FuserStatus::Open }
    }

    /// Adds `op`, or closes the fuser when it isn't the pattern's next step.
    pub fn fuse(&mut self, op: &OperationIr) {
        if self.status == FuserStatus::Closed {
            return;
        }
        match self.matched.add(op) {
            Some(()) => {
                if !self.operations.is_empty() {
                    self.rest.fuse(op);
                }
                self.operations.push(op.clone());
            }
            None => self.status = FuserStatus::Closed,
        }
    }

    /// The matched run: the softmax kernel, or the max and the rest's fused prefix.
    pub fn finish(&self) -> SoftmaxOptimization {
        let (input, axis, dtype) = self.matched.input.clone().expect("ex_cubecl: fusion: a softmax without its input");
        let run = match (self.matched.complete(), self.matched.output.clone()) {
            (true, Some((output, log))) => Run::Kernel { output, log, dropped: self.matched.dropped.clone() },
            _ => Run::MaxThen { max: self.matched.values[0].clone(), dtype, rest: self.rest.finish() },
        };
        let covered = match &run {
            Run::Kernel { .. } => self.operations.len(),
            Run::MaxThen { rest, .. } => 1 + rest.operations().len(),
        };
        SoftmaxOptimization { input, axis, run, operations: self.operations[..covered].to_vec() }
    }

    /// Back to nothing matched.
    pub fn reset(&mut self) {
        *self = Self::new(self.rest.max_bindings());
    }

    /// Open while the pattern may still match.
    pub fn status(&self) -> FuserStatus {
        self.status
    }

    /// Ready once the whole pattern matched with its intermediates dead (it saves four or five
    /// launches and every intermediate's reads and writes), or as the rest is.
    pub fn properties(&self) -> FuserProperties {
        match self.matched.complete() {
            true => FuserProperties { score: 10_000, ready: true },
            false => self.rest.properties(),
        }
    }

    /// The operations accepted, drops included.
    pub fn len(&self) -> usize {
        self.operations.len()
    }
}

/// How a matched run runs.
#[derive(Clone, Debug)]
enum Run {
    /// Our softmax kernel gives `output`.
    Kernel { output: TensorIr, log: bool, dropped: Vec<TensorId> },
    /// The max `max` on its own, then the rest as the reduction fuser fused it.
    MaxThen { max: TensorIr, dtype: DType, rest: ReduceOptimization },
}

/// A softmax or log-softmax ready to run.
#[derive(Clone, Debug)]
pub struct SoftmaxOptimization {
    input: TensorIr,
    axis: usize,
    run: Run,
    operations: Vec<OperationIr>,
}

impl SoftmaxOptimization {
    /// The optimization of `operations` (its state), matched again.
    pub fn from_operations(max_bindings: usize, operations: &[OperationIr]) -> Self {
        let mut fuser = SoftmaxFuser::new(max_bindings);
        operations.iter().for_each(|op| fuser.fuse(op));
        let optimization = fuser.finish();
        assert!(optimization.operations.len() == operations.len(), "ex_cubecl: fusion: a saved softmax no longer matches");
        optimization
    }

    /// The operations it stands for.
    pub fn operations(&self) -> &[OperationIr] {
        &self.operations
    }

    /// Runs the run: our softmax kernel on the input (registering the result, freeing the
    /// input if this was its last read and the tensors dropped inside the run), or the max
    /// (registered for the rest to read) and the rest.
    pub fn execute<R: Runtime>(&self, context: &mut Context<IrHandle<R>>) {
        let x = BlockProgram::handles(context, std::slice::from_ref(&self.input)).remove(0);
        match &self.run {
            Run::Kernel { output, log, dropped } => {
                let y = softmax(x, self.axis, *log);
                BlockProgram::register_single(context, output, y, &self.input, dropped);
            }
            Run::MaxThen { max, dtype, rest } => {
                let m = reduce_dim(x, self.axis, ReduceOp::Max, *dtype);
                let id = BlockProgram::global(context, max).id;
                context.handles.register_handle(id, IrHandle::Tensor(m));
                rest.execute(context);
            }
        }
    }
}
