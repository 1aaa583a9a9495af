//! Softmax and log-softmax along one dimension, fused: one unit per line makes the three
//! passes (max, sum of exponentials, normalisation) without intermediate tensors.
use cubecl::prelude::*;

use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::strided::{line_start, seq_offset};

/// `output` is contiguous with the input view's shape. Sums run in `A` (f32 for half-precision
/// inputs, `T` otherwise). With `log`, writes log-softmax. With `bits` (in every kernel of
/// this file), `T` is u16 holding bf16 bits, read and written through [`load`](fn@crate::bf16::load)
/// and [`store`](fn@crate::bf16::store).
#[cube(launch_unchecked)]
pub fn softmax<T: Numeric, A: Float>(
    input: &Tensor<T>,
    output: &mut Tensor<T>,
    offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] log: bool,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    if ABSOLUTE_POS >= num_lines {
        terminate!();
    }
    let start = line_start::<T, T>(input, output, ABSOLUTE_POS, dim);
    let in_start = offset + start.input;
    let out_start = start.output;
    let len = input.shape(dim);
    let in_stride = input.stride(dim);
    let out_stride = output.stride(dim);

    let mut max = load::<T, A>(input[in_start], bits);
    for k in 1..len {
        let x = load::<T, A>(input[in_start + k * in_stride], bits);
        max = select(x > max, x, max);
    }
    let mut sum = A::new(0.0);
    for k in 0..len {
        sum += crate::math::exp::<A>(load::<T, A>(input[in_start + k * in_stride], bits) - max);
    }
    let log_sum = crate::math::ln::<A>(sum);
    for k in 0..len {
        let z = load::<T, A>(input[in_start + k * in_stride], bits) - max;
        let y = if log { z - log_sum } else { crate::math::exp::<A>(z) / sum };
        output[out_start + k * out_stride] = store::<T, A>(y, bits);
    }
}

/// One cube per line (`CUBE_POS`), for long lines: the units stride over the line keeping a
/// running max and a sum of exponentials rescaled to it (an online softmax), merge those pairs
/// through a shared-memory tree, then read the line again to write the result (a re-read that
/// the cache mostly serves).
#[cube(launch_unchecked)]
pub fn softmax_per_cube<T: Numeric, A: Float>(
    input: &Tensor<T>,
    output: &mut Tensor<T>,
    offset: usize,
    dim: usize,
    num_lines: usize,
    #[comptime] cube_size: usize,
    #[comptime] log: bool,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube: a cube past the end leaves as a whole, before any barrier.
    if CUBE_POS >= num_lines {
        terminate!();
    }
    let start = line_start::<T, T>(input, output, CUBE_POS, dim);
    let in_start = offset + start.input;
    let out_start = start.output;
    let len = input.shape(dim);
    let in_stride = input.stride(dim);
    let out_stride = output.stride(dim);
    let unit = UNIT_POS as usize;

    // Units with no element keep max = the line's first element and sum = 0, which merge
    // as a no-op.
    let mut max = load::<T, A>(input[in_start], bits);
    let mut sum = A::new(0.0);
    let mut k = unit;
    while k < len {
        let x = load::<T, A>(input[in_start + k * in_stride], bits);
        if x > max {
            sum = sum * crate::math::exp::<A>(max - x);
            max = x;
        }
        sum += crate::math::exp::<A>(x - max);
        k += cube_size;
    }

    let (max, sum) = merge_max_sum::<A>(max, sum, unit, cube_size);
    let log_sum = crate::math::ln::<A>(sum);

    let mut k = unit;
    while k < len {
        let z = load::<T, A>(input[in_start + k * in_stride], bits) - max;
        let y = if log { z - log_sum } else { crate::math::exp::<A>(z) / sum };
        output[out_start + k * out_stride] = store::<T, A>(y, bits);
        k += cube_size;
    }
}

