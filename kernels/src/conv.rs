//! What the convolution kernels share: their parameters and the input coordinate each kernel
//! tap reads, for convolutions and transposed convolutions over three spatial dimensions
//! (1-D and 2-D ones are 3-D ones with unit dimensions); and `unfold4d`. Both convolutions
//! run as implicit GEMMs (`conv_gemm`, `conv_cmma`), their weight gradients as another
//! (`conv_weight_gemm`, `conv_weight_cmma`); devices that run cubes on CPU cores get
//! barrier-free kernels for both (`conv_direct`).
//!
//! Tensors are `[batch, channels, d, h, w]`. Inputs are strided views (with an element
//! offset); outputs are contiguous.
use cubecl::prelude::*;

use crate::strided::offset5;

/// Stride, padding and dilation of each spatial dimension, and the group count.
#[derive(CubeLaunch, CubeType, Clone, Copy)]
pub struct ConvParams {
    pub stride_d: usize,
    pub stride_h: usize,
    pub stride_w: usize,
    pub pad_d: usize,
    pub pad_h: usize,
    pub pad_w: usize,
    pub dil_d: usize,
    pub dil_h: usize,
    pub dil_w: usize,
    pub groups: usize,
}

/// Where a kernel tap reads the input along one axis, and whether it lands inside `[0, size)`
/// (outside is padding, or, for a transposed convolution, between the strided inputs).
#[derive(CubeType, Clone, Copy)]
pub struct Tap {
    pub pos: usize,
    pub inside: bool,
}

/// The unsigned base of output coordinate `o` along one axis for [`axis_tap`](fn@axis_tap): `o · stride`
/// for a convolution (tap `k` reads `o · stride + k · dil - pad`), `o + pad` for a transposed
/// one (tap `k` reads `(o + pad - k · dil) / stride` where the division is exact).
#[cube]
pub fn axis_base(o: usize, stride: usize, pad: usize, #[comptime] transposed: bool) -> usize {
    if transposed { o + pad } else { o * stride }
}

/// The input coordinate kernel tap `k` reads from an output coordinate whose [`axis_base`](fn@axis_base) is
/// `base`.
#[cube]
pub fn axis_tap(base: usize, k: usize, stride: usize, dil: usize, pad: usize, size: usize, #[comptime] transposed: bool) -> Tap {
    if transposed {
        let reach = k * dil;
        let ok = base >= reach;
        let num = select(ok, base - reach, 0);
        let i = num / stride;
        let inside = ok && num % stride == 0 && i < size;
        Tap { pos: select(inside, i, 0), inside }
    } else {
        let raw = base + k * dil;
        let inside = raw >= pad && raw - pad < size;
        Tap { pos: select(inside, raw - pad, 0), inside }
    }
}

/// `unfold4d` (im2col): `output[b, (c·kh + i)·kw + j, oh·out_w + ow] = x[b, c, oh·s - p + i·dil,
/// ow·s - p + j·dil]`, 0 in the padding. `x` is lifted to `[b, c, 1, h, w]`; `output` is
/// contiguous `[b, c·kh·kw, out_h·out_w]`.
#[cube(launch_unchecked)]
pub fn unfold4d<T: Numeric>(
    x: &Tensor<T>,
    output: &mut Tensor<T>,
    x_offset: usize,
    kernel_h: usize,
    kernel_w: usize,
    out_w: usize,
    params: ConvParams,
    #[define(T)] _dtype: StorageType,
) {
    if ABSOLUTE_POS >= output.len() {
        terminate!();
    }
    let blocks = output.shape(2);
    let l = ABSOLUTE_POS % blocks;
    let row = (ABSOLUTE_POS / blocks) % output.shape(1);
    let b = ABSOLUTE_POS / (blocks * output.shape(1));
    let j = row % kernel_w;
    let i = (row / kernel_w) % kernel_h;
    let c = row / (kernel_w * kernel_h);
    let bh = axis_base(l / out_w, params.stride_h, params.pad_h, false);
    let bw = axis_base(l % out_w, params.stride_w, params.pad_w, false);
    let th = axis_tap(bh, i, params.stride_h, params.dil_h, params.pad_h, x.shape(3), false);
    let tw = axis_tap(bw, j, params.stride_w, params.dil_w, params.pad_w, x.shape(4), false);
    let v = x[x_offset + offset5::<T>(x, b, c, 0, th.pos, tw.pos)];
    output[ABSOLUTE_POS] = select(th.inside && tw.inside, v, T::from_int(0));
}
