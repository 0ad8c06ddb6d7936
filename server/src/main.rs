//! crescentd entry point: parse flags, resolve the configuration, run the node.

use clap::Parser;
use crescent_server::cli::Args;
use crescent_server::config::LogFormat;
use crescent_server::Node;

fn init_tracing(level: &str, format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn main() {
    let args = Args::parse();
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("crescentd: configuration error: {e}");
            std::process::exit(2);
        }
    };
    if args.print_config {
        print!("{}", config.to_toml());
        return;
    }
    init_tracing(&config.log.level, config.log.format);
    let result = actix_rt::System::new().block_on(async move { Node::run(config).await });
    if let Err(e) = result {
        tracing::error!(error = %e, "crescentd stopped");
        eprintln!("crescentd: {e}");
        std::process::exit(e.exit_code());
    }
}
