//! `vodkit simulate` (issue #9).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit simulate", 9)
}
