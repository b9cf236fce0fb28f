//! `vodkit run` (issue #5).

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<()> {
    super::not_yet("vodkit run", 5)
}
