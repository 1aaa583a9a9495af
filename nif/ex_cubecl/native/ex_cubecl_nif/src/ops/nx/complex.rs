//! Complex tensors (Nx's `c64`): an f32 primitive with a trailing axis of 2 (the real and the
//! imaginary part of each element, Nx's binary layout). The linear ops (shapes, indexing,
//! sums, windowed sums) run on each part as real tensors; products, quotients, the
//! elementary functions, `dot` and the FFT combine the parts.
use burn_backend::{DType, Slice};
use crate::ops::Extension;

use super::any;
use super::elementwise::binary;
use super::{Out, dispatch};
use crate::error::{NifError, NifResult};
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

/// Which inputs are complex (option `complex`, one flag per input; absent: none).
pub fn flags(op: &str, opts: &Opts, n: usize) -> NifResult<Vec<bool>> {
    match opts.get("complex") {
        None => Ok(vec![false; n]),
        Some(OptVal::List(items)) if items.len() == n => {
            Ok(items.iter().map(|v| matches!(v, OptVal::Bool(true))).collect())
        }
        Some(other) => Err(NifError::new(op, "option complex must hold one flag per input", format!("{other:?} for {n} inputs"))),
    }
}

/// The real and imaginary parts of a complex primitive, each of its Nx shape.
pub fn parts<B: Extension>(p: Prim<B>) -> (Prim<B>, Prim<B>) {
    let dims = p.shape().to_vec();
    let r = dims.len();
    let shape = &dims[..r - 1];
    let pick = |i: usize| -> Vec<Slice> {
        (0..r).map(|d| if d == r - 1 { any::range(i, 1, 1) } else { any::range(0, dims[d], 1) }).collect()
    };
    (any::reshape(any::slice(p.clone(), &pick(0)), shape), any::reshape(any::slice(p, &pick(1)), shape))
}

/// The complex primitive of parts `re` and `im` (f32, one shape).
pub fn join<B: Extension>(op: &str, re: Prim<B>, im: Prim<B>) -> NifResult<Prim<B>> {
    let mut shape = re.shape().to_vec();
    shape.push(1);
    let re = any::reshape(any::cast(op, re, DType::F32)?, &shape);
    let im = any::reshape(any::cast(op, im, DType::F32)?, &shape);
    Ok(any::cat(vec![re, im], shape.len() - 1))
}

/// `p` as complex parts: a complex input split, a real one with a zero imaginary part.
fn lift<B: Extension>(op: &str, p: Prim<B>, complex: bool) -> NifResult<(Prim<B>, Prim<B>)> {
    if complex {
        return Ok(parts(p));
    }
    let re = any::cast(op, p, DType::F32)?;
    let zeros = any::full::<B>(re.shape().as_slice(), DType::F32, 0.0, &re.device());
    Ok((re, zeros))
}

/// The inputs of `callback` that hold data (the others: predicates, indices, start indices).
fn is_data(callback: &str, i: usize) -> bool {
    match callback {
        "select" => i > 0,
        "gather" | "take" | "take_along_axis" | "slice" => i == 0,
        "indexed_add" | "indexed_put" => i != 1,
        "put_slice" => i < 2,
        _ => true,
    }
}

/// The callbacks that act on the real and imaginary parts independently.
const LINEAR: &[&str] = &[
    "reshape", "broadcast", "transpose", "pad", "reverse", "concatenate", "stack", "slice", "put_slice", "select", "copy",
    "gather", "indexed_add", "indexed_put", "take", "take_along_axis", "sum", "cumulative_sum", "window_sum", "to_batched",
];

