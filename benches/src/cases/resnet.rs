//! One training step of ResNet-50 (`ex_cubecl_examples::resnet`: burn-nn convolutions, batch
//! norm, ReLU, pooling, linear; 1000 classes) under Burn's autodiff: forward, cross-entropy,
//! backward and burn-optim's SGD (lr 0.01, no momentum) on a fixed batch, in f32 (TF32
//! convolutions and products, as the `bench` command sets) and in bf16 (the whole model:
//! parameters, activations and gradients; the loss in f32). Both backends start from the same
//! weights (`deterministic_init`); each run is one step and returns the loss before the
//! update. PyTorch's row (`torch_rows.py`) trains the same model in bf16 through autocast.
use burn_autodiff::Autodiff;
use burn_backend::Backend;
use burn_optim::{GradientsParams, Optimizer, SgdConfig};
use burn_tensor::{FloatDType, Tensor};
use ex_cubecl_examples::resnet::{RESNET50_FORWARD_FLOPS_224, ResNet, cast_module, deterministic_init, synthetic_batch};

use crate::{Case, DynCase, Precision, RunFn, Size, Work};

/// One SGD step of ResNet-50 on `batch` images of `side`x`side` in `dtype`.
pub struct ResNetStep {
    dtype: FloatDType,
    batch: usize,
    side: usize,
}

/// The ResNet-50 steps at `size`: batch 64 of 224x224 images (`Full`), batch 2 of 32x32
/// (`Small`), f32 and bf16.
pub fn cases(size: Size) -> Vec<Box<dyn DynCase>> {
    let (batch, side) = match size {
        Size::Full => (64, 224),
        Size::Small => (2, 32),
    };
    [FloatDType::F32, FloatDType::BF16].map(|dtype| Box::new(ResNetStep { dtype, batch, side }) as Box<dyn DynCase>).into()
}

impl Case for ResNetStep {
    fn name(&self) -> String {
        let dtype = if self.dtype == FloatDType::BF16 { "bf16" } else { "f32" };
        format!("ResNet-50 SGD step {dtype}")
    }

    fn size(&self) -> String {
        format!("batch {}, {}x{}", self.batch, self.side, self.side)
    }

    fn work(&self) -> Work {
        // Forward plus backward (the input and the weight gradients): three times the
        // forward's flops, which scale with the image's area.
        let area = (self.side * self.side) as f64 / (224.0 * 224.0);
        let precision = if self.dtype == FloatDType::BF16 { Precision::Half } else { Precision::Tf32 };
        Work::Flops(3.0 * RESNET50_FORWARD_FLOPS_224 * area * self.batch as f64, precision)
    }

    fn prepare<B: Backend>(&self, device: &B::Device) -> Option<RunFn<B>> {
        let model = deterministic_init(ResNet::<Autodiff<B>>::resnet50(1000, device), 7);
        let mut model = Some(cast_module(model, self.dtype));
        let (images, labels) = synthetic_batch::<Autodiff<B>>(self.batch, self.side, 1000, 1, self.dtype, device);
        let mut sgd = SgdConfig::new().init::<Autodiff<B>, ResNet<Autodiff<B>>>();
        Some(Box::new(move || {
            let current = model.take().expect("the model is put back after every step");
            let loss = current.loss(images.clone(), labels.clone());
            let grads = GradientsParams::from_grads(loss.backward(), &current);
            model = Some(sgd.step(0.01, current, grads));
            let loss: Tensor<B, 1> = loss.inner();
            loss
        }))
    }
}
