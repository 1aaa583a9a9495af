use burn_backend::ops::FloatTensorOps;
use burn_backend::tensor::{IndexingUpdateOp, BoolTensor, Device, IntTensor};
use burn_backend::{BoolDType, DType, DeviceOps, Distribution, ExecutionError, FloatDType, IntDType, Scalar, Shape, Slice, TensorData};
use cubecl::Runtime;
use ex_cubecl_kernels::binary::BinaryFloatOp as B;
use ex_cubecl_kernels::compare::{CompareOp as C, PredicateOp};
use ex_cubecl_kernels::cumulative::ScanOp;
use ex_cubecl_kernels::reduce::ReduceOp;
use ex_cubecl_kernels::unary::UnaryFloatOp as U;

use crate::launch::elementwise::{Rhs, binary_float_op, compare, predicate, unary_float_op};
use crate::launch::{copy, cumulative, data, index, index_nd, mask, matmul, random, reduce, sort, view};
use crate::ExCubeclBackend;

type T<R> = crate::tensor::CubeTensor<R>;

fn unary<R: Runtime>(t: T<R>, op: U) -> T<R> {
    unary_float_op(t, op, 0.0, 0.0)
}

fn binary<R: Runtime>(lhs: T<R>, rhs: T<R>, op: B) -> T<R> {
    binary_float_op(lhs, Rhs::Tensor(rhs), op)
}

fn scalar<R: Runtime>(lhs: T<R>, rhs: Scalar, op: B) -> T<R> {
    binary_float_op(lhs, Rhs::Scalar(rhs), op)
}

fn f(s: Scalar) -> f64 {
    s.elem::<f64>()
}

