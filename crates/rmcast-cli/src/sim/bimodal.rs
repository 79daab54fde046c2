//! `rmcast sim --experiment bimodal`: the bimodal delivery distribution of "Bimodal Multicast"
//! (Kenneth P. Birman, Mark Hayden, Öznur Özkasap, Zhen Xiao, Mihai Budiu and Yaron Minsky),
//! measured on the gossip engine in the simulator beside the paper's Markov-chain prediction
//! for the same parameters ([`rmcast_sim::bimodal`], whose documentation maps the engine's
//! protocol onto the model's parameters and says where they differ).
//!
//! For each group size of `--members` (default 50 and 128), one sender multicasts `--messages`
//! messages, `--spacing-rounds` gossip rounds apart; each first-phase copy is lost with
//! `--loss` and then with `--first-loss` (1: the paper's worst case, only the sender holds a
//! new message), every other datagram with `--loss`; members gossip to `--fanout` others a
//! round and keep a message `--gc-rounds` rounds; `--crashed` members are down from the start.
//! Prints, per group size, for each count `k` of live members that delivered a message: the
//! measured fraction of the messages, and the predicted probability with the paper's exchange
//! (push) and with the engine's pull added; with `--plot FILE` the same as an SVG with a
//! logarithmic y axis, one panel per group size.

use super::args::SimArgs;
use super::parallel::run_parallel;
use anyhow::Context;
use plotters::prelude::*;
use rmcast_sim::bimodal::{mass, middle_third, Measured, Setup};
use std::io::Write;
use std::process::ExitCode;

/// Group sizes without `--members`.
const DEFAULT_MEMBERS: [u32; 2] = [50, 128];
/// The plot's floor: smaller probabilities are drawn there (the measured fractions cannot go
/// below one message in `--messages`).
const FLOOR: f64 = 1e-12;

/// The experiment's settings for a group of `members` from the command line.
fn setup(args: &SimArgs, members: u32) -> Setup {
    let d = Setup::default();
    let gc_rounds = args.gc_rounds.unwrap_or(d.gc_rounds);
    let loss_rounds = args.loss_rounds.unwrap_or(d.loss_rounds);
    Setup {
        members,
        crashed: args.crashed,
        fanout: args.fanout.unwrap_or(d.fanout),
        gc_rounds,
        loss_rounds,
        loss: args.loss.unwrap_or(d.loss),
        first_loss: args.first_loss.unwrap_or(d.first_loss),
        messages: args.messages.unwrap_or(d.messages),
        spacing_rounds: args.spacing_rounds.unwrap_or(gc_rounds + loss_rounds + 2),
        latency_ms: args.latency,
        seed: args.seed.unwrap_or(0),
        ..d
    }
}

/// Runs the experiment on `threads` threads.
pub fn run(args: &SimArgs, threads: usize, out: &mut dyn Write) -> anyhow::Result<ExitCode> {
    let members = if args.members.is_empty() {
        DEFAULT_MEMBERS.to_vec()
    } else {
        args.members.clone()
    };
    let setups: Vec<Setup> = members.iter().map(|&n| setup(args, n)).collect();
    for s in &setups {
        s.validate().map_err(anyhow::Error::msg)?;
    }
    let s = &setups[0];
    writeln!(
        out,
        "rmcast sim --experiment bimodal --members {} --crashed {} --fanout {} --gc-rounds {} \
         --loss-rounds {} --loss {} --first-loss {} --messages {} --spacing-rounds {} \
         --latency {} --seed {}",
        members
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        s.crashed,
        s.fanout,
        s.gc_rounds,
        s.loss_rounds,
        s.loss,
        s.first_loss,
        s.messages,
        s.spacing_rounds,
        s.latency_ms,
        s.seed
    )?;
    writeln!(
        out,
        "one sender (host 1) multicasts {} messages, one every {} rounds of {} ms; each \
         first-phase copy is lost with {} and then with {}, every other datagram with {}; \
         members gossip to {} others a round and keep a message {} rounds after it arrived \
         (so gossip it {} times); {} member(s) crashed before the first message. Model: \
         R = {} rounds, first multicast reaching a member with {:.4}",
        s.messages,
        s.spacing_rounds,
        s.round.as_millis(),
        s.loss,
        s.first_loss,
        s.loss,
        s.fanout,
        s.gc_rounds,
        s.gc_rounds - 1,
        s.crashed,
        s.gc_rounds - 1,
        s.model(false).first_reach,
    )?;
    let results: Vec<Measured> = run_parallel(&setups, threads, Setup::measure)
        .into_iter()
        .collect::<Result<_, String>>()
        .map_err(anyhow::Error::msg)?;
    for (s, m) in setups.iter().zip(&results) {
        print_table(out, s, m)?;
    }
    if let Some(path) = &args.plot {
        plot(path, &setups, &results)?;
        writeln!(out, "\nfigure written to {}", path.display())?;
    }
    let bad: Vec<&Measured> = results.iter().filter(|m| !m.passed).collect();
    if bad.is_empty() {
        writeln!(out, "\nevery run passed every checker")?;
        return Ok(ExitCode::SUCCESS);
    }
    for m in bad {
        writeln!(
            out,
            "\nthe run with {} live members failed a checker:",
            m.live
        )?;
        for line in m.summary.lines().take(6) {
            writeln!(out, "  {line}")?;
        }
    }
    Ok(ExitCode::from(1))
}

