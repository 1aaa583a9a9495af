//! ExCubecl's main job: training runs that a Burn user would write, on
//! `Autodiff<ExCubeclBackend<R>>`.
//!
//! The `digits` binary trains an MLP and a small CNN (burn-nn layers, Adam: the fused
//! `ex_cubecl::optim::Adam` on ours, burn-optim's on burn-cubecl) on
//! the 8×8 handwritten digits that the smartcore crate ships, evaluates them on a held-out
//! test split, saves them with Burn's recorder and reloads them for inference. The training
//! code ([`train::train`]) is generic over the backend ([`train::AdamBackend`]), so the same code runs on
//! burn-cubecl for comparison (`--backend burn-cubecl`, feature `peer`).
//!
//! - [`data`]: loading, seeded shuffle and split, standardisation, batches.
//! - [`model`]: [`model::Mlp`] and [`model::Cnn`].
//! - [`train`]: the training loop, evaluation, save and load.
//! - `parallel` (feature `distributed`): `--devices N`, data-parallel training.
//! - [`resnet`]: ResNet-50 with burn-nn layers (the `bench` row and the `scale` binary).
//! - `scale` (feature `distributed`): the `scale` binary's all-reduce bandwidth and weak
//!   scaling measurements.
//! - [`export`]: `--export-data`, the split written as a record for the Elixir job.
//! - [`cli`]: the command line, the device listing and the run.
#![warn(missing_docs)]

// burn-derive's `#[derive(Module)]` names its paths `burn::...`.
extern crate burn_core as burn;

#[cfg(feature = "distributed")]
pub mod captured;
pub mod checkpoint;
pub mod cli;
pub mod data;
pub mod export;
pub mod model;
#[cfg(feature = "distributed")]
pub mod parallel;
pub mod resnet;
#[cfg(feature = "distributed")]
pub mod scale;
pub mod train;
