//! Background work: every slow step (loading, analysis, attention rows, benchmarks) runs on its
//! own thread with a cancel flag and a progress counter, and sends one message back when done.
//! The UI thread only polls (`Worker::poll`) and never waits, so frames stay short while the
//! model runs. At most one task per kind: starting a kind cancels the one before it. A task may
//! also send interim results (`Interim`), e.g. a quick preview before the full analysis. The
//! same channel carries messages posted from outside any task (`Post`: file dialogs, PNG
//! screenshots), so that everything that comes back arrives in one place.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskKind {
    LoadModel,
    LoadAdapter,
    LoadText,
    Analyze,
    Attention,
    Mask,
    Bench,
    Compare,
    AttnGrid,
    HeadPattern,
    Baseline,
    Generate,
    Train,
    Index,
}

impl TaskKind {
    pub fn label(self) -> &'static str {
        match self {
            TaskKind::LoadModel => "loading the model",
            TaskKind::LoadAdapter => "loading the adapter",
            TaskKind::LoadText => "reading the text",
            TaskKind::Analyze => "analysing",
            TaskKind::Attention => "computing attention weights",
            TaskKind::Mask => "building the mask image",
            TaskKind::Bench => "benchmarking",
            TaskKind::Compare => "comparing runs",
            TaskKind::AttnGrid => "attention of every layer and head",
            TaskKind::HeadPattern => "a head's attention pattern",
            TaskKind::Baseline => "analysing with the untrained adapter",
            TaskKind::Generate => "generating",
            TaskKind::Train => "training",
            TaskKind::Index => "indexing a corpus",
        }
    }
}

/// Shared with the task: cancellation and progress (`done` of `total`, 0 total = unknown).
#[derive(Default)]
pub struct Handle {
    pub cancel: AtomicBool,
    pub progress: Mutex<(usize, usize, String)>,
}

impl Handle {
    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }
    pub fn set_progress(&self, done: usize, total: usize, what: impl Into<String>) {
        *self.progress.lock().unwrap_or_else(|e| e.into_inner()) = (done, total, what.into());
    }
}

struct Running {
    id: u64,
    handle: Arc<Handle>,
    started: Instant,
}

/// What travels on the channel: a task's message, tagged with its kind and id (so that results of
/// cancelled or superseded tasks are dropped), or a posted one.
enum Envelope<T> {
    Task {
        kind: TaskKind,
        id: u64,
        /// `Err` when the task panicked.
        value: Result<T, String>,
        /// False for an interim result: the task is still running.
        last: bool,
    },
    Posted(T),
}

/// A task that panicked: its kind and the panic's message.
#[derive(Debug, Clone)]
pub struct Panicked {
    pub kind: TaskKind,
    pub message: String,
}

/// Sends interim results of a running task to the UI (dropped when the task is superseded).
pub struct Interim<T> {
    kind: TaskKind,
    id: u64,
    tx: Sender<Envelope<T>>,
    repaint: Option<egui::Context>,
}

impl<T> Interim<T> {
    pub fn send(&self, value: T) {
        let _ = self.tx.send(Envelope::Task { kind: self.kind, id: self.id, value: Ok(value), last: false });
        if let Some(c) = &self.repaint {
            c.request_repaint();
        }
    }
}

/// Posts messages to the worker's channel from anywhere (a dialog's thread, a screenshot
/// callback); `Worker::poll` returns them with the tasks' results.
pub struct Post<T> {
    tx: Sender<Envelope<T>>,
}

impl<T> Clone for Post<T> {
    fn clone(&self) -> Self {
        Post { tx: self.tx.clone() }
    }
}

impl<T> Post<T> {
    pub fn send(&self, value: T) {
        let _ = self.tx.send(Envelope::Posted(value));
    }
}

pub struct Worker<T: Send + 'static> {
    tx: Sender<Envelope<T>>,
    rx: Receiver<Envelope<T>>,
    running: HashMap<TaskKind, Running>,
    next_id: u64,
    repaint: Option<egui::Context>,
}

