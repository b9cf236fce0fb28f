//! docs/cli.md, the flag reference, generated from the clap definitions, and the tests that
//! keep it and the units of every flag honest. `VODKIT_BLESS=1 cargo test -p vodkit
//! reference` rewrites docs/cli.md.

use clap::{Arg, ArgAction, Command, CommandFactory};
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::cmd::flags;

/// The generated reference: one table of flags per subcommand, in the order of `--help`.
pub fn markdown(root: &Command) -> String {
    let mut out = String::new();
    out.push_str(
        "# Command-line reference\n\n\
         Every flag of every `vodkit` subcommand: its value, its default and its help line.\n\
         Generated from the clap definitions by `VODKIT_BLESS=1 cargo test -p vodkit reference`;\n\
         a test fails when this file and the binary disagree. The stage pages in docs/ say how\n\
         to use each command.\n\n\
         Values: SIZE takes `512KiB`, `1GiB` (powers of 1024), `3M`, `2.5MB` (powers of 1000)\n\
         or bytes; DURATION takes `60` (seconds), `60s`, `1m30s`, `250ms`, `2h`; BITRATE takes\n\
         `800k`, `3M`, `3Mbit/s`, `800kbps`, `1.5Mbps` or bits per second; DATA_RATE takes\n\
         `2.5MB/s`, `20MiB/s`; SESSION_RATE takes `2`, `0.5/s`, `120/min`; `auto|off|SIZE` a\n\
         memory setting. Older flag spellings are still accepted but not listed.\n",
    );
    let mut path = vec![root.get_name().to_string()];
    walk(root, &mut path, &mut out);
    out
}

fn walk(cmd: &Command, path: &mut Vec<String>, out: &mut String) {
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        path.push(sub.get_name().to_string());
        section(sub, path, out);
        walk(sub, path, out);
        path.pop();
    }
}

fn section(cmd: &Command, path: &[String], out: &mut String) {
    let args: Vec<&Arg> = cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !matches!(a.get_id().as_str(), "help" | "version"))
        .collect();
    let has_subs = cmd
        .get_subcommands()
        .any(|s| !s.is_hide_set() && s.get_name() != "help");
    if args.is_empty() && has_subs {
        return;
    }
    let _ = write!(out, "\n## {}\n\n", path.join(" "));
    if let Some(about) = cmd.get_about() {
        let _ = writeln!(out, "{}\n", one_line(&about.to_string()));
    }
    if args.is_empty() {
        out.push_str("No flags.\n");
        return;
    }
    out.push_str("| flag | value | default | help |\n| --- | --- | --- | --- |\n");
    for a in args {
        let name = match (a.get_long(), a.get_short()) {
            (Some(l), Some(s)) => format!("`-{s}`, `--{l}`"),
            (Some(l), None) => format!("`--{l}`"),
            (None, Some(s)) => format!("`-{s}`"),
            (None, None) => format!("`{}` (positional)", value_name(a)),
        };
        let value = if takes_value(a) {
            format!("`{}`", one_line(&value_name(a)))
        } else {
            String::new()
        };
        let default: Vec<String> = a
            .get_default_values()
            .iter()
            .map(|v| v.to_string_lossy().into_owned())
            .collect();
        let default = if default.is_empty() || !takes_value(a) {
            String::new()
        } else {
            format!("`{}`", one_line(&default.join(",")))
        };
        let help = a
            .get_help()
            .map(|h| one_line(&h.to_string()))
            .unwrap_or_default();
        let _ = writeln!(out, "| {name} | {value} | {default} | {help} |");
    }
}

fn takes_value(a: &Arg) -> bool {
    matches!(a.get_action(), ArgAction::Set | ArgAction::Append)
}

fn value_name(a: &Arg) -> String {
    match a.get_value_names() {
        Some(names) => names
            .iter()
            .map(|n| n.to_string())
            .collect::<Vec<_>>()
            .join(" "),
        None => a.get_id().as_str().to_uppercase(),
    }
}

/// Help text on one table line: paragraphs joined, pipes escaped.
fn one_line(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn docs_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/cli.md")
}

/// Every (subcommand path, flag) of the binary, hidden ones included.
fn every_arg(cmd: &Command, path: &mut Vec<String>, out: &mut Vec<(String, Arg)>) {
    for a in cmd.get_arguments() {
        out.push((path.join(" "), a.clone()));
    }
    for sub in cmd.get_subcommands() {
        path.push(sub.get_name().to_string());
        every_arg(sub, path, out);
        path.pop();
    }
}

fn root() -> Command {
    let mut c = crate::Cli::command();
    c.build();
    c
}

#[test]
fn docs_cli_md_is_the_generated_reference() {
    let text = markdown(&root());
    let path = docs_path();
    if std::env::var("VODKIT_BLESS").is_ok_and(|v| !v.is_empty() && v != "0") {
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        on_disk == text,
        "docs/cli.md differs from the flags of the binary; regenerate it with \
         `VODKIT_BLESS=1 cargo test -p vodkit reference`"
    );
}

#[test]
fn the_reference_has_a_table_per_subcommand_and_leaves_hidden_flags_out() {
    let text = markdown(&root());
    for heading in [
        "## vodkit serve\n",
        "## vodkit hdd up\n",
        "## vodkit live push\n",
    ] {
        assert!(text.contains(heading), "{heading}");
    }
    assert!(text.contains("| `--memory` | `auto\\|off\\|SIZE` | `auto` |"));
    // Old spellings are aliases, not rows.
    for old in [
        "--point-duration",
        "--stats-every",
        "--metrics-interval",
        "--ref-kbps",
    ] {
        assert!(!text.contains(&format!("`{old}`")), "{old}");
    }
}

