//! focus-lens: the Focus Lens desktop app and command line.

fn main() {
    if let Err(e) = focus_lens::cli::run() {
        // One clear line and a non-zero exit; the chain of causes joined with ": ".
        let msg = format!("{e:#}");
        eprintln!("error: {}", msg.lines().next().unwrap_or("unknown error"));
        std::process::exit(1);
    }
}
