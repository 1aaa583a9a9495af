//! Gather, select, scatter with accumulation, and slice assignment.
use burn_backend::{Shape, Slice};
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::index::{ScatterOp, gather as gather_kernel, gather_rows, index_select, scatter as scatter_kernel, scatter_line, scatter_plane, select_scatter as select_scatter_kernel};

use super::copy::{copy_as, copy_into};
use super::view::slice_view;
use super::{check_dim, check_same_dtype, cubes_on_cpu, divmods, usizes, widest_vector};
use crate::runtime::{Geometry, coalesce, launch};
use crate::tensor::CubeTensor;

fn check_indices<R: Runtime>(op: &str, indices: &CubeTensor<R>) {
    if !(indices.dtype.is_int() || indices.dtype.is_uint()) {
        panic!("ex_cubecl: {op}: indices must be an int tensor, got {:?} with shape {:?}", indices.dtype, indices.dims());
    }
}

/// Units per cube of the scatters with one cube or one plane per line.
const SCATTER_CUBE: usize = 256;

/// Shared memory `scatter_line` may stage a line in (its elements and a 4-byte bid each).
const SCATTER_STAGED_BYTES: usize = 32 * 1024;

/// `out[c] = tensor[c with c[dim] = indices[c]]`.
pub fn gather<R: Runtime>(op: &str, dim: usize, tensor: CubeTensor<R>, indices: CubeTensor<R>) -> CubeTensor<R> {
    check_dim(op, &tensor, dim);
    check_indices(op, &indices);
    let (t, i) = (tensor.dims(), indices.dims());
    if t.len() != i.len() || t.iter().zip(i).enumerate().any(|(d, (&a, &b))| d != dim && b > a) {
        panic!("ex_cubecl: {op}: indices of shape {i:?} don't fit tensor of shape {t:?} along dim {dim}");
    }
    let out = CubeTensor::empty(&tensor.client, &tensor.device, indices.layout.shape.clone(), tensor.dtype);
    if gather_by_rows(op, dim, &tensor, &indices, &out) {
        return out;
    }
    // The index supplies `dim`'s coordinate: the tensor steps by 0 along it.
    let mut tensor_strides = tensor.layout.strides.clone();
    tensor_strides[dim] = 0;
    let (shape, strides) = coalesce(i, &[&tensor_strides, &indices.layout.strides]);
    let indices_linear = indices.layout.is_contiguous();
    let (dim_size, dim_stride) = (t[dim], tensor.layout.strides[dim]);
    let (o, len) = (out.clone(), out.num_elements());
    launch(&out.client, op, Geometry::Units(len), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < len` and checks every index against the dimension;
        // the views lie inside their buffers.
        unsafe {
            gather_kernel::launch_unchecked::<R>(
                client, count, cube_dim, tensor.buffer_arg(), indices.buffer_arg(), o.buffer_arg(), len,
                tensor.layout.offset, indices.layout.offset, dim_size, dim_stride, divmods(&shape),
                usizes(&strides[0]), usizes(&strides[1]), indices_linear, [tensor.storage(), indices.storage()],
            )
        }
    });
    out
}

/// Gathers with [`gather_rows`] when `dim` is the last, the indices are contiguous and their
/// rows split into vectors (of the widest size that both dtypes load in 16 bytes); `false`
/// (nothing launched) otherwise.
fn gather_by_rows<R: Runtime>(op: &str, dim: usize, tensor: &CubeTensor<R>, indices: &CubeTensor<R>, out: &CubeTensor<R>) -> bool {
    let i = indices.dims();
    let cols = i[dim];
    if dim + 1 != i.len() || !indices.layout.is_contiguous() || cols == 0 {
        return false;
    }
    let widest = tensor.storage().size().max(indices.storage().size());
    let v = widest_vector(&out.client, widest, [cols, indices.layout.offset]);
    if v == 1 {
        return false;
    }
    let (rows, strides) = coalesce(&i[..dim], &[&tensor.layout.strides[..dim]]);
    let (vectors, (dim_size, dim_stride)) = (out.num_elements() / v, (tensor.dims()[dim], tensor.layout.strides[dim]));
    let (tensor, indices, o) = (tensor.clone(), indices.clone(), out.clone());
    launch(&out.client, op, Geometry::Units(vectors), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < vectors` and checks every index against the
        // dimension; `v` divides the rows and the indices' offset; the views lie inside their
        // buffers.
        unsafe {
            gather_rows::launch_unchecked::<R>(
                client, count, cube_dim, v, tensor.buffer_arg(), indices.buffer_arg(), o.buffer_arg(), vectors, cols / v,
                tensor.layout.offset, indices.layout.offset / v, dim_size, dim_stride, divmods(&rows), usizes(&strides[0]),
                [tensor.storage(), indices.storage()],
            )
        }
    });
    true
}

