//! Results for people or for programs: every command that prints results takes `--json`
//! ([`JsonFlag`]) and prints through one [`Output`], so that the choice between the text and
//! one JSON object per line is made here, once, and not in each command.

use serde::Serialize;
use std::io::Write;

/// The `--json` flag, shared by the commands that print results.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct JsonFlag {
    /// Print the results as JSON on standard output, one object per line (its `kind` field
    /// says what it is), instead of the text; messages for people stay on standard error.
    #[arg(long)]
    pub json: bool,
}

/// Where a command's results go: text, or JSON lines.
#[derive(Clone, Copy, Debug)]
pub struct Output {
    json: bool,
}

impl Output {
    /// JSON lines if `flag` says so, else text.
    pub fn new(flag: JsonFlag) -> Output {
        Output { json: flag.json }
    }

    /// Whether results go out as JSON lines.
    pub fn is_json(&self) -> bool {
        self.json
    }

    /// A line for people about the run (a header, a note): on standard output with the text,
    /// on standard error beside JSON lines, which it would otherwise break.
    pub fn note(&self, line: &str) {
        if self.json {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// One result on standard output: `value` as one JSON line, or the text `human` makes
    /// (one line or several).
    pub fn result<T: Serialize>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        let mut out = std::io::stdout().lock();
        self.write(&mut out, value, human)?;
        // Line by line: whoever reads the stream sees each result when it happens.
        out.flush()?;
        Ok(())
    }

    /// A result that the text form gives people on standard error (a summary beside the
    /// output proper): there as text, on standard output as a JSON line.
    pub fn summary<T: Serialize>(
        &self,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            self.result(value, String::new)
        } else {
            // One write: the line does not interleave with another process's on a shared
            // terminal (members started together).
            let _ = std::io::stderr().write_all(format!("{}\n", human()).as_bytes());
            Ok(())
        }
    }

    fn write<T: Serialize>(
        &self,
        out: &mut impl Write,
        value: &T,
        human: impl FnOnce() -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            serde_json::to_writer(&mut *out, value)?;
            writeln!(out)?;
        } else {
            writeln!(out, "{}", human())?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize)]
    #[serde(tag = "kind", rename_all = "snake_case")]
    enum Line {
        Reply { from: u32, text: String },
    }

    fn written(json: bool) -> String {
        let mut buf = Vec::new();
        let line = Line::Reply {
            from: 7,
            text: "a \"b\"\n".into(),
        };
        Output { json }
            .write(&mut buf, &line, || "7: a \"b\"".into())
            .unwrap();
        String::from_utf8(buf).unwrap()
    }

    #[test]
    fn a_result_is_one_json_line_or_the_text() {
        let j = written(true);
        assert_eq!(j.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&j).unwrap();
        assert_eq!(v["kind"], "reply");
        assert_eq!(v["from"], 7);
        assert_eq!(v["text"], "a \"b\"\n");
        assert_eq!(written(false), "7: a \"b\"\n");
    }
}
