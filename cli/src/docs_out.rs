//! `crescent completion SHELL` and `crescent man --dir DIR`: shell completion scripts and man
//! pages generated from the command definitions themselves, so they always match this
//! binary. Neither contacts crescentd.

use std::path::Path;

use clap::CommandFactory;
use crescent_client::ClientError;

use crate::Cli;

/// Writes the completion script for `shell` to stdout.
pub fn completion(shell: clap_complete::Shell) -> Result<u8, ClientError> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, "crescent", &mut out);
    std::io::stdout()
        .lock()
        .write_all(&out)
        .map_err(|source| ClientError::Io {
            context: "cannot write to stdout".into(),
            source,
        })?;
    Ok(0)
}

/// Writes `crescent.1` and one page per subcommand (`crescent-put.1`,
/// `crescent-weights-get.1`, ...) into `dir`; prints the files written.
pub fn man_pages(dir: &Path, json: bool) -> Result<u8, ClientError> {
    let io = |context: String| move |source| ClientError::Io { context, source };
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let mut cmd = Cli::command();
    cmd.build();
    let mut written = Vec::new();
    write_pages(&cmd, "crescent", dir, &mut written)
        .map_err(io(format!("writing man pages into {}", dir.display())))?;
    if json {
        outln!("{}", serde_json::json!({ "written": written }))?;
    } else {
        for file in &written {
            outln!("{file}")?;
        }
    }
    Ok(0)
}

fn write_pages(
    cmd: &clap::Command,
    name: &str,
    dir: &Path,
    written: &mut Vec<String>,
) -> std::io::Result<()> {
    let page = cmd.clone().name(name.to_string());
    let mut roff = Vec::new();
    clap_mangen::Man::new(page).render(&mut roff)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, roff)?;
    written.push(path.display().to_string());
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        write_pages(sub, &format!("{name}-{}", sub.get_name()), dir, written)?;
    }
    Ok(())
}

use std::io::Write as _;
