//! Tensors on the device, held by NIF resources.
//!
//! A resource holds one backend primitive of `Autodiff<ExCubeclBackend<R>>` (float, int, bool
//! or quantized; the rank is the primitive's own, so there is no type per rank) for one of the
//! compiled-in runtimes. `free/1` drops the primitive at once; the BEAM's garbage collector
//! drops it with the resource otherwise. A freed tensor is an error in every later call.
use std::sync::RwLock;

use burn_backend::{AutodiffBackend, Backend, DType, Shape, TensorMetadata};
use rustler::{Resource, ResourceArc};

use crate::device::Dev;
use crate::error::{NifError, NifResult};

/// Our backend with autodiff, on wgpu.
pub type AdWgpu = burn_autodiff::Autodiff<ex_cubecl::ExWgpu>;
/// Our backend with autodiff, on CUDA.
#[cfg(feature = "cuda")]
pub type AdCuda = burn_autodiff::Autodiff<ex_cubecl::ExCuda>;

/// A primitive of backend `B`.
pub enum Prim<B: Backend> {
    Float(B::FloatTensorPrimitive),
    Int(B::IntTensorPrimitive),
    Bool(B::BoolTensorPrimitive),
    Quant(B::QuantizedTensorPrimitive),
}

impl<B: Backend> Clone for Prim<B> {
    fn clone(&self) -> Self {
        match self {
            Prim::Float(t) => Prim::Float(t.clone()),
            Prim::Int(t) => Prim::Int(t.clone()),
            Prim::Bool(t) => Prim::Bool(t.clone()),
            Prim::Quant(t) => Prim::Quant(t.clone()),
        }
    }
}

impl<B: Backend> Prim<B> {
    pub fn shape(&self) -> Shape {
        match self {
            Prim::Float(t) => t.shape(),
            Prim::Int(t) => t.shape(),
            Prim::Bool(t) => t.shape(),
            Prim::Quant(t) => t.shape(),
        }
    }

    pub fn dtype(&self) -> DType {
        match self {
            Prim::Float(t) => t.dtype(),
            Prim::Int(t) => t.dtype(),
            Prim::Bool(t) => t.dtype(),
            Prim::Quant(t) => t.dtype(),
        }
    }

    pub fn device(&self) -> B::Device {
        match self {
            Prim::Float(t) => B::float_device(t),
            Prim::Int(t) => B::int_device(t),
            Prim::Bool(t) => B::bool_device(t),
            Prim::Quant(t) => B::q_device(t),
        }
    }

    /// `shape` and dtype, for error messages.
    pub fn describe(&self) -> String {
        format!(
            "{:?} {}",
            self.shape().as_slice(),
            crate::dtype::name(self.dtype())
        )
    }
}

/// Whether `p` is a float tensor on Burn's tape: one that requires gradients, or one computed
/// from such a tensor (`float_is_require_grad` says true for the first kind only).
pub fn is_tracked<B: Backend>(p: &Prim<burn_autodiff::Autodiff<B>>) -> bool {
    matches!(p, Prim::Float(t) if !t.node.requirement.is_none())
}

/// The inner backend's primitive of `p`.
pub fn to_inner<B: AutodiffBackend>(p: Prim<B>) -> Prim<B::InnerBackend> {
    match p {
        Prim::Float(t) => Prim::Float(B::inner(t)),
        Prim::Int(t) => Prim::Int(B::int_inner(t)),
        Prim::Bool(t) => Prim::Bool(B::bool_inner(t)),
        Prim::Quant(t) => Prim::Quant(B::q_inner(t)),
    }
}

/// `p` as an untracked primitive of the autodiff backend.
pub fn from_inner<B: AutodiffBackend>(p: Prim<B::InnerBackend>) -> Prim<B> {
    match p {
        Prim::Float(t) => Prim::Float(B::from_inner(t)),
        Prim::Int(t) => Prim::Int(B::int_from_inner(t)),
        Prim::Bool(t) => Prim::Bool(B::bool_from_inner(t)),
        Prim::Quant(t) => Prim::Quant(B::q_from_inner(t)),
    }
}

