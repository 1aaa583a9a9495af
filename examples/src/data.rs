//! The 8×8 handwritten digits set that the smartcore crate ships (1797 images, 10 classes,
//! pixel values 0..=16; compiled into the binary, so nothing is downloaded): a seeded shuffle
//! and split into training and test sets, per-pixel standardisation with the training set's
//! statistics, and batches as Burn tensors.
use burn_tensor::backend::Backend;
use burn_tensor::{Int, Tensor, TensorData};

/// Pixels per image (8×8).
pub const PIXELS: usize = 64;
/// Image side.
pub const SIDE: usize = 8;
/// Number of classes (the digits 0 to 9).
pub const CLASSES: usize = 10;

/// A set of images and their labels.
#[derive(Clone, Debug, PartialEq)]
pub struct Digits {
    /// `len() * PIXELS` values, one image after another, row by row.
    pub images: Vec<f32>,
    /// One label in `0..CLASSES` per image.
    pub labels: Vec<i64>,
}

impl Digits {
    /// The whole data set as smartcore ships it, pixel values 0..=16.
    pub fn load() -> Self {
        let set = smartcore::dataset::digits::load_dataset();
        assert_eq!(set.num_features, PIXELS, "ex_cubecl digits: expected {PIXELS} pixels per image");
        assert_eq!(set.data.len(), set.num_samples * PIXELS, "ex_cubecl digits: truncated image data");
        let labels = set
            .target
            .iter()
            .map(|&y| {
                assert!(y >= 0.0 && y < CLASSES as f32 && y.fract() == 0.0, "ex_cubecl digits: bad label {y}");
                y as i64
            })
            .collect();
        Self { images: set.data, labels }
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there is no image.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// The images at `indices`, in that order.
    pub fn select(&self, indices: &[usize]) -> Self {
        let mut images = Vec::with_capacity(indices.len() * PIXELS);
        for &i in indices {
            images.extend_from_slice(&self.images[i * PIXELS..(i + 1) * PIXELS]);
        }
        Self { images, labels: indices.iter().map(|&i| self.labels[i]).collect() }
    }

    /// The images at `indices` as a `[n, PIXELS]` float tensor and their labels as an int tensor.
    pub fn batch<B: Backend>(&self, indices: &[usize], device: &B::Device) -> (Tensor<B, 2>, Tensor<B, 1, Int>) {
        let part = self.select(indices);
        let n = part.len();
        let images = Tensor::from_data(TensorData::new(part.images, [n, PIXELS]), device);
        let labels = Tensor::from_data(TensorData::new(part.labels, [n]), device);
        (images, labels)
    }
}

/// A training set and a held-out test set.
#[derive(Clone, Debug)]
pub struct Split {
    /// Images the model learns from.
    pub train: Digits,
    /// Held-out images, only evaluated.
    pub test: Digits,
    /// Per-pixel mean of the training images before standardisation.
    pub mean: Vec<f32>,
    /// Per-pixel standard deviation of the training images before standardisation (1 for
    /// pixels that never vary).
    pub std: Vec<f32>,
}

impl Split {
    /// Shuffles `data` with `seed`, holds out `test_fraction` of it as the test set and
    /// standardises every pixel with the training set's mean and standard deviation.
    pub fn new(data: &Digits, test_fraction: f64, seed: u64) -> Self {
        assert!(
            (0.0..1.0).contains(&test_fraction),
            "ex_cubecl digits: test fraction must be in [0, 1), got {test_fraction}"
        );
        let mut order: Vec<usize> = (0..data.len()).collect();
        Rng::new(seed).shuffle(&mut order);
        let n_test = (data.len() as f64 * test_fraction).round() as usize;
        let (test, train) = order.split_at(n_test);
        let (mut train, mut test) = (data.select(train), data.select(test));
        let (mean, std) = pixel_statistics(&train);
        for set in [&mut train, &mut test] {
            for image in set.images.chunks_mut(PIXELS) {
                for ((x, m), s) in image.iter_mut().zip(&mean).zip(&std) {
                    *x = (*x - m) / s;
                }
            }
        }
        Self { train, test, mean, std }
    }
}

/// Per-pixel mean and standard deviation; pixels that never vary (the corners are always 0)
/// get a deviation of 1 so that they stay 0 after standardisation.
fn pixel_statistics(data: &Digits) -> (Vec<f32>, Vec<f32>) {
    let n = data.len().max(1) as f64;
    let mut sum = [0f64; PIXELS];
    let mut sum_sq = [0f64; PIXELS];
    for image in data.images.chunks(PIXELS) {
        for (p, &x) in image.iter().enumerate() {
            sum[p] += x as f64;
            sum_sq[p] += (x as f64) * (x as f64);
        }
    }
    let mean: Vec<f32> = sum.iter().map(|s| (s / n) as f32).collect();
    let std = (0..PIXELS)
        .map(|p| {
            let var = (sum_sq[p] / n - (sum[p] / n).powi(2)).max(0.0);
            if var > 1e-6 { var.sqrt() as f32 } else { 1.0 }
        })
        .collect();
    (mean, std)
}

/// The order of one epoch: `0..n` shuffled with `seed`, cut into batches of `batch_size`
/// (the last one shorter when `batch_size` doesn't divide `n`).
pub fn epoch_batches(n: usize, batch_size: usize, seed: u64) -> Vec<Vec<usize>> {
    assert!(batch_size > 0, "ex_cubecl digits: batch size must be at least 1");
    let mut order: Vec<usize> = (0..n).collect();
    Rng::new(seed).shuffle(&mut order);
    order.chunks(batch_size).map(<[usize]>::to_vec).collect()
}

/// SplitMix64: a small seeded generator, enough to shuffle reproducibly.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Fisher-Yates.
    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = (self.next() % (i as u64 + 1)) as usize;
            items.swap(i, j);
        }
    }
}
