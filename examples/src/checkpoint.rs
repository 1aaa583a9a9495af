//! Checkpoints of a training run, and resuming from one exactly (`digits --checkpoint DIR`,
//! `--resume`, `--stop-after K`).
//!
//! After each epoch the job writes, in the checkpoint folder, the model's record and Adam's
//! (its moments and step count) for that epoch, `<name>-epoch<k>.model.mpk` and
//! `<name>-epoch<k>.optim.mpk`, then `<name>.checkpoint`, a few lines naming the epoch, those
//! files and the run's configuration. Every file is replaced atomically
//! (`ex_cubecl_record::replace_file`) and `<name>.checkpoint` is written last, so a crash at
//! any moment leaves a checkpoint whose files all belong to one epoch; the previous epoch's
//! files are removed once the new checkpoint names the new ones.
//!
//! Everything else a step depends on follows from the configuration and the epoch: the batch
//! order (shuffled with a seed per epoch), the learning rate (a cosine of the step count over
//! the whole run) and the data split (seeded); the models have no dropout and draw no random
//! numbers after their initialisation. So a run resumed from epoch `k`'s checkpoint ends bit
//! for bit where the uninterrupted run ends (`tests/resume.rs`).
use std::path::{Path, PathBuf};

use burn::module::AutodiffModule;
use burn::record::Recorder as BurnRecorder;
use burn_optim::Optimizer;

use crate::train::{AdamBackend, Recorder, TrainConfig};

/// Where and how a run keeps checkpoints.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpointing {
    /// The folder of the checkpoints.
    pub dir: PathBuf,
    /// Names the run's files (the model's name: `mlp`, `cnn`).
    pub name: String,
    /// Start from the folder's checkpoint instead of from epoch 1.
    pub resume: bool,
    /// Stop after this epoch (its checkpoint written), as an interrupted run would.
    pub stop_after: Option<usize>,
}

impl Checkpointing {
    fn pointer(&self) -> PathBuf {
        self.dir.join(format!("{}.checkpoint", self.name))
    }

    fn files(&self, epoch: usize) -> (PathBuf, PathBuf) {
        let stem = format!("{}-epoch{epoch}", self.name);
        (self.dir.join(format!("{stem}.model.mpk")), self.dir.join(format!("{stem}.optim.mpk")))
    }
}

/// The configuration a checkpoint must share with the run that resumes it.
fn config_lines(config: &TrainConfig) -> String {
    format!("epochs {}\nbatch {}\nlr {}\nseed {}\n", config.epochs, config.batch_size, config.lr, config.seed)
}

/// Writes the checkpoint of `epoch` (see the [module docs](self)).
pub fn save<B, M>(ck: &Checkpointing, epoch: usize, config: &TrainConfig, model: &M, optimizer: &B::Adam<M>) -> Result<(), String>
where
    B: AdamBackend,
    M: AutodiffModule<B>,
{
    std::fs::create_dir_all(&ck.dir).map_err(|e| format!("{}: {e}", ck.dir.display()))?;
    let (model_file, optim_file) = ck.files(epoch);
    ex_cubecl_record::replace_file(&model_file, |tmp| BurnRecorder::<B>::record(&Recorder::new(), model.clone().into_record(), tmp.to_path_buf()))?;
    ex_cubecl_record::replace_file(&optim_file, |tmp| BurnRecorder::<B>::record(&Recorder::new(), optimizer.to_record(), tmp.to_path_buf()))?;
    let pointer = format!(
        "ex_cubecl digits checkpoint\nepoch {epoch}\n{}model {}\noptim {}\n",
        config_lines(config),
        file_name(&model_file),
        file_name(&optim_file)
    );
    ex_cubecl_record::replace_file(&ck.pointer(), |tmp| std::fs::write(tmp, pointer))?;
    if epoch > 1 {
        let (old_model, old_optim) = ck.files(epoch - 1);
        let _ = (std::fs::remove_file(old_model), std::fs::remove_file(old_optim));
    }
    Ok(())
}

/// The checkpoint's epoch, with `model` and `optimizer` holding its state. An error when there
/// is none, when it was written by a run of another configuration, or when its files don't load.
pub fn load<B, M>(ck: &Checkpointing, config: &TrainConfig, model: M, optimizer: B::Adam<M>, device: &B::Device) -> Result<(usize, M, B::Adam<M>), String>
where
    B: AdamBackend,
    M: AutodiffModule<B>,
{
    let pointer = ck.pointer();
    let text = std::fs::read_to_string(&pointer).map_err(|e| format!("{}: no checkpoint to resume from ({e})", pointer.display()))?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key).and_then(|v| v.strip_prefix(' ')))
            .ok_or_else(|| format!("{}: not a checkpoint (no `{key}` line)", pointer.display()))
    };
    let epoch: usize = field("epoch")?.parse().map_err(|_| format!("{}: a bad epoch line", pointer.display()))?;
    let written: String = ["epochs", "batch", "lr", "seed"].iter().map(|k| field(k).map(|v| format!("{k} {v}\n"))).collect::<Result<_, _>>()?;
    if written != config_lines(config) {
        return Err(format!(
            "{}: written by a run of another configuration ({}), this run has {}; resume with the same --epochs, --batch, --lr and --seed",
            pointer.display(),
            written.trim().replace('\n', ", "),
            config_lines(config).trim().replace('\n', ", ")
        ));
    }
    if epoch >= config.epochs {
        return Err(format!("{}: the run it belongs to finished (epoch {epoch} of {})", pointer.display(), config.epochs));
    }
    let model_file = ck.dir.join(field("model")?);
    let optim_file = ck.dir.join(field("optim")?);
    let record = BurnRecorder::<B>::load(&Recorder::new(), model_file.clone(), device).map_err(|e| format!("{}: {e}", model_file.display()))?;
    let state = BurnRecorder::<B>::load(&Recorder::new(), optim_file.clone(), device).map_err(|e| format!("{}: {e}", optim_file.display()))?;
    Ok((epoch, model.load_record(record), optimizer.load_record(state)))
}

fn file_name(path: &Path) -> String {
    path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}
