//! `skein bench compare`: a side-by-side table of runs and an SVG latency-percentile
//! plot with a logarithmic percentile axis (50, 90, 99, 99.9, ...), as OMB and
//! HdrHistogram plot them.

use std::fmt::Write;

use crate::run::RunResult;

/// The table, one column per run.
pub fn table(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let _ = write!(out, "{:<28}", "");
    for r in runs {
        let _ = write!(out, " {:>22}", format!("{}/{}", r.broker, short(&r.workload)));
    }
    out.push('\n');
    let row = |out: &mut String, name: &str, f: &dyn Fn(&RunResult) -> String| {
        let _ = write!(out, "{name:<28}");
        for r in runs {
            let _ = write!(out, " {:>22}", f(r));
        }
        out.push('\n');
    };
    row(&mut out, "published msg/s", &|r| format!("{:.0}", r.published_msgs_per_sec));
    row(&mut out, "published MB/s", &|r| format!("{:.1}", r.published_mb_per_sec));
    row(&mut out, "consumed MB/s", &|r| format!("{:.1}", r.consumed_mb_per_sec));
    for (name, pick) in [
        ("publish p50 ms", 0usize),
        ("publish p99 ms", 1),
        ("publish p99.9 ms", 2),
        ("publish max ms", 3),
        ("end-to-end p50 ms", 4),
        ("end-to-end p99 ms", 5),
        ("end-to-end p99.9 ms", 6),
    ] {
        row(&mut out, name, &|r| {
            let v = match pick {
                0 => r.publish_latency.p50_us,
                1 => r.publish_latency.p99_us,
                2 => r.publish_latency.p999_us,
                3 => r.publish_latency.max_us,
                4 => r.end_to_end_latency.p50_us,
                5 => r.end_to_end_latency.p99_us,
                _ => r.end_to_end_latency.p999_us,
            };
            format!("{:.2}", v as f64 / 1000.0)
        });
    }
    let commit = |r: &RunResult, f: fn(&crate::run::Latency) -> u64| {
        r.commit_latency.as_ref().map_or("-".into(), |l| format!("{:.2}", f(l) as f64 / 1000.0))
    };
    if runs.iter().any(|r| r.commit_latency.is_some()) {
        row(&mut out, "commit p50 ms", &|r| commit(r, |l| l.p50_us));
        row(&mut out, "commit p99 ms", &|r| commit(r, |l| l.p99_us));
    }
    row(&mut out, "broker CPU s / GB", &|r| r.broker_cpu_secs_per_gb.map_or("-".into(), |v| format!("{v:.2}")));
    row(&mut out, "broker peak RSS MB", &|r| r.broker_peak_rss_mb.map_or("-".into(), |v| format!("{v:.0}")));
    row(&mut out, "publish errors", &|r| r.publish_errors.to_string());
    out
}

/// A headline figure of a run, when the run has it.
type Figure = fn(&RunResult) -> Option<f64>;

/// Per workload, when runs of exactly two brokers are present: the ratio of their
/// medians for the headline figures, with the spread (min..max over rounds) of each.
pub fn ratios(runs: &[RunResult]) -> String {
    let mut out = String::new();
    let mut workloads: Vec<&str> = runs.iter().map(|r| r.workload.as_str()).collect();
    workloads.sort();
    workloads.dedup();
    for workload in workloads {
        let of: Vec<&RunResult> = runs.iter().filter(|r| r.workload == workload).collect();
        let mut brokers: Vec<&str> = of.iter().map(|r| r.broker.as_str()).collect();
        brokers.sort();
        brokers.dedup();
        if brokers.len() != 2 {
            continue;
        }
        // Skein, when present, is the numerator; otherwise the first broker listed.
        let a = if brokers.contains(&"skein") { "skein" } else { of[0].broker.as_str() };
        let b = if brokers[0] == a { brokers[1] } else { brokers[0] };
        let _ = writeln!(out, "{workload}: {a} / {b} (median ratio; each side's median [min..max])");
        let figures: [(&str, Figure); 6] = [
            ("published MB/s", |r| Some(r.published_mb_per_sec)),
            ("publish p99 ms", |r| Some(r.publish_latency.p99_us as f64 / 1000.0)),
            ("end-to-end p99 ms", |r| Some(r.end_to_end_latency.p99_us as f64 / 1000.0)),
            ("commit p50 ms", |r| r.commit_latency.as_ref().map(|l| l.p50_us as f64 / 1000.0)),
            ("commit p99 ms", |r| r.commit_latency.as_ref().map(|l| l.p99_us as f64 / 1000.0)),
            ("broker CPU s / GB", |r| r.broker_cpu_secs_per_gb),
        ];
        for (name, f) in figures {
            let stats = |broker: &str| -> Option<(f64, f64, f64)> {
                let mut v: Vec<f64> = of.iter().filter(|r| r.broker == broker).filter_map(|r| f(r)).collect();
                if v.is_empty() {
                    return None;
                }
                v.sort_by(|x, y| x.total_cmp(y));
                Some((v[v.len() / 2], v[0], v[v.len() - 1]))
            };
            if let (Some((ma, la, ha)), Some((mb, lb, hb))) = (stats(a), stats(b)) {
                let ratio = if mb > 0.0 { ma / mb } else { f64::NAN };
                let _ = writeln!(
                    out,
                    "  {name:<20} {ratio:>7.2}   {a} {ma:.2} [{la:.2}..{ha:.2}]   {b} {mb:.2} [{lb:.2}..{hb:.2}]"
                );
            }
        }
    }
    out
}

