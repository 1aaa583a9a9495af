//! Convolutions of 1 to 3 spatial dimensions, transposed convolutions, and `unfold4d` (their
//! weight and bias gradients are [`super::conv_weight`]'s, re-exported here). Every shape is lifted to three spatial dimensions (unit
//! dimensions in front) so that one kernel of each kind serves all ranks. A convolution's input
//! gradient is a transposed convolution (Burn's composition), which runs the convolution's own
//! kernels with the transposed gather; both weight gradients run one kernel family.
use burn_backend::ops::{ConvOptions, ConvTransposeOptions};
use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::ir::StorageType;
use cubecl::prelude::CubeDim;
use ex_cubecl_kernels::conv::{ConvParamsLaunch, unfold4d as unfold_kernel};
use ex_cubecl_kernels::conv_cmma::{ConvKernelLaunch, conv_cmma};
use ex_cubecl_kernels::conv_direct::conv_direct;
use ex_cubecl_kernels::conv_gemm::conv_gemm;
use ex_cubecl_kernels::binary::BinaryFloatOp;

use super::bf16;
pub use super::conv_weight::{bias_backward, conv_weight_backward, conv_weight_backward_with};
use super::conv_mma::{conv_mma_runs, launch_conv_mma};
use super::conv_tma::{runs_transposed_as_forward, transposed_as_forward};
use super::copy::{flip, into_contiguous};
use super::elementwise::{Rhs, binary_float_op};
use super::matmul::{cmma_operand, matmul, vector_size};
use super::{accumulator, cubes_on_cpu, view::reshape};
use crate::runtime::{Geometry, Layout, launch};
use crate::tensor::CubeTensor;

/// Stride, padding and dilation of the three lifted spatial dimensions, and the groups.
#[derive(Clone, Copy, Debug)]
pub struct ConvSpec {
    /// Spatial dimensions of the user's tensors (1 to 3).
    pub(crate) n: usize,
    pub(crate) stride: [usize; 3],
    pub(crate) padding: [usize; 3],
    pub(crate) dilation: [usize; 3],
    pub(crate) groups: usize,
}

impl ConvSpec {
    fn lift<const N: usize>(op: &str, stride: [usize; N], padding: [usize; N], dilation: [usize; N], groups: usize) -> Self {
        if stride.contains(&0) || dilation.contains(&0) || groups == 0 {
            panic!("ex_cubecl: {op}: stride {stride:?}, dilation {dilation:?} and groups {groups} must be non-zero");
        }
        let pad = |v: [usize; N], fill: usize| {
            let mut out = [fill; 3];
            out[3 - N..].copy_from_slice(&v);
            out
        };
        Self { n: N, stride: pad(stride, 1), padding: pad(padding, 0), dilation: pad(dilation, 1), groups }
    }

    /// From Burn's convolution options.
    pub fn conv<const N: usize>(op: &str, o: &ConvOptions<N>) -> Self {
        Self::lift(op, o.stride, o.padding, o.dilation, o.groups)
    }

    /// From Burn's transposed-convolution options (the output padding is used for the size).
    pub fn transposed<const N: usize>(op: &str, o: &ConvTransposeOptions<N>) -> Self {
        Self::lift(op, o.stride, o.padding, o.dilation, o.groups)
    }

    pub(crate) fn arg<R: Runtime>(&self) -> ConvParamsLaunch<R> {
        let [sd, sh, sw] = self.stride;
        let [pd, ph, pw] = self.padding;
        let [dd, dh, dw] = self.dilation;
        ConvParamsLaunch::new(sd, sh, sw, pd, ph, pw, dd, dh, dw, self.groups)
    }
}

/// `t` (`[b, c, spatial..]` with `n` spatial dimensions) as `[b, c, d, h, w]`.
pub(crate) fn lift<R: Runtime>(t: &CubeTensor<R>, n: usize) -> CubeTensor<R> {
    let dims = t.dims();
    let mut shape = dims[..2].to_vec();
    let mut strides = t.layout.strides[..2].to_vec();
    shape.extend(std::iter::repeat_n(1, 3 - n));
    strides.extend(std::iter::repeat_n(0, 3 - n));
    shape.extend_from_slice(&dims[2..]);
    strides.extend_from_slice(&t.layout.strides[2..]);
    t.with_layout(Layout { shape: Shape::from(shape), strides, offset: t.layout.offset })
}

