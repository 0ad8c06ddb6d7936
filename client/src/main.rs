//! `crescent`: the command-line client (see `crescent_client::cli`).

fn main() -> std::process::ExitCode {
    crescent_client::cli::main_entry()
}