impl<R: Runtime> FloatTensorOps<Self> for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    fn float_from_data(data: TensorData, device: &Device<Self>) -> T<R> {
        let dtype = if data.dtype.is_float() { data.dtype } else { DType::F32 };
        data::from_data(data, device, dtype)
    }

    fn float_random(shape: Shape, distribution: Distribution, device: &Device<Self>, dtype: FloatDType) -> T<R> {
        random::random(shape, distribution, device, dtype.into())
    }

    fn float_into_data(tensor: T<R>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
        data::into_data(tensor)
    }

    fn float_device(tensor: &T<R>) -> Device<Self> {
        tensor.device.clone()
    }

    fn float_to_device(tensor: T<R>, device: &Device<Self>) -> T<R> {
        super::to_device(tensor, device)
    }

    fn float_into_int(tensor: T<R>, out_dtype: IntDType) -> IntTensor<Self> {
        copy::cast(tensor, out_dtype.into())
    }

    fn float_empty(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> T<R> {
        T::<R>::empty(&crate::runtime::DeviceContext::client::<R>(device), device, shape, dtype.into())
    }

    fn float_zeros(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> T<R> {
        copy::full(device, shape, Scalar::Float(0.0), dtype.into())
    }

    fn float_ones(shape: Shape, device: &Device<Self>, dtype: FloatDType) -> T<R> {
        copy::full(device, shape, Scalar::Float(1.0), dtype.into())
    }

    fn float_full(shape: Shape, fill_value: Scalar, device: &Device<Self>, dtype: FloatDType) -> T<R> {
        copy::full(device, shape, fill_value, dtype.into())
    }

    fn float_add(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Add)
    }

    fn float_add_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Add)
    }

    fn float_clamp_min(tensor: T<R>, min: Scalar) -> T<R> {
        unary_float_op(tensor, U::ClampMin, f(min), 0.0)
    }

    fn float_clamp_max(tensor: T<R>, max: Scalar) -> T<R> {
        unary_float_op(tensor, U::ClampMax, f(max), 0.0)
    }

    fn float_clamp(tensor: T<R>, min: Scalar, max: Scalar) -> T<R> {
        unary_float_op(tensor, U::Clamp, f(min), f(max))
    }

    fn float_sub(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Sub)
    }

    fn float_sub_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Sub)
    }

    fn float_mul(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Mul)
    }

    fn float_mul_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Mul)
    }

    fn float_div(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Div)
    }

    fn float_div_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Div)
    }

    fn float_remainder(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Rem)
    }

    fn float_remainder_scalar(lhs: T<R>, rhs: Scalar) -> T<R> {
        scalar(lhs, rhs, B::Rem)
    }

    fn float_matmul(lhs: T<R>, rhs: T<R>) -> T<R> {
        matmul::matmul("float_matmul", lhs, rhs)
    }

    fn float_cross(lhs: T<R>, rhs: T<R>, dim: usize) -> T<R> {
        super::cross(lhs, rhs, dim)
    }

    fn float_neg(tensor: T<R>) -> T<R> {
        unary(tensor, U::Neg)
    }

    fn float_recip(tensor: T<R>) -> T<R> {
        unary(tensor, U::Recip)
    }

    fn float_swap_dims(tensor: T<R>, dim1: usize, dim2: usize) -> T<R> {
        view::swap_dims(tensor, dim1, dim2)
    }

    fn float_permute(tensor: T<R>, axes: &[usize]) -> T<R> {
        view::permute(tensor, axes)
    }

    fn float_flip(tensor: T<R>, axes: &[usize]) -> T<R> {
        copy::flip(tensor, axes)
    }

    fn float_reshape(tensor: T<R>, shape: Shape) -> T<R> {
        view::reshape(tensor, shape)
    }

    fn float_gather(dim: usize, tensor: T<R>, indices: IntTensor<Self>) -> T<R> {
        index::gather("float_gather", dim, tensor, indices)
    }

    fn float_scatter_add(dim: usize, tensor: T<R>, indices: IntTensor<Self>, value: T<R>) -> T<R> {
        index::scatter("float_scatter_add", dim, tensor, indices, value, ex_cubecl_kernels::index::ScatterOp::Add)
    }

    fn float_gather_nd(data: T<R>, indices: IntTensor<Self>) -> T<R> {
        index_nd::gather_nd("float_gather_nd", data, indices)
    }

    fn float_scatter_nd(data: T<R>, indices: IntTensor<Self>, values: T<R>, reduction: IndexingUpdateOp) -> T<R> {
        index_nd::scatter_nd("float_scatter_nd", data, indices, values, reduction)
    }

    fn float_select(tensor: T<R>, dim: usize, indices: IntTensor<Self>) -> T<R> {
        index::select("float_select", tensor, dim, indices)
    }

    fn float_select_add(tensor: T<R>, dim: usize, indices: IntTensor<Self>, value: T<R>) -> T<R> {
        index::select_scatter("float_select_add", tensor, dim, indices, value, ex_cubecl_kernels::index::ScatterOp::Add)
    }

    fn float_slice(tensor: T<R>, slices: &[Slice]) -> T<R> {
        view::slice(tensor, slices)
    }

    fn float_slice_assign(tensor: T<R>, slices: &[Slice], value: T<R>) -> T<R> {
        index::slice_assign("float_slice_assign", tensor, slices, value)
    }

    fn float_mask_where(tensor: T<R>, mask: BoolTensor<Self>, value: T<R>) -> T<R> {
        mask::mask_where("float_mask_where", tensor, mask, Rhs::Tensor(value))
    }

    fn float_mask_fill(tensor: T<R>, mask: BoolTensor<Self>, value: Scalar) -> T<R> {
        mask::mask_fill("float_mask_fill", tensor, mask, value)
    }

    fn float_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Equal, out_dtype)
    }

    fn float_not_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::NotEqual, out_dtype)
    }

    fn float_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Equal, out_dtype)
    }

    fn float_not_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::NotEqual, out_dtype)
    }

    fn float_greater(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Greater, out_dtype)
    }

    fn float_greater_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Greater, out_dtype)
    }

    fn float_greater_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::GreaterEqual, out_dtype)
    }

    fn float_greater_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::GreaterEqual, out_dtype)
    }

    fn float_lower(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::Lower, out_dtype)
    }

    fn float_lower_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::Lower, out_dtype)
    }

    fn float_lower_equal(lhs: T<R>, rhs: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Tensor(rhs), C::LowerEqual, out_dtype)
    }

    fn float_lower_equal_elem(lhs: T<R>, rhs: Scalar, out_dtype: BoolDType) -> BoolTensor<Self> {
        compare(lhs, Rhs::Scalar(rhs), C::LowerEqual, out_dtype)
    }

    fn float_sum(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Sum, dtype)
    }

    fn float_sum_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Sum, dtype)
    }

    fn float_prod(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Prod, dtype)
    }

    fn float_prod_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Prod, dtype)
    }

    fn float_mean(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Mean, dtype)
    }

    fn float_mean_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Mean, dtype)
    }

    fn float_max(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Max, dtype)
    }

    fn float_max_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Max, dtype)
    }

    fn float_min(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::Min, dtype)
    }

    fn float_min_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::Min, dtype)
    }

    fn float_max_abs(tensor: T<R>) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_all(tensor, ReduceOp::MaxAbs, dtype)
    }

    fn float_max_abs_dim(tensor: T<R>, dim: usize) -> T<R> {
        let dtype = tensor.dtype;
        reduce::reduce_dim(tensor, dim, ReduceOp::MaxAbs, dtype)
    }

    fn float_any(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_all(tensor, ReduceOp::Any, DType::Bool(out_dtype))
    }

    fn float_any_dim(tensor: T<R>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::Any, DType::Bool(out_dtype))
    }

    fn float_all(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_all(tensor, ReduceOp::All, DType::Bool(out_dtype))
    }

    fn float_all_dim(tensor: T<R>, dim: usize, out_dtype: BoolDType) -> BoolTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::All, DType::Bool(out_dtype))
    }

    fn float_cumsum(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Sum)
    }

    fn float_cumprod(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Prod)
    }

    fn float_cummin(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Min)
    }

    fn float_cummax(tensor: T<R>, dim: usize) -> T<R> {
        cumulative::cumulative(tensor, dim, ScanOp::Max)
    }

    fn float_cast(tensor: T<R>, dtype: FloatDType) -> T<R> {
        copy::cast(tensor, dtype.into())
    }

    fn float_exp(tensor: T<R>) -> T<R> {
        unary(tensor, U::Exp)
    }

    fn float_log(tensor: T<R>) -> T<R> {
        unary(tensor, U::Log)
    }

    fn float_log1p(tensor: T<R>) -> T<R> {
        unary(tensor, U::Log1p)
    }

    fn float_powf(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Powf)
    }

    fn float_powf_scalar_impl(tensor: T<R>, value: Scalar) -> T<R> {
        unary_float_op(tensor, U::pow_scalar(f(value)), f(value), 0.0)
    }

    fn float_sqrt(tensor: T<R>) -> T<R> {
        unary(tensor, U::Sqrt)
    }

    fn float_abs(tensor: T<R>) -> T<R> {
        unary(tensor, U::Abs)
    }

    fn float_cos(tensor: T<R>) -> T<R> {
        unary(tensor, U::Cos)
    }

    fn float_sin(tensor: T<R>) -> T<R> {
        unary(tensor, U::Sin)
    }

    fn float_tan(tensor: T<R>) -> T<R> {
        unary(tensor, U::Tan)
    }

    fn float_cosh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Cosh)
    }

    fn float_sinh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Sinh)
    }

    fn float_tanh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Tanh)
    }

    fn float_acos(tensor: T<R>) -> T<R> {
        unary(tensor, U::Acos)
    }

    fn float_acosh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Acosh)
    }

    fn float_asin(tensor: T<R>) -> T<R> {
        unary(tensor, U::Asin)
    }

    fn float_asinh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Asinh)
    }

    fn float_atan(tensor: T<R>) -> T<R> {
        unary(tensor, U::Atan)
    }

    fn float_atanh(tensor: T<R>) -> T<R> {
        unary(tensor, U::Atanh)
    }

    fn float_atan2(lhs: T<R>, rhs: T<R>) -> T<R> {
        binary(lhs, rhs, B::Atan2)
    }

    fn float_round(tensor: T<R>) -> T<R> {
        unary(tensor, U::Round)
    }

    fn float_floor(tensor: T<R>) -> T<R> {
        unary(tensor, U::Floor)
    }

    fn float_ceil(tensor: T<R>) -> T<R> {
        unary(tensor, U::Ceil)
    }

    fn float_trunc(tensor: T<R>) -> T<R> {
        unary(tensor, U::Trunc)
    }

    fn float_erf(tensor: T<R>) -> T<R> {
        unary(tensor, U::Erf)
    }

    fn float_sign(tensor: T<R>) -> T<R> {
        unary(tensor, U::Sign)
    }

    fn float_cat(tensors: Vec<T<R>>, dim: usize) -> T<R> {
        super::cat(tensors, dim)
    }

    fn float_argmax(tensor: T<R>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::ArgMax, out_dtype.into())
    }

    fn float_max_dim_with_indices(tensor: T<R>, dim: usize, indices_dtype: IntDType) -> (T<R>, IntTensor<Self>) {
        reduce::reduce_dim_with_indices(tensor, dim, ReduceOp::ArgMax, indices_dtype.into())
    }

    fn float_min_dim_with_indices(tensor: T<R>, dim: usize, indices_dtype: IntDType) -> (T<R>, IntTensor<Self>) {
        reduce::reduce_dim_with_indices(tensor, dim, ReduceOp::ArgMin, indices_dtype.into())
    }

    fn float_argmin(tensor: T<R>, dim: usize, out_dtype: IntDType) -> IntTensor<Self> {
        reduce::reduce_dim(tensor, dim, ReduceOp::ArgMin, out_dtype.into())
    }

    fn float_argtopk(tensor: T<R>, dim: usize, k: usize, out_dtype: IntDType) -> IntTensor<Self> {
        super::argtopk(tensor, dim, k, out_dtype.into())
    }

    fn float_topk(tensor: T<R>, dim: usize, k: usize) -> T<R> {
        let (values, _) = sort::sort(tensor, dim, true, DType::U32);
        super::first_k(values, dim, k)
    }

    fn float_sort(tensor: T<R>, dim: usize, descending: bool) -> T<R> {
        sort::sort(tensor, dim, descending, DType::U32).0
    }

    fn float_sort_with_indices(tensor: T<R>, dim: usize, descending: bool, indices_dtype: IntDType) -> (T<R>, IntTensor<Self>) {
        sort::sort(tensor, dim, descending, indices_dtype.into())
    }

    fn float_argsort(tensor: T<R>, dim: usize, descending: bool, out_dtype: IntDType) -> IntTensor<Self> {
        sort::sort(tensor, dim, descending, out_dtype.into()).1
    }

    fn float_expand(tensor: T<R>, shape: Shape) -> T<R> {
        view::expand(tensor, shape)
    }

    fn float_unfold(tensor: T<R>, dim: usize, size: usize, step: usize) -> T<R> {
        view::unfold(tensor, dim, size, step)
    }

    fn float_is_nan(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        predicate(tensor, PredicateOp::IsNan, out_dtype)
    }

    fn float_is_inf(tensor: T<R>, out_dtype: BoolDType) -> BoolTensor<Self> {
        predicate(tensor, PredicateOp::IsInf, out_dtype)
    }
}
