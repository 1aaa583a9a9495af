//! Burn tensors on [`ExCubeclBackend`] to and from the [`CubeTensor`] primitive that
//! pipelines and command queues take.
use burn_backend::tensor::{Bool, Float, Int};
use burn_backend::{DeviceOps, TensorMetadata, TensorPrimitive};
use burn_tensor::{BasicOps, Tensor};
use cubecl::Runtime;

use crate::backend::ExCubeclBackend;
use crate::tensor::CubeTensor;

/// Burn tensor kinds whose tensors on [`ExCubeclBackend`] convert to and from the
/// [`CubeTensor`] primitive that pipelines and command queues take: `Float`, `Int` and
/// `Bool`.
pub trait CubeKind<R: Runtime>: BasicOps<ExCubeclBackend<R>>
where
    R::Device: DeviceOps,
{
    /// The primitive of a tensor of this kind.
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R>;
    /// A tensor of this kind over `tensor`.
    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive;
}

impl<R: Runtime> CubeKind<R> for Float
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        match primitive {
            TensorPrimitive::Float(t) => t,
            TensorPrimitive::QFloat(q) => panic!(
                "ex_cubecl: pipeline: quantized tensor of shape {:?} ({:?}) cannot be a pipeline input or output; dequantize it first",
                q.shape().to_vec(),
                q.dtype()
            ),
        }
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        TensorPrimitive::Float(tensor)
    }
}

impl<R: Runtime> CubeKind<R> for Int
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        primitive
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        tensor
    }
}

impl<R: Runtime> CubeKind<R> for Bool
where
    R::Device: DeviceOps,
{
    fn into_cube(primitive: Self::Primitive) -> CubeTensor<R> {
        primitive
    }

    fn from_cube(tensor: CubeTensor<R>) -> Self::Primitive {
        tensor
    }
}

/// The primitive of a Burn tensor on [`ExCubeclBackend`] (a cheap handle move).
///
/// # Panics
/// For quantized float tensors.
pub fn to_cube<R: Runtime, const D: usize, K: CubeKind<R>>(tensor: Tensor<ExCubeclBackend<R>, D, K>) -> CubeTensor<R>
where
    R::Device: DeviceOps,
{
    K::into_cube(tensor.into_primitive())
}

/// A Burn tensor of rank `D` and kind `K` over `tensor`.
///
/// # Panics
/// When `tensor`'s rank is not `D`.
pub fn from_cube<R: Runtime, const D: usize, K: CubeKind<R>>(tensor: CubeTensor<R>) -> Tensor<ExCubeclBackend<R>, D, K>
where
    R::Device: DeviceOps,
{
    if tensor.layout.rank() != D {
        panic!(
            "ex_cubecl: from_cube: tensor of shape {:?} ({:?}) has rank {}, not {D}",
            tensor.dims(),
            tensor.dtype,
            tensor.layout.rank()
        );
    }
    Tensor::from_primitive(K::from_cube(tensor))
}
