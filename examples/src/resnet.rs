//! ResNet-50 (He et al. 2015, torchvision's `resnet50` layout: the stride on the bottleneck's
//! 3x3 convolution) written with burn-nn layers, and the pieces of one SGD training step on a
//! fixed batch, shared by the `bench` row and the `scale` binary.
//!
//! A 7x7/2 convolution to 64 channels, batch norm, ReLU, 3x3/2 max pooling; four stages of
//! bottleneck blocks ([3, 4, 6, 3] blocks of widths 64, 128, 256, 512, each block 1x1 -> 3x3
//! -> 1x1 expanding 4x, a 1x1 projection with batch norm on the first block of a stage);
//! adaptive average pooling to 1x1 and a linear layer to the classes. Convolutions have no
//! bias (batch norm follows each), as in torchvision. 25.6 M parameters at 1000 classes.
use burn::module::{Module, ModuleMapper, Param};
use burn_nn::conv::{Conv2d, Conv2dConfig};
use burn_nn::loss::CrossEntropyLossConfig;
use burn_nn::pool::{AdaptiveAvgPool2d, AdaptiveAvgPool2dConfig, MaxPool2d, MaxPool2dConfig};
use burn_nn::{BatchNorm, BatchNormConfig, Linear, LinearConfig, PaddingConfig2d};
use burn_tensor::activation::relu;
use burn_tensor::backend::Backend;
use burn_tensor::{FloatDType, Int, Tensor, TensorData};

/// Blocks per stage of ResNet-50.
pub const RESNET50_BLOCKS: [usize; 4] = [3, 4, 6, 3];
/// The bottleneck width of each stage (the block's output is 4x wider).
const WIDTHS: [usize; 4] = [64, 128, 256, 512];
/// How much wider a bottleneck block's output is than its inner convolutions.
const EXPANSION: usize = 4;

/// Floating-point operations of one forward pass of ResNet-50 on one 224x224 image
/// (4.09 G multiply-adds, each 2 flops); a training step is about three times this per image.
pub const RESNET50_FORWARD_FLOPS_224: f64 = 2.0 * 4.09e9;

/// A convolution without bias, then batch norm.
#[derive(Module, Debug)]
struct ConvNorm<B: Backend> {
    conv: Conv2d<B>,
    norm: BatchNorm<B>,
}

impl<B: Backend> ConvNorm<B> {
    fn new(c_in: usize, c_out: usize, kernel: usize, stride: usize, device: &B::Device) -> Self {
        let pad = kernel / 2;
        let conv = Conv2dConfig::new([c_in, c_out], [kernel, kernel])
            .with_stride([stride, stride])
            .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
            .with_bias(false)
            .init(device);
        Self { conv, norm: BatchNormConfig::new(c_out).init(device) }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        self.norm.forward(self.conv.forward(x))
    }
}

/// 1x1 to `width`, 3x3 (stride here) at `width`, 1x1 to `4 width`; the input, projected where
/// its shape changes, added before the last ReLU.
#[derive(Module, Debug)]
struct Bottleneck<B: Backend> {
    reduce: ConvNorm<B>,
    spatial: ConvNorm<B>,
    expand: ConvNorm<B>,
    projection: Option<ConvNorm<B>>,
}

impl<B: Backend> Bottleneck<B> {
    fn new(c_in: usize, width: usize, stride: usize, device: &B::Device) -> Self {
        let c_out = width * EXPANSION;
        let projection = (stride != 1 || c_in != c_out).then(|| ConvNorm::new(c_in, c_out, 1, stride, device));
        Self {
            reduce: ConvNorm::new(c_in, width, 1, 1, device),
            spatial: ConvNorm::new(width, width, 3, stride, device),
            expand: ConvNorm::new(width, c_out, 1, 1, device),
            projection,
        }
    }

    fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let shortcut = match &self.projection {
            Some(p) => p.forward(x.clone()),
            None => x.clone(),
        };
        let h = relu(self.reduce.forward(x));
        let h = relu(self.spatial.forward(h));
        relu(self.expand.forward(h) + shortcut)
    }
}

/// ResNet-50: `[batch, 3, h, w]` images (224x224 in the benchmarks; any size of at least
/// 32x32 works) to `[batch, classes]` logits.
#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    stem: ConvNorm<B>,
    pool: MaxPool2d,
    blocks: Vec<Bottleneck<B>>,
    head_pool: AdaptiveAvgPool2d,
    head: Linear<B>,
}

impl<B: Backend> ResNet<B> {
    /// ResNet-50 with `classes` outputs, initialised with burn-nn's defaults (Kaiming-uniform
    /// convolutions and linear layer, batch norm's scale 1 and shift 0) from the device's
    /// random generator.
    pub fn resnet50(classes: usize, device: &B::Device) -> Self {
        Self::new(RESNET50_BLOCKS, classes, device)
    }

