//! Quantized tensors: quantization (with given scales or scales computed on the device),
//! dequantization, Burn's quantized `TensorData` format, and the layout ops.
//!
//! Supported schemes, those burn-ndarray 0.21 supports: `Q8F` and `Q8S` values, symmetric
//! mode, one scale per tensor or per block. Blocks are flat chunks of `block.num_elements()`
//! consecutive elements (row-major), as burn-ndarray and Burn's `compute_range` read them,
//! and must divide the tensor. Stores `Native` and `PackedU32(0)`: for 8-bit values both
//! have the same bytes in `TensorData` (burn-ndarray quantizes into `Native` only but reads
//! both). Scale params `F32`, `F16` and `BF16` are all kept and serialised as f32, as
//! burn-ndarray does.
//!
//! Views (reshape of contiguous values, permute, swap_dims, expand, positive-step slices)
//! change the values' layout only; each value keeps the scale of its buffer position. Ops
//! that copy per-block values into a new order (flip, select, negative-step slices, reading
//! a view back) keep each output block's values and scale when the block comes from one
//! source block, and requantize it with a fresh scale otherwise.
use burn_backend::quantization::{QuantLevel, QuantMode, QuantParam, QuantScheme, QuantStore, QuantValue};
use burn_backend::{DType, ExecutionError, Shape, Slice, TensorData};
use cubecl::Runtime;
use ex_cubecl_kernels::quantize::{
    Gather, QuantRange, dequantize_symmetric, quantize_symmetric, requantize_blocks, scales_from_max_abs,
};
use ex_cubecl_kernels::reduce::ReduceOp;

use super::copy::{cast, flip as flip_values, into_contiguous};
use super::data;
use super::index::{gather as gather_values, select as select_values};
use super::reduce::{reduce_all, reduce_dim};
use super::view::{self, slice_view};
use super::check_dim;
use crate::runtime::{Geometry, Layout, launch};
use crate::tensor::{CubeTensor, QuantizedTensor};

type Q<R> = QuantizedTensor<R>;

/// Bytes per scale in Burn's quantized data format.
const SCALE_BYTES: usize = 4;

/// Panics unless `scheme` is supported (see the module docs).
fn check_scheme(op: &str, scheme: &QuantScheme, shape: &[usize], dtype: DType) {
    let unsupported = |what: String, supported: &str| -> ! {
        panic!(
            "ex_cubecl: {op}: {what} is not supported (supported: {supported}; scheme {scheme:?}, shape {shape:?}, {dtype:?})"
        )
    };
    match scheme.value {
        QuantValue::Q8F | QuantValue::Q8S => {}
        other => unsupported(format!("quantization value {other:?}"), "Q8F, Q8S"),
    }
    match scheme.store {
        QuantStore::Native | QuantStore::PackedU32(0) => {}
        other => unsupported(format!("store {other:?}"), "Native, PackedU32(0)"),
    }
    match scheme.param {
        QuantParam::F32 | QuantParam::F16 | QuantParam::BF16 => {}
        other => unsupported(format!("scale param {other:?}"), "F32, F16, BF16"),
    }
    match scheme.mode {
        QuantMode::Symmetric => {}
    }
}

/// Elements per scale and number of scales of a whole tensor of `shape`.
fn blocks(op: &str, scheme: &QuantScheme, shape: &[usize], dtype: DType) -> (usize, usize) {
    let n: usize = shape.iter().product();
    match scheme.level {
        QuantLevel::Tensor => (n.max(1), 1),
        QuantLevel::Block(size) => {
            let block = size.num_elements();
            if block == 0 || n % block != 0 {
                panic!(
                    "ex_cubecl: {op}: {n} elements of shape {shape:?} ({dtype:?}) are not a whole number of blocks of {block} ({:?})",
                    size
                );
            }
            (block, n / block)
        }
    }
}

