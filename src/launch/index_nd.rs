//! Multi-dimensional gather and scatter (`gather_nd`, `scatter_nd`); see
//! `ex_cubecl_kernels::index_nd` for the algorithm.
use burn_backend::{DType, Scalar, Shape};
use burn_backend::tensor::IndexingUpdateOp;
use cubecl::Runtime;
use ex_cubecl_kernels::index_nd::{ScatterNdOp, gather_nd as gather_nd_kernel, scatter_nd_apply, scatter_nd_rows};

use super::check_same_dtype;
use super::copy::{copy_as, full, into_contiguous};
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// Checks the indices of an nd op against `data` and returns k, the number of tuples and the
/// slice length.
fn check<R: Runtime>(op: &str, data: &CubeTensor<R>, indices: &CubeTensor<R>) -> (usize, usize, usize) {
    let (d, i) = (data.dims(), indices.dims());
    if !(indices.dtype.is_int() || indices.dtype.is_uint()) {
        panic!("ex_cubecl: {op}: indices must be an int tensor, got {:?} with shape {i:?}", indices.dtype);
    }
    let k = i.last().copied().unwrap_or(0);
    if i.is_empty() || k == 0 || k > d.len() {
        panic!(
            "ex_cubecl: {op}: the last dimension of indices {i:?} must hold 1 to {} coordinates into data of shape {d:?}",
            d.len()
        );
    }
    let tuples = i[..i.len() - 1].iter().product();
    (k, tuples, d[k..].iter().product())
}

/// `out[n.., s..] = data[indices[n..], s..]`: shape `indices.shape[..-1] ++ data.shape[k..]`.
/// Out-of-range coordinates read 0.
pub fn gather_nd<R: Runtime>(op: &str, data: CubeTensor<R>, indices: CubeTensor<R>) -> CubeTensor<R> {
    let (k, _, slice) = check(op, &data, &indices);
    let i = indices.dims();
    let mut shape = i[..i.len() - 1].to_vec();
    shape.extend_from_slice(&data.dims()[k..]);
    let out = CubeTensor::empty(&data.client, &data.device, Shape::from(shape), data.dtype);
    let (data, indices) = (into_contiguous(data), into_contiguous(indices));
    let dtypes = [data.storage(), indices.storage()];
    let client = data.client.clone();
    let o = out.clone();
    launch(&client, op, Geometry::Units(out.num_elements()), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < len` and checks every coordinate against `data`.
        unsafe {
            gather_nd_kernel::launch_unchecked::<R>(
                client, count, cube_dim, data.as_arg(), indices.as_arg(), o.as_arg(), k, slice, dtypes,
            )
        }
    });
    out
}

/// A copy of `data` with `values[n.., s..]` combined into `data[indices[n..], s..]` in index
/// order. `values` has shape `indices.shape[..-1] ++ data.shape[k..]`; out-of-range
/// coordinates write nothing.
pub fn scatter_nd<R: Runtime>(
    op: &str,
    data: CubeTensor<R>,
    indices: CubeTensor<R>,
    values: CubeTensor<R>,
    update: IndexingUpdateOp,
) -> CubeTensor<R> {
    let (k, tuples, slice) = check(op, &data, &indices);
    check_same_dtype(op, &data, &values);
    if data.bf16_bits() {
        return super::bf16::map2(op, data, values, |d, v| scatter_nd(op, d, indices, v, update));
    }
    let i = indices.dims();
    let mut expected = i[..i.len() - 1].to_vec();
    expected.extend_from_slice(&data.dims()[k..]);
    if values.dims() != expected.as_slice() {
        panic!(
            "ex_cubecl: {op}: values of shape {:?} don't fit data {:?} and indices {i:?} (expected {expected:?})",
            values.dims(),
            data.dims()
        );
    }
    let combine = match update {
        IndexingUpdateOp::Assign => ScatterNdOp::Assign,
        IndexingUpdateOp::Add => ScatterNdOp::Add,
        IndexingUpdateOp::Mul => ScatterNdOp::Mul,
        IndexingUpdateOp::Min => ScatterNdOp::Min,
        IndexingUpdateOp::Max => ScatterNdOp::Max,
    };
    let out = copy_as(&data, data.dtype, 0);
    let rows_total: usize = data.dims()[..k].iter().product();
    if tuples == 0 || slice == 0 || rows_total == 0 {
        return out;
    }
    let (client, device) = (data.client.clone(), data.device.clone());
    let rows = CubeTensor::empty(&client, &device, Shape::from(vec![tuples]), DType::U32);
    let owner = full::<R>(&device, Shape::from(vec![rows_total]), Scalar::UInt(u32::MAX as u64), DType::U32);
    let (indices, values) = (into_contiguous(indices), into_contiguous(values));
    let dtypes = [data.storage(), indices.storage()];
    let (r, w) = (rows.clone(), owner.clone());
    launch(&client, op, Geometry::Units(tuples), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `n < tuples`; rows past the data are never written.
        unsafe {
            scatter_nd_rows::launch_unchecked::<R>(
                client, count, cube_dim, data.as_arg(), indices.as_arg(), r.as_arg(), w.as_arg(), k, dtypes,
            )
        }
    });
    let o = out.clone();
    launch(&client, op, Geometry::Units(tuples * slice), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < tuples * slice`; valid rows lie inside `out`.
        unsafe {
            scatter_nd_apply::launch_unchecked::<R>(
                client, count, cube_dim, rows.as_arg(), owner.as_arg(), values.as_arg(), o.as_arg(), slice,
                combine, values.storage(),
            )
        }
    });
    out
}
