//! StatsService (`xray.app.stats.command`): counters by exact name or substring, with
//! atomic reset; system figures; who is online from where (api.md §4).

use bytes::Bytes;
use prost::Message;
use tonic::Status;

use super::pb;
use super::state::{decode, Api};
use crate::stats::Stats;

/// Runs `method`; `None` when the service has no such method.
pub fn call(api: &Api, method: &str, req: Bytes) -> Option<Result<Vec<u8>, Status>> {
    let st = api.core.stats.as_deref();
    Some(match method {
        "GetStats" => get_stats(st, &req),
        "GetStatsOnline" => get_online(st, &req),
        "QueryStats" => query_stats(st, &req),
        "GetSysStats" => Ok(sys_stats(api).encode_to_vec()),
        "GetStatsOnlineIpList" => online_ip_list(st, &req),
        "GetAllOnlineUsers" => Ok(all_online(st).encode_to_vec()),
        "GetUsersStats" => users_stats(st, &req),
        _ => return None,
    })
}

fn not_found(name: &str) -> Status {
    Status::not_found(format!("{name} not found."))
}

fn stat(name: String, value: u64) -> pb::Stat {
    pb::Stat {
        name,
        value: value.min(i64::MAX as u64) as i64,
    }
}

/// Exact name; `reset` swaps the counter to zero and returns what it held.
fn get_stats(st: Option<&Stats>, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::GetStatsRequest = decode(req)?;
    let st = st.ok_or_else(|| not_found(&r.name))?;
    let v = if r.reset {
        st.take(&r.name)
    } else {
        st.get(&r.name)
    }
    .ok_or_else(|| not_found(&r.name))?;
    Ok(pb::GetStatsResponse {
        stat: Some(stat(r.name, v)),
    }
    .encode_to_vec())
}

/// Substring match (not a regex), empty = all; each counter swapped on its own with `reset`.
fn query_stats(st: Option<&Stats>, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::QueryStatsRequest = decode(req)?;
    let stat_list = match st {
        Some(st) => st
            .query(&r.pattern, r.reset)
            .into_iter()
            .map(|(n, v)| stat(n, v))
            .collect(),
        None => Vec::new(),
    };
    Ok(pb::QueryStatsResponse { stat: stat_list }.encode_to_vec())
}

/// `user>>>EMAIL>>>online`: the number of distinct source IPs with an open connection.
fn get_online(st: Option<&Stats>, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::GetStatsRequest = decode(req)?;
    let m = st
        .and_then(|s| s.find_online(&r.name))
        .ok_or_else(|| not_found(&r.name))?;
    Ok(pb::GetStatsResponse {
        stat: Some(stat(r.name, m.count() as u64)),
    }
    .encode_to_vec())
}

fn online_ip_list(st: Option<&Stats>, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::GetStatsRequest = decode(req)?;
    let m = st
        .and_then(|s| s.find_online(&r.name))
        .ok_or_else(|| not_found(&r.name))?;
    Ok(pb::GetStatsOnlineIpListResponse {
        name: r.name,
        ips: m
            .ips()
            .into_iter()
            .map(|(ip, t)| (ip.to_string(), t))
            .collect(),
    }
    .encode_to_vec())
}

/// The online maps' names (not bare emails, as Xray answers) of users online now.
fn all_online(st: Option<&Stats>) -> pb::GetAllOnlineUsersResponse {
    pb::GetAllOnlineUsersResponse {
        users: st
            .map(|s| {
                s.online_maps()
                    .into_iter()
                    .filter(|(_, m)| m.count() > 0)
                    .map(|(n, _)| n)
                    .collect()
            })
            .unwrap_or_default(),
    }
}

/// One entry per online user with its IPs; with `include_traffic`, its counters (swapped
/// when `reset`).
fn users_stats(st: Option<&Stats>, req: &[u8]) -> Result<Vec<u8>, Status> {
    let r: pb::GetUsersStatsRequest = decode(req)?;
    let mut users = Vec::new();
    if let Some(st) = st {
        for (name, m) in st.online_maps() {
            let ips = m.ips();
            if ips.is_empty() {
                continue;
            }
            let email = name
                .strip_prefix("user>>>")
                .and_then(|n| n.strip_suffix(">>>online"))
                .unwrap_or(&name)
                .to_string();
            let traffic = r.include_traffic.then(|| {
                let read = |dir: &str| {
                    let n = crate::stats::name("user", &email, dir);
                    let v = if r.reset { st.take(&n) } else { st.get(&n) };
                    v.unwrap_or(0).min(i64::MAX as u64) as i64
                };
                pb::TrafficUserStat {
                    uplink: read("uplink"),
                    downlink: read("downlink"),
                }
            });
            users.push(pb::UserStat {
                email,
                ips: ips
                    .into_iter()
                    .map(|(ip, t)| pb::OnlineIpEntry {
                        ip: ip.to_string(),
                        last_seen: t,
                    })
                    .collect(),
                traffic,
            });
        }
    }
    Ok(pb::GetUsersStatsResponse { users }.encode_to_vec())
}

/// Go runtime figures in Xray; here their nearest equivalents: live tasks (connections and
/// listeners) for goroutines, resident memory for the allocator figures, 0 for GC.
fn sys_stats(api: &Api) -> pb::SysStatsResponse {
    let rss = resident_bytes();
    pb::SysStatsResponse {
        num_goroutine: (api.core.live.count() as u32).saturating_add(threads()),
        num_gc: 0,
        alloc: rss,
        total_alloc: rss,
        sys: rss,
        mallocs: 0,
        frees: 0,
        live_objects: 0,
        pause_total_ns: 0,
        uptime: api.core.started.elapsed().as_secs().min(u32::MAX as u64) as u32,
    }
}

/// The process's resident memory (Linux `/proc/self/statm`; 0 elsewhere).
fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map(|pages| pages * 4096)
        .unwrap_or(0)
}

/// The process's OS threads (Linux `/proc/self/stat`; 1 elsewhere).
fn threads() -> u32 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let after = s.rsplit_once(')')?.1;
            after.split_whitespace().nth(17)?.parse().ok()
        })
        .unwrap_or(1)
}
