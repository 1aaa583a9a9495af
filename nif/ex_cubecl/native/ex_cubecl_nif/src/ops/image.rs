//! Image filters on the device (`ExCubecl.Filter`), for one image (`[h, w, c]`, or `[c, h, w]`
//! with `layout: :nchw`) or a batch (`[n, h, w, c]`, or `[n, c, h, w]`).
//!
//! Images are `u8` (0..255) or float (0.0..1.0). The filters that compute (resize, colour,
//! blur, pad) run on float values in the `[n, c, h, w]` layout that the module kernels take:
//! a `u8` image is cast on the way in and rounded and clamped back to `u8` on the way out, an
//! NHWC image is permuted (a view) in and out. Crop, flip and rotation are views and keep any
//! dtype. Normalisation gives f32 and folds the `u8` scaling into its weights.
//!
//! Launches (counted on lavapipe, see `ExCubecl.Filter`): an f32 resize or normalisation one
//! (`interpolate`, `adaptive_avg_pool2d` for `area`, a depthwise 1x1 convolution with bias),
//! colour conversion three (a 1x1 convolution with bias), blur eight (edge padding, then a
//! separable depthwise convolution), `to_float` two; a `u8` input adds a cast, a `u8` output
//! a round, a clamp and a cast.
use burn_backend::ops::{ConvOptions, InterpolateMode, InterpolateOptions};
use burn_backend::{Backend, DType, Scalar, Shape, Slice, TensorData, TensorMetadata};

use super::take;
use crate::error::{NifError, NifResult};
use crate::opts::Opts;
use crate::tensor::Prim;

/// Where the channel axis is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    Nhwc,
    Nchw,
}

/// How a filter's input was given, to give the output back the same way.
#[derive(Clone, Copy)]
struct Form {
    layout: Layout,
    /// A single image (rank 3), batched as one.
    single: bool,
    /// A `u8` image (computed in f32).
    byte: bool,
}

pub fn run<B: Backend>(op: &str, inputs: Vec<Prim<B>>, opts: &Opts) -> NifResult<Vec<Prim<B>>> {
    let [x] = take::<B, 1>(op, inputs)?;
    let layout = match opts.name(op, "layout", Some("nhwc"))?.as_str() {
        "nhwc" => Layout::Nhwc,
        "nchw" => Layout::Nchw,
        other => return Err(NifError::new(op, format!("unknown layout {other}"), "layouts: nhwc, nchw")),
    };
    let rank = x.shape().num_dims();
    if rank != 3 && rank != 4 {
        return Err(NifError::new(
            op,
            "takes an image [h, w, c] or a batch [n, h, w, c] (with layout: :nchw, [c, h, w] or [n, c, h, w])",
            x.describe(),
        ));
    }
    let out = match op {
        "image_to_float" => to_float::<B>(op, x, opts)?,
        "image_crop" => crop::<B>(op, x, layout, opts)?,
        "image_flip" => flip::<B>(op, x, layout, opts)?,
        "image_rot90" => rot90::<B>(op, x, layout, opts)?,
        _ => {
            let (t, form) = to_nchw::<B>(op, x, layout)?;
            match op {
                "image_resize" => from_nchw::<B>(resize::<B>(op, t, opts)?, form),
                "image_color" => from_nchw::<B>(color::<B>(op, t, form, opts)?, form),
                "image_normalize" => from_nchw::<B>(normalize::<B>(op, t, form, opts)?, Form { byte: false, ..form }),
                "image_blur" => from_nchw::<B>(blur::<B>(op, t, opts)?, form),
                "image_pad" => from_nchw::<B>(pad::<B>(op, t, opts)?, form),
                _ => return Err(NifError::new(op, "is not an image filter", "")),
            }
        }
    };
    Ok(vec![out])
}

/// The axes of height and width in `layout` at `rank`.
fn hw_axes(layout: Layout, rank: usize) -> (usize, usize) {
    match layout {
        Layout::Nhwc => (rank - 3, rank - 2),
        Layout::Nchw => (rank - 2, rank - 1),
    }
}

