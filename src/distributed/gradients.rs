//! The all-reduce of the gradients of replicated models: the step of data-parallel training
//! between each replica's backward pass and the optimizer.
use burn_backend::distributed::{DistributedBackend, ReduceOperation};
use burn_core::module::{AutodiffModule, ModuleVisitor, Param};
use burn_optim::GradientsParams;
use burn_tensor::Tensor;
use burn_tensor::backend::AutodiffBackend;

/// Replaces the gradients of every parameter of `module` in each of `grads` (one
/// `GradientsParams` per replica, each from that replica's backward pass, the replicas on
/// distinct devices) by their all-reduce across the replicas: with `Mean`, and every replica
/// computing the mean loss of an equal share of the batch, each replica then holds the
/// gradient of the whole batch, and the same optimizer step keeps the replicas identical.
///
/// `module` is any one replica (the replicas share their parameter ids, as `Module::fork`
/// and `Module::to_device` keep them). Parameters without a gradient on any replica are
/// left alone.
///
/// # Panics
/// When a parameter has a gradient on some replicas and not on others.
pub fn all_reduce_gradients<B, M>(module: &M, grads: &mut [GradientsParams], op: ReduceOperation)
where
    B: AutodiffBackend,
    B::InnerBackend: DistributedBackend,
    M: AutodiffModule<B>,
{
    if grads.len() <= 1 {
        return;
    }
    module.visit(&mut Reducer::<B> { grads, op, _backend: core::marker::PhantomData });
}

struct Reducer<'a, B> {
    grads: &'a mut [GradientsParams],
    op: ReduceOperation,
    _backend: core::marker::PhantomData<B>,
}

impl<B: AutodiffBackend> ModuleVisitor<B> for Reducer<'_, B>
where
    B::InnerBackend: DistributedBackend,
{
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<B, D>>) {
        let id = param.id;
        let found: Vec<Option<Tensor<B::InnerBackend, D>>> =
            self.grads.iter_mut().map(|g| g.remove::<B::InnerBackend, D>(id)).collect();
        let present = found.iter().filter(|g| g.is_some()).count();
        if present == 0 {
            return;
        }
        if present < found.len() {
            let missing: Vec<usize> = found.iter().enumerate().filter(|(_, g)| g.is_none()).map(|(i, _)| i).collect();
            panic!("ex_cubecl: all_reduce_gradients: parameter {id:?} has no gradient on replicas {missing:?} of {}", found.len());
        }
        let reduced = super::all_reduce(found.into_iter().flatten().collect(), self.op);
        for (grads, tensor) in self.grads.iter_mut().zip(reduced) {
            grads.register::<B::InnerBackend, D>(id, tensor);
        }
    }
}