fn range(scheme: &QuantScheme) -> QuantRange {
    match scheme.value {
        QuantValue::Q8F => QuantRange::Full,
        _ => QuantRange::Symmetric,
    }
}

fn check_float<R: Runtime>(op: &str, tensor: &CubeTensor<R>) {
    if !tensor.dtype.is_float() {
        panic!(
            "ex_cubecl: {op}: expected a float tensor, got {:?} with shape {:?}",
            tensor.dtype,
            tensor.dims()
        );
    }
}

/// `tensor` quantized with the given `scales` (a float tensor with one scale per block, in
/// block order, or one for the whole tensor).
pub fn quantize<R: Runtime>(tensor: CubeTensor<R>, scheme: &QuantScheme, scales: CubeTensor<R>) -> Q<R> {
    let op = "quantize";
    check_float(op, &tensor);
    check_scheme(op, scheme, tensor.dims(), tensor.dtype);
    let (block, count) = blocks(op, scheme, tensor.dims(), tensor.dtype);
    check_float(op, &scales);
    if scales.num_elements() != count {
        panic!(
            "ex_cubecl: {op}: {} scales of shape {:?} for {count} blocks of tensor {:?} ({:?}, {scheme:?})",
            scales.num_elements(),
            scales.dims(),
            tensor.dims(),
            tensor.dtype
        );
    }
    let scales = into_contiguous(cast(scales, DType::F32));
    let scales = scales.with_layout(Layout::contiguous(Shape::from(vec![count])));
    encode(&tensor, scheme, scales, block)
}

/// `tensor` quantized with scales computed on the device from each block's largest
/// magnitude: `2 max|x| / (hi - lo)`, as Burn's min-max calibration gives.
pub fn quantize_dynamic<R: Runtime>(tensor: CubeTensor<R>, scheme: &QuantScheme) -> Q<R> {
    let op = "quantize_dynamic";
    check_float(op, &tensor);
    check_scheme(op, scheme, tensor.dims(), tensor.dtype);
    let (block, count) = blocks(op, scheme, tensor.dims(), tensor.dtype);
    let max_abs = match scheme.level {
        QuantLevel::Tensor => reduce_all(tensor.clone(), ReduceOp::MaxAbs, DType::F32),
        QuantLevel::Block(_) => {
            let rows = view::reshape(tensor.clone(), Shape::from(vec![count, block]));
            reduce_dim(rows, 1, ReduceOp::MaxAbs, DType::F32)
        }
    };
    let scales = max_abs.with_layout(Layout::contiguous(Shape::from(vec![count])));
    let (s, quant_range) = (scales.clone(), range(scheme));
    launch(&scales.client, op, Geometry::Units(count), move |client, cubes, dim| {
        // SAFETY: the kernel guards `pos < count`, the length of the scales.
        unsafe { scales_from_max_abs::launch_unchecked::<R>(client, cubes, dim, s.as_arg(), count, quant_range) }
    });
    encode(&tensor, scheme, scales, block)
}

/// Quantizes `tensor` with contiguous f32 `scales`, `block` elements per scale.
fn encode<R: Runtime>(tensor: &CubeTensor<R>, scheme: &QuantScheme, scales: CubeTensor<R>, block: usize) -> Q<R> {
    let tensor = &super::bf16::widen(tensor.clone());
    let values = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), DType::I8);
    let n = tensor.num_elements();
    let (t, s, v, quant_range) = (tensor.clone(), scales.clone(), values.clone(), range(scheme));
    launch(&tensor.client, "quantize", Geometry::Units(n), move |client, cubes, dim| {
        // SAFETY: the kernel guards `pos < n`; the input view lies inside its buffer and
        // `pos / block` is below the number of scales.
        unsafe {
            quantize_symmetric::launch_unchecked::<R>(
                client, cubes, dim, t.as_arg(), s.as_arg(), v.as_arg(),
                t.layout.offset, n, block, quant_range, t.layout.is_contiguous(), t.storage(),
            )
        }
    });
    Q { values, scales, scheme: *scheme }
}

