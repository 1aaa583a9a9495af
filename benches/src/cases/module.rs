//! Module ops: conv2d (f32 on TF32 units by default, f16; a 3x3 with its two backward passes,
//! and the forward of a 1x1, a strided 3x3 and a ResNet-like 3x3), max_pool2d and attention
//! (f32, f16 and bf16; f32 and f16 causal), plus, with `--tune`, ours with other tensor-core
//! tilings of the convolution, other planes per cube of the attention, and in exact f32.
use burn_backend::ops::{AttentionModuleOptions, ConvOptions};
use burn_backend::{Backend, DType, Shape, TensorPrimitive};
use burn_tensor::Tensor;
use burn_tensor::module::{attention, conv2d, max_pool2d};
use ex_cubecl::launch::attention::{FlashTuning, attention_with};
use ex_cubecl::launch::conv::{ConvSpec, ConvTiling, conv_weight_backward_with, conv_with};
use ex_cubecl::{CubeTensor, MatmulPrecision, set_matmul_precision};

use super::{downcast, uniform};
use crate::{Case, DynCase, Precision, RunFn, Runtime, Size, Work};

/// How an op is computed.
#[derive(Clone, Copy, Debug)]
pub enum Variant {
    /// The op on both backends, default settings.
    Default,
    /// Ours with `MatmulPrecision::Exact` (no peer).
    Exact,
    /// Ours with a given tensor-core convolution tiling (tuning; no peer).
    Tiling(ConvTiling),
    /// Ours with a given shape of the fused attention (tuning; no peer).
    Flash(FlashTuning),
}

impl Variant {
    fn label(&self) -> String {
        match self {
            Variant::Default => String::new(),
            Variant::Exact => " exact (ours only)".into(),
            Variant::Tiling(t) => format!(
                " {}x{}x{} tiles, {}x{} planes (ours only)",
                t.block_co, t.block_pix, t.block_k, t.warps_co, t.warps_pix
            ),
            Variant::Flash(t) => format!(
                " {} planes, {} keys{} (ours only)",
                t.warps,
                t.block_kv,
                if t.reload_q { ", queries reloaded" } else { "" }
            ),
        }
    }

    /// Whether the case runs on backend `B` (variants are ours only).
    fn runs_on<B: Backend>(&self) -> bool {
        matches!(self, Variant::Default) || std::any::TypeId::of::<B>() == std::any::TypeId::of::<crate::Ours>()
    }
}

/// `conv2d(x [b, c, h, w], weight [c_out, c, k, k])`, padding `k / 2`.
pub struct Conv2d {
    x: [usize; 4],
    c_out: usize,
    /// The kernel's side and the stride.
    k: usize,
    stride: usize,
    dtype: DType,
    variant: Variant,
}

impl Conv2d {
    /// The output's height and width.
    fn out_hw(&self) -> (usize, usize) {
        let [_, _, h, w] = self.x;
        let out = |d: usize| (d + 2 * (self.k / 2) - self.k) / self.stride + 1;
        (out(h), out(w))
    }
}

/// The gradient of `conv2d(x [b, c, h, w], weight [c_out, c, 3, 3])` (stride 1, padding 1)
/// with respect to the input (`weight: false`) or the weight, from an output gradient.
pub struct ConvBackward {
    x: [usize; 4],
    c_out: usize,
    dtype: DType,
    weight: bool,
    /// Ours with a given tiling of the manual-MMA weight gradient (tuning; no peer).
    tiling: Option<ConvTiling>,
}

/// `max_pool2d(x, 3×3, stride 2, padding 1)`.
pub struct MaxPool2d {
    x: [usize; 4],
}

/// `attention(q, k, v)` over `[batch, heads, seq, dim]`, no mask.
pub struct Attention {
    shape: [usize; 4],
    dtype: DType,
    causal: bool,
    variant: Variant,
}

