//! The backend's ops beyond Burn's `Backend` trait (`ex_cubecl`'s `ops/extension.rs`), for
//! the Nx entries: a trait implemented for `ExCubeclBackend<R>` and its `Autodiff` form (the
//! two backends the op table runs on). `bitcast` is not tracked for gradients; `erfc` of a
//! tensor that requires them is `1 - erf(x)` on the tape, and `rsqrt`, `cbrt` and `erf_inv`
//! go through ops the tape differentiates too.
use burn_autodiff::Autodiff;
use burn_backend::ops::{BoolTensorOps, FloatTensorOps};
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{AutodiffBackend, Backend, DType, DeviceOps, Shape, Slice};
use ex_cubecl::launch::fused::FusedOp;
use ex_cubecl::launch::fused_int::IntFusedOp;
use ex_cubecl::ExCubeclBackend;
use ex_cubecl::cubecl::Runtime;

use crate::tensor::Prim;

pub trait Extension: Backend {
    /// Whether the backend records ops on Burn's tape (the autodiff backend, which the NIF
    /// runs an op on only where an input is tracked): such ops must stay differentiable, so
    /// entries that can fuse their work (`float_fused` drops the tape) compose ops instead.
    const TAPE: bool;

    /// `1 - erf(x)`, to full relative precision in f64.
    fn float_erfc(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `e^x - 1`, to full relative precision near zero.
    fn float_expm1(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// `1 / sqrt(x)` in one launch.
    fn float_rsqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// The cube root, negative for negative `x`.
    fn float_cbrt(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// The inverse error function.
    fn float_erf_inv(tensor: FloatTensor<Self>) -> FloatTensor<Self>;

    /// The max (`max`) or min along `dim`, NaN where the reduced elements hold a NaN.
    fn float_extreme_dim_nan(tensor: FloatTensor<Self>, dim: usize, max: bool) -> FloatTensor<Self>;

    /// A chain of elementwise float ops over `shape` in one launch (`ExCubeclBackend::float_fused`);
    /// not tracked for gradients (defn programs differentiate before they run).
    fn float_fused(inputs: Vec<FloatTensor<Self>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<FloatTensor<Self>>;

    /// A chain of elementwise integer ops over `shape` in one launch (`ExCubeclBackend::int_fused`;
    /// `stacked`: the outputs as one tensor, concatenated along the first axis); `None` where
    /// the device can't bind that many buffers.
    fn int_fused(inputs: Vec<IntTensor<Self>>, shape: Shape, ops: Vec<IntFusedOp>, outputs: Vec<usize>, stacked: bool) -> Option<Vec<IntTensor<Self>>>;

    /// A tensor of `shape` made of `parts`, each in the region its slices select; the
    /// regions cover every element exactly once (`ExCubeclBackend::assemble`: one launch per
    /// part).
    fn float_assemble(shape: Shape, dtype: DType, parts: Vec<(Vec<Slice>, FloatTensor<Self>)>) -> FloatTensor<Self>;

    /// The bits of a float or int tensor read as `dtype` (of the same width), on the device:
    /// a float primitive for a float `dtype`, an int one otherwise.
    fn bitcast(tensor: Prim<Self>, dtype: DType) -> Prim<Self>;
}

/// A reinterpreted tensor as the primitive kind of its new dtype.
fn kind<B: Backend>(dtype: DType, float: impl FnOnce() -> FloatTensor<B>, int: impl FnOnce() -> burn_backend::tensor::IntTensor<B>) -> Prim<B> {
    if dtype.is_float() { Prim::Float(float()) } else { Prim::Int(int()) }
}

impl<R: Runtime> Extension for ExCubeclBackend<R>
where
    R::Device: DeviceOps,
{
    const TAPE: bool = false;

    fn float_erfc(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_erfc(tensor)
    }

    fn float_expm1(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_expm1(tensor)
    }

    fn float_rsqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_rsqrt(tensor)
    }

    fn float_cbrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_cbrt(tensor)
    }

    fn float_erf_inv(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_erf_inv(tensor)
    }

    fn float_extreme_dim_nan(tensor: FloatTensor<Self>, dim: usize, max: bool) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::float_extreme_dim_nan(tensor, dim, max)
    }

    fn float_fused(inputs: Vec<FloatTensor<Self>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<FloatTensor<Self>> {
        ExCubeclBackend::<R>::float_fused(inputs, shape, ops, outputs)
    }

    fn int_fused(inputs: Vec<IntTensor<Self>>, shape: Shape, ops: Vec<IntFusedOp>, outputs: Vec<usize>, stacked: bool) -> Option<Vec<IntTensor<Self>>> {
        ExCubeclBackend::<R>::int_fused(inputs, shape, ops, outputs, stacked)
    }

    fn float_assemble(shape: Shape, dtype: DType, parts: Vec<(Vec<Slice>, FloatTensor<Self>)>) -> FloatTensor<Self> {
        ExCubeclBackend::<R>::assemble(shape, dtype, parts)
    }

    fn bitcast(tensor: Prim<Self>, dtype: DType) -> Prim<Self> {
        let t = match tensor {
            Prim::Float(t) | Prim::Int(t) | Prim::Bool(t) => t,
            Prim::Quant(_) => panic!("ex_cubecl: bitcast: a quantized tensor has no element type; dequantize it first"),
        };
        let r = ExCubeclBackend::<R>::reinterpret(t, dtype);
        kind::<Self>(dtype, || r.clone(), || r.clone())
    }
}

impl<R: Runtime> Extension for Autodiff<ExCubeclBackend<R>>
where
    R::Device: DeviceOps,
{
    const TAPE: bool = true;

    fn float_erfc(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            // Tracked: through ops that Burn's tape differentiates (erfc's own kernel keeps
            // full relative precision in the tail, which the gradient doesn't need).
            let erf = Self::float_erf(tensor);
            Self::float_add_scalar(Self::float_neg(erf), burn_backend::Scalar::Float(1.0))
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_erfc(Self::inner(tensor)))
        }
    }