pub(crate) fn check_float<R: Runtime>(op: &str, tensors: &[(&str, &CubeTensor<R>)]) {
    let dtype = tensors[0].1.dtype;
    for (name, t) in tensors {
        if !t.dtype.is_float() || t.dtype != dtype {
            let all: Vec<String> = tensors.iter().map(|(n, t)| format!("{n} {:?} {:?}", t.dims(), t.dtype)).collect();
            panic!("ex_cubecl: {op}: expected float tensors of one dtype, got {} ({name} differs)", all.join(", "));
        }
    }
}

pub(crate) fn check_rank<R: Runtime>(op: &str, name: &str, t: &CubeTensor<R>, rank: usize) {
    if t.layout.rank() != rank {
        panic!("ex_cubecl: {op}: {name} must have rank {rank}, got shape {:?} ({:?})", t.dims(), t.dtype);
    }
}

fn check_bias<R: Runtime>(op: &str, bias: Option<&CubeTensor<R>>, channels: usize) {
    if let Some(b) = bias
        && b.dims() != [channels]
    {
        panic!("ex_cubecl: {op}: bias must have shape [{channels}], got {:?} ({:?})", b.dims(), b.dtype);
    }
}

/// Ranks (`n` spatial dimensions) and dtypes of a convolution's inputs.
fn check_inputs<R: Runtime>(op: &str, x: &CubeTensor<R>, weight: &CubeTensor<R>, bias: Option<&CubeTensor<R>>, n: usize) {
    check_rank(op, "x", x, n + 2);
    check_rank(op, "weight", weight, n + 2);
    let mut all = vec![("x", x), ("weight", weight)];
    all.extend(bias.map(|b| ("bias", b)));
    check_float(op, &all);
}

/// Output size of a convolution along one axis, or a panic when the dilated kernel is larger
/// than the padded input.
fn conv_out(op: &str, x: &[usize], w: &[usize], axis: usize, s: &ConvSpec) -> usize {
    let (size, k, lifted) = (x[axis + 2], w[axis + 2], 3 - (x.len() - 2) + axis);
    let span = s.dilation[lifted] * (k.max(1) - 1) + 1;
    let padded = size + 2 * s.padding[lifted];
    if k == 0 || span > padded {
        panic!(
            "ex_cubecl: {op}: kernel {:?} (dilation {:?}) is larger than the padded input {x:?} (padding {:?})",
            &w[2..],
            &s.dilation[3 - (x.len() - 2)..],
            &s.padding[3 - (x.len() - 2)..]
        );
    }
    (padded - span) / s.stride[lifted] + 1
}

/// Convolution of `x` `[b, c_in, spatial..]` with `weight` `[c_out, c_in / groups, k..]`.
///
/// On devices with `mma.sync` for the dtype (f16, bf16, and f32 rounded to TF32 when
/// [`MatmulPrecision::Tf32`](super::matmul::MatmulPrecision) is chosen), groups of at least 16
/// output channels whose input channels come in 16-byte chunks run the implicit GEMM on manual
/// MMA ([`super::conv_mma`]); on other devices whose matrix units take the dtype (and for
/// other channel counts), such groups run the WMMA implicit GEMM (`conv_cmma`); everything
/// else (exact f32, devices without matrix units, narrower groups, empty reductions) runs the
/// implicit GEMM on plain arithmetic units (`conv_gemm`), or, on devices that run cubes on CPU
/// cores (lavapipe), a kernel without shared memory or barriers (`conv_direct`). Where bf16 is
/// held as bits, it runs as f32.
pub fn conv<R: Runtime>(op: &str, x: CubeTensor<R>, weight: CubeTensor<R>, bias: Option<CubeTensor<R>>, spec: ConvSpec) -> CubeTensor<R> {
    conv_with(op, x, weight, bias, spec, None)
}