fn print_table(out: &mut dyn Write, s: &Setup, m: &Measured) -> std::io::Result<()> {
    let model = s.model(false);
    writeln!(
        out,
        "\nn = {} ({} live): {} messages, q = {:.5} (push), {:.5} (push and pull); {} loss \
         up-calls; {:.0} s of virtual time",
        s.members,
        m.live,
        m.messages,
        model.escape(),
        s.model(true).escape(),
        m.loss_upcalls,
        m.simulated.as_secs_f64()
    )?;
    writeln!(
        out,
        "{:>5} {:>9} {:>10} {:>12} {:>12}",
        "k", "messages", "measured", "push", "push+pull"
    )?;
    for k in 0..m.histogram.len() {
        writeln!(
            out,
            "{k:>5} {:>9} {:>10.5} {:>12.3e} {:>12.3e}",
            m.histogram[k],
            m.fraction(k),
            m.push[k],
            m.push_pull[k]
        )?;
    }
    let n = m.live as usize;
    let mid = middle_third(m.live);
    let parts = [
        ("almost none", 0..mid.start),
        ("the middle third", mid.clone()),
        ("almost all", mid.end..n + 1),
    ];
    for (name, r) in parts {
        writeln!(
            out,
            "k in {}..={} ({name}): measured {:.4}, push {:.3e}, push+pull {:.3e}",
            r.start,
            r.end - 1,
            m.fraction_in(r.clone()),
            mass(&m.push, r.clone()),
            mass(&m.push_pull, r.clone())
        )?;
    }
    Ok(())
}

/// One panel per group size: the measured fractions as dots, the two predictions as lines, on
/// a logarithmic y axis (values below [`FLOOR`] drawn at it).
fn plot(path: &std::path::Path, setups: &[Setup], results: &[Measured]) -> anyhow::Result<()> {
    let root = SVGBackend::new(path, (900 * results.len() as u32, 560)).into_drawing_area();
    let draw = || -> Result<(), Box<dyn std::error::Error + '_>> {
        root.fill(&WHITE)?;
        let areas = root.split_evenly((1, results.len()));
        for ((area, s), m) in areas.iter().zip(setups).zip(results) {
            let n = m.live as f64;
            let title = format!(
                "n = {}{}: members delivering a message ({} messages)",
                s.members,
                if s.crashed > 0 {
                    format!(" ({} crashed)", s.crashed)
                } else {
                    String::new()
                },
                m.messages
            );
            let mut chart = ChartBuilder::on(area)
                .caption(title, ("sans-serif", 20))
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(80)
                .build_cartesian_2d(0f64..n, (FLOOR..1.0f64).log_scale())?;
            chart
                .configure_mesh()
                .x_desc("k: live members that delivered the message")
                .y_desc("fraction of messages / probability")
                .y_label_formatter(&|y| format!("{y:.0e}"))
                .draw()?;
            let line = |p: &[f64]| -> Vec<(f64, f64)> {
                p.iter()
                    .enumerate()
                    .map(|(k, &v)| (k as f64, v.max(FLOOR)))
                    .collect()
            };
            let blue = RGBColor(31, 119, 180);
            let orange = RGBColor(255, 127, 14);
            let red = RGBColor(214, 39, 40);
            chart
                .draw_series(LineSeries::new(line(&m.push), blue.stroke_width(2)))?
                .label("predicted: the paper's recurrence (push, 3 datagrams)")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], blue));
            chart
                .draw_series(DashedLineSeries::new(
                    line(&m.push_pull),
                    6,
                    4,
                    orange.stroke_width(2),
                ))?
                .label("predicted: with the engine's pull (2 datagrams)")
                .legend(move |(x, y)| PathElement::new([(x, y), (x + 18, y)], orange));
            chart
                .draw_series(
                    (0..m.histogram.len())
                        .filter(|&k| m.histogram[k] > 0)
                        .map(|k| Circle::new((k as f64, m.fraction(k)), 4, red.filled())),
                )?
                .label("measured: fraction of the messages (gossip engine, simulator)")
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, red.filled()));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperMiddle)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()?;
        }
        root.present()?;
        Ok(())
    };
    draw()
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("drawing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::parse_args as parse;

    #[test]
    fn flags_set_the_experiment_and_bad_ones_are_refused() {
        let a = parse(
            "--experiment bimodal --members 20 --fanout 2 --gc-rounds 5 --loss-rounds 7 \
             --loss 0.2 --first-loss 0.9 --crashed 3 --messages 10",
        );
        let s = setup(&a, 20);
        assert_eq!(
            (s.fanout, s.gc_rounds, s.loss_rounds, s.crashed),
            (2, 5, 7, 3)
        );
        assert_eq!((s.loss, s.first_loss, s.messages), (0.2, 0.9, 10));
        // By default a message is settled before the next one goes.
        assert_eq!(s.spacing_rounds, 5 + 7 + 2);
        assert_eq!(s.model(false).members, 17);
        assert!(s.validate().is_ok());
        let e = setup(&parse("--experiment bimodal --crashed 19"), 20)
            .validate()
            .unwrap_err();
        assert!(e.contains("--crashed"), "{e}");
        let e = setup(&parse("--experiment bimodal --first-loss 1.5"), 20)
            .validate()
            .unwrap_err();
        assert!(e.contains("--first-loss"), "{e}");
        let e = setup(&parse("--experiment bimodal --gc-rounds 1"), 20)
            .validate()
            .unwrap_err();
        assert!(e.contains("--gc-rounds"), "{e}");
    }
}
