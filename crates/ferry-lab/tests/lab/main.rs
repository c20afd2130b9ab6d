//! ferry-lab's tests, one binary (`cargo test --release -p ferry-lab --test lab`), a module per
//! part: the inner TLS of the load generator, the load generator and its receiver, the runner,
//! the shipped scenarios, the testbed (namespaces, impairment) and the XHTTP scenarios.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

mod inner_tls;
mod loadgen_receiver;
mod runner;
mod scenarios;
mod testbed;
mod xhttp;
