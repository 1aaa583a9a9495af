//! Linear algebra entries: `dot` with contracting and batch axes, `conv` with Nx's options
//! (permutations, padding, input and kernel dilation, feature and batch groups), and
//! `triangular_solve`.
use burn_backend::ops::ConvOptions;
use crate::ops::Extension;
use burn_backend::{Slice};

use super::Out;
use super::any;
use super::shape::axes;
use crate::dtype::{Class, class};
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &["dot", "conv", "triangular_solve", "fft", "ifft"];

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let [a, b] = <[Prim<B>; 2]>::try_from(inputs).map_err(|v| NifError::new(op, format!("takes two tensors, got {}", v.len()), out.describe()))?;
    if out.shape.contains(&0) {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &a.device()));
    }
    // A compiled program's precision for f32 products (`precision: "exact" | "tf32"`).
    let precision = match opts.get("precision") {
        None => None,
        Some(crate::opts::OptVal::Str(p) | crate::opts::OptVal::Atom(p)) if p == "exact" => Some(ex_cubecl::MatmulPrecision::Exact),
        Some(crate::opts::OptVal::Str(p) | crate::opts::OptVal::Atom(p)) if p == "tf32" => Some(ex_cubecl::MatmulPrecision::Tf32),
        Some(other) => return Err(NifError::new(op, "option precision must be \"exact\" or \"tf32\"", format!("{other:?}"))),
    };
    let run = || match op {
        "dot" => dot::<B>(op, a, b, out, opts),
        "conv" => conv::<B>(op, a, b, out, opts),
        "triangular_solve" => triangular_solve::<B>(op, a, b, out, opts),
        _ => Err(NifError::new(op, "complex tensors are not supported by ExBurn yet", out.describe())),
    };
    ex_cubecl::with_matmul_precision(precision, run)
}

pub fn matmul<B: Extension>(a: Prim<B>, b: Prim<B>) -> Prim<B> {
    match (a, b) {
        (Prim::Float(a), Prim::Float(b)) => Prim::Float(B::float_matmul(a, b)),
        (Prim::Int(a), Prim::Int(b)) => Prim::Int(B::int_matmul(a, b)),
        _ => unreachable!("matmul: the caller casts both to the output type"),
    }
}

/// Nx's dot: batch axes first, then `a`'s free axes, then `b`'s, contracting the rest.
fn dot<B: Extension>(op: &str, a: Prim<B>, b: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let (ca, ba, cb, bb) = (axes(op, opts, "contract_a")?, axes(op, opts, "batch_a")?, axes(op, opts, "contract_b")?, axes(op, opts, "batch_b")?);
    let (da, db) = (a.shape().to_vec(), b.shape().to_vec());
    let free = |rank: usize, c: &[usize], bt: &[usize]| -> Vec<usize> { (0..rank).filter(|x| !c.contains(x) && !bt.contains(x)).collect() };
    let (fa, fb) = (free(da.len(), &ca, &ba), free(db.len(), &cb, &bb));
    let size = |d: &[usize], axes: &[usize]| -> usize { axes.iter().map(|&x| d[x]).product() };
    let (batch, m, k, n) = (size(&da, &ba), size(&da, &fa), size(&da, &ca), size(&db, &fb));
    if k == 0 {
        return Ok(any::full::<B>(&out.shape, out.dtype, 0.0, &a.device()));
    }
    let a = any::cast(op, a, out.dtype)?;
    let b = any::cast(op, b, out.dtype)?;
    // Two matrices multiply as the views the permutations give (a transposed operand is
    // read in place); other operands are reshaped to [batch, rows, cols] first.
    let matrices = [&ba, &fa, &ca, &bb, &cb, &fb].iter().map(|x| x.len()).eq([0, 1, 1, 0, 1, 1]);
    let a = any::permute(a, &[ba.clone(), fa, ca].concat());
    let b = any::permute(b, &[bb, cb, fb].concat());
    let (a, b) = if matrices { (a, b) } else { (any::reshape(a, &[batch, m, k]), any::reshape(b, &[batch, k, n])) };
    Ok(any::reshape(matmul::<B>(a, b), &out.shape))
}

fn inverse(perm: &[usize]) -> Vec<usize> {
    let mut inv = vec![0; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        inv[p] = i;
    }
    inv
}