/// `out[c] = tensor[c with c[dim] = indices[c[dim]]]` for 1-D indices.
pub fn select<R: Runtime>(op: &str, tensor: CubeTensor<R>, dim: usize, indices: CubeTensor<R>) -> CubeTensor<R> {
    check_dim(op, &tensor, dim);
    check_indices(op, &indices);
    if indices.layout.rank() != 1 {
        panic!("ex_cubecl: {op}: indices must be 1-D, got shape {:?}", indices.dims());
    }
    let mut shape = tensor.dims().to_vec();
    shape[dim] = indices.dims()[0];
    let out = CubeTensor::empty(&tensor.client, &tensor.device, Shape::from(shape), tensor.dtype);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `pos < len` and checks every index against the dimension.
        unsafe {
            index_select::launch_unchecked::<R>(
                client, count, cube_dim, tensor.as_arg(), indices.as_arg(), o.as_arg(),
                tensor.layout.offset, indices.layout.offset, dim, [tensor.storage(), indices.storage()],
            )
        }
    });
    out
}

/// A copy of `tensor` with `value[c]` combined into position `c with c[dim] = indices[c]`,
/// in the line's order along `dim`: on GPUs, one cube per line staged in shared memory where
/// lines have a cube's entries or more and fit (`scatter_line`), else one plane per line where
/// the device has plane operations (`scatter_plane`); one unit per line elsewhere.
pub fn scatter<R: Runtime>(
    op: &str,
    dim: usize,
    tensor: CubeTensor<R>,
    indices: CubeTensor<R>,
    value: CubeTensor<R>,
    combine: ScatterOp,
) -> CubeTensor<R> {
    check_dim(op, &tensor, dim);
    check_indices(op, &indices);
    check_same_dtype(op, &tensor, &value);
    if tensor.bf16_bits() {
        return super::bf16::map2(op, tensor, value, |t, v| scatter(op, dim, t, indices, v, combine));
    }
    let (t, i, v) = (tensor.dims(), indices.dims(), value.dims());
    if i != v || t.len() != i.len() || t.iter().zip(i).enumerate().any(|(d, (&a, &b))| d != dim && b > a) {
        panic!("ex_cubecl: {op}: tensor {t:?}, indices {i:?} and values {v:?} don't fit along dim {dim}");
    }
    let out = copy_as(&tensor, tensor.dtype, 0);
    let len = i[dim];
    let lines = if len == 0 { 0 } else { indices.num_elements() / len };
    let o = out.clone();
    let span = t[dim].next_power_of_two();
    if !cubes_on_cpu(&out.client) && len >= SCATTER_CUBE && span * (out.dtype.size() + 4) <= SCATTER_STAGED_BYTES {
        let geometry = Geometry::Cubes { count: lines, dim: CubeDim::new_1d(SCATTER_CUBE as u32) };
        launch(&out.client, op, geometry, move |client, count, cube_dim| {
            // SAFETY: the kernel's cubes guard `line < lines` and check every index against
            // the dimension; `span` holds the line.
            unsafe {
                scatter_line::launch_unchecked::<R>(
                    client, count, cube_dim, indices.as_arg(), value.as_arg(), o.as_arg(),
                    indices.layout.offset, value.layout.offset, dim, lines, combine, span,
                    [tensor.storage(), indices.storage()],
                )
            }
        });
        return out;
    }
    let hardware = &out.client.properties().hardware;
    let plane = hardware.plane_size_max as usize;
    if !cubes_on_cpu(&out.client) && hardware.plane_size_min as usize == plane && (1..=32).contains(&plane) && SCATTER_CUBE % plane == 0 {
        let planes = SCATTER_CUBE / plane;
        let geometry = Geometry::Cubes { count: lines.div_ceil(planes), dim: CubeDim::new_1d(SCATTER_CUBE as u32) };
        launch(&out.client, op, geometry, move |client, count, cube_dim| {
            // SAFETY: the kernel's planes guard `line < lines` and check every index against
            // the dimension.
            unsafe {
                scatter_plane::launch_unchecked::<R>(
                    client, count, cube_dim, indices.as_arg(), value.as_arg(), o.as_arg(),
                    indices.layout.offset, value.layout.offset, dim, lines, combine, plane, planes,
                    [tensor.storage(), indices.storage()],
                )
            }
        });
        return out;
    }
    launch(&out.client, op, Geometry::Units(lines), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `line < lines` and checks every index against the dimension.
        unsafe {
            scatter_kernel::launch_unchecked::<R>(
                client, count, cube_dim, indices.as_arg(), value.as_arg(), o.as_arg(),
                indices.layout.offset, value.layout.offset, dim, lines, combine,
                [tensor.storage(), indices.storage()],
            )
        }
    });
    out
}

