//! The gRPC API and the panels that drive it: handlers and stats services, the panels' own clients,
//! users added and removed live, stats, the webhook.
//!
//! One test binary for the area (`cargo test --release --test api`), a module per
//! former test file; each module's tests are named `{module}::{test}`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed unwrap is a failed test

#[path = "../common/mod.rs"]
mod common;
#[path = "../route_helpers/mod.rs"]
mod route_helpers;

mod api;
mod api_panels;
mod panels;
mod stats;
mod users;
mod users_api;
mod webhook;