pub fn run<B: Extension>(
    callback: &str,
    inputs: Vec<Prim<B>>,
    flags: &[bool],
    out: &Out,
    complex_out: bool,
    opts: &Opts,
    device: &B::Device,
) -> NifResult<Vec<Prim<B>>> {
    let op = callback;
    let real = Out { dtype: DType::F32, shape: out.shape.clone() };
    let unsupported = || NifError::new(op, "is not supported for complex tensors (c64) yet", out.describe());
    if LINEAR.contains(&callback) && complex_out {
        let (mut res, mut ims) = (Vec::new(), Vec::new());
        for (i, (p, &c)) in inputs.into_iter().zip(flags).enumerate() {
            if is_data(callback, i) {
                let (re, im) = lift(op, p, c)?;
                res.push(re);
                ims.push(im);
            } else {
                res.push(p.clone());
                ims.push(p);
            }
        }
        let re = dispatch::<B>(callback, res, &real, opts, device)?;
        let im = dispatch::<B>(callback, ims, &real, opts, device)?;
        return re.into_iter().zip(im).map(|(r, i)| join(op, r, i)).collect();
    }
    let result = match (callback, inputs.len()) {
        ("constant", 0) => {
            let im = Opts(vec![("value".into(), OptVal::Float(opts.float(op, "imag", Some(0.0))?))]);
            let re = dispatch::<B>("constant", vec![], &real, opts, device)?.remove(0);
            let im = dispatch::<B>("constant", vec![], &real, &im, device)?.remove(0);
            join(op, re, im)?
        }
        ("eye" | "iota", 0) => {
            let re = dispatch::<B>(callback, vec![], &real, opts, device)?.remove(0);
            let zeros = any::full::<B>(&out.shape, DType::F32, 0.0, device);
            join(op, re, zeros)?
        }
        (_, 1) => unary::<B>(op, inputs.into_iter().next().unwrap(), flags[0], out, complex_out, opts)?,
        ("dot", 2) => {
            let mut it = inputs.into_iter();
            let (ar, ai) = lift(op, it.next().unwrap(), flags[0])?;
            let (br, bi) = lift(op, it.next().unwrap(), flags[1])?;
            let d = |a: Prim<B>, b: Prim<B>| dispatch::<B>("dot", vec![a, b], &real, opts, device).map(|mut v| v.remove(0));
            let re = binary::<B>("subtract", d(ar.clone(), br.clone())?, d(ai.clone(), bi.clone())?, &real, DType::F32)?;
            let im = binary::<B>("add", d(ar, bi)?, d(ai, br)?, &real, DType::F32)?;
            join(op, re, im)?
        }
        (_, 2) => {
            let mut it = inputs.into_iter();
            let (ar, ai) = lift(op, it.next().unwrap(), flags[0])?;
            let (br, bi) = lift(op, it.next().unwrap(), flags[1])?;
            binary_op::<B>(op, (ar, ai), (br, bi), &real, out, complex_out)?
        }
        _ => return Err(unsupported()),
    };
    Ok(vec![result])
}

type Parts<B> = (Prim<B>, Prim<B>);

fn f<B: Extension>(op: &str, a: Prim<B>, b: Prim<B>, real: &Out) -> NifResult<Prim<B>> {
    binary::<B>(op, a, b, real, DType::F32)
}

fn u<B: Extension>(op: &str, x: Prim<B>, real: &Out) -> NifResult<Prim<B>> {
    super::elementwise::unary::<B>(op, x, real)
}

fn binary_op<B: Extension>(op: &str, (ar, ai): Parts<B>, (br, bi): Parts<B>, real: &Out, out: &Out, complex_out: bool) -> NifResult<Prim<B>> {
    let result = match op {
        "add" | "subtract" => (f(op, ar, br, real)?, f(op, ai, bi, real)?),
        "multiply" => mul::<B>((ar, ai), (br, bi), real)?,
        "divide" => {
            // (a + bi) / (c + di) = ((ac + bd) + (bc - ad) i) / (c² + d²)
            let norm = f("add", f("multiply", br.clone(), br.clone(), real)?, f("multiply", bi.clone(), bi.clone(), real)?, real)?;
            let re = f("add", f("multiply", ar.clone(), br.clone(), real)?, f("multiply", ai.clone(), bi.clone(), real)?, real)?;
            let im = f("subtract", f("multiply", ai, br, real)?, f("multiply", ar, bi, real)?, real)?;
            (f("divide", re, norm.clone(), real)?, f("divide", im, norm, real)?)
        }
        "pow" => {
            // a^b = exp(b log a)
            let l = log::<B>((ar, ai), real)?;
            let p = mul::<B>(l, (br, bi), real)?;
            exp::<B>(p, real)?
        }
        "equal" | "not_equal" => {
            let (both, part) = if op == "equal" { ("logical_and", "equal") } else { ("logical_or", "not_equal") };
            let r = f(both, f(part, ar, br, real)?, f(part, ai, bi, real)?, real)?;
            return any::cast(op, r, out.dtype);
        }
        _ => return Err(NifError::new(op, "is not supported for complex tensors (c64) yet", out.describe())),
    };
    if !complex_out {
        return Err(NifError::new(op, "internal: a complex op without a complex result", out.describe()));
    }
    join(op, result.0, result.1)
}

