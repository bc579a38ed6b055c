//! The `Dockerfile`'s runtime images, checked without a container engine (none runs on the
//! development machines or in CI): [`Dockerfile`] reads its stages, and [`DistrolessCcRoot`] runs
//! a binary as its image would, as the image's user, in a root file system made of only the
//! files of the Debian 12 packages `libc6` and `libgcc-s1`, the CA bundle, and the `nonroot`
//! user with its home and `/tmp`. `gcr.io/distroless/cc-debian12` is built from those packages
//! plus tzdata, libssl3, libstdc++6 and libgomp1, so a binary that works here works there. The
//! files come from this machine's own packages (it runs Debian 12), so nothing is downloaded.
//! `chroot` needs root, as the tests run in CI. The root shares the host's network, so a binary
//! in it reaches servers on loopback.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, bail, ensure};

/// Writes distroless/cc's runtime file set into a directory (one recipe, shared with the bed).
const DISTROLESS_CC_ROOT: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../cluster/distroless-cc-root.sh"
);
/// Where distroless (and Debian) keep the CA bundle.
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";
/// The environment distroless images set, and HOME as Docker derives it from USER.
const IMAGE_ENV: [(&str, &str); 3] = [
    (
        "PATH",
        "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    ),
    ("SSL_CERT_FILE", CA_BUNDLE),
    ("HOME", "/home/nonroot"),
];

/// One `FROM ... AS name` stage: its base image and its instructions, continuation lines
/// joined and comments dropped.
#[derive(Debug)]
pub struct Stage {
    pub name: String,
    pub base: String,
    pub instructions: Vec<(String, String)>,
}

impl Stage {
    /// The arguments of every instruction `keyword` (upper case), in order.
    pub fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|(k, _)| k == keyword)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// The last `USER`, which the container runs as.
    pub fn user(&self) -> Option<&str> {
        self.all("USER").last().copied()
    }

    /// The `ENTRYPOINT` in exec form.
    pub fn entrypoint(&self) -> Result<Vec<String>> {
        let text = self.all("ENTRYPOINT").last().copied().unwrap_or_default();
        serde_json::from_str(text).with_context(|| {
            format!(
                "stage {}: ENTRYPOINT is not in exec form: {text}",
                self.name
            )
        })
    }

    /// `COPY --from=<stage> <source> <destination>` instructions, as (stage, source, destination).
    pub fn copies_from_stages(&self) -> Vec<(String, String, String)> {
        self.all("COPY")
            .into_iter()
            .filter_map(|args| {
                let mut words = args.split_whitespace();
                let stage = words.next()?.strip_prefix("--from=")?.to_string();
                let (source, destination) = (words.next()?, words.next()?);
                Some((stage, source.to_string(), destination.to_string()))
            })
            .collect()
    }
}

/// A parsed Dockerfile and its header comment, where the build commands are documented.
#[derive(Debug)]
pub struct Dockerfile {
    pub stages: Vec<Stage>,
    pub comments: String,
}

impl Dockerfile {
    pub fn read(path: &Path) -> Result<Dockerfile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        Dockerfile::parse(&text)
    }

    pub fn parse(text: &str) -> Result<Dockerfile> {
        let mut stages: Vec<Stage> = Vec::new();
        let mut comments = String::new();
        let mut logical = String::new();
        for line in text.lines() {
            let trimmed = line.trim();
            if let Some(comment) = trimmed.strip_prefix('#') {
                comments.push_str(comment);
                comments.push('\n');
                continue;
            }
            if let Some(continued) = trimmed.strip_suffix('\\') {
                logical.push_str(continued);
                logical.push(' ');
                continue;
            }
            logical.push_str(trimmed);
            let instruction = std::mem::take(&mut logical);
            let Some((keyword, args)) = instruction.trim().split_once(char::is_whitespace) else {
                continue;
            };
            let (keyword, args) = (keyword.to_ascii_uppercase(), args.trim().to_string());
            if keyword == "FROM" {
                let words: Vec<&str> = args.split_whitespace().collect();
                let [base, as_, name] = words[..] else {
                    bail!("every stage needs a name: FROM {args}");
                };
                ensure!(as_.eq_ignore_ascii_case("AS"), "FROM {args}");
                stages.push(Stage {
                    name: name.to_string(),
                    base: base.to_string(),
                    instructions: Vec::new(),
                });
            } else {
                let stage = stages
                    .last_mut()
                    .with_context(|| format!("{keyword} before the first FROM"))?;
                stage.instructions.push((keyword, args));
            }
        }
        Ok(Dockerfile { stages, comments })
    }

    pub fn stage(&self, name: &str) -> Result<&Stage> {
        self.stages
            .iter()
            .find(|s| s.name == name)
            .with_context(|| format!("the Dockerfile has no stage {name}"))
    }
}

