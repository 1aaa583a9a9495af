//! The digits example on ExWgpu (lavapipe where there is no GPU): the data, a short real
//! training run that a broken gradient would not pass, save and reload, NaN detection, and
//! the command line's answers to bad input.
use std::process::Command;

use burn_core::module::AutodiffModule;
use burn_tensor::backend::Backend;
use ex_cubecl::ExWgpuAutodiff;
use ex_cubecl_examples::cli::{self, DeviceName};
use ex_cubecl_examples::data::{CLASSES, Digits, PIXELS, Split, epoch_batches};
use ex_cubecl_examples::model::{Classifier, Mlp};
use ex_cubecl_examples::train::{TrainConfig, TrainError, accuracy, load, predict, save, train};

type B = ExWgpuAutodiff;
type Inner = <B as burn_tensor::backend::AutodiffBackend>::InnerBackend;

fn config(epochs: usize, lr: f64, seed: u64) -> TrainConfig {
    TrainConfig { epochs, batch_size: 32, lr, seed, progress: false, checkpoint: None }
}

#[test]
fn data_loads_splits_and_standardises() {
    let digits = Digits::load();
    assert_eq!(digits.len(), 1797);
    assert_eq!(digits.images.len(), 1797 * PIXELS);
    assert!(digits.images.iter().all(|&x| (0.0..=16.0).contains(&x)));
    for class in 0..CLASSES as i64 {
        assert!(digits.labels.iter().filter(|&&l| l == class).count() > 150, "class {class} is missing");
    }

    let split = Split::new(&digits, 0.2, 42);
    assert_eq!((split.train.len(), split.test.len()), (1438, 359));
    assert_eq!(Split::new(&digits, 0.2, 42).test, split.test, "the same seed gives the same split");
    assert_ne!(Split::new(&digits, 0.2, 43).test, split.test, "another seed gives another split");
    // Standardised with the training set's statistics: each pixel has mean 0 over it.
    for p in 0..PIXELS {
        let mean: f64 = split.train.images.iter().skip(p).step_by(PIXELS).map(|&x| x as f64).sum::<f64>()
            / split.train.len() as f64;
        assert!(mean.abs() < 1e-4, "pixel {p} has training mean {mean}");
    }

    let batches = epoch_batches(100, 32, 1);
    assert_eq!(batches.iter().map(Vec::len).collect::<Vec<_>>(), [32, 32, 32, 4]);
    let mut seen: Vec<usize> = batches.concat();
    seen.sort();
    assert_eq!(seen, (0..100).collect::<Vec<_>>(), "every image once per epoch");
}

/// Two epochs of the MLP on the real data reach 90% on the held-out images (a model with a
/// wrong gradient stays near 10%); the saved and reloaded model predicts exactly the same.
#[test]
fn mlp_learns_digits_and_reloads_identically() {
    let device = Default::default();
    B::seed(&device, 7);
    let split = Split::new(&Digits::load(), 0.2, 7);
    let mut accuracies = Vec::new();
    let model = train(Mlp::<B>::init(&device), &split, &config(2, 3e-3, 7), &device, |e| {
        println!("mlp epoch {}: loss {:.4}, test accuracy {:.3}", e.epoch, e.loss, e.test_accuracy);
        accuracies.push(e.test_accuracy)
    })
    .expect("training");
    assert_eq!(accuracies.len(), 2);
    let trained = model.valid();
    let predictions = predict(&trained, &split.test, &device);
    let trained_accuracy = accuracy(&predictions, &split.test.labels);
    assert!(trained_accuracy >= 0.90, "test accuracy {trained_accuracy} after 2 epochs");
    assert_eq!(trained_accuracy, accuracies[1], "the last epoch's test accuracy is the final one");

    let path = std::env::temp_dir().join(format!("ex_cubecl_digits_test_{}", std::process::id()));
    let saved = save(trained, &path).expect("save");
    let fresh = Mlp::<Inner>::init(&device);
    let fresh_accuracy = accuracy(&predict(&fresh, &split.test, &device), &split.test.labels);
    assert!(fresh_accuracy < 0.5, "an untrained model scores {fresh_accuracy}");
    let reloaded = load(fresh, &path, &device).expect("load");
    let _ = std::fs::remove_file(&saved);
    assert_eq!(predict(&reloaded, &split.test, &device), predictions, "reloaded model predicts differently");
}

/// A NaN pixel in the second batch of the first epoch stops training at epoch 1, step 2.
#[test]
fn nan_loss_stops_at_its_step() {
    let device = Default::default();
    B::seed(&device, 3);
    let mut split = Split::new(&Digits::load(), 0.2, 3);
    let cfg = config(1, 3e-3, 3);
    let batches = epoch_batches(split.train.len(), cfg.batch_size, cfg.seed + 1);
    let poisoned = batches[1][0];
    split.train.images[poisoned * PIXELS + 20] = f32::NAN;
    let result = train(Mlp::<B>::init(&device), &split, &cfg, &device, |_| panic!("no epoch should finish"));
    match result {
        Err(TrainError::NonFiniteLoss { epoch, step, steps, loss }) => {
            assert_eq!((epoch, step, steps), (1, 2, batches.len()));
            assert!(loss.is_nan(), "loss {loss}");
        }
        Ok(_) => panic!("training went on through a NaN loss"),
        Err(other) => panic!("expected the NaN loss to stop training, got: {other}"),
    }
}

