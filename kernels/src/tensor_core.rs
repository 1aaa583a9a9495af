//! The tensor-core pieces shared by the kernels on the matrix units' own instructions (cubecl's
//! manual MMA, CUDA's `mma.sync`): the matrix products ([`crate::matmul::mma`]) and flash
//! attention ([`crate::flash_attention_mma`]), f16 / bf16 on m16n8k16 and f32 rounded to TF32
//! on m16n8k8.
//!
//! Operands are staged in shared memory as they lie in global memory, in 16-byte chunks
//! ([`CHUNK`] elements of f16 / bf16, [`CHUNK_F32`] of f32) along their contiguous dimension,
//! by asynchronous copies ([`copy_tile`](fn@copy_tile)); a row's chunks are permuted ([`swizzle`](fn@swizzle)) so that
//! the reads of `ldmatrix` or of TF32 fragments, and a plane's copies, fall in distinct banks.
//! On Hopper the f16 / bf16 product's operands are staged by TMA instead, in boxes of 128-byte
//! rows that the hardware swizzles ([`boxed_chunk`](fn@boxed_chunk)).
//! `ldmatrix` hands each unit its fragment registers ([`fragment_chunk`](fn@fragment_chunk) says which chunk a
//! lane points it at), and the m16n8 f32 accumulators live in registers
//! ([`zero_accumulators`](fn@zero_accumulators)). Register layouts follow PTX's (lane = 4g + t): an m16n8 f32
//! accumulator holds row `g` (vector 0) and row `g + 8` (vector 1), columns `2t, 2t + 1`; an
//! m16n8k16 A fragment of f16 / bf16 holds rows `g`, `g + 8`, `g`, `g + 8` at columns
//! `2t, 2t + 1` (registers 0, 1) and `2t + 8, 2t + 9` (registers 2, 3); an m16n8k8 TF32 A
//! fragment holds register v at row `g + 8 (v % 2)`, column `t + 4 (v / 2)`, its B fragment
//! register v at row `t + 4v`, column `g`. The products sum over K in any order, so a kernel
//! may assign K positions to elements as suits its loads, the same way for A and B.
use cubecl::prelude::barrier::copy_async_checked;
use cubecl::prelude::*;

/// Elements of a 16-byte chunk of f16 / bf16.
pub const CHUNK: usize = 8;
/// Elements of a 16-byte chunk of f32.
pub const CHUNK_F32: usize = 4;

/// The vector of one 32-bit operand register (two f16 / bf16) and of an accumulator fragment's
/// row pair (two f32): the sizes cubecl's CUDA target gives m16n8k16.
pub type Pair = Const<2>;

/// `count` m16n8 f32 accumulator fragments of `def`, zeroed.
#[cube]
pub fn zero_accumulators<F: Float>(
    def: &cmma::MmaDefinition<F, F, f32>,
    #[comptime] count: usize,
) -> Sequence<Array<Vector<f32, Pair>>> {
    let vectors = def.vectors_per_lane(cmma::MatrixIdent::Accumulator);
    let mut acc = Sequence::new();
    #[unroll]
    for _f in 0..count {
        let mut frag = Array::<Vector<f32, Pair>>::new(vectors);
        #[unroll]
        for v in 0..vectors {
            frag[v] = Vector::new(0.0);
        }
        acc.push(frag);
    }
    acc
}

/// Starts the asynchronous copies of one operand's slice: `rows` rows of `cpr` chunks; row
/// `r`, chunk `c` is read from element `base + (outer0 + r) * outer_stride + inner0 + c *
/// chunk` (zero-filled past `outer_len` or `inner_len`) and lands at chunk `dst + r * cpr +
/// swizzle(r, c)`.
#[cube]
#[allow(clippy::too_many_arguments)]
pub fn copy_tile<T: Float, NV: Size>(
    src: &Tensor<Vector<T, NV>>,
    smem: &mut SharedMemory<Vector<T, NV>>,
    base: usize,
    outer0: usize,
    inner0: usize,
    outer_stride: usize,
    outer_len: usize,
    inner_len: usize,
    #[comptime] dst: usize,
    unit: usize,
    #[comptime] rows: usize,
    #[comptime] cpr: usize,
    #[comptime] units: usize,
    #[comptime] pattern: Swizzle,
) {
    let nv = src.vector_size();
    #[unroll]
    for l in 0..comptime!(rows * cpr / units) {
        let v = unit + l * units;
        let r = v / cpr;
        let c = v % cpr;
        let outer = outer0 + r;
        let inner = inner0 + c * nv;
        let inside = outer < outer_len && inner < inner_len;
        // Chunks outside read nothing (length 0) from the matrix's first element.
        let mut at = base / nv;
        if inside {
            at = (base + outer * outer_stride + inner) / nv;
        }
        let len = usize::cast_from(inside);
        let to = dst + r * cpr + swizzle(r, c, cpr, pattern);
        copy_async_checked(&src.slice(at, at + len), &mut smem.slice_mut(to, to + 1), comptime!(nv as u32));
    }
}

/// How the chunks of a staged row are permuted, by what reads them.
#[derive(CubeType, Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Swizzle {
    /// `ldmatrix` reads (f16 / bf16): eight rows at the same chunk.
    Ldmatrix,
    /// TF32 reads of whole chunks of a K-major slice: two rows (2q, 2q + 1) at four aligned
    /// chunks per quarter of a plane.
    Tf32Chunks,
    /// TF32 reads of single elements of an M- or N-major slice: rows 4 apart (4t + e) at 8
    /// consecutive elements (two chunks).
    Tf32Elements,
    /// TF32 reads of single elements of an N-major slice by rows 2 apart (2t + e) at 8
    /// consecutive elements (two chunks): flash attention's values.
    Tf32Pairs,
}

