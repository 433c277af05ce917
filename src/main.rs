//! `ocrig`: thin entry point. Parses the command line, runs one command, maps errors to exit
//! codes: 2 = bad input (nothing was booted), 1 = anything else.

mod backend;
mod cli;
mod color;
mod commands;
mod executor;
mod guest;
mod host;
mod hostfs;
mod image;
mod journal;
mod orchestrate;
mod payload_bin;
mod report;
mod scenario;
mod stats;
mod sweep;
mod telemetry;
mod terminal;
#[cfg(test)]
mod testing;
mod topology;
mod vocabulary;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    color::choose(cli.color);
    commands::init_logging(cli.verbose);
    match commands::dispatch(cli.command) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let code = commands::exit_code(&e);
            eprintln!("ocrig: error: {e:#}");
            ExitCode::from(code)
        }
    }
}
