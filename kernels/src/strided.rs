//! Index arithmetic shared by the kernels.
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

/// Offset, in elements, of the `pos`-th element (row-major order over the view's shape) of a
/// strided view. The view's shape is the iteration shape; its strides may be 0 (broadcast).
#[cube]
pub fn strided_offset<T: CubePrimitive>(view: &Tensor<T>, pos: usize) -> usize {
    let rank = view.rank();
    let mut offset = 0;
    let mut rem = pos;
    for i in 0..rank {
        let d = rank - 1 - i;
        let size = view.shape(d);
        offset += (rem % size) * view.stride(d);
        rem /= size;
    }
    offset
}

/// Offsets of the `pos`-th element (row-major over `shape`) of two views with strides
/// `a_strides` and `b_strides`. The rank is the sequences' length, known at compile time, so
/// the loop unrolls; the divisions are multiplications by constants the host worked out
/// (`FastDivmod`). Shape and strides come as arguments, not from a tensor's metadata, so
/// launches can pass them coalesced.
#[cube]
pub fn view_offsets(
    pos: usize,
    shape: &Sequence<FastDivmod<usize>>,
    a_strides: &Sequence<usize>,
    b_strides: &Sequence<usize>,
) -> (usize, usize) {
    let rank = shape.len().comptime();
    let mut a = 0;
    let mut b = 0;
    let mut rem = pos;
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let (q, r) = shape[d].div_mod(rem);
        a += r * a_strides[d];
        b += r * b_strides[d];
        rem = q;
    }
    (a, b)
}

/// Offset of the `pos`-th element (row-major over `shape`) of a view with `strides`. The rank
/// is the sequences' length, known at compile time, so the loop unrolls and each division is
/// a multiplication by a constant the host worked out.
///
/// Shape and strides passed this way travel with the launch's other scalars, where a
/// `Tensor` argument's shape and strides make cubecl upload a metadata buffer before each
/// launch (on an H100, 17 µs per launch of a tiny kernel with tensor arguments against 7.5 µs
/// with arrays: `benches`' `launch_cost`). Kernels on the launch path of every op take their
/// buffers as `Array`s and their layouts through these.
#[cube]
pub fn seq_offset(pos: usize, shape: &Sequence<FastDivmod<usize>>, strides: &Sequence<usize>) -> usize {
    let rank = shape.len().comptime();
    let mut offset = 0;
    let mut rem = pos;
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let (q, r) = shape[d].div_mod(rem);
        offset += r * strides[d];
        rem = q;
    }
    offset
}

/// Like [`seq_offset`](fn@seq_offset), mirroring the coordinate of every dimension whose `last` entry (its
/// size minus one) is not 0.
#[cube]
pub fn seq_offset_flipped(
    pos: usize,
    shape: &Sequence<FastDivmod<usize>>,
    strides: &Sequence<usize>,
    last: &Sequence<usize>,
) -> usize {
    let rank = shape.len().comptime();
    let mut offset = 0;
    let mut rem = pos;
    #[unroll]
    for i in 0..rank {
        let d = rank - 1 - i;
        let (q, r) = shape[d].div_mod(rem);
        let coord = select(last[d] == 0, r, last[d] - r);
        offset += coord * strides[d];
        rem = q;
    }
    offset
}

/// Element `pos` of a view of `buffer` starting at `offset`: read linearly when the view is
/// known (at compile time) to be contiguous with the iteration shape, through `strides` over
/// `shape` otherwise.
#[cube]
pub fn read_at<T: CubePrimitive>(
    buffer: &Array<T>,
    offset: usize,
    pos: usize,
    shape: &Sequence<FastDivmod<usize>>,
    strides: &Sequence<usize>,
    #[comptime] linear: bool,
) -> T {
    if linear {
        buffer[offset + pos]
    } else {
        buffer[offset + seq_offset(pos, shape, strides)]
    }
}

