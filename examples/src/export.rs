//! `digits --export-data PATH`: the seeded split that the job trains on, written with Burn's
//! recorder ([`crate::train::Recorder`]) as a record of named tensors, so that the Elixir job
//! reads the very same images through `ExBurn.Record.load` (nothing downloaded, the same split,
//! the same standardisation):
//!
//! | name           | dtype | shape       | what                                            |
//! |----------------|-------|-------------|-------------------------------------------------|
//! | `train.images` | f32   | `[n, 64]`   | training images, standardised as the job feeds them |
//! | `train.labels` | s32   | `[n]`       | their digits (ints are recorded as i32)         |
//! | `test.images`  | f32   | `[m, 64]`   | held-out images, standardised the same way      |
//! | `test.labels`  | s32   | `[m]`       | their digits                                    |
//! | `mean`         | f32   | `[64]`      | per-pixel mean of the raw training images       |
//! | `std`          | f32   | `[64]`      | per-pixel deviation (1 where a pixel never varies) |
use std::path::{Path, PathBuf};

use burn::module::{Module, Param, ParamId};
use burn::record::RecorderError;
use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor, TensorData};

use crate::data::{Digits, PIXELS, Split};
use crate::train::save;

/// The exported split, as a module so that Burn's recorder writes it.
#[derive(Module, Debug)]
pub struct DigitsData<B: Backend> {
    /// The training set.
    pub train: DigitsPart<B>,
    /// The test set.
    pub test: DigitsPart<B>,
    /// Per-pixel mean of the raw training images.
    pub mean: Param<Tensor<B, 1>>,
    /// Per-pixel standard deviation of the raw training images.
    pub std: Param<Tensor<B, 1>>,
}

/// One set of images and labels.
#[derive(Module, Debug)]
pub struct DigitsPart<B: Backend> {
    /// `[n, PIXELS]` standardised images.
    pub images: Param<Tensor<B, 2>>,
    /// `[n]` labels.
    pub labels: Param<Tensor<B, 1, Int>>,
}

impl<B: Backend> DigitsPart<B> {
    fn new(set: &Digits, device: &B::Device) -> Self {
        let n = set.len();
        Self {
            images: Param::from_data(TensorData::new(set.images.clone(), [n, PIXELS]), device),
            labels: Param::initialized(
                ParamId::new(),
                Tensor::from_data(TensorData::new(set.labels.clone(), [n]), device),
            ),
        }
    }
}

impl<B: Backend> DigitsData<B> {
    /// `split` as tensors on `device`.
    pub fn new(split: &Split, device: &B::Device) -> Self {
        Self {
            train: DigitsPart::new(&split.train, device),
            test: DigitsPart::new(&split.test, device),
            mean: Param::from_data(TensorData::new(split.mean.clone(), [PIXELS]), device),
            std: Param::from_data(TensorData::new(split.std.clone(), [PIXELS]), device),
        }
    }
}

/// Writes `split` to `path` (the recorder sets the `.mpk` extension) and returns the file's
/// path.
pub fn export_data<B: Backend>(split: &Split, path: &Path, device: &B::Device) -> Result<PathBuf, RecorderError> {
    save(DigitsData::<B>::new(split, device), path)
}
