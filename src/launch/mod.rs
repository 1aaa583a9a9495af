//! Host side of every kernel family: validate the inputs, allocate the output, choose the
//! layout flags, and launch through [`crate::runtime::launch`]. Public entry points check
//! shapes and dtypes and panic with a message naming the operation, the shapes and the
//! dtypes (Burn's ops traits have no `Result`); the kernels assume valid input.

pub mod attention;
mod attention_tma;
pub(crate) mod bf16;
pub mod conv;
pub mod conv_mma;
pub mod conv_tma;
pub mod conv_weight;
pub mod copy;
pub mod ctc;
pub mod cumulative;
pub mod data;
pub mod deform_conv;
pub mod elementwise;
pub mod fft;
pub mod fused;
pub mod fused_int;
pub mod fused_matmul;
pub mod fused_reduce;
pub mod index;
pub mod index_nd;
pub mod interpolate;
pub mod mask;
pub mod matmul;
pub mod matmul_mma;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod quantize;
pub mod random;
pub mod reduce;
pub mod reduce_pair;
pub mod softmax;
pub mod sort;
pub mod split_k;
pub mod view;
mod views;

use std::fmt::Display;

use burn_backend::{DType, Scalar, Shape};
use cubecl::Runtime;
use cubecl::prelude::{ComputeClient, InputScalar, SequenceArg};
use cubecl::std::FastDivmod;

use crate::runtime::storage_type;
use crate::tensor::CubeTensor;

/// A scalar kernel argument of `dtype`.
pub(crate) fn scalar_arg(op: impl Display, value: Scalar, dtype: DType) -> InputScalar {
    if (dtype.is_uint() || dtype.is_bool()) && value.elem::<f64>() < 0.0 {
        panic!("ex_cubecl: {op}: scalar {value:?} is negative but the tensor's dtype is {dtype:?}");
    }
    InputScalar::new(value, storage_type(dtype))
}

/// A float scalar argument for kernels whose parameters are f64 (activation slopes,
/// distribution parameters).
pub(crate) fn float_arg(value: f64, dtype: DType) -> InputScalar {
    InputScalar::new(value, storage_type(dtype))
}

/// An iteration shape for the kernels' `view_offsets`: its divisions become multiplications.
pub(crate) fn divmods<R: Runtime>(shape: &[usize]) -> SequenceArg<R, FastDivmod<usize>> {
    let mut arg = SequenceArg::new();
    shape.iter().for_each(|&n| arg.push(n));
    arg
}

/// The widest vector (among the device's efficient sizes for elements of `elem_bytes`) that
/// divides every one of `units` (lengths, offsets, strides counted in elements); 1 when none
/// does.
pub(crate) fn widest_vector<R: Runtime>(client: &ComputeClient<R>, elem_bytes: usize, units: impl IntoIterator<Item = usize> + Clone) -> usize {
    client.io_optimized_vector_sizes(elem_bytes).find(|&v| units.clone().into_iter().all(|u| u % v == 0)).unwrap_or(1)
}

/// A list of sizes or strides as a kernel argument of comptime length.
pub(crate) fn usizes<R: Runtime>(values: &[usize]) -> SequenceArg<R, usize> {
    let mut arg = SequenceArg::new();
    values.iter().for_each(|&n| arg.push(n));
    arg
}

/// Panics unless both tensors have the same dtype.
pub(crate) fn check_same_dtype<R: Runtime>(op: impl Display, a: &CubeTensor<R>, b: &CubeTensor<R>) {
    if a.dtype != b.dtype {
        panic!(
            "ex_cubecl: {op}: dtypes differ: {:?} with shape {:?} and {:?} with shape {:?}",
            a.dtype,
            a.dims(),
            b.dtype,
            b.dims()
        );
    }
}

/// Panics unless `dim` is a dimension of `t`.
pub(crate) fn check_dim<R: Runtime>(op: impl Display, t: &CubeTensor<R>, dim: usize) {
    if dim >= t.layout.rank() {
        panic!(
            "ex_cubecl: {op}: dimension {dim} is out of range for shape {:?} ({:?})",
            t.dims(),
            t.dtype
        );
    }
}

/// The numpy broadcast of two shapes (missing leading dimensions and size-1 dimensions
/// stretch), or `None` when they don't broadcast.
pub(crate) fn broadcast_dims(x: &[usize], y: &[usize]) -> Option<Vec<usize>> {
    let rank = x.len().max(y.len());
    let at = |s: &[usize], d: usize| if d + s.len() >= rank { s[d + s.len() - rank] } else { 1 };
    (0..rank)
        .map(|d| match (at(x, d), at(y, d)) {
            (p, q) if p == q => Some(p),
            (1, q) => Some(q),
            (p, 1) => Some(p),
            _ => None,
        })
        .collect()
}

/// The broadcast shape of two operands, or a panic naming both.
pub(crate) fn broadcast_shape<R: Runtime>(op: impl Display, a: &CubeTensor<R>, b: &CubeTensor<R>) -> Shape {
    match broadcast_dims(a.dims(), b.dims()) {
        Some(dims) => Shape::from(dims),
        None => panic!(
            "ex_cubecl: {op}: cannot broadcast shapes {:?} ({:?}) and {:?} ({:?})",
            a.dims(),
            a.dtype,
            b.dims(),
            b.dtype
        ),
    }
}

/// The storage type sums and scans accumulate in: f32 for half-precision tensors, the
/// tensor's own type otherwise.
pub(crate) fn accumulator(dtype: DType) -> cubecl::ir::StorageType {
    storage_type(accumulator_dtype(dtype))
}

/// The dtype of [`accumulator`].
pub(crate) fn accumulator_dtype(dtype: DType) -> DType {
    match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        other => other,
    }
}

/// Whether the device runs cubes on CPU cores (Mesa's lavapipe: wgpu reports no plane
/// operations for CPU adapters). There a barrier suspends and resumes every group of units,
/// so kernels without shared memory or barriers beat shared-memory tiling.
pub(crate) fn cubes_on_cpu<R: Runtime>(client: &cubecl::prelude::ComputeClient<R>) -> bool {
    !client.features().plane.contains(cubecl::features::Plane::Ops)
}