fn digits(args: &[&str]) -> (i32, String, String) {
    digits_with(args, &[])
}

fn digits_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_digits"));
    command.args(args).env("XDG_RUNTIME_DIR", "/tmp");
    for (key, value) in env {
        command.env(key, value);
    }
    let out = command.output().expect("run digits");
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// An absurd learning rate blows the weights up; the command says where the loss went NaN.
#[test]
fn command_stops_on_nan_loss_with_the_step() {
    let out = std::env::temp_dir();
    let (code, stdout, stderr) =
        digits(&["--model", "mlp", "--epochs", "1", "--lr", "1e30", "--no-progress", "--out", out.to_str().unwrap()]);
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.starts_with("ex_cubecl digits: mlp: the loss is NaN at epoch 1, step "), "stderr: {stderr}");
    assert!(!stdout.contains("final test accuracy"), "stdout: {stdout}");
}

#[test]
fn command_lists_devices_for_a_bad_device() {
    let (code, _, stderr) = digits(&["--device", "tpu"]);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert!(stderr.starts_with("ex_cubecl digits: unknown device `tpu`"), "stderr: {stderr}");
    assert!(stderr.contains("devices of this build:"), "stderr: {stderr}");
    assert!(stderr.contains("wgpu  present (ex_cubecl<wgpu"), "stderr: {stderr}");
    if cfg!(feature = "cuda") {
        assert!(stderr.contains("cuda  "), "stderr: {stderr}");
    } else {
        assert!(stderr.contains("cuda  not compiled in (build with --features cuda)"), "stderr: {stderr}");
        let (code, _, stderr) = digits(&["--device=cuda"]);
        assert_eq!(code, 2, "stderr: {stderr}");
        assert!(stderr.starts_with("ex_cubecl digits: device `cuda` is not compiled into this build"), "{stderr}");
        assert!(stderr.contains("wgpu  present"), "stderr: {stderr}");
    }
}

/// With the Vulkan loader pointed at no driver, wgpu is compiled in but has no device: the
/// command says so, with the runtime's reason, instead of training on nothing.
#[cfg(target_os = "linux")]
#[test]
fn command_says_when_a_compiled_device_is_missing() {
    let (code, stdout, stderr) = digits_with(&["--model", "mlp"], &[("VK_ICD_FILENAMES", "/nonexistent/icd.json")]);
    assert_eq!(code, 2, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.starts_with("ex_cubecl digits: device `wgpu` is compiled in but not present: "), "stderr: {stderr}");
    assert!(stderr.contains("adapter"), "the runtime's reason is kept: {stderr}");
    assert!(stderr.contains("wgpu  compiled in, no device"), "stderr: {stderr}");
    assert!(stdout.is_empty(), "stdout: {stdout}");
}

#[test]
fn command_rejects_bad_options() {
    let err = |args: &[&str]| cli::parse(args.iter().map(|s| s.to_string())).expect_err("bad options").message;
    assert!(err(&["--model", "rnn"]).contains("unknown model `rnn`; choose mlp, cnn or all"));
    assert!(err(&["--epochs", "many"]).contains("--epochs takes a number, not `many`"));
    assert!(err(&["--epochs", "0"]).contains("at least 1"));
    assert!(err(&["--lr", "-1"]).contains("--lr must be a positive number"));
    assert!(err(&["--batch"]).contains("--batch needs a value"));
    assert!(err(&["--frobnicate"]).contains("unknown argument `--frobnicate`"));
    if !cfg!(feature = "peer") {
        assert!(err(&["--backend", "burn-cubecl"]).contains("needs a build with the `peer` feature"));
    }
    let opts = cli::parse(["--device=wgpu", "--model", "cnn", "--epochs", "3", "--lr", "0.01"].map(String::from))
        .expect("good options")
        .expect("not --help");
    assert_eq!(opts.device, DeviceName::Wgpu);
    assert_eq!((opts.epochs, opts.lr), (Some(3), 0.01));
    assert!(cli::parse(["--help".to_string()]).expect("help").is_none());
}

/// The same training through `Autodiff<Fusion<ExWgpu>>` (`digits --fusion`: our fusers on
/// Burn's fusion engine, burn-optim's Adam): two epochs reach 90% on the held-out images.
#[test]
fn mlp_learns_digits_with_fusion() {
    type F = ex_cubecl::ExWgpuFusionAutodiff;
    let device = Default::default();
    F::seed(&device, 7);
    let split = Split::new(&Digits::load(), 0.2, 7);
    let mut accuracies = Vec::new();
    train(Mlp::<F>::init(&device), &split, &config(2, 3e-3, 7), &device, |e| {
        println!("fused mlp epoch {}: loss {:.4}, test accuracy {:.3}", e.epoch, e.loss, e.test_accuracy);
        accuracies.push(e.test_accuracy)
    })
    .expect("fused training stays finite");
    assert!(accuracies.last().copied().unwrap_or(0.0) >= 0.9, "test accuracies {accuracies:?}");
}
