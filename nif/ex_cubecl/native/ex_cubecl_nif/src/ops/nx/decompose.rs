//! Nx's matrix decompositions as native blocks (`Nx.Block.LinAlg.*`): Cholesky, LU with
//! partial pivoting, Solve (LU, then two triangular solves) and Householder QR. Each follows
//! the steps of Nx's own default implementation (`Nx.LinAlg.Cholesky`, `.LU`, `.QR`: the same
//! formulas and the same `eps` rules), so results agree with it, and runs batched over the
//! leading axes in one NIF call with one launch sequence per column instead of Nx's
//! per-element `while` loops. Complex matrices are not taken here (ExBurn runs Nx's default).
use burn_backend::tensor::{FloatTensor, IntTensor};
use burn_backend::{IntDType, Scalar, Slice, TensorMetadata};

use super::Out;
use super::any::{self, BOOL};
use super::linalg::solve_triangular;
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::ops::Extension;
use crate::tensor::Prim;

pub const NAMES: &[&str] = &["cholesky", "lu", "qr", "solve"];

pub fn run<B: Extension>(op: &str, inputs: Vec<Prim<B>>, out: &Out, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let want = if op == "solve" { 2 } else { 1 };
    if inputs.len() != want {
        return Err(NifError::new(op, format!("takes {want} tensor(s), got {}", inputs.len()), out.describe()));
    }
    if !out.dtype.is_float() {
        return Err(NifError::new(op, "gives floats", out.describe()));
    }
    let mut inputs = inputs.into_iter();
    let a = inputs.next().expect("one input");
    let dims = a.shape().to_vec();
    let r = dims.len();
    if r < 2 || (op != "qr" && dims[r - 1] != dims[r - 2]) {
        return Err(NifError::new(op, "takes a square matrix or a batch of them", a.describe()));
    }
    let (m, n) = (dims[r - 2], dims[r - 1]);
    let batch = any::numel(&dims[..r - 2]);
    let a = any::float::<B>(any::reshape(any::cast(op, a, out.dtype)?, &[batch, m, n]));
    let lead = &dims[..r - 2];
    Ok(match op {
        "cholesky" => vec![Prim::Float(reshape::<B>(cholesky::<B>(a, n), &out.shape))],
        "lu" => {
            let p_type = super::super::dtype_opt(op, opts, "p_type", None)?;
            let (p, l, u, _) = lu::<B>(a, n);
            let shape = [lead, &[n, n]].concat();
            let p = any::cast(op, Prim::Int(p), p_type)?;
            vec![Prim::Float(reshape::<B>(l, &shape)), Prim::Float(reshape::<B>(u, &shape)), any::reshape(p, &shape)]
        }
        "solve" => {
            let b = inputs.next().expect("two inputs");
            let k = if b.shape().num_dims() == r { b.shape()[r - 1] } else { 1 };
            vec![solve::<B>(op, a, b, n, k, out)?]
        }
        _ => {
            let eps = opts.float(op, "eps", Some(1e-10))?;
            let complete = opts.name(op, "mode", Some("reduced"))? == "complete";
            let (q, r) = qr::<B>(a, m, n, eps, complete);
            let (qs, rs) = (q.shape().dims::<3>(), r.shape().dims::<3>());
            vec![Prim::Float(reshape::<B>(q, &[lead, &qs[1..]].concat())), Prim::Float(reshape::<B>(r, &[lead, &rs[1..]].concat()))]
        }
    })
}

fn reshape<B: Extension>(t: FloatTensor<B>, shape: &[usize]) -> FloatTensor<B> {
    B::float_reshape(t, shape.into())
}

fn block(batch: usize, rows: (usize, usize), cols: (usize, usize)) -> [Slice; 3] {
    let s = |(lo, hi): (usize, usize)| Slice::new(lo as isize, Some(hi as isize), 1);
    [s((0, batch)), s(rows), s(cols)]
}

/// Rows `rows` and columns `cols` of every matrix of a `[batch, m, n]` tensor.
fn part<B: Extension>(t: FloatTensor<B>, rows: (usize, usize), cols: (usize, usize)) -> FloatTensor<B> {
    let batch = t.shape()[0];
    B::float_slice(t, &block(batch, rows, cols))
}

fn put<B: Extension>(t: FloatTensor<B>, rows: (usize, usize), cols: (usize, usize), v: FloatTensor<B>) -> FloatTensor<B> {
    let batch = t.shape()[0];
    B::float_slice_assign(t, &block(batch, rows, cols), v)
}

