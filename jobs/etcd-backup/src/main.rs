//! `etcd-backup`: the job binary for CronJobs and for humans.

mod changes;
mod cli;
mod commands;
mod setup;

use std::process::ExitCode;

use clap::Parser;

use cli::Cli;

// One thread: a save is one stream with one hash pass and I/O; a second worker only added
// cross-thread wake-ups (measured: 2.0 instead of 2.2 client CPU-s per GiB, and no slower).
#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    command_line::init_logging(cli.log_format, "warn");
    // SIGTERM/SIGINT drop the work: its upload aborts and nothing is stored; a fetch removes
    // its partial file.
    let left = commands::left_when_interrupted(&cli.command);
    // `archive` runs until stopped, and stores its open segment first: it handles them itself.
    let result = if matches!(cli.command, cli::Command::Archive(_)) {
        commands::run(cli).await
    } else {
        match command_line::until_interrupted(commands::run(cli)).await {
            Ok(result) => result,
            Err(interrupt) => return command_line::exit_after(interrupt, &left).await,
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            // One line naming the cause; the chain is already in the message.
            eprintln!("error: {err:#}");
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
