//! bf16 on devices without bf16 arithmetic (lavapipe, most Vulkan and Metal GPUs): a bf16
//! tensor keeps its dtype and holds its bits in a u16 buffer ([`crate::runtime::bf16_in_u16`]).
//! Ops that only move elements (views, copies, `cat`, `gather`, `select`, `slice_assign`,
//! `mask_where`) move the bits. The families a model's step runs most (elementwise unary,
//! binary, comparison and predicate ops, `mask_fill`, the fused elementwise kernel,
//! reductions, softmax, layer norm, the tiled matmul, SGD and Adam steps) take the u16 buffers
//! themselves, in one launch: their kernels widen each element as they
//! read it (`ex_cubecl_kernels::bf16::load`), compute in f32 and round each result to nearest
//! even as they store it (`store`). Every other entry point that computes starts with one line
//! that sends bf16 operands through [`map`]: widened to f32 (exact, a copy launch), computed in
//! f32, the bf16 results rounded (another copy launch). Both give the same bits, those of a
//! kernel computing in native bf16, which rounds its stores.
use burn_backend::DType;
use cubecl::Runtime;
use cubecl::prelude::ComputeClient;

use super::copy::cast;
use crate::tensor::CubeTensor;

/// Whether tensors of `dtype` on `client`'s device are bf16 held as bits.
pub(crate) fn held_as_bits<R: Runtime>(client: &ComputeClient<R>, dtype: DType) -> bool {
    dtype == DType::BF16 && crate::runtime::bf16_in_u16(client)
}

/// Whether any of `tensors` is bf16 held as bits: the entry point calls [`map`] then.
pub(crate) fn any<R: Runtime>(tensors: &[&CubeTensor<R>]) -> bool {
    tensors.iter().any(|t| t.bf16_bits())
}

/// `tensor` in f32 when it is bf16 held as bits; unchanged otherwise.
pub(crate) fn widen<R: Runtime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    match tensor.bf16_bits() {
        true => cast(tensor, DType::F32),
        false => tensor,
    }
}

/// `tensor` (a result computed from widened operands) rounded to bf16 bits when `dtype`, the
/// dtype the op gives without widening, is bf16 held as bits; unchanged otherwise.
pub(crate) fn narrow<R: Runtime>(tensor: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
    match tensor.dtype == DType::F32 && held_as_bits(&tensor.client, dtype) {
        true => cast(tensor, DType::BF16),
        false => tensor,
    }
}

/// `op` of `tensor` computed in f32 and its result rounded back to bf16 when `tensor` is bf16
/// held as bits (the result of a float op has its operand's dtype).
pub(crate) fn map<R: Runtime>(tensor: CubeTensor<R>, op: impl FnOnce(CubeTensor<R>) -> CubeTensor<R>) -> CubeTensor<R> {
    let dtype = tensor.dtype;
    narrow(op(widen(tensor)), dtype)
}

/// [`map`] for an op of two float tensors of one dtype (checked first: widening would hide a
/// mismatch).
pub(crate) fn map2<R: Runtime>(
    name: &str,
    a: CubeTensor<R>,
    b: CubeTensor<R>,
    op: impl FnOnce(CubeTensor<R>, CubeTensor<R>) -> CubeTensor<R>,
) -> CubeTensor<R> {
    super::check_same_dtype(name, &a, &b);
    let dtype = a.dtype;
    narrow(op(widen(a), widen(b)), dtype)
}

/// The widened form of an optional operand.
pub(crate) fn widen_opt<R: Runtime>(tensor: Option<CubeTensor<R>>) -> Option<CubeTensor<R>> {
    tensor.map(widen)
}
