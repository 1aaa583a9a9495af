//! `--devices N`: data-parallel training on `N` devices of one process (feature
//! `distributed`). Each device holds a replica of the model and its own Adam; each step
//! splits the batch into `N` shares, every replica computes the gradients of its share's
//! loss (scaled by the share's part of the batch), `ex_cubecl::distributed::
//! all_reduce_gradients` sums them (NCCL on CUDA, the host-staged all-reduce on wgpu), and
//! every replica takes the same step: the same updates as one device with the whole batch,
//! up to the order of f32 sums.
use std::time::Instant;

use burn::module::AutodiffModule;
use burn_backend::distributed::DistributedBackend;
use burn_nn::loss::CrossEntropyLossConfig;
use burn_optim::{GradientsParams, Optimizer};
use burn_tensor::Tensor;
use ex_cubecl::distributed::{ReduceOperation, all_reduce_gradients};

use crate::data::{Split, epoch_batches};
use crate::model::Classifier;
use crate::train::{AdamBackend, EpochStats, TrainConfig, TrainError, accuracy, cosine_lr, predict};

/// [`crate::train::train`] on `devices` (at least one); returns replica 0 (on `devices[0]`;
/// every replica holds the same weights). A last batch of fewer images than devices is
/// skipped.
pub fn train_data_parallel<B, M>(
    model: M,
    split: &Split,
    config: &TrainConfig,
    devices: &[B::Device],
    mut on_epoch: impl FnMut(&EpochStats),
) -> Result<M, TrainError>
where
    B: AdamBackend,
    B::InnerBackend: DistributedBackend,
    M: AutodiffModule<B> + Classifier<B>,
    M::InnerModule: Classifier<B::InnerBackend>,
{
    let n = devices.len();
    let mut replicas: Vec<M> = devices.iter().map(|d| model.clone().fork(d)).collect();
    drop(model);
    let mut optimizers: Vec<_> = devices.iter().map(|_| B::adam::<M>()).collect();
    let losses: Vec<_> = devices.iter().map(|d| CrossEntropyLossConfig::new().init(d)).collect();
    let steps_per_epoch = split.train.len().div_ceil(config.batch_size);
    let total_steps = config.epochs * steps_per_epoch;
    for epoch in 1..=config.epochs {
        let batches = epoch_batches(split.train.len(), config.batch_size, config.seed.wrapping_add(epoch as u64));
        let start = Instant::now();
        let (mut loss_sum, mut correct, mut seen) = (0.0f64, 0usize, 0usize);
        for (step, indices) in batches.iter().enumerate() {
            if indices.len() < n {
                continue;
            }
            let mut grads = Vec::with_capacity(n);
            let mut reads = Vec::with_capacity(n);
            for (k, (replica, device)) in replicas.iter().zip(devices).enumerate() {
                let share = &indices[k * indices.len() / n..(k + 1) * indices.len() / n];
                let (images, labels) = split.train.batch::<B>(share, device);
                let logits = replica.forward(images);
                // The share's mean loss weighted by its part of the batch: the sum over the
                // replicas is the batch's mean loss, whatever the shares' sizes.
                let weight = share.len() as f64 / indices.len() as f64;
                let loss = losses[k].forward(logits.clone(), labels.clone()).mul_scalar(weight);
                let hits = logits.inner().argmax(1).squeeze_dim::<1>(1).equal(labels.inner()).int().sum().float();
                reads.push(Tensor::cat(vec![loss.clone().inner(), hits], 0));
                grads.push(GradientsParams::from_grads(loss.backward(), replica));
            }
            all_reduce_gradients(&replicas[0], &mut grads, ReduceOperation::Sum);
            let lr = cosine_lr(config.lr, (epoch - 1) * steps_per_epoch + step, total_steps);
            replicas = replicas
                .into_iter()
                .zip(grads)
                .zip(&mut optimizers)
                .map(|((replica, g), optimizer)| optimizer.step(lr, replica, g))
                .collect();
            let (mut loss, mut hits) = (0.0f32, 0.0f32);
            for read in reads {
                let read = read.into_data().convert::<f32>().to_vec::<f32>().expect("ex_cubecl digits: loss values");
                (loss, hits) = (loss + read[0], hits + read[1]);
            }
            if !loss.is_finite() {
                return Err(TrainError::NonFiniteLoss { epoch, step: step + 1, steps: batches.len(), loss });
            }
            loss_sum += loss as f64;
            correct += hits as usize;
            seen += 1;
        }
        let train_time = start.elapsed();
        let start = Instant::now();
        let test_accuracy = accuracy(&predict(&replicas[0].valid(), &split.test, &devices[0]), &split.test.labels);
        on_epoch(&EpochStats {
            epoch,
            loss: loss_sum / seen.max(1) as f64,
            train_accuracy: correct as f64 / split.train.len().max(1) as f64,
            test_accuracy,
            samples_per_sec: split.train.len() as f64 / train_time.as_secs_f64(),
            train_time,
            eval_time: start.elapsed(),
        });
    }
    Ok(replicas.swap_remove(0))
}
