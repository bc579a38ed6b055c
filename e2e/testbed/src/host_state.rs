//! What a bed changes on this machine, read as text so that a test can compare the host before a
//! bed started and after `up.sh --stop`: network namespaces, links, addresses, routes, iptables
//! rules, mounts, cgroups, the sysctls the bed sets, the fixed paths kubelets and containerd
//! create, and processes that name a directory.

use std::collections::BTreeMap;
use std::process::Command;

/// One reading of the host: for each aspect, its lines, sorted.
pub type HostState = BTreeMap<&'static str, Vec<String>>;

/// The sysctls the bed (or a kubelet, or kube-proxy) may change (as `up.sh` records them).
const SYSCTLS: &[&str] = &[
    "net.ipv4.ip_forward",
    "net.bridge.bridge-nf-call-iptables",
    "net.bridge.bridge-nf-call-ip6tables",
    "net.ipv4.conf.all.route_localnet",
    "vm.overcommit_memory",
    "vm.panic_on_oom",
    "kernel.panic",
    "kernel.panic_on_oops",
    "kernel.keys.root_maxkeys",
    "kernel.keys.root_maxbytes",
];

/// Host paths a kubelet, containerd or CNI may create outside the bed's directory.
const HOST_PATHS: &[&str] = &[
    "/var/log/pods",
    "/var/log/containers",
    "/var/lib/kubelet",
    "/run/containerd",
    "/run/netns",
    "/var/run/nri",
    "/var/lib/cni",
];

fn lines_of(program: &str, args: &[&str]) -> Vec<String> {
    let output = Command::new(program).args(args).output();
    let mut lines: Vec<String> = match output {
        Ok(o) => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(str::to_string)
            .collect(),
        Err(e) => vec![format!("cannot run {program}: {e}")],
    };
    lines.sort();
    lines
}

/// The host now. `dir` names the bed's directory: processes whose command line contains it are
/// listed (none should outlive `--stop`).
pub fn read(dir: &std::path::Path) -> HostState {
    let mut state = HostState::new();
    state.insert("network namespaces", lines_of("ip", &["netns", "list"]));
    state.insert(
        "links",
        lines_of("ip", &["-o", "link", "show"])
            .iter()
            .filter_map(|l| l.split(": ").nth(1).map(|n| n.to_string()))
            .collect(),
    );
    state.insert("addresses", lines_of("ip", &["-o", "addr", "show"]));
    state.insert("routes", lines_of("ip", &["route", "show", "table", "all"]));
    let mut rules = Vec::new();
    for table in ["filter", "nat", "mangle", "raw"] {
        for rule in lines_of("iptables", &["-t", table, "-S"]) {
            rules.push(format!("{table}: {rule}"));
        }
    }
    state.insert("iptables", rules);
    let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(" "))
        .collect();
    mounts.sort();
    state.insert("mounts", mounts);
    state.insert("cgroups", cgroups());
    state.insert(
        "sysctls",
        SYSCTLS
            .iter()
            .map(|key| {
                let value = lines_of("sysctl", &["-n", key]).join(" ");
                format!("{key} = {value}")
            })
            .collect(),
    );
    state.insert(
        "host paths",
        HOST_PATHS
            .iter()
            .filter(|p| std::path::Path::new(p).exists())
            .map(|p| p.to_string())
            .collect(),
    );
    state.insert(
        "CNI cache",
        files_under(std::path::Path::new("/var/lib/cni")),
    );
    state.insert("processes", processes_naming(&dir.to_string_lossy()));
    state
}

/// The cgroups directly under each v1 hierarchy's root (where the pods' trees go), except the
/// ones this machine's own process manager makes per command.
fn cgroups() -> Vec<String> {
    let mut found = Vec::new();
    let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") else {
        return found;
    };
    for hierarchy in hierarchies.flatten() {
        let Ok(children) = std::fs::read_dir(hierarchy.path()) else {
            continue;
        };
        for child in children.flatten() {
            let name = child.file_name().to_string_lossy().into_owned();
            if child.path().is_dir() && name != "process_api" {
                found.push(format!(
                    "{}/{name}",
                    hierarchy.file_name().to_string_lossy()
                ));
            }
        }
    }
    found.sort();
    found
}

/// Every file and directory under `root`, recursively (none if it does not exist).
fn files_under(root: &std::path::Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path.clone());
            }
            found.push(path.display().to_string());
        }
    }
    found.sort();
    found
}

/// Processes (and containerd shims) whose command line contains `text`.
fn processes_naming(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let own = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.chars().all(|c| c.is_ascii_digit()) || pid == own {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if cmdline.contains(text) || cmdline.contains("containerd-shim") {
            found.push(cmdline.trim().to_string());
        }
    }
    found.sort();
    found
}

/// What differs between two readings, one line per aspect and line ("+" only after, "-" only
/// before); empty when the host is as it was.
pub fn differences(before: &HostState, after: &HostState) -> String {
    let mut text = String::new();
    for (aspect, lines) in after {
        let old = before.get(aspect).cloned().unwrap_or_default();
        for line in lines.iter().filter(|l| !old.contains(l)) {
            text += &format!("{aspect}: + {line}\n");
        }
        for line in old.iter().filter(|l| !lines.contains(l)) {
            text += &format!("{aspect}: - {line}\n");
        }
    }
    text
}
