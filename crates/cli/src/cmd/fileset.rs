//! `vodkit fileset`: write, verify and locate on disk the files a workload's server serves.

use clap::Subcommand;
use std::path::PathBuf;
use vodkit_workload::fileset::{self, placement, CreateOptions, FilesetError};
use vodkit_workload::layout::layout_name;
use vodkit_workload::model::Layout;
use vodkit_workload::spec::parse_layout;

#[derive(clap::Args)]
pub(crate) struct Common {
    /// Workload directory (its catalog.json) or a catalog file.
    #[arg(long)]
    workload: PathBuf,
    /// Directory the server serves the files from.
    #[arg(long)]
    root: PathBuf,
    /// `unchunked` or `chunked:SIZE` (default: the catalog's own layout).
    #[arg(long, value_parser = parse_layout)]
    layout: Option<Layout>,
}

#[derive(Subcommand)]
pub enum FilesetCommand {
    /// Write every file (resumable; skips complete files, repairs partial ones). With
    /// `--media`, real video instead: each rung of the catalog's ladder encoded once by ffmpeg
    /// and every title packaged for players (docs/fileset.md "Real media").
    Create {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        quiet: super::flags::Quiet,
        /// Real media packaging: dash (SegmentTemplate), dash-single (SegmentBase, byte
        /// ranges), hls (fMP4 segments), hls-byterange, cmaf (segments behind both manifests).
        #[arg(long, value_name = "dash|dash-single|hls|hls-byterange|cmaf")]
        media: Option<vodkit_media::package::MediaFormat>,
        /// Segment duration of a media set (a whole number of frames at 24 fps).
        #[arg(long, default_value = "4s", value_name = super::flags::DURATION, value_parser = super::flags::duration, requires = "media")]
        segment: std::time::Duration,
        /// Distinct segments encoded per rung; titles cycle through them.
        #[arg(long, default_value_t = 8, requires = "media")]
        pool: u32,
        /// Encode the media set's pictures from this video file (its first `segment × pool`
        /// seconds, looped if shorter) instead of the generated test pattern.
        #[arg(long, value_name = "FILE", requires = "media")]
        source: Option<PathBuf>,
    },
    /// Check every byte of every file against the content function.
    Verify {
        #[command(flatten)]
        common: Common,
        #[command(flatten)]
        quiet: super::flags::Quiet,
    },
    /// Physical placement of titles (FIEMAP): mean position, fragments, out-of-sequence share.
    Placement {
        #[command(flatten)]
        common: Common,
        /// Also place this layout and report how far the two layouts' titles lie apart.
        #[arg(long, value_parser = parse_layout)]
        compare: Option<Layout>,
        /// Write the per-title report as JSON here.
        #[arg(long)]
        out: Option<PathBuf>,
    },
}

fn wrap(e: FilesetError) -> anyhow::Error {
    match e {
        FilesetError::Input(m) => super::usage(m),
        FilesetError::Runtime(m) => anyhow::anyhow!(m),
    }
}

fn wrap_media(e: vodkit_media::MediaError) -> anyhow::Error {
    match e {
        vodkit_media::MediaError::Input(m) => super::usage(m),
        vodkit_media::MediaError::Runtime(m) => anyhow::anyhow!(m),
    }
}

