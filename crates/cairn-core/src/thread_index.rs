//! A small number for each thread, handed out round robin at its first use
//! and kept for the thread's life: per-thread lists and slots (the
//! committed-item list's insertion lists, the transaction gate's entry-time
//! slots, the allocator's locality groups) take it modulo their count, so
//! threads spread over them and a thread always finds its own.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

static NEXT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static INDEX: usize = NEXT.fetch_add(1, Relaxed);
}

/// The calling thread's number (see the module essay).
pub(crate) fn thread_index() -> usize {
    INDEX.with(|i| *i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_keeps_its_index_and_another_gets_a_new_one() {
        let mine = thread_index();
        assert_eq!(thread_index(), mine);
        let other = std::thread::spawn(thread_index).join().unwrap();
        assert_ne!(other, mine);
    }
}
