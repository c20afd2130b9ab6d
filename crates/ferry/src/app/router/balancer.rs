//! `routing.balancers` (routing.md §5.1–5.2): a rule's `balancerTag` picks one outbound among
//! those whose tag starts with a selector, by strategy: random, roundRobin, leastPing or
//! leastLoad (the last two, and `fallbackTag` with the first two, read the observatory).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::app::observatory::{Observatory, Status};
use crate::config::reader::{self, ConfigError, Obj, Result};

/// `leastLoad` settings.
#[derive(Debug, Clone, Default)]
pub struct LeastLoad {
    pub expected: usize,
    pub max_rtt: Option<Duration>,
    pub tolerance: f64,
    pub baselines: Vec<Duration>,
    /// (is regex, pattern, value).
    pub costs: Vec<(Option<regex::Regex>, String, f64)>,
}

/// A balancing strategy.
#[derive(Debug, Clone)]
pub enum Strategy {
    Random,
    RoundRobin,
    LeastPing,
    LeastLoad(LeastLoad),
}

/// One balancer.
#[derive(Debug)]
pub struct Balancer {
    pub tag: String,
    pub selectors: Vec<String>,
    pub strategy: Strategy,
    pub fallback: Option<String>,
    next: AtomicUsize,
    /// The target set by RoutingService.OverrideBalancerTarget (empty: none).
    forced: std::sync::RwLock<String>,
}

pub use crate::common::reader::duration;

fn dur(o: &Obj<'_>, key: &str) -> Result<Option<Duration>> {
    match o.get(key) {
        None => Ok(None),
        Some((p, v)) => {
            let s = v
                .as_str()
                .ok_or_else(|| ConfigError::new(p.clone(), "expected a duration like \"500ms\""))?;
            duration(s)
                .map(Some)
                .ok_or_else(|| ConfigError::new(p, format!("{s:?} is not a duration")))
        }
    }
}

impl Balancer {
    pub fn parse(o: &Obj<'_>) -> Result<Balancer> {
        let tag = o.req_str("tag")?;
        let selectors = o.str_list("selector")?.unwrap_or_default();
        if selectors.is_empty() {
            return Err(ConfigError::new(
                o.key_path("selector"),
                "needs at least one tag prefix",
            ));
        }
        let mut strategy = Strategy::Random;
        if let Some(s) = o.obj("strategy")? {
            let ty = s.str("type")?.unwrap_or_default().to_ascii_lowercase();
            strategy = match ty.as_str() {
                "" | "random" => Strategy::Random,
                "roundrobin" => Strategy::RoundRobin,
                "leastping" => Strategy::LeastPing,
                "leastload" => Strategy::LeastLoad(parse_least_load(&s)?),
                other => {
                    return Err(ConfigError::new(
                        s.key_path("type"),
                        format!("unknown balancing strategy {other:?}"),
                    ))
                }
            };
            s.ignore(&["settings"]);
            s.finish();
        }
        Ok(Balancer {
            tag,
            selectors,
            strategy,
            fallback: o.str("fallbackTag")?.filter(|t| !t.is_empty()),
            next: AtomicUsize::new(0),
            forced: Default::default(),
        })
    }

    /// Whether it reads the observatory (so one must be configured).
    pub fn needs_observatory(&self) -> bool {
        matches!(self.strategy, Strategy::LeastPing | Strategy::LeastLoad(_))
            || self.fallback.is_some()
    }