/// The forms a user types for each kind of value, by the value name the flags declare.
const FORMS: &[(&str, &[&str])] = &[
    (flags::SIZE, &["512KiB", "1GiB", "3M", "2.5MB", "4096"]),
    (flags::DURATION, &["60", "60s", "1m30s", "250ms", "2h"]),
    (
        flags::BITRATE,
        &["800k", "3M", "3Mbit/s", "800kbps", "1.5Mbps"],
    ),
    (flags::DATA_RATE, &["2.5MB/s", "20MiB/s", "1KiB"]),
    (flags::SESSION_RATE, &["2", "0.5/s", "120/min"]),
    (flags::MEMORY, &["auto", "off", "1GiB", "512MiB", "3M"]),
];

/// `value` through `arg`'s own value parser, on a command holding that parser alone.
fn parse_with(arg: &Arg, value: &str) -> Result<(), clap::Error> {
    let probe = Arg::new("probe")
        .long("probe")
        .value_parser(arg.get_value_parser().clone());
    Command::new("probe")
        .arg(probe)
        .try_get_matches_from(["probe", "--probe", value])
        .map(|_| ())
}

/// Flags whose range is narrower than the unit's; they get forms inside it.
const NARROW: &[(&str, &[&str])] = &[("host-gap", &["0.001", "1ms", "100us", "0s"])];

#[test]
fn every_size_duration_and_rate_flag_accepts_what_users_type() {
    let mut args = Vec::new();
    every_arg(&root(), &mut vec!["vodkit".into()], &mut args);
    let mut checked = 0;
    let mut failures = Vec::new();
    for (path, arg) in &args {
        let name = value_name(arg);
        let Some((_, forms)) = FORMS.iter().find(|(n, _)| *n == name) else {
            continue;
        };
        let long = arg.get_long().unwrap_or("");
        let forms = NARROW
            .iter()
            .find(|(l, _)| *l == long)
            .map_or(*forms, |(_, f)| *f);
        for form in forms {
            if let Err(e) = parse_with(arg, form) {
                failures.push(format!("{path} --{long} {form}: {e}"));
            }
        }
        if parse_with(arg, "lots").is_ok() {
            failures.push(format!("{path} --{long} lots: accepted"));
        }
        checked += 1;
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(checked >= 40, "only {checked} unit flags found");
}

/// A flag whose default looks like a size or a duration must declare the value name that
/// the test above checks, so no flag keeps a parser of its own.
#[test]
fn flags_with_unit_defaults_use_the_units_parsers() {
    let mut args = Vec::new();
    every_arg(&root(), &mut vec!["vodkit".into()], &mut args);
    let unit_like = |v: &str| {
        let digits = v.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.');
        digits.len() < v.len()
            && [
                "s", "ms", "us", "m", "h", "KiB", "MiB", "GiB", "MB", "kbit/s", "KiB/s",
            ]
            .contains(&digits)
    };
    let names: Vec<&str> = FORMS.iter().map(|(n, _)| *n).collect();
    let mut odd = Vec::new();
    for (path, arg) in &args {
        for d in arg.get_default_values() {
            let d = d.to_string_lossy();
            let first = d.split(',').next().unwrap_or("");
            if unit_like(first) && !names.contains(&value_name(arg).as_str()) {
                odd.push(format!("{path} --{} (default {d})", arg.get_id()));
            }
        }
    }
    assert!(odd.is_empty(), "flags with their own unit parsing: {odd:?}");
}

#[test]
fn the_acceptance_examples_parse() {
    use clap::Parser;
    for argv in [
        "vodkit live push --target http://127.0.0.1:1 --bitrate 800k",
        "vodkit bench --scenario list --point-duration 60",
        "vodkit bench --scenario list --duration 1m30s --memory off",
        "vodkit serve --root . --stats-every 5 --memory 512MiB --min-send-rate 2.5MB/s",
        "vodkit prefetchd --metrics-interval 250ms",
        "vodkit load --target http://127.0.0.1:1 --rate 120/min --format auto --duration 60",
        "vodkit workload from-log --log x --out y --bitrate-kbps 800",
        "vodkit simulate --replay w --ref-kbps 419 --policy fixed:2MiB --memory auto",
        "vodkit hdd tune --mount m --read-ahead-kb 128",
        "vodkit trace chains --log l --out o --format combined --window 40",
    ] {
        let args: Vec<&str> = argv.split_whitespace().collect();
        if let Err(e) = crate::Cli::try_parse_from(&args) {
            panic!("{argv}: {e}");
        }
    }
    for (argv, needle) in [
        (
            "vodkit live push --target http://127.0.0.1:1 --bitrate 3MB/s",
            "expected a bit rate like 800k",
        ),
        (
            "vodkit serve --root . --memory lots",
            "expected auto, off or a size like 1GiB, got 'lots'",
        ),
        (
            "vodkit workload from-log --log x --out y --bitrate 1M --bitrate-kbps 800",
            "cannot be used with",
        ),
    ] {
        let args: Vec<&str> = argv.split_whitespace().collect();
        match crate::Cli::try_parse_from(&args) {
            Ok(_) => panic!("{argv}: accepted"),
            Err(e) => assert!(e.to_string().contains(needle), "{argv}: {e}"),
        }
    }
}
