//! Arbitrary and mutated input never panics the session-log parsers (the stable-toolchain
//! companion of the cargo-fuzz target in `crates/workload/fuzz`, checking the same
//! [`crate::logfmt_round_trip::check`]).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SEEDS: &[&str] = &[
    "#vodkit session id=1 class=a gap=0.5 title=2 kbps=419 timeout=10\n/v/a range=0-524287 timeout=10 pacing=10\n\n",
    "session ssl=on port=80 server=h\n/a.mp4 pace_time=10 timeout=10 headers='Range: bytes=0-99' size=100\n",
    "/foo.html think=2.0\n   /pict1.gif\n   /pict2.gif\n/foo2.html method=GET\n",
    "{\"id\":1,\"gap\":0.5,\"class\":\"a\",\"requests\":[{\"path\":\"/x\",\"range\":{\"kind\":\"closed\",\"first\":0,\"last\":9},\"timeout_s\":1}]}\n",
];

const ALPHABET: &[u8] =
    b" \t\n\r#=-'\"/:{}[],.0123456789abcdefghijklmnopqrstuvwxyzRange:bytes=sessionpacing";

#[test]
fn random_bytes_and_mutations_never_panic() {
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for i in 0..20_000 {
        let len = rng.random_range(0..200);
        let bytes: Vec<u8> = if i % 2 == 0 {
            (0..len)
                .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())])
                .collect()
        } else {
            let mut b = SEEDS[i % SEEDS.len()].as_bytes().to_vec();
            for _ in 0..rng.random_range(1..6) {
                let pos = rng.random_range(0..=b.len());
                match rng.random_range(0..3) {
                    0 if pos < b.len() => {
                        b.remove(pos);
                    }
                    1 => b.insert(pos, ALPHABET[rng.random_range(0..ALPHABET.len())]),
                    _ => b.insert(pos, rng.random()),
                }
            }
            b
        };
        crate::logfmt_round_trip::check(&bytes);
    }
}