/// One cube per contiguous row of `len` vectors of `N` (`CUBE_POS`; the input's rows start at
/// `offset + seq_offset(row)` of the leading dimensions `rows`, `row_strides`, the output's at
/// `row * len`), for long rows along the last dimension: like [`softmax_per_cube`](fn@softmax_per_cube), each unit
/// reading whole vectors (one 16-byte load for four f32) and the buffers taken as arrays
/// (no shapes or strides uploaded at launch). With `held` > 0 (rows of at most `held` vectors
/// per unit) each unit loads its vectors into registers at once, all loads in flight together,
/// and the row is read once; with 0 the units stream over the row twice. Offsets, strides and
/// `len` count vectors.
#[cube(launch_unchecked)]
#[allow(clippy::too_many_arguments)]
pub fn softmax_rows<T: Numeric, A: Float, N: Size>(
    input: &Array<Vector<T, N>>,
    output: &mut Array<Vector<T, N>>,
    offset: usize,
    len: usize,
    num_rows: usize,
    rows: Sequence<FastDivmod<usize>>,
    row_strides: Sequence<usize>,
    #[comptime] cube_size: usize,
    #[comptime] held: usize,
    #[comptime] log: bool,
    #[comptime] bits: bool,
    #[define(T, A)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube: a cube past the end leaves as a whole, before any barrier.
    if CUBE_POS >= num_rows {
        terminate!();
    }
    let in_start = offset + seq_offset(CUBE_POS, &rows, &row_strides);
    let out_start = CUBE_POS * len;
    let unit = UNIT_POS as usize;
    let mut max = load::<T, A>(input[in_start][0], bits);
    let mut sum = A::new(0.0);
    if held > 0 {
        // Units past the row's end load its first vector and leave it out.
        let mut regs = Sequence::<Vector<T, N>>::new();
        #[unroll]
        for i in 0..held {
            let k = unit + i * cube_size;
            regs.push(input[in_start + select(k < len, k, 0)]);
        }
        #[unroll]
        for i in 0..held {
            if unit + i * cube_size < len {
                let (m, s) = add_vector::<T, A, N>(regs[i], max, sum, bits);
                max = m;
                sum = s;
            }
        }
        let (max, sum) = merge_max_sum::<A>(max, sum, unit, cube_size);
        let log_sum = crate::math::ln::<A>(sum);
        #[unroll]
        for i in 0..held {
            let k = unit + i * cube_size;
            if k < len {
                output[out_start + k] = softmax_vector::<T, A, N>(regs[i], max, sum, log_sum, log, bits);
            }
        }
    } else {
        let mut k = unit;
        while k < len {
            let (m, s) = add_vector::<T, A, N>(input[in_start + k], max, sum, bits);
            max = m;
            sum = s;
            k += cube_size;
        }
        let (max, sum) = merge_max_sum::<A>(max, sum, unit, cube_size);
        let log_sum = crate::math::ln::<A>(sum);
        let mut k = unit;
        while k < len {
            output[out_start + k] = softmax_vector::<T, A, N>(input[in_start + k], max, sum, log_sum, log, bits);
            k += cube_size;
        }
    }
}

/// A running max and sum of exponentials (relative to the max) with the vector `v` added: the
/// vector's own max first, so that the sum is rescaled once per vector.
#[cube]
fn add_vector<T: Numeric, A: Float, N: Size>(v: Vector<T, N>, max: A, sum: A, #[comptime] bits: bool) -> (A, A) {
    let mut m = load::<T, A>(v[0], bits);
    #[unroll]
    for j in 1..v.vector_size() {
        let x = load::<T, A>(v[j], bits);
        m = select(x > m, x, m);
    }
    let mut max = max;
    let mut sum = sum;
    if m > max {
        sum *= crate::math::exp::<A>(max - m);
        max = m;
    }
    #[unroll]
    for j in 0..v.vector_size() {
        sum += crate::math::exp::<A>(load::<T, A>(v[j], bits) - max);
    }
    (max, sum)
}

/// The softmax (or with `log` the log-softmax) of each element of `v`, given its line's max,
/// sum of exponentials and that sum's log.
#[cube]
fn softmax_vector<T: Numeric, A: Float, N: Size>(v: Vector<T, N>, max: A, sum: A, log_sum: A, #[comptime] log: bool, #[comptime] bits: bool) -> Vector<T, N> {
    let mut y = Vector::<T, N>::empty();
    #[unroll]
    for j in 0..v.vector_size() {
        let z = load::<T, A>(v[j], bits) - max;
        y[j] = store::<T, A>(if log { z - log_sum } else { crate::math::exp::<A>(z) / sum }, bits);
    }
    y
}

/// The cube's running maxima and sums of exponentials (each unit's `sum` taken relative to its
/// `max`) merged through a shared-memory tree: the line's max and its sum of exponentials
/// relative to it, in every unit. Units with no element keep a max that is some element of the
/// line and a sum of 0, which merges as a no-op.
#[cube]
fn merge_max_sum<A: Float>(max: A, sum: A, unit: usize, #[comptime] cube_size: usize) -> (A, A) {
    let mut shared_max = SharedMemory::<A>::new(cube_size);
    let mut shared_sum = SharedMemory::<A>::new(cube_size);
    shared_max[unit] = max;
    shared_sum[unit] = sum;
    sync_cube();
    let mut half = CUBE_DIM as usize / 2;
    while half > 0 {
        if unit < half {
            let m1 = shared_max[unit];
            let m2 = shared_max[unit + half];
            let m = select(m2 > m1, m2, m1);
            shared_sum[unit] = shared_sum[unit] * crate::math::exp::<A>(m1 - m) + shared_sum[unit + half] * crate::math::exp::<A>(m2 - m);
            shared_max[unit] = m;
        }
        sync_cube();
        half /= 2;
    }
    (shared_max[0], shared_sum[0])
}
