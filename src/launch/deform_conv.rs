//! Deformable 2-D convolution and its backward pass: deformable im2col kernels around
//! grouped matmuls.
use burn_backend::ops::DeformConvOptions;
use burn_backend::{DType, Scalar, Shape};
use cubecl::Runtime;
use ex_cubecl_kernels::binary::BinaryFloatOp;
use ex_cubecl_kernels::deform_conv::{DeformParamsLaunch, deform_col2im, deform_im2col, deform_offset_grad};

use super::bf16::{self, narrow, widen, widen_opt};
use super::conv::{bias_backward, check_float, check_rank};
use super::copy::{cast, full, into_contiguous};
use super::elementwise::{Rhs, binary_float_op};
use super::matmul::matmul;
use super::view::reshape;
use super::accumulator;
use crate::runtime::{Geometry, launch};
use crate::tensor::CubeTensor;

/// Validated shapes of a deformable convolution.
#[derive(Clone, Copy)]
struct Dims {
    batch: usize,
    c_in: usize,
    c_out: usize,
    out_h: usize,
    out_w: usize,
    kernel: [usize; 2],
    groups: usize,
    params: [usize; 9],
}

impl Dims {
    fn arg<R: Runtime>(&self) -> DeformParamsLaunch<R> {
        let p = self.params;
        DeformParamsLaunch::new(p[0], p[1], p[2], p[3], p[4], p[5], p[6], p[7], p[8])
    }

    /// Columns per weight group: `c_in / groups · kh · kw`.
    fn k(&self) -> usize {
        self.c_in / self.groups * self.kernel[0] * self.kernel[1]
    }

    /// Column count: `batch · out_h · out_w`.
    fn n(&self) -> usize {
        self.batch * self.out_h * self.out_w
    }
}

fn check<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    offset: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    mask: Option<&CubeTensor<R>>,
    bias: Option<&CubeTensor<R>>,
    o: &DeformConvOptions<2>,
) -> Dims {
    for (name, t) in [("x", x), ("offset", offset), ("weight", weight)] {
        check_rank(op, name, t, 4);
    }
    let mut all = vec![("x", x), ("offset", offset), ("weight", weight)];
    all.extend(mask.map(|m| ("mask", m)));
    all.extend(bias.map(|b| ("bias", b)));
    check_float(op, &all);
    let (xd, od, wd) = (x.dims(), offset.dims(), weight.dims());
    let (wg, og) = (o.weight_groups, o.offset_groups);
    if o.stride.contains(&0) || o.dilation.contains(&0) || wg == 0 || og == 0 {
        panic!("ex_cubecl: {op}: stride {:?}, dilation {:?} and groups ({wg}, {og}) must be non-zero", o.stride, o.dilation);
    }
    if xd[1] != wd[1] * wg || wd[0] % wg != 0 || xd[1] % og != 0 {
        panic!("ex_cubecl: {op}: x {xd:?} and weight {wd:?} do not fit {wg} weight groups and {og} offset groups");
    }
    let out = |axis: usize| {
        let span = o.dilation[axis] * (wd[axis + 2].max(1) - 1) + 1;
        let padded = xd[axis + 2] + 2 * o.padding[axis];
        if wd[axis + 2] == 0 || span > padded {
            panic!("ex_cubecl: {op}: kernel {:?} (dilation {:?}) is larger than the padded input {xd:?} (padding {:?})", &wd[2..], o.dilation, o.padding);
        }
        (padded - span) / o.stride[axis] + 1
    };
    let (out_h, out_w) = (out(0), out(1));
    let taps = og * wd[2] * wd[3];
    if od != [xd[0], 2 * taps, out_h, out_w] {
        panic!("ex_cubecl: {op}: offset must have shape {:?}, got {od:?}", [xd[0], 2 * taps, out_h, out_w]);
    }
    if let Some(m) = mask
        && m.dims() != [xd[0], taps, out_h, out_w]
    {
        panic!("ex_cubecl: {op}: mask must have shape {:?}, got {:?}", [xd[0], taps, out_h, out_w], m.dims());
    }
    if let Some(b) = bias
        && b.dims() != [wd[0]]
    {
        panic!("ex_cubecl: {op}: bias must have shape [{}], got {:?}", wd[0], b.dims());
    }
    Dims {
        batch: xd[0],
        c_in: xd[1],
        c_out: wd[0],
        out_h,
        out_w,
        kernel: [wd[2], wd[3]],
        groups: wg,
        params: [wd[2], wd[3], o.stride[0], o.stride[1], o.padding[0], o.padding[1], o.dilation[0], o.dilation[1], og],
    }
}

