//! `rmcast member --config FILE`, `rmcast send|receive --config FILE` (RMTP's session file:
//! the connection parameters of Table II, the defaults those of Table III) and
//! `rmcast config --print-defaults [--command send]`.
//!
//! The file is TOML with one key per flag of the command, named like the flag without its
//! dashes and with `_` for `-` (`--max-message-bytes 4096` is `max_message_bytes = 4096`).
//! The keys are not a second list kept beside the flags: they are read from the command's own
//! definition, and a file is applied by turning its keys into flags placed before those typed,
//! so that typed flags override the file (clap's `args_override_self`) and every value is
//! checked by the flag's own parser.

use anyhow::{bail, Context};
use clap::Command;
use std::path::Path;

/// Flags of `rmcast member` that are not settings.
const NOT_SETTINGS: &[&str] = &["config", "help"];

/// The settings of `member`: its arguments minus [`NOT_SETTINGS`].
fn settings(member: &Command) -> impl Iterator<Item = &clap::Arg> {
    member
        .get_arguments()
        .filter(|a| a.get_long().is_some() && !NOT_SETTINGS.contains(&a.get_id().as_str()))
}

/// Whether `arg` is an on/off flag.
fn is_switch(arg: &clap::Arg) -> bool {
    matches!(arg.get_action(), clap::ArgAction::SetTrue)
}

/// Commands that take `--config FILE`.
pub const WITH_CONFIG: &[&str] = &["member", "send", "receive"];

/// If `args` (the whole command line) is `rmcast CMD ... --config FILE ...` for a command of
/// [`WITH_CONFIG`], the command line with the file's settings inserted as flags right after
/// `CMD`; otherwise `args` unchanged. `cli`: the whole command's definition.
pub fn expand(args: Vec<String>, cli: &Command) -> anyhow::Result<Vec<String>> {
    let pos = 1;
    let Some(member) = args
        .get(pos)
        .filter(|c| WITH_CONFIG.contains(&c.as_str()))
        .and_then(|c| cli.find_subcommand(c))
    else {
        return Ok(args);
    };
    let mut file = None;
    for (i, a) in args.iter().enumerate().skip(pos + 1) {
        if a == "--config" {
            file = Some(args.get(i + 1).context("--config needs a file")?.clone());
        } else if let Some(f) = a.strip_prefix("--config=") {
            file = Some(f.to_string());
        }
    }
    let Some(file) = file else {
        return Ok(args);
    };
    let flags = flags_from_file(Path::new(&file), member)?;
    let mut out = args[..=pos].to_vec();
    out.extend(flags);
    out.extend_from_slice(&args[pos + 1..]);
    Ok(out)
}

/// The flags a config file stands for.
fn flags_from_file(path: &Path, member: &Command) -> anyhow::Result<Vec<String>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let table: toml::Table =
        toml::from_str(&text).with_context(|| format!("{} is not valid TOML", path.display()))?;
    let mut flags = Vec::new();
    for (key, value) in &table {
        let Some(arg) = settings(member).find(|a| a.get_id().as_str() == key) else {
            let known: Vec<String> = settings(member).map(|a| a.get_id().to_string()).collect();
            bail!(
                "{}: unknown setting `{key}` (settings: {})",
                path.display(),
                known.join(", ")
            );
        };
        let flag = format!("--{}", arg.get_long().unwrap_or(key));
        let bad = || {
            anyhow::anyhow!(
                "{}: `{key}` cannot be a {}",
                path.display(),
                value.type_str()
            )
        };
        match value {
            toml::Value::Boolean(b) if is_switch(arg) => {
                if *b {
                    flags.push(flag);
                }
            }
            _ if is_switch(arg) => return Err(bad()),
            toml::Value::String(s) => flags.push(format!("{flag}={s}")),
            toml::Value::Integer(n) => flags.push(format!("{flag}={n}")),
            toml::Value::Float(x) => flags.push(format!("{flag}={x}")),
            toml::Value::Array(items) => {
                let items: Option<Vec<String>> = items
                    .iter()
                    .map(|v| match v {
                        toml::Value::String(s) => Some(s.clone()),
                        toml::Value::Integer(n) => Some(n.to_string()),
                        _ => None,
                    })
                    .collect();
                flags.push(format!("{flag}={}", items.ok_or_else(bad)?.join(",")));
            }
            _ => return Err(bad()),
        }
    }
    Ok(flags)
}

