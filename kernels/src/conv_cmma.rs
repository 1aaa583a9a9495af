//! The convolution and the transposed convolution as an implicit GEMM on tensor cores
//! (cubecl's `cmma`; the two kinds differ only in the gather, [`axis_tap`](fn@axis_tap)): per group,
//! `out[co, p] = Σ_k w[co, k] · cols[k, p]`, where `p` runs over the output pixels of every
//! batch entry (`b, od, oh, ow`) and `k` over the group's kernel taps and input channels in
//! the order `k = tap · cin_g + ci`. The launcher hands the weight over in that order, as a
//! contiguous `[c_out, taps · cin_g]` matrix; the column matrix is never stored: each cube
//! gathers its slice from the strided `x` into shared memory, zero outside the input
//! (padding) and past the edges of the product.
//!
//! A cube computes a `block_co` (output channels) × `block_pix` (pixels) tile with
//! `warps_co × warps_pix` planes of 32 units; each plane owns a part of the tile as 16 × 16
//! f32 accumulator fragments and multiplies with [`multiply_slice`](fn@multiply_slice), the matmul's tensor-core
//! step. K is walked in slices of `block_k`, double-buffered through registers as in
//! `matmul_cmma`: the units load slice `t + 1` (weight rows in vectors, one gathered pixel
//! column per unit) while the planes multiply slice `t`, then store it converted to the
//! matrix units' operand type `M`. When `cin_g` is a multiple of `block_k` (`one_tap`), a
//! slice lies inside one kernel tap, so each unit checks the padding and computes its
//! pixel's address once per slice and then steps over channels.
use cubecl::prelude::*;

use crate::conv::{ConvParams, axis_base, axis_tap};
use crate::matmul::cmma::multiply_slice;

/// Alignment of the shared-memory tiles, in bytes (fragment loads need 32).
const SMEM_ALIGN: usize = 128;
/// Rows and columns of a matrix-unit fragment.
const FRAG: usize = 16;

/// Kernel extents of the lifted convolution.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct ConvKernel {
    /// Kernel depth, height and width.
    pub kd: usize,
    pub kh: usize,
    pub kw: usize,
}