/// A primitive of any compiled-in runtime.
#[derive(Clone)]
pub enum AnyPrim {
    Wgpu(Prim<AdWgpu>),
    #[cfg(feature = "cuda")]
    Cuda(Prim<AdCuda>),
}

/// Runs `$body` with `$B` bound to the autodiff backend of `$any`'s runtime and `$p` to its
/// primitive.
#[macro_export]
macro_rules! on_prim {
    ($any:expr, |$B:ident, $p:ident| $body:expr) => {
        match $any {
            $crate::tensor::AnyPrim::Wgpu($p) => {
                #[allow(dead_code)]
                type $B = $crate::tensor::AdWgpu;
                $body
            }
            #[cfg(feature = "cuda")]
            $crate::tensor::AnyPrim::Cuda($p) => {
                #[allow(dead_code)]
                type $B = $crate::tensor::AdCuda;
                $body
            }
        }
    };
}

/// The primitives of runtime `$variant` in `$inputs`, or an error of `$op` naming the first
/// input on another runtime.
#[macro_export]
macro_rules! prims_of {
    ($inputs:expr, $variant:ident, $op:expr) => {
        $inputs
            .into_iter()
            .map(|p| match p {
                $crate::tensor::AnyPrim::$variant(p) => Ok(p),
                #[allow(unreachable_patterns)]
                other => Err($crate::error::NifError::new(
                    $op,
                    "the inputs are on different devices",
                    format!("{} on {}", other.describe(), other.device().spec()),
                )),
            })
            .collect::<$crate::error::NifResult<Vec<_>>>()
    };
}

impl AnyPrim {
    pub fn shape(&self) -> Shape {
        on_prim!(self, |B, p| p.shape())
    }

    pub fn dtype(&self) -> DType {
        on_prim!(self, |B, p| p.dtype())
    }

    pub fn device(&self) -> Dev {
        match self {
            AnyPrim::Wgpu(p) => Dev::Wgpu(p.device()),
            #[cfg(feature = "cuda")]
            AnyPrim::Cuda(p) => Dev::Cuda(p.device()),
        }
    }

    pub fn describe(&self) -> String {
        on_prim!(self, |B, p| p.describe())
    }
}

/// The NIF resource of a tensor.
pub struct TensorRes {
    value: RwLock<Option<AnyPrim>>,
}

#[rustler::resource_impl]
impl Resource for TensorRes {}

/// A tensor reference as the NIF takes and gives it.
pub type TensorRef = ResourceArc<TensorRes>;

/// A new resource holding `prim`.
pub fn wrap(prim: AnyPrim) -> TensorRef {
    ResourceArc::new(TensorRes {
        value: RwLock::new(Some(prim)),
    })
}

impl TensorRes {
    /// The primitive (a cheap handle clone), or an error of `op` when the tensor was freed.
    pub fn get(&self, op: &str) -> NifResult<AnyPrim> {
        let guard = self.value.read().unwrap_or_else(|e| e.into_inner());
        guard.clone().ok_or_else(|| {
            NifError::new(op, "the tensor was freed", "free/1 was called on it before")
        })
    }

    /// Replaces the primitive with `prim` (a later `get` gives it), as a write into this
    /// tensor; an error of `op` when the tensor was freed.
    pub fn set(&self, op: &str, prim: AnyPrim) -> NifResult<()> {
        let mut guard = self.value.write().unwrap_or_else(|e| e.into_inner());
        match guard.as_mut() {
            Some(value) => {
                *value = prim;
                Ok(())
            }
            None => Err(NifError::new(op, "the output tensor was freed", "free/1 was called on it before")),
        }
    }

    /// Drops the primitive; `false` when it was freed before.
    pub fn free(&self) -> bool {
        self.value
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .is_some()
    }
}
