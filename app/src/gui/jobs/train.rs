//! The Train view's background job: `training::prepare` and `Prepared::train` (the CLI's run),
//! with every log row, the figures and the checkpoints found on disk sent to the view as the
//! run goes. Stop is the run's own flag (`TrainJob::stop`): the trainer saves the checkpoint of
//! its last step and the job ends normally, so the view hears of it; the worker's cancel (the
//! window closing) raises the same flag.

use super::error::JobError;
use crate::gui::state::DeviceChoice;
use crate::gui::worker::Handle;
use crate::training::{self, Figures, Outcome, Plan};
use focus_core::train::LogRow;
use focus_core::Model;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

pub struct TrainJob {
    /// The app's model; loaded again from `model_path` when `device` is another device.
    pub model: Arc<Model>,
    pub model_path: PathBuf,
    pub model_device: DeviceChoice,
    pub device: DeviceChoice,
    pub plan: Plan,
    /// Stop after the current step (a checkpoint is saved).
    pub stop: Arc<AtomicBool>,
}

/// What the run sends while it goes.
#[derive(Debug, Clone)]
pub enum TrainUpdate {
    /// Before the first step: what is being done.
    Status(String),
    /// A log row, the figures so far and the checkpoints on disk.
    Row(Box<LogRow>, Box<Figures>, Vec<Checkpoint>),
}

/// A checkpoint that opens as an adapter.
#[derive(Debug, Clone, PartialEq)]
pub struct Checkpoint {
    pub step: usize,
    pub dir: PathBuf,
    /// The finished run's adapter (OUT itself), not an intermediate checkpoint.
    pub last: bool,
}

/// How the run ended: its outcome and every checkpoint it left.
#[derive(Debug, Clone)]
pub struct TrainEnd {
    pub outcome: Outcome,
    pub checkpoints: Vec<Checkpoint>,
    pub out: PathBuf,
}

/// The checkpoints kept in `out` (`focus_core::train::checkpoint_dir`), by step, then the
/// finished adapter (OUT, when it holds one) as the last.
pub fn checkpoints(out: &Path, finished_at: Option<usize>) -> Vec<Checkpoint> {
    let mut v: Vec<Checkpoint> = std::fs::read_dir(out.join("checkpoints"))
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let step = e.file_name().to_str()?.strip_prefix("step-")?.parse().ok()?;
            let dir = e.path();
            dir.join("adapter_config.json").exists().then_some(Checkpoint { step, dir, last: false })
        })
        .collect();
    v.sort_by_key(|c| c.step);
    if let Some(step) = finished_at.filter(|_| out.join("adapter_config.json").exists()) {
        v.push(Checkpoint { step, dir: out.to_path_buf(), last: true });
    }
    v
}

impl TrainJob {
    pub fn run(self, h: &Handle, interim: &dyn Fn(TrainUpdate)) -> Result<TrainEnd, JobError> {
        let status = |s: String| {
            h.set_progress(0, 0, s.clone());
            interim(TrainUpdate::Status(s));
        };
        let model = if self.device == self.model_device {
            self.model.clone()
        } else {
            status(format!("loading the model on the {}", self.device.label()));
            Arc::new(Model::load(&self.model_path, &self.device.device()?)?)
        };
        let stopped = || h.cancelled() || self.stop.load(Ordering::Relaxed);
        let mut prepared = training::prepare(&model, &self.plan, &stopped, &mut |s| status(s)).map_err(failed)?;
        status(format!("{}; step 0: evaluating the untrained routers (the twin)", prepared.describe()));
        let out = self.plan.out.clone();
        let steps = prepared.total_steps();
        let outcome = prepared
            .train(
                &self.plan,
                &self.stop,
                |row, f| interim(TrainUpdate::Row(Box::new(row.clone()), Box::new(f.clone()), checkpoints(&out, None))),
                |f| {
                    // The window closing cancels the task: the run stops as on Stop.
                    if h.cancelled() {
                        self.stop.store(true, Ordering::Relaxed);
                    }
                    // The time left is the status bar's estimate (one for every task): a second one
                    // here, from the trainer's own pace, stood beside it with another figure.
                    h.set_progress(f.step, steps, format!("training: step {} of {steps}", f.step));
                },
            )
            .map_err(failed)?;
        let checkpoints = checkpoints(&out, outcome.finished.then_some(outcome.step));
        Ok(TrainEnd { outcome, checkpoints, out })
    }
}

/// An error of the run as the window shows it: the chain of causes in one line.
fn failed(e: anyhow::Error) -> JobError {
    match e.downcast_ref::<focus_core::Error>() {
        Some(focus_core::Error::Cancelled) => JobError::Cancelled,
        _ => JobError::Failed(format!("{e:#}")),
    }
}

/// Seconds as "1 h 05 min", "4 min 10 s" or "12 s".
pub fn duration(s: f64) -> String {
    let s = s.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, s / 60 % 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoints_are_listed_by_step_with_the_finished_adapter_last() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path();
        for step in [10, 2, 100] {
            let d = focus_core::train::checkpoint_dir(out, step);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("adapter_config.json"), "{}").unwrap();
        }
        // A folder being written (no config yet) and a stray file are not checkpoints.
        std::fs::create_dir_all(focus_core::train::checkpoint_dir(out, 5)).unwrap();
        std::fs::write(out.join("checkpoints/notes.txt"), "").unwrap();
        let steps = |v: &[Checkpoint]| v.iter().map(|c| (c.step, c.last)).collect::<Vec<_>>();
        assert_eq!(steps(&checkpoints(out, None)), [(2, false), (10, false), (100, false)]);
        // The finished adapter only once it is written.
        assert_eq!(checkpoints(out, Some(120)).len(), 3);
        std::fs::write(out.join("adapter_config.json"), "{}").unwrap();
        let all = checkpoints(out, Some(120));
        assert_eq!(steps(&all), [(2, false), (10, false), (100, false), (120, true)]);
        assert_eq!(all[3].dir, out);
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(duration(12.4), "12 s");
        assert_eq!(duration(250.0), "4 min 10 s");
        assert_eq!(duration(3900.0), "1 h 05 min");
        assert_eq!(duration(-3.0), "0 s");
    }
}