/// `x` `[b, c_in, d, h, w]` is a strided view with an offset; `weight` is the contiguous
/// `[c_out, taps · cin_g]` matrix in `(tap, ci)` order, read in vectors of `NA`; `output`
/// `[b, c_out, od, oh, ow]` is contiguous and written in vectors of `NO`. Cubes are numbered
/// over `(group, channel tile, pixel tile)`, pixel tiles fastest.
///
/// The launcher guarantees: 32 units per plane, `16 · warps_co` divides `block_co`,
/// `16 · warps_pix` divides `block_pix`, `block_pix` divides the unit count, which divides
/// `block_co · block_k / NA`; `frag_k` divides `block_k`; `NA` divides `taps · cin_g` and
/// `pad`; `NO` divides 8 and `od · oh · ow`; `one_tap` only when `block_k` divides `cin_g`.
#[cube(launch_unchecked)]
pub fn conv_cmma<T: Float, M: Float, NA: Size, NO: Size>(
    x: &Tensor<T>,
    weight: &Tensor<Vector<T, NA>>,
    bias: &Tensor<T>,
    output: &mut Tensor<Vector<T, NO>>,
    x_offset: usize,
    bias_offset: usize,
    params: ConvParams,
    kernel: ConvKernel,
    num_cubes: usize,
    #[comptime] has_bias: bool,
    #[comptime] transposed: bool,
    #[comptime] one_tap: bool,
    #[comptime] block_co: usize,
    #[comptime] block_pix: usize,
    #[comptime] block_k: usize,
    #[comptime] warps_co: usize,
    #[comptime] warps_pix: usize,
    #[comptime] frag_k: usize,
    #[comptime] pad: usize,
    #[define(T, M)] _dtypes: [StorageType; 2],
) {
    // Uniform per cube, before any barrier.
    if CUBE_POS >= num_cubes {
        terminate!();
    }
    let na = weight.vector_size();
    let units = comptime!(warps_co * warps_pix * 32);
    let frags_co = comptime!(block_co / (warps_co * 16));
    let frags_pix = comptime!(block_pix / (warps_pix * 16));
    let a_loads = comptime!(block_co * block_k / na / units);
    let rows_per_pass = comptime!(units / block_pix);
    let b_loads = comptime!(block_k / rows_per_pass);
    // Shared-memory row lengths and buffer sizes, in elements.
    let lda = comptime!(block_k + pad);
    let ldb = comptime!(block_pix + pad);
    let stage_a = comptime!(block_co * lda);
    let stage_b = comptime!(block_k * ldb);

    let c_out = output.shape(1);
    let (od, oh, ow) = (output.shape(2), output.shape(3), output.shape(4));
    let spatial = od * oh * ow;
    let pixels = output.shape(0) * spatial;
    let cout_g = c_out / params.groups;
    let k_total = weight.shape(1);
    let taps = kernel.kd * kernel.kh * kernel.kw;
    let cin_g = k_total / taps;

    let tiles_pix = pixels.div_ceil(block_pix);
    let tiles_co = cout_g.div_ceil(block_co);
    let pix0 = (CUBE_POS % tiles_pix) * block_pix;
    let co0 = ((CUBE_POS / tiles_pix) % tiles_co) * block_co;
    let group = CUBE_POS / (tiles_pix * tiles_co);
    let co_base = group * cout_g;

    let unit = UNIT_POS as usize;
    let warp = unit / 32;
    let lane = unit % 32;
    let warp_co = (warp / warps_pix) * (frags_co * 16);
    let warp_pix = (warp % warps_pix) * (frags_pix * 16);

    // The pixel whose column this unit gathers, fixed over the K loop, and its first row.
    let pixel = pix0 + unit % block_pix;
    let row0 = unit / block_pix;
    let gather = Gather {
        pixel_ok: pixel < pixels,
        x_base: x_offset + (pixel / spatial) * x.stride(0) + group * cin_g * x.stride(1),
        base_d: axis_base((pixel % spatial) / (oh * ow), params.stride_d, params.pad_d, transposed),
        base_h: axis_base((pixel % spatial) / ow % oh, params.stride_h, params.pad_h, transposed),
        base_w: axis_base(pixel % ow, params.stride_w, params.pad_w, transposed),
    };

    let mut smem_a = SharedMemory::<Vector<M, NA>>::new_aligned(comptime!(2 * stage_a / na), comptime!(SMEM_ALIGN));
    let mut smem_b = SharedMemory::<M>::new_aligned(comptime!(2 * stage_b), comptime!(SMEM_ALIGN));
    let mut regs_a = Array::<Vector<T, NA>>::new(a_loads);
    let mut regs_b = Array::<T>::new(b_loads);

    let mut acc = Sequence::<cmma::Matrix<f32>>::new();
    #[unroll]
    for _f in 0..frags_co * frags_pix {
        acc.push(cmma::Matrix::<f32>::from_value(
            cmma::MatrixIdent::Accumulator,
            comptime!(FRAG),
            comptime!(FRAG),
            frag_k,
            cmma::MatrixLayout::Undefined,
            0.0,
        ));
    }

    let num_k = k_total.div_ceil(block_k);
    load_weight::<T, NA>(weight, &mut regs_a, co_base, co0, 0usize, cout_g, k_total, unit, units, a_loads, block_k);
    load_columns::<T>(x, &mut regs_b, &gather, &params, &kernel, 0usize, cin_g, k_total, row0, rows_per_pass, b_loads, one_tap, transposed);
    store_slices::<T, M, NA>(&mut smem_a, &mut smem_b, &regs_a, &regs_b, 0usize, unit, units, a_loads, b_loads, rows_per_pass, lda, ldb, block_co, block_pix, block_k);
    sync_cube();

    for t in 0..num_k {
        let stage = t % 2;
        let more = t + 1 < num_k;
        if more {
            let k0 = (t + 1) * block_k;
            load_weight::<T, NA>(weight, &mut regs_a, co_base, co0, k0, cout_g, k_total, unit, units, a_loads, block_k);
            load_columns::<T>(x, &mut regs_b, &gather, &params, &kernel, k0, cin_g, k_total, row0, rows_per_pass, b_loads, one_tap, transposed);
        }

        multiply_slice::<M, Vector<M, NA>, M>(
            &smem_a, &smem_b, &acc, stage * stage_a / na, stage * stage_b, warp_co, warp_pix, lda, ldb,
            na, 1usize, frags_co, frags_pix, block_k, frag_k,
        );

        if more {
            store_slices::<T, M, NA>(
                &mut smem_a, &mut smem_b, &regs_a, &regs_b, 1 - stage, unit, units, a_loads, b_loads,
                rows_per_pass, lda, ldb, block_co, block_pix, block_k,
            );
        }
        sync_cube();
    }

    write_tile::<T, NO>(
        output, bias, &acc, bias_offset, co_base, co0 + warp_co, pix0 + warp_pix, cout_g, c_out, spatial,
        pixels, warp, lane, units, frags_co, frags_pix, has_bias,
    );
}

