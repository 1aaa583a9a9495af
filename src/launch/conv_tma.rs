//! The convolution on manual MMA with its operands loaded by TMA
//! (`ex_cubecl_kernels::conv_tma`): which convolutions run there, the input's im2col tensor
//! map, and the launch.
//!
//! On devices with the Tensor Memory Accelerator (CUDA, compute capability 9.0 and later), an
//! f16 or bf16 convolution that runs on the manual-MMA kernel (`super::conv_mma`) runs this one
//! instead when each group's input channels are a multiple of 64 (a K slice of 64 is then one
//! kernel tap of 64 channels: one 128-byte box per pixel), it is not a transposed
//! convolution, and its geometry fits an im2col tensor map (`im2col_map`: the pixel box's
//! corners and the taps' offsets in the range of the input's rank, strides of at most 8).
//! A tiling passed by the caller is kept when its K slices are 64; the default is
//! `conv_mma_tiling`'s with K slices of 64. Everything else, and everything when
//! `EX_CUBECL_TMA` is `0`, runs the asynchronous copies of `conv_mma`; so do split-K launches
//! (`super::split_k`: f16 and bf16 split only when forced), on the TMA tiling. The kernel
//! takes split-K as `conv_mma` does, but has only run unsplit on a device.
//!
//! A transposed convolution of stride 1 without output padding (a stride-1 convolution's input
//! gradient) is the forward convolution with the spatially flipped weight and padding
//! `dilation · (k - 1) - padding` (`transposed_as_forward`); where the TMA kernel would run
//! that convolution, `conv::conv_transpose` runs it so, with a flipped copy of the weight.
use std::cell::Cell;

use burn_backend::{DType, Shape};
use cubecl::Runtime;
use cubecl::prelude::{Im2col, Im2colArgs, TensorMapArg, TensorMapSwizzle, Tiled, TiledArgs};
use cubecl::zspace::{Shape as ZShape, Strides};
use ex_cubecl_kernels::conv_cmma::ConvKernelLaunch;
use ex_cubecl_kernels::conv_tma::conv_mma_tma;
use ex_cubecl_kernels::matmul::mma::MmaTile;
use ex_cubecl_kernels::tensor_core::BOX_INNER;

use super::conv::{ConvSpec, ConvTiling};
use super::conv_mma::conv_mma_tiling;
use super::matmul_mma::{has_mma, tma_available};
use super::split_k::SplitK;
use crate::runtime::{Geometry, Layout, launch};
use crate::tensor::CubeTensor;

