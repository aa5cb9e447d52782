//! Where a one-row product's chunks run: candle's spinning pool (`candle_core::utils::barrier_pool`,
//! the workers its own CPU ops use), not rayon's. A decode step is a few hundred products of
//! 20-300 microseconds each with serial work between them; rayon parks an idle worker after a
//! few dozen yields and wakes it with a futex for the next product, which on this project's
//! 2-core VMs cost about a quarter of a SmolLM2 step. candle's workers spin for a while after
//! each job, so consecutive products find them awake (measured with `scripts/vs-llama.sh
//! decode`: SmolLM2 Q4_1 on the integer route 109-113 -> 144-154 tok/s, llama.cpp's tg128
//! 116-123 in the same run; docs/RESULTS.md).

use std::cell::Cell;
use std::sync::Mutex;

thread_local! {
    /// Set while this thread runs items of `for_each` as the pool's caller: candle runs a
    /// nested call from its workers inline, but one from the caller would wait on the pool's
    /// lock, which the caller itself holds.
    static CALLING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` on every item (the chunks of one product, or of several products of one row) on
/// candle's pool, the calling thread included; returns when all are done. Called again from
/// inside an item (on a worker or on the caller) it runs the inner items inline.
pub fn for_each<T: Send>(items: Vec<T>, f: impl Fn(T) + Sync) {
    match items.len() {
        0 => {}
        1 => items.into_iter().for_each(f),
        _ if CALLING.with(|c| c.get()) => items.into_iter().for_each(f),
        n => {
            // Each item taken once by whichever thread claims its index (an uncontended lock
            // per 64 KiB chunk of weights).
            let slots: Vec<Mutex<Option<T>>> = items.into_iter().map(|t| Mutex::new(Some(t))).collect();
            struct Reset;
            impl Drop for Reset {
                fn drop(&mut self) {
                    CALLING.with(|c| c.set(false));
                }
            }
            CALLING.with(|c| c.set(true));
            let _reset = Reset;
            candle_core::utils::barrier_pool().execute_chunked(n, |range| {
                for slot in &slots[range] {
                    if let Some(t) = slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
                        f(t);
                    }
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    /// Every item is run exactly once, from any number of items, also when called from inside
    /// the pool (nested products run inline instead of waiting on themselves).
    #[test]
    fn runs_every_item_once() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        for n in [0usize, 1, 2, 7, 1000] {
            let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            super::for_each((0..n).collect(), |i| {
                hits[i].fetch_add(1, Ordering::Relaxed);
                // A nested call (a product inside a product's chunk) completes.
                let inner = AtomicUsize::new(0);
                super::for_each(vec![1usize, 2, 3], |v| {
                    inner.fetch_add(v, Ordering::Relaxed);
                });
                assert_eq!(inner.load(Ordering::Relaxed), 6);
            });
            assert!(hits.iter().all(|h| h.load(Ordering::Relaxed) == 1), "n = {n}");
        }
    }
}
