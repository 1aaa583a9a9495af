//! Cumulative scans.
use cubecl::Runtime;
use ex_cubecl_kernels::cumulative::{ScanOp, cumulative as scan_kernel};

use super::check_dim;
use crate::runtime::{Geometry, OpName, launch};
use crate::tensor::CubeTensor;

/// The running `op` along `dim`.
pub fn cumulative<R: Runtime>(tensor: CubeTensor<R>, dim: usize, op: ScanOp) -> CubeTensor<R> {
    if tensor.bf16_bits() {
        return super::bf16::map(tensor, |t| cumulative(t, dim, op));
    }
    let name = OpName("cumulative", &op);
    check_dim(&name, &tensor, dim);
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    let len = tensor.dims()[dim];
    let lines = if len == 0 { 0 } else { out.num_elements() / len };
    let acc = super::accumulator(tensor.dtype);
    let o = out.clone();
    launch(&out.client, &name, Geometry::Units(lines), move |client, count, cube_dim| {
        // SAFETY: the kernel guards `line < lines`; reads and writes stay inside the line.
        unsafe {
            scan_kernel::launch_unchecked::<R>(
                client, count, cube_dim, tensor.as_arg(), o.as_arg(),
                tensor.layout.offset, dim, lines, op, [tensor.storage(), acc],
            )
        }
    });
    out
}
