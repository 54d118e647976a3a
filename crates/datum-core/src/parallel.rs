//! Work over a list spread over the cores, with results in the list's
//! order. Two shapes: one stretch of the list per core
//! ([`in_stretches`], [`each_stretch`]: the compile's per-resource steps,
//! which cost about the same each), and items taken one by one by whichever
//! thread is free ([`each_taken`]: observations and pieces of a manifest,
//! which do not). Every thread is scoped; a panic in one surfaces as one.

/// How many threads a list of `len` items gets: the cores, up to 8; one (the
/// calling thread) for a few hundred items, where a thread would cost more
/// than it saves.
fn stretches(len: usize) -> usize {
    if len < 256 {
        return 1;
    }
    cores()
}

/// The cores this process may use, up to 8 (more only contend here).
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, 8)
}

/// `each` on `items` split into stretches, with the index of each
/// stretch's first item; what each stretch gave, in order.
pub fn in_stretches<T: Send, R: Send>(
    items: &mut [T],
    each: impl Fn(usize, &mut [T]) -> R + Sync,
) -> Vec<R> {
    let threads = stretches(items.len());
    if threads <= 1 {
        return vec![each(0, items)];
    }
    let chunk = items.len().div_ceil(threads);
    let each = &each;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks_mut(chunk)
            .enumerate()
            .map(|(k, part)| scope.spawn(move || each(k * chunk, part)))
            .collect();
        handles.into_iter().map(joined).collect()
    })
}

/// [`in_stretches`] for work that only reads the items.
pub fn each_stretch<T: Sync, R: Send>(items: &[T], each: impl Fn(&[T]) -> R + Sync) -> Vec<R> {
    let threads = stretches(items.len());
    if threads <= 1 {
        return vec![each(items)];
    }
    let each = &each;
    std::thread::scope(|scope| {
        let handles: Vec<_> = items
            .chunks(items.len().div_ceil(threads))
            .map(|part| scope.spawn(move || each(part)))
            .collect();
        handles.into_iter().map(joined).collect()
    })
}

/// `each` on every item (with its index), `threads` at a time, each thread
/// taking the next item nobody has; the results in the items' order. The
/// calling thread is one of them, and runs `alongside` first (work that must
/// stay on it, such as a read of a database connection) while the others
/// start.
pub fn each_taken<T: Sync, R: Send, A>(
    items: &[T],
    threads: usize,
    alongside: impl FnOnce() -> A,
    each: impl Fn(usize, &T) -> R + Sync,
) -> (Vec<R>, A) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    // One slot per item, filled by the thread that took it (its lock is
    // never contended): no per-thread list to gather into a second one.
    let slots: Vec<std::sync::Mutex<Option<R>>> = std::iter::repeat_with(Default::default)
        .take(items.len())
        .collect();
    let next = AtomicUsize::new(0);
    let work = || {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let (Some(item), Some(slot)) = (items.get(i), slots.get(i)) else {
                return;
            };
            let done = each(i, item);
            if let Ok(mut slot) = slot.lock() {
                *slot = Some(done);
            }
        }
    };
    let beside = std::thread::scope(|scope| {
        for _ in 1..threads.clamp(1, items.len().max(1)) {
            scope.spawn(work);
        }
        let beside = alongside();
        work();
        beside
    });
    // Every slot was filled (a thread that panicked has ended the scope).
    let done = slots
        .into_iter()
        .filter_map(|slot| slot.into_inner().ok().flatten())
        .collect();
    (done, beside)
}

/// A thread's result; a panic in it is a bug, and surfaces as one.
fn joined<R>(handle: std::thread::ScopedJoinHandle<'_, R>) -> R {
    match handle.join() {
        Ok(r) => r,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_visited_once_with_its_own_index() {
        for len in [0, 1, 255, 256, 1001] {
            let mut items: Vec<usize> = vec![usize::MAX; len];
            let firsts = in_stretches(&mut items, |first, part| {
                for (i, item) in (first..).zip(part.iter_mut()) {
                    *item = i;
                }
                first
            });
            assert!(items.iter().enumerate().all(|(i, &v)| i == v), "{len}");
            assert!(firsts.windows(2).all(|w| w[0] < w[1]), "{firsts:?}");
            let sums = each_stretch(&items, |part| part.iter().sum::<usize>());
            assert_eq!(sums.iter().sum::<usize>(), items.iter().sum::<usize>());
            for threads in [1, 2, 5] {
                let (taken, beside) = each_taken(&items, threads, || "beside", |i, &v| (i, v * 2));
                assert_eq!(beside, "beside");
                assert_eq!(taken.len(), len, "{threads} threads");
                assert!(
                    taken
                        .iter()
                        .enumerate()
                        .all(|(k, &(i, v))| k == i && v == 2 * i)
                );
            }
        }
    }
}
