//! Complex tensors (Nx's `c64` and `c128`): a float primitive (f32 for c64, f64 for c128)
//! with a trailing axis of 2, the real and the imaginary part of each element (Nx's binary
//! layout). The linear ops (shapes, indexing, sums, windowed sums) run on each part as real
//! tensors; the field's arithmetic ([`Cx`]) combines the parts for products, quotients, the
//! elementary functions (`elementary`), the matrix ops and products (`linalg`) and the
//! FFT (`spectral`).
use burn_backend::{DType, Slice};
use crate::ops::Extension;

use super::any;
use super::elementwise::binary;
use super::{Out, dispatch};
use crate::error::{NifError, NifResult};
use crate::opts::{OptVal, Opts};
use crate::tensor::Prim;

mod elementary;
mod linalg;
mod spectral;

/// The part dtype of Nx type `name` when it is complex.
pub fn part_of(name: &str) -> Option<DType> {
    match name {
        "c64" => Some(DType::F32),
        "c128" => Some(DType::F64),
        _ => None,
    }
}

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

/// A complex value as its real and imaginary parts, each of the Nx shape.
pub type Z<B> = (Prim<B>, Prim<B>);

/// The real and imaginary parts of a complex primitive, each of its Nx shape.
pub fn parts<B: Extension>(p: Prim<B>) -> Z<B> {
    let dims = p.shape().to_vec();
    let r = dims.len();
    let shape = &dims[..r - 1];
    let pick = |i: usize| -> Vec<Slice> {
        (0..r).map(|d| if d == r - 1 { any::range(i, 1, 1) } else { any::range(0, dims[d], 1) }).collect()
    };
    (any::reshape(any::slice(p.clone(), &pick(0)), shape), any::reshape(any::slice(p, &pick(1)), shape))
}

/// The complex primitive of parts `re` and `im` (of one shape), as parts of dtype `part`.
pub fn join<B: Extension>(op: &str, part: DType, (re, im): Z<B>) -> NifResult<Prim<B>> {
    let mut shape = re.shape().to_vec();
    shape.push(1);
    let re = any::reshape(any::cast(op, re, part)?, &shape);
    let im = any::reshape(any::cast(op, im, part)?, &shape);
    Ok(any::cat(vec![re, im], shape.len() - 1))
}

