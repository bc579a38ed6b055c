//! CPU time and memory of a process, from /proc, for the benchmarks.

/// One reading of a process.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    /// User + system CPU seconds so far.
    pub cpu_seconds: f64,
    pub rss_kib: u64,
    /// Peak RSS so far (VmHWM).
    pub peak_rss_kib: u64,
}

/// Reads `pid`'s CPU time and memory. Panics if the process is gone (a benchmark's bug).
pub fn sample(pid: u32) -> Sample {
    try_sample(pid).unwrap_or_else(|| panic!("process {pid} is gone"))
}

/// Reads `pid`'s CPU time and memory, or `None` once it has exited: for a child that may end
/// at any moment (an exited child not yet reaped has no memory lines).
pub fn try_sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    };
    Some(Sample {
        // The kernel's USER_HZ is 100 on every Linux architecture this runs on.
        cpu_seconds: ticks as f64 / 100.0,
        rss_kib: kib("VmRSS:")?,
        peak_rss_kib: kib("VmHWM:")?,
    })
}
