//! Sorted, merged ranges: the shared representation of the IP and port matchers.

/// Sorts `v` and merges overlapping or adjacent ranges (`next(x)` is the value after `x`).
pub(super) fn merge<T: Ord + Copy>(
    mut v: Vec<(T, T)>,
    next: impl Fn(T) -> Option<T>,
) -> Vec<(T, T)> {
    v.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        if let Some(last) = out.last_mut() {
            if next(last.1).is_none_or(|n| a <= n) {
                if b > last.1 {
                    last.1 = b;
                }
                continue;
            }
        }
        out.push((a, b));
    }
    out
}

/// Whether `x` lies in one of the sorted, merged ranges `v`.
pub(super) fn in_ranges<T: Ord + Copy>(v: &[(T, T)], x: T) -> bool {
    // The last range starting at or before x.
    let i = v.partition_point(|(a, _)| *a <= x);
    i > 0 && v.get(i - 1).is_some_and(|(_, b)| x <= *b)
}
