//! Ops beyond Burn's traits that our kernels have, for callers that know the backend's type
//! (the NIF's Nx entries).
use burn_backend::DType;
use cubecl::Runtime;
use ex_cubecl_kernels::unary::UnaryFloatOp;

use crate::backend::ExCubeclBackend;
use crate::launch::copy::into_contiguous;
use crate::launch::elementwise::unary_float_op;
use crate::runtime::elem_size;
use crate::tensor::CubeTensor;

impl<R: Runtime> ExCubeclBackend<R> {
    /// `1 - erf(x)`, which for f64 keeps its relative precision where `erf(x)` rounds to 1.
    pub fn float_erfc(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::Erfc, 0.0, 0.0)
    }

    /// `tensor`'s bits read as `dtype`, which must have the same width: the same buffer with
    /// another dtype (copied first only when `tensor` is a non-contiguous view).
    ///
    /// # Panics
    /// When the widths differ.
    pub fn reinterpret(tensor: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
        let (from, to) = (elem_size(tensor.dtype), elem_size(dtype));
        assert!(from == to, "ex_cubecl: reinterpret: {:?} ({from} bytes) as {dtype:?} ({to} bytes) changes the width", tensor.dtype);
        CubeTensor { dtype, ..into_contiguous(tensor) }
    }
}
