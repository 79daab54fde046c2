//! `rmcast demo` (not written yet).

use clap::Args;

/// Arguments of `rmcast demo`.
#[derive(Args, Debug)]
pub struct DemoArgs {}

/// Run `rmcast demo`.
pub fn run(_args: DemoArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("rmcast demo is not implemented yet")
}