fn conv<B: Extension>(op: &str, t: Prim<B>, k: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    if class(out.dtype) != Class::Float {
        return Err(NifError::new(op, "gives floats", out.describe()));
    }
    let rank = t.shape().num_dims();
    let spatial = rank - 2;
    if !(1..=3).contains(&spatial) {
        return Err(NifError::new(op, format!("runs on 1 to 3 spatial axes, not {spatial}"), format!("{} and {}", t.describe(), k.describe())));
    }
    let ints = |key: &str| super::super::sizes(op, opts, key, None);
    let (strides, input_dilation, kernel_dilation) = (ints("strides")?, ints("input_dilation")?, ints("kernel_dilation")?);
    let padding = opts.ints(op, "padding", None)?;
    let (feature_groups, batch_groups) = (opts.int(op, "feature_groups", Some(1))? as usize, opts.int(op, "batch_groups", Some(1))? as usize);
    let x = any::permute(any::cast(op, t, out.dtype)?, &ints("input_permutation")?);
    let w = any::permute(any::cast(op, k, out.dtype)?, &ints("kernel_permutation")?);
    // Padding on both sides of an undilated axis goes to the convolution kernel; the rest
    // (one-sided or negative padding, input dilation) is one pad with zeros before it.
    let mut conv_padding = vec![0; spatial];
    let mut config = vec![0, 0, 0, 0, 0, 0];
    let dims = x.shape().to_vec();
    let mut padded = dims[..2].to_vec();
    for i in 0..spatial {
        let (lo, hi, interior) = (padding[2 * i], padding[2 * i + 1], input_dilation[i] as i64 - 1);
        let both = if interior == 0 { lo.min(hi).max(0) } else { 0 };
        conv_padding[i] = both as usize;
        let (lo, hi) = (lo - both, hi - both);
        config.extend([lo, hi, interior]);
        let d = dims[2 + i] as i64;
        padded.push((lo + hi + d + (d - 1).max(0) * interior).max(0) as usize);
    }
    let x = if config.iter().all(|&c| c == 0) {
        x
    } else {
        let zero = any::full::<B>(&[1], out.dtype, 0.0, &x.device());
        super::shape::pad::<B>(op, x, zero, &Out { dtype: out.dtype, shape: padded.clone() }, &config)?
    };
    // Batch groups move into channels: a grouped convolution over them.
    let (n, c) = (padded[0], padded[1]);
    let x = if batch_groups > 1 {
        let rest = &padded[2..];
        let g = any::reshape(x, &[&[batch_groups, n / batch_groups, c][..], rest].concat());
        let perm: Vec<usize> = [1, 0, 2].into_iter().chain(3..rank + 1).collect();
        any::reshape(any::permute(g, &perm), &[&[n / batch_groups, batch_groups * c][..], rest].concat())
    } else {
        x
    };
    let groups = feature_groups * batch_groups;
    let (x, w) = (any::float::<B>(x), any::float::<B>(w));
    fn arr<const N: usize>(v: &[usize]) -> [usize; N] {
        v.try_into().expect("length checked")
    }
    let p = &conv_padding;
    let r = match spatial {
        1 => B::conv1d(x, w, None, ConvOptions::new(arr(&strides), arr(p), arr(&kernel_dilation), groups)),
        2 => B::conv2d(x, w, None, ConvOptions::new(arr(&strides), arr(p), arr(&kernel_dilation), groups)),
        _ => B::conv3d(x, w, None, ConvOptions::new(arr(&strides), arr(p), arr(&kernel_dilation), groups)),
    };
    let output_permutation = ints("output_permutation")?;
    Ok(any::permute(Prim::Float(r), &inverse(&output_permutation)))
}

/// Solves `a x = b` (or `x a = b` with `left_side: false`) for triangular `a`, by
/// substitution: one row of `x` per step.
fn triangular_solve<B: Extension>(op: &str, a: Prim<B>, b: Prim<B>, out: &Out, opts: &Opts) -> NifResult<Prim<B>> {
    let (left, lower, transpose) = triangular_options(op, opts)?;
    let a = any::cast(op, a, out.dtype)?;
    let b = any::cast(op, b, out.dtype)?;
    Ok(any::reshape(solve_triangular::<B, _>(a, b, left, lower, transpose)?, &out.shape))
}

/// `left_side`, `lower`, and whether `transform_a` transposes (`:conjugate` conjugates `a`'s
/// elements without transposing, as `Nx.BinaryBackend` does: nothing for a real `a`).
pub fn triangular_options(op: &str, opts: &Opts) -> NifResult<(bool, bool, bool)> {
    let transpose = opts.name(op, "transform_a", Some("none"))? == "transpose";
    Ok((opts.bool(op, "left_side", true)?, opts.bool(op, "lower", true)?, transpose))
}

/// What a substitution computes on: a real tensor, or a complex one as its two parts. The
/// shape ops apply to each part; `matmul`, `sub` and `div` are the field's own.
pub trait Field<B: Extension>: Clone {
    fn map(self, f: &dyn Fn(Prim<B>) -> Prim<B>) -> Self;
    fn zip(self, other: Self, f: &dyn Fn(Prim<B>, Prim<B>) -> Prim<B>) -> Self;
    fn dims(&self) -> Vec<usize>;
    fn zeros(&self, shape: &[usize]) -> Self;
    fn matmul(self, other: Self) -> NifResult<Self>;
    fn sub(self, other: Self) -> NifResult<Self>;
    fn div(self, other: Self) -> NifResult<Self>;
}

