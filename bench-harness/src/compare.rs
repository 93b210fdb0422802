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
    row(&mut out, "driver", &|r| r.driver.clone());
    row(&mut out, "target msg/s", &|r| r.target_msgs_per_sec.map_or("max".into(), |t| format!("{t:.0}")));
    row(&mut out, "published msg/s", &|r| format!("{:.0}", r.published_msgs_per_sec));
    row(&mut out, "rate met", &|r| match (r.target_msgs_per_sec, r.rate_met()) {
        (None, _) => "-".into(),
        (Some(_), true) => "yes".into(),
        (Some(_), false) => "NO".into(),
    });
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
    row(&mut out, "generator CPU s / GB", &|r| r.driver_cpu_secs_per_gb.map_or("-".into(), |v| format!("{v:.2}")));
    row(&mut out, "host CPU s / GB", &|r| r.host_cpu_secs_per_gb.map_or("-".into(), |v| format!("{v:.2}")));
    row(&mut out, "broker peak RSS MB", &|r| r.broker_peak_rss_mb.map_or("-".into(), |v| format!("{v:.0}")));
    row(&mut out, "publish errors", &|r| r.publish_errors.to_string());
    out
}

/// A headline figure of a run, when the run has it.
type Figure = fn(&RunResult) -> Option<f64>;

/// Which of a broker's rounds a figure's median is taken over.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Rounds {
    /// Every round: throughput and CPU are what they were, target met or not.
    All,
    /// The rounds that met their target rate, when at least one did: a round that fell
    /// behind measured its own backlog, not the broker's latency at that rate.
    RateMet,
}

/// A figure over a broker's rounds.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Spread {
    median: f64,
    min: f64,
    max: f64,
}

impl Spread {
    /// `None` when there are no values.
    fn of(mut values: Vec<f64>) -> Option<Spread> {
        values.sort_by(|x, y| x.total_cmp(y));
        Some(Spread { median: median(&values)?, min: *values.first()?, max: *values.last()? })
    }
}

/// One broker's side of a figure in `ratios`.
struct Side {
    spread: Spread,
    /// Rounds of this broker, and how many of them missed their target rate.
    rounds: usize,
    rounds_missed: usize,
    /// Whether the missed rounds were left out of `spread`.
    left_out: bool,
}

impl Side {
    /// `None` when no round of `broker` has the figure.
    fn of(runs: &[&RunResult], broker: &str, figure: Figure, over: Rounds) -> Option<Side> {
        let mine: Vec<&RunResult> = runs.iter().copied().filter(|r| r.broker == broker).collect();
        let rounds_missed = mine.iter().filter(|r| !r.rate_met()).count();
        let left_out = over == Rounds::RateMet && rounds_missed > 0 && rounds_missed < mine.len();
        let values = mine.iter().filter(|r| !left_out || r.rate_met()).filter_map(|r| figure(r)).collect();
        Some(Side { spread: Spread::of(values)?, rounds: mine.len(), rounds_missed, left_out })
    }

    /// "12.00 [10.00..15.00]", marked when rounds missed their target rate.
    fn render(&self) -> String {
        let Spread { median, min, max } = self.spread;
        let mut text = format!("{median:.2} [{min:.2}..{max:.2}]");
        if self.rounds_missed > 0 {
            let _ = write!(text, " ({} of {} rounds missed the target rate", self.rounds_missed, self.rounds);
            text.push_str(if self.left_out { ", left out)" } else { ")" });
        }
        text
    }
}

/// The median of sorted values: of an even count, the mean of the two middle ones (so
/// two rounds give their mean, not the worse of the two).
fn median(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2]),
        _ => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// Per workload, when runs of exactly two brokers are present: the ratio of their