/// [`conv`] with the tensor-core kernel's tiling chosen by the caller (for benchmarks and
/// tuning; the manual-MMA kernel's where it runs, else the WMMA kernel's); `None` picks the
/// default. The tiling is ignored where neither tensor-core kernel runs.
///
/// # Panics
/// On invalid shapes or dtypes (see [`conv`]) or a tiling that doesn't fit the kernel.
#[doc(hidden)]
pub fn conv_with<R: Runtime>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
    spec: ConvSpec,
    tiling: Option<ConvTiling>,
) -> CubeTensor<R> {
    let n = spec.n;
    check_inputs(op, &x, &weight, bias.as_ref(), n);
    if bf16::any(&[&x, &weight]) {
        let bias = bf16::widen_opt(bias);
        return bf16::map2(op, x, weight, |x, weight| conv_with(op, x, weight, bias, spec, tiling));
    }
    let (xd, wd) = (x.dims().to_vec(), weight.dims().to_vec());
    let groups = spec.groups;
    if xd[1] != wd[1] * groups || wd[0] % groups != 0 {
        panic!(
            "ex_cubecl: {op}: x {xd:?} has {} channels, weight {wd:?} with {groups} groups expects {} (and c_out divisible by groups)",
            xd[1],
            wd[1] * groups
        );
    }
    check_bias(op, bias.as_ref(), wd[0]);
    let mut out_shape = vec![xd[0], wd[0]];
    out_shape.extend((0..n).map(|axis| conv_out(op, &xd, &wd, axis, &spec)));
    launch_implicit_gemm(op, &x, &weight, bias.as_ref(), out_shape, spec, tiling, false)
}

/// The implicit GEMM of a convolution, or of a transposed convolution (`transposed`) whose
/// weight comes as the convolution weight `[c_out, c_in / groups, k..]` it acts as, on the
/// kernel [`conv`] describes.
#[allow(clippy::too_many_arguments)]
fn launch_implicit_gemm<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: Vec<usize>,
    spec: ConvSpec,
    tiling: Option<ConvTiling>,
    transposed: bool,
) -> CubeTensor<R> {
    if let Some(out) = pointwise(op, x, weight, bias, &out_shape, spec) {
        return out;
    }
    let wd = weight.dims();
    let cout_g = wd[0] / spec.groups;
    let reduction = wd[1..].iter().product::<usize>();
    if let Some(tf32) = conv_mma_runs(x, &[wd[1]], cout_g, reduction) {
        return launch_conv_mma(op, x, weight, bias, out_shape, spec, tiling, tf32, transposed);
    }
    match cmma_operand(&x.client, x.dtype) {
        Some((operand, frag_k)) if cout_g >= 16 && reduction > 0 => {
            let t = tiling.unwrap_or_else(|| default_tiling(x.dtype, cout_g));
            check_tiling(op, x, t, frag_k, operand);
            launch_conv_cmma(op, x, weight, bias, out_shape, spec, t, operand, frag_k, transposed)
        }
        _ if cubes_on_cpu(&x.client) => launch_conv_direct(op, x, weight, bias, out_shape, spec, transposed),
        _ => launch_conv_gemm(op, x, weight, bias, out_shape, spec, transposed),
    }
}

/// A 1 × 1 convolution of stride 1, without padding or groups (or such a transposed one,
/// whose output has the input's size), as the matrix product it is: per batch entry,
/// `weight [c_out, c_in] @ x [c_in, pixels]` (plus the bias). `None` for any other
/// convolution.
fn pointwise<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: &[usize],
    spec: ConvSpec,
) -> Option<CubeTensor<R>> {
    let (xd, wd) = (x.dims(), weight.dims());
    let plain = spec.groups == 1 && spec.stride == [1; 3] && spec.padding == [0; 3];
    if !plain || wd[2..].iter().any(|&k| k != 1) || out_shape[2..] != xd[2..] || xd[0] == 0 {
        return None;
    }
    let (batch, c_in, c_out) = (xd[0], xd[1], wd[0]);
    let pixels = xd[2..].iter().product::<usize>();
    let x3 = reshape(x.clone(), Shape::new([batch, c_in, pixels]));
    let w3 = reshape(weight.clone(), Shape::new([1, c_out, c_in]));
    let mut out = matmul(op, w3, x3);
    if let Some(bias) = bias {
        let column = reshape(bias.clone(), Shape::new([1, c_out, 1]));
        out = binary_float_op(out, Rhs::Tensor(column), BinaryFloatOp::Add);
    }
    Some(reshape(out, Shape::from(out_shape.to_vec())))
}

