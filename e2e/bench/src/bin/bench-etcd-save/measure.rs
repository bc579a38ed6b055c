//! One way, run and measured: wall time and peak RSS by GNU time, CPU seconds of the client and
//! of the servers. A way that hangs is stopped with a report of where it waited.

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};

/// A way here takes seconds (the largest, 1 GiB through S3, under 20 s): one still running
/// after this is stuck, not slow.
const WAY_LIMIT: Duration = Duration::from_secs(300);

/// How long a stuck way gets after SIGTERM (the CLI aborts its upload) before SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(30);

/// The process group of the way running now (0: none), for [`stop_ways_on_interrupt`].
static RUNNING_GROUP: AtomicU32 = AtomicU32::new(0);

/// From now on, Ctrl-C of the bench also stops the way that runs: in a process group of its
/// own, it no longer gets the terminal's SIGINT.
pub(crate) fn stop_ways_on_interrupt() {
    tokio::spawn(async {
        if tokio::signal::ctrl_c().await.is_ok() {
            let group = RUNNING_GROUP.load(Ordering::SeqCst);
            if group != 0 {
                let _ = Command::new("kill")
                    .args(["-TERM", "--", &format!("-{group}")])
                    .status();
            }
            std::process::exit(130);
        }
    });
}

/// One measured command.
#[derive(Clone)]
pub(crate) struct Measured {
    pub(crate) label: &'static str,
    pub(crate) seconds: f64,
    /// User and system CPU seconds of the client processes (not of etcd or Garage).
    pub(crate) user_seconds: f64,
    pub(crate) system_seconds: f64,
    /// CPU seconds etcd and Garage spent meanwhile: with the client's, what the machine had to do.
    pub(crate) server_cpu_seconds: f64,
    pub(crate) peak_rss_mib: f64,
}

/// CPU seconds (user + system) a process has used so far, from `/proc/PID/stat`.
fn process_cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name (which may hold spaces) start at field 3; utime and stime
    // are fields 14 and 15, in clock ticks (100 per second on Linux).
    let after_name = &stat[stat.rfind(')').context("/proc stat")? + 2..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

fn servers_cpu_seconds(servers: &[u32]) -> Result<f64> {
    servers.iter().map(|&pid| process_cpu_seconds(pid)).sum()
}

/// Runs `script` under `bash -c` with GNU time; fails when the command fails or hangs.
pub(crate) fn measure(
    label: &'static str,
    script: &str,
    env: &[(String, String)],
    servers: &[u32],
) -> Result<Measured> {
    measure_within(label, script, env, servers, WAY_LIMIT, STOP_GRACE)
}

fn measure_within(
    label: &'static str,
    script: &str,
    env: &[(String, String)],
    servers: &[u32],
    limit: Duration,
    grace: Duration,
) -> Result<Measured> {
    let dir = tempfile::tempdir()?;
    // The page cache writeback of an earlier way's files is not this way's to pay.
    let synced = Command::new("sync").status()?;
    if !synced.success() {
        bail!("sync failed");
    }
    let servers_before = servers_cpu_seconds(servers)?;
    let report = dir.path().join("time");
    let stderr = dir.path().join("stderr");
    let mut child = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("%e %M %U %S")
        .arg("-o")
        .arg(&report)
        .args(["bash", "-c", script])
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("ETCDCTL_API", "3")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr)?)
        // A group of its own, so a stuck way is stopped with everything it started.
        .process_group(0)
        .spawn()
        .context("cannot run /usr/bin/time (apt install time)")?;
    RUNNING_GROUP.store(child.id(), Ordering::SeqCst);
    let waited = wait_at_most(&mut child, limit);
    RUNNING_GROUP.store(0, Ordering::SeqCst);
    let status = match waited? {
        Some(status) => status,
        None => {
            let waits = where_it_waits(child.id());
            stop_group(&mut child, grace)?;
            bail!(
                "{label} still ran after {} s: stopped. {script}\nWhere it waited:\n{waits}\n{}",
                limit.as_secs(),
                std::fs::read_to_string(&stderr).unwrap_or_default()
            );
        }
    };
    if !status.success() {
        bail!(
            "{label} failed: {}\n{}",
            script,
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
    }
    let text = std::fs::read_to_string(&report)?;
    let fields: Vec<f64> = text
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("GNU time output: {text}"))?;
    let [seconds, kib, user, system] = fields[..] else {
        bail!("GNU time output: {text}");
    };
    Ok(Measured {
        label,
        seconds,
        user_seconds: user,
        system_seconds: system,
        server_cpu_seconds: servers_cpu_seconds(servers)? - servers_before,
        peak_rss_mib: kib / 1024.0,
    })
}

