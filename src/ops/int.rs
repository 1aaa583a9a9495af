use burn_backend::ops::IntTensorOps;
use burn_backend::tensor::{IndexingUpdateOp, BoolTensor, Device, FloatTensor};
use burn_backend::{BoolDType, DType, DeviceOps, Distribution, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};
use cubecl::Runtime;
use ex_cubecl_kernels::binary::BinaryIntOp as B;
use ex_cubecl_kernels::compare::CompareOp as C;
use ex_cubecl_kernels::cumulative::ScanOp;
use ex_cubecl_kernels::index::ScatterOp;
use ex_cubecl_kernels::reduce::ReduceOp;
use ex_cubecl_kernels::unary::UnaryIntOp as U;

use super::NO_SCALAR;
use crate::launch::elementwise::{Rhs, binary_int_op, compare, unary_int_op};
use crate::launch::{copy, cumulative, data, index, index_nd, mask, matmul, random, reduce, sort, view};
use crate::ExCubeclBackend;

type T<R> = crate::tensor::CubeTensor<R>;

fn binary<R: Runtime>(lhs: T<R>, rhs: T<R>, op: B) -> T<R> {
    binary_int_op(lhs, Rhs::Tensor(rhs), op)
}

fn scalar<R: Runtime>(lhs: T<R>, rhs: Scalar, op: B) -> T<R> {
    binary_int_op(lhs, Rhs::Scalar(rhs), op)
}

fn reduce_all<R: Runtime>(t: T<R>, op: ReduceOp) -> T<R> {
    let dtype = t.dtype;
    reduce::reduce_all(t, op, dtype)
}

fn reduce_dim<R: Runtime>(t: T<R>, dim: usize, op: ReduceOp) -> T<R> {
    let dtype = t.dtype;
    reduce::reduce_dim(t, dim, op, dtype)
}

