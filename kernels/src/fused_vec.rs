//! The fused elementwise kernel of [`crate::fused`], `N` elements per unit: each input is
//! loaded as one vector (or one value for all `N` lanes), the program runs once per lane, and
//! each output is stored as one vector. The ops are the same, lane by lane, so the bits are
//! those of [`fused_float`](fn@crate::fused::fused_float).
use cubecl::prelude::*;
use cubecl::std::FastDivmod;

use crate::bf16::{load, store};
use crate::fused::{FusedProgram, as_register, run_ops, strided_offset};

/// How the vectorised kernel reads one input at the `N` positions `N * pos ..` of the
/// iteration shape. Inputs read as a vector are bound as arrays of vectors, the others
/// (`Scalar`, `StridedSplat`) as arrays of values whose one value fills every lane.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum VectorRead {
    /// Contiguous with the output: vector `offset + pos` (the offset counted in vectors).
    Linear,
    /// One value for every position: element `offset`.
    Scalar,
    /// A strided view whose innermost dimension is contiguous, with `N` dividing that
    /// dimension, the offset and every other stride: the vector at element
    /// `offset + strided_offset(N * pos)`.
    Strided,
    /// A strided view broadcast along the innermost dimension (stride 0), with `N` dividing
    /// that dimension: the element `offset + strided_offset(N * pos)` in every lane.
    StridedSplat,
}

impl VectorRead {
    /// Whether the input is bound as an array of vectors.
    pub fn is_vector(self) -> bool {
        matches!(self, VectorRead::Linear | VectorRead::Strided)
    }
}

/// The program of [`fused_float`](fn@crate::fused::fused_float) on `vectors_len` vectors of `N`
/// elements: float input `k` is `vectors[..]` or `splats[..]` as `program.reads[k]` says (in
/// the order of the inputs of each kind), likewise bool input `k`; every output is contiguous.
/// Float inputs and outputs are stored as `S` (see [`fused_float`](fn@crate::fused::fused_float)).
/// Offsets of `Linear` inputs count vectors, the others' elements.
#[cube(launch_unchecked)]
pub fn fused_float_vec<S: Numeric, F: Float, A: Float, B: Numeric, N: Size>(
    vectors: &Sequence<Array<Vector<S, N>>>,
    splats: &Sequence<Array<S>>,
    bool_vectors: &Sequence<Array<Vector<B, N>>>,
    bool_splats: &Sequence<Array<B>>,
    outputs: &mut Sequence<Array<Vector<S, N>>>,
    bool_outputs: &mut Sequence<Array<Vector<B, N>>>,
    offsets: Sequence<usize>,
    shape: Sequence<FastDivmod<usize>>,
    strides: Sequence<usize>,
    vectors_len: usize,
    scalars: Sequence<InputScalar>,
    params: Sequence<InputScalar>,
    lhs_one: InputScalar,
    rhs_one: InputScalar,
    #[comptime] program: FusedProgram<VectorRead>,
    #[define(S, F, A, B)] _dtypes: [StorageType; 4],
) {
    if ABSOLUTE_POS >= vectors_len {
        terminate!();
    }
    let bits = comptime!(program.round_to_bf16);
    let floats = comptime!(program.reads.len());
    let loaded = load_inputs::<S, N>(vectors, splats, &offsets, &shape, &strides, program.reads.clone(), 0usize);
    let bools_loaded = load_inputs::<B, N>(bool_vectors, bool_splats, &offsets, &shape, &strides, program.bool_reads.clone(), floats);
    let mut results = Sequence::<Vector<S, N>>::new();
    #[unroll]
    for _ in 0..program.outputs.len() {
        results.push(Vector::<S, N>::empty());
    }
    let mut bool_results = Sequence::<Vector<B, N>>::new();
    #[unroll]
    for _ in 0..program.bool_outputs.len() {
        bool_results.push(Vector::<B, N>::empty());
    }
    let (l, r) = (lhs_one.get::<F>(), rhs_one.get::<F>());
    #[unroll]
    for lane in 0..N::value() {
        let mut regs = Sequence::<F>::new();
        #[unroll]
        for k in 0..floats {
            regs.push(load::<S, F>(loaded[k][lane], bits));
        }
        #[unroll]
        for k in 0..program.bool_reads.len() {
            regs.push(as_register::<F, B>(bools_loaded[k][lane]));
        }
        run_ops::<F, A>(&mut regs, &scalars, &params, l, r, program.ops.clone(), program.round_to_bf16);
        #[unroll]
        for j in 0..program.outputs.len() {
            let reg = comptime!(program.outputs[j]);
            let result = results.index_mut(j);
            result[lane] = store::<S, F>(regs[reg], bits);
        }
        #[unroll]
        for j in 0..program.bool_outputs.len() {
            let reg = comptime!(program.bool_outputs[j]);
            let result = bool_results.index_mut(j);
            result[lane] = B::cast_from(!(regs[reg] == F::new(0.0)));
        }
    }
    #[unroll]
    for j in 0..program.outputs.len() {
        let output = outputs.index_mut(j);
        output[ABSOLUTE_POS] = results[j];
    }
    #[unroll]
    for j in 0..program.bool_outputs.len() {
        let output = bool_outputs.index_mut(j);
        output[ABSOLUTE_POS] = bool_results[j];
    }
}

/// The vectors of unit `ABSOLUTE_POS` of the inputs read as `reads` says, which are inputs
/// `first ..` of the launch (for their offsets and strides), bound in `vectors` and `splats`.
#[cube]
fn load_inputs<T: Numeric, N: Size>(
    vectors: &Sequence<Array<Vector<T, N>>>,
    splats: &Sequence<Array<T>>,
    offsets: &Sequence<usize>,
    shape: &Sequence<FastDivmod<usize>>,
    strides: &Sequence<usize>,
    #[comptime] reads: Vec<VectorRead>,
    #[comptime] first: usize,
) -> Sequence<Vector<T, N>> {
    let mut loaded = Sequence::<Vector<T, N>>::new();
    #[unroll]
    for k in 0..reads.len() {
        let (read, slot, input) = comptime!((reads[k], slot(&reads, k), first + k));
        let at = index::<N>(ABSOLUTE_POS, offsets[input], read, shape, strides, input);
        let v = match read.is_vector() {
            true => vectors.index(slot)[at],
            false => Vector::<T, N>::new(splats.index(slot)[at]),
        };
        loaded.push(v);
    }
    loaded
}

/// The index of input `k`'s read of vector `pos` in its binding: in vectors for an input
/// read as a vector, in elements for the others; `offset` counts vectors for a `Linear`
/// input, elements for the others.
#[cube]
pub(crate) fn index<N: Size>(
    pos: usize,
    offset: usize,
    #[comptime] read: VectorRead,
    shape: &Sequence<FastDivmod<usize>>,
    strides: &Sequence<usize>,
    #[comptime] k: usize,
) -> usize {
    match read {
        VectorRead::Linear => offset + pos,
        VectorRead::Scalar => offset,
        VectorRead::Strided => (offset + strided_offset(pos * N::value(), shape, strides, k)) / N::value(),
        VectorRead::StridedSplat => offset + strided_offset(pos * N::value(), shape, strides, k),
    }
}

/// Input `k`'s place among the inputs bound as it is (as vectors or as values).
pub fn slot(reads: &[VectorRead], k: usize) -> usize {
    reads[..k].iter().filter(|r| r.is_vector() == reads[k].is_vector()).count()
}