/// The module-op cases at `size` (plus variants of ours when `tune`).
pub fn cases(size: Size, tune: bool) -> Vec<Box<dyn DynCase>> {
    // The small backward size is the second convolution of the digits CNN.
    let (x, c_out, back_x, back_c_out, pool, attn) = match size {
        Size::Small => ([2, 8, 16, 16], 8, [32, 8, 8, 8], 16, [2, 4, 32, 32], [1, 2, 64, 32]),
        Size::Full => ([64, 64, 56, 56], 64, [64, 64, 56, 56], 64, [64, 64, 112, 112], [4, 16, 1024, 64]),
    };
    // Other convolution shapes, `(x, c_out, k, stride)`: a ResNet bottleneck's 1x1 reduction, a
    // strided 3x3 that halves the image, and a ResNet stage-3 3x3.
    let shapes = match size {
        Size::Small => [([2, 16, 8, 8], 8, 1, 1), ([2, 8, 16, 16], 16, 3, 2), ([2, 16, 8, 8], 16, 3, 1)],
        Size::Full => [([32, 256, 56, 56], 64, 1, 1), ([64, 64, 56, 56], 128, 3, 2), ([32, 256, 14, 14], 256, 3, 1)],
    };
    let back = |dtype, weight| Box::new(ConvBackward { x: back_x, c_out: back_c_out, dtype, weight, tiling: None });
    let conv = |dtype, variant| Box::new(Conv2d { x, c_out, k: 3, stride: 1, dtype, variant });
    let shaped = |(x, c_out, k, stride), dtype| Box::new(Conv2d { x, c_out, k, stride, dtype, variant: Variant::Default });
    let att = |dtype, causal, variant| Box::new(Attention { shape: attn, dtype, causal, variant });
    let mut out: Vec<Box<dyn DynCase>> = vec![
        conv(DType::F32, Variant::Default),
        conv(DType::F16, Variant::Default),
        back(DType::F32, false),
        back(DType::F32, true),
        back(DType::F16, false),
        back(DType::F16, true),
        Box::new(MaxPool2d { x: pool }),
        att(DType::F32, false, Variant::Default),
        att(DType::F16, false, Variant::Default),
        att(DType::F32, true, Variant::Default),
        att(DType::F16, true, Variant::Default),
        att(DType::BF16, false, Variant::Default),
    ];
    for shape in shapes {
        out.push(shaped(shape, DType::F32));
        out.push(shaped(shape, DType::F16));
    }
    if tune {
        out.push(conv(DType::F32, Variant::Exact));
        out.push(att(DType::F32, false, Variant::Exact));
        let t = |block_co, block_pix, block_k, warps_co, warps_pix| ConvTiling { block_co, block_pix, block_k, warps_co, warps_pix };
        for tiling in [t(64, 128, 32, 2, 2), t(64, 256, 32, 2, 4), t(64, 128, 32, 1, 4), t(64, 64, 32, 2, 2), t(128, 128, 32, 2, 2)] {
            out.push(conv(DType::F32, Variant::Tiling(tiling)));
        }
        for tiling in [t(64, 128, 64, 2, 2), t(64, 256, 64, 2, 4), t(64, 128, 32, 2, 2), t(64, 128, 64, 1, 4), t(64, 64, 64, 2, 2)] {
            out.push(conv(DType::F16, Variant::Tiling(tiling)));
        }
        // The weight gradient's tilings: outer channels × weight columns × pixels per slice.
        let weight = |dtype, tiling| Box::new(ConvBackward { x: back_x, c_out: back_c_out, dtype, weight: true, tiling: Some(tiling) });
        for tiling in [t(64, 64, 64, 2, 2), t(64, 128, 64, 2, 2), t(64, 64, 32, 2, 2), t(64, 64, 128, 2, 2), t(64, 64, 64, 1, 4)] {
            out.push(weight(DType::F16, tiling));
        }
        for tiling in [t(64, 64, 32, 2, 2), t(64, 128, 32, 2, 2), t(64, 64, 64, 2, 2)] {
            out.push(weight(DType::F32, tiling));
        }
        let flash = |warps, block_kv, reload_q| Variant::Flash(FlashTuning { warps, block_kv, reload_q });
        let shapes = [
            flash(4, 64, false),
            flash(4, 64, true),
            flash(2, 64, false),
            flash(8, 64, false),
            flash(4, 32, false),
            flash(4, 32, true),
            flash(8, 32, true),
            flash(4, 128, true),
            flash(4, 128, false),
            flash(8, 64, true),
            flash(8, 128, true),
        ];
        for tuning in shapes {
            out.push(att(DType::F32, false, tuning));
            out.push(att(DType::F16, false, tuning));
        }
    }
    out
}