/// Output channels × pixels per unit of the barrier-free convolution.
const DIRECT: [usize; 2] = [8, 4];

fn launch_conv_direct<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: Vec<usize>,
    spec: ConvSpec,
    transposed: bool,
) -> CubeTensor<R> {
    let n = out_shape.len() - 2;
    let out = CubeTensor::empty(&x.client, &x.device, Shape::from(out_shape), x.dtype);
    let out5 = lift(&out, n);
    let (x5, w5) = (lift(x, n), lift(weight, n));
    let cout_g = out.dims()[1] / spec.groups;
    let pixels = out.num_elements() / out.dims()[1].max(1);
    let [un, um] = DIRECT;
    let units = if out.num_elements() == 0 { 0 } else { spec.groups * cout_g.div_ceil(un) * pixels.div_ceil(um) };
    let has_bias = bias.is_some();
    let bias = bias.unwrap_or(weight).clone();
    let dtypes = [x.storage(), accumulator(x.dtype)];
    launch(&out.client, op, Geometry::Units(units), move |client, count, dim| {
        // SAFETY: units past `units` leave at once; every gather and write is checked against
        // the input's and output's extents.
        unsafe {
            conv_direct::launch_unchecked::<R>(
                client, count, dim, x5.as_arg(), w5.as_arg(), bias.as_arg(), out5.as_arg(), x5.layout.offset,
                w5.layout.offset, bias.layout.offset, spec.arg(), units, has_bias, transposed, un, um, dtypes,
            )
        }
    });
    out
}

/// The tiling of the tensor-core convolution: a `block_co` (output channels) × `block_pix`
/// (output pixels) tile per cube, K slices of `block_k`, and `warps_co` × `warps_pix` planes
/// of 32 units, each owning a `(block_co / warps_co)` × `(block_pix / warps_pix)` part.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTiling {
    /// Output channels per cube.
    pub block_co: usize,
    /// Output pixels per cube.
    pub block_pix: usize,
    /// Reduction (`taps · c_in / groups`) elements staged per step.
    pub block_k: usize,
    /// Planes along the channels.
    pub warps_co: usize,
    /// Planes along the pixels.
    pub warps_pix: usize,
}

/// The convolution weight `[c_out, cin_g, k..]` (`n` spatial dimensions) as the implicit
/// GEMMs take it: the contiguous `[c_out, taps · cin_g]` matrix in (tap, channel) order, and
/// the lifted kernel's extents.
pub(crate) fn weight_rows<R: Runtime>(weight: &CubeTensor<R>, n: usize) -> (CubeTensor<R>, [usize; 3]) {
    let w5 = lift(weight, n);
    let wd = w5.dims().to_vec();
    let k_total = wd[1..].iter().product::<usize>();
    let rows = into_contiguous(w5.with_layout(w5.layout.permute(&[0, 2, 3, 4, 1])));
    (rows.with_layout(Layout::contiguous(Shape::new([wd[0], k_total]))), [wd[2], wd[3], wd[4]])
}

/// The default tiling for `dtype` and `cout_g` output channels per group: as many channels
/// per cube as the group has (up to 128), 8 planes.
pub fn default_tiling(dtype: DType, cout_g: usize) -> ConvTiling {
    let block_k = if dtype == DType::F32 { 16 } else { 32 };
    let (block_co, block_pix, warps_co, warps_pix) = match cout_g {
        128.. => (128, 128, 4, 2),
        33.. => (64, 256, 2, 4),
        17.. => (32, 256, 2, 4),
        _ => (16, 256, 1, 8),
    };
    ConvTiling { block_co, block_pix, block_k, warps_co, warps_pix }
}

