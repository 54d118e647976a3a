//! Random bytes for tokens, idempotency keys and jitter, from the kernel
//! (`getrandom(2)`, which blocks only before the pool is first seeded).
//!
//! Owns: [`fill`]. Must not: fall back to anything weaker.

/// Fills `buf` from the kernel's random source.
pub fn fill(buf: &mut [u8]) {
    let mut done = 0;
    while done < buf.len() {
        match rustix::rand::getrandom(&mut buf[done..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => done += n,
            // EINTR: try again. getrandom(2) has no other failure on a
            // buffer this size once the pool is seeded.
            Err(_) => continue,
        }
    }
}
