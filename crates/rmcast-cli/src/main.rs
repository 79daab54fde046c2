//! `rmcast`: the command-line tool of the rmcast reliable multicast toolkit.

mod bench;
mod demo;
mod keys;
mod member;
mod sim;
mod worker;
mod workers;

use clap::{Parser, Subcommand};

/// rmcast: reliable multicast and group communication.
#[derive(Parser, Debug)]
#[command(name = "rmcast", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

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
    /// Write a new random group key (32 bytes, mode 0600) for --key-file.
    Keygen(keys::KeygenArgs),
    /// One measured group member (spawned by `demo` and `bench`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RMCAST_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Demo(a) => demo::run(a),
        Command::Member(a) => member::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Sim(a) => sim::run(a),
        Command::Keygen(a) => keys::keygen(a),
        Command::Worker(a) => worker::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("rmcast: error: {e:#}");
            std::process::ExitCode::from(2)
        }
    }
}