impl Swizzle {
    /// The pattern of an operand's slice of f16 / bf16 or TF32 (`tf32`), contiguous along K
    /// (`k_major`) or not.
    pub fn of(tf32: bool, k_major: bool) -> Swizzle {
        match (tf32, k_major) {
            (false, _) => Swizzle::Ldmatrix,
            (true, true) => Swizzle::Tf32Chunks,
            (true, false) => Swizzle::Tf32Elements,
        }
    }
}

/// Where chunk `chunk` of row `row` lies within its row of `cpr` chunks (a power of two; at
/// least 8 for TF32), so that the reads of `pattern` and a plane's 16-byte copies of a row hit
/// distinct banks:
/// - `Ldmatrix`: the low chunk bits are XORed with the row's position among the rows that share a
///   128-byte line of banks, so that eight rows read at the same chunk, and a row's chunks,
///   fall apart.
/// - `Tf32Chunks`: odd rows XOR the chunk with 4, so that rows 2q and 2q + 1 read the two
///   halves of a 128-byte line.
/// - `Tf32Elements`: rows XOR the chunk with `2 ((row / 4) % 4)`, so that rows x, x + 4,
///   x + 8, x + 12 at chunks c and c + 1 (c even) take 8 distinct chunk slots.
/// - `Tf32Pairs`: rows XOR the chunk with `2 ((row / 2) % 4)`, so that rows x, x + 2, x + 4,
///   x + 6 (x even or odd) at chunks c and c + 1 (c even) take 8 distinct chunk slots.
#[cube]
pub fn swizzle(row: usize, chunk: usize, #[comptime] cpr: usize, #[comptime] pattern: Swizzle) -> usize {
    match pattern {
        Swizzle::Ldmatrix => {
            let span = comptime!(if cpr >= 8 { 8 } else { cpr });
            let rows_per_line = comptime!(8 / span);
            chunk ^ ((row / rows_per_line) % span)
        }
        Swizzle::Tf32Chunks => chunk ^ (4 * (row % 2)),
        Swizzle::Tf32Elements => chunk ^ (2 * ((row / 4) % 4)),
        Swizzle::Tf32Pairs => chunk ^ (2 * ((row / 2) % 4)),
    }
}

/// The element index, within a staged slice of f32 rows of `cpr` chunks permuted by `pattern`,
/// of element `inner` of row `row`.
#[cube]
pub fn element_at(row: usize, inner: usize, #[comptime] cpr: usize, #[comptime] pattern: Swizzle) -> usize {
    (row * cpr + swizzle(row, inner / CHUNK_F32, cpr, pattern)) * CHUNK_F32 + inner % CHUNK_F32
}

/// The chunk this lane hands to an `ldmatrix` of four 8 × 8 matrices covering rows
/// `row0..row0 + 16` and chunks `chunk0..chunk0 + 2` of a slice: lanes `8q..8q + 8` give the
/// rows of matrix `q`, which lies at row block `q % 2` and chunk `q / 2` (`rows_first`), or at
/// row block `q / 2` and chunk `q % 2`.
#[cube]
pub fn fragment_chunk(row0: usize, chunk0: usize, lane: usize, #[comptime] rows_first: bool, #[comptime] cpr: usize) -> usize {
    let q = lane / 8;
    let mut row = row0 + lane % 8;
    let mut chunk = chunk0;
    if rows_first {
        row += (q % 2) * 8;
        chunk += q / 2;
    } else {
        row += (q / 2) * 8;
        chunk += q % 2;
    }
    row * cpr + swizzle(row, chunk, cpr, Swizzle::Ldmatrix)
}

/// Elements of f16 / bf16 along one row of a TMA box: 128 bytes, the span of the hardware's
/// 128-byte swizzle.
pub const BOX_INNER: usize = 64;

/// Where chunk `chunk` of row `row` lies in a slice staged by TMA ([`crate::matmul::tma`]):
/// the slice is cut along its contiguous dimension into boxes of [`BOX_INNER`] elements (8
/// chunks), each box `rows` rows of 128 bytes one after the other, and within a row the
/// hardware's 128-byte swizzle XORs the chunk with the row's position among 8 (the boxes
/// start on 1024-byte boundaries). With one box per row (`cpr` = 8) this is
/// [`swizzle`](fn@swizzle)'s `Ldmatrix` layout, and as there the eight rows one `ldmatrix` reads at the
/// same chunk fall in distinct banks.
#[cube]
pub fn boxed_chunk(row: usize, chunk: usize, #[comptime] rows: usize) -> usize {
    (chunk / 8) * comptime!(rows * 8) + row * 8 + ((chunk % 8) ^ (row % 8))
}

/// [`fragment_chunk`](fn@fragment_chunk) for a slice staged by TMA in boxes of `rows` rows
/// ([`boxed_chunk`](fn@boxed_chunk)).
#[cube]
pub fn fragment_chunk_boxed(row0: usize, chunk0: usize, lane: usize, #[comptime] rows_first: bool, #[comptime] rows: usize) -> usize {
    let q = lane / 8;
    let mut row = row0 + lane % 8;
    let mut chunk = chunk0;
    if rows_first {
        row += (q % 2) * 8;
        chunk += q / 2;
    } else {
        row += (q / 2) * 8;
        chunk += q % 2;
    }
    boxed_chunk(row, chunk, rows)
}
