//! Elementwise unary, binary and comparison launches.
use std::fmt::Display;

use burn_backend::{BoolStore, DType, Scalar};
use cubecl::Runtime;
use cubecl::prelude::{ComputeClient, InputScalar};
use ex_cubecl_kernels::binary::{
    BinaryFloatOp, BinaryIntOp, BinaryLayout, binary_float, binary_float_vec, binary_float_vec_strided, binary_int,
};
use ex_cubecl_kernels::compare::{CompareOp, PredicateOp, compare as compare_kernel, compare_bf16_bits, float_predicate};
use ex_cubecl_kernels::unary::{UnaryFloatOp, UnaryIntOp, unary_float, unary_float_vec, unary_int};

use super::views::Views;
use super::{accumulator_dtype, broadcast_shape, check_same_dtype, divmods, float_arg, scalar_arg, usizes, widest_vector};
use crate::runtime::{Geometry, Layout, OpName, launch, storage_type};
use crate::tensor::CubeTensor;

/// The right operand of a binary op.
pub enum Rhs<R: Runtime> {
    /// A tensor, broadcast against the left one.
    Tensor(CubeTensor<R>),
    /// A scalar.
    Scalar(Scalar),
}

/// The widest vector (among the device's efficient sizes) in which `n` contiguous elements of
/// `dtype` starting at each of `offsets` can be read and written: it divides `n` and every
/// offset. 1 when there is none.
pub(crate) fn flat_vector_size<R: Runtime>(client: &ComputeClient<R>, dtype: DType, n: usize, offsets: &[usize]) -> usize {
    widest_vector(client, storage_type(dtype).size(), std::iter::once(n).chain(offsets.iter().copied()))
}

/// The dtype a kernel computes `t`'s elements in, and takes its scalars in: f32 for bf16 held
/// as bits (see [`super::bf16`]), the dtype itself otherwise.
fn compute_dtype<R: Runtime>(t: &CubeTensor<R>) -> DType {
    match t.bf16_bits() {
        true => DType::F32,
        false => t.dtype,
    }
}

fn check_float<R: Runtime>(op: impl Display, t: &CubeTensor<R>) {
    if !t.dtype.is_float() {
        panic!("ex_cubecl: {op}: expected a float tensor, got {:?} with shape {:?}", t.dtype, t.dims());
    }
}

fn check_int<R: Runtime>(op: impl Display, t: &CubeTensor<R>) {
    if !(t.dtype.is_int() || t.dtype.is_uint() || t.dtype.is_bool()) {
        panic!("ex_cubecl: {op}: expected an int tensor, got {:?} with shape {:?}", t.dtype, t.dims());
    }
}