/// The arithmetic the products of a case run on (for the floor column).
fn precision(dtype: DType, variant: Variant) -> Precision {
    match (dtype, variant) {
        (DType::F32, Variant::Exact) => Precision::F32,
        (DType::F32, _) => Precision::Tf32,
        _ => Precision::Half,
    }
}

/// Runs `f` under exact f32 products when `exact`, restoring the default afterwards.
fn with_precision<T>(exact: bool, f: impl FnOnce() -> T) -> T {
    if !exact {
        return f();
    }
    set_matmul_precision(MatmulPrecision::Exact);
    let out = f();
    set_matmul_precision(MatmulPrecision::Tf32);
    out
}

impl Case for Conv2d {
    fn name(&self) -> String {
        let stride = if self.stride > 1 { format!("/{}", self.stride) } else { String::new() };
        format!("conv2d {:?} {k}x{k}{stride}{}", self.dtype, self.variant.label(), k = self.k).to_lowercase()
    }

    fn size(&self) -> String {
        let [b, c, h, w] = self.x;
        format!("[{b},{c},{h},{w}]x[{},{c},{k},{k}]", self.c_out, k = self.k)
    }

    fn work(&self) -> Work {
        let [b, c, ..] = self.x;
        let (oh, ow) = self.out_hw();
        Work::Flops(2.0 * (b * self.c_out * oh * ow * c * self.k * self.k) as f64, precision(self.dtype, self.variant))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        if !B::supports_dtype(device, self.dtype) || !self.variant.runs_on::<B>() {
            return None;
        }
        let [_, c, ..] = self.x;
        let x = uniform::<B, 4>(self.x, 1, device).cast(self.dtype);
        let w = uniform::<B, 4>([self.c_out, c, self.k, self.k], 2, device).cast(self.dtype);
        let (stride, pad) = (self.stride, self.k / 2);
        let options = ConvOptions::new([stride, stride], [pad, pad], [1, 1], 1);
        Some(match self.variant {
            // The attention's shape is no convolution setting: the convolution runs as by default.
            Variant::Default | Variant::Exact | Variant::Flash(_) => {
                let exact = matches!(self.variant, Variant::Exact);
                Box::new(move || with_precision(exact, || conv2d(x.clone(), w.clone(), None, options.clone())).flatten::<1>(0, 3))
            }
            Variant::Tiling(tiling) => {
                let prim = |t: Tensor<B, 4>| downcast::<CubeTensor<Runtime>, _>(t.into_primitive().tensor()).expect("ours");
                let (x, w) = (prim(x), prim(w));
                let spec = ConvSpec::conv("bench conv2d", &options);
                Box::new(move || {
                    let out = conv_with("bench conv2d", x.clone(), w.clone(), None, spec, Some(tiling));
                    let out = downcast::<B::FloatTensorPrimitive, _>(out).expect("ours");
                    Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(out)).flatten::<1>(0, 3)
                })
            }
        })
    }
}

impl Case for ConvBackward {
    fn name(&self) -> String {
        let wrt = if self.weight { "weight" } else { "input" };
        let tiling = self.tiling.map(|t| Variant::Tiling(t).label()).unwrap_or_default();
        format!("conv2d {:?} 3x3 {wrt} grad{tiling}", self.dtype).to_lowercase()
    }

    fn size(&self) -> String {
        let [b, c, h, w] = self.x;
        format!("[{b},{c},{h},{w}]x[{},{c},3,3]", self.c_out)
    }