/// Shared memory of the tensor-core convolution, in bytes: two stages of both tiles (rows
/// padded by 16 bytes) and the epilogue's staging (1 KiB per plane).
fn cmma_shared_bytes(t: ConvTiling, operand: StorageType) -> usize {
    let elem = operand.size();
    let pad = 16 / elem;
    let units = t.warps_co * t.warps_pix * 32;
    2 * (t.block_co * (t.block_k + pad) + t.block_k * (t.block_pix + pad)) * elem + units * 32
}

fn check_tiling<R: Runtime>(op: &str, x: &CubeTensor<R>, t: ConvTiling, frag_k: usize, operand: StorageType) {
    let units = t.warps_co * t.warps_pix * 32;
    let fits = t.warps_co > 0
        && t.warps_pix > 0
        && t.block_k > 0
        && t.block_co % (16 * t.warps_co) == 0
        && t.block_pix % (16 * t.warps_pix) == 0
        && t.block_k % frag_k == 0
        && units % t.block_pix == 0
        && t.block_k % (units / t.block_pix) == 0
        && (t.block_co * t.block_k) % units == 0
        && cmma_shared_bytes(t, operand) <= x.client.properties().hardware.max_shared_memory_size;
    if !fits {
        panic!("ex_cubecl: {op}: tiling {t:?} does not fit the tensor-core convolution for {:?}", x.dtype);
    }
}

#[allow(clippy::too_many_arguments)]
fn launch_conv_cmma<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: Vec<usize>,
    spec: ConvSpec,
    t: ConvTiling,
    operand: StorageType,
    frag_k: usize,
    transposed: bool,
) -> CubeTensor<R> {
    let n = out_shape.len() - 2;
    let out = CubeTensor::empty(&x.client, &x.device, Shape::from(out_shape), x.dtype);
    let out5 = lift(&out, n);
    let x5 = lift(x, n);
    let (w_rows, [kd, kh, kw]) = weight_rows(weight, n);
    let (c_out, cin_g) = (weight.dims()[0], weight.dims()[1]);

    let units = t.warps_co * t.warps_pix * 32;
    let na = vector_size(&x.client, &w_rows.layout, x.dtype, (t.block_co * t.block_k / units).min(8));
    let od = out5.dims();
    let spatial = od[2] * od[3] * od[4];
    let rows = Layout::contiguous(Shape::new([od[0] * od[1], spatial]));
    let no = vector_size(&x.client, &rows, x.dtype, 8);
    // 16 bytes of padding per shared-memory row, in operand elements.
    let pad = 16 / operand.size();
    let one_tap = cin_g % t.block_k == 0;
    let cout_g = c_out / spec.groups;
    let pixels = od[0] * spatial;
    let cubes = spec.groups * cout_g.div_ceil(t.block_co) * pixels.div_ceil(t.block_pix);
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(units as u32) };
    let has_bias = bias.is_some();
    let bias = bias.cloned().unwrap_or_else(|| x.clone());
    let storage = x.storage();
    let out_arg = out5.clone();
    launch(&x.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave uniformly before any access; weight loads are
        // guarded by the group's channels and K (the vector size divides K), gathers by the
        // pixel count and the input's extents, and writes by the channels and pixels (the
        // output vector size divides the spatial size, so no vector straddles two batch
        // entries); shared-memory indices stay inside the two stages.
        unsafe {
            conv_cmma::launch_unchecked::<R>(
                client, count, dim, na, no, x5.as_arg(), w_rows.as_arg(), bias.as_arg(), out_arg.as_arg(),
                x5.layout.offset, bias.layout.offset, spec.arg(), ConvKernelLaunch::new(kd, kh, kw), cubes,
                has_bias, transposed, one_tap, t.block_co, t.block_pix, t.block_k, t.warps_co, t.warps_pix, frag_k, pad,
                [storage, operand],
            )
        }
    });
    out
}