/// Like [`strided_offset`](fn@strided_offset) but mirrors the coordinate of every dimension whose bit is set in
/// `flip_mask` (used by `flip` and by slices with negative steps).
#[cube]
pub fn strided_offset_flipped<T: CubePrimitive>(
    view: &Tensor<T>,
    pos: usize,
    flip_mask: u32,
) -> usize {
    let rank = view.rank();
    let mut offset = 0;
    let mut rem = pos;
    for i in 0..rank {
        let d = rank - 1 - i;
        let size = view.shape(d);
        let mut coord = rem % size;
        if (flip_mask >> (d as u32)) & 1 == 1 {
            coord = size - 1 - coord;
        }
        offset += coord * view.stride(d);
        rem /= size;
    }
    offset
}

/// Reads element `pos` of a view: linearly when the view is known (at compile time) to be
/// contiguous with the iteration shape, through its strides otherwise.
#[cube]
pub fn read_view<T: CubePrimitive>(
    view: &Tensor<T>,
    offset: usize,
    pos: usize,
    #[comptime] linear: bool,
) -> T {
    if linear {
        view[offset + pos]
    } else {
        view[offset + strided_offset::<T>(view, pos)]
    }
}

/// Where line `line` along `dim` starts in an input view and in a contiguous output of the
/// same shape (lines are numbered over every dimension but `dim`).
#[derive(CubeType, Clone, Copy)]
pub struct LineStart {
    /// Element offset of the line's first input element (without the view's offset).
    pub input: usize,
    /// Element offset of the line's first output element.
    pub output: usize,
}

/// The [`LineStart`] of line `line` along `dim`.
#[cube]
pub fn line_start<T: CubePrimitive, O: CubePrimitive>(
    input: &Tensor<T>,
    output: &Tensor<O>,
    line: usize,
    dim: usize,
) -> LineStart {
    let rank = input.rank();
    let mut in_start = 0;
    let mut out_start = 0;
    let mut rem = line;
    for i in 0..rank {
        let d = rank - 1 - i;
        if !(d == dim) {
            let size = input.shape(d);
            let coord = rem % size;
            in_start += coord * input.stride(d);
            out_start += coord * output.stride(d);
            rem /= size;
        }
    }
    LineStart {
        input: in_start,
        output: out_start,
    }
}

/// Offset of the first element of line `line` along `dim` of a view (lines numbered over
/// every dimension but `dim`), without the view's offset.
#[cube]
pub fn line_offset<T: CubePrimitive>(view: &Tensor<T>, line: usize, dim: usize) -> usize {
    let rank = view.rank();
    let mut offset = 0;
    let mut rem = line;
    for i in 0..rank {
        let d = rank - 1 - i;
        if !(d == dim) {
            let size = view.shape(d);
            offset += (rem % size) * view.stride(d);
            rem /= size;
        }
    }
    offset
}

/// The smaller of two indices.
#[cube]
pub fn umin(a: usize, b: usize) -> usize {
    select(a < b, a, b)
}

/// The larger of two indices.
#[cube]
pub fn umax(a: usize, b: usize) -> usize {
    select(a > b, a, b)
}

/// `i` clamped to `[0, size)` (for `size > 0`), as an index.
#[cube]
pub fn clamp_index(i: i32, size: usize) -> usize {
    let top = i32::cast_from(size) - 1;
    usize::cast_from(select(i < 0, 0, select(i > top, top, i)))
}

/// Offset of element `[a, b, c, d]` of a rank-4 view (without the view's offset).
#[cube]
pub fn offset4<T: CubePrimitive>(t: &Tensor<T>, a: usize, b: usize, c: usize, d: usize) -> usize {
    a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3)
}

/// Offset of element `[a, b, c, d, e]` of a rank-5 view (without the view's offset).
#[cube]
pub fn offset5<T: CubePrimitive>(t: &Tensor<T>, a: usize, b: usize, c: usize, d: usize, e: usize) -> usize {
    a * t.stride(0) + b * t.stride(1) + c * t.stride(2) + d * t.stride(3) + e * t.stride(4)
}
