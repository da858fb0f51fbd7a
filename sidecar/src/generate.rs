//! `hadar completions` and `hadar man`: shell completions and man pages generated from the
//! command-line definitions, so that they never drift from the program (the Debian package
//! installs both).

use crate::Failure;
use crate::cli::{Cli, CompletionsArgs, ManArgs};
use anyhow::Context;
use clap::CommandFactory;
use std::io::Write;
use std::path::Path;

/// Prints the completion script for one shell on standard output.
pub fn completions(a: CompletionsArgs) -> Result<(), Failure> {
    let mut command = Cli::command();
    let mut script = Vec::new();
    clap_complete::generate(a.shell, &mut command, "hadar", &mut script);
    std::io::stdout()
        .write_all(&script)
        .context("writing the completion script")
        .map_err(Failure::runtime)
}

/// Writes `hadar.1` and `hadar-SUBCOMMAND.1` (nested: `hadar-bench-round.1`) into the folder.
pub fn man_pages(a: ManArgs) -> Result<(), Failure> {
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating {}", a.out.display()))
        .map_err(Failure::runtime)?;
    let mut command = Cli::command();
    // Building gives every subcommand its display name (`hadar-serve`), the page's title.
    command.build();
    write_pages(&command, &a.out).map_err(Failure::runtime)
}

/// Writes the page of `command`, then its visible subcommands' pages.
fn write_pages(command: &clap::Command, out: &Path) -> anyhow::Result<()> {
    let name = command
        .get_display_name()
        .unwrap_or(command.get_name())
        .to_string();
    let mut text = Vec::new();
    clap_mangen::Man::new(command.clone())
        .render(&mut text)
        .with_context(|| format!("rendering the man page of {name}"))?;
    let path = out.join(format!("{name}.1"));
    std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    // clap's generated `help` subcommand gets no page: `hadar.1` covers it.
    let pages = command
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help");
    for sub in pages {
        write_pages(sub, out)?;
    }
    Ok(())
}
