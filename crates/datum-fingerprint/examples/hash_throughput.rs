//! In-memory throughput of the two content hash functions at the estate's file sizes
//! (no I/O): the measurement behind choosing BLAKE3 for the native fingerprint.
//!
//! `cargo run --release -p datum-fingerprint --example hash_throughput`

use std::time::Instant;

use datum_fingerprint::Algorithm;

fn main() {
    // 256 B .. 16 KiB: the estate's config files (median 1.8 KB); 1 MiB: its blobs.
    let sizes = [256usize, 1800, 4096, 16384, 1 << 20];
    let data: Vec<u8> = (0..(1usize << 20)).map(|i| (i * 7 % 251) as u8).collect();
    println!(
        "{:>9}  {:>14}  {:>14}",
        "bytes", "sha256 GB/s", "blake3 GB/s"
    );
    for size in sizes {
        let total = 256usize << 20;
        let rounds = total / size;
        let input = data.get(..size).unwrap_or(&data);
        let mut best = [f64::MAX; 2];
        for _ in 0..3 {
            for (slot, algorithm) in [Algorithm::Compat, Algorithm::Native]
                .into_iter()
                .enumerate()
            {
                let started = Instant::now();
                let mut sink = 0u8;
                for _ in 0..rounds {
                    sink ^= algorithm.hash_content(input).digest.0[0];
                }
                std::hint::black_box(sink);
                best[slot] = best[slot].min(started.elapsed().as_secs_f64());
            }
        }
        let rate = |secs: f64| (rounds * size) as f64 / secs / 1e9;
        println!(
            "{size:>9}  {:>14.2}  {:>14.2}",
            rate(best[0]),
            rate(best[1])
        );
    }
}
