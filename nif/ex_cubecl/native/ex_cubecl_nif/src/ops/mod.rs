//! The op table: every kernel of the backend by name, with its inputs and options.
//!
//! `run_kernel(name, inputs, opts)` looks the name up here and runs it on the inputs' device
//! through the backend's ops (`Autodiff<ExCubeclBackend<R>>`), one family per file. The same
//! table serves pipelines and asynchronous commands, and later the Nx backend: one table,
//! not two surfaces. Inputs are validated here (count, kinds, dtypes, axes); what only the
//! backend knows (shape compatibility) is checked there and reaches the caller as an error
//! naming the op, the shapes and the dtypes.
use burn_backend::{Backend, DType};

use crate::dtype::{Class, class, name};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;
pub use extension::Extension;

/// `$float`, `$int` or `$bool` on the primitive of that class, giving a primitive of the same
/// class. Quantized inputs never get here: `run` refuses them for every other family.
macro_rules! each_kind {
    ($p:expr, |$t:ident| $float:expr, $int:expr, $bool:expr) => {
        match $p {
            Prim::Float($t) => Prim::Float($float),
            Prim::Int($t) => Prim::Int($int),
            Prim::Bool($t) => Prim::Bool($bool),
            Prim::Quant(_) => unreachable!("quantized inputs are refused in ops::run"),
        }
    };
}

mod audio;
mod create;
mod elementwise;
mod extension;
mod image;
mod index;
mod layout;
mod module;
mod nx;
mod quant;
mod reduce;

/// A kernel: its name, its family, what inputs it takes and what options.
pub struct Kernel {
    pub name: &'static str,
    pub family: Family,
    pub inputs: &'static str,
    pub options: &'static str,
}

/// The file a kernel's code is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Create,
    Elementwise,
    Reduce,
    Index,
    Layout,
    Module,
    Quant,
    Image,
    Audio,
    Nx,
}

macro_rules! kernels {
    ($($family:ident: [$($name:literal ($inputs:literal; $options:literal)),* $(,)?]),* $(,)?) => {
        /// Every kernel, grouped by family.
        pub const KERNELS: &[Kernel] = &[$($(Kernel { name: $name, family: Family::$family, inputs: $inputs, options: $options }),*),*];
    };
}

