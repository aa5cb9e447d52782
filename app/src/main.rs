//! focus-lens: the Focus Lens desktop app and command line.

// Counts the allocations of untrusted computations (chat templates) against their budget.
#[global_allocator]
static ALLOC: focus_core::io::budget::BudgetAlloc = focus_core::io::budget::BudgetAlloc;

fn main() {
    // A chat template rendered in a child process of the GUI or CLI (`chat_process`): before
    // anything else, so the child starts nothing it does not need.
    if std::env::args_os().nth(1).is_some_and(|a| a == focus_core::generate::chat_process::RENDER_ARG) {
        std::process::exit(focus_core::generate::chat_process::serve_render());
    }
    if let Err(e) = focus_lens::cli::run() {
        // The reader of stdout has gone (`| head`): nothing more to say to anyone.
        if focus_lens::cli::out::is_closed_pipe(&e) {
            std::process::exit(0);
        }
        // One clear line and a non-zero exit; the chain of causes joined with ": ".
        let msg = format!("{e:#}");
        eprintln!("error: {}", msg.lines().next().unwrap_or("unknown error"));
        std::process::exit(1);
    }
}
