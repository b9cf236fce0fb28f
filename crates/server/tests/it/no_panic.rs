//! Randomized robustness on stable Rust (the cargo-fuzz target covers the same code far
//! more deeply): mutated request heads through the parser and its interpreters, then
//! random garbage at a live server, which must keep serving.

use crate::common;

use std::io::Write;
use std::net::TcpStream;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use vodkit_server::range::{parse_range, resolve};
use vodkit_server::request::{parse_head, HeadLimits, Parsed};
use vodkit_server::target::relative_path;
use vodkit_server::validators::{if_range_holds, Validators};

const SEEDS: &[&str] = &[
    "GET /a/b.mp4 HTTP/1.1\r\nHost: x\r\nRange: bytes=0-9,20-,-5\r\nIf-Range: \"t\"\r\n\r\n",
    "HEAD /%2e%2e/x?y HTTP/1.0\r\nIf-None-Match: W/\"x\", *\r\nConnection: keep-alive\r\n\r\n",
    "GET http://h/v.mp4 HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nIf-Modified-Since: Tue, 14 Nov 2023 22:13:20 GMT\r\n\r\nabc",
];

fn mutate(rng: &mut StdRng, base: &[u8]) -> Vec<u8> {
    let mut v = base.to_vec();
    for _ in 0..rng.random_range(1..8) {
        let op = rng.random_range(0..5);
        let at = if v.is_empty() {
            0
        } else {
            rng.random_range(0..v.len())
        };
        match op {
            0 if !v.is_empty() => v[at] = rng.random(),
            1 => v.insert(at, rng.random()),
            2 if !v.is_empty() => {
                v.remove(at);
            }
            3 => {
                let tokens: [&[u8]; 8] = [b"\r\n", b"%", b"-", b",", b"..", b"bytes=", b":", b"\""];
                let t = tokens[rng.random_range(0..tokens.len())];
                v.splice(at..at, t.iter().copied());
            }
            _ => {
                let end = (at + rng.random_range(0..16)).min(v.len());
                let chunk = v[at..end].to_vec();
                v.splice(at..at, chunk);
            }
        }
    }
    v
}

#[test]
fn parser_and_interpreters_never_panic_on_mutated_heads() {
    let mut rng = StdRng::seed_from_u64(0x5eed);
    let limits = HeadLimits {
        max_request_line: 256,
        max_head_bytes: 1024,
        max_headers: 16,
    };
    let v = Validators::from_metadata(1000, 1_700_000_000);
    let mut complete = 0;
    let mut errors = 0;
    for i in 0..200_000 {
        let input = mutate(&mut rng, SEEDS[i % SEEDS.len()].as_bytes());
        match parse_head(&input, &limits) {
            Ok(Parsed::Complete(req, used)) => {
                complete += 1;
                assert!(used <= input.len());
                let _ = relative_path(&req.target);
                if let Some(specs) = req.range.as_deref().and_then(parse_range) {
                    for len in [0, 1, 1000, u64::MAX] {
                        let _ = resolve(&specs, len, 16);
                    }
                }
                if let Some(ir) = req.if_range.as_deref() {
                    let _ = if_range_holds(ir, &v);
                }
            }
            Ok(Parsed::Partial) => {}
            Err(e) => {
                errors += 1;
                assert!(matches!(e.status(), 400 | 414 | 431 | 501));
            }
        }
    }
    // The mutations must exercise both accepting and rejecting paths.
    assert!(
        complete > 10_000 && errors > 10_000,
        "complete {complete}, errors {errors}"
    );
}

#[test]
fn live_server_survives_random_garbage() {
    let s = common::TestServer::start();
    let mut rng = StdRng::seed_from_u64(7);
    for i in 0..300 {
        let input = if i % 3 == 0 {
            (0..rng.random_range(1..2000))
                .map(|_| rng.random())
                .collect()
        } else {
            mutate(&mut rng, SEEDS[i % SEEDS.len()].as_bytes())
        };
        let mut t = TcpStream::connect(s.addr).unwrap();
        let _ = t.write_all(&input);
        let _ = t.shutdown(std::net::Shutdown::Write);
    }
    let r = s.connect().get("/video.mp4", &[("Range", "bytes=10-19")]);
    assert_eq!(
        (r.status, r.body.as_slice()),
        (206, &common::pattern(20)[10..])
    );
}
