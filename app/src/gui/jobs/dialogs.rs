//! Native file dialogs that never block the UI. A dialog is modal for the user but not for our
//! event loop: rfd's async dialog is created on the UI thread (as macOS requires) and awaited on
//! a helper thread, and the chosen path comes back as a `Msg::Dialog` on the worker's channel,
//! with the results of background work. One dialog at a time. The message is the channel's own
//! (`M`, made from the `Answer`), so that this module need not know the message type.

use crate::gui::export::ExportKind;
use crate::gui::state::InputKind;
use crate::gui::worker::Post;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

/// What the chosen path is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    Open(InputKind),
    /// A Hugging Face model directory (config.json + *.safetensors): a folder, not a file.
    OpenModelFolder,
    OpenSession,
    Export(ExportKind),
}

/// A dialog's answer: what it was for, and the chosen path (`None`: cancelled).
pub struct Answer(pub Purpose, pub Option<PathBuf>);

pub struct Dialogs<M> {
    post: Post<M>,
    open: Option<Purpose>,
    opened_at: Option<std::time::Instant>,
}

/// A dialog that answers "cancelled" sooner than this never showed: rfd reports a missing
/// portal (and a missing zenity) as a cancel, at once.
pub const FAILED_WITHIN: std::time::Duration = std::time::Duration::from_millis(700);

impl<M: From<Answer> + Send + 'static> Dialogs<M> {
    /// Dialogs whose answers go to `post` (the worker's channel).
    pub fn new(post: Post<M>) -> Self {
        Dialogs { post, open: None, opened_at: None }
    }

    /// The purpose of the dialog now open, if any.
    pub fn open(&self) -> Option<Purpose> {
        self.open
    }

    /// Shows the native dialog for `purpose` (`name`: the suggested file name of an export).
    pub fn show(&mut self, purpose: Purpose, name: &str, repaint: Option<egui::Context>) {
        let d = rfd::AsyncFileDialog::new();
        let fut: std::pin::Pin<Box<dyn Future<Output = Option<rfd::FileHandle>> + Send>> = match purpose {
            Purpose::Open(kind) => {
                let d = d.set_title(format!("Open {}", kind.label()));
                match kind {
                    InputKind::Model => Box::pin(d.add_filter("GGUF model", &["gguf"]).pick_file()),
                    InputKind::Adapter => Box::pin(d.pick_folder()),
                    InputKind::Text => Box::pin(d.pick_file()),
                }
            }
            Purpose::OpenModelFolder => Box::pin(d.set_title("Open a Hugging Face model folder (config.json + *.safetensors)").pick_folder()),
            Purpose::OpenSession => Box::pin(d.set_title("Open session").add_filter("session", &["json"]).pick_file()),
            Purpose::Export(kind) => Box::pin(d.set_file_name(name).add_filter(kind.ext(), &[kind.ext()]).save_file()),
        };
        self.start(purpose, move || block_on(fut).map(|f| f.path().to_path_buf()), repaint);
    }

    /// Runs `pick` (a dialog, or a stand-in in tests) on its own thread; its answer arrives as
    /// `M::from(Answer)`. Ignored while another dialog is open.
    pub fn start(&mut self, purpose: Purpose, pick: impl FnOnce() -> Option<PathBuf> + Send + 'static, repaint: Option<egui::Context>) {
        if self.open.is_some() {
            return;
        }
        let post = self.post.clone();
        let spawned = std::thread::Builder::new().name("focus-lens dialog".into()).spawn(move || {
            post.send(M::from(Answer(purpose, pick())));
            if let Some(c) = repaint {
                c.request_repaint();
            }
        });
        if spawned.is_ok() {
            self.open = Some(purpose);
            self.opened_at = Some(std::time::Instant::now());
        }
    }

    /// The open dialog's answer has arrived: another may open. Returns how long it was open.
    pub fn closed(&mut self) -> std::time::Duration {
        self.open = None;
        self.opened_at.take().map(|t| t.elapsed()).unwrap_or_default()
    }
}

/// Drives a future to completion on this thread (the dialog futures need no runtime).
fn block_on<F: Future>(fut: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = std::pin::pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