/// The deformable column matrix `[groups, c_in / groups · kh · kw, batch · out_h · out_w]`.
fn columns<R: Runtime>(op: &str, x: &CubeTensor<R>, offset: &CubeTensor<R>, mask: Option<&CubeTensor<R>>, d: &Dims) -> CubeTensor<R> {
    let cols = CubeTensor::empty(&x.client, &x.device, Shape::new([d.groups, d.k(), d.n()]), x.dtype);
    let mask_ref = mask.unwrap_or(offset);
    let (x, offset, mask_ref, has_mask, c, d) = (x.clone(), offset.clone(), mask_ref.clone(), mask.is_some(), cols.clone(), *d);
    launch(&cols.client, op, Geometry::Units(cols.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < columns.len()`; samples outside x read 0.
        unsafe {
            deform_im2col::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), offset.as_arg(), mask_ref.as_arg(), c.as_arg(), x.layout.offset,
                offset.layout.offset, mask_ref.layout.offset, d.arg(), has_mask, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    cols
}

/// `[c_out, ..]` weights as `[groups, c_out / groups, k]`.
fn grouped_weight<R: Runtime>(weight: CubeTensor<R>, d: &Dims) -> CubeTensor<R> {
    reshape(weight, Shape::new([d.groups, d.c_out / d.groups, d.k()]))
}

/// The output gradient `[b, c_out, oh, ow]` as `[groups, c_out / groups, b · oh · ow]`.
fn grouped_grad<R: Runtime>(grad: CubeTensor<R>, d: &Dims) -> CubeTensor<R> {
    let swapped = grad.with_layout(grad.layout.swap(0, 1));
    reshape(into_contiguous(swapped), Shape::new([d.groups, d.c_out / d.groups, d.n()]))
}

fn transposed<R: Runtime>(t: &CubeTensor<R>) -> CubeTensor<R> {
    t.with_layout(t.layout.swap(1, 2))
}

/// Deformable convolution of `x` `[b, c_in, h, w]`.
pub fn deform_conv2d<R: Runtime>(
    x: CubeTensor<R>,
    offset: CubeTensor<R>,
    weight: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    options: &DeformConvOptions<2>,
) -> CubeTensor<R> {
    let op = "deform_conv2d";
    let d = check(op, &x, &offset, &weight, mask.as_ref(), bias.as_ref(), options);
    if x.bf16_bits() {
        let (offset, weight, mask, bias) = (widen(offset), widen(weight), widen_opt(mask), widen_opt(bias));
        return bf16::map(x, |x| deform_conv2d(x, offset, weight, mask, bias, options));
    }
    let cols = columns(op, &x, &offset, mask.as_ref(), &d);
    let out = matmul(op, grouped_weight(weight, &d), cols);
    let out = reshape(out, Shape::new([d.c_out, d.batch, d.out_h, d.out_w]));
    let out = out.with_layout(out.layout.swap(0, 1));
    match bias {
        Some(b) => binary_float_op(out, Rhs::Tensor(reshape(b, Shape::new([1, d.c_out, 1, 1]))), BinaryFloatOp::Add),
        None => into_contiguous(out),
    }
}

/// Gradients of [`deform_conv2d`]: x, offset, weight, mask and bias.
pub type DeformGrads<R> = (CubeTensor<R>, CubeTensor<R>, CubeTensor<R>, Option<CubeTensor<R>>, Option<CubeTensor<R>>);

/// The backward pass of [`deform_conv2d`].
#[allow(clippy::too_many_arguments)]
pub fn deform_conv2d_backward<R: Runtime>(
    x: CubeTensor<R>,
    offset: CubeTensor<R>,
    weight: CubeTensor<R>,
    mask: Option<CubeTensor<R>>,
    bias: Option<CubeTensor<R>>,
    output_grad: CubeTensor<R>,
    options: &DeformConvOptions<2>,
) -> DeformGrads<R> {
    let op = "deform_conv2d_backward";
    let d = check(op, &x, &offset, &weight, mask.as_ref(), bias.as_ref(), options);
    check_float(op, &[("x", &x), ("output_grad", &output_grad)]);
    if x.bf16_bits() {
        let (x, offset, weight, grad) = (widen(x), widen(offset), widen(weight), widen(output_grad));
        let (gx, go, gw, gm, gb) = deform_conv2d_backward(x, offset, weight, widen_opt(mask), widen_opt(bias), grad, options);
        let back = |t| narrow(t, DType::BF16);
        return (back(gx), back(go), back(gw), gm.map(back), gb.map(back));
    }
    if output_grad.dims() != [d.batch, d.c_out, d.out_h, d.out_w] {
        panic!("ex_cubecl: {op}: output_grad must have shape {:?}, got {:?}", [d.batch, d.c_out, d.out_h, d.out_w], output_grad.dims());
    }
    let weight_shape = weight.layout.shape.clone();
    let bias_grad = bias.map(|_| bias_backward(output_grad.clone()));
    let grad = grouped_grad(output_grad, &d);
    // Column gradient [groups, k, n] = Wᵀ · grad.
    let col_grad = matmul(op, transposed(&grouped_weight(weight, &d)), grad.clone());

    let x_grad = col2im(op, &x, &offset, mask.as_ref(), &col_grad, &d);
    let (offset_grad, mask_grad) = offset_mask_grad(op, &x, &offset, mask.as_ref(), &col_grad, &d);
    let cols = columns(op, &x, &offset, mask.as_ref(), &d);
    let weight_grad = reshape(matmul(op, grad, transposed(&cols)), weight_shape);
    (x_grad, offset_grad, weight_grad, mask_grad, bias_grad)
}

fn col2im<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    offset: &CubeTensor<R>,
    mask: Option<&CubeTensor<R>>,
    col_grad: &CubeTensor<R>,
    d: &Dims,
) -> CubeTensor<R> {
    // Accumulated atomically in f32.
    let bits = full(&x.device, x.layout.shape.clone(), Scalar::Float(0.0), DType::F32);
    let mask_ref = mask.unwrap_or(offset);
    let (col_grad, offset, mask_ref, has_mask, b, d, storage) = (col_grad.clone(), offset.clone(), mask_ref.clone(), mask.is_some(), bits.clone(), *d, x.storage());
    launch(&x.client, op, Geometry::Units(col_grad.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < columns.len()`; scattered positions are
        // checked against the input's extent.
        unsafe {
            deform_col2im::launch_unchecked::<R>(
                client, count, dim, col_grad.as_arg(), offset.as_arg(), mask_ref.as_arg(), b.as_arg(),
                offset.layout.offset, mask_ref.layout.offset, d.arg(), has_mask, storage,
            )
        }
    });
    if x.dtype == DType::F32 { bits } else { cast(bits, x.dtype) }
}

