//! Ops beyond Burn's traits that our kernels have, for callers that know the backend's type
//! (the NIF's Nx entries).
use burn_backend::{DType, Shape, Slice};
use cubecl::Runtime;
use ex_cubecl_kernels::reduce::ReduceOp;
use ex_cubecl_kernels::unary::UnaryFloatOp;

use crate::backend::ExCubeclBackend;
use crate::launch::copy::{copy_into, into_contiguous};
use crate::launch::elementwise::unary_float_op;
use crate::launch::fused::{FusedOp, fused};
use crate::launch::fused_int::{IntFusedOp, int_fused, int_fused_fits};
use crate::launch::reduce::reduce_dim;
use crate::launch::view::slice_view;
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

    /// The max (or with `max: false` the min) along `dim`, NaN where the reduced elements
    /// hold a NaN (Nx's `reduce_max`; Burn's `max_dim` skips NaN), in one launch.
    pub fn float_extreme_dim_nan(tensor: CubeTensor<R>, dim: usize, max: bool) -> CubeTensor<R> {
        let dtype = tensor.dtype;
        reduce_dim(tensor, dim, if max { ReduceOp::NanMax } else { ReduceOp::NanMin }, dtype)
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

    /// The outputs of a chain of elementwise integer ops over `shape` in one launch (see
    /// [`int_fused`]), with the registers as in [`Self::float_fused`]; with `stacked`, one
    /// tensor: the outputs concatenated along the first axis. `None` where the device can't
    /// bind that many buffers (the caller then runs the ops one by one).
    pub fn int_fused(inputs: Vec<CubeTensor<R>>, shape: Shape, ops: Vec<IntFusedOp>, outputs: Vec<usize>, stacked: bool) -> Option<Vec<CubeTensor<R>>> {
        let fits = int_fused_fits(inputs.first()?, inputs.len(), outputs.len());
        fits.then(|| int_fused(inputs, shape, ops, outputs, stacked))
    }

    /// A tensor of `shape` and `dtype` assembled from `parts`, each copied into the region
    /// its slices select: one launch per part and none to fill, so the regions must cover
    /// every element exactly once (the offsets of windows that tile a tensor, say).
    ///
    /// # Panics
    /// When there are no parts, when a part is not of `dtype` or doesn't fit its region, or
    /// when the regions' sizes don't add up to the tensor's.
    pub fn assemble(shape: Shape, dtype: DType, parts: Vec<(Vec<Slice>, CubeTensor<R>)>) -> CubeTensor<R> {
        let first = &parts.first().expect("ex_cubecl: assemble: no parts").1;
        let out = CubeTensor::empty(&first.client, &first.device, shape, dtype);
        let covered: usize = parts.iter().map(|(_, p)| p.num_elements()).sum();
        assert!(
            covered == out.num_elements(),
            "ex_cubecl: assemble: the parts hold {covered} elements, the tensor {:?} {}",
            out.dims(),
            out.num_elements()
        );
        for (slices, part) in &parts {
            let (region, flip_mask) = slice_view("assemble", &out.layout, slices);
            assert!(
                part.dtype == dtype && region.shape == part.layout.shape,
                "ex_cubecl: assemble: a part {:?} ({:?}) doesn't fit the region {:?} of {:?} ({dtype:?})",
                part.dims(),
                part.dtype,
                region.shape.to_vec(),
                out.dims()
            );
            copy_into(part, &part.layout, flip_mask, &out, &region);
        }
        out
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
