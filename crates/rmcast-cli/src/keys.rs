//! Keys of secure groups on the command line: `--key-file` and `--accept-key-file` (shared by
//! every command that opens a group: `member`, `worker`, `demo`, `bench`, `call`, `txn`,
//! `txn-serve`, `send`, `receive`), the `RMCAST_KEY_FILE` environment variable, and
//! `rmcast keygen`. A
//! key itself is never an argument: every user of the host can read a command line.

use anyhow::{bail, Context};
use clap::Args;
use rmcast::{GroupKey, Keyring, KEY_FILE_ENV};
use std::path::PathBuf;
use std::process::ExitCode;

/// Which keys make the group secure.
#[derive(Args, Debug, Clone, Default)]
pub struct KeyArgs {
    /// Make the group secure with the key in this file (32 bytes from `rmcast keygen`, or a
    /// passphrase of at least 16 bytes); every member needs the same key. Default: the file
    /// named by RMCAST_KEY_FILE; without either, the group has no key and trusts its network.
    #[arg(short = 'k', long)]
    pub key_file: Option<PathBuf>,
    /// Also accept datagrams sealed with the key in this file (a key rotation: members switch
    /// --key-file one by one, each accepting the other key meanwhile). Repeatable.
    #[arg(long, requires = "key_file")]
    pub accept_key_file: Vec<PathBuf>,
}

impl KeyArgs {
    /// The keyring these flags (or the environment) name; `None`: no key.
    pub fn keyring(&self) -> anyhow::Result<Option<Keyring>> {
        let path = match (&self.key_file, std::env::var_os(KEY_FILE_ENV)) {
            (Some(p), _) => p.clone(),
            (None, Some(p)) if !p.is_empty() => PathBuf::from(p),
            (None, _) => return Ok(None),
        };
        let load = |p: &PathBuf| {
            rmcast::load_key_file(p).with_context(|| format!("reading key file {}", p.display()))
        };
        let mut ring = Keyring::new(load(&path)?);
        for p in &self.accept_key_file {
            ring = ring.accept(load(p)?);
        }
        Ok(Some(ring))
    }

    /// These flags with `--key-file` taken from `RMCAST_KEY_FILE` when it was not typed: what a
    /// command that starts child processes (`rmcast demo`) passes on with
    /// [`KeyArgs::to_args`], since the children do not read the environment.
    pub fn resolved(&self) -> KeyArgs {
        let mut k = self.clone();
        if k.key_file.is_none() {
            if let Some(p) = std::env::var_os(KEY_FILE_ENV).filter(|p| !p.is_empty()) {
                k.key_file = Some(PathBuf::from(p));
            }
        }
        k
    }

    /// The flags that give the same keys to a child process (`rmcast worker`).
    pub fn to_args(&self) -> Vec<std::ffi::OsString> {
        let mut a = Vec::new();
        if let Some(k) = &self.key_file {
            a.push("--key-file".into());
            a.push(k.clone().into_os_string());
        }
        for k in &self.accept_key_file {
            a.push("--accept-key-file".into());
            a.push(k.clone().into_os_string());
        }
        a
    }
}

/// Refuse to expose a command that acts on what it receives (`txn-serve --exec` runs a
/// command, `receive` writes files) to a network without a key: on any interface but loopback,
/// an unkeyed group takes datagrams from anyone who can reach its address. `--insecure` says
/// the network is trusted.
pub fn refuse_unkeyed_exposure(
    keys: Option<&Keyring>,
    interface: std::net::IpAddr,
    insecure: bool,
    what: &str,
) -> anyhow::Result<()> {
    if keys.is_none() && !interface.is_loopback() && !insecure {
        bail!(
            "{what} without a key on interface {interface} would act on datagrams from anyone              who can reach the group's address; give --key-file (or RMCAST_KEY_FILE), or              --insecure if this network is trusted"
        );
    }
    Ok(())
}

/// Arguments of `rmcast keygen`.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// The key file to write (mode 0600); an existing file is never overwritten.
    pub path: PathBuf,
}

/// Run `rmcast keygen`: a new random group key in a new file.
pub fn keygen(args: KeygenArgs) -> anyhow::Result<ExitCode> {
    if args.path.exists() {
        bail!("{} exists; not overwriting a key", args.path.display());
    }
    let key = GroupKey::generate().context("generating a key")?;
    rmcast::write_key_file(&args.path, &key)
        .with_context(|| format!("writing {}", args.path.display()))?;
    println!(
        "wrote a new group key (id {:08x}) to {}; give every member a copy (mode 0600) and \
         --key-file {}",
        key.id(),
        args.path.display(),
        args.path.display()
    );
    Ok(ExitCode::SUCCESS)
}
