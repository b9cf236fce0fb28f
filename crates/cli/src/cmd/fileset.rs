//! `vodkit fileset` (issue #2).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit fileset", 2)
}
