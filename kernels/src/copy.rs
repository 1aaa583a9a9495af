//! The copy kernel: strided (optionally flipped) read, dtype cast, strided write. It makes
//! views contiguous, casts between dtypes, flips axes and writes `slice_assign` values.
use cubecl::prelude::*;

use cubecl::std::FastDivmod;

use crate::bf16::bf16_bits;
use crate::strided::{seq_offset, seq_offset_flipped};

/// How the copy converts each element.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CopyConvert {
    /// Numeric cast (`as`-like).
    Cast,
    /// To bool storage: `x != 0 ? 1 : 0`.
    ToBool,
    /// bf16 bits (`I` = u16) to f32 (`O`): the bits are the upper half of the f32's.
    WidenBf16,
    /// f32 (`I`) to bf16 bits (`O` = u16), rounded to nearest even; NaN stays a quiet NaN
    /// of its sign (rounding could carry its payload into infinity).
    NarrowBf16,
}

/// `output[view pos] = input[view pos]` in vectors of `N` along the innermost dimension, which
/// both views step through contiguously (a batch norm's [n, c, h, w] activations copied as
/// [c, n, h, w]): `shape` counts that dimension in vectors, offsets and strides are in vectors.
#[cube(launch_unchecked)]
pub fn copy_view_vec<T: Numeric, N: Size>(
    input: &Array<Vector<T, N>>,
    output: &mut Array<Vector<T, N>>,
    in_offset: usize,
    out_offset: usize,
    vectors: usize,
    shape: Sequence<FastDivmod<usize>>,
    in_strides: Sequence<usize>,
    out_strides: Sequence<usize>,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    output[out_offset + seq_offset(ABSOLUTE_POS, &shape, &out_strides)] =
        input[in_offset + seq_offset(ABSOLUTE_POS, &shape, &in_strides)];
}

/// `output[view pos] = convert(input[view pos])`, `pos` running over the iteration shape
/// `shape`, which both views share (their buffers, offsets and strides: see [`seq_offset`](fn@seq_offset)).
/// The input coordinate of every dimension whose `in_last` entry is not 0 is mirrored
/// (`in_last` holds its size minus one there).
#[cube(launch_unchecked)]
pub fn copy_view<I: Numeric, O: Numeric>(
    input: &Array<I>,
    output: &mut Array<O>,
    in_offset: usize,
    out_offset: usize,
    num_elems: usize,
    shape: Sequence<FastDivmod<usize>>,
    in_strides: Sequence<usize>,
    out_strides: Sequence<usize>,
    in_last: Sequence<usize>,
    #[comptime] convert: CopyConvert,
    #[comptime] out_linear: bool,
    #[define(I, O)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_elems {
        terminate!();
    }
    let x = input[in_offset + seq_offset_flipped(ABSOLUTE_POS, &shape, &in_strides, &in_last)];
    let y = match convert {
        CopyConvert::Cast => O::cast_from(x),
        CopyConvert::ToBool => O::cast_from(!(x == I::cast_from(0u32))),
        CopyConvert::WidenBf16 => O::cast_from(f32::reinterpret(u32::cast_from(x) << 16)),
        CopyConvert::NarrowBf16 => O::cast_from(bf16_bits(f32::cast_from(x))),
    };
    if out_linear {
        output[out_offset + ABSOLUTE_POS] = y;
    } else {
        output[out_offset + seq_offset(ABSOLUTE_POS, &shape, &out_strides)] = y;
    }
}

/// Rows of contiguous parts side by side, in one launch: `output[out_offset + r * out_stride +
/// c] = inputs[i][in_offsets[i] + r * in_strides[i] + c - starts[i]]` for every row `r` and
/// column `c < cols`, where part `i` holds the columns `[starts[i], ends[i])` (`starts[i]` is
/// `ends[i - 1]`, 0 for the first). Cat of contiguous parts, and with one part a same-dtype copy
/// between views whose rows are contiguous (slice_assign, contiguous copies). Offsets, strides
/// and columns count vectors of `N`; `vectors` is `rows * cols`. The parts are unrolled: each
/// unit tests every part's columns.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn cat_rows<T: Numeric, N: Size>(
    inputs: &Sequence<Array<Vector<T, N>>>,
    output: &mut Array<Vector<T, N>>,
    in_offsets: Sequence<usize>,
    in_strides: Sequence<usize>,
    ends: Sequence<usize>,
    out_offset: usize,
    out_stride: usize,
    cols: FastDivmod<usize>,
    vectors: usize,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    let (r, c) = cols.div_mod(ABSOLUTE_POS);
    let parts = inputs.len().comptime();
    let mut start = 0usize;
    #[unroll]
    for i in 0..parts {
        let end = ends[i];
        if c >= start && c < end {
            output[out_offset + r * out_stride + c] = inputs[i][in_offsets[i] + r * in_strides[i] + c - start];
        }
        start = end;
    }
}

