//! Keeping the reference pages (`docs/reference/*.md`) true, for each binary's
//! `tests/reference_docs.rs`:
//!
//! - [`check_flags`]: every long flag its `--help` (and every subcommand's) lists is a row of the
//!   page's `## Flags` tables, with its environment variable and default in that row; and every
//!   flag those tables document still exists.
//! - [`check_metrics`]: every metric the operator registers is a row of the page's `## Metrics`
//!   table, and every row is a metric it registers.
//! - [`check_labels_and_annotations`]: every label, annotation, finalizer and scheduling gate the
//!   operators' code defines is on `docs/reference/labels-and-annotations.md`.
//!
//! A row documents what the code spans of its first column name (`` | `--lease-name` | ``,
//! `` | `etcd_backup_running` | ``); a section runs from its `## ` heading to the next one, so
//! `###` subsections (one per subcommand, say) belong to it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use testbed::kustomize::root;

/// A long flag as `--help` lists it.
#[derive(Debug, Default, Clone)]
pub struct Flag {
    /// The environment variable it reads, if any (`[env: NAME=]`).
    pub env: Option<String>,
    /// The defaults it shows (`[default: 60]`); one per subcommand that gives another.
    pub defaults: BTreeSet<String>,
    /// The commands whose help lists it (`""` for the top level).
    pub commands: BTreeSet<String>,
}

/// Every long flag of `binary` but `--help` and `--version`, from its `--help` and, recursively,
/// from each subcommand's (the `Commands:` section names them; `help` is left out).
pub fn help_flags(binary: &Path) -> BTreeMap<String, Flag> {
    let mut flags = BTreeMap::new();
    let mut queue = vec![Vec::<String>::new()];
    while let Some(command) = queue.pop() {
        let mut run = Command::new(binary);
        run.args(&command).arg("--help").env_clear();
        let output = run
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", binary.display()));
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "{} {} --help failed: {}",
            binary.display(),
            command.join(" "),
            String::from_utf8_lossy(&output.stderr)
        );
        let (options, subcommands) = parse_help(&text);
        for (name, env, default) in options {
            let flag: &mut Flag = flags.entry(name).or_default();
            flag.env = flag.env.take().or(env);
            flag.defaults.extend(default);
            flag.commands.insert(command.join(" "));
        }
        for sub in subcommands {
            let mut next = command.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    flags
}

/// `(flag, env, default)` of one option of a help text.
type HelpOption = (String, Option<String>, Option<String>);

/// Every option of one help text, and the subcommands it names.
fn parse_help(text: &str) -> (Vec<HelpOption>, Vec<String>) {
    let mut options: Vec<HelpOption> = Vec::new();
    let mut subcommands = Vec::new();
    let mut section = "";
    for line in text.lines() {
        if !line.starts_with(' ') {
            section = line.trim_end();
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        if section == "Commands:" && indent <= 2 {
            let name = trimmed.split_whitespace().next().unwrap_or_default();
            if name != "help" && !name.is_empty() {
                subcommands.push(name.to_string());
            }
            continue;
        }
        if section != "Options:" {
            continue;
        }
        if indent <= 6 && trimmed.starts_with('-') {
            // `-h, --help`, `--to <TO>`, `--leader-election`, `--tool-arg <TOOL_ARGS>`.
            let long = trimmed
                .split([' ', ','])
                .find(|w| w.starts_with("--"))
                .map(str::to_string);
            if let Some(long) = long {
                options.push((long, None, None));
            }
            // clap's short help puts the description on the same line.
        }
        if let Some((_, env, default)) = options.last_mut() {
            if let Some(name) = bracketed(trimmed, "[env: ") {
                *env = Some(name.split('=').next().unwrap_or_default().to_string());
            }
            if let Some(value) = bracketed(trimmed, "[default: ") {
                *default = Some(value);
            }
        }
    }
    options.retain(|(name, _, _)| name != "--help" && name != "--version");
    (options, subcommands)
}

/// The text after `open` up to its `]`.
fn bracketed(line: &str, open: &str) -> Option<String> {
    let start = line.find(open)? + open.len();
    let end = line[start..].find(']')? + start;
    Some(line[start..end].to_string())
}

/// `docs/reference/<name>`.
pub fn page_path(name: &str) -> PathBuf {
    root().join("docs/reference").join(name)
}

fn read_page(name: &str) -> String {
    let path = page_path(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The table rows of the page's `## <heading>` section: the code spans of each row's first
/// column, and the whole row.
pub fn section_rows(page: &str, heading: &str) -> Vec<(Vec<String>, String)> {
    let mut inside = false;
    let mut rows = Vec::new();
    for line in page.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = title.trim() == heading;
            continue;
        }
        let Some(row) = line.trim().strip_prefix('|').filter(|_| inside) else {
            continue;
        };
        let first = row.split('|').next().unwrap_or_default();
        let codes: Vec<String> = first
            .split('`')
            .skip(1)
            .step_by(2)
            .map(|c| c.trim().to_string())
            .collect();
        if !codes.is_empty() {
            rows.push((codes, line.to_string()));
        }
    }
    rows
}

/// The text of the page's `## <heading>` section.
pub fn section_text(page: &str, heading: &str) -> String {
    let text = read_page(page);
    let mut inside = false;
    let mut section = String::new();
    for line in text.lines() {
        if let Some(title) = line.strip_prefix("## ") {
            inside = title.trim() == heading;
            continue;
        }
        if inside {
            section.push_str(line);
            section.push('\n');
        }
    }
    assert!(!section.is_empty(), "{page} has no section ## {heading}");
    section
}

/// Panics, naming every word of `names` that the `## <heading>` section of
/// `docs/reference/<page>` does not name as code (`` `Word` ``).
pub fn check_named_in_section(page: &str, heading: &str, names: &[&str]) {
    let missing = not_named(&section_text(page, heading), names);
    assert!(
        missing.is_empty(),
        "docs/reference/{page}, ## {heading}, does not name {missing:?}"
    );
}

/// Panics, naming every word of `names` that `docs/<page>` does not name as code.
pub fn check_named_in_doc(page: &str, names: &[&str]) {
    let path = root().join("docs").join(page);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let missing = not_named(&text, names);
    assert!(missing.is_empty(), "docs/{page} does not name {missing:?}");
}

fn not_named<'a>(text: &str, names: &[&'a str]) -> Vec<&'a str> {
    names
        .iter()
        .copied()
        .filter(|name| !text.contains(&format!("`{name}`")))
        .collect()
}