    fn work(&self) -> Work {
        let [b, c, h, w] = self.x;
        Work::Flops(2.0 * (b * self.c_out * h * w * c * 9) as f64, precision(self.dtype, Variant::Default))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let variant = self.tiling.map_or(Variant::Default, Variant::Tiling);
        if !B::supports_dtype(device, self.dtype) || !variant.runs_on::<B>() {
            return None;
        }
        let [b, c, h, w] = self.x;
        let prim = |t: Tensor<B, 4>| t.into_primitive().tensor();
        let x = prim(uniform::<B, 4>(self.x, 4, device).cast(self.dtype));
        let weight = prim(uniform::<B, 4>([self.c_out, c, 3, 3], 5, device).cast(self.dtype));
        let grad = prim(uniform::<B, 4>([b, self.c_out, h, w], 6, device).cast(self.dtype));
        let options = ConvOptions::new([1, 1], [1, 1], [1, 1], 1);
        if let Some(tiling) = self.tiling {
            let prim = |t: B::FloatTensorPrimitive| downcast::<CubeTensor<Runtime>, _>(t).expect("ours");
            let (x, grad, shape) = (prim(x), prim(grad), Shape::new([self.c_out, c, 3, 3]));
            let spec = ConvSpec::conv("bench conv2d weight grad", &options);
            return Some(Box::new(move || {
                let out = conv_weight_backward_with("bench conv2d weight grad", x.clone(), grad.clone(), shape.clone(), spec, false, Some(tiling));
                let out = downcast::<B::FloatTensorPrimitive, _>(out).expect("ours");
                Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(out)).flatten::<1>(0, 3)
            }));
        }
        let wrt_weight = self.weight;
        Some(Box::new(move || {
            let (x, weight, grad, options) = (x.clone(), weight.clone(), grad.clone(), options.clone());
            let out = match wrt_weight {
                true => B::conv2d_weight_backward(x, weight, grad, options),
                false => B::conv2d_x_backward(x, weight, grad, options),
            };
            Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(out)).flatten::<1>(0, 3)
        }))
    }
}

impl Case for MaxPool2d {
    fn name(&self) -> String {
        "max_pool2d f32 3x3/2".into()
    }

    fn size(&self) -> String {
        format!("{:?}", self.x)
    }

    fn work(&self) -> Work {
        let [b, c, h, w] = self.x;
        // Reads x once, writes a quarter of it.
        Work::Bytes((b * c * h * w * 4 + b * c * h.div_ceil(2) * w.div_ceil(2) * 4) as f64)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let x = uniform::<B, 4>(self.x, 3, device);
        Some(Box::new(move || max_pool2d(x.clone(), [3, 3], [2, 2], [1, 1], [1, 1], false).flatten::<1>(0, 3)))
    }
}

impl Case for Attention {
    fn name(&self) -> String {
        let causal = if self.causal { " causal" } else { "" };
        format!("attention {:?}{causal}{}", self.dtype, self.variant.label()).to_lowercase()
    }

    fn size(&self) -> String {
        format!("{:?}", self.shape)
    }

    fn work(&self) -> Work {
        let [b, h, s, d] = self.shape;
        // Causal attention needs about half the products.
        let share = if self.causal { 0.5 } else { 1.0 };
        Work::Flops(share * 4.0 * (b * h * s * s * d) as f64, precision(self.dtype, self.variant))
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        if !B::supports_dtype(device, self.dtype) || !self.variant.runs_on::<B>() {
            return None;
        }
        let q = uniform::<B, 4>(self.shape, 4, device).cast(self.dtype);
        let k = uniform::<B, 4>(self.shape, 5, device).cast(self.dtype);
        let v = uniform::<B, 4>(self.shape, 6, device).cast(self.dtype);
        let options = AttentionModuleOptions { is_causal: self.causal, ..Default::default() };
        if let Variant::Flash(tuning) = self.variant {
            let prim = |t: Tensor<B, 4>| downcast::<CubeTensor<Runtime>, _>(t.into_primitive().tensor()).expect("ours");
            let (q, k, v) = (prim(q), prim(k), prim(v));
            return Some(Box::new(move || {
                let out = attention_with(q.clone(), k.clone(), v.clone(), None, None, options, Some(tuning));
                let out = downcast::<B::FloatTensorPrimitive, _>(out).expect("ours");
                Tensor::<B, 4>::from_primitive(TensorPrimitive::Float(out)).flatten::<1>(0, 3)
            }));
        }
        let exact = matches!(self.variant, Variant::Exact);
        Some(Box::new(move || {
            with_precision(exact, || attention(q.clone(), k.clone(), v.clone(), None, None, options)).flatten::<1>(0, 3)
        }))
    }
}
