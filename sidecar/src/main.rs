//! The `hadar` command: a thin layer that parses arguments, calls the library crates, and
//! turns errors into one-line messages and exit codes.
//!
//! Exit codes: 0 success; 2 bad input (arguments, files, policy names: nothing was run);
//! 1 a failure while running (a policy broke a rule, output could not be written).

mod average;
mod bench;
mod bench_answers;
mod bench_snapshot;
mod check_config;
mod cli;
mod dry_run;
mod emulate;
mod estimate;
mod fork_consolidate;
mod generate;
mod logging;
mod output;
mod replay;
mod report;
mod serve;
mod simulate;
mod site;
mod status;
mod table;

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    logging::init(args.verbose);
    let outcome = match args.command {
        cli::Command::Simulate(a) => simulate::run(*a),
        cli::Command::DryRun(a) => dry_run::run(a),
        cli::Command::Estimate(a) => estimate::run(a),
        cli::Command::Average(a) => average::run(a),
        cli::Command::Bench(b) => bench::run(b),
        cli::Command::Serve(a) => serve::serve(a),
        cli::Command::Status(a) => serve::status(a),
        cli::Command::FailOpen(a) => serve::fail_open(a),
        cli::Command::Explain(a) => serve::explain(a),
        cli::Command::Replay(a) => replay::run(a),
        cli::Command::CheckConfig(a) => check_config::run(a),
        cli::Command::Site(cli::SiteCommand::Capture(a)) => site::capture(a),
        cli::Command::Emulate(a) => emulate::run(a),
        cli::Command::Report(a) => serve::report(a),
        cli::Command::Completions(a) => generate::completions(a),
        cli::Command::Man(a) => generate::man_pages(a),
        cli::Command::ForkConsolidate(a) => fork_consolidate::run(a),
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("hadar: error: {:#}", e.error);
            ExitCode::from(e.code)
        }
    }
}

/// An error with the exit code it maps to.
pub struct Failure {
    /// The error, printed as one line.
    pub error: anyhow::Error,
    /// 2 for bad input, 1 for failures while running.
    pub code: u8,
}

impl Failure {
    /// The exit code of bad input.
    const INPUT: u8 = 2;

    /// Bad input: nothing was run.
    pub fn input(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            error: error.into(),
            code: Self::INPUT,
        }
    }

    /// True for bad input (nothing was run), as against a failure while running.
    pub fn is_input(&self) -> bool {
        self.code == Self::INPUT
    }

    /// A failure while running.
    pub fn runtime(error: impl Into<anyhow::Error>) -> Self {
        Failure {
            error: error.into(),
            code: 1,
        }
    }
}
