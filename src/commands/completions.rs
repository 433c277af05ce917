//! `ocrig completions SHELL` and `ocrig man DIR`: shell completions and man pages generated from
//! the clap definitions in [`crate::cli`], so they never disagree with `--help`.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

/// The completion script for `shell`, as `ocrig completions` prints it.
pub fn script(shell: clap_complete::Shell) -> Vec<u8> {
    let mut cmd = crate::cli::Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "ocrig", &mut out);
    out
}

pub fn completions(shell: clap_complete::Shell) -> anyhow::Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(&script(shell))?;
    stdout.flush()?;
    Ok(())
}

/// Writes `ocrig.1` and a page per subcommand, nested ones too (`ocrig-image-build.1`), into
/// `dir`; returns their paths, the top page first.
pub fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    // As clap_mangen::generate_to, but keeping the paths: no `help` subcommand page, and built
    // so that each subcommand's page is named after its full path (ocrig-run).
    let mut cmd = crate::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    fn generate(cmd: clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> anyhow::Result<()> {
        let page = clap_mangen::Man::new(cmd.clone());
        let path = page
            .generate_to(dir)
            .with_context(|| format!("writing a man page into {}", dir.display()))?;
        written.push(path);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()).cloned() {
            generate(sub, dir, written)?;
        }
        Ok(())
    }
    let mut written = Vec::new();
    generate(cmd, dir, &mut written)?;
    Ok(written)
}

pub fn man(dir: &Path) -> anyhow::Result<()> {
    for path in write_man_pages(dir)? {
        println!("{}", path.display());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_gets_a_script_naming_the_subcommands() {
        use clap::ValueEnum;
        for shell in clap_complete::Shell::value_variants() {
            let s = String::from_utf8(script(*shell)).unwrap();
            assert!(s.contains("ocrig"), "{shell}");
            assert!(s.contains("validate"), "{shell}");
        }
    }

    #[test]
    fn man_pages_cover_nested_subcommands() {
        let dir = tempfile::tempdir().unwrap();
        let written = write_man_pages(dir.path()).unwrap();
        let names: Vec<String> = written
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names[0], "ocrig.1");
        for name in [
            "ocrig-run.1",
            "ocrig-validate.1",
            "ocrig-image-build.1",
            "ocrig-man.1",
        ] {
            assert!(names.iter().any(|n| n == name), "{name} not in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("help")), "{names:?}");
    }
}
