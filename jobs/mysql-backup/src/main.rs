//! `mysql-backup`: the job binary (sidecar, init container, Job/CronJob).

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    backup_cli::init_logging(cli.log_format, "info");
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
