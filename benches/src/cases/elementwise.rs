//! Elementwise ops on f32: one add, a chain of five ops unfused and fused (ours), the math
//! functions exp, tanh and erf (ours are our own f32 functions, `math::single`), and the
//! latency of a tiny add.
use burn_backend::{Backend, TensorPrimitive};
use burn_tensor::Tensor;
use ex_cubecl::launch::fused::{BinaryFloatOp, FusedOp, UnaryFloatOp};
use ex_cubecl::{CubeTensor, ExCubeclBackend};

use super::{downcast, uniform};
use crate::{Case, DynCase, RunFn, Runtime, Size, Work};

/// `a + b` on `n` f32 elements.
pub struct Add {
    n: usize,
}

/// Five elementwise ops in a row, each its own launch (no fusion on either backend):
/// `(((a + b) * c).exp().sqrt()).neg()`.
pub struct Chain5 {
    n: usize,
}

/// The same five ops as one launch of our fused kernel (`ExCubeclBackend::float_fused`):
/// three reads and one write per element. Ours only.
pub struct Chain5Fused {
    n: usize,
}

/// `a + b` as a one-op program of the fused kernel (scalar loads), beside the vectorised add
/// kernel: the bandwidth each reaches. Ours only.
pub struct AddFused {
    n: usize,
}

/// A math function on `n` f32 elements in [-3, 3): one read, one write.
pub struct Function {
    n: usize,
    name: &'static str,
}

/// `a + b` on 16 elements, synced: the time of launching a tiny op and waiting for it.
pub struct TinyAdd;

/// The elementwise cases at `size`.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    let n = match size {
        Size::Small => 1 << 16,
        Size::Full => 1 << 26,
    };
    let mut cases: Vec<Box<dyn DynCase>> = vec![Box::new(Add { n }), Box::new(Chain5 { n }), Box::new(Chain5Fused { n }), Box::new(AddFused { n })];
    cases.extend(["exp", "tanh", "erf"].map(|name| Box::new(Function { n, name }) as Box<dyn DynCase>));
    cases.push(Box::new(TinyAdd));
    cases
}

/// `2^k` for powers of two, the number otherwise.
fn count(n: usize) -> String {
    if n.is_power_of_two() { format!("2^{}", n.trailing_zeros()) } else { n.to_string() }
}

impl Case for Add {
    fn name(&self) -> String {
        "add f32".into()
    }

    fn size(&self) -> String {
        count(self.n)
    }

    fn work(&self) -> Work {
        Work::Bytes(12.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let a = uniform::<B, 1>([self.n], 1, device);
        let b = uniform::<B, 1>([self.n], 2, device);
        Some(Box::new(move || a.clone() + b.clone()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for Function {
    fn name(&self) -> String {
        format!("{} f32", self.name)
    }

    fn size(&self) -> String {
        count(self.n)
    }

    fn work(&self) -> Work {
        Work::Bytes(8.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let a = uniform::<B, 1>([self.n], 4, device) * 3.0;
        let f: fn(Tensor<B, 1>) -> Tensor<B, 1> = match self.name {
            "exp" => |x| x.exp(),
            "tanh" => |x| x.tanh(),
            _ => |x| x.erf(),
        };
        Some(Box::new(move || f(a.clone())))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for Chain5 {
    fn name(&self) -> String {
        "5 elementwise ops f32 (add, mul, exp, sqrt, neg)".into()
    }

    fn size(&self) -> String {
        count(self.n)
    }

    fn work(&self) -> Work {
        // Unfused: two binary ops (read 2, write 1) and three unary ops (read 1, write 1).
        Work::Bytes((2.0 * 12.0 + 3.0 * 8.0) * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let a = uniform::<B, 1>([self.n], 1, device);
        let b = uniform::<B, 1>([self.n], 2, device);
        let c = uniform::<B, 1>([self.n], 3, device);
        Some(Box::new(move || ((a.clone() + b.clone()) * c.clone()).exp().sqrt().neg()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}

impl Case for Chain5Fused {
    fn name(&self) -> String {
        "5 elementwise ops f32, fused (ours)".into()
    }

    fn size(&self) -> String {
        count(self.n)
    }

    fn work(&self) -> Work {
        Work::Bytes(16.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let ops = vec![
            FusedOp::Binary(BinaryFloatOp::Add, 0, 1),
            FusedOp::Binary(BinaryFloatOp::Mul, 3, 2),
            FusedOp::Unary(UnaryFloatOp::Exp, 4),
            FusedOp::Unary(UnaryFloatOp::Sqrt, 5),
            FusedOp::Unary(UnaryFloatOp::Neg, 6),
        ];
        fused_run::<B>(self.n, 3, ops, device)
    }
}

impl Case for AddFused {
    fn name(&self) -> String {
        "add f32, fused kernel (ours)".into()
    }

    fn size(&self) -> String {
        count(self.n)
    }

    fn work(&self) -> Work {
        Work::Bytes(12.0 * self.n as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        fused_run::<B>(self.n, 2, vec![FusedOp::Binary(BinaryFloatOp::Add, 0, 1)], device)
    }
}

/// The run of `ops` over `inputs` uniform inputs of `n` elements (seeds 1, 2, ...) through
/// `ExCubeclBackend::float_fused`, giving its last register; `None` unless `B` is ours.
fn fused_run<B: Backend>(n: usize, inputs: usize, ops: Vec<FusedOp>, device: &B::Device) -> Option<RunFn<B>> {
    let ours = |t: Tensor<B, 1>| downcast::<CubeTensor<Runtime>, _>(t.into_primitive().tensor());
    let tensors: Vec<CubeTensor<Runtime>> = (1..=inputs as u64).map(|seed| ours(uniform::<B, 1>([n], seed, device))).collect::<Option<_>>()?;
    let shape = burn_backend::Shape::from(vec![n]);
    let last = inputs + ops.len() - 1;
    Some(Box::new(move || {
        let out = ExCubeclBackend::<Runtime>::float_fused(tensors.clone(), shape.clone(), ops.clone(), vec![last]).remove(0);
        Tensor::<B, 1>::from_primitive(TensorPrimitive::Float(downcast(out).expect("ours")))
    }))
}

impl Case for TinyAdd {
    fn name(&self) -> String {
        "tiny add f32 + sync (latency)".into()
    }

    fn size(&self) -> String {
        "16".into()
    }

    fn work(&self) -> Work {
        Work::Bytes(12.0 * 16.0)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let a = uniform::<B, 1>([16], 1, device);
        let b = uniform::<B, 1>([16], 2, device);
        Some(Box::new(move || a.clone() + b.clone()))
    }

    fn on_cpu(&self) -> bool {
        true
    }
}
