//! A reader of the Prometheus text exposition format (version 0.0.4), strict enough to tell
//! whether an endpoint's text is one: every sample belongs to a family declared before it by
//! `# HELP` and `# TYPE`, label values are quoted with the format's escapes, values are numbers.

use std::collections::BTreeMap;

/// A family's declaration.
#[derive(Debug)]
pub struct Family {
    /// `counter`, `gauge`, `histogram`, ...
    pub kind: String,
    /// Its help text, unescaped.
    pub help: String,
}

/// One sample line.
#[derive(Debug)]
pub struct Sample {
    /// The sample's name (a histogram's with its `_bucket`, `_sum` or `_count` suffix).
    pub name: String,
    /// The family it belongs to.
    pub family: String,
    /// Its labels, values unescaped.
    pub labels: BTreeMap<String, String>,
    /// Its value.
    pub value: f64,
}

/// A whole exposition.
#[derive(Debug, Default)]
pub struct Exposition {
    /// Families by name.
    pub families: BTreeMap<String, Family>,
    /// Samples in order.
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The value of the sample `name` whose labels include `labels`.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.samples
            .iter()
            .find(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
    }
}

fn valid_name(n: &str) -> bool {
    let mut c = n.chars();
    matches!(c.next(), Some(ch) if ch.is_ascii_alphabetic() || ch == '_' || ch == ':')
        && c.all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == ':')
}

/// Read `text`, or say which line is not the format and why.
pub fn parse(text: &str) -> Result<Exposition, String> {
    let mut e = Exposition::default();
    let mut help: BTreeMap<String, String> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |why: &str| format!("line {}: {why}: {line:?}", i + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, h) = rest
                .split_once(' ')
                .ok_or_else(|| bad("HELP without text"))?;
            if !valid_name(name) {
                return Err(bad("bad metric name"));
            }
            let h = h.replace("\\n", "\n").replace("\\\\", "\\");
            help.insert(name.to_string(), h);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest
                .split_once(' ')
                .ok_or_else(|| bad("TYPE without a type"))?;
            if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                return Err(bad("unknown type"));
            }
            let help = help
                .get(name)
                .cloned()
                .ok_or_else(|| bad("TYPE before its HELP"))?;
            if e.families.contains_key(name) {
                return Err(bad("family declared twice"));
            }
            let kind = kind.to_string();
            e.families.insert(name.to_string(), Family { kind, help });
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        // name{labels} value
        let (name, rest) = match line.find(['{', ' ']) {
            Some(p) => line.split_at(p),
            None => return Err(bad("a sample without a value")),
        };
        if !valid_name(name) {
            return Err(bad("bad metric name"));
        }
        let mut labels = BTreeMap::new();
        let rest = if let Some(mut r) = rest.strip_prefix('{') {
            loop {
                if let Some(after) = r.strip_prefix('}') {
                    break after;
                }
                let (key, after) = r
                    .split_once("=\"")
                    .ok_or_else(|| bad("label without =\""))?;
                if !valid_name(key) {
                    return Err(bad("bad label name"));
                }
                let mut value = String::new();
                let mut chars = after.char_indices();
                let end = loop {
                    match chars.next() {
                        Some((_, '\\')) => match chars.next() {
                            Some((_, '\\')) => value.push('\\'),
                            Some((_, '"')) => value.push('"'),
                            Some((_, 'n')) => value.push('\n'),
                            _ => return Err(bad("bad escape in a label value")),
                        },
                        Some((p, '"')) => break p,
                        Some((_, c)) => value.push(c),
                        None => return Err(bad("label value not closed")),
                    }
                };
                labels.insert(key.to_string(), value);
                r = &after[end + 1..];
                r = r.strip_prefix(',').unwrap_or(r);
            }
        } else {
            rest
        };
        let value_text = rest.trim().split(' ').next().unwrap_or("");
        let value = match value_text {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| bad("value not a number"))?,
        };
        let family = if e.families.contains_key(name) {
            name.to_string()
        } else {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|s| name.strip_suffix(s))
                .find(|f| e.families.get(*f).is_some_and(|f| f.kind == "histogram"))
                .map(str::to_string)
                .ok_or_else(|| bad("sample of no family declared before it"))?
        };
        e.samples.push(Sample {
            name: name.to_string(),
            family,
            labels,
            value,
        });
    }
    Ok(e)
}
