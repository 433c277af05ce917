//! One function per subcommand. Errors that mean "your input is wrong" are [`BadInput`].

mod doctor;
mod image;
mod run;
mod validate;

use crate::cli::{Command, ImageCommand};

/// Input the user must fix (scenario, arguments). Exit status 2; nothing was booted.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct BadInput(pub String);

/// The sweep was stopped by a signal; its guests are gone and its journal is intact.
#[derive(Debug, thiserror::Error)]
#[error("stopped by {signal}; every guest was removed and the journal keeps every finished run")]
pub struct Interrupted {
    pub signal: &'static str,
    pub code: u8,
}

pub fn exit_code(e: &anyhow::Error) -> u8 {
    if let Some(i) = e.downcast_ref::<Interrupted>() {
        return i.code;
    }
    let bad = e.chain().any(|c| {
        c.is::<BadInput>()
            || c.is::<crate::scenario::ScenarioError>()
            || c.is::<crate::scenario::ScenarioErrors>()
    });
    if bad { 2 } else { 1 }
}

pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "warn,ocrig=info",
        1 => "info,ocrig=debug",
        _ => "debug",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

pub fn dispatch(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Run {
            scenario,
            results,
            quiet,
        } => run::run(&scenario, &results, quiet),
        Command::Validate { files } => validate::validate(&files),
        Command::Report { dir, format } => {
            let journal = crate::sweep::journal::Journal::read(&dir)?;
            print!(
                "{}",
                crate::report::render(&journal, format, &Default::default())?
            );
            Ok(())
        }
        Command::Compare { a, b, format } => {
            let ja = crate::sweep::journal::Journal::read(&a)?;
            let jb = crate::sweep::journal::Journal::read(&b)?;
            print!(
                "{}",
                crate::report::compare(&ja, &jb, format, &Default::default())?
            );
            Ok(())
        }
        Command::Image {
            command: ImageCommand::Build { kernel },
        } => image::build(&kernel),
        Command::Doctor => doctor::doctor(),
    }
}
