//! `vodkit trace`: turns server access logs into chains of sequential requests and phases
//! of client behaviour, and characterizes them (thesis chapter 5).
