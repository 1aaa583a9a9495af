//! Fused softmax / log-softmax.
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::softmax::{softmax as softmax_kernel, softmax_per_cube, softmax_rows};

use super::{check_dim, divmods, usizes, widest_vector};
use crate::runtime::{Geometry, coalesce, launch};
use crate::tensor::CubeTensor;

/// Units per cube when one cube handles one line.
const CUBE_SIZE: usize = 256;

/// Shortest contiguous line handled by a cube rather than a unit.
const CUBE_MIN_LEN: usize = 512;

/// Most vectors per unit that a cube holds in registers (longer rows are read twice).
const MAX_HELD: usize = 8;

/// Softmax (or log-softmax with `log`) of a float tensor along `dim`: one cube per line for
/// long contiguous lines (reads coalesced; in vectors along the last dimension), one unit per
/// line otherwise (neighbouring units read neighbouring lines).
pub fn softmax<R: Runtime>(tensor: CubeTensor<R>, dim: usize, log: bool) -> CubeTensor<R> {
    let bits = tensor.bf16_bits();
    if bits && !tensor.layout.is_contiguous_from_start() {
        // bf16 held as bits is read and written as its bits and computed in f32 (see
        // `super::bf16`), in the kernel (and vector width) that its f32 widening, contiguous
        // from offset 0, would take: the same sums in the same order, so the same bits.
        return softmax(super::copy::into_contiguous(tensor), dim, log);
    }
    let name = if log { "log_softmax" } else { "softmax" };
    check_dim(name, &tensor, dim);
    if !tensor.dtype.is_float() {
        panic!("ex_cubecl: {name}: expected a float tensor, got {:?} with shape {:?}", tensor.dtype, tensor.dims());
    }
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    let len = tensor.dims()[dim];
    let lines = if len == 0 { 0 } else { out.num_elements() / len };
    let acc = super::accumulator(tensor.dtype);
    let dtypes = [tensor.storage(), acc];
    if dim + 1 == tensor.layout.rank() && tensor.layout.strides[dim] == 1 && len >= CUBE_MIN_LEN {
        let (rows, strides) = coalesce(&tensor.dims()[..dim], &[&tensor.layout.strides[..dim]]);
        let units = strides[0].iter().copied().chain([len, tensor.layout.offset]);
        let elem_bytes = if bits { size_of::<f32>() } else { tensor.storage().size() };
        let v = widest_vector(&tensor.client, elem_bytes, units);
        let row_strides: Vec<usize> = strides[0].iter().map(|s| s / v).collect();
        // Vectors per unit held in registers: a power of two, so that few kernels compile.
        let held = match (len / v).div_ceil(CUBE_SIZE) {
            n if n <= MAX_HELD => n.next_power_of_two(),
            _ => 0,
        };
        let (o, offset) = (out.clone(), tensor.layout.offset / v);
        let geometry = Geometry::Cubes { count: lines, dim: CubeDim::new_1d(CUBE_SIZE as u32) };
        launch(&out.client, name, geometry, move |client, count, cube_dim| {
            // SAFETY: cubes past the last row leave before any access; `v` divides the rows'
            // length, offset and strides, so reads and writes stay inside the rows.
            unsafe {
                softmax_rows::launch_unchecked::<R>(
                    client, count, cube_dim, v, tensor.buffer_arg(), o.buffer_arg(), offset, len / v, lines,
                    divmods(&rows), usizes(&row_strides), CUBE_SIZE, held, log, bits, dtypes,
                )
            }
        });
    } else if tensor.layout.strides[dim] == 1 && len >= CUBE_MIN_LEN {
        let geometry = Geometry::Cubes { count: lines, dim: CubeDim::new_1d(CUBE_SIZE as u32) };
        let o = out.clone();
        launch(&out.client, name, geometry, move |client, count, cube_dim| {
            // SAFETY: cubes past the last line leave before any access; reads and writes stay
            // inside the line.
            unsafe {
                softmax_per_cube::launch_unchecked::<R>(
                    client, count, cube_dim, tensor.as_arg(), o.as_arg(),
                    tensor.layout.offset, dim, lines, CUBE_SIZE, log, bits, dtypes,
                )
            }
        });
    } else {
        let o = out.clone();
        launch(&out.client, name, Geometry::Units(lines), move |client, count, cube_dim| {
            // SAFETY: the kernel guards `line < lines`; reads and writes stay inside the line.
            unsafe {
                softmax_kernel::launch_unchecked::<R>(
                    client, count, cube_dim, tensor.as_arg(), o.as_arg(),
                    tensor.layout.offset, dim, lines, log, bits, dtypes,
                )
            }
        });
    }
    out
}
