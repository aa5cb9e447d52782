//! A memory budget for untrusted code that can allocate without bound in a few steps (a chat
//! template that doubles a string 40 times asks for 1 TiB; no instruction count catches it).
//! `run_within` runs a closure on a thread of its own whose allocations `BudgetAlloc` counts;
//! an allocation past the budget is never made: the thread stops there for good (an allocator
//! may neither fail gracefully nor unwind) and `run_within` returns `Err(Exceeded::Memory)`. What the
//! stopped thread holds stays below the budget.
//!
//! The count needs `BudgetAlloc` as the global allocator of the binary (the focus-lens binary,
//! the tests and fuzz targets that run templates install it); without it no allocation is
//! counted and only the other limits of the caller apply.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// The system allocator, counting the allocations of threads that run under `run_within`.
pub struct BudgetAlloc;

thread_local! {
    // Const-initialised and without destructors: safe to touch from inside the allocator.
    /// The budget of this thread in bytes; 0: not counted.
    static LIMIT: Cell<usize> = const { Cell::new(0) };
    static USED: Cell<usize> = const { Cell::new(0) };
    /// Set when this thread goes over its budget (owned by the thread's closure).
    static OVER: Cell<*const AtomicBool> = const { Cell::new(std::ptr::null()) };
}

fn charge(bytes: usize) {
    let limit = LIMIT.with(Cell::get);
    if limit == 0 {
        return;
    }
    let used = USED.with(Cell::get).saturating_add(bytes);
    if used > limit {
        let over = OVER.with(Cell::get);
        // SAFETY: set by `run_within` to an `Arc<AtomicBool>` its closure keeps alive.
        unsafe { (*over).store(true, Ordering::SeqCst) };
        // Never return (no allocation is made): the waiting thread reports the overrun.
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    USED.with(|u| u.set(used));
}

fn credit(bytes: usize) {
    if LIMIT.with(Cell::get) != 0 {
        USED.with(|u| u.set(u.get().saturating_sub(bytes)));
    }
}

// SAFETY: every call is forwarded to `System` unchanged; the counting touches only
// const-initialised thread-locals, which never allocate.
unsafe impl GlobalAlloc for BudgetAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        charge(layout.size());
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        credit(layout.size());
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() {
            charge(new_size - layout.size());
        } else {
            credit(layout.size() - new_size);
        }
        System.realloc(ptr, layout, new_size)
    }
}

/// The stack of a `run_within` thread (virtual: pages are committed as they are touched).
pub const STACK_BYTES: usize = 256 << 20;

/// Which budget `run_within` went over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Memory,
    /// The time limit: some work takes neither memory nor any counted step (minijinja iterates
    /// a lazily repeated sequence, `'b' in ['a'] * 10**11`, inside one instruction).
    Time,
}

/// Runs `f` on a thread of its own whose allocations may total at most `limit` bytes at any
/// time, for at most `time`. Past the memory, `Err(Exceeded::Memory)`: the thread is left
/// stopped (holding less than `limit`); past the time, `Err(Exceeded::Time)`: the thread is
/// left to finish on its own (within its memory budget), its result dropped. A panic in `f` is
/// resumed here.
pub fn run_within<T: Send + 'static>(limit: usize, time: Duration, f: impl FnOnce() -> T + Send + 'static) -> Result<T, Exceeded> {
    let over = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::sync_channel(1);
    let flag = over.clone();
    let handle = std::thread::Builder::new()
        .name("focus-budget".into())
        // Parsers recurse once per level of nesting (minijinja's `a if b else c if ...` has no
        // limit): a large stack, committed only as far as it is used.
        .stack_size(STACK_BYTES)
        .spawn(move || {
            OVER.with(|o| o.set(Arc::as_ptr(&flag)));
            USED.with(|u| u.set(0));
            LIMIT.with(|l| l.set(limit.max(1)));
            let r = f();
            LIMIT.with(|l| l.set(0));
            let _ = tx.send(r);
            drop(flag);
        })
        .expect("a thread can be started");
    let t0 = std::time::Instant::now();
    loop {
        match rx.recv_timeout(Duration::from_millis(5)) {
            Ok(r) => {
                let _ = handle.join();
                return Ok(r);
            }
            Err(mpsc::RecvTimeoutError::Timeout) if over.load(Ordering::SeqCst) => return Err(Exceeded::Memory),
            Err(mpsc::RecvTimeoutError::Timeout) if t0.elapsed() > time => return Err(Exceeded::Time),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => match handle.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => unreachable!("the thread sends its result before it ends"),
            },
        }
    }
}