/// A commented config file with every setting of `member` (or `send`, `receive`) and its
/// default.
pub fn defaults_file(member: &Command) -> String {
    let name = member.get_name();
    let mut out = format!(
        "# rmcast {name} --config FILE: one key per flag of `rmcast {name}` (flags typed on the\n\
         # command line override the file). Lines starting with # are defaults or examples.\n",
    );
    for arg in settings(member) {
        let id = arg.get_id().as_str();
        out.push('\n');
        if let Some(help) = arg.get_help() {
            for line in wrap(&help.to_string(), 94) {
                out.push_str(&format!("# {line}\n"));
            }
        }
        let default: Vec<String> = arg
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let line = if is_switch(arg) {
            format!("{id} = false")
        } else if let [d] = &default[..] {
            format!("{id} = {}", toml_value(d))
        } else {
            // No default: an example value, commented out.
            let example = match id {
                "group" => "\"chat\"",
                "id" => "1",
                "addr" => "\"239.1.2.3:40000\"",
                "unicast_peers" => "[\"127.0.0.1:40001\", \"127.0.0.1:40002\"]",
                "port" => "40001",
                "log" => "\"member.jsonl\"",
                "qos" => "\"totally-ordered\"",
                _ => "\"...\"",
            };
            format!("# {id} = {example}")
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// A default value as TOML: a number bare, anything else quoted.
fn toml_value(v: &str) -> String {
    if v.parse::<i64>().is_ok() || v.parse::<f64>().is_ok() {
        v.to_string()
    } else {
        format!("{v:?}")
    }
}

/// `text` in lines of at most about `width` characters.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = vec![String::new()];
    for word in text.split_whitespace() {
        let last = lines.last_mut().expect("one line at least");
        if !last.is_empty() && last.len() + 1 + word.len() > width {
            lines.push(word.to_string());
        } else {
            if !last.is_empty() {
                last.push(' ');
            }
            last.push_str(word);
        }
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn member() -> Command {
        crate::Cli::command()
            .find_subcommand("member")
            .expect("member")
            .clone()
    }

    #[test]
    fn the_defaults_file_is_valid_and_covers_every_setting() {
        let m = member();
        let text = defaults_file(&m);
        let table: toml::Table = toml::from_str(&text).unwrap();
        for arg in settings(&m) {
            let id = arg.get_id().as_str();
            assert!(text.contains(&format!("{id} =")), "{id} missing:\n{text}");
        }
        // What the file sets is accepted as flags.
        let dir = std::env::temp_dir().join(format!("rmcast-cfg-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("defaults.toml");
        std::fs::write(&f, &text).unwrap();
        let flags = flags_from_file(&f, &m).unwrap();
        assert_eq!(
            flags.len(),
            table.len()
                - table
                    .iter()
                    .filter(|(_, v)| **v == toml::Value::Boolean(false))
                    .count()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn typed_flags_come_after_the_file() {
        let m = crate::Cli::command();
        let dir = std::env::temp_dir().join(format!("rmcast-cfg2-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("c.toml");
        std::fs::write(&f, "group = \"g\"\nresilience = 1\nmanual_reset = true\n").unwrap();
        let args: Vec<String> = ["rmcast", "member", "--resilience", "2", "--config"]
            .iter()
            .map(|s| s.to_string())
            .chain([f.display().to_string()])
            .collect();
        let out = expand(args, &m).unwrap();
        let r1 = out.iter().position(|a| a == "--resilience=1").unwrap();
        let r2 = out.iter().position(|a| a == "--resilience").unwrap();
        assert!(r1 < r2, "{out:?}");
        assert!(out.contains(&"--manual-reset".to_string()));
        std::fs::write(&f, "no_such_thing = 1\n").unwrap();
        let err = expand(out, &m).unwrap_err().to_string();
        assert!(err.contains("unknown setting `no_such_thing`"), "{err}");
        // A session file for `send` takes `send`'s flags.
        std::fs::write(&f, "send_window = 7\n").unwrap();
        let args: Vec<String> = ["rmcast", "send", "x.bin", "--config"]
            .iter()
            .map(|s| s.to_string())
            .chain([f.display().to_string()])
            .collect();
        let out = expand(args, &m).unwrap();
        assert_eq!(out[2], "--send-window=7", "{out:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
