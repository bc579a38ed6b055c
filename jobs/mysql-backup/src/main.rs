//! `mysql-backup`: the job binary (sidecar, init container, Job/CronJob).

mod cli;
mod commands;
mod list_output;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    // The operator's filter: the AWS SDK would log the access key ID at info.
    command_line::init_logging(cli.log_format, command_line::DEFAULT_LOG_FILTER);
    // SIGTERM/SIGINT drop the work: its upload aborts and nothing is stored.
    let left = commands::left_when_interrupted(&cli.command);
    let result = match command_line::until_interrupted(commands::run(cli)).await {
        Ok(result) => result,
        Err(interrupt) => return command_line::exit_after(interrupt, left).await,
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
