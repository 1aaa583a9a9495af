//! Complex products: `dot` and `conv` (each four real products), `triangular_solve` (the real
//! substitution over the field of complex parts), and the `product` and
//! `cumulative_product` reductions (pairwise products in a tree, and a scan by doubling).
use burn_backend::{DType, Slice};
use crate::ops::Extension;

use super::super::linalg::{Field, solve_triangular, triangular_options};
use super::super::shape::axes;
use super::super::{any, dispatch};
use super::{Cx, Z};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

/// `dot`, `conv` and `triangular_solve` of complex `a` and `b` (parts of `cx`'s dtype).
pub fn run<B: Extension>(op: &str, cx: &Cx<B>, a: Z<B>, b: Z<B>, opts: &Opts, device: &B::Device) -> NifResult<Z<B>> {
    if op == "triangular_solve" {
        let (left, lower, transpose) = triangular_options(op, opts)?;
        let a = if opts.name(op, "transform_a", Some("none"))? == "conjugate" { (a.0, cx.at(a.1.shape().as_slice()).u("negate", a.1)?) } else { a };
        let (ta, tb) = (Complex { z: a, part: cx.part() }, Complex { z: b, part: cx.part() });
        let x = solve_triangular::<B, _>(ta, tb, left, lower, transpose)?;
        return Ok((any::reshape(x.z.0, &cx.real.shape), any::reshape(x.z.1, &cx.real.shape)));
    }
    // (a + bi) ⊗ (c + di) = (a⊗c - b⊗d) + (a⊗d + b⊗c) i, for the bilinear dot and conv.
    let p = |x: Prim<B>, y: Prim<B>| dispatch::<B>(op, vec![x, y], &cx.real, opts, device).map(|mut v| v.remove(0));
    let re = cx.f("subtract", p(a.0.clone(), b.0.clone())?, p(a.1.clone(), b.1.clone())?)?;
    let im = cx.f("add", p(a.0, b.1)?, p(a.1, b.0)?)?;
    Ok((re, im))
}

/// A complex tensor as a field for the substitution.
#[derive(Clone)]
struct Complex<B: Extension> {
    z: Z<B>,
    part: DType,
}

impl<B: Extension> Complex<B> {
    fn cx(&self) -> Cx<B> {
        Cx::new(self.part, self.z.0.shape().as_slice(), &self.z.0.device())
    }
}

impl<B: Extension> Field<B> for Complex<B> {
    fn map(self, f: &dyn Fn(Prim<B>) -> Prim<B>) -> Self {
        Complex { z: (f(self.z.0), f(self.z.1)), part: self.part }
    }
    fn zip(self, other: Self, f: &dyn Fn(Prim<B>, Prim<B>) -> Prim<B>) -> Self {
        Complex { z: (f(self.z.0, other.z.0), f(self.z.1, other.z.1)), part: self.part }
    }
    fn dims(&self) -> Vec<usize> {
        self.z.0.shape().to_vec()
    }
    fn zeros(&self, shape: &[usize]) -> Self {
        let zero = any::full::<B>(shape, self.part, 0.0, &self.z.0.device());
        Complex { z: (zero.clone(), zero), part: self.part }
    }
    fn matmul(self, other: Self) -> NifResult<Self> {
        let mm = |a: Prim<B>, b: Prim<B>| Prim::<B>::Float(B::float_matmul(any::float::<B>(a), any::float::<B>(b)));
        let ((a, b), (c, d)) = (self.z, other.z);
        let (ac, bd, ad, bc) = (mm(a.clone(), c.clone()), mm(b.clone(), d.clone()), mm(a, d), mm(b, c));
        let cx = Cx::<B>::new(self.part, ac.shape().as_slice(), &ac.device());
        Ok(Complex { z: (cx.f("subtract", ac, bd)?, cx.f("add", ad, bc)?), part: self.part })
    }
    fn sub(self, other: Self) -> NifResult<Self> {
        Ok(Complex { z: self.cx().sub(self.z, other.z)?, part: self.part })
    }
    fn div(self, other: Self) -> NifResult<Self> {
        Ok(Complex { z: self.cx().div(self.z, other.z)?, part: self.part })
    }
}

/// `product` over the `axes` option, or `cumulative_product` along `axis`.
pub fn product<B: Extension>(op: &str, cx: &Cx<B>, z: Z<B>, opts: &Opts) -> NifResult<Z<B>> {
    if op == "cumulative_product" {
        let axis = opts.int(op, "axis", None)? as usize;
        if opts.bool(op, "reverse", false)? {
            let flip = |(a, b): Z<B>| (any::flip(a, &[axis]), any::flip(b, &[axis]));
            return Ok(flip(scan::<B>(cx, flip(z), axis)?));
        }
        return scan::<B>(cx, z, axis);
    }
    let dims = z.0.shape().to_vec();
    let reduced = axes(op, opts, "axes")?;
    if let Some(&bad) = reduced.iter().find(|&&a| a >= dims.len()) {
        return Err(NifError::new(op, format!("axis {bad} is out of range"), format!("{dims:?}")));
    }
    // The reduced axes last, as one axis of n terms per row.
    let kept: Vec<usize> = (0..dims.len()).filter(|a| !reduced.contains(a)).collect();
    let rows: usize = kept.iter().map(|&a| dims[a]).product();
    let mut n: usize = reduced.iter().map(|&a| dims[a]).product();
    let perm = [kept, reduced].concat();
    let flat = |p: Prim<B>| any::reshape(any::permute(p, &perm), &[rows, n]);
    let mut z = (flat(z.0), flat(z.1));
    if n == 0 {
        return Ok(cx.pick(cx.k(1.0), cx.c(1.0, 0.0), cx.c(0.0, 0.0))?);
    }
    while n > 1 {
        if n % 2 == 1 {
            let one = |v: f64| any::full::<B>(&[rows, 1], cx.part(), v, &cx.device);
            z = (any::cat(vec![z.0, one(1.0)], 1), any::cat(vec![z.1, one(0.0)], 1));
            n += 1;
        }
        let h = n / 2;
        let half = |p: &Prim<B>, lo: usize| any::slice(p.clone(), &[any::range(0, rows, 1), any::range(lo, h, 1)]);
        z = cx.at(&[rows, h]).mul((half(&z.0, 0), half(&z.1, 0)), (half(&z.0, h), half(&z.1, h)))?;
        n = h;
    }
    Ok((any::reshape(z.0, &cx.real.shape), any::reshape(z.1, &cx.real.shape)))
}

/// The running products along `axis`: after the steps of 1, 2, 4, ... each term holds the
/// product of itself and the terms before it.
fn scan<B: Extension>(cx: &Cx<B>, mut z: Z<B>, axis: usize) -> NifResult<Z<B>> {
    let dims = z.0.shape().to_vec();
    let n = dims[axis];
    let along = |lo: usize, len: usize| -> Vec<Slice> {
        dims.iter().enumerate().map(|(d, &s)| if d == axis { any::range(lo, len, 1) } else { any::range(0, s, 1) }).collect()
    };
    let mut step = 1;
    while step < n {
        let mut pad = dims.clone();
        pad[axis] = step;
        let shifted = |p: &Prim<B>, v: f64| any::cat(vec![any::full::<B>(&pad, cx.part(), v, &cx.device), any::slice(p.clone(), &along(0, n - step))], axis);
        let before = (shifted(&z.0, 1.0), shifted(&z.1, 0.0));
        z = cx.mul(z, before)?;
        step *= 2;
    }
    Ok(z)
}
