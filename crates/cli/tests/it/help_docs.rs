//! `--help` stays in sync with docs/: every subcommand is listed in the README's stage table
//! with its docs page, and every flag that `vodkit <subcommand …> --help` prints appears on
//! that page.

use crate::common;

use common::{ok, repo_root};
use std::collections::BTreeMap;

/// Subcommand → docs page, from the README's table (`| … | \`vodkit X\`, … | [docs/x.md](…) |`).
fn pages() -> BTreeMap<String, String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let mut map = BTreeMap::new();
    for line in readme.lines().filter(|l| l.starts_with('|')) {
        let Some(page) = line
            .split("](")
            .nth(1)
            .and_then(|rest| rest.split(')').next())
            .filter(|p| p.starts_with("docs/"))
        else {
            continue;
        };
        for word in line.split("`vodkit ").skip(1) {
            let name: String = word
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '-')
                .collect();
            map.entry(name).or_insert_with(|| page.to_string());
        }
    }
    map
}

/// The subcommands and the long flags a `--help` text lists (help and version left out).
fn parse_help(text: &str) -> (Vec<String>, Vec<String>) {
    let mut commands = Vec::new();
    let mut flags = Vec::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_commands = false;
        }
        let t = line.trim_start();
        if in_commands && line.starts_with("  ") && !line.starts_with("   ") {
            if let Some(name) = t.split_whitespace().next().filter(|n| *n != "help") {
                commands.push(name.to_string());
            }
        }
        // An option line: `  -x, --long …` or `      --long …`; wrapped descriptions are
        // indented further.
        if line.len() - t.len() > 6 {
            continue;
        }
        let t = t
            .strip_prefix('-')
            .and_then(|r| r.split_once(", ").map(|(_, l)| l))
            .unwrap_or(t);
        if let Some(rest) = t.strip_prefix("--") {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            if !name.is_empty() && name != "help" && name != "version" {
                flags.push(format!("--{name}"));
            }
        }
    }
    (commands, flags)
}

#[test]
fn every_flag_of_every_subcommand_is_in_its_docs_page() {
    let dir = tempfile::tempdir().unwrap();
    let pages = pages();
    let (top, _) = parse_help(&ok(dir.path(), &["--help"]).stdout);
    assert!(top.len() >= 13, "subcommands of vodkit --help: {top:?}");
    let mut missing = Vec::new();
    let mut checked = 0;
    for cmd in &top {
        let Some(page) = pages.get(cmd) else {
            missing.push(format!("vodkit {cmd}: no docs page in the README's table"));
            continue;
        };
        let doc = std::fs::read_to_string(repo_root().join(page)).expect(page);
        if !doc.contains(&format!("vodkit {cmd}")) {
            missing.push(format!("{page} never names `vodkit {cmd}`"));
        }
        // Walk nested subcommands (`workload spec list`, `hdd up`, …).
        let mut todo = vec![vec![cmd.clone()]];
        while let Some(path) = todo.pop() {
            let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
            args.push("--help");
            let (subs, flags) = parse_help(&ok(dir.path(), &args).stdout);
            for s in subs {
                if !doc.contains(&s) {
                    missing.push(format!(
                        "{page}: subcommand `vodkit {} {s}`",
                        path.join(" ")
                    ));
                }
                let mut p = path.clone();
                p.push(s);
                todo.push(p);
            }
            for f in flags {
                checked += 1;
                if !doc.contains(&f) {
                    missing.push(format!("{page}: `vodkit {} {f}`", path.join(" ")));
                }
            }
        }
    }
    assert!(
        checked > 100,
        "only {checked} flags found in the help texts"
    );
    assert!(
        missing.is_empty(),
        "help and docs disagree:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_help_parser_finds_commands_and_flags() {
    let text = "Usage: vodkit x\n\nCommands:\n  up    Bring it up\n  help  Print this\n\n\
                Options:\n      --state-dir <DIR>  Where\n          --not-a-flag continues\n  \
                -q, --quiet  Less\n  -h, --help  Print help\n";
    let (commands, flags) = parse_help(text);
    assert_eq!(commands, ["up"]);
    assert_eq!(flags, ["--state-dir", "--quiet"]);
}
