//! `rmcast`: the command-line tool of the rmcast reliable multicast toolkit.

mod bench;
mod call;
mod config;
mod cpu;
mod demo;
mod dur;
mod gauntlet;
mod iface;
mod keys;
mod member;
mod names;
mod output;
mod plot;
mod receive;
mod send;
mod signals;
mod sim;
mod stats;
mod txn;
mod txn_bench;
mod worker;
mod workers;

use clap::{Parser, Subcommand};

/// rmcast: reliable multicast and group communication.
#[derive(Parser, Debug)]
#[command(name = "rmcast", version, about, long_about = None, after_help = EXIT_STATUS)]
// A flag given twice counts once, the last time: how typed flags override a config file.
#[command(args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The exit statuses of every command, printed under `--help` (and in the man page).
const EXIT_STATUS: &str = "Exit status: 0 success; 1 the command ran but what it checks failed \
(demo, bench, gauntlet or sim verification, a transaction that failed, a member expelled); 2 a \
wrong argument or an error that stopped the command (said on standard error); 3 `rmcast txn`: \
every transaction committed but replies it waited for are missing.\n\
Durations are written with their unit (3s, 500ms, 1m30s); a bare number is in the unit the \
flag's help names.";

#[derive(Subcommand, Debug)]
enum Command {
    /// Start a group of member processes on this host, exchange messages and verify the order.
    Demo(demo::DemoArgs),
    /// Join a group: stdin lines are sent, deliveries and view changes are printed.
    Member(member::MemberArgs),
    /// Measure throughput and latency beside raw UDP multicast on this host.
    Bench(bench::BenchArgs),
    /// Run an engine in the deterministic simulator under faults and check it.
    Sim(sim::SimArgs),
    /// Show every member of a group on this host with its counters, refreshed each second.
    Stat(stats::StatArgs),
    /// Config files: `rmcast config --print-defaults > member.toml`, then
    /// `rmcast member --config member.toml`.
    Config(ConfigArgs),
    /// Write a new random group key (32 bytes, mode 0600) for --key-file.
    Keygen(keys::KeygenArgs),
    /// Multicast a file (RMTP, the `tree` engine) to every `rmcast receive` of the group.
    Send(send::SendArgs),
    /// Receive a file sent by `rmcast send`, verify its sha256 and exit.
    Receive(receive::ReceiveArgs),
    /// Send a request to a ring group from outside it and print the handler's answer
    /// (RMP's multi-RPC; `rmcast member --engine ring --handler 0` answers).
    Call(call::CallArgs),
    /// Ask a group a question by multicast transaction and print each reply (the `txn` engine).
    ///
    /// Exit status: 0 when every transaction committed and the replies --wait asks for came;
    /// 1 when a transaction failed (committed nowhere) or did not end; 3 when every one
    /// committed but replies asked for are missing (the servers that committed and did not
    /// reply within --reply-timeoutare named on standard error).
    Txn(txn::AskArgs),
    /// Answer the group's transactions with a command's output (`rmcast txn` asks).
    TxnServe(txn::ServeArgs),
    /// Measure multicast transactions beside unicast (the Multidriver paper's Tables 1-3) with
    /// receiver processes on this host.
    ///
    /// For each number of receivers N it starts N receiver processes and measures, every column
    /// in the same run and in turns: Table 1, one --file-bytes file to the N receivers by one
    /// multicast transaction (to the commit) beside the same file sent to them one after the
    /// other by a unicast transaction each and over TCP; Tables 2-3, the round trip of a small
    /// request that every receiver answers, by one multicast transaction beside N parallel TCP
    /// request/responses and beside a series of N unicast transactions. After Dempsey, Fenton
    /// and Weaver, "The Multidriver", section 5. Loopback only.
    TxnBench(txn_bench::TxnBenchArgs),
    /// One receiver of `txn-bench` (spawned by it).
    #[command(hide = true)]
    TxnBenchWorker(txn_bench::BenchWorkerArgs),
    /// Every engine through the same faults on real member processes on this host, each run
    /// checked against what the engine declares; prints a table of passes and timings.
    ///
    /// Cells are engine x fault (members started together, a pipe of 10,000 lines, everyone
    /// sending, kill -9 of the orderer and of a member, SIGSTOP for 2 s and 10 s, the orderer
    /// leaving a group of two, everyone leaving, a slow reader, 10 % and 20 % receive loss),
    /// quiet or beside two busy loops. `rmcast gauntlet --runs 10 --busy both --out
    /// docs/RELIABILITY.md` runs everything (docs/RELIABILITY.md says how long it takes).
    Gauntlet(gauntlet::GauntletArgs),
    /// One busy loop of `gauntlet --busy` (spawned by it).
    #[command(hide = true)]
    BusyLoop(gauntlet::SpinArgs),
    /// One measured group member (spawned by `demo` and `bench`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
    /// Print a shell completion script: `rmcast completions bash > /etc/bash_completion.d/rmcast`
    /// (bash, zsh, fish, elvish, powershell).
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Write the man pages: rmcast(1) and one per command (rmcast-member(1), ...).
    Man {
        /// Directory to write them to [default: print rmcast(1) to standard output].
        #[arg(long)]
        out: Option<std::path::PathBuf>,
    },
}

