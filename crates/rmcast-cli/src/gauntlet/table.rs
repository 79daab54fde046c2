//! The gauntlet's results: one [`RunResult`] per run, gathered per cell (engine x fault x
//! beside busy loops or not) and printed as a markdown table.

use std::fmt::Write as _;
use std::time::Duration;

/// How one run of a cell went.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunResult {
    /// Whether every check of the cell held.
    pub passed: bool,
    /// From the first member's start to every member in one view of all of them.
    pub formation: Option<Duration>,
    /// From the fault to the survivors' view change or failure notice (the last of them).
    pub detection: Option<Duration>,
    /// From the fault (or, for the load cells, from the first line written) to deliveries
    /// flowing again at every survivor (the load cells: to every line delivered everywhere).
    pub recovery: Option<Duration>,
    /// What failed, or a remark on a pass (empty: nothing to say).
    pub note: String,
}

/// The runs of one cell.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Engine name.
    pub engine: String,
    /// Fault name.
    pub fault: String,
    /// Beside two busy loops.
    pub busy: bool,
    /// The command that runs this cell again.
    pub command: String,
    /// One entry per run made.
    pub runs: Vec<RunResult>,
}

/// Median and worst of the values present, in seconds to two decimals: `0.41 / 0.87`, or `-`
/// when no run measured it.
pub fn median_worst(values: impl Iterator<Item = Option<Duration>>) -> String {
    let mut v: Vec<Duration> = values.flatten().collect();
    if v.is_empty() {
        return "-".to_string();
    }
    v.sort_unstable();
    let median = if v.len() % 2 == 1 {
        v[v.len() / 2]
    } else {
        (v[v.len() / 2 - 1] + v[v.len() / 2]) / 2
    };
    let worst = v[v.len() - 1];
    format!("{:.2} / {:.2}", median.as_secs_f64(), worst.as_secs_f64())
}

impl Cell {
    /// Runs that passed.
    pub fn passed(&self) -> usize {
        self.runs.iter().filter(|r| r.passed).count()
    }

    /// One markdown table row.
    pub fn row(&self) -> String {
        format!(
            "| {} | {} | {} | {}/{} | {} | {} | {} | `{}` |",
            self.engine,
            self.fault,
            if self.busy { "yes" } else { "no" },
            self.passed(),
            self.runs.len(),
            median_worst(self.runs.iter().map(|r| r.formation)),
            median_worst(self.runs.iter().map(|r| r.detection)),
            median_worst(self.runs.iter().map(|r| r.recovery)),
            self.command
        )
    }
}

/// The markdown table of `cells`, then one line per failed run (its cell, its number, why).
pub fn markdown(cells: &[Cell]) -> String {
    let mut out = String::new();
    out.push_str(
        "| engine | fault | busy | passed/made | formation s (median / worst) | detection s | recovery s | reproduce |\n",
    );
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for c in cells {
        out.push_str(&c.row());
        out.push('\n');
    }
    let failures: Vec<String> = cells
        .iter()
        .flat_map(|c| {
            c.runs
                .iter()
                .enumerate()
                .filter(|(_, r)| !r.passed)
                .map(|(i, r)| {
                    format!(
                        "- {} / {}{} run {}: {}",
                        c.engine,
                        c.fault,
                        if c.busy { " (busy)" } else { "" },
                        i + 1,
                        r.note
                    )
                })
        })
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\nFailed runs:\n");
        for f in failures {
            out.push_str(&f);
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(passed: bool, rec_ms: Option<u64>) -> RunResult {
        RunResult {
            passed,
            formation: Some(Duration::from_millis(100)),
            detection: None,
            recovery: rec_ms.map(Duration::from_millis),
            note: if passed { String::new() } else { "why".into() },
        }
    }

    /// Median of an odd and an even count, the worst, and `-` when nothing was measured.
    #[test]
    fn median_and_worst() {
        let ms = |v: &[u64]| {
            median_worst(
                v.iter()
                    .map(|&m| Some(Duration::from_millis(m)))
                    .collect::<Vec<_>>()
                    .into_iter(),
            )
        };
        assert_eq!(ms(&[300, 100, 200]), "0.20 / 0.30");
        assert_eq!(ms(&[100, 400, 200, 300]), "0.25 / 0.40");
        assert_eq!(median_worst([None, None].into_iter()), "-");
        assert_eq!(
            median_worst([None, Some(Duration::from_millis(1500))].into_iter()),
            "1.50 / 1.50"
        );
    }

    /// A row counts passes over runs made, and a failed run is listed with its reason.
    #[test]
    fn the_table_counts_and_lists_failures() {
        let cell = Cell {
            engine: "ring".into(),
            fault: "kill-orderer".into(),
            busy: true,
            command: "rmcast gauntlet --engine ring --fault kill-orderer --busy".into(),
            runs: vec![run(true, Some(500)), run(false, None), run(true, Some(700))],
        };
        let md = markdown(&[cell]);
        assert!(
            md.contains("| ring | kill-orderer | yes | 2/3 | 0.10 / 0.10 | - | 0.60 / 0.70 | `rmcast gauntlet --engine ring --fault kill-orderer --busy` |"),
            "{md}"
        );
        assert!(
            md.contains("- ring / kill-orderer (busy) run 2: why"),
            "{md}"
        );
    }
}
