//! Fused softmax / log-softmax.
use cubecl::Runtime;
use ex_cubecl_kernels::softmax::softmax as softmax_kernel;

use super::check_dim;
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// Softmax (or log-softmax with `log`) of a float tensor along `dim`.
pub fn softmax<R: Runtime>(tensor: CubeTensor<R>, dim: usize, log: bool) -> CubeTensor<R> {
    let name = if log { "log_softmax" } else { "softmax" };
    check_dim(name, &tensor, dim);
    if !tensor.dtype.is_float() {
        panic!("ex_cubecl: {name}: expected a float tensor, got {:?} with shape {:?}", tensor.dtype, tensor.dims());
    }
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    let len = tensor.dims()[dim];
    let lines = if len == 0 { 0 } else { out.num_elements() / len };
    let acc = super::accumulator(tensor.dtype);
    let o = out.clone();
    launch(&out.client, name, Geometry::Units(lines), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `line < lines`; reads and writes stay inside the line.
        unsafe {
            softmax_kernel::launch_unchecked::<R>(
                client, count, cube_dim, tensor.as_arg(), o.as_arg(),
                tensor.layout.offset, dim, lines, log, [tensor.storage(), acc],
            )
        }
    });
    out
}