/// The float tensor of `dtype` that `q` stands for.
pub fn dequantize<R: Runtime>(q: Q<R>, dtype: DType) -> CubeTensor<R> {
    let values = &q.values;
    if !dtype.is_float() {
        panic!("ex_cubecl: dequantize: target dtype {dtype:?} is not a float dtype (shape {:?})", values.dims());
    }
    if super::bf16::held_as_bits(&values.client, dtype) {
        return super::bf16::narrow(dequantize(q, DType::F32), dtype);
    }
    let out = CubeTensor::empty(&values.client, &values.device, values.layout.shape.clone(), dtype);
    let n = out.num_elements();
    // Per tensor, one block spans every position the view reaches.
    let block = q.block_elems().unwrap_or(values.layout.span().max(1));
    let (v, s, o) = (values.clone(), q.scales.clone(), out.clone());
    launch(&values.client, "dequantize", Geometry::Units(n), move |client, cubes, dim| {
        // SAFETY: the kernel guards `pos < n`; the view lies inside its buffer and every
        // buffer position has a scale.
        unsafe {
            dequantize_symmetric::launch_unchecked::<R>(
                client, cubes, dim, v.as_arg(), s.as_arg(), o.as_arg(),
                v.layout.offset, n, block, o.storage(),
            )
        }
    });
    out
}

/// Per-block values gathered into a new contiguous layout of `shape`, block by block (see
/// the module docs). `values` is a view of `q`'s buffer: with `select`, the tensor selected
/// from; otherwise a view of `shape`, mirrored on the dimensions of `flip_mask`.
fn requantize<R: Runtime>(
    op: &str,
    q: &Q<R>,
    values: &CubeTensor<R>,
    shape: Shape,
    flip_mask: u32,
    select: Option<(usize, CubeTensor<R>)>,
) -> Q<R> {
    let block = q.block_elems().expect("per-block tensor");
    let n = shape.num_elements();
    let chunks = n.div_ceil(block);
    let out_values = CubeTensor::empty(&values.client, &values.device, shape, DType::I8);
    let out_scales = CubeTensor::empty(&values.client, &values.device, Shape::from(vec![chunks]), DType::F32);
    let (dim, indices, gather) = match select {
        Some((dim, indices)) => (dim, indices, Gather::Select),
        None => (0, CubeTensor::empty(&values.client, &values.device, Shape::from(vec![1]), DType::U32), Gather::View),
    };
    let (v, s, ov, os, quant_range) = (values.clone(), q.scales.clone(), out_values.clone(), out_scales.clone(), range(&q.scheme));
    launch(&values.client, op, Geometry::Units(chunks), move |client, cubes, cube_dim| {
        // SAFETY: the kernel guards `chunk < chunks` and `pos < n`; sources are read through
        // views inside their buffers, and select indices out of range read nothing.
        unsafe {
            requantize_blocks::launch_unchecked::<R>(
                client, cubes, cube_dim, v.as_arg(), s.as_arg(), indices.as_arg(),
                ov.as_arg(), os.as_arg(), v.layout.offset, indices.layout.offset,
                n, chunks, block, flip_mask, dim, quant_range, gather, indices.storage(),
            )
        }
    });
    Q { values: out_values, scales: out_scales, scheme: q.scheme }
}

/// `q` with contiguous values from the buffer's start and exactly the scales they use.
pub fn compact<R: Runtime>(q: Q<R>) -> Q<R> {
    match q.block_elems() {
        None => q.with_values(into_contiguous(q.values.clone())),
        Some(block) => {
            let n = q.values.num_elements();
            if q.values.layout.is_contiguous_from_start() && q.scales.num_elements() == n.div_ceil(block) {
                return q;
            }
            let shape = q.values.layout.shape.clone();
            requantize("q_compact", &q, &q.values, shape, 0, None)
        }
    }
}

