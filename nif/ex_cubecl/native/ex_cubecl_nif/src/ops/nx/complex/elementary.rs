//! The elementwise callbacks of complex tensors, with the formulas and branch cuts of the
//! `Complex` library that `Nx.BinaryBackend` computes with.
use burn_backend::DType;
use crate::ops::Extension;

use super::super::{Out, any};
use super::{Cx, Z, join, unsupported};
use crate::error::{NifError, NifResult};
use crate::tensor::Prim;

/// Callbacks of one tensor with a complex input (`z`) or result.
pub fn unary<B: Extension>(op: &str, cx: &Cx<B>, z: Z<B>, out: &Out, complex_out: bool) -> NifResult<Prim<B>> {
    let (re, im) = z.clone();
    let value = match op {
        "real" => return any::cast(op, re, out.dtype),
        "imag" => return any::cast(op, im, out.dtype),
        "abs" => return any::cast(op, cx.abs(z)?, out.dtype),
        "is_nan" | "is_infinity" => {
            let flag = Out { dtype: DType::U8, shape: out.shape.clone() };
            let each = |p: Prim<B>| super::super::elementwise::unary::<B>(op, p, &flag);
            let r = super::super::elementwise::binary::<B>("logical_or", each(re)?, each(im)?, &flag, DType::U8)?;
            return any::cast(op, r, out.dtype);
        }
        "as_type" if !complex_out => return super::super::shape::as_type::<B>(op, re, out.dtype),
        "as_type" => z,
        "conjugate" => (re, cx.u("negate", im)?),
        "negate" => cx.neg(z)?,
        "exp" => cx.exp(z)?,
        "expm1" => cx.sub(cx.exp(z)?, cx.c(1.0, 0.0))?,
        "log" => cx.log(z)?,
        "log1p" => cx.log(cx.add(z, cx.c(1.0, 0.0))?)?,
        "sqrt" => cx.sqrt(z)?,
        "rsqrt" => cx.div(cx.c(1.0, 0.0), cx.sqrt(z)?)?,
        // cbrt z = cbrt |z| (cos θ/3 + i sin θ/3)
        "cbrt" => cx.polar(cx.u("cbrt", cx.abs(z.clone())?)?, cx.f("divide", cx.phase(z)?, cx.k(3.0))?)?,
        "sigmoid" => cx.div(cx.c(1.0, 0.0), cx.add(cx.exp(cx.neg(z)?)?, cx.c(1.0, 0.0))?)?,
        "sin" => sin(cx, z)?,
        "cos" => cos(cx, z)?,
        "tan" => cx.div(sin(cx, z.clone())?, cos(cx, z)?)?,
        "sinh" => sinh(cx, z)?,
        "cosh" => cosh(cx, z)?,
        "tanh" => cx.div(sinh(cx, z.clone())?, cosh(cx, z)?)?,
        // asin z = -i log(iz + sqrt(1 - z²))
        "asin" => {
            let root = cx.sqrt(cx.sub(cx.c(1.0, 0.0), cx.mul(z.clone(), z.clone())?)?)?;
            minus_i(cx, cx.log(cx.add(cx.times_i(z)?, root)?)?)?
        }
        // acos z = -i log(z + sqrt(z² - 1))
        "acos" => minus_i(cx, cx.log(cx.add(z.clone(), root_of_square(cx, z, -1.0)?)?)?)?,
        // atan z = (i/2) (log(1 - iz) - log(1 + iz))
        "atan" => {
            let iz = cx.times_i(z)?;
            let d = cx.sub(cx.log(cx.sub(cx.c(1.0, 0.0), iz.clone())?)?, cx.log(cx.add(cx.c(1.0, 0.0), iz)?)?)?;
            cx.scale(cx.times_i(d)?, 0.5)?
        }
        // asinh z = log(z + sqrt(z² + 1)), acosh z = log(z + sqrt(z² - 1))
        "asinh" => cx.log(cx.add(z.clone(), root_of_square(cx, z, 1.0)?)?)?,
        "acosh" => cx.log(cx.add(z.clone(), root_of_square(cx, z, -1.0)?)?)?,
        // atanh z = log((1 + z) / (1 - z)) / 2
        "atanh" => {
            let q = cx.div(cx.add(cx.c(1.0, 0.0), z.clone())?, cx.sub(cx.c(1.0, 0.0), z)?)?;
            cx.scale(cx.log(q)?, 0.5)?
        }
        _ => return Err(unsupported(op, out)),
    };
    join(op, cx.part(), value)
}

