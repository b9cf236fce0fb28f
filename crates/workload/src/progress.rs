//! Progress bars on stderr for the commands that write or check many files, hidden when
//! the caller did not ask for progress.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar of `len` steps drawn with `template` (indicatif's template syntax) on stderr when
/// `show`, hidden otherwise; a template indicatif refuses leaves its default style.
pub fn bar(show: bool, len: u64, template: &str) -> ProgressBar {
    let target = if show {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    };
    let bar = ProgressBar::with_draw_target(Some(len), target);
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar
}