/// `q` with another shape of the same size.
pub fn reshape<R: Runtime>(q: Q<R>, shape: Shape) -> Q<R> {
    if shape.num_elements() != q.values.num_elements() {
        panic!(
            "ex_cubecl: q_reshape: cannot reshape {:?} ({} elements) into {:?} ({:?})",
            q.values.dims(),
            q.values.num_elements(),
            shape.to_vec(),
            q.scheme
        );
    }
    if q.block_elems().is_none() {
        return q.with_values(view::reshape(q.values.clone(), shape));
    }
    match q.values.layout.reshape(shape.clone()) {
        Some(layout) => q.with_values(q.values.with_layout(layout)),
        None => reshape(compact(q), shape),
    }
}

/// A layout-only op applied to the values.
pub fn map_view<R: Runtime>(q: Q<R>, f: impl FnOnce(CubeTensor<R>) -> CubeTensor<R>) -> Q<R> {
    q.with_values(f(q.values.clone()))
}

/// `q` reversed along `axes`.
pub fn flip<R: Runtime>(q: Q<R>, axes: &[usize]) -> Q<R> {
    let mut mask = 0u32;
    for &axis in axes {
        check_dim("q_flip", &q.values, axis);
        if q.values.dims()[axis] > 1 {
            mask |= 1 << axis;
        }
    }
    flip_mask(q, "q_flip", mask)
}

/// `q` mirrored on the dimensions of `mask`.
fn flip_mask<R: Runtime>(q: Q<R>, op: &str, mask: u32) -> Q<R> {
    if mask == 0 {
        return q;
    }
    if q.block_elems().is_none() {
        let axes: Vec<usize> = (0..32).filter(|d| mask >> d & 1 == 1).collect();
        return q.with_values(flip_values(q.values.clone(), &axes));
    }
    requantize(op, &q, &q.values, q.values.layout.shape.clone(), mask, None)
}

/// The region of `q` selected by `slices`: a view for positive steps.
pub fn slice<R: Runtime>(q: Q<R>, slices: &[Slice]) -> Q<R> {
    let (layout, mask) = slice_view("q_slice", &q.values.layout, slices);
    let viewed = q.with_values(q.values.with_layout(layout));
    flip_mask(viewed, "q_slice", mask)
}

/// The entries of `q` at `indices` along `dim`, `indices` having the output's shape: the
/// values are gathered per tensor, and dequantized, gathered and requantized per block.
pub fn gather<R: Runtime>(q: Q<R>, dim: usize, indices: CubeTensor<R>) -> Q<R> {
    if q.block_elems().is_none() {
        return q.with_values(gather_values("q_gather", dim, q.values.clone(), indices));
    }
    let scheme = q.scheme;
    let values = gather_values("q_gather", dim, dequantize(q, DType::F32), indices);
    quantize_dynamic(values, &scheme)
}

/// The entries of `q` at `indices` (1-D, int) along `dim`.
pub fn select<R: Runtime>(q: Q<R>, dim: usize, indices: CubeTensor<R>) -> Q<R> {
    if q.block_elems().is_none() {
        return q.with_values(select_values("q_select", q.values.clone(), dim, indices));
    }
    check_dim("q_select", &q.values, dim);
    if !(indices.dtype.is_int() || indices.dtype.is_uint()) || indices.layout.rank() != 1 {
        panic!(
            "ex_cubecl: q_select: indices must be a 1-D int tensor, got {:?} with shape {:?}",
            indices.dtype,
            indices.dims()
        );
    }
    let mut shape = q.values.dims().to_vec();
    shape[dim] = indices.dims()[0];
    requantize("q_select", &q, &q.values, Shape::from(shape), 0, Some((dim, indices)))
}

