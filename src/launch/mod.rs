//! Host side of every kernel family: validate the inputs, allocate the output, choose the
//! layout flags, and launch through [`crate::runtime::launch`]. Public entry points check
//! shapes and dtypes and panic with a message naming the operation, the shapes and the
//! dtypes (Burn's ops traits have no `Result`); the kernels assume valid input.

pub mod copy;
pub mod cumulative;
pub mod data;
pub mod elementwise;
pub mod index;
pub mod mask;
pub mod matmul;
pub mod random;
pub mod reduce;
pub mod softmax;
pub mod sort;
pub mod view;

use burn_backend::{DType, Scalar, Shape};
use cubecl::Runtime;
use cubecl::prelude::InputScalar;

use crate::runtime::storage_type;
use crate::tensor::CubeTensor;

/// A scalar kernel argument of `dtype`.
pub(crate) fn scalar_arg(op: &str, value: Scalar, dtype: DType) -> InputScalar {
    if (dtype.is_uint() || dtype.is_bool()) && value.to_f64_lossy() < 0.0 {
        panic!("ex_cubecl: {op}: scalar {value:?} is negative but the tensor's dtype is {dtype:?}");
    }
    InputScalar::new(value, storage_type(dtype))
}

/// A float scalar argument for kernels whose parameters are f64 (activation slopes,
/// distribution parameters).
pub(crate) fn float_arg(value: f64, dtype: DType) -> InputScalar {
    InputScalar::new(value, storage_type(dtype))
}

trait ScalarExt {
    fn to_f64_lossy(&self) -> f64;
}

impl ScalarExt for Scalar {
    fn to_f64_lossy(&self) -> f64 {
        match *self {
            Scalar::Float(x) => x,
            Scalar::Int(x) => x as f64,
            Scalar::UInt(x) => x as f64,
            Scalar::Bool(x) => x as u8 as f64,
        }
    }
}

/// Panics unless both tensors have the same dtype.
pub(crate) fn check_same_dtype<R: Runtime>(op: &str, a: &CubeTensor<R>, b: &CubeTensor<R>) {
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
pub(crate) fn check_dim<R: Runtime>(op: &str, t: &CubeTensor<R>, dim: usize) {
    if dim >= t.layout.rank() {
        panic!(
            "ex_cubecl: {op}: dimension {dim} is out of range for shape {:?} ({:?})",
            t.dims(),
            t.dtype
        );
    }
}

/// The broadcast shape of two operands (numpy rules), or a panic naming both.
pub(crate) fn broadcast_shape<R: Runtime>(op: &str, a: &CubeTensor<R>, b: &CubeTensor<R>) -> Shape {
    let (x, y) = (a.dims(), b.dims());
    let rank = x.len().max(y.len());
    let mut out = vec![0; rank];
    for d in 0..rank {
        let xs = if d + x.len() >= rank { x[d + x.len() - rank] } else { 1 };
        let ys = if d + y.len() >= rank { y[d + y.len() - rank] } else { 1 };
        out[d] = match (xs, ys) {
            (p, q) if p == q => p,
            (1, q) => q,
            (p, 1) => p,
            _ => panic!(
                "ex_cubecl: {op}: cannot broadcast shapes {x:?} ({:?}) and {y:?} ({:?})",
                a.dtype, b.dtype
            ),
        };
    }
    Shape::from(out)
}