/// `x` as a float `[n, c, h, w]` tensor, and how to give the result back.
fn to_nchw<B: Backend>(op: &str, x: Prim<B>, layout: Layout) -> NifResult<(B::FloatTensorPrimitive, Form)> {
    let single = x.shape().num_dims() == 3;
    let (t, byte) = match x {
        Prim::Float(t) => (t, false),
        Prim::Int(t) if t.dtype() == DType::U8 => (B::int_into_float(t, DType::F32.into()), true),
        other => return Err(NifError::new(op, "takes u8 or float images", other.describe())),
    };
    let t = if single {
        let s = t.shape();
        B::float_reshape(t, Shape::from(vec![1, s[0], s[1], s[2]]))
    } else {
        t
    };
    let t = match layout {
        Layout::Nhwc => B::float_permute(t, &[0, 3, 1, 2]),
        Layout::Nchw => t,
    };
    Ok((t, Form { layout, single, byte }))
}

/// The `[n, c, h, w]` result in the input's form: layout, rank and dtype (`u8`: rounded and
/// clamped).
fn from_nchw<B: Backend>(t: B::FloatTensorPrimitive, form: Form) -> Prim<B> {
    let t = match form.layout {
        Layout::Nhwc => B::float_permute(t, &[0, 2, 3, 1]),
        Layout::Nchw => t,
    };
    let t = if form.single {
        let s = t.shape();
        B::float_reshape(t, Shape::from(vec![s[1], s[2], s[3]]))
    } else {
        t
    };
    if form.byte {
        let t = B::float_clamp(B::float_round(t), Scalar::Float(0.0), Scalar::Float(255.0));
        Prim::Int(B::float_into_int(t, DType::U8.into()))
    } else {
        Prim::Float(t)
    }
}

/// A tensor of `values` with `shape`, on `like`'s device in its float dtype.
fn constant<B: Backend>(values: Vec<f32>, shape: Vec<usize>, like: &B::FloatTensorPrimitive) -> B::FloatTensorPrimitive {
    let t = B::float_from_data(TensorData::new(values, Shape::from(shape)), &B::float_device(like));
    match like.dtype() {
        DType::F32 => t,
        other => B::float_cast(t, other.into()),
    }
}

/// A list of `n` numbers from option `key` (a single number stands for all `n`).
fn per_channel(op: &str, opts: &Opts, key: &str, n: usize) -> NifResult<Vec<f64>> {
    use crate::opts::OptVal;
    let bad = || NifError::new(op, format!("option {key} must be a number or a list of {n} numbers (one per channel)"), format!("{:?}", opts.get(key)));
    let values = match opts.get(key) {
        Some(OptVal::List(items)) => items
            .iter()
            .map(|v| match v {
                OptVal::Float(f) => Ok(*f),
                OptVal::Int(i) => Ok(*i as f64),
                _ => Err(bad()),
            })
            .collect::<NifResult<Vec<f64>>>()?,
        Some(OptVal::Float(_) | OptVal::Int(_)) => vec![opts.float(op, key, None)?; n],
        None => return Err(NifError::new(op, format!("option {key} is required"), format!("options: {:?}", opts.0))),
        _ => return Err(bad()),
    };
    if values.len() != n {
        return Err(bad());
    }
    Ok(values)
}

/// `u8` to float in 0.0..1.0 (`x / 255`, or `x * scale`), any layout.
fn to_float<B: Backend>(op: &str, x: Prim<B>, opts: &Opts) -> NifResult<Prim<B>> {
    let dtype = super::dtype_opt(op, opts, "dtype", Some("f32"))?;
    if !dtype.is_float() {
        return Err(NifError::new(op, "option dtype must be a float type", crate::dtype::name(dtype)));
    }
    let scale = opts.float(op, "scale", Some(1.0 / 255.0))?;
    match x {
        Prim::Int(t) if t.dtype() == DType::U8 => {
            Ok(Prim::Float(B::float_mul_scalar(B::int_into_float(t, dtype.into()), Scalar::Float(scale))))
        }
        other => Err(NifError::new(op, "takes a u8 image", other.describe())),
    }
}