/// A root file system with distroless/cc's shared libraries and nothing else; removed on drop.
pub struct DistrolessCcRoot {
    dir: tempfile::TempDir,
}

impl DistrolessCcRoot {
    /// Built by `e2e/cluster/distroless-cc-root.sh`, the recipe the bed's images of the
    /// Dockerfile's distroless targets are built with too.
    pub fn build() -> Result<DistrolessCcRoot> {
        let dir = tempfile::tempdir()?;
        let output = Command::new(DISTROLESS_CC_ROOT)
            .arg(dir.path())
            .output()
            .with_context(|| format!("cannot run {DISTROLESS_CC_ROOT}"))?;
        ensure!(
            output.status.success(),
            "{DISTROLESS_CC_ROOT} failed (a Debian 12 machine and root are needed): {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Ok(DistrolessCcRoot { dir })
    }

    /// Every path in the root (relative, without the leading `/`), directories included.
    pub fn paths(&self) -> Result<std::collections::BTreeSet<String>> {
        let mut out = std::collections::BTreeSet::new();
        let mut pending = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let path = entry.path();
                out.insert(path.strip_prefix(self.dir.path())?.display().to_string());
                if entry.file_type()?.is_dir() {
                    pending.push(path);
                }
            }
        }
        Ok(out)
    }

    /// Copies `binary` to `destination` (an absolute path inside the root), executable by all.
    pub fn install(&self, binary: &Path, destination: &str) -> Result<PathBuf> {
        let target = self.dir.path().join(destination.trim_start_matches('/'));
        std::fs::create_dir_all(target.parent().unwrap())?;
        std::fs::copy(binary, &target)
            .with_context(|| format!("cannot copy {}", binary.display()))?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))?;
        Ok(target)
    }

    /// Runs `argv` inside the root as `user` (`uid:gid`), with the image's environment plus
    /// `env`, and nothing of this process's.
    pub fn run(&self, user: &str, argv: &[&str], env: &[(String, String)]) -> Result<Output> {
        Command::new("/usr/sbin/chroot")
            .arg(format!("--userspec={user}"))
            .arg(self.dir.path())
            .args(argv)
            .env_clear()
            .envs(IMAGE_ENV)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .output()
            .context("cannot run chroot (needs root)")
    }
}

/// Runs `binary` as the image `stage` of a distroless/cc Dockerfile would: installed at the
/// stage's ENTRYPOINT and run with `args` and `env` as the stage's USER (which must be set).
pub fn run_as_in_image(
    stage: &Stage,
    binary: &Path,
    args: &[&str],
    env: &[(String, String)],
) -> Result<Output> {
    ensure!(
        stage.base.starts_with("gcr.io/distroless/cc-debian12"),
        "stage {} is not based on distroless/cc: {}",
        stage.name,
        stage.base
    );
    let entrypoint = stage.entrypoint()?;
    let user = stage.user().context("the stage has no USER")?;
    let root = DistrolessCcRoot::build()?;
    root.install(binary, &entrypoint[0])?;
    let argv: Vec<&str> = entrypoint
        .iter()
        .map(String::as_str)
        .chain(args.iter().copied())
        .collect();
    root.run(user, &argv, env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_instructions_and_continuations() {
        let file = Dockerfile::parse(
            "# build: docker build --target app .\nFROM rust AS builder\nRUN a \\\n  && b\n\
             FROM scratch AS app\nCOPY --from=builder /out/app /bin/app\nUSER 1:1\n\
             ENTRYPOINT [\"/bin/app\"]\n",
        )
        .unwrap();
        assert!(file.comments.contains("--target app"));
        let builder = file.stage("builder").unwrap();
        assert_eq!(builder.all("RUN"), ["a  && b"]);
        let app = file.stage("app").unwrap();
        assert_eq!(app.base, "scratch");
        assert_eq!(
            app.copies_from_stages(),
            [("builder".into(), "/out/app".into(), "/bin/app".into())]
        );
        assert_eq!(app.user(), Some("1:1"));
        assert_eq!(app.entrypoint().unwrap(), ["/bin/app"]);
        assert!(Dockerfile::parse("FROM rust\n").is_err(), "unnamed stage");
    }

    /// The root holds only glibc and libgcc: a program that needs more does not start.
    #[test]
    fn a_binary_needing_other_libraries_does_not_start_in_the_root() {
        let root = DistrolessCcRoot::build().unwrap();
        root.install(Path::new("/usr/bin/openssl"), "/bin/openssl")
            .unwrap();
        let out = root
            .run("65532:65532", &["/bin/openssl", "version"], &[])
            .unwrap();
        assert!(!out.status.success(), "{out:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("libssl"), "{stderr}");
    }
}