impl<T: Send + 'static> Default for Worker<T> {
    fn default() -> Self {
        let (tx, rx) = channel();
        Worker { tx, rx, running: HashMap::new(), next_id: 1, repaint: None }
    }
}

impl<T: Send + 'static> Worker<T> {
    /// A sender for messages from outside any task.
    pub fn poster(&self) -> Post<T> {
        Post { tx: self.tx.clone() }
    }

    /// The context to wake when a task ends or reports progress.
    pub fn set_context(&mut self, ctx: &egui::Context) {
        if self.repaint.is_none() {
            self.repaint = Some(ctx.clone());
        }
    }

    /// Starts `f` on a new thread, cancelling the running task of the same kind. Returns its id.
    pub fn spawn(&mut self, kind: TaskKind, f: impl FnOnce(&Handle) -> T + Send + 'static) -> u64 {
        self.spawn_streaming(kind, move |h, _| f(h))
    }

    /// Like `spawn`, but the task may send interim results before its last one.
    pub fn spawn_streaming(&mut self, kind: TaskKind, f: impl FnOnce(&Handle, &Interim<T>) -> T + Send + 'static) -> u64 {
        self.cancel(kind);
        let id = self.next_id;
        self.next_id += 1;
        let handle = Arc::new(Handle::default());
        let (h, tx, ctx) = (handle.clone(), self.tx.clone(), self.repaint.clone());
        let interim = Interim { kind, id, tx: tx.clone(), repaint: ctx.clone() };
        let spawned = std::thread::Builder::new().name(format!("focus-lens {kind:?}")).spawn(move || {
            // A panic in a task must not take the app down: it arrives as an error message.
            let value = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&h, &interim))).map_err(|p| {
                p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "internal error".into())
            });
            let _ = tx.send(Envelope::Task { kind, id, value, last: true });
            if let Some(c) = ctx {
                c.request_repaint();
            }
        });
        if spawned.is_ok() {
            self.running.insert(kind, Running { id, handle, started: Instant::now() });
        }
        id
    }

    /// Asks the task of this kind to stop; its result, if it still arrives, is dropped.
    pub fn cancel(&mut self, kind: TaskKind) {
        if let Some(r) = self.running.remove(&kind) {
            r.handle.cancel.store(true, Ordering::Relaxed);
        }
    }

    pub fn cancel_all(&mut self) {
        let kinds: Vec<TaskKind> = self.running.keys().cloned().collect();
        for k in kinds {
            self.cancel(k);
        }
    }

    /// Messages of tasks that are still current (not cancelled or superseded), interim ones
    /// included, and posted messages, in the order they arrived; a task counts as running until
    /// its last result. A task that panicked arrives as `Err`.
    pub fn poll(&mut self) -> Vec<Result<T, Panicked>> {
        let mut out = Vec::new();
        while let Ok(e) = self.rx.try_recv() {
            match e {
                Envelope::Posted(v) => out.push(Ok(v)),
                Envelope::Task { kind, id, value, last } => {
                    if self.running.get(&kind).is_some_and(|r| r.id == id) {
                        if last {
                            self.running.remove(&kind);
                        }
                        out.push(value.map_err(|message| Panicked { kind, message }));
                    }
                }
            }
        }
        out
    }

    pub fn is_running(&self, kind: TaskKind) -> bool {
        self.running.contains_key(&kind)
    }

    pub fn busy(&self) -> bool {
        !self.running.is_empty()
    }

    /// (kind, done, total, what, seconds) of each running task, in a stable order.
    pub fn progress(&self) -> Vec<(TaskKind, usize, usize, String, f64)> {
        let mut v: Vec<_> = self
            .running
            .iter()
            .map(|(k, r)| {
                let (d, t, w) = r.handle.progress.lock().map(|p| p.clone()).unwrap_or_default();
                (*k, d, t, w, r.started.elapsed().as_secs_f64())
            })
            .collect();
        v.sort_by_key(|x| format!("{:?}", x.0));
        v
    }
}
