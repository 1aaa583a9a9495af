//! Elementwise kernels: unary math, binary arithmetic with broadcasting, comparisons, logic,
//! clamp, where and casts.
use burn_backend::{Backend, BoolStore, Scalar};

use super::{boolean, broadcastable, dtype_opt, same_dtype, take};
use crate::dtype::{Class, class, name};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

/// Bools produced by comparisons: the native store (the backend picks what the device has).
const BOOL: BoolStore = BoolStore::Native;

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let out = match inputs.len() {
        1 if op != "where" => unary::<B>(op, inputs, opts)?,
        2 => binary::<B>(op, inputs)?,
        3 if op == "where" => {
            let [mask, on_true, on_false] = take::<B, 3>(op, inputs)?;
            same_dtype(op, &on_true, &on_false)?;
            broadcastable(op, &on_true, &on_false)?;
            let mask = boolean(op, mask)?;
            match (on_true, on_false) {
                (Prim::Float(t), Prim::Float(f)) => Prim::Float(B::float_mask_where(f, mask, t)),
                (Prim::Int(t), Prim::Int(f)) => Prim::Int(B::int_mask_where(f, mask, t)),
                (Prim::Bool(t), Prim::Bool(f)) => Prim::Bool(B::bool_mask_where(f, mask, t)),
                _ => unreachable!("same dtype checked"),
            }
        }
        n => {
            return Err(NifError::new(
                op,
                format!("got {n} inputs"),
                format!("kernel {op}: {}", super::kernel(op)?.inputs),
            ));
        }
    };
    Ok(vec![out])
}

fn unary<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Prim<B>> {
    let [x] = take::<B, 1>(op, inputs)?;
    let desc = x.describe();
    let wrong = || NifError::new(op, "does not take this dtype", desc.clone());
    Ok(match (op, x) {
        ("abs", Prim::Int(t)) => Prim::Int(B::int_abs(t)),
        ("neg", Prim::Int(t)) => Prim::Int(B::int_neg(t)),
        ("sign", Prim::Int(t)) => Prim::Int(B::int_sign(t)),
        ("logical_not", Prim::Bool(t)) => Prim::Bool(B::bool_not(t)),
        ("cast", x) => cast::<B>(op, x, dtype_opt(op, opts, "dtype", None)?)?,
        ("clamp", Prim::Float(t)) => Prim::Float(B::float_clamp(
            t,
            Scalar::Float(opts.float(op, "min", None)?),
            Scalar::Float(opts.float(op, "max", None)?),
        )),
        ("clamp", Prim::Int(t)) => Prim::Int(B::int_clamp(
            t,
            Scalar::Int(opts.int(op, "min", None)?),
            Scalar::Int(opts.int(op, "max", None)?),
        )),
        ("is_nan", Prim::Float(t)) => Prim::Bool(B::float_is_nan(t, BOOL)),
        ("is_inf", Prim::Float(t)) => Prim::Bool(B::float_is_inf(t, BOOL)),
        ("sigmoid", Prim::Float(t)) => Prim::Float(B::sigmoid(t)),
        ("relu", Prim::Float(t)) => Prim::Float(B::relu(t)),
        ("gelu", Prim::Float(t)) => Prim::Float(B::gelu(t)),
        (_, Prim::Float(t)) => Prim::Float(match op {
            "exp" => B::float_exp(t),
            "log" => B::float_log(t),
            "log1p" => B::float_log1p(t),
            "sqrt" => B::float_sqrt(t),
            "sin" => B::float_sin(t),
            "cos" => B::float_cos(t),
            "tan" => B::float_tan(t),
            "tanh" => B::float_tanh(t),
            "sinh" => B::float_sinh(t),
            "cosh" => B::float_cosh(t),
            "asin" => B::float_asin(t),
            "acos" => B::float_acos(t),
            "atan" => B::float_atan(t),
            "asinh" => B::float_asinh(t),
            "acosh" => B::float_acosh(t),
            "atanh" => B::float_atanh(t),
            "erf" => B::float_erf(t),
            "recip" => B::float_recip(t),
            "floor" => B::float_floor(t),
            "ceil" => B::float_ceil(t),
            "round" => B::float_round(t),
            "trunc" => B::float_trunc(t),
            "abs" => B::float_abs(t),
            "neg" => B::float_neg(t),
            "sign" => B::float_sign(t),
            _ => return Err(wrong()),
        }),
        _ => return Err(wrong()),
    })
}