fn full<B: Extension>(shape: &[usize], value: f64, like: &FloatTensor<B>) -> FloatTensor<B> {
    B::float_full(shape.into(), Scalar::Float(value), &B::float_device(like), like.dtype().into())
}

fn where_<B: Extension>(mask: burn_backend::tensor::BoolTensor<B>, yes: FloatTensor<B>, no: FloatTensor<B>) -> FloatTensor<B> {
    B::float_mask_where(no, mask, yes)
}

/// `[batch, n]` row numbers (as s64) and the `[batch, n, n]` masks `row > col` and `row == col`.
fn rows<B: Extension>(batch: usize, n: usize, like: &FloatTensor<B>) -> IntTensor<B> {
    let iota = B::int_arange(0..n as i64, &B::float_device(like), IntDType::I64);
    B::int_expand(B::int_reshape(iota, [1, n].into()), [batch, n].into())
}

fn compare<B: Extension>(batch: usize, n: usize, like: &FloatTensor<B>, below: bool) -> burn_backend::tensor::BoolTensor<B> {
    let iota = B::int_arange(0..n as i64, &B::float_device(like), IntDType::I64);
    let r = B::int_expand(B::int_reshape(iota.clone(), [1, n, 1].into()), [batch, n, n].into());
    let c = B::int_expand(B::int_reshape(iota, [1, 1, n].into()), [batch, n, n].into());
    if below { B::int_greater(r, c, BOOL) } else { B::int_equal(r, c, BOOL) }
}

fn eye<B: Extension>(batch: usize, n: usize, like: &FloatTensor<B>) -> FloatTensor<B> {
    let diag = compare::<B>(batch, n, like, false);
    B::float_mask_fill(full::<B>(&[batch, n, n], 0.0, like), diag, Scalar::Float(1.0))
}

/// Nx's `approximate_zeros`: entries within `eps` of zero become zero.
fn approximate_zeros<B: Extension>(t: FloatTensor<B>, eps: f64) -> FloatTensor<B> {
    let small = B::float_lower_equal_elem(B::float_abs(t.clone()), Scalar::Float(eps), BOOL);
    B::float_mask_fill(t, small, Scalar::Float(0.0))
}

/// Cholesky-Banachiewicz as Nx computes it, a column at a time: `l[j][j] = sqrt(a[j][j] -
/// l[j]·l[j])`, `l[i][j] = (a[i][j] - l[i]·l[j]) / (l[j][j] + eps)`, then approximate zeros.
fn cholesky<B: Extension>(a: FloatTensor<B>, n: usize) -> FloatTensor<B> {
    let eps = 1e-10;
    let batch = a.shape()[0];
    let mut l = full::<B>(&[batch, n, n], 0.0, &a);
    for j in 0..n {
        // Columns j.. of `l` are still zero, so full-row products sum over columns 0..j.
        let lj = B::float_swap_dims(part::<B>(l.clone(), (j, j + 1), (0, n)), 1, 2);
        let col = B::float_sub(part::<B>(a.clone(), (j, n), (j, j + 1)), B::float_matmul(part::<B>(l.clone(), (j, n), (0, n)), lj));
        let d = B::float_sqrt(part::<B>(col.clone(), (0, 1), (0, 1)));
        l = put::<B>(l, (j, j + 1), (j, j + 1), d.clone());
        if j + 1 < n {
            let below = B::float_div(part::<B>(col, (1, n - j), (0, 1)), B::float_add_scalar(d, Scalar::Float(eps)));
            l = put::<B>(l, (j + 1, n), (j, j + 1), below);
        }
    }
    approximate_zeros::<B>(l, eps)
}

