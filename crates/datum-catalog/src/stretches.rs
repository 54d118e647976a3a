//! Work over a long list split into one stretch per core: the compile's
//! per-resource steps that need nothing from their neighbours (resolving
//! content paths, rendering, hashing declarations, sizing snapshot records).
//! Each stretch runs on its own scoped thread; a list of a few hundred items
//! stays on the calling thread, where a thread would cost more than it saves.

/// How many stretches: the cores, up to 8 (1 for a short list).
fn stretches(len: usize) -> usize {
    if len < 256 {
        return 1;
    }
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(8)
}

/// `each` on `items` split into stretches, with the index of each
/// stretch's first item; what each stretch gave, in order.
pub(crate) fn in_stretches<T: Send, R: Send>(
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
pub(crate) fn each_stretch<T: Sync, R: Send>(
    items: &[T],
    each: impl Fn(&[T]) -> R + Sync,
) -> Vec<R> {
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

/// A stretch's result; a panic in it is a bug, and surfaces as one.
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
        }
    }
}