fn binary<B: Backend>(op: &str, inputs: Vec<Prim<B>>) -> NifResult<Prim<B>> {
    let [a, b] = take::<B, 2>(op, inputs)?;
    same_dtype(op, &a, &b)?;
    broadcastable(op, &a, &b)?;
    let desc = format!("{} and {}", a.describe(), b.describe());
    let wrong = || NifError::new(op, "does not take this dtype", desc.clone());
    Ok(match (a, b) {
        (Prim::Float(a), Prim::Float(b)) => match op {
            "add" => Prim::Float(B::float_add(a, b)),
            "sub" => Prim::Float(B::float_sub(a, b)),
            "mul" => Prim::Float(B::float_mul(a, b)),
            "div" => Prim::Float(B::float_div(a, b)),
            "remainder" => Prim::Float(B::float_remainder(a, b)),
            "pow" => Prim::Float(B::float_powf(a, b)),
            "atan2" => Prim::Float(B::float_atan2(a, b)),
            "equal" => Prim::Bool(B::float_equal(a, b, BOOL)),
            "not_equal" => Prim::Bool(B::float_not_equal(a, b, BOOL)),
            "greater" => Prim::Bool(B::float_greater(a, b, BOOL)),
            "greater_equal" => Prim::Bool(B::float_greater_equal(a, b, BOOL)),
            "less" => Prim::Bool(B::float_lower(a, b, BOOL)),
            "less_equal" => Prim::Bool(B::float_lower_equal(a, b, BOOL)),
            _ => return Err(wrong()),
        },
        (Prim::Int(a), Prim::Int(b)) => match op {
            "add" => Prim::Int(B::int_add(a, b)),
            "sub" => Prim::Int(B::int_sub(a, b)),
            "mul" => Prim::Int(B::int_mul(a, b)),
            "div" => Prim::Int(B::int_div(a, b)),
            "remainder" => Prim::Int(B::int_remainder(a, b)),
            "equal" => Prim::Bool(B::int_equal(a, b, BOOL)),
            "not_equal" => Prim::Bool(B::int_not_equal(a, b, BOOL)),
            "greater" => Prim::Bool(B::int_greater(a, b, BOOL)),
            "greater_equal" => Prim::Bool(B::int_greater_equal(a, b, BOOL)),
            "less" => Prim::Bool(B::int_lower(a, b, BOOL)),
            "less_equal" => Prim::Bool(B::int_lower_equal(a, b, BOOL)),
            _ => return Err(wrong()),
        },
        (Prim::Bool(a), Prim::Bool(b)) => Prim::Bool(match op {
            "logical_and" => B::bool_and(a, b),
            "logical_or" => B::bool_or(a, b),
            "logical_xor" => B::bool_xor(a, b),
            "equal" => B::bool_equal(a, b),
            "not_equal" => B::bool_not_equal(a, b),
            _ => return Err(wrong()),
        }),
        _ => return Err(wrong()),
    })
}

/// `x` as `dtype`, across classes (bools are 0 and 1; floats to ints truncate).
pub fn cast<B: Backend>(op: &str, x: Prim<B>, dtype: burn_backend::DType) -> NifResult<Prim<B>> {
    let device = x.device();
    if !B::supports_dtype(&device, dtype) {
        return Err(NifError::new(
            op,
            format!("the device does not support dtype {}", name(dtype)),
            format!("{device:?}"),
        ));
    }
    Ok(match (x, class(dtype)) {
        (Prim::Float(t), Class::Float) => Prim::Float(B::float_cast(t, dtype.into())),
        (Prim::Float(t), Class::Int) => Prim::Int(B::float_into_int(t, dtype.into())),
        (Prim::Float(t), Class::Bool) => {
            Prim::Bool(B::float_not_equal_elem(t, Scalar::Float(0.0), BOOL))
        }
        (Prim::Int(t), Class::Float) => Prim::Float(B::int_into_float(t, dtype.into())),
        (Prim::Int(t), Class::Int) => Prim::Int(B::int_cast(t, dtype.into())),
        (Prim::Int(t), Class::Bool) => Prim::Bool(B::int_not_equal_elem(t, Scalar::Int(0), BOOL)),
        (Prim::Bool(t), Class::Float) => Prim::Float(B::bool_into_float(t, dtype.into())),
        (Prim::Bool(t), Class::Int) => Prim::Int(B::bool_into_int(t, dtype.into())),
        (Prim::Bool(t), Class::Bool) => Prim::Bool(t),
        (q @ Prim::Quant(_), _) => {
            return Err(NifError::new(
                op,
                "a quantized tensor casts through dequantize",
                q.describe(),
            ));
        }
    })
}
