//! Eager gradients on Burn's tape, for `ExBurn.Autodiff`: the NIF's tensors are primitives of
//! `Autodiff<ExCubeclBackend<R>>`, and every op that takes a tensor requiring gradients runs on
//! the autodiff backend (see `run` in lib.rs), which records it. `require_grad/1` makes such
//! a tensor; `backward/2` runs Burn's backward pass from a value and reads the gradients of
//! the given tensors.
use burn_backend::ops::FloatTensorOps;
use burn_backend::{AutodiffBackend, TensorMetadata};

use crate::error::{NifError, NifResult, guard};
use crate::tensor::{AnyPrim, Prim, TensorRef, wrap};

/// Runs `$body` with `$B` bound to the autodiff backend of the value's runtime, `$v` to its
/// primitive and `$ps` to the primitives of `$params` (of the same runtime), wrapping the
/// `(value, gradients)` it gives back into that runtime's variant.
macro_rules! on_runtime {
    ($value:expr, $params:expr, $op:expr, |$B:ident, $v:ident, $ps:ident| $body:expr) => {
        match $value {
            AnyPrim::Wgpu($v) => {
                type $B = crate::tensor::AdWgpu;
                let $ps = crate::prims_of!($params, Wgpu, $op)?;
                let (v, gs): (Prim<$B>, Vec<Prim<$B>>) = $body?;
                (AnyPrim::Wgpu(v), gs.into_iter().map(AnyPrim::Wgpu).collect::<Vec<_>>())
            }
            #[cfg(feature = "cuda")]
            AnyPrim::Cuda($v) => {
                type $B = crate::tensor::AdCuda;
                let $ps = crate::prims_of!($params, Cuda, $op)?;
                let (v, gs): (Prim<$B>, Vec<Prim<$B>>) = $body?;
                (AnyPrim::Cuda(v), gs.into_iter().map(AnyPrim::Cuda).collect::<Vec<_>>())
            }
        }
    };
}

/// A tensor of the same data that requires gradients (a leaf of the tape); `tensor` itself is
/// left as it is.
#[rustler::nif(schedule = "DirtyCpu")]
fn require_grad(tensor: TensorRef) -> NifResult<TensorRef> {
    let op = "require_grad";
    guard(op, || {
        let (tracked, _) = on_runtime!(tensor.get(op)?, Vec::<AnyPrim>::new(), op, |B, p, _ps| match p {
            Prim::Float(t) => Ok::<_, NifError>((Prim::Float(B::float_set_require_grad(B::from_inner(B::inner(t)), true)), Vec::new())),
            other => Err(NifError::new(op, "only float tensors can require gradients (cast it to a float type first)", other.describe())),
        });
        Ok(wrap(tracked))
    })
}

/// Runs the backward pass from `value` (the gradient of its sum, where it is not a scalar);
/// gives `value` detached from the tape and the gradient of each of `params` (zeros where
/// `value` doesn't depend on it).
#[rustler::nif(schedule = "DirtyCpu")]
fn backward(value: TensorRef, params: Vec<TensorRef>) -> NifResult<(TensorRef, Vec<TensorRef>)> {
    let op = "backward";
    guard(op, || {
        let params = params.iter().map(|p| p.get(op)).collect::<NifResult<Vec<_>>>()?;
        let (value, grads) = on_runtime!(value.get(op)?, params, op, |B, v, ps| backward_on::<B>(op, v, ps));
        Ok((wrap(value), grads.into_iter().map(wrap).collect()))
    })
}

fn backward_on<B: AutodiffBackend>(op: &str, value: Prim<B>, params: Vec<Prim<B>>) -> NifResult<(Prim<B>, Vec<Prim<B>>)> {
    let Prim::Float(value) = value else {
        return Err(NifError::new(op, "the function must give a float tensor", value.describe()));
    };
    let detached = B::from_inner(B::inner(value.clone()));
    let grads = B::backward(value);
    let grads = params
        .into_iter()
        .map(|p| match p {
            Prim::Float(t) => Ok(Prim::Float(B::grad(&t, &grads).map(B::from_inner).unwrap_or_else(|| {
                let device = B::float_device(&t);
                B::float_zeros(t.shape(), &device, t.dtype().into())
            }))),
            other => Err(NifError::new(op, "gradients are taken of float tensors made by require_grad", other.describe())),
        })
        .collect::<NifResult<Vec<_>>>()?;
    Ok((Prim::Float(detached), grads))
}