kernels! {
    Create: [
        "zeros" ("none"; "shape, dtype"),
        "ones" ("none"; "shape, dtype"),
        "full" ("none"; "shape, dtype, value"),
        "arange" ("none"; "start, stop, step (1), dtype (s32)"),
        "random_uniform" ("none"; "shape, dtype (f32), low (0.0), high (1.0)"),
        "random_normal" ("none"; "shape, dtype (f32), mean (0.0), std (1.0)"),
        "random_bernoulli" ("none"; "shape, dtype (f32), prob (0.5)"),
    ],
    Elementwise: [
        "exp" ("float"; ""), "log" ("float"; ""), "log1p" ("float"; ""), "sqrt" ("float"; ""),
        "sin" ("float"; ""), "cos" ("float"; ""), "tan" ("float"; ""), "tanh" ("float"; ""),
        "sinh" ("float"; ""), "cosh" ("float"; ""), "asin" ("float"; ""), "acos" ("float"; ""),
        "atan" ("float"; ""), "asinh" ("float"; ""), "acosh" ("float"; ""), "atanh" ("float"; ""),
        "erf" ("float"; ""), "recip" ("float"; ""), "floor" ("float"; ""), "ceil" ("float"; ""),
        "round" ("float"; ""), "trunc" ("float"; ""), "sigmoid" ("float"; ""), "relu" ("float"; ""),
        "gelu" ("float"; ""), "is_nan" ("float"; ""), "is_inf" ("float"; ""),
        "abs" ("float | int"; ""), "neg" ("float | int"; ""), "sign" ("float | int"; ""),
        "add" ("a, b (same dtype, broadcast)"; ""), "sub" ("a, b"; ""), "mul" ("a, b"; ""),
        "div" ("a, b"; ""), "remainder" ("a, b"; ""), "pow" ("a, b (float)"; ""),
        "atan2" ("a, b (float)"; ""),
        "equal" ("a, b"; ""), "not_equal" ("a, b"; ""), "greater" ("a, b (float | int)"; ""),
        "greater_equal" ("a, b (float | int)"; ""), "less" ("a, b (float | int)"; ""),
        "less_equal" ("a, b (float | int)"; ""),
        "logical_and" ("a, b (bool)"; ""), "logical_or" ("a, b (bool)"; ""),
        "logical_xor" ("a, b (bool)"; ""), "logical_not" ("bool"; ""),
        "clamp" ("float | int"; "min, max"),
        "where" ("mask (bool), on_true, on_false"; ""),
        "cast" ("any"; "dtype"),
    ],
    Reduce: [
        "sum" ("float | int"; "axis (all when absent)"), "mean" ("float | int"; "axis"),
        "prod" ("float | int"; "axis"), "max" ("float | int"; "axis"), "min" ("float | int"; "axis"),
        "argmax" ("float | int"; "axis"), "argmin" ("float | int"; "axis"),
        "any" ("any"; "axis"), "all" ("any"; "axis"),
        "cumsum" ("float | int"; "axis"), "cumprod" ("float | int"; "axis"),
        "cummax" ("float | int"; "axis"), "cummin" ("float | int"; "axis"),
    ],
    Index: [
        "gather" ("tensor, indices (int)"; "axis"),
        "scatter_add" ("tensor, indices (int), values"; "axis"),
        "select" ("tensor, indices (int, 1-d)"; "axis"),
        "select_add" ("tensor, indices (int, 1-d), values"; "axis"),
        "sort" ("float | int"; "axis (-1), descending (false)"),
        "argsort" ("float | int"; "axis (-1), descending (false)"),
        "topk" ("float | int"; "k, axis (-1)"),
        "argtopk" ("float | int"; "k, axis (-1)"),
    ],
    Layout: [
        "reshape" ("any"; "shape"), "permute" ("any"; "axes"), "transpose" ("any"; "axes (two)"),
        "slice" ("any"; "start, stop, step (per axis)"), "expand" ("any"; "shape"),
        "flip" ("any"; "axes"), "repeat" ("any"; "axis, times"), "cat" ("any, ... (same dtype)"; "axis"),
    ],
    Module: [
        "matmul" ("a, b (float | int)"; ""),
        "conv" ("x, weight, bias?"; "stride, padding, dilation, groups"),
        "max_pool2d" ("x [b, c, h, w]"; "kernel, stride (kernel), padding (0), dilation (1)"),
        "avg_pool2d" ("x [b, c, h, w]"; "kernel, stride (kernel), padding (0), count_include_pad (true)"),
        "interpolate" ("x [b, c, h, w]"; "size, mode (nearest | bilinear | bicubic)"),
        "attention" ("query, key, value"; "scale, causal (false), softcap"),
        "softmax" ("float"; "axis (-1)"),
        "log_softmax" ("float"; "axis (-1)"),
    ],
    Quant: [
        "quantize" ("float"; "block_size (one scale when absent; divides the last dimension), value (q8s | q8f)"),
        "dequantize" ("quantized"; "dtype (f32)"),
    ],
    // ExCubecl.Filter: images [h, w, c] or batches [n, h, w, c] (layout: :nchw for [c, h, w]
    // and [n, c, h, w]), u8 (0..255) or float (0.0..1.0); see ops::image.
    Image: [
        "image_to_float" ("u8 image"; "dtype (f32), scale (1/255)"),
        "image_resize" ("u8 | float image"; "size [h, w], mode (bilinear | nearest | bicubic | area), align_corners (false), layout (nhwc)"),
        "image_crop" ("any image"; "top (0), left (0), height, width, layout (nhwc)"),
        "image_pad" ("u8 | float image"; "top, bottom, left, right (0), value (0), layout (nhwc)"),
        "image_flip" ("any image"; "direction (horizontal | vertical | both), layout (nhwc)"),
        "image_rot90" ("any image"; "k (1: quarter turns counter-clockwise), layout (nhwc)"),
        "image_color" ("u8 | float image"; "from, to (rgb | gray | ycbcr | yuv), layout (nhwc)"),
        "image_normalize" ("u8 | float image"; "mean, std (per channel), layout (nhwc): gives f32"),
        "image_blur" ("u8 | float image"; "sigma, size (2 ceil(3 sigma) + 1), layout (nhwc)"),
    ],
    // ExCubecl.Audio: samples [frames, channels]; see ops::audio.
    Audio: [
        "audio_resample" ("float [frames, channels]"; "from, to (rates)"),
    ],
    // Nx's callbacks with Nx's semantics (see ops::nx); ExBurn.Backend calls these.
    Nx: [
        "nx_constant" ("none"; "type, shape, value, device"),
        "nx_eye" ("none"; "type, shape"),
        "nx_iota" ("none"; "type, shape, axis, flat"),
        "nx_exp" ("x"; "type, shape"),
        "nx_expm1" ("x"; "type, shape"),
        "nx_log" ("x"; "type, shape"),
        "nx_log1p" ("x"; "type, shape"),
        "nx_sigmoid" ("x"; "type, shape"),
        "nx_cos" ("x"; "type, shape"),
        "nx_sin" ("x"; "type, shape"),
        "nx_tan" ("x"; "type, shape"),
        "nx_cosh" ("x"; "type, shape"),
        "nx_sinh" ("x"; "type, shape"),
        "nx_tanh" ("x"; "type, shape"),
        "nx_acos" ("x"; "type, shape"),
        "nx_asin" ("x"; "type, shape"),
        "nx_atan" ("x"; "type, shape"),
        "nx_acosh" ("x"; "type, shape"),
        "nx_asinh" ("x"; "type, shape"),
        "nx_atanh" ("x"; "type, shape"),
        "nx_sqrt" ("x"; "type, shape"),
        "nx_rsqrt" ("x"; "type, shape"),
        "nx_cbrt" ("x"; "type, shape"),
        "nx_erf" ("x"; "type, shape"),
        "nx_erfc" ("x"; "type, shape"),
        "nx_erf_inv" ("x"; "type, shape"),
        "nx_abs" ("x"; "type, shape"),
        "nx_bitwise_not" ("x"; "type, shape"),
        "nx_ceil" ("x"; "type, shape"),
        "nx_conjugate" ("x"; "type, shape"),
        "nx_floor" ("x"; "type, shape"),
        "nx_negate" ("x"; "type, shape"),
        "nx_round" ("x"; "type, shape"),
        "nx_sign" ("x"; "type, shape"),
        "nx_count_leading_zeros" ("x"; "type, shape"),
        "nx_population_count" ("x"; "type, shape"),
        "nx_real" ("x"; "type, shape"),
        "nx_imag" ("x"; "type, shape"),
        "nx_is_nan" ("x"; "type, shape"),
        "nx_is_infinity" ("x"; "type, shape"),
        "nx_add" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_subtract" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_multiply" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_pow" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_remainder" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_divide" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_atan2" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_min" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_max" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_quotient" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_bitwise_and" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_bitwise_or" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_bitwise_xor" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_left_shift" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_right_shift" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_equal" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_not_equal" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_greater" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_less" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_greater_equal" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_less_equal" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_logical_and" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_logical_or" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_logical_xor" ("a, b (Nx broadcasting)"; "type, shape, compute"),
        "nx_fused" ("x, ... (broadcast to shape)"; "type, shape, ops ([{name, [register, ...]}]: Nx's elementwise float ops), outputs (registers)"),
        "nx_reshape" ("x"; "type, shape"),
        "nx_broadcast" ("x"; "type, shape, axes"),
        "nx_transpose" ("x"; "type, shape, axes"),
        "nx_pad" ("x, pad_value"; "type, shape, config ([lo, hi, interior] per axis)"),
        "nx_reverse" ("x"; "type, shape, axes"),
        "nx_as_type" ("x"; "type, shape"),
        "nx_bitcast" ("x"; "type, shape"),
        "nx_concatenate" ("x, ..."; "type, shape, axis"),
        "nx_stack" ("x, ..."; "type, shape, axis"),
        "nx_slice" ("x, dynamic starts..."; "type, shape, starts (-1: dynamic), lengths, strides"),
        "nx_put_slice" ("x, slice, dynamic starts..."; "type, shape, starts"),
        "nx_select" ("pred, on_true, on_false"; "type, shape"),
        "nx_clip" ("x, min, max"; "type, shape"),
        "nx_copy" ("x"; "type, shape"),
        "nx_to_batched" ("x"; "type, shape (a batch), leftover"),
        "nx_gather" ("x, indices"; "type, shape, axes"),
        "nx_indexed_add" ("x, indices, updates"; "type, shape, axes"),
        "nx_indexed_put" ("x, indices, updates"; "type, shape, axes"),
        "nx_take" ("x, indices"; "type, shape, axis"),
        "nx_take_along_axis" ("x, indices"; "type, shape, axis"),
        "nx_sort" ("x"; "type, shape, axis, descending"),
        "nx_argsort" ("x"; "type, shape, axis, descending"),
        "nx_top_k" ("x"; "type, shape, k"),
        "nx_sum" ("x"; "type, shape, axes, keep_axes"),
        "nx_product" ("x"; "type, shape, axes, keep_axes"),
        "nx_reduce_max" ("x"; "type, shape, axes, keep_axes"),
        "nx_reduce_min" ("x"; "type, shape, axes, keep_axes"),
        "nx_all" ("x"; "type, shape, axes, keep_axes"),
        "nx_any" ("x"; "type, shape, axes, keep_axes"),
        "nx_reduce" ("x, acc"; "type, shape, op, axes, keep_axes"),
        "nx_argmax" ("x"; "type, shape, axis, flat, last"),
        "nx_argmin" ("x"; "type, shape, axis, flat, last"),
        "nx_cumulative_sum" ("x"; "type, shape, axis, reverse"),
        "nx_cumulative_product" ("x"; "type, shape, axis, reverse"),
        "nx_cumulative_max" ("x"; "type, shape, axis, reverse"),
        "nx_cumulative_min" ("x"; "type, shape, axis, reverse"),
        "nx_window_sum" ("x"; "type, shape, window, strides, padding, dilations"),
        "nx_window_product" ("x"; "type, shape, window, strides, padding, dilations"),
        "nx_window_max" ("x"; "type, shape, window, strides, padding, dilations"),
        "nx_window_min" ("x"; "type, shape, window, strides, padding, dilations"),
        "nx_window_reduce" ("x, acc"; "type, shape, op, window, strides, padding, dilations"),
        "nx_window_scatter_max" ("x, source, init"; "type, shape, window, strides, padding, dilations"),
        "nx_window_scatter_min" ("x, source, init"; "type, shape, window, strides, padding, dilations"),
        "nx_dot" ("a, b"; "type, shape, contract_a, batch_a, contract_b, batch_b"),
        "nx_conv" ("x, kernel"; "type, shape, strides, padding, input_dilation, kernel_dilation, feature_groups, batch_groups, input_permutation, kernel_permutation, output_permutation"),
        "nx_triangular_solve" ("a, b"; "type, shape, left_side, lower, transform_a"),
        "nx_cholesky" ("a (square matrices)"; "type, shape"),
        "nx_lu" ("a (square matrices)"; "type, shape (of l and u), p_type: gives l, u, p"),
        "nx_qr" ("a (matrices)"; "type, shape (of q), eps, mode (reduced, complete): gives q, r"),
        "nx_solve" ("a (square matrices), b"; "type, shape"),
        "nx_fft" ("x"; "type, shape, length, axis"),
        "nx_ifft" ("x"; "type, shape, length, axis"),
        "nx_fft2" ("x"; "type, shape, axes, lengths, eps"),
        "nx_ifft2" ("x"; "type, shape, axes, lengths, eps"),
        "nx_rfft" ("x (real)"; "type, shape, axis, length, eps"),
        "nx_irfft" ("x (complex)"; "type, shape, axis, length, eps"),
    ],
}

