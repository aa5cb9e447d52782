//! Chat templates (minijinja, from a model's files): arbitrary text as a template, its first
//! line as the user's message, rendered under small limits. Every input must end in a string
//! or an error: never a panic, hang, abort or an allocation past the memory budget.
#![no_main]
use focus_core::generate::chat::{render_user_turn_within, ChatTemplate, Limits};
use libfuzzer_sys::fuzz_target;

// The budget is enforced by this allocator. A template that passes it leaves its thread
// stopped (holding < 1 MiB), so the budget is kept small here.
#[global_allocator]
static ALLOC: focus_core::io::budget::BudgetAlloc = focus_core::io::budget::BudgetAlloc;

const LIMITS: Limits = Limits { fuel: 100_000, output_bytes: 256 << 10, memory_bytes: 1 << 20, seconds: 2 };

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let (user, template) = text.split_once('\n').unwrap_or(("Hi!", text));
    let t = ChatTemplate { source: "fuzz input".into(), text: template.into() };
    if let Ok(out) = render_user_turn_within(&t, user, "<s>", "</s>", LIMITS) {
        assert!(out.len() <= LIMITS.output_bytes);
    }
});
