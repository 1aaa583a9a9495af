//! The discrete Fourier transforms of complex tensors: `fft` / `ifft` along an axis, and the
//! spectral blocks `fft2` / `ifft2` / `rfft` / `irfft`, as Nx's default implementations
//! compose them.
use burn_backend::{DType, Slice, TensorData};
use crate::ops::Extension;

use super::super::{Out, any};
use super::{Cx, Z, join};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub fn run<B: Extension>(op: &str, cx: &Cx<B>, z: Z<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let rank = z.0.shape().num_dims();
    let eps = opts.float(op, "eps", Some(1.0e-10))?;
    let axis = |key: &str, i: usize| -> NifResult<usize> {
        let axes = opts.ints(op, key, None)?;
        let a = *axes.get(i).ok_or_else(|| NifError::new(op, format!("needs {key}"), out.describe()))?;
        crate::ops::resolve_axis(op, a, rank)
    };
    let part = cx.part();
    match op {
        // Along the `axis` option, to the length `out` has there.
        "fft" | "ifft" => {
            let a = crate::ops::resolve_axis(op, opts.int(op, "axis", Some(-1))?, rank)?;
            join(op, part, dft::<B>(cx, z, a, out.shape[a], eps, op == "ifft")?)
        }
        // The `axes`, second axis first, to `lengths`.
        "fft2" | "ifft2" => {
            let (a1, a2) = (axis("axes", 0)?, axis("axes", 1)?);
            let inverse = op == "ifft2";
            let p = dft::<B>(cx, z, a2, out.shape[a2], eps, inverse)?;
            join(op, part, dft::<B>(cx, p, a1, out.shape[a1], eps, inverse)?)
        }
        // The first `length / 2 + 1` terms of a real signal's DFT.
        "rfft" => {
            let a = axis("axis", 0)?;
            let n = opts.int(op, "length", None)? as usize;
            let (re, im) = dft::<B>(cx, z, a, n, eps, false)?;
            let half = |p: Prim<B>| any::slice(p.clone(), &cut(&p, a, 0, n / 2 + 1));
            join(op, part, (half(re), half(im)))
        }
        // The real signal of a one-sided spectrum: fitted to `length / 2 + 1` terms,
        // completed by conjugate symmetry, inverted.
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
                let zeros = any::full::<B>(&shape, part, 0.0, &p.device());
                any::cat(vec![p, zeros], a)
            };
            let (re, im) = (fit(z.0), fit(z.1));
            // Terms m..n are the conjugates of terms n-m..1, in reverse.
            let full = if n > m {
                let mirror = |p: Prim<B>| any::flip(any::slice(p.clone(), &cut(&p, a, 1, n - m + 1)), &[a]);
                let mi = cx.at(mirror(im.clone()).shape().as_slice()).u("negate", mirror(im.clone()))?;
                (any::cat(vec![re.clone(), mirror(re)], a), any::cat(vec![im, mi], a))
            } else {
                (re, im)
            };
            let (re, _) = dft::<B>(cx, full, a, n, eps, true)?;
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
fn dft<B: Extension>(cx: &Cx<B>, (re, im): Z<B>, axis: usize, n: usize, eps: f64, inverse: bool) -> NifResult<Z<B>> {
    let rank = re.shape().num_dims();
    let device = re.device();
    let part = cx.part();
    // Move the axis last, fit it to n.
    let mut perm: Vec<usize> = (0..rank).filter(|&a| a != axis).collect();
    perm.push(axis);
    let fit = |p: Prim<B>| -> Prim<B> {
        let p = any::permute(p, &perm);
        let mut shape = p.shape().to_vec();
        let have = shape[rank - 1];
        if have >= n {
            let cut: Vec<Slice> = shape.iter().enumerate().map(|(d, &s)| any::range(0, if d == rank - 1 { n } else { s }, 1)).collect();
            return any::slice(p, &cut);
        }
        shape[rank - 1] = n - have;
        let zeros = any::full::<B>(&shape, part, 0.0, &p.device());
        any::cat(vec![p, zeros], rank - 1)
    };
    let (re, im) = (fit(re), fit(im));
    let lead: Vec<usize> = re.shape()[..rank - 1].to_vec();
    let rows: usize = lead.iter().product();
    let (re, im) = (any::reshape(re, &[rows, n]), any::reshape(im, &[rows, n]));
    // Tables: cos and sin of 2π (j k mod n) / n.
    let angle = |j: usize, k: usize| 2.0 * std::f64::consts::PI * ((j * k) % n) as f64 / n as f64;
    let table = |f: fn(f64) -> f64| -> Prim<B> {
        let v: Vec<f64> = (0..n * n).map(|i| f(angle(i / n, i % n))).collect();
        let data = if part == DType::F64 { TensorData::new(v, [n, n]) } else { TensorData::new(v.into_iter().map(|x| x as f32).collect(), [n, n]) };
        Prim::Float(B::float_from_data(data, &device))
    };
    let (c, s) = (table(f64::cos), table(f64::sin));
    let mm = |a: Prim<B>, b: Prim<B>| Prim::<B>::Float(B::float_matmul(any::float::<B>(a), any::float::<B>(b)));
    let (rc, rs, ic, is) = (mm(re.clone(), c.clone()), mm(re, s.clone()), mm(im.clone(), c), mm(im, s));
    let flat = cx.at(&[rows, n]);
    // Forward: X = Σ x e^{-iθ}: re = rc + is, im = ic - rs. Inverse: e^{+iθ} / n.
    let (xr, xi) = if inverse {
        flat.scale((flat.f("subtract", rc, is)?, flat.f("add", ic, rs)?), 1.0 / n as f64)?
    } else {
        (flat.f("add", rc, is)?, flat.f("subtract", ic, rs)?)
    };
    let clean = |p: Prim<B>| -> NifResult<Prim<B>> {
        let small = flat.f("less_equal", flat.u("abs", p.clone())?, flat.k(eps))?;
        Ok(any::select_where(any::nonzero(small), flat.zeros(), p))
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
