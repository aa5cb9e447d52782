//! focus-lens: the Focus Lens desktop app and command line.

// Counts the allocations of untrusted computations (chat templates) against their budget.
#[global_allocator]
static ALLOC: focus_core::io::budget::BudgetAlloc = focus_core::io::budget::BudgetAlloc;

fn main() {
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