/// Callbacks of two tensors, at least one complex.
pub fn binary<B: Extension>(op: &str, cx: &Cx<B>, a: Z<B>, b: Z<B>, out: &Out, complex_out: bool) -> NifResult<Prim<B>> {
    let value = match op {
        "add" => cx.add(a, b)?,
        "subtract" => cx.sub(a, b)?,
        "multiply" => cx.mul(a, b)?,
        "divide" => cx.div(a, b)?,
        "pow" => pow(cx, a, b)?,
        "equal" | "not_equal" => {
            let (both, part) = if op == "equal" { ("logical_and", "equal") } else { ("logical_or", "not_equal") };
            let r = cx.f(both, cx.f(part, a.0, b.0)?, cx.f(part, a.1, b.1)?)?;
            return any::cast(op, r, out.dtype);
        }
        _ => return Err(unsupported(op, out)),
    };
    if !complex_out {
        return Err(NifError::new(op, "internal: a complex op without a complex result", out.describe()));
    }
    join(op, cx.part(), value)
}

/// `-i w`
fn minus_i<B: Extension>(cx: &Cx<B>, (a, b): Z<B>) -> NifResult<Z<B>> {
    Ok((b, cx.u("negate", a)?))
}

/// `sqrt(z² + c)` for a real `c`.
fn root_of_square<B: Extension>(cx: &Cx<B>, z: Z<B>, c: f64) -> NifResult<Z<B>> {
    cx.sqrt(cx.add(cx.mul(z.clone(), z)?, cx.c(c, 0.0))?)
}

/// `sin(a + bi) = sin a cosh b + i cos a sinh b`
fn sin<B: Extension>(cx: &Cx<B>, (a, b): Z<B>) -> NifResult<Z<B>> {
    let re = cx.f("multiply", cx.u("sin", a.clone())?, cx.u("cosh", b.clone())?)?;
    Ok((re, cx.f("multiply", cx.u("cos", a)?, cx.u("sinh", b)?)?))
}

/// `cos(a + bi) = cos a cosh b - i sin a sinh b`
fn cos<B: Extension>(cx: &Cx<B>, (a, b): Z<B>) -> NifResult<Z<B>> {
    let re = cx.f("multiply", cx.u("cos", a.clone())?, cx.u("cosh", b.clone())?)?;
    Ok((re, cx.u("negate", cx.f("multiply", cx.u("sin", a)?, cx.u("sinh", b)?)?)?))
}

/// `sinh(a + bi) = sinh a cos b + i cosh a sin b`
fn sinh<B: Extension>(cx: &Cx<B>, (a, b): Z<B>) -> NifResult<Z<B>> {
    let re = cx.f("multiply", cx.u("sinh", a.clone())?, cx.u("cos", b.clone())?)?;
    Ok((re, cx.f("multiply", cx.u("cosh", a)?, cx.u("sin", b)?)?))
}

/// `cosh(a + bi) = cosh a cos b + i sinh a sin b`
fn cosh<B: Extension>(cx: &Cx<B>, (a, b): Z<B>) -> NifResult<Z<B>> {
    let re = cx.f("multiply", cx.u("cosh", a.clone())?, cx.u("cos", b.clone())?)?;
    Ok((re, cx.f("multiply", cx.u("sinh", a)?, cx.u("sin", b)?)?))
}

/// `x^y` as `Complex.pow`: with `ρ = |x|`, `θ = arg x`,
/// `x^y = ρ^Re y e^(-Im y θ) (cos r + i sin r)`, `r = Re y θ + Im y log ρ`; `0^0 = 1` and
/// `0^y = 0` otherwise.
fn pow<B: Extension>(cx: &Cx<B>, x: Z<B>, y: Z<B>) -> NifResult<Z<B>> {
    let (rho, theta) = (cx.abs(x.clone())?, cx.phase(x.clone())?);
    let (yr, yi) = y.clone();
    let s = cx.f("multiply", cx.f("pow", rho.clone(), yr.clone())?, cx.u("exp", cx.f("multiply", cx.u("negate", yi.clone())?, theta.clone())?)?)?;
    let r = cx.f("add", cx.f("multiply", yr, theta)?, cx.f("multiply", yi, cx.u("log", rho)?)?)?;
    let general = cx.polar(s, r)?;
    let zero = |(a, b): Z<B>| -> NifResult<Prim<B>> { cx.f("logical_and", cx.f("equal", a, cx.k(0.0))?, cx.f("equal", b, cx.k(0.0))?) };
    let at_zero = cx.pick(zero(y)?, cx.c(1.0, 0.0), cx.c(0.0, 0.0))?;
    cx.pick(zero(x)?, at_zero, general)
}
