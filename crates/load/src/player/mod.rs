//! Adaptive players: what `vodkit load --player dash|hls` needs to play a manifest the way
//! dash.js, hls.js and Shaka do — manifest parsing ([`manifest`]) and rendition choice
//! ([`abr`]).

pub mod abr;
pub mod manifest;
