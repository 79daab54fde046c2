//! `rmcast call --group G "request"`: RMP's multi-RPC from the command line. The process does
//! not join the group (the `ring` engine); it multicasts the request to the group, which
//! orders and delivers it like a member's message, and prints the answer of the member holding
//! the handler lock the request names (`rmcast member --engine ring --handler 0` takes lock 0
//! and answers). With `--no-handler` it prints the group's acknowledgement of delivery instead.
//!
//! ```text
//! rmcast member --engine ring --group kv --handler 0     # terminals 1 and 2
//! rmcast call --group kv "hello"                         # terminal 3
//! ```

use crate::member::{parse_qos, NetArgs, QOS_HELP};
use crate::output::{JsonFlag, Output};
use anyhow::Context;
use clap::Args;
use rmcast::{EngineChoice, GroupConfig, Node, OpenMode};
use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// The engine of the groups `rmcast call` calls: RMP's, the one with multi-RPC.
const ENGINE: &str = "ring";

/// Arguments of `rmcast call`.
#[derive(Args, Debug)]
pub struct CallArgs {
    /// The request (sent as one message).
    pub request: String,
    /// Group name (a group run by `rmcast member --engine ring`).
    #[arg(short = 'g', long, value_parser = crate::names::parse_group_name)]
    pub group: String,
    /// Handler lock (0 to 5) whose holder answers.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..6),
          conflicts_with = "no_handler")]
    pub handler: u8,
    /// Name no handler: wait only for the group's acknowledgement of delivery.
    #[arg(long)]
    pub no_handler: bool,
    #[arg(long, value_parser = parse_qos, help = QOS_HELP)]
    pub qos: Option<rmcast::Qos>,
    /// How long to wait for the answer (a bare number: milliseconds).
    #[arg(long = "timeout", alias = "timeout-ms", default_value = "5s", value_name = "DURATION", value_parser = crate::dur::ms(1, 3_600_000))]
    pub timeout_ms: u64,
    /// Send the request this many times, one after the other, and print each round trip.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub repeat: u64,
    #[command(flatten)]
    pub net: NetArgs,
    #[command(flatten)]
    pub keys: crate::keys::KeyArgs,
    #[command(flatten)]
    pub output: JsonFlag,
}

/// What `rmcast call --json` prints, one object per line.
#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum CallLine<'a> {
    /// The handler's answer to one call.
    Reply {
        group: &'a str,
        from: u32,
        /// The answer as text (bytes that are not UTF-8 replaced).
        reply: String,
        rtt_us: u64,
    },
    /// A call without a handler: the group acknowledged its delivery.
    Delivered { group: &'a str, rtt_us: u64 },
    /// After `--repeat`: the round trips' percentiles.
    Summary {
        calls: usize,
        p50_us: u64,
        p99_us: u64,
        max_us: u64,
    },
}

/// Run `rmcast call`.
pub fn run(a: CallArgs) -> anyhow::Result<ExitCode> {
    let qos = crate::member::qos_or_default(a.qos, ENGINE, 0)?;
    let node = Node::new(a.net.node_config()).context("starting the node")?;
    let mut cfg = GroupConfig::new(a.group.clone()).mode(OpenMode::Client);
    cfg.engine = EngineChoice::named(ENGINE)?;
    cfg.qos = qos;
    cfg.keys = a.keys.keyring()?;
    let mut group = node
        .open_group(cfg)
        .with_context(|| format!("opening group {:?}", a.group))?;
    let handler = (!a.no_handler).then_some(a.handler);
    let timeout = Duration::from_millis(a.timeout_ms);
    let out = Output::new(a.output);
    let us = |d: Duration| d.as_micros() as u64;
    let mut rtts = Vec::new();
    for _ in 0..a.repeat {
        let t = Instant::now();
        match group.call(a.request.clone(), qos, handler, timeout) {
            Ok(Some(r)) => {
                let rtt = t.elapsed();
                rtts.push(rtt);
                let reply = String::from_utf8_lossy(&r.payload);
                let line = CallLine::Reply {
                    group: &a.group,
                    from: r.from.0,
                    reply: reply.to_string(),
                    rtt_us: us(rtt),
                };
                out.result(&line, || format!("reply from member {}: {reply}", r.from))?;
            }
            Ok(None) => {
                let rtt = t.elapsed();
                rtts.push(rtt);
                let line = CallLine::Delivered {
                    group: &a.group,
                    rtt_us: us(rtt),
                };
                out.result(&line, || format!("delivered to group {:?}", a.group))?;
            }
            Err(rmcast::Error::Timeout) => {
                eprintln!(
                    "rmcast: no answer from group {:?} within {} ms{}",
                    a.group,
                    a.timeout_ms,
                    match handler {
                        Some(h) => format!(
                            " (is a member running with --engine ring and holding handler \
                             lock {h}, e.g. `rmcast member --engine ring --handler {h}`?)"
                        ),
                        None => " (is a member running with --engine ring?)".into(),
                    }
                );
                return Ok(ExitCode::FAILURE);
            }
            Err(e) => return Err(e).context("calling the group"),
        }
    }
    if a.repeat > 1 {
        rtts.sort();
        let p = |q: f64| rtts[((rtts.len() - 1) as f64 * q).round() as usize];
        let max = rtts[rtts.len() - 1];
        let line = CallLine::Summary {
            calls: rtts.len(),
            p50_us: us(p(0.5)),
            p99_us: us(p(0.99)),
            max_us: us(max),
        };
        out.summary(&line, || {
            format!(
                "{} calls: round trip p50 {:?}, p99 {:?}, max {:?}",
                rtts.len(),
                p(0.5),
                p(0.99),
                max
            )
        })?;
    }
    Ok(ExitCode::SUCCESS)
}
