//! `--admission`: requests that start a new stream may be refused with `503` and
//! `Retry-After`; a request continuing an admitted stream never is; `off` serves everyone.
//! (The `auto` rule's arithmetic is unit-tested on simulated device loads in
//! `src/admission.rs`; here `rate:R` stands in for a device that is full.)

use crate::common;

use common::TestServer;
use vodkit_server::admission::AdmissionPolicy;

const HALF: &str = "bytes=0-524287";
const REST: &str = "bytes=524288-1048575";

#[test]
fn a_full_server_refuses_new_streams_and_keeps_serving_admitted_ones() {
    // One new stream per 100 s: the first viewer gets in, the next one does not.
    let s = TestServer::start_with(|c| c.admission = AdmissionPolicy::Rate { per_s: 0.01 });
    let mut first = s.connect();
    let r = first.get("/video.mp4", &[("Range", HALF), ("X-Session-Id", "a")]);
    assert_eq!(r.status, 206);

    let mut second = s.connect();
    let r = second.get("/video.mp4", &[("Range", HALF), ("X-Session-Id", "b")]);
    assert_eq!(r.status, 503);
    let retry: u32 = r
        .header("retry-after")
        .expect("Retry-After on a refusal")
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    assert_eq!(r.header("connection"), Some("close"));

    // The admitted viewer's next range continues its stream: never refused.
    let r = first.get("/video.mp4", &[("Range", REST), ("X-Session-Id", "a")]);
    assert_eq!(r.status, 206);
    assert_eq!(r.body.len(), 524288);

    // A jump (a seek) or a restart from offset 0 starts a new stream.
    let r = first.get("/video.mp4", &[("Range", HALF), ("X-Session-Id", "a")]);
    assert_eq!(r.status, 503);

    let st = s.stats();
    assert_eq!(st.admission.admitted, 1, "{:?}", st.admission);
    assert_eq!(st.admission.refused, 2, "{:?}", st.admission);
}

#[test]
fn admission_off_serves_every_new_stream() {
    let s = TestServer::start_with(|c| c.admission = AdmissionPolicy::Off);
    for i in 0..20 {
        let r = s.connect().get(
            "/video.mp4",
            &[("Range", HALF), ("X-Session-Id", &format!("v{i}"))],
        );
        assert_eq!(r.status, 206);
    }
    let st = s.stats();
    assert_eq!((st.admission.admitted, st.admission.refused), (0, 0));
}

#[test]
fn auto_admits_on_an_idle_server() {
    let s = TestServer::start_with(|c| {
        c.admission = "auto".parse().unwrap();
    });
    for i in 0..20 {
        let r = s.connect().get(
            "/video.mp4",
            &[("Range", HALF), ("X-Session-Id", &format!("v{i}"))],
        );
        assert_eq!(r.status, 206, "viewer {i}");
    }
    assert_eq!(s.stats().admission.admitted, 20);
}
