//! Reading the JSON logs (`LOG_FORMAT=json`) of the processes under test.

use std::path::Path;

use k8s_openapi::jiff::Timestamp;

/// When each line of the JSON log at `log` that contains `message` was written.
pub fn logged_at(log: &Path, message: &str) -> Vec<Timestamp> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(message))
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v["timestamp"].as_str()?.parse().ok())
        .collect()
}