thread_local! {
    /// Convolutions this thread launched on the TMA kernel.
    static LAUNCHES: Cell<usize> = const { Cell::new(0) };
    /// Transposed convolutions run as forward ones on any device (`with_transposed_as_forward`).
    static FORWARD: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with every transposed convolution that `transposed_as_forward` can rewrite run
/// as the forward convolution on this thread, on whichever kernel the device has (elsewhere
/// only where the TMA kernel would run it); for tests of the rewrite on devices without TMA.
#[doc(hidden)]
pub fn with_transposed_as_forward<T>(f: impl FnOnce() -> T) -> T {
    let before = FORWARD.with(|c| c.replace(true));
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            FORWARD.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(before);
    f()
}

/// Whether a transposed convolution of `x` (`[b, c_in, ..]`) whose convolution weight (as
/// `conv::conv_transpose` makes it) has `cout_g` rows per group runs as a forward convolution
/// (given that `transposed_as_forward` rewrites it): where the TMA kernel would take the
/// forward one (f16 or bf16 on a TMA device, a multiple of 64 input channels per group, at
/// least 16 output channels per group), or on this thread under `with_transposed_as_forward`.
pub(crate) fn runs_transposed_as_forward<R: Runtime>(x: &CubeTensor<R>, groups: usize, cout_g: usize) -> bool {
    let cin_g = x.dims()[1] / groups;
    let tma = matches!(x.dtype, DType::F16 | DType::BF16) && cin_g.is_multiple_of(BOX_INNER) && cout_g >= 16 && conv_tma_device(x);
    tma || FORWARD.with(Cell::get)
}

/// The forward convolution's spec that a transposed convolution of `spec` with the lifted
/// kernel extents `kernel` and output padding `padding_out` equals (with the weight flipped
/// along every spatial axis): the same dilation and groups, stride 1, padding `dilation · (k -
/// 1) - padding`; `None` unless every stride is 1, the output padding 0 and the padding at most
/// `dilation · (k - 1)`.
pub(crate) fn transposed_as_forward(spec: &ConvSpec, kernel: [usize; 3], padding_out: &[usize]) -> Option<ConvSpec> {
    if spec.stride != [1; 3] || padding_out.iter().any(|&p| p != 0) {
        return None;
    }
    let mut forward = *spec;
    for (a, k) in kernel.into_iter().enumerate() {
        forward.padding[a] = (spec.dilation[a] * (k - 1)).checked_sub(spec.padding[a])?;
    }
    Some(forward)
}

/// How many convolutions the calling thread has launched on the TMA kernel (for tests that
/// check which kernel ran).
#[doc(hidden)]
pub fn tma_convolutions() -> usize {
    LAUNCHES.with(Cell::get)
}

/// Whether `x`'s device runs convolutions on the TMA kernel at all: TMA, `mma.sync` for f16,
/// and `EX_CUBECL_TMA` not `0`.
#[doc(hidden)]
pub fn conv_tma_device<R: Runtime>(x: &CubeTensor<R>) -> bool {
    tma_available(&x.client) && has_mma(&x.client, DType::F16, false)
}

/// The tiling of a convolution on the TMA kernel, or `None` where that kernel can't run it:
/// not on a TMA device (`conv_tma_device`), a transposed convolution, TF32, a dtype other than
/// f16 and bf16, `cin_g` not a multiple of [`BOX_INNER`], a caller's tiling whose K slices
/// aren't [`BOX_INNER`] or whose tile exceeds 256 pixels or channels, or three stages (and the
/// 1024-byte alignment) not fitting in shared memory.
pub(crate) fn conv_tma_tiling<R: Runtime>(
    x: &CubeTensor<R>,
    cin_g: usize,
    cout_g: usize,
    tiling: Option<ConvTiling>,
    tf32: bool,
    transposed: bool,
) -> Option<ConvTiling> {
    let usable = !transposed && !tf32 && matches!(x.dtype, DType::F16 | DType::BF16) && cin_g.is_multiple_of(BOX_INNER);
    if !usable || !conv_tma_device(x) {
        return None;
    }
    let t = match tiling {
        Some(t) if t.block_k == BOX_INNER => t,
        Some(_) => return None,
        None => ConvTiling { block_k: BOX_INNER, ..conv_mma_tiling(cout_g) },
    };
    let stage_bytes = (t.block_co + t.block_pix) * BOX_INNER * 2;
    let fits = 3 * stage_bytes + 1024 <= x.client.properties().hardware.max_shared_memory_size;
    (fits && t.block_co <= 256 && t.block_pix <= 256).then_some(t)
}

/// The input's im2col tensor map: its layout over the channels-last input (`[b, w, c]`,
/// `[b, h, w, c]` or `[b, d, h, w, c]`: the lifted `[b, d, h, w, c]` without the unit
/// dimensions in front of the `n` spatial ones), the pixel box and the element strides.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Im2colMap {
    pub layout: Layout,
    pub lower: Vec<i32>,
    pub upper: Vec<i32>,
    pub elem_strides: Vec<usize>,
}

/// The im2col map of a convolution of `n` spatial dimensions over the channels-last input
/// `x_last` (lifted, `[b, d, h, w, c]`) with the lifted kernel extents `kernel`: the pixel box
/// runs, per spatial axis, from `-padding` to `padding - dilation · (k - 1)` past the last
/// pixel (where the kernel's first tap reads for the first and the last output pixel), walked
/// with the convolution's strides. `None` when `x_last` is not contiguous from its buffer's
/// start, a corner or a tap's offset `dilation · (k - 1)` lies outside the range CUDA gives the
/// rank (±2¹⁵ for one spatial axis, ±2⁷ for two, ±2⁴ for three), a stride exceeds 8, or the
/// channel rows are not a multiple of 16 bytes.
pub(crate) fn im2col_map(x_last: &Layout, n: usize, kernel: [usize; 3], spec: &ConvSpec, elem: usize) -> Option<Im2colMap> {
    let dims = x_last.shape.as_slice();
    if x_last.offset != 0 || *x_last != Layout::contiguous(x_last.shape.clone()) || !(dims[4] * elem).is_multiple_of(16) {
        return None;
    }
    let (low, high): (i64, i64) = match n {
        1 => (-(1 << 15), (1 << 15) - 1),
        2 => (-(1 << 7), (1 << 7) - 1),
        _ => (-(1 << 4), (1 << 4) - 1),
    };
    let axes = 3 - n..3;
    let mut lower = Vec::with_capacity(n);
    let mut upper = Vec::with_capacity(n);
    for a in axes.clone() {
        let reach = (spec.dilation[a] * (kernel[a] - 1)) as i64;
        let (pad, stride) = (spec.padding[a] as i64, spec.stride[a]);
        let (lo, hi) = (-pad, pad - reach);
        if lo < low || hi < low || hi > high || reach > high || stride > 8 {
            return None;
        }
        lower.push(lo as i32);
        upper.push(hi as i32);
    }
    let mut shape = vec![dims[0]];
    shape.extend(axes.clone().map(|a| dims[a + 1]));
    shape.push(dims[4]);
    let mut elem_strides = vec![1];
    elem_strides.extend(axes.map(|a| spec.stride[a]));
    elem_strides.push(1);
    Some(Im2colMap { layout: Layout::contiguous(Shape::from(shape)), lower, upper, elem_strides })
}

