//! Where the broker's time went: Skein's per-stage latency histograms
//! (`skein_stage_latency_us` in `/metrics`), scraped before and after the measured
//! window, summed over shards, and reduced to each stage's count, mean and
//! percentiles over the window. The same scrapes give the user-space copies of record
//! bytes per byte appended and per byte fetched (`skein_copied_bytes_total`).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// One stage over the measured window. Percentiles are bucket upper bounds
/// (`f64::INFINITY` past the last bucket).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StageFigure {
    /// "produce", "fetch" or "append" (the engine's part of a produce).
    pub api: String,
    pub stage: String,
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p99_us: f64,
}

/// Cumulative bucket counts by (api, stage), then by upper bound; and sums.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Scrape {
    buckets: BTreeMap<(String, String), BTreeMap<Bound, u64>>,
    sums: BTreeMap<(String, String), u64>,
    /// Counters summed over shards: `skein_copied_bytes_total` by path ("copied
    /// produce", "copied fetch"), `skein_appended_bytes_total`, `skein_bytes_out_total`.
    counters: BTreeMap<String, u64>,
}

/// Record bytes copied in user space per byte, over the measured window.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CopyFigures {
    /// Per byte appended (produced and replicated); `None` when nothing was appended.
    pub produce_copies_per_byte: Option<f64>,
    /// Per record byte that fetches sent; `None` when nothing was fetched.
    pub fetch_copies_per_byte: Option<f64>,
}

/// Copies per byte between two scrapes; `None` from a broker that does not count them.
pub fn copies(before: &Scrape, after: &Scrape) -> Option<CopyFigures> {
    let delta = |name: &str| {
        let after = *after.counters.get(name)?;
        Some(after - before.counters.get(name).copied().unwrap_or(0).min(after))
    };
    let ratio = |copied: u64, bytes: u64| (bytes > 0).then(|| copied as f64 / bytes as f64);
    Some(CopyFigures {
        produce_copies_per_byte: ratio(delta("copied produce")?, delta("skein_appended_bytes_total")?),
        fetch_copies_per_byte: ratio(delta("copied fetch")?, delta("skein_bytes_out_total")?),
    })
}