/// The flag a code span names: `--to` of `` `--to URL` `` or `` `--tool-arg=ARG` ``.
fn flag_of(code: &str) -> Option<String> {
    let name = code.strip_prefix("--")?;
    let end = name
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .unwrap_or(name.len());
    (end > 0).then(|| format!("--{}", &name[..end]))
}

/// Panics, naming every flag of `binary` missing from the `## Flags` tables of
/// `docs/reference/<page>` (or whose row lacks its environment variable or default), and every
/// flag documented there that `binary` no longer has.
pub fn check_flags(binary: &Path, page: &str) {
    let flags = help_flags(binary);
    assert!(
        flags.len() >= 3,
        "{}: too few flags found in its help, is the parser right? {flags:?}",
        binary.display()
    );
    let text = read_page(page);
    let mut rows: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (codes, row) in section_rows(&text, "Flags") {
        for flag in codes.iter().filter_map(|c| flag_of(c)) {
            rows.entry(flag).or_default().push(row.clone());
        }
    }
    let mut problems = Vec::new();
    let commands = |f: &Flag| {
        f.commands
            .iter()
            .map(|c| if c.is_empty() { "(top level)" } else { c })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let missing: Vec<String> = flags
        .iter()
        .filter(|(name, _)| !rows.contains_key(*name))
        .map(|(name, f)| format!("{name} (in: {})", commands(f)))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{} flag(s) of `{}` are not in the `## Flags` tables of docs/reference/{page}:\n  {}",
            missing.len(),
            binary.file_name().unwrap_or_default().to_string_lossy(),
            missing.join("\n  ")
        ));
    }
    let mut incomplete = Vec::new();
    for (name, flag) in &flags {
        let Some(documented) = rows.get(name) else {
            continue;
        };
        if let Some(env) = &flag.env
            && !documented.iter().any(|r| contains_word(r, env))
        {
            incomplete.push(format!("{name}: its row does not name its variable {env}"));
        }
        for default in &flag.defaults {
            if !documented.iter().any(|r| contains_word(r, default)) {
                incomplete.push(format!(
                    "{name}: its row does not give its default {default}"
                ));
            }
        }
    }
    if !incomplete.is_empty() {
        problems.push(format!(
            "docs/reference/{page}:\n  {}",
            incomplete.join("\n  ")
        ));
    }
    let stale: Vec<&String> = rows.keys().filter(|f| !flags.contains_key(*f)).collect();
    if !stale.is_empty() {
        problems.push(format!(
            "{} flag(s) in the `## Flags` tables of docs/reference/{page} are not flags of `{}` \
             (removed or renamed: take them out): {}",
            stale.len(),
            binary.file_name().unwrap_or_default().to_string_lossy(),
            stale
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Whether `word` is in `text` on its own: not part of a longer name or number (`30` is not in
/// `300`, `LEASE_NAME` not in `LEASE_NAMES`).
fn contains_word(text: &str, word: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '.';
    text.match_indices(word).any(|(at, _)| {
        let before = text[..at].chars().next_back();
        let after = text[at + word.len()..].chars().next();
        !before.is_some_and(part) && !after.is_some_and(part)
    })
}

/// The metric families registered in the `.rs` files under `src` (an operator's sources), as
/// exported: `<prefix>_<name>`, counters with `_total`, with their type (`counter`, `gauge`,
/// `histogram`). A family is registered either in place, `registry.register("name", "help",
/// family.clone())` on a `Registry::with_prefix("<prefix>")`, or by a shared type of the
/// workspace's `crates/` (`errors.register(&mut registry)` on a `let errors = Type::default()`,
/// whose `fn register` registers its families under the caller's prefix).
pub fn registered_metrics(src: &Path) -> BTreeMap<String, &'static str> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut shared_files = Vec::new();
    if let Ok(entries) = std::fs::read_dir(root().join("crates")) {
        for entry in entries.flatten() {
            rust_files(&entry.path().join("src"), &mut shared_files);
        }
    }
    let shared = shared_registrations(&shared_files);
    let mut metrics = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let Some(prefix) = text
            .split("Registry::with_prefix(\"")
            .nth(1)
            .and_then(|rest| rest.split('"').next())
        else {
            continue;
        };
        let exported = |name: &str, kind: &'static str| match kind {
            "counter" => format!("{prefix}_{name}_total"),
            _ => format!("{prefix}_{name}"),
        };
        for call in text.split("registry.register(").skip(1) {
            let name = call.split('"').nth(1).expect("a metric name");
            // The family: the third argument, `family.clone()`.
            let variable = call
                .split("\",")
                .nth(2)
                .unwrap_or_default()
                .trim()
                .split(['.', ')', ','])
                .next()
                .unwrap_or_default()
                .trim();
            let declaration = declaration_of(&text, variable)
                .unwrap_or_else(|| panic!("{}: no declaration of {variable:?}", file.display()));
            let kind = kind_of(declaration).unwrap_or_else(|| {
                panic!("{}: what kind of metric is {variable}?", file.display())
            });
            metrics.insert(exported(name, kind), kind);
        }
        for (at, _) in text.match_indices(".register(&mut registry)") {
            let variable = text[..at]
                .rsplit(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            let declaration = declaration_of(&text, variable)
                .unwrap_or_else(|| panic!("{}: no declaration of {variable:?}", file.display()));
            let type_name = declaration.split("::").next().unwrap_or_default().trim();
            let families = shared.get(type_name).unwrap_or_else(|| {
                panic!(
                    "{}: {variable} ({type_name}) registers metrics, but no `impl {type_name}` with \
                     `fn register` under crates/ says which",
                    file.display()
                )
            });
            for (name, kind) in families {
                metrics.insert(exported(name, kind), kind);
            }
        }
    }
    metrics
}

/// What `let variable = ...;` says, up to its `;`.
fn declaration_of<'a>(text: &'a str, variable: &str) -> Option<&'a str> {
    text.split(&format!("let {variable} = "))
        .nth(1)
        .and_then(|d| d.split(';').next())
}

