//! `vodkit load`: replays viewing sessions against an HTTP server as thousands of paced,
//! timed-out, bandwidth-limited players would, and measures throughput, latency and QoS.
