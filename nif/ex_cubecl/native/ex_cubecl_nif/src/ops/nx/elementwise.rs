//! Elementwise entries: Nx's unary and binary ops. Binary ops cast both operands to the type
//! Nx computes in (`compute`: the output type, or the inputs' merged type for comparisons
//! and logical ops) and broadcast them as Nx does.
use burn_backend::tensor::{BoolTensor, FloatTensor, IntTensor};
use crate::ops::Extension;
use burn_backend::{DType, Scalar};

use super::Out;
use super::any::{self, BOOL};
use crate::dtype::{Class, class, name};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    match <[Prim<B>; 2]>::try_from(inputs) {
        Ok([a, b]) => {
            let compute = super::narrow::dtype_opt(op, opts, "compute")?;
            binary::<B>(op, a, b, out, compute)
        }
        Err(inputs) => match <[Prim<B>; 1]>::try_from(inputs) {
            Ok(_) if opts.has("compute") => Err(NifError::new(op, "takes two tensors, got one", out.describe())),
            Ok([x]) => unary::<B>(op, x, out),
            Err(v) => Err(NifError::new(op, format!("unknown Nx op or wrong input count ({})", v.len()), out.describe())),
        },
    }
}

/// `op(a, b)` computed in `compute`, broadcast to and cast to `out`.
pub fn binary<B: Extension>(op: &str, a: Prim<B>, b: Prim<B>, out: &Out, compute: DType) -> NifResult<Prim<B>> {
    let a = any::broadcast_to(op, any::cast(op, a, compute)?, &out.shape)?;
    let b = any::broadcast_to(op, any::cast(op, b, compute)?, &out.shape)?;
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &a.device()));
    }
    let desc = format!("{} and {}", a.describe(), b.describe());
    let r = match (a, b) {
        (Prim::Float(a), Prim::Float(b)) => float_binary::<B>(op, a, b)?,
        (Prim::Int(a), Prim::Int(b)) => int_binary::<B>(op, a, b, compute)?,
        _ => return Err(NifError::new(op, "takes numbers", desc)),
    };
    any::cast(op, r, out.dtype)
}

fn comparison<B: Extension>(op: &str) -> Option<fn(FloatTensor<B>, FloatTensor<B>, burn_backend::BoolStore) -> BoolTensor<B>> {
    Some(match op {
        "equal" => B::float_equal,
        "not_equal" => B::float_not_equal,
        "greater" => B::float_greater,
        "greater_equal" => B::float_greater_equal,
        "less" => B::float_lower,
        "less_equal" => B::float_lower_equal,
        _ => return None,
    })
}

fn int_comparison<B: Extension>(op: &str) -> Option<fn(IntTensor<B>, IntTensor<B>, burn_backend::BoolStore) -> BoolTensor<B>> {
    Some(match op {
        "equal" => B::int_equal,
        "not_equal" => B::int_not_equal,
        "greater" => B::int_greater,
        "greater_equal" => B::int_greater_equal,
        "less" => B::int_lower,
        "less_equal" => B::int_lower_equal,
        _ => return None,
    })
}

fn logical<B: Extension>(op: &str, a: BoolTensor<B>, b: BoolTensor<B>) -> Option<BoolTensor<B>> {
    Some(match op {
        "logical_and" => B::bool_and(a, b),
        "logical_or" => B::bool_or(a, b),
        "logical_xor" => B::bool_xor(a, b),
        _ => return None,
    })
}

fn float_binary<B: Extension>(op: &str, a: FloatTensor<B>, b: FloatTensor<B>) -> NifResult<Prim<B>> {
    if let Some(cmp) = comparison::<B>(op) {
        return Ok(Prim::Bool(cmp(a, b, BOOL)));
    }
    if op.starts_with("logical_") {
        let (a, b) = (any::nonzero::<B>(Prim::Float(a)), any::nonzero::<B>(Prim::Float(b)));
        return logical::<B>(op, a, b).map(Prim::Bool).ok_or_else(|| unknown(op));
    }
    Ok(Prim::Float(match op {
        "add" => B::float_add(a, b),
        "subtract" => B::float_sub(a, b),
        "multiply" => B::float_mul(a, b),
        "divide" => B::float_div(a, b),
        "pow" => B::float_powf(a, b),
        "atan2" => B::float_atan2(a, b),
        // fmod: the dividend's sign (Burn's remainder takes the divisor's).
        "remainder" => {
            let r = B::float_remainder(a.clone(), b.clone());
            let differ = B::bool_xor(B::float_lower_elem(r.clone(), Scalar::Float(0.0), BOOL), B::float_lower_elem(a, Scalar::Float(0.0), BOOL));
            let fix = B::bool_and(differ, B::float_not_equal_elem(r.clone(), Scalar::Float(0.0), BOOL));
            B::float_mask_where(r.clone(), fix, B::float_sub(r, b))
        }
        // NaN wins, as in Nx.
        "max" | "min" => {
            let pick_a = if op == "max" { B::float_greater(a.clone(), b.clone(), BOOL) } else { B::float_lower(a.clone(), b.clone(), BOOL) };
            let nan = B::bool_or(B::float_is_nan(a.clone(), BOOL), B::float_is_nan(b.clone(), BOOL));
            let sum = B::float_add(a.clone(), b.clone());
            let picked = B::float_mask_where(b, pick_a, a);
            B::float_mask_where(picked, nan, sum)
        }
        _ => return Err(NifError::new(op, "does not take floats", "")),
    }))
}

