//! `docs/reference/etcd-backup-cli.md` documents every flag of `etcd-backup` and its
//! subcommands, with its environment variable and default, and no flag it no longer has.

use std::path::Path;

#[test]
fn every_flag_is_documented() {
    repo_checks::reference_docs::check_flags(
        Path::new(env!("CARGO_BIN_EXE_etcd-backup")),
        "etcd-backup-cli.md",
    );
}