fn mul<B: Extension>((ar, ai): Parts<B>, (br, bi): Parts<B>, real: &Out) -> NifResult<Parts<B>> {
    // (a + bi)(c + di) = (ac - bd) + (ad + bc) i
    let re = f("subtract", f("multiply", ar.clone(), br.clone(), real)?, f("multiply", ai.clone(), bi.clone(), real)?, real)?;
    let im = f("add", f("multiply", ar, bi, real)?, f("multiply", ai, br, real)?, real)?;
    Ok((re, im))
}

fn exp<B: Extension>((re, im): Parts<B>, real: &Out) -> NifResult<Parts<B>> {
    let m = u("exp", re, real)?;
    Ok((f("multiply", m.clone(), u("cos", im.clone(), real)?, real)?, f("multiply", m, u("sin", im, real)?, real)?))
}

fn abs<B: Extension>((re, im): Parts<B>, real: &Out) -> NifResult<Prim<B>> {
    let sq = f("add", f("multiply", re.clone(), re, real)?, f("multiply", im.clone(), im, real)?, real)?;
    u("sqrt", sq, real)
}

fn log<B: Extension>((re, im): Parts<B>, real: &Out) -> NifResult<Parts<B>> {
    let angle = f("atan2", im.clone(), re.clone(), real)?;
    Ok((u("log", abs::<B>((re, im), real)?, real)?, angle))
}

/// Callbacks of one tensor with a complex input or result.
fn unary<B: Extension>(op: &str, x: Prim<B>, complex: bool, out: &Out, complex_out: bool, opts: &Opts) -> NifResult<Prim<B>> {
    let real = Out { dtype: DType::F32, shape: out.shape.clone() };
    let (re, im) = lift(op, x, complex)?;
    let pair = |p: Parts<B>| join(op, p.0, p.1);
    match op {
        "real" => any::cast(op, re, out.dtype),
        "imag" => any::cast(op, im, out.dtype),
        "abs" => any::cast(op, abs::<B>((re, im), &real)?, out.dtype),
        "is_nan" | "is_infinity" => {
            let flag = Out { dtype: DType::U8, shape: out.shape.clone() };
            let r = binary::<B>("logical_or", u(op, re, &flag)?, u(op, im, &flag)?, &flag, DType::U8)?;
            any::cast(op, r, out.dtype)
        }
        "as_type" if complex_out => pair((re, im)),
        "as_type" => super::shape::as_type::<B>(op, re, out.dtype),
        "conjugate" => pair((re, u("negate", im, &real)?)),
        "negate" => pair((u("negate", re, &real)?, u("negate", im, &real)?)),
        "exp" => pair(exp::<B>((re, im), &real)?),
        "log" => pair(log::<B>((re, im), &real)?),
        "sqrt" => {
            // sqrt(z) = sqrt(|z|) (cos(θ/2) + i sin(θ/2))
            let m = u("sqrt", abs::<B>((re.clone(), im.clone()), &real)?, &real)?;
            let half = f("multiply", f("atan2", im, re, &real)?, any::full::<B>(&[1], DType::F32, 0.5, &m.device()), &real)?;
            pair((f("multiply", m.clone(), u("cos", half.clone(), &real)?, &real)?, f("multiply", m, u("sin", half, &real)?, &real)?))
        }
        "sin" => {
            // sin(a + bi) = sin a cosh b + i cos a sinh b
            let re2 = f("multiply", u("sin", re.clone(), &real)?, u("cosh", im.clone(), &real)?, &real)?;
            let im2 = f("multiply", u("cos", re, &real)?, u("sinh", im, &real)?, &real)?;
            pair((re2, im2))
        }
        "cos" => {
            // cos(a + bi) = cos a cosh b - i sin a sinh b
            let re2 = f("multiply", u("cos", re.clone(), &real)?, u("cosh", im.clone(), &real)?, &real)?;
            let im2 = u("negate", f("multiply", u("sin", re, &real)?, u("sinh", im, &real)?, &real)?, &real)?;
            pair((re2, im2))
        }
        "fft" | "ifft" => fft::<B>(op, (re, im), out, opts),
        "fft2" | "ifft2" | "rfft" | "irfft" => spectral::<B>(op, (re, im), out, opts),
        _ => Err(NifError::new(op, "is not supported for complex tensors (c64) yet", out.describe())),
    }
}