/// Units along a [`copy_tiles`](fn@copy_tiles) cube's rows, each moving `n` elements per access.
pub const TILE: usize = 32;
/// Rows of a tile each pass of a [`copy_tiles`](fn@copy_tiles) cube covers (its units are `TILE` × `PASS`).
pub const PASS: usize = 8;

/// A same-dtype copy between two views over `[batch, p, q]` where the input is contiguous
/// along `p` and the output along `q` (a transpose: channels-last copies, transposed
/// operands): `output[out_offset + b · out_b + i · out_p + j] = input[in_offset + b · in_b + i +
/// j · in_q]`. Each cube moves one `n · TILE` × `n · TILE` tile through shared memory, each
/// unit reading vectors of `n` (`N`'s size) along `p` and writing them along `q`, so that both
/// sides are coalesced; `n` divides `p`, `q`, both offsets and every stride (which count
/// elements). Rows of the tile are one element longer than it: the rows a unit reads for one
/// output vector, and the units of a warp, fall on distinct banks. Cubes run over `(b, tile
/// of p, tile of q)`, tiles of `q` fastest; the cube is `TILE` × `PASS` units.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn copy_tiles<T: Numeric, N: Size>(
    input: &Array<Vector<T, N>>,
    output: &mut Array<Vector<T, N>>,
    in_offset: usize,
    in_b: usize,
    in_q: usize,
    out_offset: usize,
    out_b: usize,
    out_p: usize,
    p: usize,
    q: usize,
    #[comptime] n: usize,
    #[define(T)] _dtype: StorageType,
) {
    let side = comptime!(TILE * n);
    let tiles_q = q.div_ceil(side);
    let tiles_p = p.div_ceil(side);
    let j0 = (CUBE_POS % tiles_q) * side;
    let i0 = ((CUBE_POS / tiles_q) % tiles_p) * side;
    let b = CUBE_POS / (tiles_q * tiles_p);
    let x = UNIT_POS_X as usize;
    let y = UNIT_POS_Y as usize;
    let mut tile = SharedMemory::<T>::new(comptime!(side * (side + 1)));
    #[unroll]
    for k in 0..comptime!(side / PASS) {
        let (i, j) = (i0 + x * n, j0 + y + k * PASS);
        if i < p && j < q {
            let v = input[(in_offset + b * in_b + i + j * in_q) / n];
            #[unroll]
            for l in 0..n {
                tile[(y + k * PASS) * (side + 1) + x * n + l] = v[l];
            }
        }
    }
    sync_cube();
    #[unroll]
    for k in 0..comptime!(side / PASS) {
        let (i, j) = (i0 + y + k * PASS, j0 + x * n);
        if i < p && j < q {
            let mut v = Vector::<T, N>::empty();
            #[unroll]
            for l in 0..n {
                v[l] = tile[(x * n + l) * (side + 1) + y + k * PASS];
            }
            output[(out_offset + b * out_b + i * out_p + j) / n] = v;
        }
    }
}

/// Fills a contiguous buffer with one value, `N` elements per unit (whole-vector stores);
/// `vectors` is the buffer's length in vectors.
#[cube(launch_unchecked)]
pub fn fill<T: Numeric, N: Size>(output: &mut Array<Vector<T, N>>, vectors: usize, value: InputScalar, #[define(T)] _dtype: StorageType) {
    if ABSOLUTE_POS >= vectors {
        terminate!();
    }
    output[ABSOLUTE_POS] = Vector::<T, N>::new(value.get::<T>());
}