/// The kernel named `name`.
pub fn kernel(op: &str) -> NifResult<&'static Kernel> {
    KERNELS.iter().find(|k| k.name == op).ok_or_else(|| {
        NifError::new(
            op,
            format!("unknown kernel {op:?}"),
            "kernels/0 lists every kernel with its inputs and options",
        )
    })
}

/// Runs kernel `op` on `inputs` (all on `device`, whose largest buffer is `max_bytes`).
pub fn run<B: Extension>(
    op: &str,
    inputs: Vec<Prim<B>>,
    opts: &Opts,
    device: &B::Device,
    max_bytes: u64,
) -> NifResult<Vec<Prim<B>>> {
    let k = kernel(op)?;
    if k.family != Family::Quant
        && let Some(q) = inputs.iter().find(|p| matches!(p, Prim::Quant(_)))
    {
        return Err(NifError::new(
            op,
            "takes float, int or bool tensors: dequantize a quantized tensor first",
            q.describe(),
        ));
    }
    match k.family {
        Family::Create => create::run::<B>(op, inputs, opts, device, max_bytes),
        Family::Elementwise => elementwise::run::<B>(op, inputs, opts),
        Family::Reduce => reduce::run::<B>(op, inputs, opts),
        Family::Index => index::run::<B>(op, inputs, opts),
        Family::Layout => layout::run::<B>(op, inputs, opts),
        Family::Module => module::run::<B>(op, inputs, opts),
        Family::Quant => quant::run::<B>(op, inputs, opts),
        Family::Image => image::run::<B>(op, inputs, opts),
        Family::Audio => audio::run::<B>(op, inputs, opts),
        Family::Nx => nx::run::<B>(op, inputs, opts, device, max_bytes),
    }
}