/// Tile shapes of the implicit GEMMs on plain units: (channels, pixels, K slice, per-unit
/// channels, per-unit pixels) of a convolution, (outer channels, weight columns, pixel slice,
/// per-unit rows, per-unit columns) of a weight gradient; 256 units per cube either way.
pub(crate) const WIDE: [usize; 5] = [64, 64, 16, 4, 4];
pub(crate) const NARROW: [usize; 5] = [16, 64, 16, 1, 4];

fn launch_conv_gemm<R: Runtime>(
    op: &str,
    x: &CubeTensor<R>,
    weight: &CubeTensor<R>,
    bias: Option<&CubeTensor<R>>,
    out_shape: Vec<usize>,
    spec: ConvSpec,
    transposed: bool,
) -> CubeTensor<R> {
    let n = out_shape.len() - 2;
    let out = CubeTensor::empty(&x.client, &x.device, Shape::from(out_shape), x.dtype);
    let out5 = lift(&out, n);
    let (x5, w5) = (lift(x, n), lift(weight, n));
    let cout_g = out.dims()[1] / spec.groups;
    let pixels = out.num_elements() / out.dims()[1].max(1);
    let [bn, bm, bk, un, um] = if cout_g <= NARROW[0] { NARROW } else { WIDE };
    let cubes = spec.groups * cout_g.div_ceil(bn) * pixels.div_ceil(bm);
    let units = (bn / un * bm / um) as u32;
    let has_bias = bias.is_some();
    let bias = bias.unwrap_or(weight);
    let geometry = Geometry::Cubes { count: if out.num_elements() == 0 { 0 } else { cubes }, dim: CubeDim::new_1d(units) };
    let (x, bias) = (x.clone(), bias.clone());
    launch(&out.client, op, geometry, move |client, count, dim| {
        // SAFETY: cubes past `cubes` leave uniformly; every gather and write is checked
        // against the input's and output's extents.
        unsafe {
            conv_gemm::launch_unchecked::<R>(
                client, count, dim, x5.as_arg(), w5.as_arg(), bias.as_arg(), out5.as_arg(), x5.layout.offset,
                w5.layout.offset, bias.layout.offset, spec.arg(), cubes, has_bias, transposed, bn, bm, bk, un, um,
                [x.storage(), accumulator(x.dtype)],
            )
        }
    });
    out
}

/// Transposed convolution of `x` `[b, c_in, spatial..]` with `weight`
/// `[c_in, c_out / groups, k..]`, on the kernels of [`conv`] (with the weight as the
/// convolution weight it acts as). Of stride 1 and without output padding, where the TMA
/// kernel would run it, as the forward convolution with the flipped weight
/// ([`super::conv_tma`]).
pub fn conv_transpose<R: Runtime>(
    op: &str,
    x: CubeTensor<R>,
    weight: CubeTensor<R>,
    bias: Option<CubeTensor<R>>,
    spec: ConvSpec,
    padding_out: &[usize],
) -> CubeTensor<R> {
    let n = spec.n;
    check_inputs(op, &x, &weight, bias.as_ref(), n);
    if bf16::any(&[&x, &weight]) {
        let bias = bf16::widen_opt(bias);
        return bf16::map2(op, x, weight, |x, weight| conv_transpose(op, x, weight, bias, spec, padding_out));
    }
    let (xd, wd) = (x.dims().to_vec(), weight.dims().to_vec());
    let groups = spec.groups;
    if xd[1] != wd[0] || xd[1] % groups != 0 {
        panic!("ex_cubecl: {op}: x {xd:?} has {} channels but weight {wd:?} has {} input channels ({groups} groups)", xd[1], wd[0]);
    }
    check_bias(op, bias.as_ref(), wd[1] * groups);
    let mut out_shape = vec![xd[0], wd[1] * groups];
    for axis in 0..n {
        let l = 3 - n + axis;
        let full = xd[axis + 2].saturating_sub(1) * spec.stride[l] + spec.dilation[l] * wd[axis + 2].saturating_sub(1) + 1 + padding_out[axis];
        if xd[axis + 2] == 0 || wd[axis + 2] == 0 || full <= 2 * spec.padding[l] {
            panic!("ex_cubecl: {op}: padding {padding_out:?}/{:?} leaves no output for x {xd:?} and weight {wd:?}", &spec.padding[3 - n..]);
        }
        out_shape.push(full - 2 * spec.padding[l]);
    }
    let conv_weight = transposed_as_conv(&weight, groups);
    let kernel = lift(&conv_weight, n).dims()[2..].to_vec();
    if let Some(forward) = transposed_as_forward(&spec, [kernel[0], kernel[1], kernel[2]], padding_out)
        && runs_transposed_as_forward(&x, groups, wd[1])
    {
        // Stride 1: the forward convolution with the flipped weight, on the TMA kernel.
        let flipped = flip(conv_weight, &(2..n + 2).collect::<Vec<_>>());
        return launch_implicit_gemm(op, &x, &flipped, bias.as_ref(), out_shape, forward, None, false);
    }
    launch_implicit_gemm(op, &x, &conv_weight, bias.as_ref(), out_shape, spec, None, true)
}