/// `op(tensor)` for a float tensor; `a` and `b` are the op's parameters.
pub fn unary_float_op<R: Runtime>(tensor: CubeTensor<R>, op: UnaryFloatOp, a: f64, b: f64) -> CubeTensor<R> {
    let name = OpName("float", &op);
    check_float(&name, &tensor);
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    // f16 and bf16 compute in f32 (see the kernel), bf16 held as bits too (read and written
    // as its bits: see `super::bf16`); the parameters are of the compute type.
    let compute = accumulator_dtype(tensor.dtype);
    let bits = tensor.bf16_bits();
    let dtypes = [tensor.storage(), storage_type(compute)];
    let (a, b) = (float_arg(a, compute), float_arg(b, compute));
    let n = out.num_elements();
    let offset = tensor.layout.offset;
    let v = match tensor.layout.is_contiguous() {
        true => flat_vector_size(&tensor.client, tensor.dtype, n, &[offset]),
        false => 1,
    };
    let o = out.clone();
    if v > 1 {
        launch(&out.client, &name, Geometry::Units(n / v), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < n / v`; input and output hold `n` contiguous
            // elements from offsets that `v` divides.
            unsafe {
                unary_float_vec::launch_unchecked::<R>(
                    client, count, dim, v, tensor.buffer_arg(), o.buffer_arg(), offset / v, n / v, a, b, op,
                    bits, dtypes,
                )
            }
        });
        return out;
    }
    let linear = tensor.layout.is_contiguous();
    let views = Views::new(&tensor.layout.shape, &[&tensor.layout.strides], linear);
    launch(&out.client, &name, Geometry::Units(n), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; the input view lies inside its buffer.
        unsafe {
            unary_float::launch_unchecked::<R>(
                client,
                count,
                dim,
                tensor.buffer_arg(),
                o.buffer_arg(),
                tensor.layout.offset,
                views.shape(),
                views.strides(0),
                a,
                b,
                op,
                linear,
                bits,
                dtypes,
            )
        }
    });
    out
}

/// `op(tensor)` for an int (or bool-storage) tensor; `a` and `b` are the op's parameters.
pub fn unary_int_op<R: Runtime>(tensor: CubeTensor<R>, op: UnaryIntOp, a: Scalar, b: Scalar) -> CubeTensor<R> {
    let name = OpName("int", &op);
    check_int(&name, &tensor);
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), tensor.dtype);
    let (a, b) = (scalar_arg(&name, a, tensor.dtype), scalar_arg(&name, b, tensor.dtype));
    let o = out.clone();
    let linear = tensor.layout.is_contiguous();
    let views = Views::new(&tensor.layout.shape, &[&tensor.layout.strides], linear);
    launch(&out.client, &name, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; the input view lies inside its buffer.
        unsafe {
            unary_int::launch_unchecked::<R>(
                client,
                count,
                dim,
                tensor.buffer_arg(),
                o.buffer_arg(),
                tensor.layout.offset,
                views.shape(),
                views.strides(0),
                a,
                b,
                op,
                linear,
                tensor.storage(),
            )
        }
    });
    out
}

/// The views, layout flags and scalar of a binary launch, and its output (of `out_dtype`).
struct BinaryPlan<R: Runtime> {
    lhs_view: Layout,
    rhs: CubeTensor<R>,
    rhs_view: Layout,
    scalar: InputScalar,
    layout: BinaryLayout,
    out: CubeTensor<R>,
    /// The two views as kernel arguments (none when both are read linearly).
    views: Views,
}

/// The [`Views`] of a binary launch's operands.
fn binary_views(lhs: &Layout, rhs: &Layout, layout: BinaryLayout) -> Views {
    Views::new(&lhs.shape, &[&lhs.strides, &rhs.strides], layout.lhs_linear && layout.rhs_linear)
}

fn plan<R: Runtime>(name: impl Display + Copy, lhs: &CubeTensor<R>, rhs: Rhs<R>, out_dtype: DType) -> BinaryPlan<R> {
    match rhs {
        Rhs::Tensor(rhs) => {
            check_same_dtype(name, lhs, &rhs);
            let shape = broadcast_shape(name, lhs, &rhs);
            let lhs_view = lhs.layout.broadcast_to(&shape).expect("broadcast shape");
            let rhs_view = rhs.layout.broadcast_to(&shape).expect("broadcast shape");
            let layout = BinaryLayout {
                lhs_linear: lhs_view.is_contiguous(),
                rhs_linear: rhs_view.is_contiguous(),
                rhs_scalar: false,
            };
            let out = CubeTensor::empty(&lhs.client, &lhs.device, shape, out_dtype);
            let scalar = InputScalar::new(0, storage_type(compute_dtype(lhs)));
            let views = binary_views(&lhs_view, &rhs_view, layout);
            BinaryPlan { lhs_view, rhs, rhs_view, scalar, layout, out, views }
        }
        Rhs::Scalar(value) => {
            let layout = BinaryLayout {
                lhs_linear: lhs.layout.is_contiguous(),
                rhs_linear: true,
                rhs_scalar: true,
            };
            let out = CubeTensor::empty(&lhs.client, &lhs.device, lhs.layout.shape.clone(), out_dtype);
            BinaryPlan {
                lhs_view: lhs.layout.clone(),
                rhs: lhs.clone(),
                rhs_view: lhs.layout.clone(),
                scalar: scalar_arg(name, value, compute_dtype(lhs)),
                layout,
                out,
                views: binary_views(&lhs.layout, &lhs.layout, layout),
            }
        }
    }
}

/// A binary launch in vectors along the output's innermost dimension, where each operand
/// either steps through that dimension contiguously or repeats one element along it (a
/// [n, c, h, w] tensor and a [1, c, 1, 1] one, batch norm's every op): the vector width, the
/// iteration shape with its innermost dimension in vectors, and each operand's vector size
/// (the width, or 1 where it repeats), offset and strides in its own vectors.
struct StridedVectors {
    width: usize,
    shape: Vec<usize>,
    sizes: [usize; 2],
    offsets: [usize; 2],
    strides: [Vec<usize>; 2],
}

impl StridedVectors {
    /// The plan for the operands of `views` (the coalesced views of a binary launch, none when
    /// both are read linearly) starting at `offsets`, if there is one wider than 1: every
    /// operand that steps through the innermost dimension needs its offset and all its strides
    /// divisible by the width, and at least one operand must step through it.
    fn plan<R: Runtime>(t: &CubeTensor<R>, views: &Views, offsets: [usize; 2]) -> Option<Self> {
        let mut shape = views.dims().to_vec();
        let strides = [views.strides_of(0), views.strides_of(1)];
        let inner = *shape.last()?;
        let steps = [strides[0].last() == Some(&1), strides[1].last() == Some(&1)];
        if !(steps[0] || steps[1]) || strides.iter().any(|s| s.last() > Some(&1)) {
            return None;
        }
        let outer = |k: usize| strides[k][..strides[k].len() - 1].iter().copied().chain([offsets[k]]);
        let units = (0..2).filter(|&k| steps[k]).flat_map(outer);
        let width = widest_vector(&t.client, storage_type(t.dtype).size(), units.chain([inner]).collect::<Vec<_>>());
        if width == 1 {
            return None;
        }
        *shape.last_mut().expect("a dimension") /= width;
        let per = |k: usize| if steps[k] { width } else { 1 };
        let strides = [0, 1].map(|k: usize| {
            let mut s: Vec<usize> = strides[k].iter().map(|&x| x / per(k)).collect();
            *s.last_mut().expect("a dimension") = usize::from(steps[k]);
            s
        });
        Some(Self { width, shape, sizes: [per(0), per(1)], offsets: [offsets[0] / per(0), offsets[1] / per(1)], strides })
    }
}

/// `op(lhs, rhs)` for float tensors, broadcasting.
pub fn binary_float_op<R: Runtime>(lhs: CubeTensor<R>, rhs: Rhs<R>, op: BinaryFloatOp) -> CubeTensor<R> {
    let name = OpName("float", &op);
    check_float(&name, &lhs);
    let BinaryPlan { lhs_view, rhs, rhs_view, scalar, layout, out, views } = plan(&name, &lhs, rhs, lhs.dtype);
    // bf16 held as bits is read and written as its bits and computed in f32 (`super::bf16`).
    let bits = lhs.bf16_bits();
    let dtypes = [lhs.storage(), storage_type(compute_dtype(&lhs))];
    let n = out.num_elements();
    let o = out.clone();
    let (lo, ro) = (lhs_view.offset, rhs_view.offset);
    let v = match layout.lhs_linear && layout.rhs_linear {
        true => flat_vector_size(&lhs.client, lhs.dtype, n, &[lo, ro]),
        false => 1,
    };
    if v > 1 {
        launch(&out.client, &name, Geometry::Units(n / v), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < n / v`; both operands and the output hold `n`
            // contiguous elements from offsets that `v` divides.
            unsafe {
                binary_float_vec::launch_unchecked::<R>(
                    client, count, dim, v, lhs.buffer_arg(), rhs.buffer_arg(), o.buffer_arg(), lo / v, ro / v,
                    n / v, scalar, op, layout.rhs_scalar, bits, dtypes,
                )
            }
        });
        return out;
    }
    if let Some(sv) = (!layout.rhs_scalar).then(|| StridedVectors::plan(&lhs, &views, [lo, ro])).flatten() {
        launch(&out.client, &name, Geometry::Units(n / sv.width), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < n / width`; each operand's vectors (or elements,
            // where it repeats one along the innermost dimension) lie inside its buffer.
            unsafe {
                binary_float_vec_strided::launch_unchecked::<R>(
                    client, count, dim, sv.width, sv.sizes[0], sv.sizes[1], lhs.buffer_arg(), rhs.buffer_arg(),
                    o.buffer_arg(), sv.offsets[0], sv.offsets[1], n / sv.width, divmods(&sv.shape),
                    usizes(&sv.strides[0]), usizes(&sv.strides[1]), op, bits, dtypes,
                )
            }
        });
        return out;
    }
    launch(&out.client, &name, Geometry::Units(n), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; both views lie inside their buffers.
        unsafe {
            binary_float::launch_unchecked::<R>(
                client,
                count,
                dim,
                lhs.buffer_arg(),
                rhs.buffer_arg(),
                o.buffer_arg(),
                lhs_view.offset,
                rhs_view.offset,
                views.shape(),
                views.strides(0),
                views.strides(1),
                scalar,
                op,
                layout,
                bits,
                dtypes,
            )
        }
    });
    out
}

/// `op(lhs, rhs)` for int (or bool-storage) tensors, broadcasting.
pub fn binary_int_op<R: Runtime>(lhs: CubeTensor<R>, rhs: Rhs<R>, op: BinaryIntOp) -> CubeTensor<R> {
    let name = OpName("int", &op);
    check_int(&name, &lhs);
    let BinaryPlan { lhs_view, rhs, rhs_view, scalar, layout, out, views } = plan(&name, &lhs, rhs, lhs.dtype);
    let o = out.clone();
    launch(&out.client, &name, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; both views lie inside their buffers.
        unsafe {
            binary_int::launch_unchecked::<R>(
                client,
                count,
                dim,
                lhs.buffer_arg(),
                rhs.buffer_arg(),
                o.buffer_arg(),
                lhs_view.offset,
                rhs_view.offset,
                views.shape(),
                views.strides(0),
                views.strides(1),
                scalar,
                op,
                layout,
                lhs.storage(),
            )
        }
    });
    out
}

/// `lhs op rhs` as a bool tensor stored as `store`.
pub fn compare<R: Runtime>(lhs: CubeTensor<R>, rhs: Rhs<R>, op: CompareOp, store: BoolStore) -> CubeTensor<R> {
    let name = OpName("compare", &op);
    let BinaryPlan { lhs_view, rhs, rhs_view, scalar, layout, out, views } = plan(&name, &lhs, rhs, DType::Bool(store));
    let o = out.clone();
    if lhs.bf16_bits() {
        launch(&out.client, &name, Geometry::Units(out.num_elements()), move |client, count, dim| {
            // SAFETY: the kernel guards `pos < len`; both views lie inside their buffers.
            unsafe {
                compare_bf16_bits::launch_unchecked::<R>(
                    client,
                    count,
                    dim,
                    lhs.buffer_arg(),
                    rhs.buffer_arg(),
                    o.buffer_arg(),
                    lhs_view.offset,
                    rhs_view.offset,
                    views.shape(),
                    views.strides(0),
                    views.strides(1),
                    scalar,
                    op,
                    layout,
                    o.storage(),
                )
            }
        });
        return out;
    }
    launch(&out.client, &name, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; both views lie inside their buffers.
        unsafe {
            compare_kernel::launch_unchecked::<R>(
                client,
                count,
                dim,
                lhs.buffer_arg(),
                rhs.buffer_arg(),
                o.buffer_arg(),
                lhs_view.offset,
                rhs_view.offset,
                views.shape(),
                views.strides(0),
                views.strides(1),
                scalar,
                op,
                layout,
                [lhs.storage(), o.storage()],
            )
        }
    });
    out
}

/// `predicate(tensor)` for a float tensor, as a bool tensor stored as `store`.
pub fn predicate<R: Runtime>(tensor: CubeTensor<R>, op: PredicateOp, store: BoolStore) -> CubeTensor<R> {
    let name = OpName("float", &op);
    check_float(&name, &tensor);
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), DType::Bool(store));
    let o = out.clone();
    let bits = tensor.bf16_bits();
    let dtypes = [tensor.storage(), storage_type(compute_dtype(&tensor)), o.storage()];
    let linear = tensor.layout.is_contiguous();
    let views = Views::new(&tensor.layout.shape, &[&tensor.layout.strides], linear);
    launch(&out.client, &name, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < len`; the input view lies inside its buffer.
        unsafe {
            float_predicate::launch_unchecked::<R>(
                client,
                count,
                dim,
                tensor.buffer_arg(),
                o.buffer_arg(),
                tensor.layout.offset,
                views.shape(),
                views.strides(0),
                op,
                linear,
                bits,
                dtypes,
            )
        }
    });
    out
}
