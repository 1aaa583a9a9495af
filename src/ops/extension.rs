//! Ops beyond Burn's traits that our kernels have, for callers that know the backend's type
//! (the NIF's Nx entries).
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::unary::UnaryFloatOp;

use crate::backend::ExCubeclBackend;
use crate::launch::copy::into_contiguous;
use crate::launch::elementwise::unary_float_op;
use crate::launch::fused::{FusedOp, fused};
use crate::runtime::elem_size;
use crate::tensor::CubeTensor;

impl<R: Runtime> ExCubeclBackend<R> {
    /// `1 - erf(x)`, which for f64 keeps its relative precision where `erf(x)` rounds to 1.
    pub fn float_erfc(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::Erfc, 0.0, 0.0)
    }

    /// `e^x - 1`, to full relative precision near zero (Burn has no such op).
    pub fn float_expm1(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::Expm1, 0.0, 0.0)
    }

    /// `1 / sqrt(x)` in one launch, the root and the quotient each rounded correctly.
    pub fn float_rsqrt(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::Rsqrt, 0.0, 0.0)
    }

    /// The cube root (negative for negative `x`), within an ULP or two (Burn has no such op).
    pub fn float_cbrt(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::Cbrt, 0.0, 0.0)
    }

    /// The inverse error function (Burn has no such op): ±∞ at ±1, NaN beyond.
    pub fn float_erf_inv(tensor: CubeTensor<R>) -> CubeTensor<R> {
        unary_float_op(tensor, UnaryFloatOp::ErfInv, 0.0, 0.0)
    }

    /// The outputs of a chain of elementwise float ops over `shape` in one launch (see
    /// [`fused`]): register `k` is input `k`, broadcast to `shape`; op `i` writes register
    /// `inputs.len() + i`; output `j` is register `outputs[j]`. Each op gives the bits its own
    /// launch gives.
    pub fn float_fused(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<CubeTensor<R>> {
        fused(inputs, shape, ops, outputs)
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