/// `p` as complex parts of dtype `part`: a complex input split, a real one with a zero
/// imaginary part.
fn lift<B: Extension>(op: &str, p: Prim<B>, complex: bool, part: DType) -> NifResult<Z<B>> {
    if complex {
        let (re, im) = parts(p);
        return Ok((any::cast(op, re, part)?, any::cast(op, im, part)?));
    }
    let re = any::cast(op, p, part)?;
    let zeros = any::full::<B>(re.shape().as_slice(), part, 0.0, &re.device());
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

/// Complex callback `callback`: `out` is the result's Nx shape with the part dtype when the
/// result is complex (`complex_out`), its own dtype otherwise.
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
    // The parts' dtype: the result's when it is complex, else the complex input's (irfft of
    // a real spectrum: the result's precision).
    let part = if complex_out {
        out.dtype
    } else {
        let wide = if out.dtype == DType::F64 { DType::F64 } else { DType::F32 };
        inputs.iter().zip(flags).find(|(_, c)| **c).map_or(wide, |(p, _)| p.dtype())
    };
    let real = Out { dtype: part, shape: out.shape.clone() };
    if LINEAR.contains(&callback) && complex_out {
        let (mut res, mut ims) = (Vec::new(), Vec::new());
        for (i, (p, &c)) in inputs.into_iter().zip(flags).enumerate() {
            if is_data(callback, i) {
                let (re, im) = lift(op, p, c, part)?;
                res.push(re);
                ims.push(im);
            } else {
                res.push(p.clone());
                ims.push(p);
            }
        }
        let re = dispatch::<B>(callback, res, &real, opts, device)?;
        let im = dispatch::<B>(callback, ims, &real, opts, device)?;
        return re.into_iter().zip(im).map(|(r, i)| join(op, part, (r, i))).collect();
    }
    let cx = Cx::<B>::new(part, &out.shape, device);
    let result = match (callback, inputs.len()) {
        ("constant", 0) => {
            let im = Opts(vec![("value".into(), OptVal::Float(opts.float(op, "imag", Some(0.0))?))]);
            let re = dispatch::<B>("constant", vec![], &real, opts, device)?.remove(0);
            let im = dispatch::<B>("constant", vec![], &real, &im, device)?.remove(0);
            join(op, part, (re, im))?
        }
        ("eye" | "iota", 0) => {
            let re = dispatch::<B>(callback, vec![], &real, opts, device)?.remove(0);
            join(op, part, (re, cx.zeros()))?
        }
        ("product" | "cumulative_product", 1) => {
            let z = lift(op, inputs.into_iter().next().unwrap(), flags[0], part)?;
            join(op, part, linalg::product::<B>(op, &cx, z, opts)?)?
        }
        (_, 1) => {
            let z = lift(op, inputs.into_iter().next().unwrap(), flags[0], part)?;
            if matches!(op, "fft" | "ifft" | "fft2" | "ifft2" | "rfft" | "irfft") {
                spectral::run::<B>(op, &cx, z, out, opts)?
            } else {
                elementary::unary::<B>(op, &cx, z, out, complex_out)?
            }
        }
        (_, 2) => {
            let mut it = inputs.into_iter();
            let a = lift(op, it.next().unwrap(), flags[0], part)?;
            let b = lift(op, it.next().unwrap(), flags[1], part)?;
            if matches!(op, "dot" | "conv" | "triangular_solve") {
                join(op, part, linalg::run::<B>(op, &cx, a, b, opts, device)?)?
            } else {
                elementary::binary::<B>(op, &cx, a, b, out, complex_out)?
            }
        }
        _ => return Err(unsupported(op, out)),
    };
    Ok(vec![result])
}

pub(super) fn unsupported(op: &str, out: &Out) -> NifError {
    NifError::new(op, "is not supported for complex tensors", out.describe())
}

/// The field's arithmetic on parts of one float dtype, broadcast to one shape (the result's).
pub struct Cx<B: Extension> {
    pub real: Out,
    pub device: B::Device,
}

impl<B: Extension> Cx<B> {
    pub fn new(part: DType, shape: &[usize], device: &B::Device) -> Self {
        Cx { real: Out { dtype: part, shape: shape.to_vec() }, device: device.clone() }
    }

    /// The same arithmetic on `shape`.
    pub fn at(&self, shape: &[usize]) -> Self {
        Cx::new(self.real.dtype, shape, &self.device)
    }

    pub fn part(&self) -> DType {
        self.real.dtype
    }

    /// Real binary `op` on two parts.
    pub fn f(&self, op: &str, a: Prim<B>, b: Prim<B>) -> NifResult<Prim<B>> {
        binary::<B>(op, a, b, &self.real, self.real.dtype)
    }

    /// Real unary `op` on a part.
    pub fn u(&self, op: &str, x: Prim<B>) -> NifResult<Prim<B>> {
        super::elementwise::unary::<B>(op, x, &self.real)
    }

    /// A real constant that broadcasts to the shape (of the shape's rank, so rank 0 too).
    pub fn k(&self, v: f64) -> Prim<B> {
        any::full::<B>(&vec![1; self.real.shape.len()], self.real.dtype, v, &self.device)
    }

    pub fn zeros(&self) -> Prim<B> {
        any::full::<B>(&self.real.shape, self.real.dtype, 0.0, &self.device)
    }

    pub fn c(&self, re: f64, im: f64) -> Z<B> {
        (self.k(re), self.k(im))
    }

    pub fn add(&self, (a, b): Z<B>, (c, d): Z<B>) -> NifResult<Z<B>> {
        Ok((self.f("add", a, c)?, self.f("add", b, d)?))
    }

    pub fn sub(&self, (a, b): Z<B>, (c, d): Z<B>) -> NifResult<Z<B>> {
        Ok((self.f("subtract", a, c)?, self.f("subtract", b, d)?))
    }

