//! `docs/reference/mysql-backup.md` documents every flag of `mysql-backup` and its
//! subcommands, with its environment variable and default, and no flag it no longer has.

use std::path::Path;

#[test]
fn every_flag_is_documented() {
    repo_checks::reference_docs::check_flags(
        Path::new(env!("CARGO_BIN_EXE_mysql-backup")),
        "mysql-backup.md",
    );
}