    /// The same layout with `stage_blocks` bottleneck blocks per stage (ResNet-101 is
    /// `[3, 4, 23, 3]`; `[1, 1, 1, 1]` makes a small one for quick checks).
    pub fn new(stage_blocks: [usize; 4], classes: usize, device: &B::Device) -> Self {
        let mut blocks = Vec::new();
        let mut c_in = 64;
        for (stage, (&count, &width)) in stage_blocks.iter().zip(&WIDTHS).enumerate() {
            for block in 0..count {
                let stride = if stage > 0 && block == 0 { 2 } else { 1 };
                blocks.push(Bottleneck::new(c_in, width, stride, device));
                c_in = width * EXPANSION;
            }
        }
        Self {
            stem: ConvNorm::new(3, 64, 7, 2, device),
            pool: MaxPool2dConfig::new([3, 3]).with_strides([2, 2]).with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1)).init(),
            blocks,
            head_pool: AdaptiveAvgPool2dConfig::new([1, 1]).init(),
            head: LinearConfig::new(c_in, classes).init(device),
        }
    }

    /// The logits of `images` (`[batch, 3, h, w]`).
    pub fn forward(&self, images: Tensor<B, 4>) -> Tensor<B, 2> {
        let mut h = self.pool.forward(relu(self.stem.forward(images)));
        for block in &self.blocks {
            h = block.forward(h);
        }
        let [batch, channels, _, _] = h.dims();
        self.head.forward(self.head_pool.forward(h).reshape([batch, channels]))
    }

    /// The mean cross-entropy of the logits of `images` against `labels` (`[batch]`),
    /// computed in f32 whatever the model's dtype (as PyTorch's autocast does for the loss).
    pub fn loss(&self, images: Tensor<B, 4>, labels: Tensor<B, 1, Int>) -> Tensor<B, 1> {
        let logits = self.forward(images).cast(FloatDType::F32);
        CrossEntropyLossConfig::new().init(&logits.device()).forward(logits, labels)
    }
}

/// A module with every float tensor (parameters and batch norm's running statistics) cast
/// to `dtype`; a parameter that required gradients still does (a leaf of the new dtype).
pub fn cast_module<B: Backend, M: Module<B>>(module: M, dtype: FloatDType) -> M {
    module.map(&mut Cast { dtype })
}

struct Cast {
    dtype: FloatDType,
}

impl<B: Backend> ModuleMapper<B> for Cast {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let grad = tensor.is_require_grad();
        let cast = tensor.cast(self.dtype).detach();
        Param::from_mapped_value(id, if grad { cast.require_grad() } else { cast }, mapper)
    }
}

/// A fixed batch of `batch` images `[batch, 3, side, side]` (uniform in [-1, 1) from `seed`,
/// made on the host so that every backend gets the same values) in `dtype`, and their
/// [`labels`].
pub fn synthetic_batch<B: Backend>(
    batch: usize,
    side: usize,
    classes: usize,
    seed: u64,
    dtype: FloatDType,
    device: &B::Device,
) -> (Tensor<B, 4>, Tensor<B, 1, Int>) {
    let values = uniform_values(batch * 3 * side * side, seed);
    let images = Tensor::<B, 4>::from_data(TensorData::new(values, [batch, 3, side, side]), device).cast(dtype);
    (images, labels(batch, classes, device))
}

/// `len` values uniform in [-1, 1), the same for one `seed` on every machine (xorshift).
pub fn uniform_values(len: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        })
        .collect()
}

/// Labels `i * 7 + 3 mod classes` of a batch of `batch`.
pub fn labels<B: Backend>(batch: usize, classes: usize, device: &B::Device) -> Tensor<B, 1, Int> {
    let labels: Vec<i64> = (0..batch).map(|i| ((i * 7 + 3) % classes) as i64).collect();
    Tensor::from_data(TensorData::new(labels, [batch]), device)
}

/// `module` with weights that depend on `seed` alone, so that two backends (whose random
/// generators differ) start from the same model: every tensor of rank 2 or more (a
/// convolution's `[out, in, k, k]`, a linear layer's `[in, out]`) uniform in
/// `±sqrt(3 / fan)` with `fan` its size over its first dimension; every 1-d tensor (batch
/// norm's scale 1 and shift 0 and running statistics 0 and 1, a bias) rounded to the nearest
/// integer of its mean, which keeps batch norm's defaults and zeroes a bias. Reads each tensor
/// back once (a set-up step, not for a training loop).
pub fn deterministic_init<B: Backend, M: Module<B>>(module: M, seed: u64) -> M {
    module.map(&mut Deterministic { seed })
}

struct Deterministic {
    seed: u64,
}

impl<B: Backend> ModuleMapper<B> for Deterministic {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<B, D>>) -> Param<Tensor<B, D>> {
        let (id, tensor, mapper) = param.consume();
        let (grad, dtype, device, dims) = (tensor.is_require_grad(), tensor.dtype(), tensor.device(), tensor.dims());
        let numel: usize = dims.iter().product();
        let values: Vec<f32> = match D {
            1 => {
                let data = tensor.into_data().convert::<f32>().to_vec::<f32>().expect("f32 values");
                let mean = data.iter().sum::<f32>() / data.len().max(1) as f32;
                vec![mean.round(); numel]
            }
            _ => {
                self.seed += 1;
                let bound = (3.0 / (numel / dims[0].max(1)).max(1) as f32).sqrt();
                uniform_values(numel, self.seed).into_iter().map(|v| v * bound).collect()
            }
        };
        let fresh = Tensor::<B, D>::from_data(TensorData::new(values, dims), &device).cast(dtype);
        Param::from_mapped_value(id, if grad { fresh.require_grad() } else { fresh }, mapper)
    }
}