    fn float_expm1(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            // Tracked: e^x - 1 through ops that Burn's tape differentiates.
            Self::float_sub_scalar(Self::float_exp(tensor), burn_backend::Scalar::Float(1.0))
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_expm1(Self::inner(tensor)))
        }
    }

    fn float_rsqrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            Self::float_recip(Self::float_sqrt(tensor))
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_rsqrt(Self::inner(tensor)))
        }
    }

    fn float_cbrt(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            // Tracked: sign(x) |x|^(1/3), whose gradient is the cube root's.
            let third = burn_backend::Scalar::Float(1.0 / 3.0);
            Self::float_mul(Self::float_sign(tensor.clone()), Self::float_powf_scalar(Self::float_abs(tensor), third))
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_cbrt(Self::inner(tensor)))
        }
    }

    fn float_erf_inv(tensor: FloatTensor<Self>) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            // Tracked: the value from the kernel, the gradient √π/2 e^(y²) through the tape:
            // y = v + (x - erf(v)) / erf'(v) at v = erf⁻¹(x) untracked is y itself, with
            // dy/dx = 1 / erf'(y).
            let v = Self::from_inner(ExCubeclBackend::<R>::float_erf_inv(Self::inner(tensor.clone())));
            let slope = Self::float_mul_scalar(Self::float_exp(Self::float_neg(Self::float_mul(v.clone(), v.clone()))), burn_backend::Scalar::Float(std::f64::consts::FRAC_2_SQRT_PI));
            let step = Self::float_div(Self::float_sub(tensor, Self::float_erf(v.clone())), slope);
            Self::float_add(v, step)
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_erf_inv(Self::inner(tensor)))
        }
    }

    fn float_extreme_dim_nan(tensor: FloatTensor<Self>, dim: usize, max: bool) -> FloatTensor<Self> {
        if Self::float_is_require_grad(&tensor) {
            // Tracked: Burn's max/min (whose gradient goes to the extreme), NaN filled in.
            let nan = Self::bool_any_dim(Self::float_is_nan(tensor.clone(), burn_backend::BoolStore::Native), dim);
            let r = if max { Self::float_max_dim(tensor, dim) } else { Self::float_min_dim(tensor, dim) };
            Self::float_mask_fill(r, nan, burn_backend::Scalar::Float(f64::NAN))
        } else {
            Self::from_inner(ExCubeclBackend::<R>::float_extreme_dim_nan(Self::inner(tensor), dim, max))
        }
    }

    fn float_fused(inputs: Vec<FloatTensor<Self>>, shape: Shape, ops: Vec<FusedOp>, outputs: Vec<usize>) -> Vec<FloatTensor<Self>> {
        let inner = inputs.into_iter().map(Self::inner).collect();
        ExCubeclBackend::<R>::float_fused(inner, shape, ops, outputs).into_iter().map(Self::from_inner).collect()
    }

    fn int_fused(inputs: Vec<IntTensor<Self>>, shape: Shape, ops: Vec<IntFusedOp>, outputs: Vec<usize>, stacked: bool) -> Option<Vec<IntTensor<Self>>> {
        // Integer tensors are never tracked: the inner backend's tensors as they are.
        ExCubeclBackend::<R>::int_fused(inputs, shape, ops, outputs, stacked)
    }

    fn float_assemble(shape: Shape, dtype: DType, parts: Vec<(Vec<Slice>, FloatTensor<Self>)>) -> FloatTensor<Self> {
        // On the tape: each part assigned in turn, which Burn differentiates.
        let device = Self::float_device(&parts.first().expect("ex_cubecl: assemble: no parts").1);
        let zeros = Self::float_zeros(shape, &device, dtype.into());
        parts.into_iter().fold(zeros, |out, (slices, part)| Self::float_slice_assign(out, &slices, part))
    }

    fn bitcast(tensor: Prim<Self>, dtype: DType) -> Prim<Self> {
        let t = match tensor {
            Prim::Float(t) => Self::inner(t),
            Prim::Int(t) => t,
            Prim::Bool(t) => t,
            Prim::Quant(_) => panic!("ex_cubecl: bitcast: a quantized tensor has no element type; dequantize it first"),
        };
        let r = ExCubeclBackend::<R>::reinterpret(t, dtype);
        kind::<Self>(dtype, || Self::from_inner(r.clone()), || r.clone())
    }
}
