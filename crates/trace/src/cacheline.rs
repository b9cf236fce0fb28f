//! Hints that bring memory into the CPU's cache before it is used. The analysis of a long
//! log touches, for every request, a session and a file entry spread over more memory than
//! the caches hold; looking a few requests ahead and asking for their lines early lets
//! those cache misses overlap instead of following one another.

/// Ask the CPU to load every cache line of `value` (nothing off x86-64).
pub(crate) fn prefetch<V>(value: &V) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let start = (value as *const V).cast::<i8>();
        for off in (0..std::mem::size_of::<V>()).step_by(64) {
            // SAFETY: a prefetch is a hint: it never faults and changes no memory. The
            // address lies inside `value`, which the reference keeps alive.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(start.wrapping_add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = value;
}
