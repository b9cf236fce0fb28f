//! The Netflix-like (DASH) workload model of thesis 5.5: multi-bitrate catalogs and
//! sessions made of transient, stable and inactive phases, with ground truth for the
//! trace analyzer.