/// The log filter: `RUST_LOG` (tracing-subscriber's `EnvFilter` syntax, e.g. `rmcast=debug`), or
/// its older name `RMCAST_LOG`; warnings and errors only when neither is set.
fn log_filter() -> tracing_subscriber::EnvFilter {
    use tracing_subscriber::EnvFilter;
    for var in ["RUST_LOG", "RMCAST_LOG"] {
        if std::env::var_os(var).is_some() {
            match EnvFilter::try_from_env(var) {
                Ok(f) => return f,
                Err(e) => eprintln!("warning: ignoring {var}: {e}"),
            }
        }
    }
    EnvFilter::new("warn")
}

/// Colour in log lines only on a terminal, and never when `NO_COLOR` is set (no-color.org).
fn log_colour() -> bool {
    use std::io::IsTerminal;
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()) && std::io::stderr().is_terminal()
}

/// Arguments of `rmcast config`.
#[derive(clap::Args, Debug)]
struct ConfigArgs {
    /// Print a commented config file with every setting of the command and its default (what
    /// `rmcast config` does without it too).
    #[arg(long)]
    print_defaults: bool,
    /// The command the file is for: member, or send / receive (RMTP's session file).
    #[arg(long, default_value = "member", value_parser = clap::builder::PossibleValuesParser::new(config::WITH_CONFIG))]
    command: String,
}

/// The whole command's definition.
fn cli_command() -> clap::Command {
    use clap::CommandFactory;
    Cli::command()
}

fn main() -> std::process::ExitCode {
    // Output piped into `head` and closed early: end quietly, as Unix tools do, instead of a
    // panic at the next print (Rust ignores SIGPIPE by default). Sockets are unaffected: std
    // sends with MSG_NOSIGNAL, and UDP raises no SIGPIPE.
    // SAFETY: setting a signal's disposition to its default before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_ansi(log_colour())
        .with_writer(std::io::stderr)
        .init();
    let args = match config::expand(std::env::args().collect(), &cli_command()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            return std::process::ExitCode::from(2);
        }
    };
    let cli = Cli::parse_from(args);
    if matches!(
        cli.command,
        Command::Demo(_)
            | Command::Bench(_)
            | Command::Stat(_)
            | Command::TxnBench(_)
            | Command::Gauntlet(_)
    ) {
        // The run stops its workers at its next look at them (`WorkerSpec::run`).
        let what = if matches!(cli.command, Command::Stat(_)) {
            "stopping"
        } else {
            "stopping the workers"
        };
        if let Err(e) = signals::install(what, || {}) {
            eprintln!("error: {e:#}");
            return std::process::ExitCode::from(2);
        }
    }
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Gauntlet(a) => gauntlet::run(a),
        Command::BusyLoop(a) => gauntlet::spin(a),
        Command::Member(a) => member::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Stat(a) => stats::run(a),
        Command::Config(a) => {
            let cli = cli_command();
            let cmd = cli
                .find_subcommand(&a.command)
                .expect("a command with --config");
            print!("{}", config::defaults_file(cmd));
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Keygen(a) => keys::keygen(a),
        Command::Send(a) => send::run(a),
        Command::Receive(a) => receive::run(a),
        Command::Worker(a) => worker::run(a),
        Command::Txn(a) => txn::run(a),
        Command::Call(a) => call::run(a),
        Command::TxnServe(a) => txn::serve(a),
        Command::TxnBench(a) => txn_bench::run(a),
        Command::TxnBenchWorker(a) => txn_bench::worker(a),
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut cli_command(), "rmcast", &mut std::io::stdout());
            Ok(std::process::ExitCode::SUCCESS)
        }
        Command::Man { out } => man(out.as_deref()),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {}", error_text(&e));
            std::process::ExitCode::from(2)
        }
    }
}

/// `rmcast man`: rmcast(1) to standard output, or every page into `out`.
fn man(out: Option<&std::path::Path>) -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context;
    let cmd = cli_command();
    match out {
        None => clap_mangen::Man::new(cmd)
            .render(&mut std::io::stdout())
            .context("writing the man page")?,
        Some(dir) => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing the man pages to {}", dir.display()))?;
            println!("man pages written to {}", dir.display());
        }
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// An error and its causes on one line, `context: cause: cause`, each cause once: a cause
/// whose text its outer error already quotes (`socket error: Address in use`, then `Address
/// in use` again) is not repeated.
fn error_text(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

#[cfg(test)]
mod tests {
    /// clap's own check of the whole command: no two flags of a command share a name or a
    /// short letter, aliases included, and every default parses.
    #[test]
    fn the_command_line_definition_is_consistent() {
        super::cli_command().debug_assert();
    }
}
