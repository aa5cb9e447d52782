//! focus-lens: the Focus Lens command line (the desktop GUI comes in a later release).

mod cli;

fn main() {
    if let Err(e) = cli::run() {
        // One clear line and a non-zero exit; the chain of causes joined with ": ".
        let msg = format!("{e:#}");
        eprintln!("error: {}", msg.lines().next().unwrap_or("unknown error"));
        std::process::exit(1);
    }
}