/// Exactly `N` inputs.
pub(crate) fn take<B: Backend, const N: usize>(
    op: &str,
    inputs: Vec<Prim<B>>,
) -> NifResult<[Prim<B>; N]> {
    let n = inputs.len();
    <[Prim<B>; N]>::try_from(inputs).map_err(|_| {
        NifError::new(
            op,
            format!("takes {N} input(s), got {n}"),
            format!("kernel {op}: {}", kernel(op).map_or("", |k| k.inputs)),
        )
    })
}

/// The float primitive of `p`.
pub(crate) fn float<B: Backend>(op: &str, p: Prim<B>) -> NifResult<B::FloatTensorPrimitive> {
    match p {
        Prim::Float(t) => Ok(t),
        other => Err(NifError::new(
            op,
            "expects a float tensor",
            other.describe(),
        )),
    }
}

/// The int primitive of `p`.
pub(crate) fn int<B: Backend>(op: &str, p: Prim<B>) -> NifResult<B::IntTensorPrimitive> {
    match p {
        Prim::Int(t) => Ok(t),
        other => Err(NifError::new(
            op,
            "expects an int tensor (indices)",
            other.describe(),
        )),
    }
}

/// The bool primitive of `p`.
pub(crate) fn boolean<B: Backend>(op: &str, p: Prim<B>) -> NifResult<B::BoolTensorPrimitive> {
    match p {
        Prim::Bool(t) => Ok(t),
        other => Err(NifError::new(op, "expects a bool tensor", other.describe())),
    }
}