impl<B: Extension> Field<B> for Prim<B> {
    fn map(self, f: &dyn Fn(Prim<B>) -> Prim<B>) -> Self {
        f(self)
    }
    fn zip(self, other: Self, f: &dyn Fn(Prim<B>, Prim<B>) -> Prim<B>) -> Self {
        f(self, other)
    }
    fn dims(&self) -> Vec<usize> {
        self.shape().to_vec()
    }
    fn zeros(&self, shape: &[usize]) -> Self {
        any::full::<B>(shape, self.dtype(), 0.0, &self.device())
    }
    fn matmul(self, other: Self) -> NifResult<Self> {
        Ok(matmul::<B>(self, other))
    }
    fn sub(self, other: Self) -> NifResult<Self> {
        Ok(sub::<B>(self, other))
    }
    fn div(self, other: Self) -> NifResult<Self> {
        Ok(div::<B>(self, other))
    }
}

/// `a x = b` (or `x a = b` when not `left`) for triangular `a` (of `b`'s type), by
/// substitution row by row; `b` may be a vector per batch.
pub fn solve_triangular<B: Extension, F: Field<B>>(a: F, b: F, left: bool, lower: bool, transpose: bool) -> NifResult<F> {
    let mut lower = lower;
    let ra = a.dims().len();
    let swap = |p: F| {
        p.map(&|p: Prim<B>| {
            let r = p.shape().num_dims();
            let mut perm: Vec<usize> = (0..r).collect();
            perm.swap(r - 1, r - 2);
            any::permute(p, &perm)
        })
    };
    let mut a = a;
    if transpose {
        a = swap(a);
        lower = !lower;
    }
    let vector = b.dims().len() == ra - 1;
    let mut b = if vector {
        // A column for `a x = b`, a row for `x a = b`.
        let mut s = b.dims();
        s.insert(if left { s.len() } else { s.len() - 1 }, 1);
        b.map(&|p| any::reshape(p, &s))
    } else {
        b
    };
    if !left {
        // x a = b  <=>  aᵀ xᵀ = bᵀ
        a = swap(a);
        b = swap(b);
        lower = !lower;
    }
    if !lower {
        // Reversing rows and columns makes an upper triangle lower.
        a = a.map(&|p| any::flip(p, &[ra - 2, ra - 1]));
        b = b.map(&|p| any::flip(p, &[ra - 2]));
    }
    let n = a.dims()[ra - 1];
    let bs = b.dims();
    let r = bs.len();
    let full = |d: usize| Slice::new(0, Some(d as isize), 1);
    let rows = |lo: usize, hi: usize| -> Vec<Slice> {
        (0..r).map(|i| if i == r - 2 { Slice::new(lo as isize, Some(hi as isize), 1) } else { full(bs[i]) }).collect()
    };
    let mut x = b.zeros(&bs);
    let ad = a.dims();
    let wide = [&bs[..r - 2], &[1, bs[r - 1]]].concat();
    for i in 0..n {
        let bi = b.clone().map(&|p| any::slice(p, &rows(i, i + 1)));
        let rhs = if i == 0 {
            bi
        } else {
            let arow: Vec<Slice> = (0..ra).map(|d| if d == ra - 2 { Slice::new(i as isize, Some(i as isize + 1), 1) } else if d == ra - 1 { Slice::new(0, Some(i as isize), 1) } else { full(ad[d]) }).collect();
            let known = a.clone().map(&|p| any::slice(p, &arow)).matmul(x.clone().map(&|p| any::slice(p, &rows(0, i))))?;
            bi.sub(known)?
        };
        let diag: Vec<Slice> = (0..ra).map(|d| if d >= ra - 2 { Slice::new(i as isize, Some(i as isize + 1), 1) } else { full(ad[d]) }).collect();
        let aii = a.clone().map(&|p| any::expand(any::slice(p, &diag), &wide));
        x = x.zip(rhs.div(aii)?, &|x, xi| any::slice_assign(x, &rows(i, i + 1), xi));
    }
    if !lower {
        x = x.map(&|p| any::flip(p, &[r - 2]));
    }
    Ok(if left { x } else { swap(x) })
}

fn sub<B: Extension>(a: Prim<B>, b: Prim<B>) -> Prim<B> {
    match (a, b) {
        (Prim::Float(a), Prim::Float(b)) => Prim::Float(B::float_sub(a, b)),
        (Prim::Int(a), Prim::Int(b)) => Prim::Int(B::int_sub(a, b)),
        _ => unreachable!("one dtype"),
    }
}

fn div<B: Extension>(a: Prim<B>, b: Prim<B>) -> Prim<B> {
    match (a, b) {
        (Prim::Float(a), Prim::Float(b)) => Prim::Float(B::float_div(a, b)),
        (Prim::Int(a), Prim::Int(b)) => Prim::Int(B::int_div(a, b)),
        _ => unreachable!("one dtype"),
    }
}
