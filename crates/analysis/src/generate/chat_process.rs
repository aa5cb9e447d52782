//! A chat template rendered in a child process, so that a hostile one can be stopped. In one
//! process a rendering past its time limit cannot be stopped: its thread is abandoned and keeps
//! spinning (`'b' in ['a'] * 300000000000` iterates inside one minijinja instruction) or holding
//! its memory until it ends, which in the long-running GUI is the rest of the session. Here the
//! parent (`render_user_turn_in_child`) starts an executable that serves `RENDER_ARG`
//! (focus-lens: `serve_render`, from `main` before anything else), sends it the template and the
//! turn as JSON on stdin and reads the rendered prompt from stdout. The child renders with the
//! same `chat::render_user_turn_within` and limits, under an address-space limit besides the
//! allocator's budget; it exits once it has answered, which ends any stopped render thread, and
//! the parent kills it (and reaps it) if it has not answered shortly after the time limit.
//!
//! Answer on stdout: `O` and the rendered prompt, or `E` and the error's text.

use super::chat::{render_user_turn_within, ChatTemplate, Limits};
use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The hidden first argument that makes focus-lens serve one rendering.
pub const RENDER_ARG: &str = "__render-chat-template";

/// Beyond the time limit, for the child to start and answer (it answers a time-out itself at
/// the limit, measured from the start of its rendering).
const GRACE: Duration = Duration::from_secs(3);

/// The child's address space beyond what it has mapped when the request is read: the render
/// thread's stack (`io::budget::STACK_BYTES`, mapped whole), the memory budget, and room for the
/// allocator's arenas. The budget allocator stops a rendering first; this stops what it does not
/// count.
const ADDRESS_SLACK: u64 = 512 << 20;

#[derive(Serialize, Deserialize)]
struct Request {
    source: String,
    text: String,
    user: String,
    bos: String,
    eos: String,
    fuel: u64,
    output_bytes: usize,
    memory_bytes: usize,
    seconds: u64,
}

/// `chat::render_user_turn_within` in a child process running `exe` (an executable that serves
/// `RENDER_ARG`: focus-lens), killed past the time limit. Gives the same errors, each naming the
/// template; no thread or process of the rendering outlives the call.
pub fn render_user_turn_in_child(exe: &Path, template: &ChatTemplate, user: &str, bos: &str, eos: &str, limits: Limits) -> Result<String> {
    let source = &template.source;
    let req = Request {
        source: source.clone(),
        text: template.text.clone(),
        user: user.into(),
        bos: bos.into(),
        eos: eos.into(),
        fuel: limits.fuel,
        output_bytes: limits.output_bytes,
        memory_bytes: limits.memory_bytes,
        seconds: limits.seconds,
    };
    let req = serde_json::to_vec(&req)?;
    let renderer = || format!("the chat template renderer ({} {RENDER_ARG})", exe.display());
    let mut child = Command::new(exe)
        .arg(RENDER_ARG)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| Error::Invalid(format!("cannot start {}: {e}", renderer())))?;
    let (mut stdin, stdout) = (child.stdin.take().expect("piped"), child.stdout.take().expect("piped"));
    // Both pipes on threads of their own, so that neither side waits on a full pipe; both end
    // when the child does (a broken pipe, or the end of its output).
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&req);
    });
    let cap = limits.output_bytes as u64 + (64 << 10);
    let reader = std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = stdout.take(cap + 1).read_to_end(&mut buf);
        buf
    });
    let deadline = Instant::now() + Duration::from_secs(limits.seconds) + GRACE;
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break Some(s),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            // Past the time (or cannot be waited for): killed and reaped.
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let _ = writer.join();
    let out = reader.join().unwrap_or_default();
    let Some(status) = status else {
        return Err(Error::Invalid(format!("the chat template ({source}) ran past its time limit of {} s", limits.seconds)));
    };
    match out.split_first() {
        Some((b'O', text)) if status.success() => String::from_utf8(text.to_vec()).map_err(|_| Error::Invalid(format!("{} answered with text that is not UTF-8", renderer()))),
        Some((b'E', msg)) => Err(Error::Invalid(String::from_utf8_lossy(msg).into_owned())),
        _ => {
            use std::os::unix::process::ExitStatusExt;
            Err(Error::Invalid(match status.signal() {
                // An allocation the address-space limit refused aborts the child.
                Some(libc::SIGABRT) | Some(libc::SIGKILL) => format!("the chat template ({source}) needs more than {} bytes of memory to render (its renderer was stopped by signal {})", limits.memory_bytes, status.signal().unwrap_or(0)),
                Some(sig) => format!("the chat template ({source}) crashed its renderer (signal {sig})"),
                None => format!("{} gave no answer (exit status {}); is it focus-lens?", renderer(), status.code().unwrap_or(-1)),
            }))
        }
    }
}

/// The child's side: reads one request from stdin, renders it under an address-space limit
/// and answers on stdout. Returns the process's exit code; the caller exits with it at once
/// (which also ends a render thread stopped by its budget).
pub fn serve_render() -> i32 {
    let mut input = Vec::new();
    if std::io::stdin().read_to_end(&mut input).is_err() {
        return 2;
    }
    let answer = match serde_json::from_slice::<Request>(&input) {
        Err(e) => [b"E".as_slice(), format!("a malformed request to {RENDER_ARG}: {e}").as_bytes()].concat(),
        Ok(r) => {
            drop(input);
            limit_address_space(crate::io::budget::STACK_BYTES as u64 + r.memory_bytes as u64 + 2 * r.output_bytes as u64 + ADDRESS_SLACK);
            let template = ChatTemplate { source: r.source, text: r.text };
            let limits = Limits { fuel: r.fuel, output_bytes: r.output_bytes, memory_bytes: r.memory_bytes, seconds: r.seconds };
            match render_user_turn_within(&template, &r.user, &r.bos, &r.eos, limits) {
                Ok(text) => [b"O".as_slice(), text.as_bytes()].concat(),
                // The message alone: the parent makes it the same `Error::Invalid` again.
                Err(Error::Invalid(msg)) => [b"E".as_slice(), msg.as_bytes()].concat(),
                Err(e) => [b"E".as_slice(), e.to_string().as_bytes()].concat(),
            }
        }
    };
    let mut out = std::io::stdout().lock();
    match out.write_all(&answer).and_then(|_| out.flush()) {
        Ok(()) => 0,
        Err(_) => 2,
    }
}

/// Caps this process's address space at what it maps now plus `extra` bytes (RLIMIT_AS).
fn limit_address_space(extra: u64) {
    let mapped_kib = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmSize:").and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())));
    let Some(kib) = mapped_kib else { return };
    let limit = (kib << 10).saturating_add(extra);
    let rl = libc::rlimit { rlim_cur: limit as libc::rlim_t, rlim_max: limit as libc::rlim_t };
    // SAFETY: setrlimit with a valid pointer to an initialised struct.
    unsafe {
        libc::setrlimit(libc::RLIMIT_AS, &rl);
    }
}
