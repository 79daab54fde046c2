//! `rmcast bench` (not written yet).

use clap::Args;

/// Arguments of `rmcast bench`.
#[derive(Args, Debug)]
pub struct BenchArgs {}

/// Run `rmcast bench`.
pub fn run(_args: BenchArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("rmcast bench is not implemented yet")
}
