use burn_backend::ops::BoolTensorOps;
use burn_backend::tensor::{Device, FloatTensor, IntTensor};
use burn_backend::{BoolDType, DType, DeviceOps, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};
use cubecl::Runtime;
use ex_cubecl_kernels::binary::BinaryIntOp;
use ex_cubecl_kernels::compare::CompareOp;
use ex_cubecl_kernels::index::ScatterOp;
use ex_cubecl_kernels::reduce::ReduceOp;
use ex_cubecl_kernels::unary::UnaryIntOp;

use super::NO_SCALAR;
use crate::launch::elementwise::{Rhs, binary_int_op, compare, unary_int_op};
use crate::launch::{copy, data, index, mask, reduce, view};
use crate::ExCubeclBackend;

type T<R> = crate::tensor::CubeTensor<R>;

fn store<R: Runtime>(t: &T<R>) -> BoolDType {
    match t.dtype {
        DType::Bool(store) => store,
        other => panic!("ex_cubecl: expected a bool tensor, got {other:?} with shape {:?}", t.dims()),
    }
}

fn bool_scalar(value: Scalar) -> Scalar {
    Scalar::UInt(value.elem::<bool>() as u64)
}

impl<R: Runtime> BoolTensorOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn bool_empty(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> T<R> {
        T::<R>::empty(&crate::runtime::DeviceContext::client::<R>(device), device, shape, DType::Bool(dtype))
    }

    fn bool_zeros(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> T<R> {
        copy::full(device, shape, Scalar::UInt(0), DType::Bool(dtype))
    }

    fn bool_ones(shape: Shape, device: &Device<Self>, dtype: BoolDType) -> T<R> {
        copy::full(device, shape, Scalar::UInt(1), DType::Bool(dtype))
    }

    fn bool_into_data(tensor: T<R>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        data::into_data(tensor)
    }

    fn bool_from_data(data: TensorData, device: &Device<Self>) -> T<R> {
        let dtype = match data.dtype {
            DType::Bool(store) => DType::Bool(store),
            other => panic!("ex_cubecl: bool_from_data: expected bool data, got {other:?} with shape {:?}", data.shape),
        };
        data::from_data(data, device, dtype)
    }

    fn bool_into_int(tensor: T<R>, out_dtype: IntDType) -> IntTensor<Self> {
        copy::cast(tensor, out_dtype.into())
    }

    fn bool_into_float(tensor: T<R>, out_dtype: FloatDType) -> FloatTensor<Self> {
        copy::cast(tensor, out_dtype.into())
    }

    fn bool_device(tensor: &T<R>) -> Device<Self> {
        tensor.device.clone()
    }

    fn bool_to_device(tensor: T<R>, device: &Device<Self>) -> T<R> {
        super::to_device(tensor, device)
    }

    fn bool_reshape(tensor: T<R>, shape: Shape) -> T<R> {
        view::reshape(tensor, shape)
    }

    fn bool_slice(tensor: T<R>, slices: &[Slice]) -> T<R> {
        view::slice(tensor, slices)
    }

    fn bool_slice_assign(tensor: T<R>, slices: &[Slice], value: T<R>) -> T<R> {
        let value = copy::cast(value, tensor.dtype);
        index::slice_assign("bool_slice_assign", tensor, slices, value)
    }

    fn bool_mask_where(tensor: T<R>, mask: T<R>, value: T<R>) -> T<R> {
        let value = copy::cast(value, tensor.dtype);
        mask::mask_where("bool_mask_where", tensor, mask, Rhs::Tensor(value))
    }

    fn bool_mask_fill(tensor: T<R>, mask: T<R>, value: Scalar) -> T<R> {
        mask::mask_fill("bool_mask_fill", tensor, mask, bool_scalar(value))
    }

    fn bool_gather(dim: usize, tensor: T<R>, indices: IntTensor<Self>) -> T<R> {
        index::gather("bool_gather", dim, tensor, indices)
    }

    fn bool_scatter_or(dim: usize, tensor: T<R>, indices: IntTensor<Self>, value: T<R>) -> T<R> {
        let value = copy::cast(value, tensor.dtype);
        index::scatter("bool_scatter_or", dim, tensor, indices, value, ScatterOp::Or)
    }

    fn bool_select(tensor: T<R>, dim: usize, indices: IntTensor<Self>) -> T<R> {
        index::select("bool_select", tensor, dim, indices)
    }

    fn bool_select_or(tensor: T<R>, dim: usize, indices: IntTensor<Self>, value: T<R>) -> T<R> {
        let value = copy::cast(value, tensor.dtype);
        index::select_scatter("bool_select_or", tensor, dim, indices, value, ScatterOp::Or)
    }

    fn bool_equal(lhs: T<R>, rhs: T<R>) -> T<R> {
        let (out, rhs) = (store(&lhs), copy::cast(rhs, lhs.dtype));
        compare(lhs, Rhs::Tensor(rhs), CompareOp::Equal, out)
    }

    fn bool_not_equal(lhs: T<R>, rhs: T<R>) -> T<R> {
        let (out, rhs) = (store(&lhs), copy::cast(rhs, lhs.dtype));
        compare(lhs, Rhs::Tensor(rhs), CompareOp::NotEqual, out)
    }

    fn bool_equal_elem(lhs: T<R>, rhs: Scalar) -> T<R> {
        let out = store(&lhs);
        compare(lhs, Rhs::Scalar(bool_scalar(rhs)), CompareOp::Equal, out)
    }

    fn bool_not(tensor: T<R>) -> T<R> {
        unary_int_op(tensor, UnaryIntOp::LogicalNot, NO_SCALAR, NO_SCALAR)
    }

    fn bool_and(lhs: T<R>, rhs: T<R>) -> T<R> {
        let rhs = copy::cast(rhs, lhs.dtype);
        binary_int_op(lhs, Rhs::Tensor(rhs), BinaryIntOp::BitAnd)
    }

    fn bool_or(lhs: T<R>, rhs: T<R>) -> T<R> {
        let rhs = copy::cast(rhs, lhs.dtype);
        binary_int_op(lhs, Rhs::Tensor(rhs), BinaryIntOp::BitOr)
    }

    fn bool_xor(lhs: T<R>, rhs: T<R>) -> T<R> {
        let rhs = copy::cast(rhs, lhs.dtype);
        binary_int_op(lhs, Rhs::Tensor(rhs), BinaryIntOp::BitXor)
    }

    fn bool_any(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Any, dtype)
    }

    fn bool_any_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Any, dtype)
    }

    fn bool_all(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::All, dtype)
    }

    fn bool_all_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::All, dtype)
    }

    fn bool_swap_dims(tensor: T<R>, dim1: usize, dim2: usize) -> T<R> {
        view::swap_dims(tensor, dim1, dim2)
    }

    fn bool_permute(tensor: T<R>, axes: &[usize]) -> T<R> {
        view::permute(tensor, axes)
    }

    fn bool_flip(tensor: T<R>, axes: &[usize]) -> T<R> {
        copy::flip(tensor, axes)
    }

    fn bool_expand(tensor: T<R>, shape: Shape) -> T<R> {
        view::expand(tensor, shape)
    }

    fn bool_unfold(tensor: T<R>, dim: usize, size: usize, step: usize) -> T<R> {
        view::unfold(tensor, dim, size, step)
    }

    fn bool_cat(tensors: Vec<T<R>>, dim: usize) -> T<R> {
        let dtype = tensors.first().map(|t| t.dtype).unwrap_or(DType::Bool(burn_backend::BoolStore::U32));
        super::cat(tensors.into_iter().map(|t| copy::cast(t, dtype)).collect(), dim)
    }
}