    /// The outbound tags this balancer chooses among, sorted.
    pub fn candidates<'a>(&self, tags: impl Iterator<Item = &'a str>) -> Vec<&'a str> {
        let mut v: Vec<&str> = tags
            .filter(|t| self.selectors.iter().any(|s| t.starts_with(s.as_str())))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// The override target (empty: none), as GetBalancerInfo reports it.
    pub fn override_target(&self) -> String {
        self.forced.read().map(|t| t.clone()).unwrap_or_default()
    }

    /// Sets the override target (`""` clears it): every pick returns it, whether or not it is
    /// among the candidates or exists at all, as in Xray.
    pub fn set_override(&self, target: &str) {
        if let Ok(mut t) = self.forced.write() {
            *t = target.to_string();
        }
    }

    /// What GetBalancerInfo lists as the balancer's "principle targets", as Xray's
    /// strategies compute them: every candidate (random, roundRobin), the one least-ping pick
    /// (`""` when none is alive), or the least-load selection (possibly none).
    pub fn principle_targets(&self, tags: &[&str], obs: Option<&Observatory>) -> Vec<String> {
        let status = |t: &str| obs.and_then(|o| o.status(t));
        match &self.strategy {
            Strategy::Random | Strategy::RoundRobin => tags.iter().map(|t| t.to_string()).collect(),
            Strategy::LeastPing => vec![least_ping(tags, &status).unwrap_or_default()],
            Strategy::LeastLoad(cfg) => least_load_select(cfg, tags, &status)
                .into_iter()
                .map(str::to_string)
                .collect(),
        }
    }

    /// Picks an outbound tag: the override target when one is set, else the strategy's pick
    /// (`fallbackTag` when the strategy finds none; `None` then means the default outbound).
    pub fn pick(&self, tags: &[&str], obs: Option<&Observatory>) -> Option<String> {
        let forced = self.override_target();
        if !forced.is_empty() {
            return Some(forced);
        }
        let status = |t: &str| obs.and_then(|o| o.status(t));
        let alive = |t: &&str| status(t).is_none_or(|s| s.alive);
        let chosen: Option<String> = match &self.strategy {
            Strategy::Random | Strategy::RoundRobin => {
                let live: Vec<&str> = if self.fallback.is_some() {
                    tags.iter().copied().filter(alive).collect()
                } else {
                    tags.to_vec()
                };
                if live.is_empty() {
                    None
                } else if let Strategy::Random = self.strategy {
                    Some(live[rand_below(live.len())].to_string())
                } else {
                    let i = self.next.fetch_add(1, Ordering::Relaxed);
                    Some(live[i % live.len()].to_string())
                }
            }
            Strategy::LeastPing => least_ping(tags, &status),
            Strategy::LeastLoad(cfg) => {
                let chosen = least_load_select(cfg, tags, &status);
                (!chosen.is_empty()).then(|| chosen[rand_below(chosen.len())].to_string())
            }
        };
        chosen.or_else(|| self.fallback.clone())
    }
}

fn parse_least_load(s: &Obj<'_>) -> Result<LeastLoad> {
    let mut l = LeastLoad::default();
    let Some(o) = s.obj("settings")? else {
        return Ok(l);
    };
    if let Some((p, v)) = o.get("expected") {
        l.expected = v
            .as_u64()
            .ok_or_else(|| ConfigError::new(p, "expected a count"))? as usize;
    }
    l.max_rtt = dur(&o, "maxRTT")?;
    if let Some((p, v)) = o.get("tolerance") {
        l.tolerance = v
            .as_f64()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| ConfigError::new(p, "expected a ratio from 0 to 1"))?;
    }
    if let Some((p, v)) = o.get("baselines") {
        for (i, b) in reader::as_str_list(v, &p)?.iter().enumerate() {
            l.baselines.push(duration(b).ok_or_else(|| {
                ConfigError::new(format!("{p}[{i}]"), format!("{b:?} is not a duration"))
            })?);
        }
    }
    for c in o.objs(&["costs"])? {
        let regexp = c.bool("regexp")?.unwrap_or(false);
        let m = c.req_str("match")?;
        let re = if regexp {
            Some(regex::Regex::new(&m).map_err(|e| {
                ConfigError::new(c.key_path("match"), format!("invalid regexp: {e}"))
            })?)
        } else {
            None
        };
        let value = c.get("value").and_then(|(_, v)| v.as_f64()).unwrap_or(0.0);
        l.costs.push((re, m, value));
        c.finish();
    }
    o.finish();
    Ok(l)
}

/// The weight of `tag`: the first cost entry matching it (its value, else the first number in
/// the matched text, else 1).
fn weight(cfg: &LeastLoad, tag: &str) -> f64 {
    for (re, m, value) in &cfg.costs {
        let hit = match re {
            Some(r) => r.find(tag).map(|x| x.as_str().to_string()),
            None => tag.contains(m.as_str()).then(|| m.clone()),
        };
        if let Some(text) = hit {
            if *value > 0.0 {
                return *value;
            }
            let digits: String = text
                .chars()
                .skip_while(|c| !c.is_ascii_digit())
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            return digits.parse().unwrap_or(1.0);
        }
    }
    1.0
}

