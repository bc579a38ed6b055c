//! Database credentials reach the tools through a defaults-extra-file (mode 0600, in a private
//! temporary directory removed on drop), never through the command line or the logs.

use std::fmt;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::{Error, Result};

#[derive(Clone, Default)]
pub struct DbConnection {
    pub user: Option<String>,
    pub password: Option<String>,
    pub socket: Option<PathBuf>,
    pub host: Option<String>,
    pub port: Option<u16>,
    /// A file the user provides (e.g. a mounted Secret); used as is, instead of the fields above.
    pub defaults_file: Option<PathBuf>,
}

impl fmt::Debug for DbConnection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DbConnection")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<set>"))
            .field("socket", &self.socket)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("defaults_file", &self.defaults_file)
            .finish()
    }
}

/// A defaults file ready to pass; the temporary one disappears with this value.
pub struct DefaultsFile {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl DefaultsFile {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Option-file value quoting: double quotes, with the escapes the option-file reader knows for
/// `\`, `"`, newline, carriage return and tab, so no value can end its line and start another
/// option. Other control characters have no escape there: [`check_value`] refuses them first.
fn quote(value: &str) -> String {
    let mut quoted = String::from("\"");
    for c in value.chars() {
        match c {
            '\\' => quoted.push_str("\\\\"),
            '"' => quoted.push_str("\\\""),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

/// A value the option file can hold exactly: no control characters but newline, carriage
/// return and tab (which [`quote`] escapes).
fn check_value(what: &str, value: &str) -> Result<()> {
    match value
        .chars()
        .find(|c| c.is_control() && !matches!(c, '\n' | '\r' | '\t'))
    {
        Some(c) => Err(Error::Config(format!(
            "the {what} holds the control character U+{:04X}, which an option file cannot carry",
            c as u32
        ))),
        None => Ok(()),
    }
}

impl DbConnection {
    pub fn defaults_file(&self) -> Result<DefaultsFile> {
        if let Some(path) = &self.defaults_file {
            return Ok(DefaultsFile {
                path: path.clone(),
                _dir: None,
            });
        }
        let mut body = String::new();
        for (what, value) in [
            ("user", &self.user),
            ("password", &self.password),
            ("host", &self.host),
        ] {
            if let Some(value) = value {
                check_value(what, value)?;
            }
        }
        if let Some(user) = &self.user {
            body += &format!("user={}\n", quote(user));
        }
        if let Some(password) = &self.password {
            body += &format!("password={}\n", quote(password));
        }
        if let Some(socket) = &self.socket {
            body += &format!("socket={}\n", quote(&socket.to_string_lossy()));
        }
        if let Some(host) = &self.host {
            body += &format!("host={}\n", quote(host));
        }
        if let Some(port) = self.port {
            body += &format!("port={port}\n");
        }
        // [client] for mariadb-backup and the SQL clients, [xtrabackup] for Percona XtraBackup.
        let text = format!("[client]\n{body}\n[xtrabackup]\n{body}");
        let dir = tempfile::Builder::new()
            .prefix("mysql-backup-")
            .tempdir()
            .map_err(|e| Error::io(std::env::temp_dir(), e))?;
        let path = dir.path().join("client.cnf");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::io(&path, e))?;
        file.write_all(text.as_bytes())
            .map_err(|e| Error::io(&path, e))?;
        Ok(DefaultsFile {
            path,
            _dir: Some(dir),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn writes_a_private_option_file_with_quoted_values() {
        let conn = DbConnection {
            user: Some("backup".into()),
            password: Some(r#"p"w\d #;x"#.into()),
            socket: Some("/run/mysqld/mysqld.sock".into()),
            ..DbConnection::default()
        };
        let file = conn.defaults_file().unwrap();
        let mode = std::fs::metadata(file.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let text = std::fs::read_to_string(file.path()).unwrap();
        assert!(text.contains(r#"password="p\"w\\d #;x""#), "{text}");
        assert!(text.starts_with("[client]\nuser=\"backup\""));
        assert!(
            !format!("{conn:?}").contains("p\\\"w"),
            "Debug hides the password"
        );
        let path = file.path().to_path_buf();
        drop(file);
        assert!(!path.exists(), "removed on drop");
    }

    #[test]
    fn a_value_cannot_end_its_line() {
        assert_eq!(
            quote("a\nplugin-dir=/tmp\r\tb"),
            r#""a\nplugin-dir=/tmp\r\tb""#
        );
        let conn = DbConnection {
            password: Some("pw\u{0}x".into()),
            ..DbConnection::default()
        };
        let refused = conn
            .defaults_file()
            .err()
            .expect("a NUL is refused")
            .to_string();
        assert!(refused.contains("U+0000"), "{refused}");
    }
}
