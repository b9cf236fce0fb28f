//! `vodkit bench` and `vodkit demo`: run servers under test against a workload, search for
//! each one's maximum failure-free rate and report the results side by side.