/// `q` on `device`: unchanged when it is there already, else read back and uploaded.
pub fn to_device<R: Runtime>(q: Q<R>, device: &R::Device) -> Q<R> {
    use cubecl::device::Device;
    if q.values.device.to_id() == device.to_id() {
        return q;
    }
    let q = compact(q);
    let read = |t: CubeTensor<R>| {
        let dtype = t.dtype;
        let data = cubecl::future::block_on(data::into_data(t)).unwrap_or_else(|e| panic!("ex_cubecl: q_to_device: {e:?}"));
        data::from_data(data, device, dtype)
    };
    Q { values: read(q.values), scales: read(q.scales), scheme: q.scheme }
}

/// Uploads Burn quantized data: the i8 values (for `PackedU32(0)`, optionally padded to a
/// whole number of words), then the f32 scales.
pub fn from_data<R: Runtime>(data: TensorData, device: &R::Device) -> Q<R> {
    let op = "q_from_data";
    let shape = data.shape.to_vec();
    let DType::QFloat(scheme) = data.dtype else {
        panic!("ex_cubecl: {op}: expected quantized data (DType::QFloat), got {:?} with shape {shape:?}", data.dtype)
    };
    check_scheme(op, &scheme, &shape, data.dtype);
    let (_, count) = blocks(op, &scheme, &shape, data.dtype);
    let n = data.num_elements();
    let bytes = data.as_bytes();
    let scale_bytes = count * SCALE_BYTES;
    let padded = matches!(scheme.store, QuantStore::PackedU32(_)) && bytes.len() == n.next_multiple_of(4) + scale_bytes;
    if bytes.len() != n + scale_bytes && !padded {
        panic!(
            "ex_cubecl: {op}: {} bytes for shape {shape:?} of {:?} (expected {n} values and {count} f32 scales)",
            bytes.len(),
            data.dtype
        );
    }
    let values = TensorData::from_bytes_vec(bytes[..n].to_vec(), shape.clone(), DType::I8);
    let scales = TensorData::from_bytes_vec(bytes[bytes.len() - scale_bytes..].to_vec(), vec![count], DType::F32);
    Q {
        values: data::from_data(values, device, DType::I8),
        scales: data::from_data(scales, device, DType::F32),
        scheme,
    }
}

/// Reads `q` back in Burn's quantized data format (the i8 values in row-major order, then
/// one f32 scale per block), the bytes burn-ndarray produces.
///
/// # Errors
/// During a pipeline capture on this thread, which the read fails (as `data::into_data`).
///
/// # Panics
/// When a per-block view is not a whole number of blocks, which the format cannot hold.
pub fn into_data<R: Runtime>(q: Q<R>) -> impl Future<Output = Result<TensorData, ExecutionError>> + Send {
    let refused = crate::runtime::refused_host_read("q_into_data");
    let q = compact(q);
    let shape = q.values.layout.shape.clone();
    let n = shape.num_elements();
    let count = match q.block_elems() {
        None => 1,
        Some(block) if n % block == 0 => n / block,
        Some(block) => panic!(
            "ex_cubecl: q_into_data: {n} elements of shape {:?} are not a whole number of blocks of {block} ({:?}); \
             Burn's quantized data format cannot hold them",
            shape.to_vec(),
            q.scheme
        ),
    };
    let scheme = q.scheme;
    async move {
        if let Some(reason) = refused {
            return Err(ExecutionError::WithContext { reason });
        }
        let mut read = crate::runtime::wait::read(&q.values.client, vec![q.values.handle.clone(), q.scales.handle.clone()])
            .map_err(|e| ExecutionError::WithContext {
                reason: format!("ex_cubecl: q_into_data: reading {:?} of {scheme:?}: {e:?}", shape.to_vec()),
            })?;
        let scale_bytes = read.remove(1);
        let value_bytes = read.remove(0);
        let values: Vec<i8> = value_bytes[..n].iter().map(|&b| b as i8).collect();
        let scales: Vec<f32> = scale_bytes[..count * SCALE_BYTES]
            .chunks_exact(SCALE_BYTES)
            .map(|w| f32::from_ne_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        Ok(TensorData::quantized(values, shape, scheme, &scales))
    }
}