/// What a TMA convolution launch needs besides its tensors: the input's map, the spec, the
/// lifted kernel extents, the group's input channels and the batch entries.
pub(crate) struct ConvTmaGeometry {
    pub map: Im2colMap,
    pub spec: ConvSpec,
    pub kernel: [usize; 3],
    pub cin_g: usize,
    pub batch: usize,
}

/// Launches `conv_tma` for the convolution of the channels-last input `x_last` (lifted,
/// contiguous) with the weight matrix `w_rows` (`[c_out, taps · cin_g]`, contiguous) into
/// `target` (the lifted output, or the splits' f32 partials), on `tiles` cubes per split of
/// `split`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn launch_conv_tma<R: Runtime>(
    op: &str,
    x_last: &CubeTensor<R>,
    w_rows: &CubeTensor<R>,
    bias: (&CubeTensor<R>, bool),
    target: &CubeTensor<R>,
    g: ConvTmaGeometry,
    tile: MmaTile,
    no: usize,
    (tiles, split): (usize, SplitK),
    geometry: Geometry,
) {
    LAUNCHES.with(|c| c.set(c.get() + 1));
    let cubes = tiles * split.splits;
    let (storage, out_storage) = (x_last.storage(), target.storage());
    let (x, w, o, b) = (x_last.clone(), w_rows.clone(), target.clone(), bias.0.clone());
    let has_bias = bias.1;
    let [kd, kh, kw] = g.kernel;
    let n = g.spec.n;
    launch(&x_last.client, op, geometry, move |client, count, dim| {
        let args = Im2colArgs {
            pixel_box_lower_corner: g.map.lower.clone(),
            pixel_box_upper_corner: g.map.upper.clone(),
            channels_per_pixel: BOX_INNER as u32,
            pixels_per_column: tile.block_n as u32,
        };
        let x_map = TensorMapArg::<R, Im2col>::new(args, x.view_arg(&g.map.layout), storage)
            .with_elem_stride(Strides::from(g.map.elem_strides.clone()))
            .with_swizzle(TensorMapSwizzle::B128);
        let w_box = TiledArgs { tile_size: ZShape::from(vec![tile.block_m, BOX_INNER]) };
        let w_map = TensorMapArg::<R, Tiled>::new(w_box, w.as_arg(), storage).with_swizzle(TensorMapSwizzle::B128);
        // SAFETY: cubes past `cubes` leave before any access; the tensor maps describe the
        // channels-last input and the weight matrix inside their buffers (`im2col_map`, and
        // `w_rows` is contiguous from its start), and TMA fills what lies outside them with
        // zeros; writes are guarded by the group's channels and the pixels, each split's
        // inside its batch entries of the target, and `no` divides the spatial size; every
        // split starts before K's last slice (`SplitK::even`); shared-memory indices stay
        // inside the stages.
        unsafe {
            conv_mma_tma::launch_unchecked::<R>(
                client, count, dim, 8, no, x_map, w_map, b.as_arg(), o.as_arg(), b.layout.offset, g.spec.arg(),
                ConvKernelLaunch::new(kd, kh, kw), g.cin_g, g.batch, split.len, cubes, tile, has_bias, n,
                [storage, out_storage],
            )
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn_backend::ops::ConvOptions;

    fn last(shape: [usize; 5]) -> Layout {
        Layout::contiguous(Shape::from(shape.to_vec()))
    }

    fn map(m: &Im2colMap) -> (Vec<usize>, Vec<i32>, Vec<i32>, Vec<usize>) {
        (m.layout.shape.as_slice().to_vec(), m.lower.clone(), m.upper.clone(), m.elem_strides.clone())
    }

    #[test]
    fn im2col_map_spans_the_first_taps_and_refuses_what_cuda_cannot_encode() {
        // 2D, 3 × 3, stride 2, padding 1: the unit depth dropped, the box from -1 to 1 - 2
        // past the last pixel, walked by 2.
        let spec = ConvSpec::conv("t", &ConvOptions::new([2, 2], [1, 1], [1, 1], 1));
        let m = im2col_map(&last([2, 1, 9, 10, 64]), 2, [1, 3, 3], &spec, 2).expect("2d");
        assert_eq!(map(&m), (vec![2, 9, 10, 64], vec![-1, -1], vec![-1, -1], vec![1, 2, 2, 1]));
        assert_eq!(m.layout.strides, vec![5760, 640, 64, 1]);
        // 1D, kernel 5 dilated by 2, padding 3: the box ends 3 - 8 past the last pixel.
        let spec = ConvSpec::conv("t", &ConvOptions::new([1], [3], [2], 1));
        let m = im2col_map(&last([3, 1, 1, 20, 128]), 1, [1, 1, 5], &spec, 2).expect("1d");
        assert_eq!(map(&m), (vec![3, 20, 128], vec![-3], vec![-5], vec![1, 1, 1]));
        // 3D, 3 × 1 × 3 with per-axis padding and strides.
        let spec = ConvSpec::conv("t", &ConvOptions::new([1, 3, 2], [1, 0, 2], [1, 1, 1], 1));
        let m = im2col_map(&last([1, 4, 5, 6, 64]), 3, [3, 1, 3], &spec, 2).expect("3d");
        assert_eq!(map(&m), (vec![1, 4, 5, 6, 64], vec![-1, 0, -2], vec![-1, 0, 0], vec![1, 1, 3, 2, 1]));

        // Refused: an offset, a non-contiguous input, channel rows of 8 bytes, a 3D padding
        // past 2⁴, a 2D tap offset past 2⁷, a stride past 8.
        let plain = ConvSpec::conv("t", &ConvOptions::new([1, 1], [1, 1], [1, 1], 1));
        let shifted = Layout { offset: 64, ..last([1, 1, 4, 4, 64]) };
        assert!(im2col_map(&shifted, 2, [1, 3, 3], &plain, 2).is_none());
        let strided = Layout { strides: vec![2048, 2048, 512, 128, 1], ..last([1, 1, 4, 4, 64]) };
        assert!(im2col_map(&strided, 2, [1, 3, 3], &plain, 2).is_none());
        assert!(im2col_map(&last([1, 1, 4, 4, 4]), 2, [1, 3, 3], &plain, 2).is_none());
        let deep = ConvSpec::conv("t", &ConvOptions::new([1, 1, 1], [17, 1, 1], [1, 1, 1], 1));
        assert!(im2col_map(&last([1, 4, 4, 4, 64]), 3, [3, 3, 3], &deep, 2).is_none());
        let wide = ConvSpec::conv("t", &ConvOptions::new([1, 1], [64, 64], [64, 64], 1));
        assert!(im2col_map(&last([1, 1, 200, 200, 64]), 2, [1, 3, 3], &wide, 2).is_none());
        let far = ConvSpec::conv("t", &ConvOptions::new([9, 1], [1, 1], [1, 1], 1));
        assert!(im2col_map(&last([1, 1, 40, 40, 64]), 2, [1, 3, 3], &far, 2).is_none());
    }

    #[test]
    fn transposed_as_forward_pads_by_the_dilated_kernel_less_the_padding() {
        use burn_backend::ops::ConvTransposeOptions;
        let spec = |p: [usize; 2], s: [usize; 2], d: [usize; 2]| ConvSpec::transposed("t", &ConvTransposeOptions::new(s, p, [0, 0], d, 2));
        // 3 × 3 padding 1: padding 1; 5 × 3 dilated by 2 with padding 2 and 0: 6 and 4; the
        // lifted depth keeps padding 0.
        let f = transposed_as_forward(&spec([1, 1], [1, 1], [1, 1]), [1, 3, 3], &[0, 0]).expect("3x3");
        assert_eq!((f.padding, f.stride, f.dilation, f.groups), ([0, 1, 1], [1; 3], [1; 3], 2));
        let f = transposed_as_forward(&spec([2, 0], [1, 1], [2, 2]), [1, 5, 3], &[0, 0]).expect("dilated");
        assert_eq!(f.padding, [0, 6, 4]);
        // Refused: a stride, an output padding, a padding past the dilated kernel.
        assert!(transposed_as_forward(&spec([1, 1], [2, 1], [1, 1]), [1, 3, 3], &[0, 0]).is_none());
        assert!(transposed_as_forward(&spec([1, 1], [1, 1], [2, 2]), [1, 3, 3], &[1, 0]).is_none());
        assert!(transposed_as_forward(&spec([3, 1], [1, 1], [1, 1]), [1, 3, 3], &[0, 0]).is_none());
    }
}
