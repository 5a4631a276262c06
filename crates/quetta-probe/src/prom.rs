//! The Prometheus text exposition format (version 0.0.4), parsed completely: `# HELP` and
//! `# TYPE` lines, label sets with escaped values, counters, gauges, histograms
//! (`_bucket{le=…}`, `_sum`, `_count`), summaries, untyped samples, optional timestamps, and
//! `NaN`/`+Inf`/`-Inf` values. Errors name the line.

use std::collections::BTreeMap;

/// The type a `# TYPE` line declares (`untyped` when none does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum MetricType {
    Counter,
    Gauge,
    Histogram,
    Summary,
    Untyped,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The sample's own name (e.g. `vllm:ttft_seconds_bucket`).
    pub name: String,
    /// Labels in the order given.
    pub labels: Vec<(String, String)>,
    pub value: f64,
    /// Milliseconds since the epoch, when the line gives one.
    pub timestamp_ms: Option<i64>,
}

impl Sample {
    /// A label's value.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A metric family: the samples that share a base name.
#[derive(Debug, Clone, PartialEq)]
pub struct Family {
    pub name: String,
    pub kind: MetricType,
    pub help: Option<String>,
    pub samples: Vec<Sample>,
}

/// A parsed exposition.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition {
    pub families: BTreeMap<String, Family>,
}

/// A line of an exposition could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
#[non_exhaustive]
pub struct ParseError {
    pub line: usize,
    pub reason: String,
}

/// The family a sample belongs to: its name without a histogram or summary suffix when
/// such a family was declared.
fn family_of<'a>(name: &'a str, declared: &BTreeMap<String, Family>) -> &'a str {
    for suffix in ["_bucket", "_sum", "_count", "_created", "_total"] {
        if let Some(base) = name.strip_suffix(suffix) {
            if declared.get(base).is_some_and(|f| {
                matches!(f.kind, MetricType::Histogram | MetricType::Summary | MetricType::Counter)
            }) {
                return base;
            }
        }
    }
    name
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "NaN" => Some(f64::NAN),
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        _ => s.parse().ok(),
    }
}

fn is_name_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':'
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// Parse `{a="x",b="y\"z"}` starting at `s[0] == '{'`; returns the labels and the rest.
/// Label pairs in order.
type Labels = Vec<(String, String)>;

fn parse_labels(s: &str) -> Result<(Labels, &str), String> {
    let mut labels = Vec::new();
    let mut rest = &s[1..];
    loop {
        rest = rest.trim_start();
        if let Some(r) = rest.strip_prefix('}') {
            return Ok((labels, r));
        }
        let end = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
        let name = &rest[..end];
        if name.is_empty() || !name.starts_with(is_name_start) {
            return Err(format!("bad label name at {rest:?}"));
        }
        rest = rest[end..].trim_start();
        rest = rest.strip_prefix('=').ok_or_else(|| format!("expected '=' after label {name}"))?;
        rest = rest.trim_start();
        rest =
            rest.strip_prefix('"').ok_or_else(|| format!("label {name}: value must be quoted"))?;
        let mut value = String::new();
        let mut chars = rest.char_indices();
        let close = loop {
            match chars.next() {
                None => return Err(format!("label {name}: unterminated value")),
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, '\\')) => value.push('\\'),
                    Some((_, '"')) => value.push('"'),
                    Some((_, c)) => {
                        value.push('\\');
                        value.push(c);
                    }
                    None => return Err(format!("label {name}: unterminated escape")),
                },
                Some((_, c)) => value.push(c),
            }
        };
        labels.push((name.to_owned(), value));
        rest = rest[close + 1..].trim_start();
        if let Some(r) = rest.strip_prefix(',') {
            rest = r;
        } else if !rest.starts_with('}') {
            return Err(format!("expected ',' or '}}' after label {name}"));
        }
    }
}