/// `fft` / `ifft` along the `axis` option, to the length `out` has there.
fn fft<B: Extension>(op: &str, (re, im): Parts<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let axis = super::super::resolve_axis(op, opts.int(op, "axis", Some(-1))?, re.shape().num_dims())?;
    let eps = opts.float(op, "eps", Some(1.0e-10))?;
    let (re, im) = dft::<B>((re, im), axis, out.shape[axis], eps, op == "ifft")?;
    join(op, re, im)
}

/// The spectral blocks: `fft2` / `ifft2` (the `axes`, second axis first, to `lengths`),
/// `rfft` (the first `length / 2 + 1` terms of a real signal's DFT) and `irfft` (the real
/// signal of a one-sided spectrum: fitted to `length / 2 + 1` terms, completed by conjugate
/// symmetry, inverted), as Nx's default implementations compose them.
fn spectral<B: Extension>(op: &str, (re, im): Parts<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let rank = re.shape().num_dims();
    let eps = opts.float(op, "eps", Some(1.0e-10))?;
    let axis = |key: &str, i: usize| -> NifResult<usize> {
        let axes = opts.ints(op, key, None)?;
        let a = *axes.get(i).ok_or_else(|| NifError::new(op, format!("needs {key}"), out.describe()))?;
        super::super::resolve_axis(op, a, rank)
    };
    match op {
        "fft2" | "ifft2" => {
            let (a1, a2) = (axis("axes", 0)?, axis("axes", 1)?);
            let inverse = op == "ifft2";
            let p = dft::<B>((re, im), a2, out.shape[a2], eps, inverse)?;
            let (re, im) = dft::<B>(p, a1, out.shape[a1], eps, inverse)?;
            join(op, re, im)
        }
        "rfft" => {
            let a = axis("axis", 0)?;
            let n = opts.int(op, "length", None)? as usize;
            let (re, im) = dft::<B>((re, im), a, n, eps, false)?;
            let half = |p: Prim<B>| any::slice(p.clone(), &cut(&p, a, 0, n / 2 + 1));
            join(op, half(re), half(im))
        }
        _ => {
            let a = axis("axis", 0)?;
            let n = out.shape[a];
            let m = n / 2 + 1;
            let fit = |p: Prim<B>| -> Prim<B> {
                let have = p.shape()[a];
                if have >= m {
                    return any::slice(p.clone(), &cut(&p, a, 0, m));
                }
                let mut shape = p.shape().to_vec();
                shape[a] = m - have;
                let zeros = any::full::<B>(&shape, DType::F32, 0.0, &p.device());
                any::cat(vec![p, zeros], a)
            };
            let (re, im) = (fit(re), fit(im));
            // Terms m..n are the conjugates of terms n-m..1, in reverse.
            let full = if n > m {
                let mirror = |p: Prim<B>| any::flip(any::slice(p.clone(), &cut(&p, a, 1, n - m + 1)), &[a]);
                let real = Out { dtype: DType::F32, shape: mirror(im.clone()).shape().to_vec() };
                let (mr, mi) = (mirror(re.clone()), u("negate", mirror(im.clone()), &real)?);
                (any::cat(vec![re, mr], a), any::cat(vec![im, mi], a))
            } else {
                (re, im)
            };
            let (re, _) = dft::<B>(full, a, n, eps, true)?;
            any::cast(op, re, out.dtype)
        }
    }
}