/// LU with partial pivoting as Nx computes it: per column, the largest magnitude at or below
/// the diagonal (the first on ties) is swapped up, the column below is divided by the pivot
/// (unless it is 0), and the trailing block loses the outer product. Gives the permutation as
/// `p[i][j] = (i == perm[j])` (s64), `l` and `u`, and `perm`.
fn lu<B: Extension>(a: FloatTensor<B>, n: usize) -> (IntTensor<B>, FloatTensor<B>, FloatTensor<B>, IntTensor<B>) {
    let batch = a.shape()[0];
    let rows = rows::<B>(batch, n, &a);
    let mut perm = rows.clone();
    let mut a = a;
    for k in 0..n {
        let col = reshape::<B>(part::<B>(a.clone(), (0, n), (k, k + 1)), &[batch, n]);
        let above = B::int_lower_elem(rows.clone(), Scalar::Int(k as i64), BOOL);
        let magnitude = B::float_mask_fill(B::float_abs(col), above, Scalar::Float(f64::NEG_INFINITY));
        let pivot = B::int_expand(B::float_argmax(magnitude, 1, IntDType::I64), [batch, n].into());
        // The row order with rows k and pivot swapped.
        let is_pivot = B::int_equal(rows.clone(), pivot.clone(), BOOL);
        let is_k = B::int_equal_elem(rows.clone(), Scalar::Int(k as i64), BOOL);
        let order = B::int_mask_where(B::int_mask_fill(rows.clone(), is_pivot, Scalar::Int(k as i64)), is_k, pivot);
        let spread = B::int_expand(B::int_reshape(order.clone(), [batch, n, 1].into()), [batch, n, n].into());
        a = B::float_gather(1, a, spread);
        perm = B::int_gather(1, perm, order);
        if k + 1 < n {
            let diag = part::<B>(a.clone(), (k, k + 1), (k, k + 1));
            let below = part::<B>(a.clone(), (k + 1, n), (k, k + 1));
            let zero = B::bool_expand(B::float_equal_elem(diag.clone(), Scalar::Float(0.0), BOOL), [batch, n - k - 1, 1].into());
            let scaled = where_::<B>(zero, below.clone(), B::float_div(below, diag));
            a = put::<B>(a, (k + 1, n), (k, k + 1), scaled.clone());
            let u_row = part::<B>(a.clone(), (k, k + 1), (k + 1, n));
            let trailing = B::float_sub(part::<B>(a.clone(), (k + 1, n), (k + 1, n)), B::float_matmul(scaled, u_row));
            a = put::<B>(a, (k + 1, n), (k + 1, n), trailing);
        }
    }
    let below = compare::<B>(batch, n, &a, true);
    let l = B::float_add(B::float_mask_fill(a.clone(), B::bool_not(below.clone()), Scalar::Float(0.0)), eye::<B>(batch, n, &a));
    let u = B::float_mask_fill(a, below, Scalar::Float(0.0));
    let iota = B::int_expand(B::int_reshape(B::int_arange(0..n as i64, &B::float_device(&l), IntDType::I64), [1, n, 1].into()), [batch, n, n].into());
    let cols = B::int_expand(B::int_reshape(perm.clone(), [batch, 1, n].into()), [batch, n, n].into());
    let p = B::bool_into_int(B::int_equal(iota, cols, BOOL), IntDType::I64);
    (p, l, u, perm)
}

/// `a x = b` as Nx's default: `P L U = a`, then `L y = Pᵀ b` and `U x = y`; `b` holds `k`
/// right-hand sides per matrix.
fn solve<B: Extension>(op: &str, a: FloatTensor<B>, b: Prim<B>, n: usize, k: usize, out: &Out) -> NifResult<Prim<B>> {
    let batch = a.shape()[0];
    let b = any::float::<B>(any::reshape(any::cast(op, b, out.dtype)?, &[batch, n, k]));
    let (_, l, u, perm) = lu::<B>(a, n);
    // Nx's default solve raises in its triangular solve where a pivot is exactly zero.
    if zero_diagonal::<B>(&u, batch, n)? {
        return Err(NifError::new(op, SINGULAR, format!("{batch} matrices of {n}x{n}, a zero pivot")));
    }
    let spread = B::int_expand(B::int_reshape(perm, [batch, n, 1].into()), [batch, n, k].into());
    let pb = Prim::Float(B::float_gather(1, b, spread));
    let y = solve_triangular::<B, _>(Prim::Float(l), pb, true, true, false)?;
    let x = solve_triangular::<B, _>(Prim::Float(u), y, true, false, false)?;
    Ok(any::reshape(x, &out.shape))
}

/// The reason a solve of a singular matrix gives, as Nx's words ("can't solve for singular
/// matrix"): ExBurn raises `ArgumentError` for it, as Nx does.
pub const SINGULAR: &str = "can't solve for singular matrix";