/// Where one unit's pixel column reads `x`: the batch entry's and group's first element, and
/// the pixel's [`axis_base`](fn@axis_base) along each axis.
#[derive(CubeType, Clone, Copy)]
pub struct Gather {
    pub pixel_ok: bool,
    pub x_base: usize,
    pub base_d: usize,
    pub base_h: usize,
    pub base_w: usize,
}

/// Offset of tap `tap` of the unit's pixel within its batch entry's channel 0, and whether
/// the tap lies inside the input (outside is padding).
#[derive(CubeType, Clone, Copy)]
pub struct TapAt {
    pub offset: usize,
    pub inside: bool,
}

#[cube]
fn tap_at<T: Float>(x: &Tensor<T>, g: &Gather, params: &ConvParams, kernel: &ConvKernel, tap: usize, #[comptime] transposed: bool) -> TapAt {
    let (kd, kh, kw) = (tap / (kernel.kh * kernel.kw), (tap / kernel.kw) % kernel.kh, tap % kernel.kw);
    // The address only where the tap is inside: computing it unconditionally (and selecting)
    // made the forward convolution 1.6x slower on an H100.
    let mut offset = 0;
    let mut inside = g.pixel_ok;
    if transposed {
        let td = axis_tap(g.base_d, kd, params.stride_d, params.dil_d, params.pad_d, x.shape(2), true);
        let th = axis_tap(g.base_h, kh, params.stride_h, params.dil_h, params.pad_h, x.shape(3), true);
        let tw = axis_tap(g.base_w, kw, params.stride_w, params.dil_w, params.pad_w, x.shape(4), true);
        inside = inside && td.inside && th.inside && tw.inside;
        if inside {
            offset = td.pos * x.stride(2) + th.pos * x.stride(3) + tw.pos * x.stride(4);
        }
    } else {
        // Spelled out: the shape [`axis_tap`] has, with the padding subtracted once.
        let id = g.base_d + kd * params.dil_d;
        let ih = g.base_h + kh * params.dil_h;
        let iw = g.base_w + kw * params.dil_w;
        inside = inside
            && id >= params.pad_d
            && id - params.pad_d < x.shape(2)
            && ih >= params.pad_h
            && ih - params.pad_h < x.shape(3)
            && iw >= params.pad_w
            && iw - params.pad_w < x.shape(4);
        if inside {
            offset = (id - params.pad_d) * x.stride(2) + (ih - params.pad_h) * x.stride(3) + (iw - params.pad_w) * x.stride(4);
        }
    }
    TapAt { offset, inside }
}

/// Loads the unit's part of the weight slice `k0..k0 + block_k` (rows `co0..` of the group)
/// into registers, zeros past the group's channels and past K.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_weight<T: Float, NA: Size>(
    weight: &Tensor<Vector<T, NA>>,
    regs: &mut Array<Vector<T, NA>>,
    co_base: usize,
    co0: usize,
    k0: usize,
    cout_g: usize,
    k_total: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] a_loads: usize,
    #[comptime] block_k: usize,
) {
    let na = weight.vector_size();
    #[unroll]
    for l in 0..a_loads {
        let v = unit + l * units;
        let co = co0 + v / (block_k / na);
        let k = k0 + (v % (block_k / na)) * na;
        let mut value = Vector::<T, NA>::new(T::from_int(0));
        if co < cout_g && k < k_total {
            value = weight[((co_base + co) * k_total + k) / na];
        }
        regs[l] = value;
    }
}

/// Gathers the unit's part of the column slice `k0..k0 + block_k` (rows `row0`,
/// `row0 + rows_per_pass`, .. of its pixel column) into registers.
#[cube]
#[allow(clippy::too_many_arguments)]
fn load_columns<T: Float>(
    x: &Tensor<T>,
    regs: &mut Array<T>,
    g: &Gather,
    params: &ConvParams,
    kernel: &ConvKernel,
    k0: usize,
    cin_g: usize,
    k_total: usize,
    row0: usize,
    #[comptime] rows_per_pass: usize,
    #[comptime] b_loads: usize,
    #[comptime] one_tap: bool,
    #[comptime] transposed: bool,
) {
    let channel = x.stride(1);
    if one_tap {
        // The slice lies in one tap: one padding check, then a step per channel.
        let at = tap_at::<T>(x, g, params, kernel, k0 / cin_g, transposed);
        let base = g.x_base + at.offset + (k0 % cin_g + row0) * channel;
        #[unroll]
        for l in 0..b_loads {
            let mut value = T::from_int(0);
            if at.inside {
                value = x[base + l * rows_per_pass * channel];
            }
            regs[l] = value;
        }
    } else {
        #[unroll]
        for l in 0..b_loads {
            let k = k0 + row0 + l * rows_per_pass;
            let mut value = T::from_int(0);
            if k < k_total {
                let at = tap_at::<T>(x, g, params, kernel, k / cin_g, transposed);
                if at.inside {
                    value = x[g.x_base + at.offset + (k % cin_g) * channel];
                }
            }
            regs[l] = value;
        }
    }
}