fn offset_mask_grad<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    offset: &CubeTensor<R>,
    mask: Option<&CubeTensor<R>>,
    col_grad: &CubeTensor<R>,
    d: &Dims,
) -> (CubeTensor<R>, Option<CubeTensor<R>>) {
    let offset_grad = CubeTensor::empty(&x.client, &x.device, offset.layout.shape.clone(), x.dtype);
    let mask_grad = mask.map(|m| CubeTensor::empty(&x.client, &x.device, m.layout.shape.clone(), x.dtype));
    let mask_ref = mask.unwrap_or(offset);
    let mask_out = mask_grad.as_ref().unwrap_or(&offset_grad);
    let units = offset.num_elements() / 2;
    let (x, offset, mask_ref, col_grad, has_mask, d) = (x.clone(), offset.clone(), mask_ref.clone(), col_grad.clone(), mask.is_some(), *d);
    let (grad, mask_out) = (offset_grad.clone(), mask_out.clone());
    launch(&offset_grad.client, op, Geometry::Units(units), move |client, count, dim| {
        // SAFETY: the kernel guards its unit count (one per offset pair); reads of x are
        // checked against its extent.
        unsafe {
            deform_offset_grad::launch_unchecked::<R>(
                client, count, dim, x.as_arg(), offset.as_arg(), mask_ref.as_arg(), col_grad.as_arg(),
                grad.as_arg(), mask_out.as_arg(), x.layout.offset, offset.layout.offset, mask_ref.layout.offset,
                d.arg(), has_mask, [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    (offset_grad, mask_grad)
}
