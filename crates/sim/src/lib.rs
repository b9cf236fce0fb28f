//! `vodkit simulate`: predicts disk utilization and prefetch memory of a prefetch policy
//! from the chains of a real workload, with the server's own policy code and disk model.
