//! `rmcast member` (not written yet).

use clap::Args;

/// Arguments of `rmcast member`.
#[derive(Args, Debug)]
pub struct MemberArgs {}

/// Run `rmcast member`.
pub fn run(_args: MemberArgs) -> anyhow::Result<std::process::ExitCode> {
    anyhow::bail!("rmcast member is not implemented yet")
}