/// Fails unless `a` and `b` have the same dtype.
pub(crate) fn same_dtype<B: Backend>(op: &str, a: &Prim<B>, b: &Prim<B>) -> NifResult<()> {
    if a.dtype() == b.dtype()
        || (class(a.dtype()) == Class::Bool && class(b.dtype()) == Class::Bool)
    {
        Ok(())
    } else {
        Err(NifError::new(
            op,
            "the inputs' dtypes differ (cast one first)",
            format!("{} and {}", a.describe(), b.describe()),
        ))
    }
}

/// Fails unless `a` and `b` have the same rank and every dimension is equal or 1 in one of them.
pub(crate) fn broadcastable<B: Backend>(op: &str, a: &Prim<B>, b: &Prim<B>) -> NifResult<()> {
    let (sa, sb) = (a.shape(), b.shape());
    let ok = sa.num_dims() == sb.num_dims()
        && sa
            .iter()
            .zip(sb.iter())
            .all(|(&x, &y)| x == y || x == 1 || y == 1);
    if ok {
        Ok(())
    } else {
        Err(NifError::new(
            op,
            "the shapes don't broadcast (same rank, each dimension equal or 1)",
            format!("{} and {}", a.describe(), b.describe()),
        ))
    }
}

/// Axis option `key` of a rank-`rank` input; negative axes count from the end.
pub(crate) fn axis(
    op: &str,
    opts: &Opts,
    key: &str,
    rank: usize,
    default: Option<i64>,
) -> NifResult<usize> {
    let a = opts.int(op, key, default)?;
    resolve_axis(op, a, rank)
}

/// `a` as an axis of a rank-`rank` tensor.
pub(crate) fn resolve_axis(op: &str, a: i64, rank: usize) -> NifResult<usize> {
    let r = rank as i64;
    if (-r..r).contains(&a) {
        Ok(if a < 0 { (a + r) as usize } else { a as usize })
    } else {
        Err(NifError::new(
            op,
            format!("axis {a} is out of range for rank {rank}"),
            format!("axes are -{rank}..{}", rank.saturating_sub(1)),
        ))
    }
}

/// A list option of non-negative sizes.
pub(crate) fn sizes(
    op: &str,
    opts: &Opts,
    key: &str,
    default: Option<Vec<i64>>,
) -> NifResult<Vec<usize>> {
    opts.ints(op, key, default)?
        .into_iter()
        .map(|d| {
            usize::try_from(d).map_err(|_| {
                NifError::new(
                    op,
                    format!("option {key} has a negative size {d}"),
                    format!("{:?}", opts.0),
                )
            })
        })
        .collect()
}

/// The dtype option `key`.
pub(crate) fn dtype_opt(
    op: &str,
    opts: &Opts,
    key: &str,
    default: Option<&str>,
) -> NifResult<DType> {
    crate::dtype::parse(op, &opts.name(op, key, default)?)
}

/// Fails unless the device computes in `dtype`.
pub(crate) fn computes<B: Backend>(op: &str, dtype: DType, device: &B::Device) -> NifResult<()> {
    if B::supports_dtype(device, dtype) {
        Ok(())
    } else {
        Err(NifError::new(
            op,
            format!("the device does not support dtype {}", name(dtype)),
            format!("{device:?}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_are_unique() {
        let mut names: Vec<&str> = KERNELS.iter().map(|k| k.name).collect();
        names.sort();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
    }
}
