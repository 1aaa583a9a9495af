//! Copies: making views contiguous, casting, flipping, filling, and writing into views.
use burn_backend::{DType, Scalar, Shape};
use cubecl::Runtime;
use cubecl::prelude::CubeDim;
use cubecl::prelude::SequenceArg;
use ex_cubecl_kernels::copy::{CopyConvert, PASS, TILE, cat_rows, copy_tiles, copy_view, copy_view_vec, fill as fill_kernel};

use super::elementwise::flat_vector_size;
use super::{scalar_arg, usizes, widest_vector};
use super::views::Views;
use crate::runtime::{Geometry, Layout, coalesce, launch};
use crate::tensor::CubeTensor;

/// Copies `input` seen through `in_view` (mirrored on the dimensions of `flip_mask`) into
/// `output` seen through `out_view`; both views share one shape.
pub(crate) fn copy_into<R: Runtime>(
    input: &CubeTensor<R>,
    in_view: &Layout,
    flip_mask: u32,
    output: &CubeTensor<R>,
    out_view: &Layout,
) {
    debug_assert_eq!(in_view.shape, out_view.shape);
    if input.dtype == output.dtype && flip_mask == 0 {
        // The views coalesced once for the three ways of copying without converting.
        let coalesced = coalesce(&in_view.shape, &[&in_view.strides, &out_view.strides]);
        let c = (&coalesced.0[..], &coalesced.1[..]);
        if copy_by_rows(input, in_view, output, out_view, c)
            || copy_by_tiles(input, in_view, output, out_view, c)
            || copy_by_vectors(input, in_view, output, out_view, c)
        {
            return;
        }
    }
    let convert = match (input.bf16_bits(), output.bf16_bits()) {
        (true, false) => CopyConvert::WidenBf16,
        (false, true) => CopyConvert::NarrowBf16,
        _ if output.dtype.is_bool() && !input.dtype.is_bool() => CopyConvert::ToBool,
        _ => CopyConvert::Cast,
    };
    let n = in_view.num_elements();
    let client = &output.client;
    let out_linear = out_view.is_contiguous();
    let strides: [&[usize]; 2] = [&in_view.strides, &out_view.strides];
    // Mirrored dimensions stay apart; `last` gives their size minus one (0 elsewhere).
    let views = match flip_mask {
        0 => Views::new(&in_view.shape, &strides, false),
        _ => Views::uncoalesced(&in_view.shape, &strides),
    };
    let last: Vec<usize> = match flip_mask {
        0 => vec![0; views.rank()],
        mask => in_view.shape.iter().enumerate().map(|(d, &n)| if mask >> d & 1 == 1 { n - 1 } else { 0 }).collect(),
    };
    let (input, in_offset, output, out_offset) = (input.clone(), in_view.offset, output.clone(), out_view.offset);
    launch(client, "copy", Geometry::Units(n), move |client, count, dim| {
        // SAFETY: both views lie inside their buffers and the kernel guards `pos < n`.
        unsafe {
            copy_view::launch_unchecked::<R>(
                client,
                count,
                dim,
                input.buffer_arg(),
                output.buffer_arg(),
                in_offset,
                out_offset,
                n,
                views.shape(),
                views.strides(0),
                views.strides(1),
                usizes(&last),
                convert,
                out_linear,
                [input.storage(), output.storage()],
            )
        }
    });
}

/// Two views' shape and strides coalesced (`coalesce`): the dimensions, then each view's strides.
type Coalesced<'a> = (&'a [usize], &'a [Vec<usize>]);

/// Copies with [`cat_rows`] (one part) when both views are rows of contiguous elements (at most two
/// dimensions once coalesced, the inner one of stride 1 in both), in the widest vectors that
/// divide the row length, both offsets and both row strides. `false` (nothing launched) for
/// any other pair of views.
fn copy_by_rows<R: Runtime>(input: &CubeTensor<R>, in_view: &Layout, output: &CubeTensor<R>, out_view: &Layout, (dims, strides): Coalesced) -> bool {
    let (rows, cols, in_stride, out_stride) = match dims[..] {
        [cols] if strides[0][0] == 1 && strides[1][0] == 1 => (1, cols, cols, cols),
        [rows, cols] if strides[0][1] == 1 && strides[1][1] == 1 => (rows, cols, strides[0][0], strides[1][0]),
        _ => return false,
    };
    let part = RowPart { tensor: input, offset: in_view.offset, stride: in_stride, width: cols };
    rows_side_by_side("copy", &[part], output, out_view.offset, out_stride, rows);
    true
}