/// Whether any matrix of the `[batch, n, n]` tensor `u` has a zero on its diagonal (one bool
/// read back).
fn zero_diagonal<B: Extension>(u: &FloatTensor<B>, batch: usize, n: usize) -> NifResult<bool> {
    let diag = compare::<B>(batch, n, u, false);
    let zero = B::bool_and(B::float_equal_elem(u.clone(), Scalar::Float(0.0), BOOL), diag);
    let data = burn_backend::read_sync(B::bool_into_data(B::bool_any(zero)))
        .map_err(|e| NifError::new("solve", "reading the pivots back failed", format!("{e:?}")))?;
    Ok(data.iter::<bool>().next().unwrap_or(false))
}

/// Householder QR as Nx computes it: for columns `0..=max_i`, the reflector of the column
/// below the diagonal (Nx's sign choice and its `eps` test for an already-zero column) is
/// applied to `r` from the left and accumulated into `q`; wide matrices get zero rows first.
fn qr<B: Extension>(a: FloatTensor<B>, m: usize, n: usize, eps: f64, complete: bool) -> (FloatTensor<B>, FloatTensor<B>) {
    let batch = a.shape()[0];
    let wide = m < n;
    let (mm, last) = if wide { (n, n as isize - 1) } else if m == n { (m, n as isize - 2) } else { (m, n as isize - 1) };
    let mut r = if wide { put::<B>(full::<B>(&[batch, n, n], 0.0, &a), (0, m), (0, n), a.clone()) } else { a.clone() };
    let mut q = eye::<B>(batch, mm, &a);
    let rows = rows::<B>(batch, mm, &a);
    let iota = B::int_arange(0..mm as i64, &B::float_device(&a), IntDType::I64);
    for i in 0..(last + 1).max(0) as usize {
        let x = reshape::<B>(part::<B>(r.clone(), (0, mm), (i, i + 1)), &[batch, mm]);
        let x = B::float_mask_fill(x, B::int_lower_elem(rows.clone(), Scalar::Int(i as i64), BOOL), Scalar::Float(0.0));
        let x = reshape::<B>(x, &[batch, mm, 1]);
        let norm_sq = B::float_matmul(B::float_swap_dims(x.clone(), 1, 2), x.clone());
        let norm = B::float_sqrt(norm_sq.clone());
        let xi = part::<B>(x.clone(), (i, i + 1), (0, 1));
        let rest_sq = B::float_sub(norm_sq, B::float_mul(B::float_abs(xi.clone()), B::float_abs(xi.clone())));
        let v0 = where_::<B>(
            B::float_lower_equal_elem(xi.clone(), Scalar::Float(0.0), BOOL),
            B::float_sub(xi.clone(), norm.clone()),
            B::float_div(B::float_neg(rest_sq.clone()), B::float_add(xi, norm)),
        );
        let done = B::float_lower_elem(rest_sq, Scalar::Float(eps), BOOL);
        let one = full::<B>(&[batch, 1, 1], 1.0, &x);
        let v = put::<B>(x, (i, i + 1), (0, 1), where_::<B>(done.clone(), one.clone(), v0.clone()));
        let v = B::float_div(v, where_::<B>(done.clone(), one.clone(), v0));
        let vt = B::float_swap_dims(v.clone(), 1, 2);
        let norm_v = B::float_matmul(vt.clone(), v.clone());
        let scale = where_::<B>(done.clone(), full::<B>(&[batch, 1, 1], 0.0, &one), B::float_div(full::<B>(&[batch, 1, 1], 2.0, &one), where_::<B>(done, one.clone(), norm_v)));
        let eye = eye::<B>(batch, mm, &one);
        let reflector = B::float_sub(eye.clone(), B::float_mul(scale, B::float_matmul(v, vt)));
        // Only the block at and past row and column i reflects.
        let at = B::int_greater_equal_elem(iota.clone(), Scalar::Int(i as i64), BOOL);
        let r_at = B::bool_expand(B::bool_reshape(at.clone(), [1, mm, 1].into()), [batch, mm, mm].into());
        let c_at = B::bool_expand(B::bool_reshape(at, [1, 1, mm].into()), [batch, mm, mm].into());
        let h = where_::<B>(B::bool_and(r_at, c_at), reflector, eye);
        r = B::float_matmul(h.clone(), r);
        q = B::float_matmul(q, h);
    }
    let (q, r) = (approximate_zeros::<B>(q, eps), approximate_zeros::<B>(r, eps));
    if wide {
        (part::<B>(q, (0, m), (0, m)), part::<B>(r, (0, m), (0, n)))
    } else if !complete && m > n {
        (part::<B>(q, (0, m), (0, n)), part::<B>(r, (0, n), (0, n)))
    } else {
        (q, r)
    }
}