fn short(name: &str) -> String {
    name.chars().take(12).collect()
}

/// An SVG plot of publish latency by percentile, x = -log10(1 - p).
pub fn svg(runs: &[RunResult]) -> String {
    let (w, h, left, bottom) = (800.0, 480.0, 70.0, 50.0);
    let x_of = |p: f64| {
        let nines = -(1.0 - (p / 100.0).min(0.99999)).log10();
        left + nines / 5.0 * (w - left - 20.0)
    };
    let max_us =
        runs.iter().flat_map(|r| r.publish_latency.distribution.iter().map(|(_, v)| *v)).max().unwrap_or(1).max(1)
            as f64;
    let y_of = |us: u64| h - bottom - (us as f64 / max_us) * (h - bottom - 20.0);
    let colors = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"];
    let mut out = format!("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n");
    let _ = writeln!(out, "<rect width=\"{w}\" height=\"{h}\" fill=\"white\"/>");
    let _ = writeln!(
        out,
        "<line x1=\"{left}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        h - bottom,
        w - 20.0,
        h - bottom
    );
    let _ = writeln!(out, "<line x1=\"{left}\" y1=\"20\" x2=\"{left}\" y2=\"{}\" stroke=\"black\"/>", h - bottom);
    for (label, p) in
        [("50%", 50.0), ("90%", 90.0), ("99%", 99.0), ("99.9%", 99.9), ("99.99%", 99.99), ("99.999%", 99.999)]
    {
        let x = x_of(p);
        let _ = writeln!(out, "<text x=\"{x}\" y=\"{}\" text-anchor=\"middle\">{label}</text>", h - bottom + 18.0);
        let _ = writeln!(out, "<line x1=\"{x}\" y1=\"20\" x2=\"{x}\" y2=\"{}\" stroke=\"#ddd\"/>", h - bottom);
    }
    for i in 0..=4 {
        let us = (max_us * i as f64 / 4.0) as u64;
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{:.1} ms</text>",
            left - 6.0,
            y_of(us) + 4.0,
            us as f64 / 1000.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">percentile (publish latency)</text>",
        w / 2.0,
        h - 8.0
    );
    for (i, r) in runs.iter().enumerate() {
        let color = colors[i % colors.len()];
        let points: Vec<String> = r
            .publish_latency
            .distribution
            .iter()
            .filter(|(p, _)| *p >= 50.0)
            .map(|(p, v)| format!("{:.1},{:.1}", x_of(*p), y_of(*v)))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            points.join(" ")
        );
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{} {}</text>",
            left + 10.0,
            36.0 + 16.0 * i as f64,
            r.broker,
            r.workload
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::Latency;

    fn run(broker: &str, p99: u64) -> RunResult {
        RunResult {
            workload: "w".into(),
            broker: broker.into(),
            duration_secs: 1.0,
            published_msgs: 10,
            published_msgs_per_sec: 10.0,
            published_mb_per_sec: 1.0,
            consumed_msgs: 10,
            consumed_mb_per_sec: 1.0,
            publish_errors: 0,
            publish_latency: Latency {
                p99_us: p99,
                distribution: vec![(50.0, 100), (99.0, p99), (100.0, p99 * 2)],
                ..Latency::default()
            },
            end_to_end_latency: Latency::default(),
            broker_cpu_secs: Some(1.0),
            broker_cpu_secs_per_gb: Some(2.5),
            broker_peak_rss_mb: None,
            commit_latency: None,
        }
    }

    // The table has a column per run; the SVG has a line per run.
    #[test]
    fn table_and_plot() {
        let runs = [run("skein", 2000), run("kafka", 9000)];
        let t = table(&runs);
        assert!(t.contains("skein/w") && t.contains("kafka/w"));
        assert!(t.lines().any(|l| l.starts_with("publish p99 ms") && l.contains("2.00") && l.contains("9.00")));
        let r = ratios(&[run("skein", 2000), run("kafka", 8000), run("skein", 4000), run("kafka", 9000)]);
        assert!(r.lines().any(|l| l.contains("publish p99 ms") && l.contains("0.44")), "{r}");
        let s = svg(&runs);
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    }
}