fn kind_of(declaration: &str) -> Option<&'static str> {
    if declaration.contains("Histogram") {
        Some("histogram")
    } else if declaration.contains("Counter") {
        Some("counter")
    } else if declaration.contains("Gauge") {
        Some("gauge")
    } else {
        None
    }
}

/// `Type -> [(name, kind)]` of the types whose `fn register(&self, registry: &mut Registry)`
/// registers families (`registry.register("name", "help", self.0.clone())`), the kind read from
/// the type's declaration (`struct Type(Family<Labels, Counter>);`).
fn shared_registrations(files: &[PathBuf]) -> BTreeMap<String, Vec<(String, &'static str)>> {
    let mut shared = BTreeMap::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for block in text.split("\nimpl ").skip(1) {
            let type_name = block
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default();
            let Some(body) = block
                .split("fn register(&self, registry: &mut Registry)")
                .nth(1)
            else {
                continue;
            };
            let body = body.split("\n    }").next().unwrap_or_default();
            let declaration = text
                .split(&format!("struct {type_name}"))
                .nth(1)
                .and_then(|d| d.split([';', '}']).next())
                .unwrap_or_default();
            let kind = kind_of(declaration).unwrap_or_else(|| {
                panic!("{}: what kind of metric is {type_name}?", file.display())
            });
            let names = body
                .split("registry.register(")
                .skip(1)
                .filter_map(|call| call.split('"').nth(1))
                .map(|name| (name.to_string(), kind))
                .collect();
            shared.insert(type_name.to_string(), names);
        }
    }
    shared
}

