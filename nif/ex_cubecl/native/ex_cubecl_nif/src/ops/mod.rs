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

mod create;
mod elementwise;
mod index;
mod layout;
mod module;
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
pub fn run<B: Backend>(
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