/// `[top, left, height, width]` of the image, any dtype (a view).
fn crop<B: Backend>(op: &str, x: Prim<B>, layout: Layout, opts: &Opts) -> NifResult<Prim<B>> {
    let shape = x.shape();
    let rank = shape.num_dims();
    let (ha, wa) = hw_axes(layout, rank);
    let (top, left) = (opts.int(op, "top", Some(0))?, opts.int(op, "left", Some(0))?);
    let height = opts.int(op, "height", Some(shape[ha] as i64 - top))?;
    let width = opts.int(op, "width", Some(shape[wa] as i64 - left))?;
    if top < 0 || left < 0 || height < 1 || width < 1 || top + height > shape[ha] as i64 || left + width > shape[wa] as i64 {
        return Err(NifError::new(
            op,
            format!("the box top {top}, left {left}, height {height}, width {width} is not inside the image"),
            x.describe(),
        ));
    }
    let mut slices: Vec<Slice> = (0..rank).map(|i| Slice::new(0, Some(shape[i] as isize), 1)).collect();
    slices[ha] = Slice::new(top as isize, Some((top + height) as isize), 1);
    slices[wa] = Slice::new(left as isize, Some((left + width) as isize), 1);
    Ok(each_kind!(x, |t| B::float_slice(t, &slices), B::int_slice(t, &slices), B::bool_slice(t, &slices)))
}

/// Mirrors the image: `direction` horizontal (left to right, the default), vertical or both.
fn flip<B: Backend>(op: &str, x: Prim<B>, layout: Layout, opts: &Opts) -> NifResult<Prim<B>> {
    let (ha, wa) = hw_axes(layout, x.shape().num_dims());
    let axes = match opts.name(op, "direction", Some("horizontal"))?.as_str() {
        "horizontal" => vec![wa],
        "vertical" => vec![ha],
        "both" => vec![ha, wa],
        other => return Err(NifError::new(op, format!("unknown direction {other}"), "directions: horizontal, vertical, both")),
    };
    Ok(each_kind!(x, |t| B::float_flip(t, &axes), B::int_flip(t, &axes), B::bool_flip(t, &axes)))
}

/// Rotates by `k` quarter turns counter-clockwise (`k` may be negative), as `np.rot90`.
fn rot90<B: Backend>(op: &str, x: Prim<B>, layout: Layout, opts: &Opts) -> NifResult<Prim<B>> {
    let rank = x.shape().num_dims();
    let (ha, wa) = hw_axes(layout, rank);
    let mut swap: Vec<usize> = (0..rank).collect();
    swap.swap(ha, wa);
    let k = opts.int(op, "k", Some(1))?.rem_euclid(4);
    let flip = |p: Prim<B>, axes: &[usize]| each_kind!(p, |t| B::float_flip(t, axes), B::int_flip(t, axes), B::bool_flip(t, axes));
    let transpose = |p: Prim<B>| each_kind!(p, |t| B::float_permute(t, &swap), B::int_permute(t, &swap), B::bool_permute(t, &swap));
    Ok(match k {
        0 => x,
        1 => transpose(flip(x, &[wa])),
        2 => flip(x, &[ha, wa]),
        _ => flip(transpose(x), &[wa]),
    })
}

/// Resizes to `size: [h, w]` with `mode` nearest, bilinear, bicubic (the interpolate kernels;
/// `align_corners`, default false) or area (adaptive average pooling, PyTorch's `area`).
fn resize<B: Backend>(op: &str, t: B::FloatTensorPrimitive, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let size = super::sizes(op, opts, "size", None)?;
    let [h, w] = match size.as_slice() {
        [h, w] if *h > 0 && *w > 0 => [*h, *w],
        _ => return Err(NifError::new(op, "option size must be [height, width], both positive", format!("{size:?}"))),
    };
    let mode = match opts.name(op, "mode", Some("bilinear"))?.as_str() {
        "nearest" => InterpolateMode::Nearest,
        "bilinear" => InterpolateMode::Bilinear,
        "bicubic" => InterpolateMode::Bicubic,
        "area" => return Ok(B::adaptive_avg_pool2d(t, [h, w])),
        other => return Err(NifError::new(op, format!("unknown mode {other}"), "modes: nearest, bilinear, bicubic, area")),
    };
    let align_corners = opts.bool(op, "align_corners", false)?;
    Ok(B::interpolate(t, [h, w], InterpolateOptions { mode, align_corners }))
}