pub fn run(command: FilesetCommand) -> anyhow::Result<()> {
    match command {
        FilesetCommand::Create {
            common,
            quiet,
            media: Some(format),
            segment,
            pool,
            source,
        } => {
            if common.layout.is_some() {
                return Err(super::usage(
                    "--layout does not apply to --media sets (each packaging has its own files)",
                ));
            }
            let catalog = fileset::load_catalog(&common.workload).map_err(wrap)?;
            let mut opts = vodkit_media::MediaOptions::new(format);
            opts.segment_s = segment.as_secs_f64();
            opts.pool_fragments = pool;
            opts.source = source;
            opts.progress = quiet.progress();
            let r = vodkit_media::create(&catalog, &common.root, &opts).map_err(wrap_media)?;
            println!(
                "{} titles ({} packaging, ladder {:?} kbit/s) in {}: wrote {} ({} files, {} bytes), skipped {} complete; encoding {:.1} s, total {:.1} s",
                r.titles,
                format,
                r.ladder_kbps,
                common.root.display(),
                r.written_titles,
                r.files,
                r.bytes_written,
                r.skipped_titles,
                r.encode_seconds,
                r.seconds
            );
            Ok(())
        }
        FilesetCommand::Create { common, quiet, .. } => {
            let catalog = fileset::load_catalog(&common.workload).map_err(wrap)?;
            let opts = CreateOptions {
                layout: common.layout,
                progress: quiet.progress(),
                backing_image: vodkit_disk::testbed::image_behind(&common.root),
            };
            let r = fileset::create(&catalog, &common.root, &opts).map_err(wrap)?;
            println!(
                "{} files, {} bytes in {}: wrote {} ({} repaired), skipped {} complete; {} bytes written in {:.2} s ({:.0} MB/s)",
                r.files,
                r.bytes,
                common.root.display(),
                r.written_files,
                r.repaired_files,
                r.skipped_files,
                r.bytes_written,
                r.seconds,
                r.bytes_written as f64 / r.seconds.max(1e-9) / 1e6
            );
            Ok(())
        }
        FilesetCommand::Verify { common, .. }
            if common
                .root
                .join(vodkit_media::STATE_DIR)
                .join(vodkit_media::MARKER)
                .exists() =>
        {
            let r = vodkit_media::verify(&common.root).map_err(wrap_media)?;
            for d in r.damage.iter().take(20) {
                eprintln!("{} @ {}: {}", d.path, d.offset, d.problem);
            }
            match r.damage.first() {
                None => {
                    println!(
                        "media set: {} titles, {} pieces, {} bytes: all correct",
                        r.titles, r.pieces, r.bytes
                    );
                    Ok(())
                }
                Some(d) => anyhow::bail!(
                    "{} of {} pieces in {} are wrong (first: {} @ {}: {}); delete the title's directory and run `vodkit fileset create --media` again",
                    r.damage.len(),
                    r.pieces,
                    common.root.display(),
                    d.path,
                    d.offset,
                    d.problem
                ),
            }
        }
        FilesetCommand::Verify { common, quiet } => {
            let catalog = fileset::load_catalog(&common.workload).map_err(wrap)?;
            let r = fileset::verify(&catalog, &common.root, common.layout, quiet.progress())
                .map_err(wrap)?;
            for p in r.problems.iter().take(20) {
                eprintln!("{}: {}", p.path, p.problem);
            }
            if r.problems.is_empty() {
                println!(
                    "{} files, {} bytes: all correct ({:.2} s)",
                    r.files, r.bytes, r.seconds
                );
                Ok(())
            } else {
                anyhow::bail!(
                    "{} of {} files in {} are wrong (first: {}: {}); run `vodkit fileset create` to repair",
                    r.problems.len(),
                    r.files,
                    common.root.display(),
                    r.problems[0].path,
                    r.problems[0].problem
                )
            }
        }
        FilesetCommand::Placement {
            common,
            compare,
            out,
        } => {
            let catalog = fileset::load_catalog(&common.workload).map_err(wrap)?;
            let r = placement::report(&catalog, &common.root, common.layout).map_err(wrap)?;
            print_placement(&r);
            if let Some(other) = compare {
                let o = placement::report(&catalog, &common.root, Some(other)).map_err(wrap)?;
                print_placement(&o);
                match placement::divergence(&r, &o) {
                    Some(d) => println!(
                        "mean divergence {} vs {}: {:.0} sectors ({:.3} % of the filesystem)",
                        r.layout,
                        layout_name(other),
                        d,
                        100.0 * d / r.filesystem_sectors.max(1) as f64
                    ),
                    None => println!("no titles in sequence in both layouts"),
                }
            }
            if let Some(path) = out {
                let text = serde_json::to_string_pretty(&r)? + "\n";
                std::fs::write(&path, text)
                    .map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
            }
            Ok(())
        }
    }
}

fn print_placement(r: &placement::PlacementReport) {
    println!(
        "{}: {} titles, mean {:.2} fragments/title, {:.1} % fragmented, {:.1} % out of sequence (> 1 % of {} sectors from neighbours)",
        r.layout,
        r.titles,
        r.mean_fragments,
        100.0 * r.fragmented_titles_fraction,
        100.0 * r.out_of_sequence_fraction,
        r.filesystem_sectors
    );
}
