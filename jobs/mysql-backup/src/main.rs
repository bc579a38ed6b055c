//! `mysql-backup`: the job binary (sidecar, init container, Job/CronJob).

mod cli;
mod commands;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The operator's filter: the AWS SDK would log the access key ID at info.
    backup_cli::init_logging(cli.log_format, backup_cli::DEFAULT_LOG_FILTER);
    match commands::run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