fn int_binary<B: Extension>(op: &str, a: IntTensor<B>, b: IntTensor<B>, dtype: DType) -> NifResult<Prim<B>> {
    if let Some(cmp) = int_comparison::<B>(op) {
        return Ok(Prim::Bool(cmp(a, b, BOOL)));
    }
    if op.starts_with("logical_") {
        let (a, b) = (any::nonzero::<B>(Prim::Int(a)), any::nonzero::<B>(Prim::Int(b)));
        return logical::<B>(op, a, b).map(Prim::Bool).ok_or_else(|| unknown(op));
    }
    let bits = (dtype.size() * 8) as i64;
    let zero = Scalar::Int(0);
    Ok(Prim::Int(match op {
        "add" => B::int_add(a, b),
        "subtract" => B::int_sub(a, b),
        "multiply" => B::int_mul(a, b),
        "quotient" => B::int_div(a, b),
        "pow" => B::int_powi(a, b),
        "bitwise_and" => B::bitwise_and(a, b),
        "bitwise_or" => B::bitwise_or(a, b),
        "bitwise_xor" => B::bitwise_xor(a, b),
        // Shifts by the width or more: 0, or the sign for a right shift of a negative.
        "left_shift" => {
            let wide = B::int_greater_equal_elem(b.clone(), Scalar::Int(bits), BOOL);
            B::int_mask_fill(B::bitwise_left_shift(a, b), wide, zero)
        }
        "right_shift" => {
            let wide = B::int_greater_equal_elem(b.clone(), Scalar::Int(bits), BOOL);
            let clamped = B::int_clamp_max(b, Scalar::Int(bits - 1));
            let shifted = B::bitwise_right_shift(a.clone(), clamped);
            let zeroed = B::int_mask_fill(shifted, wide.clone(), zero);
            if matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64) {
                zeroed
            } else {
                let sign = B::bool_and(wide, B::int_lower_elem(a, zero, BOOL));
                B::int_mask_fill(zeroed, sign, Scalar::Int(-1))
            }
        }
        // The dividend's sign (Burn's remainder takes the divisor's).
        "remainder" => {
            let r = B::int_remainder(a.clone(), b.clone());
            let differ = B::bool_xor(B::int_lower_elem(r.clone(), zero, BOOL), B::int_lower_elem(a, zero, BOOL));
            let fix = B::bool_and(differ, B::int_not_equal_elem(r.clone(), zero, BOOL));
            B::int_mask_where(r.clone(), fix, B::int_sub(r, b))
        }
        "max" => B::int_mask_where(b.clone(), B::int_greater(a.clone(), b, BOOL), a),
        "min" => B::int_mask_where(b.clone(), B::int_lower(a.clone(), b, BOOL), a),
        _ => return Err(NifError::new(op, format!("does not take integers ({})", name(dtype)), "")),
    }))
}

fn unknown(op: &str) -> NifError {
    NifError::new(op, "unknown Nx op", "")
}

/// `op(x)` as Nx defines it, in `out`'s type.
pub fn unary<B: Extension>(op: &str, x: Prim<B>, out: &Out) -> NifResult<Prim<B>> {
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &x.device()));
    }
    match op {
        "is_nan" | "is_infinity" => {
            return match x {
                Prim::Float(t) => {
                    let b = if op == "is_nan" { B::float_is_nan(t, BOOL) } else { B::float_is_inf(t, BOOL) };
                    any::from_bool::<B>(op, b, out.dtype)
                }
                other => Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &other.device())),
            };
        }
        "imag" => return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &x.device())),
        "real" | "conjugate" => return any::cast(op, x, out.dtype),
        "count_leading_zeros" | "population_count" => return bits::<B>(op, x, out),
        _ => {}
    }
    let x = any::cast(op, x, out.dtype)?;
    Ok(match x {
        Prim::Float(t) => Prim::Float(float_unary::<B>(op, t)?),
        Prim::Int(t) => Prim::Int(int_unary::<B>(op, t, out.dtype)?),
        other => return Err(NifError::new(op, "takes numbers", other.describe())),
    })
}