/// medians for the headline figures, with the spread (min..max over rounds) of each.
/// A side some of whose rounds missed their target rate is marked with how many did;
/// its latency medians leave those rounds out when at least one round met the rate.
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
        let rounds_of = |broker: &str| of.iter().filter(|r| r.broker == broker).count();
        let _ = writeln!(
            out,
            "{workload}: {a} / {b} (median ratio; each side's median [min..max] over its rounds: {a} {}, {b} {})",
            rounds_of(a),
            rounds_of(b)
        );
        let figures: [(&str, Figure, Rounds); 8] = [
            ("published MB/s", |r| Some(r.published_mb_per_sec), Rounds::All),
            ("publish p99 ms", |r| Some(r.publish_latency.p99_us as f64 / 1000.0), Rounds::RateMet),
            ("end-to-end p99 ms", |r| Some(r.end_to_end_latency.p99_us as f64 / 1000.0), Rounds::RateMet),
            ("commit p50 ms", |r| r.commit_latency.as_ref().map(|l| l.p50_us as f64 / 1000.0), Rounds::RateMet),
            ("commit p99 ms", |r| r.commit_latency.as_ref().map(|l| l.p99_us as f64 / 1000.0), Rounds::RateMet),
            ("broker CPU s / GB", |r| r.broker_cpu_secs_per_gb, Rounds::All),
            ("generator CPU s / GB", |r| r.driver_cpu_secs_per_gb, Rounds::All),
            ("host CPU s / GB", |r| r.host_cpu_secs_per_gb, Rounds::All),
        ];
        let mut any_left_out = false;
        for (name, f, rounds) in figures {
            if let (Some(sa), Some(sb)) = (Side::of(&of, a, f, rounds), Side::of(&of, b, f, rounds)) {
                any_left_out |= sa.left_out || sb.left_out;
                let ratio = if sb.spread.median > 0.0 { sa.spread.median / sb.spread.median } else { f64::NAN };
                let _ = writeln!(out, "  {name:<20} {ratio:>7.2}   {a} {}   {b} {}", sa.render(), sb.render());
            }
        }
        if any_left_out {
            let _ = writeln!(
                out,
                "  (latency medians leave out a side's rounds that missed the target rate when another of its rounds met it)"
            );
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
            driver: "librdkafka".into(),
            target_msgs_per_sec: None,
            driver_cpu_secs: Some(0.5),
            driver_cpu_secs_per_gb: Some(1.25),
            stages: Vec::new(),
            copies: None,
            host_cpu_secs: None,
            host_cpu_secs_per_gb: None,
        }
    }

    /// A run at a 10 000 msg/s target that achieved `published` msg/s.
    fn at_rate(broker: &str, p99: u64, published: f64) -> RunResult {
        RunResult { target_msgs_per_sec: Some(10_000.0), published_msgs_per_sec: published, ..run(broker, p99) }
    }

    fn line<'a>(text: &'a str, figure: &str) -> &'a str {
        text.lines().find(|l| l.trim_start().starts_with(figure)).unwrap_or_else(|| panic!("no {figure} in\n{text}"))
    }

    // The table has a column per run; the SVG has a line per run.
    #[test]
    fn table_and_plot() {
        let runs = [run("skein", 2000), run("kafka", 9000)];
        let t = table(&runs);
        assert!(t.contains("skein/w") && t.contains("kafka/w"));
        assert!(line(&t, "publish p99 ms").contains("2.00") && line(&t, "publish p99 ms").contains("9.00"));
        assert!(line(&t, "generator CPU s / GB").contains("1.25"), "{t}");
        assert!(line(&t, "target msg/s").contains("max"), "{t}");
        let s = svg(&runs);
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    }

    // The median of an even count is the mean of the two middle values.
    #[test]
    fn median_of_sorted_values() {
        fn check(values: &[f64], expected: Option<f64>) {
            assert_eq!(median(values), expected, "{values:?}");
        }
        check(&[], None);
        check(&[4.0], Some(4.0));
        check(&[2.0, 4.0], Some(3.0));
        check(&[1.0, 2.0, 9.0], Some(2.0));
        check(&[1.0, 2.0, 10.0, 20.0], Some(6.0));
    }

    // Two rounds a side: each side's median is their mean, not the worse of the two.
    #[test]
    fn ratios_of_even_rounds() {
        let r = ratios(&[run("skein", 2000), run("kafka", 8000), run("skein", 4000), run("kafka", 9000)]);
        let p99 = line(&r, "publish p99 ms");
        assert!(p99.contains("0.35") && p99.contains("skein 3.00 [2.00..4.00]") && p99.contains("kafka 8.50"), "{r}");
        assert!(line(&r, "generator CPU s / GB").contains("1.00"), "{r}");
    }

    // A round that missed its target rate is flagged; latency medians leave it out
    // when another round of that broker met the rate, throughput keeps it.
    #[test]
    fn rate_missed_rounds() {
        let runs = [
            at_rate("skein", 2000, 10_000.0),
            at_rate("kafka", 5000, 10_000.0),
            at_rate("skein", 3000, 10_000.0),
            at_rate("kafka", 800_000, 9_000.0),
            at_rate("skein", 4000, 9_950.0),
            at_rate("kafka", 7000, 10_000.0),
        ];
        let t = table(&runs);
        assert_eq!(line(&t, "rate met").split_whitespace().filter(|w| *w == "NO").count(), 1, "{t}");
        assert!(line(&t, "target msg/s").contains("10000"), "{t}");
        let r = ratios(&runs);
        let p99 = line(&r, "publish p99 ms");
        assert!(p99.contains("skein 3.00 [2.00..4.00]   kafka"), "{r}");
        assert!(p99.contains("kafka 6.00 [5.00..7.00] (1 of 3 rounds missed the target rate, left out)"), "{r}");
        assert!(line(&r, "published MB/s").ends_with("(1 of 3 rounds missed the target rate)"), "{r}");
        assert!(r.contains("latency medians leave out"), "{r}");
    }

    // When every round of a side missed the rate, none is left out: the mark says so.
    #[test]
    fn rate_missed_in_every_round() {
        let runs = [
            at_rate("skein", 2000, 10_000.0),
            at_rate("kafka", 5000, 9_000.0),
            at_rate("kafka", 7000, 9_000.0),
            at_rate("kafka", 9000, 9_000.0),
        ];
        let r = ratios(&runs);
        assert!(
            line(&r, "publish p99 ms").ends_with("kafka 7.00 [5.00..9.00] (3 of 3 rounds missed the target rate)"),
            "{r}"
        );
        assert!(!r.contains("leave out"), "{r}");
    }
}
