//! Two reductions in a row in one launch (`ex_cubecl_kernels::reduce_pair`).
use burn_backend::Shape;
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::reduce::ReduceOp;
use ex_cubecl_kernels::reduce_pair::{PairOps, reduce_pair as reduce_pair_kernel};

use super::accumulator_dtype;
use super::reduce::{CUBE_SIZE, Strategy};
use super::views::Views;
use crate::runtime::{Geometry, OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// `reduce_dim(reduce_dim(tensor, a, ops[0], dtype), b, ops[1], dtype)` in one launch, with
/// the two launches' bits, where both would run one unit per line (short lines: autodiff's
/// `[1, C, H, W]` gradients summed over `H`, then `W`) and `b` is at most a cube long; `None`
/// where not.
pub fn reduce_pair<R: Runtime>(tensor: &CubeTensor<R>, [a, b]: [usize; 2], ops: [ReduceOp; 2]) -> Option<CubeTensor<R>> {
    let dims = tensor.dims();
    let (dtype, bits) = (tensor.dtype, tensor.bf16_bits());
    (a < dims.len() && b < dims.len() && a != b && dtype.is_float()).then_some(())?;
    (bits == super::bf16::held_as_bits(&tensor.client, dtype)).then_some(())?;
    let (len_a, len_b) = (dims[a], dims[b]);
    let mut mid = dims.to_vec();
    mid[a] = 1;
    let mut out = mid.clone();
    out[b] = 1;
    let count: usize = out.iter().product();
    (len_a > 0 && (1..=CUBE_SIZE).contains(&len_b) && count > 0).then_some(())?;
    // Each launch alone would run a unit per line (the first's lines contiguous as
    // `reduce_dim` judges them; the second reads the first's contiguous output).
    let contiguous_a = match bits {
        true => dims[a + 1..].iter().product::<usize>() == 1,
        false => tensor.layout.strides[a] == 1,
    };
    let contiguous_b = mid[b + 1..].iter().product::<usize>() == 1;
    let per_unit = |len, outputs, contiguous| Strategy::of(len, outputs, contiguous) == Strategy::PerUnit;
    (per_unit(len_a, mid.iter().product(), contiguous_a) && per_unit(len_b, count, contiguous_b)).then_some(())?;
    let others = |v: &[usize]| v.iter().enumerate().filter(|&(d, _)| d != a && d != b).map(|(_, &x)| x).collect::<Vec<_>>();
    let views = Views::new(&others(dims), &[&others(&tensor.layout.strides)], false);
    let (stride_a, stride_b) = (tensor.layout.strides[a], tensor.layout.strides[b]);
    let output = CubeTensor::empty(&tensor.client, &tensor.device, Shape::from(out), dtype);
    let cube_size = len_b.next_power_of_two().max(32);
    let kernel_ops = PairOps { first: ops[0], second: ops[1], bits };
    let dtypes = [tensor.storage(), storage_type(accumulator_dtype(dtype))];
    let (input, o, offset) = (tensor.clone(), output.clone(), tensor.layout.offset);
    let geometry = Geometry::Cubes { count, dim: CubeDim::new_1d(cube_size as u32) };
    launch(&output.client, &OpName("reduce pair", &ops), geometry, move |client, cubes, dim| {
        // SAFETY: cubes past the output leave before any access; unit `j < len_b` reads
        // line `j` of its output element's, inside the view; unit 0 writes its element.
        unsafe {
            reduce_pair_kernel::launch_unchecked::<R>(
                client, cubes, dim, input.buffer_arg(), o.buffer_arg(), offset, views.shape(), views.strides(0),
                len_a, stride_a, len_b, stride_b, kernel_ops, cube_size, dtypes,
            )
        }
    });
    Some(output)
}