/// A bucket's upper bound, ordered, +Inf last.
#[derive(Debug, Clone, Copy)]
struct Bound(f64);
impl PartialEq for Bound {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Bound {}
impl PartialOrd for Bound {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Bound {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// GETs `url` (`http://host:port/path`) and parses its stage histograms.
///
/// # Errors
/// A message when the endpoint cannot be reached or answers other than 200.
pub fn scrape(url: &str) -> Result<Scrape, String> {
    let rest = url.strip_prefix("http://").ok_or(format!("metrics url {url}: expected http://host:port/path"))?;
    let (address, path) = rest.split_once('/').map_or((rest, "/"), |(a, p)| (a, p));
    let mut stream = std::net::TcpStream::connect(address).map_err(|e| format!("metrics {url}: {e}"))?;
    stream.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(stream, "GET /{} HTTP/1.0\r\nHost: {address}\r\n\r\n", path.trim_start_matches('/'))
        .map_err(|e| format!("metrics {url}: {e}"))?;
    let mut text = String::new();
    stream.read_to_string(&mut text).map_err(|e| format!("metrics {url}: {e}"))?;
    let (head, body) = text.split_once("\r\n\r\n").ok_or(format!("metrics {url}: no HTTP body"))?;
    if !head.lines().next().is_some_and(|status| status.contains(" 200")) {
        return Err(format!("metrics {url}: {}", head.lines().next().unwrap_or("")));
    }
    Ok(parse(body))
}

fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    let end = labels[start..].find('"')? + start;
    Some(&labels[start..end])
}

/// Parses the `skein_stage_latency_us` series of a Prometheus text page, summing shards.
pub fn parse(text: &str) -> Scrape {
    let mut scrape = Scrape::default();
    for line in text.lines() {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let Ok(value) = value.parse::<u64>() else { continue };
        let (name, labels) = series.split_once('{').unwrap_or((series, ""));
        let counter = match name {
            "skein_copied_bytes_total" => label(labels, "path").map(|path| format!("copied {path}")),
            "skein_appended_bytes_total" | "skein_bytes_out_total" => Some(name.to_string()),
            _ => None,
        };
        if let Some(counter) = counter {
            *scrape.counters.entry(counter).or_default() += value;
            continue;
        }
        let (Some(api), Some(stage)) = (label(labels, "api"), label(labels, "stage")) else { continue };
        let key = (api.to_string(), stage.to_string());
        match name {
            "skein_stage_latency_us_bucket" => {
                let bound = match label(labels, "le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(b) => match b.parse() {
                        Ok(b) => b,
                        Err(_) => continue,
                    },
                    None => continue,
                };
                *scrape.buckets.entry(key).or_default().entry(Bound(bound)).or_default() += value;
            }
            "skein_stage_latency_us_sum" => *scrape.sums.entry(key).or_default() += value,
            _ => {}
        }
    }
    scrape
}

/// Each stage's figures between two scrapes; stages with nothing observed are left out.
pub fn between(before: &Scrape, after: &Scrape) -> Vec<StageFigure> {
    let mut figures = Vec::new();
    for (key, buckets) in &after.buckets {
        let earlier = before.buckets.get(key);
        let delta: Vec<(f64, u64)> = buckets
            .iter()
            .map(|(bound, &n)| (bound.0, n - earlier.and_then(|e| e.get(bound)).copied().unwrap_or(0).min(n)))
            .collect();
        let count = delta.last().map_or(0, |&(_, n)| n);
        if count == 0 {
            continue;
        }
        let sum = after.sums.get(key).copied().unwrap_or(0) - before.sums.get(key).copied().unwrap_or(0);
        let quantile = |q: f64| {
            let rank = (q * count as f64).ceil() as u64;
            delta.iter().find(|&&(_, n)| n >= rank.max(1)).map_or(f64::INFINITY, |&(bound, _)| bound)
        };
        figures.push(StageFigure {
            api: key.0.clone(),
            stage: key.1.clone(),
            count,
            mean_us: sum as f64 / count as f64,
            p50_us: quantile(0.5),
            p99_us: quantile(0.99),
        });
    }
    // The request path's order, then the engine's.
    let order = ["read", "decode", "route", "handle", "gate_wait", "write", "sync", "encode", "queued"];
    figures.sort_by_key(|f| {
        let api = ["produce", "append", "fetch"].iter().position(|a| *a == f.api).unwrap_or(9);
        let mut stage = order.iter().position(|s| *s == f.stage).unwrap_or(9);
        if f.api != "append" && f.stage == "write" {
            stage = 10; // the socket write comes last
        }
        (api, stage)
    });
    figures
}

/// A table of where the broker's time went, and the copies per byte.
pub fn report(figures: &[StageFigure], copies: Option<&CopyFigures>) -> String {
    let mut out = String::new();
    if let Some(c) = copies {
        let figure = |f: Option<f64>| f.map_or("-".to_string(), |f| format!("{f:.3}"));
        let _ = writeln!(
            out,
            "user-space copies per byte: produce {}, fetch {}",
            figure(c.produce_copies_per_byte),
            figure(c.fetch_copies_per_byte)
        );
    }
    if figures.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "broker stages (bucket upper bounds)  {:>10} {:>10} {:>10} {:>10}",
        "count", "mean ms", "p50 ≤ms", "p99 ≤ms"
    );
    let ms = |us: f64| if us.is_finite() { format!("{:.3}", us / 1000.0) } else { "> 1000".into() };
    for f in figures {
        let _ = writeln!(
            out,
            "  {:<34} {:>10} {:>10} {:>10} {:>10}",
            format!("{} {}", f.api, f.stage),
            f.count,
            ms(f.mean_us),
            ms(f.p50_us),
            ms(f.p99_us)
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(shard: u32, counts: [u64; 3], sum: u64) -> String {
        let labels = format!("shard=\"{shard}\",api=\"produce\",stage=\"handle\"");
        format!(
            "skein_other_total{{shard=\"{shard}\"}} 5\n\
             skein_stage_latency_us_bucket{{{labels},le=\"100\"}} {}\n\
             skein_stage_latency_us_bucket{{{labels},le=\"1000\"}} {}\n\
             skein_stage_latency_us_bucket{{{labels},le=\"+Inf\"}} {}\n\
             skein_stage_latency_us_sum{{{labels}}} {sum}\n",
            counts[0], counts[1], counts[2]
        )
    }

    // Shards are summed, the window is the difference, and percentiles land on the
    // bucket that holds them.
    #[test]
    fn figures_over_a_window() {
        let before = parse(&(page(0, [10, 10, 10], 500) + &page(1, [0, 0, 0], 0)));
        let after = parse(&(page(0, [100, 100, 100], 5000) + &page(1, [0, 89, 100], 90_000)));
        let figures = between(&before, &after);
        assert_eq!(figures.len(), 1);
        let f = &figures[0];
        assert_eq!((f.api.as_str(), f.stage.as_str(), f.count), ("produce", "handle", 190));
        assert!((f.mean_us - 94_500.0 / 190.0).abs() < 1e-9);
        assert_eq!(f.p50_us, 1000.0);
        assert_eq!(f.p99_us, f64::INFINITY);
        assert!(report(&figures, None).contains("produce handle"));
        assert!(between(&after, &after).is_empty());
    }

    // Copies per byte are the copied bytes' growth over the bytes' growth, summed
    // over shards; a broker that does not count copies gives none.
    #[test]
    fn copies_over_a_window() {
        let page = |copied: [u64; 2], appended: u64, out: u64| {
            format!(
                "skein_copied_bytes_total{{shard=\"0\",path=\"produce\"}} {}\n\
                 skein_copied_bytes_total{{shard=\"1\",path=\"produce\"}} {}\n\
                 skein_copied_bytes_total{{shard=\"0\",path=\"fetch\"}} 0\n\
                 skein_appended_bytes_total{{shard=\"0\"}} {appended}\n\
                 skein_bytes_out_total{{shard=\"0\"}} {out}\n",
                copied[0], copied[1]
            )
        };
        let before = parse(&page([100, 100], 1000, 0));
        let after = parse(&page([1100, 1100], 2000, 500));
        let figures = copies(&before, &after).expect("counted");
        assert_eq!(figures.produce_copies_per_byte, Some(2.0));
        assert_eq!(figures.fetch_copies_per_byte, Some(0.0));
        assert!(report(&[], Some(&figures)).contains("produce 2.000, fetch 0.000"));
        assert_eq!(copies(&before, &before).map(|c| c.produce_copies_per_byte), Some(None));
        assert!(copies(&parse(""), &parse("skein_other 1")).is_none());
    }
}