    pub fn neg(&self, (a, b): Z<B>) -> NifResult<Z<B>> {
        Ok((self.u("negate", a)?, self.u("negate", b)?))
    }

    /// `(a + bi)(c + di) = (ac - bd) + (ad + bc) i`
    pub fn mul(&self, (a, b): Z<B>, (c, d): Z<B>) -> NifResult<Z<B>> {
        let re = self.f("subtract", self.f("multiply", a.clone(), c.clone())?, self.f("multiply", b.clone(), d.clone())?)?;
        let im = self.f("add", self.f("multiply", a, d)?, self.f("multiply", b, c)?)?;
        Ok((re, im))
    }

    /// `(a + bi) / (c + di) = ((ac + bd) + (bc - ad) i) / (c² + d²)`, as `Complex.divide`.
    pub fn div(&self, (a, b): Z<B>, (c, d): Z<B>) -> NifResult<Z<B>> {
        let norm = self.f("add", self.f("multiply", c.clone(), c.clone())?, self.f("multiply", d.clone(), d.clone())?)?;
        let re = self.f("add", self.f("multiply", a.clone(), c.clone())?, self.f("multiply", b.clone(), d.clone())?)?;
        let im = self.f("subtract", self.f("multiply", b, c)?, self.f("multiply", a, d)?)?;
        Ok((self.f("divide", re, norm.clone())?, self.f("divide", im, norm)?))
    }

    /// `z` times a real factor.
    pub fn scale(&self, (a, b): Z<B>, s: f64) -> NifResult<Z<B>> {
        Ok((self.f("multiply", a, self.k(s))?, self.f("multiply", b, self.k(s))?))
    }

    /// `i z = -b + a i`
    pub fn times_i(&self, (a, b): Z<B>) -> NifResult<Z<B>> {
        Ok((self.u("negate", b)?, a))
    }

    /// `|z|`
    pub fn abs(&self, (a, b): Z<B>) -> NifResult<Prim<B>> {
        let sq = self.f("add", self.f("multiply", a.clone(), a)?, self.f("multiply", b.clone(), b)?)?;
        self.u("sqrt", sq)
    }

    /// The phase, `atan2(b, a)`.
    pub fn phase(&self, (a, b): Z<B>) -> NifResult<Prim<B>> {
        self.f("atan2", b, a)
    }

    /// `r (cos θ + i sin θ)`
    pub fn polar(&self, r: Prim<B>, theta: Prim<B>) -> NifResult<Z<B>> {
        Ok((self.f("multiply", r.clone(), self.u("cos", theta.clone())?)?, self.f("multiply", r, self.u("sin", theta)?)?))
    }

    /// `e^(a + bi) = e^a (cos b + i sin b)`
    pub fn exp(&self, (a, b): Z<B>) -> NifResult<Z<B>> {
        self.polar(self.u("exp", a)?, b)
    }

    /// `log z = log |z| + i arg z` (the principal branch, `Complex.log`).
    pub fn log(&self, z: Z<B>) -> NifResult<Z<B>> {
        Ok((self.u("log", self.abs(z.clone())?)?, self.phase(z)?))
    }

    /// `sqrt z = sqrt |z| (cos θ/2 + i sin θ/2)` (the principal branch).
    pub fn sqrt(&self, z: Z<B>) -> NifResult<Z<B>> {
        let r = self.u("sqrt", self.abs(z.clone())?)?;
        let half = self.f("multiply", self.phase(z)?, self.k(0.5))?;
        self.polar(r, half)
    }

    /// A mask of where `cond` (a u8 or bool part) holds, to pick between two values.
    pub fn pick(&self, cond: Prim<B>, (a, b): Z<B>, (c, d): Z<B>) -> NifResult<Z<B>> {
        let shape = &self.real.shape;
        let cond = any::broadcast_to("select", cond, shape)?;
        let full = |p: Prim<B>| any::broadcast_to("select", p, shape);
        let re = any::select_where(any::nonzero(cond.clone()), full(a)?, full(c)?);
        Ok((re, any::select_where(any::nonzero(cond), full(b)?, full(d)?)))
    }
}
