//! The two classifiers, written as any Burn user writes them: burn-nn layers in a
//! `#[derive(Module)]` struct with a `forward`.
use burn::module::Module;
use burn_nn::conv::{Conv2d, Conv2dConfig};
use burn_nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn_nn::{Linear, LinearConfig, PaddingConfig2d, Relu};
use burn_tensor::Tensor;
use burn_tensor::backend::Backend;

use crate::data::{CLASSES, PIXELS, SIDE};

/// A model that maps a `[batch, PIXELS]` tensor of images to `[batch, CLASSES]` logits.
pub trait Classifier<B: Backend>: Module<B> + Sized {
    /// A freshly initialised model (Burn's default Kaiming-uniform weights, drawn from the
    /// device's random generator: seed it with `Backend::seed` for a reproducible start).
    fn init(device: &B::Device) -> Self;

    /// Logits of each image.
    fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2>;
}

/// Which model to train.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelKind {
    /// [`Mlp`].
    Mlp,
    /// [`Cnn`].
    Cnn,
}

impl ModelKind {
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Mlp => "mlp",
            ModelKind::Cnn => "cnn",
        }
    }
}

/// A multilayer perceptron: 64 → 128 → 64 → 10 with ReLU.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    hidden1: Linear<B>,
    hidden2: Linear<B>,
    output: Linear<B>,
    activation: Relu,
}

impl<B: Backend> Classifier<B> for Mlp<B> {
    fn init(device: &B::Device) -> Self {
        Self {
            hidden1: LinearConfig::new(PIXELS, 128).init(device),
            hidden2: LinearConfig::new(128, 64).init(device),
            output: LinearConfig::new(64, CLASSES).init(device),
            activation: Relu::new(),
        }
    }

    fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2> {
        let x = self.activation.forward(self.hidden1.forward(images));
        let x = self.activation.forward(self.hidden2.forward(x));
        self.output.forward(x)
    }
}

/// A small convolutional network: two 3×3 convolutions (8 and 16 channels, same padding) with
/// ReLU, a 2×2 max pool (8×8 → 4×4), then 256 → 64 → 10. Few channels keep the backward pass
/// cheap on a software rasteriser (lavapipe).
#[derive(Module, Debug)]
pub struct Cnn<B: Backend> {
    conv1: Conv2d<B>,
    conv2: Conv2d<B>,
    pool: MaxPool2d,
    hidden: Linear<B>,
    output: Linear<B>,
    activation: Relu,
}

const CONV1: usize = 8;
const CONV2: usize = 16;
const POOLED: usize = SIDE / 2;
const FLAT: usize = CONV2 * POOLED * POOLED;

impl<B: Backend> Classifier<B> for Cnn<B> {
    fn init(device: &B::Device) -> Self {
        let conv = |channels| Conv2dConfig::new(channels, [3, 3]).with_padding(PaddingConfig2d::Same);
        Self {
            conv1: conv([1, CONV1]).init(device),
            conv2: conv([CONV1, CONV2]).init(device),
            pool: MaxPool2dConfig::new([2, 2]).init(),
            hidden: LinearConfig::new(FLAT, 64).init(device),
            output: LinearConfig::new(64, CLASSES).init(device),
            activation: Relu::new(),
        }
    }

    fn forward(&self, images: Tensor<B, 2>) -> Tensor<B, 2> {
        let [batch, _] = images.dims();
        let x = images.reshape([batch, 1, SIDE, SIDE]);
        let x = self.activation.forward(self.conv1.forward(x));
        let x = self.pool.forward(self.activation.forward(self.conv2.forward(x))).reshape([batch, FLAT]);
        let x = self.activation.forward(self.hidden.forward(x));
        self.output.forward(x)
    }
}