/// The full-range BT.601 (JPEG's) YCbCr of RGB, rows Y, Cb, Cr.
const RGB_TO_YCBCR: [[f32; 3]; 3] = [
    [0.299, 0.587, 0.114],
    [-0.168_735_9, -0.331_264_1, 0.5],
    [0.5, -0.418_687_6, -0.081_312_4],
];
/// Its inverse, rows R, G, B over Y, Cb, Cr.
const YCBCR_TO_RGB: [[f32; 3]; 3] = [[1.0, 0.0, 1.402], [1.0, -0.344_136_3, -0.714_136_3], [1.0, 1.772, 0.0]];

/// Colour conversion `from` -> `to` (rgb, gray, ycbcr or yuv, the same: full-range BT.601, as
/// JPEG) as one 1x1 convolution: `u8` images are 0..255 (chroma offset 128), float images
/// 0.0..1.0 (offset 0.5). Gray is BT.601's luma, as PIL's `L`.
fn color<B: Backend>(op: &str, t: B::FloatTensorPrimitive, form: Form, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let space = |key: &str| -> NifResult<&'static str> {
        match opts.name(op, key, None)?.as_str() {
            "rgb" => Ok("rgb"),
            "gray" | "grey" => Ok("gray"),
            "ycbcr" | "yuv" => Ok("ycbcr"),
            other => Err(NifError::new(op, format!("unknown colour space {other}"), "spaces: rgb, gray, ycbcr (yuv)")),
        }
    };
    let (from, to) = (space("from")?, space("to")?);
    let shape = t.shape();
    let want = if from == "gray" { 1 } else { 3 };
    if shape[1] != want {
        return Err(NifError::new(op, format!("{from} images have {want} channel(s), this one has {}", shape[1]), format!("[n, c, h, w] {:?}", shape.as_slice())));
    }
    let half = if form.byte { 128.0 } else { 0.5 };
    // Output rows over the input channels, and the bias of each output channel.
    let (rows, bias): (Vec<Vec<f32>>, Vec<f32>) = match (from, to) {
        (a, b) if a == b => return Ok(t),
        ("rgb", "gray") => (vec![RGB_TO_YCBCR[0].to_vec()], vec![0.0]),
        ("rgb", "ycbcr") => (RGB_TO_YCBCR.iter().map(|r| r.to_vec()).collect(), vec![0.0, half, half]),
        // rgb = M (y, cb - half, cr - half): the offsets go into the bias.
        ("ycbcr", "rgb") => (YCBCR_TO_RGB.iter().map(|r| r.to_vec()).collect(), YCBCR_TO_RGB.iter().map(|r| -half * (r[1] + r[2])).collect()),
        ("ycbcr", "gray") => (vec![vec![1.0, 0.0, 0.0]], vec![0.0]),
        ("gray", "rgb") => (vec![vec![1.0]; 3], vec![0.0; 3]),
        ("gray", "ycbcr") => (vec![vec![1.0], vec![0.0], vec![0.0]], vec![0.0, half, half]),
        _ => unreachable!("spaces are rgb, gray and ycbcr"),
    };
    let (n, cin) = (rows.len(), want);
    let weight = constant::<B>(rows.into_iter().flatten().collect(), vec![n, cin, 1, 1], &t);
    let bias = constant::<B>(bias, vec![n], &t);
    Ok(B::conv2d(t, weight, Some(bias), conv_options(1)))
}

fn conv_options(groups: usize) -> ConvOptions<2> {
    ConvOptions { stride: [1, 1], padding: [0, 0], dilation: [1, 1], groups }
}

/// `(x - mean) / std` per channel, f32; a `u8` image is scaled to 0.0..1.0 first (the
/// scaling is folded into the convolution's weights).
fn normalize<B: Backend>(op: &str, t: B::FloatTensorPrimitive, form: Form, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let c = t.shape()[1];
    let mean = per_channel(op, opts, "mean", c)?;
    let std = per_channel(op, opts, "std", c)?;
    if let Some(s) = std.iter().find(|s| **s == 0.0 || !s.is_finite()) {
        return Err(NifError::new(op, "option std must be finite and nonzero", format!("{s}")));
    }
    let scale = if form.byte { 1.0 / 255.0 } else { 1.0 };
    let weight: Vec<f32> = std.iter().map(|s| (scale / s) as f32).collect();
    let bias: Vec<f32> = mean.iter().zip(&std).map(|(m, s)| (-m / s) as f32).collect();
    let weight = constant::<B>(weight, vec![c, 1, 1, 1], &t);
    let bias = constant::<B>(bias, vec![c], &t);
    Ok(B::conv2d(t, weight, Some(bias), conv_options(c)))
}