/// Stores the registers of [`load_weight`] and [`load_columns`] into shared-memory buffer
/// `stage`, converted to the matrix units' operand type.
#[cube]
#[allow(clippy::too_many_arguments)]
fn store_slices<T: Float, M: Float, NA: Size>(
    smem_a: &mut SharedMemory<Vector<M, NA>>,
    smem_b: &mut SharedMemory<M>,
    regs_a: &Array<Vector<T, NA>>,
    regs_b: &Array<T>,
    stage: usize,
    unit: usize,
    #[comptime] units: usize,
    #[comptime] a_loads: usize,
    #[comptime] b_loads: usize,
    #[comptime] rows_per_pass: usize,
    #[comptime] lda: usize,
    #[comptime] ldb: usize,
    #[comptime] block_co: usize,
    #[comptime] block_pix: usize,
    #[comptime] block_k: usize,
) {
    let na = regs_a.vector_size();
    let base_a = stage * (lda * block_co);
    let base_b = stage * (ldb * block_k);
    #[unroll]
    for l in 0..a_loads {
        let v = unit + l * units;
        let row = v / (block_k / na);
        let kk = (v % (block_k / na)) * na;
        smem_a[(base_a + row * lda + kk) / na] = Vector::cast_from(regs_a[l]);
    }
    let col = unit % block_pix;
    let row0 = unit / block_pix;
    #[unroll]
    for l in 0..b_loads {
        smem_b[base_b + (row0 + l * rows_per_pass) * ldb + col] = M::cast_from(regs_b[l]);
    }
}

/// Writes the plane's accumulators (plus the bias) to the output: each fragment goes through
/// the plane's own 16 × 16 staging area in shared memory, then each unit writes 8 pixels of
/// one channel in vectors of `NO`, converted to `T`, skipping channels past the group's and
/// pixels past the last.
#[cube]
#[allow(clippy::too_many_arguments)]
fn write_tile<T: Float, NO: Size>(
    output: &mut Tensor<Vector<T, NO>>,
    bias: &Tensor<T>,
    acc: &Sequence<cmma::Matrix<f32>>,
    bias_offset: usize,
    co_base: usize,
    co0: usize,
    pix0: usize,
    cout_g: usize,
    c_out: usize,
    spatial: usize,
    pixels: usize,
    warp: usize,
    lane: usize,
    #[comptime] units: usize,
    #[comptime] frags_co: usize,
    #[comptime] frags_pix: usize,
    #[comptime] has_bias: bool,
) {
    let no = output.vector_size();
    let mut staging = SharedMemory::<f32>::new_aligned(comptime!(units * 8), comptime!(SMEM_ALIGN));
    let area = warp * 256;
    let sub_row = lane / 2;
    let sub_col = (lane % 2) * 8;
    #[unroll]
    for i in 0..frags_co {
        let co = co0 + i * 16 + sub_row;
        let mut shift = 0.0f32;
        if has_bias && co < cout_g {
            shift = f32::cast_from(bias[bias_offset + (co_base + co) * bias.stride(0)]);
        }
        #[unroll]
        for j in 0..frags_pix {
            cmma::store(
                &mut staging.slice_mut(area, area + 256),
                acc.index(i * frags_pix + j),
                16u32,
                cmma::MatrixLayout::RowMajor,
            );
            sync_plane();
            #[unroll]
            for v in 0..comptime!(8 / no) {
                let p = pix0 + j * 16 + sub_col + v * no;
                if co < cout_g && p < pixels {
                    let mut value = Vector::<T, NO>::new(T::from_int(0));
                    #[unroll]
                    for e in 0..no {
                        value[e] = T::cast_from(staging[area + sub_row * 16 + sub_col + v * no + e] + shift);
                    }
                    output[(((p / spatial) * c_out + co_base + co) * spatial + p % spatial) / no] = value;
                }
            }
            sync_plane();
        }
    }
}