/// Parse a whole exposition.
pub fn parse(text: &str) -> Result<Exposition, ParseError> {
    let mut fams: BTreeMap<String, Family> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let err = |reason: String| ParseError { line, reason };
        let l = raw.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(c) = l.strip_prefix('#') {
            let c = c.trim_start();
            let (kw, rest) = c.split_once(char::is_whitespace).unwrap_or((c, ""));
            let (name, arg) =
                rest.trim_start().split_once(char::is_whitespace).unwrap_or((rest.trim(), ""));
            match kw {
                "TYPE" => {
                    let kind = match arg.trim() {
                        "counter" => MetricType::Counter,
                        "gauge" => MetricType::Gauge,
                        "histogram" => MetricType::Histogram,
                        "summary" => MetricType::Summary,
                        "untyped" | "unknown" => MetricType::Untyped,
                        other => return Err(err(format!("unknown metric type {other:?}"))),
                    };
                    let f = fams.entry(name.to_owned()).or_insert_with(|| Family {
                        name: name.to_owned(),
                        kind,
                        help: None,
                        samples: Vec::new(),
                    });
                    f.kind = kind;
                }
                "HELP" => {
                    let help = arg.replace("\\n", "\n").replace("\\\\", "\\");
                    fams.entry(name.to_owned())
                        .or_insert_with(|| Family {
                            name: name.to_owned(),
                            kind: MetricType::Untyped,
                            help: None,
                            samples: Vec::new(),
                        })
                        .help = Some(help);
                }
                _ => {} // a comment
            }
            continue;
        }
        let end = l.find(|c: char| !is_name_char(c)).unwrap_or(l.len());
        let name = &l[..end];
        if name.is_empty() || !name.starts_with(is_name_start) {
            return Err(err(format!("bad metric name in {l:?}")));
        }
        let mut rest = &l[end..];
        let mut labels = Vec::new();
        if rest.starts_with('{') {
            let (lb, r) = parse_labels(rest).map_err(err)?;
            labels = lb;
            rest = r;
        }
        let mut parts = rest.split_whitespace();
        let v = parts.next().ok_or_else(|| err(format!("{name}: no value")))?;
        let value = parse_value(v).ok_or_else(|| err(format!("{name}: bad value {v:?}")))?;
        let timestamp_ms = match parts.next() {
            Some(t) => Some(t.parse().map_err(|_| err(format!("{name}: bad timestamp {t:?}")))?),
            None => None,
        };
        if parts.next().is_some() {
            return Err(err(format!("{name}: trailing text")));
        }
        let fam = family_of(name, &fams).to_owned();
        fams.entry(fam.clone())
            .or_insert_with(|| Family {
                name: fam,
                kind: MetricType::Untyped,
                help: None,
                samples: Vec::new(),
            })
            .samples
            .push(Sample { name: name.to_owned(), labels, value, timestamp_ms });
    }
    Ok(Exposition { families: fams })
}

impl Exposition {
    /// The sum over every label set of the samples named `name` (e.g. a counter across
    /// engines, or a histogram's `_sum`), or `None` when there is no such sample.
    pub fn total(&self, name: &str) -> Option<f64> {
        let fam = family_of(name, &self.families);
        let f = self.families.get(fam)?;
        let mut found = false;
        let mut sum = 0.0;
        for s in f.samples.iter().filter(|s| s.name == name) {
            found = true;
            sum += s.value;
        }
        found.then_some(sum)
    }

    /// The first of `names` present, with its total.
    pub fn first_total<'a>(&self, names: &[&'a str]) -> Option<(&'a str, f64)> {
        names.iter().find_map(|n| self.total(n).map(|v| (*n, v)))
    }

    /// Cumulative bucket counts of a histogram summed over label sets other than `le`,
    /// sorted by upper bound.
    pub fn buckets(&self, family: &str) -> Vec<(f64, f64)> {
        let Some(f) = self.families.get(family) else { return Vec::new() };
        let bucket = format!("{family}_bucket");
        let mut by: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for s in f.samples.iter().filter(|s| s.name == bucket) {
            let Some(le) = s.label("le").and_then(parse_value) else { continue };
            let e = by.entry(le.to_bits()).or_insert((le, 0.0));
            e.1 += s.value;
        }
        let mut v: Vec<(f64, f64)> = by.into_values().collect();
        v.sort_by(|a, b| a.0.total_cmp(&b.0));
        v
    }
}