fn float_unary<B: Extension>(op: &str, t: FloatTensor<B>) -> NifResult<FloatTensor<B>> {
    let s = |v: f64| Scalar::Float(v);
    Ok(match op {
        "exp" => B::float_exp(t),
        "expm1" => B::float_expm1(t),
        "log" => B::float_log(t),
        "log1p" => B::float_log1p(t),
        "sigmoid" => B::sigmoid(t),
        "cos" => B::float_cos(t),
        "sin" => B::float_sin(t),
        "tan" => B::float_tan(t),
        "cosh" => B::float_cosh(t),
        "sinh" => B::float_sinh(t),
        "tanh" => B::float_tanh(t),
        "acos" => B::float_acos(t),
        "asin" => B::float_asin(t),
        "atan" => B::float_atan(t),
        "acosh" => B::float_acosh(t),
        "asinh" => B::float_asinh(t),
        "atanh" => B::float_atanh(t),
        "sqrt" => B::float_sqrt(t),
        "rsqrt" => B::float_rsqrt(t),
        "cbrt" => B::float_cbrt(t),
        "erf" => B::float_erf(t),
        "erfc" => B::float_erfc(t),
        "erf_inv" => B::float_erf_inv(t),
        "abs" => B::float_abs(t),
        "ceil" => B::float_ceil(t),
        "floor" => B::float_floor(t),
        "negate" => B::float_neg(t),
        "sign" => B::float_sign(t),
        // Halves away from zero, as Erlang's round.
        "round" => {
            let whole = B::float_trunc(t.clone());
            let frac = B::float_abs(B::float_sub(t.clone(), whole.clone()));
            let up = B::float_greater_equal_elem(frac, s(0.5), BOOL);
            B::float_mask_where(whole.clone(), up, B::float_add(whole, B::float_sign(t)))
        }
        _ => return Err(NifError::new(op, "does not take floats", "")),
    })
}

fn int_unary<B: Extension>(op: &str, t: IntTensor<B>, dtype: DType) -> NifResult<IntTensor<B>> {
    let unsigned = matches!(dtype, DType::U8 | DType::U16 | DType::U32 | DType::U64);
    Ok(match op {
        "abs" if unsigned => t,
        "abs" => B::int_abs(t),
        "negate" => B::int_neg(t),
        "sign" if unsigned => B::int_clamp_max(t, Scalar::Int(1)),
        "sign" => B::int_sign(t),
        "bitwise_not" => B::bitwise_not(t),
        "ceil" | "floor" | "round" => t,
        _ => return Err(NifError::new(op, format!("does not take integers ({})", name(dtype)), "")),
    })
}

/// `count_leading_zeros` and `population_count` of integers, by masks and shifts (every
/// step masks what it shifted, so arithmetic and logical shifts agree).
fn bits<B: Extension>(op: &str, x: Prim<B>, out: &Out) -> NifResult<Prim<B>> {
    let dtype = x.dtype();
    if class(dtype) != Class::Int {
        return Err(NifError::new(op, "takes integers", x.describe()));
    }
    let width = dtype.size() * 8;
    let mut t = any::int::<B>(x);
    if op == "count_leading_zeros" {
        // Smear the highest set bit down; negatives (top bit set) have no leading zeros.
        let negative = B::int_lower_elem(t.clone(), Scalar::Int(0), BOOL);
        let mut shift = 1;
        while shift < width {
            let mask = crate::dtype::int_scalar(dtype, (1i128 << (width - shift)) - 1);
            let moved = B::bitwise_and_scalar(B::bitwise_right_shift_scalar(t.clone(), Scalar::Int(shift as i64)), mask);
            t = B::bitwise_or(t, moved);
            shift *= 2;
        }
        let count = popcount::<B>(t, dtype, width);
        let zeros = B::int_add_scalar(B::int_neg(count), Scalar::Int(width as i64));
        let zeros = B::int_mask_fill(zeros, negative, Scalar::Int(0));
        return any::cast(op, Prim::Int(zeros), out.dtype);
    }
    any::cast(op, Prim::Int(popcount::<B>(t, dtype, width)), out.dtype)
}

fn popcount<B: Extension>(mut t: IntTensor<B>, dtype: DType, width: usize) -> IntTensor<B> {
    let pattern = |unit: usize| -> i128 {
        // Alternating runs of `unit` ones and zeros, ones low: 0x55.., 0x33.., 0x0f.., ...
        let mut m = 0i128;
        let mut i = 0;
        while i < width {
            m |= ((1i128 << unit) - 1) << i;
            i += 2 * unit;
        }
        m
    };
    let mut unit = 1;
    while unit < width {
        let mask = crate::dtype::int_scalar(dtype, pattern(unit));
        let low = B::bitwise_and_scalar(t.clone(), mask);
        let high = B::bitwise_and_scalar(B::bitwise_right_shift_scalar(t, Scalar::Int(unit as i64)), mask);
        t = B::int_add(low, high);
        unit *= 2;
    }
    t
}