/// The exit status, or `None` when `child` still runs after `limit`.
fn wait_at_most(
    child: &mut std::process::Child,
    limit: Duration,
) -> Result<Option<std::process::ExitStatus>> {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if start.elapsed() >= limit {
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The processes of the way's group (state, kernel wait channel) and every TCP socket with its
/// queues and owner: enough to tell a lost response from a stalled stream.
fn where_it_waits(group: u32) -> String {
    let run = |program: &str, args: &[&str]| match Command::new(program).args(args).output() {
        Ok(out) => String::from_utf8_lossy(&out.stdout).into_owned(),
        Err(e) => format!("({program}: {e})\n"),
    };
    let all = run("ps", &["-eo", "pgid,pid,stat,wchan:32,etime,time,args"]);
    let group = group.to_string();
    let processes: String = all
        .lines()
        .filter(|line| {
            let pgid = line.split_whitespace().next();
            pgid == Some("PGID") || pgid == Some(group.as_str())
        })
        .map(|line| format!("{line}\n"))
        .collect();
    let sockets = run("ss", &["-tnpi"]);
    format!("{processes}\n{sockets}")
}

/// SIGTERM to the way's group, then SIGKILL to what is left of it after `grace`. The
/// group's leader (GNU time) dies of SIGTERM at once, whatever its children do, so the group
/// itself is watched, not the leader.
fn stop_group(child: &mut std::process::Child, grace: Duration) -> Result<()> {
    let group = child.id();
    let signal = |name: &str| {
        Command::new("kill")
            .args([name, "--", &format!("-{group}")])
            .status()
    };
    signal("-TERM")?;
    let start = Instant::now();
    while group_is_running(group) && start.elapsed() < grace {
        std::thread::sleep(Duration::from_millis(50));
    }
    if group_is_running(group) {
        signal("-KILL")?;
        while group_is_running(group) {
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    child.wait()?;
    Ok(())
}

/// Whether a process of group `group` still runs (zombies, dead but not yet reaped, do not).
fn group_is_running(group: u32) -> bool {
    let Ok(ps) = Command::new("ps").args(["-eo", "pgid=,stat="]).output() else {
        return false;
    };
    String::from_utf8_lossy(&ps.stdout).lines().any(|line| {
        let mut fields = line.split_whitespace();
        fields.next() == Some(group.to_string().as_str())
            && fields.next().is_some_and(|stat| !stat.starts_with('Z'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_way_that_hangs_is_stopped_with_where_it_waited() {
        // A duration of its own, to find this `sleep` among the machine's processes. It runs as
        // a child of bash (two commands), so stopping only the top process would leave it, and
        // it ignores SIGTERM (as a hung client may not act on it), so only SIGKILL stops it.
        let marker = format!("sleep 600.{}", std::process::id());
        let script = format!("trap '' TERM\n{marker}\ntrue");
        let second = Duration::from_secs(1);
        let err = measure_within("stuck", &script, &[], &[], second, second)
            .err()
            .expect("a way that does not end fails");
        let report = err.to_string();
        assert!(
            report.contains("stuck still ran after 1 s: stopped"),
            "{report}"
        );
        assert!(
            report.lines().any(|l| l.contains(&marker)),
            "the report lists the group's processes: {report}"
        );
        assert!(
            report.contains("Recv-Q"),
            "the report lists the sockets: {report}"
        );
        let ps = Command::new("ps")
            .args(["-eo", "stat=,args="])
            .output()
            .unwrap();
        let left: Vec<String> = String::from_utf8_lossy(&ps.stdout)
            .lines()
            .filter(|l| l.contains(&marker) && !l.starts_with('Z'))
            .map(String::from)
            .collect();
        assert!(left.is_empty(), "still running after the stop: {left:?}");
    }
}