/// A copy of `tensor` with `value[.., j, ..]` combined into `[.., indices[j], ..]` along `dim`.
pub fn select_scatter<R: Runtime>(
    op: &str,
    tensor: CubeTensor<R>,
    dim: usize,
    indices: CubeTensor<R>,
    value: CubeTensor<R>,
    combine: ScatterOp,
) -> CubeTensor<R> {
    check_dim(op, &tensor, dim);
    check_indices(op, &indices);
    check_same_dtype(op, &tensor, &value);
    if tensor.bf16_bits() {
        return super::bf16::map2(op, tensor, value, |t, v| select_scatter(op, t, dim, indices, v, combine));
    }
    let (t, i, v) = (tensor.dims().to_vec(), indices.dims().to_vec(), value.dims().to_vec());
    let mut expected = t.clone();
    if i.len() == 1 {
        expected[dim] = i[0];
    }
    if i.len() != 1 || v != expected {
        panic!("ex_cubecl: {op}: tensor {t:?}, indices {i:?} and values {v:?} don't fit along dim {dim}");
    }
    let out = copy_as(&tensor, tensor.dtype, 0);
    let lines = if t[dim] == 0 { 0 } else { out.num_elements() / t[dim] };
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(lines), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `line < lines` and checks every index against the dimension.
        unsafe {
            select_scatter_kernel::launch_unchecked::<R>(
                client, count, cube_dim, indices.as_arg(), value.as_arg(), o.as_arg(),
                indices.layout.offset, value.layout.offset, dim, lines, combine,
                [tensor.storage(), indices.storage()],
            )
        }
    });
    out
}

/// A copy of `tensor` with the region `slices` replaced by `value`.
pub fn slice_assign<R: Runtime>(op: &str, tensor: CubeTensor<R>, slices: &[Slice], value: CubeTensor<R>) -> CubeTensor<R> {
    check_same_dtype(op, &tensor, &value);
    let out = copy_as(&tensor, tensor.dtype, 0);
    let (region, flip_mask) = slice_view(op, &out.layout, slices);
    if region.shape != value.layout.shape {
        panic!(
            "ex_cubecl: {op}: value of shape {:?} doesn't fit the region {:?} of tensor {:?} ({:?})",
            value.dims(), region.shape.to_vec(), tensor.dims(), tensor.dtype
        );
    }
    copy_into(&value, &value.layout, flip_mask, &out, &region);
    out
}
