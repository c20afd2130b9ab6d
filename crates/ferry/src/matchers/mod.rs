//! What routing rules and DNS rules match on, compiled once when the config is read: domain
//! lists (`full:`, `domain:`, substrings, `regexp:`, `geosite:`), IP lists (CIDRs, `geoip:`,
//! negated tags) as sorted merged ranges, port lists, and the geodata files they read.

pub mod cidr;
pub mod domain;
pub mod geodata;
pub mod lookup;
pub mod port;
mod ranges;
mod strset;

pub use cidr::{IpRanges, IpSet};
pub use domain::{DomainSet, DomainTable, DomainType};
pub use geodata::Assets;
pub use port::PortSet;