/// The alive candidate with the least delay.
fn least_ping(tags: &[&str], status: &dyn Fn(&str) -> Option<Status>) -> Option<String> {
    tags.iter()
        .filter_map(|t| status(t).filter(|s| s.alive).map(|s| (s.delay, *t)))
        .min()
        .map(|(_, t)| t.to_string())
}

/// The nodes leastLoad chooses among, best first (Xray's `selectLeastLoad`).
fn least_load_select<'a>(
    cfg: &LeastLoad,
    tags: &[&'a str],
    status: &dyn Fn(&str) -> Option<Status>,
) -> Vec<&'a str> {
    let mut nodes: Vec<(f64, f64, u32, u32, &'a str)> = Vec::new();
    for t in tags {
        let Some(s) = status(t).filter(|s| s.alive) else {
            continue;
        };
        if cfg.max_rtt.is_some_and(|m| s.delay >= m) {
            continue;
        }
        if cfg.tolerance > 0.0 && s.all > 0 && f64::from(s.fail) / f64::from(s.all) > cfg.tolerance
        {
            continue;
        }
        let base = if s.all > 0 { s.deviation } else { s.delay };
        let cost = base.as_secs_f64() * weight(cfg, t).sqrt();
        nodes.push((cost, s.delay.as_secs_f64(), s.fail, u32::MAX - s.all, t));
    }
    nodes.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
    if nodes.is_empty() {
        return Vec::new();
    }
    let want = cfg.expected.max(1);
    let count = if cfg.expected > nodes.len() {
        nodes.len()
    } else if cfg.baselines.is_empty() {
        want.min(nodes.len())
    } else {
        let mut count = 0;
        for b in &cfg.baselines {
            let under = nodes.iter().take_while(|n| n.0 < b.as_secs_f64()).count();
            count = count.max(under);
            if count >= want {
                break;
            }
        }
        if cfg.expected > 0 {
            count = count.max(cfg.expected);
        }
        count.min(nodes.len())
    };
    nodes[..count].iter().map(|n| n.4).collect()
}

fn rand_below(n: usize) -> usize {
    let mut b = [0u8; 8];
    crate::common::rand::fill(&mut b);
    (u64::from_ne_bytes(b) % n as u64) as usize
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Diagnostics;
    use serde_json::json;

    fn bal(v: serde_json::Value) -> Balancer {
        let d = Diagnostics::default();
        let o = Obj::new(&v, "b", &d).unwrap();
        Balancer::parse(&o).unwrap()
    }

    #[test]
    fn durations_as_go_writes_them() {
        assert_eq!(duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(duration("1.5s"), Some(Duration::from_millis(1500)));
        assert_eq!(duration("10"), None);
        assert_eq!(duration(""), None);
    }

    #[test]
    fn selectors_round_robin_and_random() {
        let b =
            bal(json!({"tag": "b", "selector": ["proxy-"], "strategy": {"type": "roundRobin"}}));
        let tags = ["direct", "proxy-b", "proxy-a", "block"];
        let c = b.candidates(tags.iter().copied());
        assert_eq!(c, vec!["proxy-a", "proxy-b"]);
        let picks: Vec<String> = (0..4).map(|_| b.pick(&c, None).unwrap()).collect();
        assert_eq!(picks, ["proxy-a", "proxy-b", "proxy-a", "proxy-b"]);
        let r = bal(json!({"tag": "r", "selector": ["proxy-"]}));
        for _ in 0..20 {
            assert!(c.contains(&r.pick(&c, None).unwrap().as_str()));
        }
        assert_eq!(r.pick(&[], None), None, "nothing: the default outbound");
        let f = bal(json!({"tag": "f", "selector": ["x"], "fallbackTag": "direct"}));
        assert_eq!(f.pick(&[], None).as_deref(), Some("direct"));
        assert!(f.needs_observatory() && !r.needs_observatory());
    }

    #[test]
    fn weights_from_costs() {
        let l = LeastLoad {
            costs: vec![
                (
                    Some(regex::Regex::new(r"\d+x").unwrap()),
                    String::new(),
                    0.0,
                ),
                (None, "slow".into(), 9.0),
            ],
            ..Default::default()
        };
        assert_eq!(weight(&l, "hk-3x-a"), 3.0);
        assert_eq!(weight(&l, "slow-node"), 9.0);
        assert_eq!(weight(&l, "plain"), 1.0);
    }
}