/// A transposed convolution's weight `[c_in, c_out / groups, k..]` as the convolution weight
/// `[c_out, c_in / groups, k..]` it acts as: a view for one group, a copy otherwise (each
/// group's block is transposed on its own).
fn transposed_as_conv<R: Runtime>(weight: &CubeTensor<R>, groups: usize) -> CubeTensor<R> {
    let rank = weight.layout.rank();
    let mut order: Vec<usize> = (0..rank).collect();
    order.swap(0, 1);
    if groups == 1 {
        return weight.with_layout(weight.layout.permute(&order));
    }
    let (d, strides) = (weight.dims(), &weight.layout.strides);
    let (cin_g, cout_g) = (d[0] / groups, d[1]);
    // [groups, cin_g, cout_g, k..] -> [groups, cout_g, cin_g, k..], contiguous.
    let mut shape = vec![groups, cin_g];
    shape.extend_from_slice(&d[1..]);
    let mut split = vec![cin_g * strides[0], strides[0]];
    split.extend_from_slice(&strides[1..]);
    let blocks = Layout { shape: Shape::from(shape), strides: split, offset: weight.layout.offset };
    let mut order: Vec<usize> = (0..rank + 1).collect();
    order.swap(1, 2);
    let copied = into_contiguous(weight.with_layout(blocks.permute(&order)));
    let mut shape = vec![groups * cout_g, cin_g];
    shape.extend_from_slice(&d[2..]);
    copied.with_layout(Layout::contiguous(Shape::from(shape)))
}

/// `unfold4d`: sliding blocks of `x` `[b, c, h, w]` as `[b, c·kh·kw, blocks]`.
pub fn unfold4d<R: Runtime>(x: CubeTensor<R>, kernel: [usize; 2], spec: ConvSpec) -> CubeTensor<R> {
    let op = "unfold4d";
    check_rank(op, "x", &x, 4);
    let xd = x.dims().to_vec();
    let wd = [1, 1, kernel[0], kernel[1]];
    let (oh, ow) = (conv_out(op, &xd, &wd, 0, &spec), conv_out(op, &xd, &wd, 1, &spec));
    let out = CubeTensor::empty(&x.client, &x.device, Shape::new([xd[0], xd[1] * kernel[0] * kernel[1], oh * ow]), x.dtype);
    let x5 = lift(&x, 2);
    let o = out.clone();
    launch(&out.client, op, Geometry::Units(out.num_elements()), move |client, count, dim| {
        // SAFETY: the kernel guards `ABSOLUTE_POS < output.len()`; padding reads are masked
        // and clamped to the first element.
        unsafe {
            unfold_kernel::launch_unchecked::<R>(
                client, count, dim, x5.as_arg(), o.as_arg(), x5.layout.offset, kernel[0], kernel[1], ow,
                spec.arg(), x.storage(),
            )
        }
    });
    out
}