/// Slices `lo..hi` of `p`'s axis `axis`, all of the others.
fn cut<B: Extension>(p: &Prim<B>, axis: usize, lo: usize, hi: usize) -> Vec<Slice> {
    p.shape().iter().enumerate().map(|(d, &s)| if d == axis { any::range(lo, hi - lo, 1) } else { any::range(0, s, 1) }).collect()
}

/// The DFT (or its inverse) along `axis`, after padding with zeros or cutting to `n`, as two
/// real products with the cosine and sine tables (computed on the host in f64). Parts within
/// `eps` of zero become zero, as Nx's BinaryBackend cleans them.
fn dft<B: Extension>((re, im): Parts<B>, axis: usize, n: usize, eps: f64, inverse: bool) -> NifResult<Parts<B>> {
    let rank = re.shape().num_dims();
    let device = re.device();
    // Move the axis last, fit it to n.
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let fit = |p: Prim<B>| -> NifResult<Prim<B>> {
        let p = any::permute(p, &perm);
        let mut shape = p.shape().to_vec();
        let have = shape[rank - 1];
        if have >= n {
            let cut: Vec<Slice> = shape.iter().enumerate().map(|(d, &s)| any::range(0, if d == rank - 1 { n } else { s }, 1)).collect();
            return Ok(any::slice(p, &cut));
        }
        shape[rank - 1] = n - have;
        let zeros = any::full::<B>(&shape, DType::F32, 0.0, &p.device());
        Ok(any::cat(vec![p, zeros], rank - 1))
    };
    let (re, im) = (fit(re)?, fit(im)?);
    let lead: Vec<usize> = re.shape()[..rank - 1].to_vec();
    let rows: usize = lead.iter().product();
    let (re, im) = (any::reshape(re, &[rows, n]), any::reshape(im, &[rows, n]));
    // Tables: cos and sin of 2π (j k mod n) / n.
    let mut cos = Vec::with_capacity(n * n);
    let mut sin = Vec::with_capacity(n * n);
    for j in 0..n {
        for k in 0..n {
            let angle = 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
            cos.push(angle.cos() as f32);
            sin.push(angle.sin() as f32);
        }
    }
    let table = |v: Vec<f32>| Prim::Float(B::float_from_data(burn_backend::TensorData::new(v, [n, n]), &device));
    let (c, s) = (table(cos), table(sin));
    let mm = |a: Prim<B>, b: Prim<B>| Prim::<B>::Float(B::float_matmul(any::float::<B>(a), any::float::<B>(b)));
    let (rc, rs, ic, is) = (mm(re.clone(), c.clone()), mm(re, s.clone()), mm(im.clone(), c), mm(im, s));
    let flat = Out { dtype: DType::F32, shape: vec![rows, n] };
    // Forward: X = Σ x e^{-iθ}: re = rc + is, im = ic - rs. Inverse: e^{+iθ} / n.
    let (xr, xi) = if inverse {
        let scale = any::full::<B>(&[1], DType::F32, 1.0 / n as f64, &device);
        (
            f("multiply", f("subtract", rc, is, &flat)?, scale.clone(), &flat)?,
            f("multiply", f("add", ic, rs, &flat)?, scale, &flat)?,
        )
    } else {
        (f("add", rc, is, &flat)?, f("subtract", ic, rs, &flat)?)
    };
    let clean = |p: Prim<B>| -> NifResult<Prim<B>> {
        let small = f("less_equal", u("abs", p.clone(), &flat)?, any::full::<B>(&[1], DType::F32, eps, &device), &Out { dtype: DType::U8, shape: flat.shape.clone() })?;
        Ok(any::select_where(any::nonzero(small), any::full::<B>(&flat.shape, DType::F32, 0.0, &device), p))
    };
    let (xr, xi) = (clean(xr)?, clean(xi)?);
    let mut shape = lead;
    shape.push(n);
    let mut back = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        back[p] = i;
    }
    let restore = |p: Prim<B>| any::permute(any::reshape(p, &shape), &back);
    Ok((restore(xr), restore(xi)))
}

