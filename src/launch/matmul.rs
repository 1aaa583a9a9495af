//! Batched matrix multiplication with broadcast batch dimensions.
use burn_backend::Shape;
use cubecl::prelude::CubeDim;
use cubecl::Runtime;
use ex_cubecl_kernels::matmul::matmul as matmul_kernel;

use super::check_same_dtype;
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

const TILE: usize = 16;

/// `lhs @ rhs` over the last two dimensions, broadcasting the others.
pub fn matmul<R: Runtime>(op: &str, lhs: CubeTensor<R>, rhs: CubeTensor<R>) -> CubeTensor<R> {
    check_same_dtype(op, &lhs, &rhs);
    let (a, b) = (lhs.dims().to_vec(), rhs.dims().to_vec());
    if a.len() < 2 || b.len() < 2 || a[a.len() - 1] != b[b.len() - 2] {
        panic!("ex_cubecl: {op}: cannot multiply shapes {a:?} and {b:?} ({:?})", lhs.dtype);
    }
    let (m, k, n) = (a[a.len() - 2], a[a.len() - 1], b[b.len() - 1]);
    let batch = super::broadcast_dims(&a[..a.len() - 2], &b[..b.len() - 2]).unwrap_or_else(|| {
        panic!("ex_cubecl: {op}: cannot broadcast the batch dimensions of {a:?} and {b:?} ({:?})", lhs.dtype)
    });
    let with = |tail: [usize; 2]| Shape::from(batch.iter().copied().chain(tail).collect::<Vec<_>>());
    let lhs_view = lhs.layout.broadcast_to(&with([m, k])).expect("batch broadcast");
    let rhs_view = rhs.layout.broadcast_to(&with([k, n])).expect("batch broadcast");
    let out = CubeTensor::empty(&lhs.client, &lhs.device, with([m, n]), lhs.dtype);
    let cubes = batch.iter().product::<usize>() * m.div_ceil(TILE) * n.div_ceil(TILE);
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_2d(TILE as u32, TILE as u32) };
    launch(&lhs.client, op, geometry, |count, dim| {
        // SAFETY: cubes past `cubes` leave before any access; loads are guarded by m, n, k.
        unsafe {
            matmul_kernel::launch_unchecked::<R>(
                &lhs.client, count, dim, lhs.view_arg(&lhs_view), rhs.view_arg(&rhs_view),
                out.as_arg(), lhs_view.offset, rhs_view.offset, cubes, TILE, lhs.storage(),
            )
        }
    });
    out
}