/// [`check_labels_and_annotations`]: every key the operators' code defines as a label, annotation, finalizer or scheduling gate
/// (a `const` of type `&str` named `*_LABEL`, `*_ANNOTATION`, `*FINALIZER`, `*_GATE`, or `APP`
/// and `KEY_SECRET`, the label value of the restore and drill pods and the proof key's Secret),
/// anywhere under `crates/*/src` and `operators/*/src`, is on
/// `docs/reference/labels-and-annotations.md` (in backticks).
pub fn check_labels_and_annotations() {
    let page_path = root().join("docs/reference/labels-and-annotations.md");
    let page = std::fs::read_to_string(&page_path)
        .unwrap_or_else(|e| panic!("{}: {e}", page_path.display()));
    let mut files = Vec::new();
    for top in ["crates", "operators"] {
        for entry in std::fs::read_dir(root().join(top)).unwrap() {
            rust_files(&entry.unwrap().path().join("src"), &mut files);
        }
    }
    let mut keys = BTreeMap::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (name, value) in str_consts(&text) {
            let wanted = ["_LABEL", "_ANNOTATION", "FINALIZER", "_GATE"]
                .iter()
                .any(|s| name.ends_with(s))
                || name == "APP"
                || name == "KEY_SECRET";
            if wanted {
                let place = file
                    .strip_prefix(root())
                    .unwrap_or(file)
                    .display()
                    .to_string();
                keys.insert(value, format!("{name} in {place}"));
            }
        }
    }
    assert!(
        keys.len() >= 15,
        "too few keys found, is the scan right? {keys:?}"
    );
    let missing: Vec<String> = keys
        .iter()
        .filter(|(value, _)| !page.contains(&format!("`{value}`")))
        .map(|(value, from)| format!("`{value}` ({from})"))
        .collect();
    assert!(
        missing.is_empty(),
        "{} key(s) the operators set or read are not on docs/reference/labels-and-annotations.md:\n{}",
        missing.len(),
        missing.join("\n")
    );
}

