//! The admin listener's `POST /clock?rate=R`: the prefetch engine's clock runs R times
//! faster (a bench's fast-forward); a bad rate is refused with a line naming it.

use crate::common;

use common::{Client, TestServer};

#[test]
fn the_clock_rate_is_set_on_the_admin_listener_and_bad_rates_are_refused() {
    let s = TestServer::start_with(|c| {
        c.io.stats_every = None;
        c.admin = Some("127.0.0.1:0".parse().unwrap());
    });
    let admin = s.admin.unwrap();
    let r = Client::connect(admin).request("POST", "/clock?rate=8", &[]);
    assert_eq!(r.status, 204);
    let r = Client::connect(admin).request("POST", "/clock?rate=1", &[]);
    assert_eq!(r.status, 204);
    for bad in ["/clock?rate=0", "/clock?rate=soon", "/clock"] {
        let r = Client::connect(admin).request("POST", bad, &[]);
        assert_eq!(r.status, 400, "{bad}");
        let body = String::from_utf8_lossy(&r.body).to_string();
        assert!(
            body.contains("rate") && body.ends_with('\n'),
            "{bad}: {body}"
        );
    }
    // Reading is still a GET; a GET of /clock is not a thing.
    assert_eq!(Client::connect(admin).get("/clock?rate=2", &[]).status, 404);
    s.stop();
}
