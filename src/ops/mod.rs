//! Burn's ops traits, one file each, and `extension` for our ops beyond them. Every method is
//! a line or three that calls the launch layer; shared helpers live here.

mod activation;
mod bool;
mod extension;
mod float;
mod int;
mod module;
mod qtensor;
mod transaction;

use burn_backend::{DType, Scalar, Shape, Slice};
use cubecl::Runtime;
use cubecl::device::Device;

use crate::launch::{copy, data, elementwise, sort, view};
use crate::tensor::CubeTensor;

/// The tensor on `device`: unchanged when it is there already, copied device to device where
/// the runtime offers it (CUDA with NCCL), else read back and uploaded.
pub(crate) fn to_device<R: Runtime>(tensor: CubeTensor<R>, device: &R::Device) -> CubeTensor<R> {
    if tensor.device.to_id() == device.to_id() {
        return tensor;
    }
    if let Some(copied) = crate::runtime::device_to_device(&tensor, device) {
        return copied;
    }
    let dtype = tensor.dtype;
    let data = cubecl::future::block_on(data::into_data(tensor))
        .unwrap_or_else(|e| panic!("ex_cubecl: to_device: {e:?}"));
    data::from_data(data, device, dtype)
}

/// Indices of the `k` largest elements along `dim`, largest first (ties: lower index first).
pub(crate) fn argtopk<R: Runtime>(tensor: CubeTensor<R>, dim: usize, k: usize, dtype: DType) -> CubeTensor<R> {
    let (_, indices) = sort::sort(tensor, dim, true, dtype);
    first_k(indices, dim, k)
}

/// The first `k` entries along `dim`.
pub(crate) fn first_k<R: Runtime>(tensor: CubeTensor<R>, dim: usize, k: usize) -> CubeTensor<R> {
    let n = tensor.dims()[dim];
    if k > n {
        panic!("ex_cubecl: topk: k = {k} is larger than dimension {dim} of shape {:?}", tensor.dims());
    }
    let mut slices = vec![Slice::new(0, None, 1); tensor.layout.rank()];
    slices[dim] = Slice::new(0, Some(k as isize), 1);
    view::slice(tensor, &slices)
}

/// The cross product along `dim` (of size 3), composed from views and elementwise kernels.
pub(crate) fn cross<R: Runtime>(lhs: CubeTensor<R>, rhs: CubeTensor<R>, dim: usize) -> CubeTensor<R> {
    use ex_cubecl_kernels::binary::BinaryFloatOp::{Mul, Sub};
    if lhs.dims().get(dim) != Some(&3) || rhs.dims().get(dim) != Some(&3) {
        panic!(
            "ex_cubecl: cross: dimension {dim} must have size 3 in both {:?} and {:?} ({:?}, {:?})",
            lhs.dims(), rhs.dims(), lhs.dtype, rhs.dtype
        );
    }
    let part = |t: &CubeTensor<R>, i: usize| {
        let mut slices = vec![Slice::new(0, None, 1); t.layout.rank()];
        slices[dim] = Slice::new(i as isize, Some(i as isize + 1), 1);
        view::slice(t.clone(), &slices)
    };
    let term = |i: usize, j: usize| {
        let a = elementwise::binary_float_op(part(&lhs, i), elementwise::Rhs::Tensor(part(&rhs, j)), Mul);
        let b = elementwise::binary_float_op(part(&lhs, j), elementwise::Rhs::Tensor(part(&rhs, i)), Mul);
        elementwise::binary_float_op(a, elementwise::Rhs::Tensor(b), Sub)
    };
    let parts = [term(1, 2), term(2, 0), term(0, 1)];
    let mut shape = parts[0].dims().to_vec();
    shape[dim] = 3;
    let mut out = CubeTensor::empty(&lhs.client, &lhs.device, Shape::from(shape), lhs.dtype);
    for (i, p) in parts.into_iter().enumerate() {
        let mut slices = vec![Slice::new(0, None, 1); out.layout.rank()];
        slices[dim] = Slice::new(i as isize, Some(i as isize + 1), 1);
        out = crate::launch::index::slice_assign("cross", out, &slices, p);
    }
    out
}

/// Concatenation along `dim`: contiguous parts in one launch per few parts, others through
/// a copy into their region each.
pub(crate) fn cat<R: Runtime>(tensors: Vec<CubeTensor<R>>, dim: usize) -> CubeTensor<R> {
    let first = tensors.first().expect("ex_cubecl: cat: no tensors");
    let mut shape = first.dims().to_vec();
    if dim >= shape.len() {
        panic!("ex_cubecl: cat: dimension {dim} is out of range for shape {shape:?}");
    }
    shape[dim] = tensors.iter().map(|t| t.dims().get(dim).copied().unwrap_or(0)).sum();
    let out = CubeTensor::empty(&first.client, &first.device, Shape::from(shape), first.dtype);
    let mut regions = Vec::with_capacity(tensors.len());
    let mut start = 0;
    for t in &tensors {
        crate::launch::check_same_dtype("cat", first, t);
        let region = out.layout.narrow(dim, start, t.dims()[dim], 1);
        if region.shape != t.layout.shape {
            panic!("ex_cubecl: cat: shape {:?} doesn't match {:?} outside dim {dim}", t.dims(), first.dims());
        }
        start += t.dims()[dim];
        regions.push(region);
    }
    if !copy::cat_into(&tensors, &out, dim) {
        for (t, region) in tensors.iter().zip(&regions) {
            copy::copy_into(t, &t.layout, 0, &out, region);
        }
    }
    out
}

/// `Scalar::Int(0)`, for kernels whose scalar parameters an op leaves unused.
pub(crate) const NO_SCALAR: Scalar = Scalar::Int(0);
