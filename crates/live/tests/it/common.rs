//! What the live tests share: reading back what an origin holds.

use vodkit_testkit::http::Client;

/// GET `path` from the origin on `port` of the loopback address: (status, body).
pub fn get(port: u16, path: &str) -> (u16, Vec<u8>) {
    let r = Client::connect(([127, 0, 0, 1], port).into()).get(path, &[]);
    (r.status, r.body)
}