/// One part of [`rows_side_by_side`]: `rows` rows of `width` contiguous elements of `tensor`,
/// the first at `offset`, each `stride` after the last.
struct RowPart<'a, R: Runtime> {
    tensor: &'a CubeTensor<R>,
    offset: usize,
    stride: usize,
    width: usize,
}

/// The most parts [`rows_side_by_side`] takes in one launch.
const MAX_PARTS: usize = 8;

/// Launches [`cat_rows`]: `rows` rows of `parts` (of `output`'s dtype, at most [`MAX_PARTS`])
/// written side by side into `output`, the first row at `out_offset`, each `out_stride` after
/// the last; in the widest vectors that divide every width, offset and stride. The parts'
/// offsets, strides and ends travel in fixed arrays, not in vectors built per launch.
fn rows_side_by_side<R: Runtime>(op: &str, parts: &[RowPart<'_, R>], output: &CubeTensor<R>, out_offset: usize, out_stride: usize, rows: usize) {
    let n = parts.len();
    assert!(n <= MAX_PARTS, "ex_cubecl: {op}: {n} parts in one launch, more than {MAX_PARTS}");
    let units = [out_offset, out_stride].into_iter().chain(parts.iter().flat_map(|p| [p.offset, p.stride, p.width]));
    let v = widest_vector(&output.client, output.storage().size(), units);
    let (mut ends, mut in_offsets, mut in_strides, mut cols) = ([0; MAX_PARTS], [0; MAX_PARTS], [0; MAX_PARTS], 0);
    for (i, p) in parts.iter().enumerate() {
        cols += p.width / v;
        (ends[i], in_offsets[i], in_strides[i]) = (cols, p.offset / v, p.stride / v);
    }
    let inputs: [Option<CubeTensor<R>>; MAX_PARTS] = std::array::from_fn(|i| parts.get(i).map(|p| p.tensor.clone()));
    let vectors = rows * cols;
    let (o, out_offset, out_stride) = (output.clone(), out_offset / v, out_stride / v);
    launch(&output.client, op, Geometry::Units(vectors), move |client, count, cube_dim| {
        let mut args = SequenceArg::new();
        for input in inputs.iter().flatten() {
            args.push(input.buffer_arg());
        }
        // SAFETY: every part's rows lie inside its buffer and the output's inside its own;
        // the kernel guards `pos < vectors`; `v` divides every offset, stride and width.
        unsafe {
            cat_rows::launch_unchecked::<R>(
                client, count, cube_dim, v, args, o.buffer_arg(), usizes(&in_offsets[..n]), usizes(&in_strides[..n]),
                usizes(&ends[..n]), out_offset, out_stride, cols, vectors, o.storage(),
            )
        }
    });
}

/// Writes contiguous `parts` of one dtype side by side along `dim` into the contiguous
/// `output`, whose shape is theirs with `dim` summed: with [`cat_rows`], as many parts per
/// launch as the device binds buffers (so one launch for a few parts). `false` (nothing
/// launched) when a part is not contiguous.
pub(crate) fn cat_into<R: Runtime>(parts: &[CubeTensor<R>], output: &CubeTensor<R>, dim: usize) -> bool {
    if !parts.iter().all(|p| p.layout.is_contiguous()) || !output.layout.is_contiguous_from_start() {
        return false;
    }
    let rows: usize = output.dims()[..dim].iter().product();
    let row_len = |t: &CubeTensor<R>| t.dims()[dim..].iter().product::<usize>();
    let parts: Vec<&CubeTensor<R>> = parts.iter().filter(|p| p.num_elements() > 0).collect();
    let per_launch = (output.client.properties().hardware.max_bindings as usize).saturating_sub(2).clamp(1, MAX_PARTS);
    let mut start = 0;
    for chunk in parts.chunks(per_launch) {
        let chunk: Vec<RowPart<R>> =
            chunk.iter().map(|&p| RowPart { tensor: p, offset: p.layout.offset, stride: row_len(p), width: row_len(p) }).collect();
        rows_side_by_side("cat", &chunk, output, start, row_len(output), rows);
        start += chunk.iter().map(|p| p.width).sum::<usize>();
    }
    true
}

/// Copies with [`copy_tiles`] when the views, coalesced, are `[batch, p, q]` (or `[p, q]`)
/// with the input contiguous along `p` and the output along `q`, on devices whose cubes run
/// on a GPU (elsewhere the barrier costs more than the scattered accesses it saves). On an
/// H200 the channels-last copy of a `[64, 64, 56, 56]` f16 tensor took 63 µs element by
/// element. Where every size, offset and stride is even, it moves pairs of elements
/// (ResNet-50's convolutions transpose their inputs and weights this way: 3.73 -> 2.11 ms of
/// its bf16 step). `false` (nothing launched) for any other pair of views.
fn copy_by_tiles<R: Runtime>(input: &CubeTensor<R>, in_view: &Layout, output: &CubeTensor<R>, out_view: &Layout, (dims, strides): Coalesced) -> bool {
    let (batch, p, q, [in_b, out_b], in_q, out_p) = match (&dims[..], &strides[0][..], &strides[1][..]) {
        (&[p, q], &[1, in_q], &[out_p, 1]) => (1, p, q, [0, 0], in_q, out_p),
        (&[batch, p, q], &[in_b, 1, in_q], &[out_b, out_p, 1]) => (batch, p, q, [in_b, out_b], in_q, out_p),
        _ => return false,
    };
    if super::cubes_on_cpu(&input.client) {
        return false;
    }
    // Pairs of elements where every size, offset and stride is even (64 x 64 tiles).
    let even = [p, q, in_b, in_q, out_b, out_p, in_view.offset, out_view.offset].iter().all(|&n| n % 2 == 0);
    let n = if even { 2 } else { 1 };
    let side = TILE * n;
    let cubes = batch * p.div_ceil(side) * q.div_ceil(side);
    let geometry = Geometry::Cubes { count: cubes, dim: CubeDim::new_2d(TILE as u32, PASS as u32) };
    let (input, output, in_offset, out_offset) = (input.clone(), output.clone(), in_view.offset, out_view.offset);
    let client = output.client.clone();
    launch(&client, "copy", geometry, move |client, count, dim| {
        // SAFETY: every vector is guarded by `p` and `q` and whole inside them (`n` divides
        // both), aligned (offsets and strides are multiples of `n`); the views lie inside their
        // buffers, and the cube count covers `batch` whole grids of tiles.
        unsafe {
            copy_tiles::launch_unchecked::<R>(
                client, count, dim, n, input.buffer_arg(), output.buffer_arg(), in_offset, in_b, in_q, out_offset, out_b,
                out_p, p, q, n, input.storage(),
            )
        }
    });
    true
}

/// Copies in vectors along the innermost dimension when both views step through it
/// contiguously and the widest vector wider than 1 divides it, both offsets and every stride;
/// false (nothing launched) otherwise. Batch norm's statistics copy its `[n, c, h, w]` input
/// as `[c, n, h, w]` this way: on an H200, ResNet-50's captured bf16 step went from 55.3 to
/// 52.4 ms (element by element, a `[64, 256, 56, 56]` copy took 154 us).
fn copy_by_vectors<R: Runtime>(input: &CubeTensor<R>, in_view: &Layout, output: &CubeTensor<R>, out_view: &Layout, (dims, strides): Coalesced) -> bool {
    let mut dims = dims.to_vec();
    if dims.is_empty() || strides.iter().any(|s| s.last() != Some(&1)) {
        return false;
    }
    let outer = strides.iter().flat_map(|s| s[..s.len() - 1].iter().copied());
    let units: Vec<usize> = outer.chain([in_view.offset, out_view.offset, dims[dims.len() - 1]]).collect();
    let v = widest_vector(&output.client, output.storage().size(), units);
    if v == 1 {
        return false;
    }
    *dims.last_mut().expect("a dimension") /= v;
    let [in_strides, out_strides] = [0, 1].map(|k| {
        let mut s: Vec<usize> = strides[k].iter().map(|&x| x / v).collect();
        *s.last_mut().expect("a dimension") = 1;
        s
    });
    let vectors = in_view.num_elements() / v;
    let (input, output, in_offset, out_offset) = (input.clone(), output.clone(), in_view.offset / v, out_view.offset / v);
    let client = output.client.clone();
    launch(&client, "copy", Geometry::Units(vectors), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < vectors`; both views, read in vectors that divide
        // their offsets and strides, lie inside their buffers.
        unsafe {
            copy_view_vec::launch_unchecked::<R>(
                client, count, dim, v, input.buffer_arg(), output.buffer_arg(), in_offset, out_offset, vectors,
                super::divmods(&dims), usizes(&in_strides), usizes(&out_strides), input.storage(),
            )
        }
    });
    true
}

/// The tensor with a contiguous layout starting at the buffer's start; a no-op when it
/// already has one.
pub fn into_contiguous<R: Runtime>(tensor: CubeTensor<R>) -> CubeTensor<R> {
    if tensor.layout.is_contiguous_from_start() {
        return tensor;
    }
    copy_as(&tensor, tensor.dtype, 0)
}

/// A contiguous copy of `tensor` with `dtype` elements, flipping the dimensions of `flip_mask`.
pub(crate) fn copy_as<R: Runtime>(tensor: &CubeTensor<R>, dtype: DType, flip_mask: u32) -> CubeTensor<R> {
    let out = CubeTensor::empty(&tensor.client, &tensor.device, tensor.layout.shape.clone(), dtype);
    copy_into(tensor, &tensor.layout, flip_mask, &out, &out.layout);
    out
}

/// `tensor` cast to `dtype` (a no-op for the same dtype). Casting to bool gives `x != 0`.
/// Integers convert as Rust's `as` does: a signed value going to a wider unsigned type is
/// sign-extended first (-30i8 as u16 is 65506), which cubecl's SPIR-V conversion doesn't do,
/// so it goes through the signed type of the target's width. bf16 held as bits converts
/// through f32.
pub fn cast<R: Runtime>(tensor: CubeTensor<R>, dtype: DType) -> CubeTensor<R> {
    if tensor.dtype == dtype {
        return tensor;
    }
    let bits = |d| super::bf16::held_as_bits(&tensor.client, d);
    let widened = match (tensor.dtype, dtype) {
        (from, to) if from != DType::F32 && to != DType::F32 && (bits(from) || bits(to)) => Some(DType::F32),
        (DType::I8, DType::U16) => Some(DType::I16),
        (DType::I8 | DType::I16, DType::U32) => Some(DType::I32),
        (DType::I8 | DType::I16 | DType::I32, DType::U64) => Some(DType::I64),
        _ => None,
    };
    match widened {
        Some(wide) => copy_as(&copy_as(&tensor, wide, 0), dtype, 0),
        None => copy_as(&tensor, dtype, 0),
    }
}

/// `tensor` reversed along `axes`.
pub fn flip<R: Runtime>(tensor: CubeTensor<R>, axes: &[usize]) -> CubeTensor<R> {
    let mut mask = 0u32;
    for &axis in axes {
        super::check_dim("flip", &tensor, axis);
        if tensor.dims()[axis] > 1 {
            mask |= 1 << axis;
        }
    }
    if mask == 0 {
        return tensor;
    }
    copy_as(&tensor, tensor.dtype, mask)
}

/// A new contiguous tensor of `shape` filled with `value`.
pub fn full<R: Runtime>(device: &R::Device, shape: Shape, value: Scalar, dtype: DType) -> CubeTensor<R> {
    let client = crate::runtime::DeviceContext::client::<R>(device);
    if super::bf16::held_as_bits(&client, dtype) {
        return cast(full(device, shape, value, DType::F32), dtype);
    }
    let out = CubeTensor::empty(&client, device, shape, dtype);
    let value = scalar_arg("full", value, dtype);
    let n = out.num_elements();
    let v = flat_vector_size(&client, dtype, n, &[]);
    let o = out.clone();
    launch(&client, "full", Geometry::Units(n / v), move |client, count, dim| {
        // SAFETY: the kernel guards `pos < n / v`; the buffer holds `n` elements, a multiple of `v`.
        unsafe { fill_kernel::launch_unchecked::<R>(client, count, dim, v, o.buffer_arg(), n / v, value, o.storage()) }
    });
    out
}
