//! README set-up command 1, its Kubernetes part: the demo binary (what `e2e/demo.sh` runs after
//! installing and building) on the kubelet bed, with this build's images: a 3-member EtcdCluster,
//! two scheduled backups, a disaster, an EtcdRestore, every key back. The demo checks its own
//! outcome (keys, members, owner) and exits non-zero otherwise.

use std::process::Command;

#[test]
fn the_demo_runs_the_whole_product() {
    // The bed follows the life of this test's runner (e2e/test.sh's BED_USER_PID, or cargo), not
    // this test's: the tests after this one keep it.
    let runner = std::env::var("BED_USER_PID")
        .unwrap_or_else(|_| std::os::unix::process::parent_id().to_string());
    let output = Command::new(env!("CARGO_BIN_EXE_demo"))
        .env("BED_USER_PID", runner)
        .output()
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the demo failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    assert!(stdout.contains("1000 of 1000 keys back"), "{stdout}");
    assert!(
        stdout.contains("all owned by the EtcdCluster: true"),
        "{stdout}"
    );
    assert!(stdout.trim_end().ends_with("demo: OK"), "{stdout}");
}