/// `(NAME, value)` of every `const NAME: &str = "value";` in a Rust source text.
fn str_consts(text: &str) -> Vec<(String, String)> {
    let mut consts = Vec::new();
    for rest in text.split("const ").skip(1) {
        let Some((declaration, _)) = rest.split_once(';') else {
            continue;
        };
        let Some((name, value)) = declaration.split_once(':') else {
            continue;
        };
        let Some(value) = value.trim().strip_prefix("&str") else {
            continue;
        };
        let value = value.trim().trim_start_matches('=').trim();
        if let Some(literal) = value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
            consts.push((name.trim().to_string(), literal.to_string()));
        }
    }
    consts
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Panics, naming every metric the sources under `src` register (see [`registered_metrics`])
/// missing from the `## Metrics` table of `docs/reference/<page>`, and every metric documented
/// there that is not registered.
pub fn check_metrics(src: &Path, page: &str) {
    let registered = registered_metrics(src);
    assert!(
        registered.len() >= 3,
        "too few metrics registered under {}: did the metrics module move? {registered:?}",
        src.display()
    );
    let text = read_page(page);
    let documented: BTreeSet<String> = section_rows(&text, "Metrics")
        .into_iter()
        .flat_map(|(codes, _)| codes)
        .map(|c| c.split('{').next().unwrap_or_default().to_string())
        .collect();
    let mut problems = Vec::new();
    let missing: Vec<String> = registered
        .iter()
        .filter(|(name, _)| !documented.contains(*name))
        .map(|(name, kind)| format!("{name} ({kind})"))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "{} metric(s) are not in the `## Metrics` table of docs/reference/{page}:\n  {}",
            missing.len(),
            missing.join("\n  ")
        ));
    }
    let stale: Vec<&str> = documented
        .iter()
        .filter(|d| !registered.contains_key(*d))
        .map(String::as_str)
        .collect();
    if !stale.is_empty() {
        problems.push(format!(
            "{} metric(s) in the `## Metrics` table of docs/reference/{page} are not registered \
             (removed or renamed: take them out): {}",
            stale.len(),
            stale.join(", ")
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn help_text_gives_flags_env_defaults_and_subcommands() {
        let help = "\
Usage: x [OPTIONS] <COMMAND>

Commands:
  save         Snapshot
  drill-check  The last step
  help         Print this message

Options:
      --namespace <NAMESPACE>
          Watch objects in this namespace only [env: WATCH_NAMESPACE=] [default: \"\"]
      --leader-election
          Elect a leader [env: LEADER_ELECTION=ns]
      --compress <COMPRESS>
          [default: none] [possible values: none, zstd]
      --tool-arg <TOOL_ARGS>
          Extra argument, e.g. --tool-arg=--no-lock
  -h, --help
          Print help
  -V, --version
          Print version
";
        let (options, subcommands) = parse_help(help);
        assert_eq!(subcommands, ["save", "drill-check"]);
        let names: Vec<&str> = options.iter().map(|(n, _, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "--namespace",
                "--leader-election",
                "--compress",
                "--tool-arg"
            ]
        );
        assert_eq!(options[0].1.as_deref(), Some("WATCH_NAMESPACE"));
        assert_eq!(options[0].2.as_deref(), Some("\"\""));
        assert_eq!(options[1].1.as_deref(), Some("LEADER_ELECTION"));
        assert_eq!(options[2].2.as_deref(), Some("none"));
        assert_eq!(options[3], ("--tool-arg".into(), None, None));
    }

    #[test]
    fn a_default_or_variable_counts_only_as_a_whole_word() {
        assert!(contains_word("| `--x` | `X_Y` | `300` |", "300"));
        assert!(!contains_word("| `--x` | `X_Y` | `300` |", "30"));
        assert!(!contains_word("| `--x` | `X_YZ` | |", "X_Y"));
        assert!(contains_word("| `--x` | | `\"\"` (all) |", "\"\""));
        assert!(contains_word(
            "| `--x` | | `0.0.0.0:8080` |",
            "0.0.0.0:8080"
        ));
    }

    #[test]
    fn rows_of_a_section_and_the_flags_they_name() {
        let page = "\
## Flags

| flag | env |
|---|---|
| `--lease-name` / `--lease-namespace` | `LEASE_NAME` |
| `--tool-arg=ARG` | |

### `save`

| `--to URL` | where |

## Metrics

| `etcd_x_total{reason}` | counter |
";
        let rows = section_rows(page, "Flags");
        let flags: Vec<String> = rows
            .iter()
            .flat_map(|(codes, _)| codes.iter().filter_map(|c| flag_of(c)))
            .collect();
        assert_eq!(
            flags,
            ["--lease-name", "--lease-namespace", "--tool-arg", "--to"]
        );
        assert_eq!(section_rows(page, "Metrics").len(), 1);
    }
}
