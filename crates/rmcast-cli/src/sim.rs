//! `rmcast sim` (not written yet).

use clap::Args;

/// Arguments of `rmcast sim`.
#[derive(Args, Debug)]
pub struct SimArgs {}

/// Run `rmcast sim`.
pub fn run(_args: SimArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("rmcast sim is not implemented yet")
}