/// The normalised 1-d gaussian of `sigma` over `size` taps.
pub fn gaussian(sigma: f64, size: usize) -> Vec<f32> {
    let r = (size / 2) as f64;
    let taps: Vec<f64> = (0..size).map(|i| (-((i as f64 - r).powi(2)) / (2.0 * sigma * sigma)).exp()).collect();
    let sum: f64 = taps.iter().sum();
    taps.into_iter().map(|v| (v / sum) as f32).collect()
}

/// Gaussian blur of `sigma` over `size` taps (odd; default `2 * ceil(3 sigma) + 1`), edges
/// replicated: a depthwise convolution down the columns, then along the rows.
fn blur<B: Backend>(op: &str, t: B::FloatTensorPrimitive, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let sigma = opts.float(op, "sigma", None)?;
    if !(sigma > 0.0 && sigma.is_finite()) {
        return Err(NifError::new(op, "option sigma must be positive", format!("{sigma}")));
    }
    let size = opts.int(op, "size", Some(2 * (3.0 * sigma).ceil() as i64 + 1))?;
    if size < 1 || size % 2 == 0 || size > 255 {
        return Err(NifError::new(op, "option size must be odd, 1 to 255", format!("{size}")));
    }
    let (size, r) = (size as usize, size as usize / 2);
    let c = t.shape()[1];
    let taps = gaussian(sigma, size);
    let column = constant::<B>(taps.iter().cycle().take(c * size).copied().collect(), vec![c, 1, size, 1], &t);
    let row = constant::<B>(taps.iter().cycle().take(c * size).copied().collect(), vec![c, 1, 1, size], &t);
    let t = replicate_pad::<B>(t, 2, r);
    let t = B::conv2d(t, column, None, conv_options(c));
    let t = replicate_pad::<B>(t, 3, r);
    Ok(B::conv2d(t, row, None, conv_options(c)))
}

/// `t` with `r` copies of its first and last slice along `axis` before and after.
fn replicate_pad<B: Backend>(t: B::FloatTensorPrimitive, axis: usize, r: usize) -> B::FloatTensorPrimitive {
    if r == 0 {
        return t;
    }
    let s = t.shape();
    let edge = |at: usize| {
        let mut slices: Vec<Slice> = (0..4).map(|i| Slice::new(0, Some(s[i] as isize), 1)).collect();
        slices[axis] = Slice::new(at as isize, Some(at as isize + 1), 1);
        let mut big = s.as_slice().to_vec();
        big[axis] = r;
        B::float_expand(B::float_slice(t.clone(), &slices), Shape::from(big))
    };
    let (first, last) = (edge(0), edge(s[axis] - 1));
    B::float_cat(vec![first, t, last], axis)
}

/// Pads with `value` (0): `top`, `bottom`, `left`, `right` pixels (0 each).
fn pad<B: Backend>(op: &str, t: B::FloatTensorPrimitive, opts: &Opts) -> NifResult<B::FloatTensorPrimitive> {
    let amount = |key: &str| -> NifResult<usize> {
        let v = opts.int(op, key, Some(0))?;
        usize::try_from(v).map_err(|_| NifError::new(op, format!("option {key} must be 0 or more"), format!("{v}")))
    };
    let (top, bottom, left, right) = (amount("top")?, amount("bottom")?, amount("left")?, amount("right")?);
    let value = opts.float(op, "value", Some(0.0))?;
    let (device, dtype) = (B::float_device(&t), t.dtype());
    let band = |t: B::FloatTensorPrimitive, axis: usize, before: usize, after: usize| {
        let s = t.shape();
        let full = |n: usize| {
            let mut shape = s.as_slice().to_vec();
            shape[axis] = n;
            B::float_full(Shape::from(shape), Scalar::Float(value), &device, dtype.into())
        };
        let mut parts = Vec::new();
        if before > 0 {
            parts.push(full(before));
        }
        parts.push(t);
        if after > 0 {
            parts.push(full(after));
        }
        if parts.len() == 1 { parts.pop().expect("one part") } else { B::float_cat(parts, axis) }
    };
    let t = band(t, 2, top, bottom);
    Ok(band(t, 3, left, right))
}