impl<R: Runtime> IntTensorOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn int_empty(shape: Shape, device: &Device<Self>, dtype: IntDType) -> T<R> {
        T::<R>::empty(&crate::runtime::DeviceContext::client::<R>(device), device, shape, dtype.into())
    }

    fn int_into_data(tensor: T<R>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        data::into_data(tensor)
    }

    fn int_from_data(data: TensorData, device: &Device<Self>) -> T<R> {
        let dtype = if data.dtype.is_int() || data.dtype.is_uint() { data.dtype } else { DType::I32 };
        data::from_data(data, device, dtype)
    }

    fn int_device(tensor: &T<R>) -> Device<Self> {
        tensor.device.clone()
    }

    fn int_to_device(tensor: T<R>, device: &Device<Self>) -> T<R> {
        super::to_device(tensor, device)
    }

    fn int_reshape(tensor: T<R>, shape: Shape) -> T<R> {
        view::reshape(tensor, shape)
    }

    fn int_slice(tensor: T<R>, slices: &[Slice]) -> T<R> {
        view::slice(tensor, slices)
    }

    fn int_slice_assign(tensor: T<R>, slices: &[Slice], value: T<R>) -> T<R> {
        index::slice_assign("int_slice_assign", tensor, slices, value)
    }

    fn int_into_float(tensor: T<R>, out_dtype: FloatDType) -> FloatTensor<Self> {
        copy::cast(tensor, out_dtype.into())
    }

    fn int_mask_where(tensor: T<R>, mask: BoolTensor<Self>, value: T<R>) -> T<R> {
        mask::mask_where("int_mask_where", tensor, mask, Rhs::Tensor(value))
    }

    fn int_mask_fill(tensor: T<R>, mask: BoolTensor<Self>, value: Scalar) -> T<R> {
        mask::mask_fill("int_mask_fill", tensor, mask, value)
    }

    fn int_gather(dim: usize, tensor: T<R>, indices: T<R>) -> T<R> {
        index::gather("int_gather", dim, tensor, indices)
    }

    fn int_scatter_add(dim: usize, tensor: T<R>, indices: T<R>, value: T<R>) -> T<R> {
        index::scatter("int_scatter_add", dim, tensor, indices, value, ScatterOp::Add)
    }

    fn int_gather_nd(data: T<R>, indices: T<R>) -> T<R> {
        index_nd::gather_nd("int_gather_nd", data, indices)
    }

    fn int_scatter_nd(data: T<R>, indices: T<R>, values: T<R>, reduction: IndexingUpdateOp) -> T<R> {
        index_nd::scatter_nd("int_scatter_nd", data, indices, values, reduction)
    }

    fn int_select(tensor: T<R>, dim: usize, indices: T<R>) -> T<R> {
        index::select("int_select", tensor, dim, indices)
    }

    fn int_select_add(tensor: T<R>, dim: usize, indices: T<R>, value: T<R>) -> T<R> {
        index::select_scatter("int_select_add", tensor, dim, indices, value, ScatterOp::Add)
    }

    fn int_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Equal, out_dtype)
    }

    fn int_not_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::NotEqual, out_dtype)
    }

    fn int_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Equal, out_dtype)
    }

    fn int_not_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::NotEqual, out_dtype)
    }

    fn int_greater(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Greater, out_dtype)
    }

    fn int_greater_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Greater, out_dtype)
    }

    fn int_greater_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::GreaterEqual, out_dtype)
    }

    fn int_greater_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::GreaterEqual, out_dtype)
    }

    fn int_lower(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Lower, out_dtype)
    }

    fn int_lower_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Lower, out_dtype)
    }

    fn int_lower_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::LowerEqual, out_dtype)
    }

    fn int_lower_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::LowerEqual, out_dtype)
    }

    fn int_add(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Add)
    }

    fn int_add_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Add)
    }

    fn int_sub(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Sub)
    }

    fn int_sub_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Sub)
    }

    fn int_mul(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Mul)
    }

    fn int_mul_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Mul)
    }

    fn int_div(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Div)
    }

    fn int_div_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Div)
    }

    fn int_remainder(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Rem)
    }

    fn int_remainder_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Rem)
    }

    fn int_matmul(lhs: T<R>, rhs: T<R>) -> T<R> {
        matmul::matmul("int_matmul", lhs, rhs)
    }

    fn int_neg(tensor: T<R>) -> T<R> {
        unary_int_op(tensor, U::Neg, NO_SCALAR, NO_SCALAR)
    }

    fn int_zeros(shape: Shape, device: &Device<Self>, dtype: IntDType) -> T<R> {
        copy::full(device, shape, Scalar::Int(0), dtype.into())
    }

    fn int_ones(shape: Shape, device: &Device<Self>, dtype: IntDType) -> T<R> {
        copy::full(device, shape, Scalar::Int(1), dtype.into())
    }

    fn int_full(shape: Shape, fill_value: Scalar, device: &Device<Self>, dtype: IntDType) -> T<R> {
        copy::full(device, shape, fill_value, dtype.into())
    }

    fn int_clamp_min(tensor: T<R>, min: Scalar) -> T<R> {
        unary_int_op(tensor, U::ClampMin, min, NO_SCALAR)
    }

    fn int_clamp_max(tensor: T<R>, max: Scalar) -> T<R> {
        unary_int_op(tensor, U::ClampMax, max, NO_SCALAR)
    }

    fn int_clamp(tensor: T<R>, min: Scalar, max: Scalar) -> T<R> {
        unary_int_op(tensor, U::Clamp, min, max)
    }

    fn int_sum(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::Sum)
    }

    fn int_sum_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::Sum)
    }

    fn int_prod(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::Prod)
    }

    fn int_prod_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::Prod)
    }

    fn int_mean(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::Mean)
    }

    fn int_mean_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::Mean)
    }

    fn int_max(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::Max)
    }

    fn int_max_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::Max)
    }

    fn int_min(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::Min)
    }

    fn int_min_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::Min)
    }

    fn int_max_abs(tensor: T<R>) -> T<R> {
        reduce_all(tensor, ReduceOp::MaxAbs)
    }

    fn int_max_abs_dim(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::MaxAbs)
    }

    fn int_any(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_all(tensor, ReduceOp::Any, DType::Bool(out_dtype))
    }

    fn int_any_dim(tensor: T<R>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::Any, DType::Bool(out_dtype))
    }

    fn int_all(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_all(tensor, ReduceOp::All, DType::Bool(out_dtype))
    }

    fn int_all_dim(tensor: T<R>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::All, DType::Bool(out_dtype))
    }

    fn int_cumsum(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Sum)
    }

    fn int_cumprod(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Prod)
    }

    fn int_cummin(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Min)
    }

    fn int_cummax(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Max)
    }

    fn int_argmax(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::ArgMax)
    }

    fn int_max_dim_with_indices(tensor: T<R>, dim: usize) -> (T<R>, T<R>) {
        let dtype = tensor.dtype;
        reduce::reduce_dim_with_indices(tensor, dim, ReduceOp::ArgMax, dtype)
    }

    fn int_min_dim_with_indices(tensor: T<R>, dim: usize) -> (T<R>, T<R>) {
        let dtype = tensor.dtype;
        reduce::reduce_dim_with_indices(tensor, dim, ReduceOp::ArgMin, dtype)
    }

    fn int_argmin(tensor: T<R>, dim: usize) -> T<R> {
        reduce_dim(tensor, dim, ReduceOp::ArgMin)
    }

    fn int_argtopk(tensor: T<R>, dim: usize, k: usize) -> T<R> {
        let dtype = tensor.dtype;
        super::argtopk(tensor, dim, k, dtype)
    }

    fn int_topk(tensor: T<R>, dim: usize, k: usize) -> T<R> {
        let (values, _) = sort::sort(tensor, dim, true, DType::U32);
        super::first_k(values, dim, k)
    }

    fn int_sort(tensor: T<R>, dim: usize, descending: bool) -> T<R> {
        sort::sort(tensor, dim, descending, DType::U32).0
    }

    fn int_sort_with_indices(tensor: T<R>, dim: usize, descending: bool) -> (T<R>, T<R>) {
        let dtype = tensor.dtype;
        sort::sort(tensor, dim, descending, dtype)
    }

    fn int_argsort(tensor: T<R>, dim: usize, descending: bool) -> T<R> {
        let dtype = tensor.dtype;
        sort::sort(tensor, dim, descending, dtype).1
    }

    fn int_abs(tensor: T<R>) -> T<R> {
        unary_int_op(tensor, U::Abs, NO_SCALAR, NO_SCALAR)
    }

    fn int_sign(tensor: T<R>) -> T<R> {
        unary_int_op(tensor, U::Sign, NO_SCALAR, NO_SCALAR)
    }

    fn int_swap_dims(tensor: T<R>, dim1: usize, dim2: usize) -> T<R> {
        view::swap_dims(tensor, dim1, dim2)
    }

    fn int_permute(tensor: T<R>, axes: &[usize]) -> T<R> {
        view::permute(tensor, axes)
    }

    fn int_flip(tensor: T<R>, axes: &[usize]) -> T<R> {
        copy::flip(tensor, axes)
    }

    fn int_random(shape: Shape, distribution: Distribution, device: &Device<Self>, dtype: IntDType) -> T<R> {
        random::random(shape, distribution, device, dtype.into())
    }

    fn int_expand(tensor: T<R>, shape: Shape) -> T<R> {
        view::expand(tensor, shape)
    }

    fn int_cat(tensors: Vec<T<R>>, dim: usize) -> T<R> {
        super::cat(tensors, dim)
    }

    fn bitwise_and(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::BitAnd)
    }

    fn bitwise_and_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::BitAnd)
    }

    fn bitwise_or(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::BitOr)
    }

    fn bitwise_or_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::BitOr)
    }

    fn bitwise_xor(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::BitXor)
    }

    fn bitwise_xor_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::BitXor)
    }

    fn bitwise_not(tensor: T<R>) -> T<R> {
        unary_int_op(tensor, U::BitNot, NO_SCALAR, NO_SCALAR)
    }

    fn bitwise_left_shift(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Shl)
    }

    fn bitwise_left_shift_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Shl)
    }

    fn bitwise_right_shift(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Shr)
    }

    fn bitwise_right_shift_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Shr)
    }

    fn int_cast(tensor: T<R>, dtype: IntDType) -> T<R> {
        copy::cast(tensor, dtype.into())
    }

    fn int_unfold(tensor: T<R>, dim: usize, size: usize, step: usize) -> T<R> {
        view::unfold(tensor, dim, size, step)
    }
}
