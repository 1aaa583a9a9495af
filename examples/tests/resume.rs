//! Exact resume: the digits MLP trained 2 epochs in one go, and trained 1 epoch, stopped with
//! its checkpoint written, then resumed into a freshly initialised model and optimizer for the
//! second: the same second epoch (loss and accuracies) and the same parameters, bit for bit.
//! Then what a checkpoint refuses: another configuration, a finished run, a missing one.
use std::path::PathBuf;
use std::process::Command;

use burn_core::module::AutodiffModule;
use burn_tensor::backend::Backend;
use ex_cubecl::ExWgpuAutodiff;
use ex_cubecl_examples::checkpoint::Checkpointing;
use ex_cubecl_examples::data::{Digits, Split};
use ex_cubecl_examples::model::{Classifier, Mlp};
use ex_cubecl_examples::train::{EpochStats, TrainConfig, TrainError, save, train};

type B = ExWgpuAutodiff;

fn config(lr: f64, checkpoint: Option<Checkpointing>) -> TrainConfig {
    TrainConfig { epochs: 2, batch_size: 64, lr, seed: 11, progress: false, checkpoint }
}

/// An epoch's numbers, without its times.
fn numbers(e: &EpochStats) -> (usize, u64, u64, u64) {
    (e.epoch, e.loss.to_bits(), e.train_accuracy.to_bits(), e.test_accuracy.to_bits())
}

/// The model's parameters as its saved record holds them: names and bytes.
fn parameters(model: Mlp<B>, path: &PathBuf) -> Vec<(String, Vec<u8>)> {
    let saved = save(model.valid(), path).expect("save");
    let record = ex_cubecl_record::read_file(&saved).expect("read the record");
    let _ = std::fs::remove_file(&saved);
    record.params.into_iter().map(|(name, data)| (name, data.as_bytes().to_vec())).collect()
}

#[test]
fn a_resumed_run_ends_bit_for_bit_where_the_uninterrupted_one_ends() {
    let device = Default::default();
    let split = Split::new(&Digits::load(), 0.2, 11);
    let dir = std::env::temp_dir().join(format!("ex_cubecl_resume_test_{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let ck = Checkpointing { dir: dir.clone(), name: "mlp".into(), resume: false, stop_after: Some(1) };

    B::seed(&device, 11);
    let mut whole = Vec::new();
    let uninterrupted = train(Mlp::<B>::init(&device), &split, &config(3e-3, None), &device, |e| whole.push(numbers(e))).expect("training");
    assert_eq!(whole.len(), 2);

    B::seed(&device, 11);
    let mut first = Vec::new();
    train(Mlp::<B>::init(&device), &split, &config(3e-3, Some(ck.clone())), &device, |e| first.push(numbers(e))).expect("training");
    assert_eq!(first, whole[..1], "the stopped run's first epoch is the uninterrupted run's");
    assert!(dir.join("mlp.checkpoint").exists() && dir.join("mlp-epoch1.optim.mpk").exists());

    // A fresh model of other initial weights and a fresh Adam: the checkpoint replaces them.
    B::seed(&device, 99);
    let mut second = Vec::new();
    let resume = Checkpointing { resume: true, stop_after: None, ..ck.clone() };
    let resumed = train(Mlp::<B>::init(&device), &split, &config(3e-3, Some(resume.clone())), &device, |e| second.push(numbers(e))).expect("resuming");
    assert_eq!(second, whole[1..], "the resumed epoch is the uninterrupted run's second, bit for bit");
    let (a, b) = (parameters(uninterrupted, &dir.join("a")), parameters(resumed, &dir.join("b")));
    assert_eq!(a.len(), 6, "the MLP's three weights and biases");
    assert_eq!(a, b, "the resumed run ends with the uninterrupted run's parameters, bit for bit");
    assert!(!dir.join("mlp-epoch1.model.mpk").exists(), "the previous epoch's files are removed");

    // The run is finished: nothing to resume.
    let done = train(Mlp::<B>::init(&device), &split, &config(3e-3, Some(resume.clone())), &device, |_| {});
    assert!(matches!(&done, Err(TrainError::Checkpoint(m)) if m.contains("finished (epoch 2 of 2)")), "{:?}", done.err());
    // Another configuration: refused, naming both.
    let other = train(Mlp::<B>::init(&device), &split, &config(1e-3, Some(resume.clone())), &device, |_| {});
    assert!(matches!(&other, Err(TrainError::Checkpoint(m)) if m.contains("another configuration") && m.contains("lr 0.003") && m.contains("lr 0.001")), "{:?}", other.err());
    let _ = std::fs::remove_dir_all(&dir);
    // No checkpoint at all.
    let none = train(Mlp::<B>::init(&device), &split, &config(3e-3, Some(resume)), &device, |_| {});
    assert!(matches!(&none, Err(TrainError::Checkpoint(m)) if m.contains("no checkpoint to resume from")), "{:?}", none.err());
}

#[test]
fn the_command_wants_a_folder_for_resume_and_stop_after() {
    for args in [&["--resume"][..], &["--stop-after", "1"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_digits")).args(args).env("XDG_RUNTIME_DIR", "/tmp").output().expect("run digits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--resume and --stop-after need --checkpoint DIR"), "{stderr}");
    }
}
