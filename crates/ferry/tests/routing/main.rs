//! Routing and DNS: rules, Xray's routing configs, balancers and the observatory, geodata, DNS over
//! HTTPS, the DNS outbound, routed DNS.
//!
//! One test binary for the area (`cargo test --release --test routing`), a module per
//! former test file; each module's tests are named `{module}::{test}`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;
#[path = "../route_helpers/mod.rs"]
mod route_helpers;

mod balancer;
mod dns_doh;
mod dns_outbound;
mod dns_routed;
mod geodata;
mod routing;
mod routing_xray;
