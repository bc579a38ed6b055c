//! Running the project's binaries in tests: a command cut off from this machine's AWS
//! settings, its result as [`Run`], and the `--s3-*` flags for a [`Garage`].

use std::process::Output;

use crate::Garage;

/// Removes every ambient AWS setting (keys, endpoint, profile, config files, instance
/// metadata), so a test passes only with the credentials it gives itself.
pub fn without_ambient_aws(command: &mut tokio::process::Command) -> &mut tokio::process::Command {
    command
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .env_remove("AWS_ENDPOINT_URL")
        .env_remove("AWS_PROFILE")
        .env("AWS_CONFIG_FILE", "/nonexistent")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
        .env("AWS_EC2_METADATA_DISABLED", "true")
}

/// How a command ended.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Run {
    fn from(out: Output) -> Run {
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

impl Run {
    #[track_caller]
    pub fn ok(self) -> Self {
        assert_eq!(
            self.code, 0,
            "the command failed:\n{}\n{}",
            self.stdout, self.stderr
        );
        self
    }

    /// The JSON report: the last line on stdout.
    pub fn json(&self) -> serde_json::Value {
        let last = self.stdout.trim().lines().last().unwrap_or("");
        serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {}", self.stdout))
    }

    /// The final `error: ...` line.
    pub fn error_line(&self) -> String {
        self.stderr
            .lines()
            .rev()
            .find(|l| l.starts_with("error: "))
            .unwrap_or_else(|| panic!("no error line in:\n{}", self.stderr))
            .to_string()
    }

    /// Checks that stderr is one line, `error: ...`, that says `message`: what bad input gets.
    pub fn assert_one_error_line(&self, message: &str) {
        let lines: Vec<&str> = self.stderr.lines().collect();
        assert!(
            lines.len() == 1 && lines[0].starts_with("error: ") && lines[0].contains(message),
            "expected one error line saying {message:?}, got:\n{}",
            self.stderr
        );
    }
}

impl Garage {
    /// The `--s3-*` flags that reach this server, and its credentials as environment.
    pub fn cli_args(&self) -> (Vec<String>, Vec<(String, String)>) {
        let flags = ["--s3-endpoint", &self.endpoint, "--s3-region", &self.region];
        let flags = flags
            .into_iter()
            .chain(["--s3-force-path-style"])
            .map(String::from)
            .collect();
        let env = vec![
            ("AWS_ACCESS_KEY_ID".into(), self.access_key.clone()),
            ("AWS_SECRET_ACCESS_KEY".into(), self.secret_key.clone()),
        ];
        (flags, env)
    }
}

/// A child process's stderr (piped), read line by line and kept, to wait for a log line.
pub struct StderrLog {
    lines: tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStderr>>,
    /// Everything read so far.
    pub text: String,
}

impl StderrLog {
    /// Takes `child`'s stderr, which must be piped.
    pub fn of(child: &mut tokio::process::Child) -> StderrLog {
        use tokio::io::AsyncBufReadExt as _;
        let stderr = child.stderr.take().expect("stderr piped");
        StderrLog {
            lines: tokio::io::BufReader::new(stderr).lines(),
            text: String::new(),
        }
    }

    /// Reads until a line contains `needle`; panics with the log if the stream ends or `limit`
    /// passes first.
    pub async fn wait_for(&mut self, needle: &str, limit: std::time::Duration) {
        let found = tokio::time::timeout(limit, async {
            while let Some(line) = self.lines.next_line().await.expect("read stderr") {
                self.text.push_str(&line);
                self.text.push('\n');
                if line.contains(needle) {
                    return true;
                }
            }
            false
        })
        .await;
        assert_eq!(found, Ok(true), "no {needle:?} in:\n{}", self.text);
    }

    /// Reads the rest, up to the end of the stream.
    pub async fn read_to_end(&mut self) -> &str {
        while let Some(line) = self.lines.next_line().await.expect("read stderr") {
            self.text.push_str(&line);
            self.text.push('\n');
        }
        &self.text
    }
}
