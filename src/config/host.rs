//! The checks a valid config must still pass on the machine it is to run on: each stdio
//! backend's program must be there to start. A child is started only at a backend's first call,
//! so without them a typo in `command` passed `check` and the start, and failed every call.
//! `serve` and `check` run them after loading (`crate::cli`); `Config::parse` does not, so a
//! config can be built and tested where its backends' programs are not installed.

use super::{Config, ConfigError, Stdio, Transport, bad};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

/// Where a bare command is looked for when neither the backend's `env` nor the gateway's
/// environment sets `PATH`: the C library's search path, which the spawn then uses.
const DEFAULT_PATH: &str = "/bin:/usr/bin";

impl Config {
    /// Refuses a config a backend of which could not start here: each stdio backend's `cwd`
    /// must be a directory and its `command` resolve to an executable file, as the spawn
    /// resolves it. The error names the field.
    pub fn check_host(&self) -> Result<(), ConfigError> {
        let path = std::env::var_os("PATH");
        for (i, b) in self.backends.iter().enumerate() {
            if let Transport::Stdio(stdio) = &b.transport {
                resolve(&format!("backend[{i}]"), stdio, path.as_deref())?;
            }
        }
        Ok(())
    }
}

/// The file a stdio backend's child runs, found as the spawn finds it; `backend` names the
/// table in errors and `gateway_path` is the gateway's own `PATH`. A command with a `/` is a
/// path, relative to `cwd` when set (the child enters it before it runs the program); a bare
/// name is looked for in each directory of `PATH`, the backend's own if its `env` sets one.
pub(super) fn resolve(
    backend: &str,
    stdio: &Stdio,
    gateway_path: Option<&OsStr>,
) -> Result<PathBuf, ConfigError> {
    if let Some(cwd) = &stdio.cwd
        && !cwd.is_dir()
    {
        return Err(bad(
            format!("{backend}.cwd"),
            format!("`{}` is not a directory", cwd.display()),
        ));
    }
    let field = format!("{backend}.command");
    let command = &stdio.command;
    if command.to_string_lossy().contains('/') {
        let file = within(stdio.cwd.as_deref(), command);
        return match executable(&file) {
            Ok(()) => Ok(file),
            Err(why) => Err(bad(field, format!("`{}` {why}", file.display()))),
        };
    }
    let (search, from) = match (stdio.env.get("PATH"), gateway_path) {
        (Some(own), _) => (OsStr::new(own), "from the backend's env"),
        (None, Some(path)) => (path, "from the gateway's environment"),
        (None, None) => (OsStr::new(DEFAULT_PATH), "not set: the default"),
    };
    std::env::split_paths(search)
        .map(|dir| {
            // An empty entry is the working directory, as for the shell.
            let dir = if dir.as_os_str().is_empty() {
                PathBuf::from(".")
            } else {
                dir
            };
            within(stdio.cwd.as_deref(), &dir).join(command)
        })
        .find(|file| executable(file).is_ok())
        .ok_or_else(|| {
            bad(
                field,
                format!(
                    "`{}` is not an executable file in any directory of PATH ({from}); give its full path or install it",
                    command.display()
                ),
            )
        })
}

/// `path` as the child sees it once it has entered `cwd`.
fn within(cwd: Option<&Path>, path: &Path) -> PathBuf {
    match cwd {
        Some(cwd) if path.is_relative() => cwd.join(path),
        _ => path.to_owned(),
    }
}

/// Whether `file` (after symbolic links) is a file the spawn can run: it exists, is a regular
/// file, and has an execute permission bit. Else why not, to follow its path in a message.
fn executable(file: &Path) -> Result<(), String> {
    let meta = match std::fs::metadata(file) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err("does not exist".to_owned());
        }
        Err(e) => return Err(format!("cannot be read: {e}")),
    };
    if !meta.is_file() {
        return Err("is not a file".to_owned());
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o111 == 0 {
            return Err("is not executable (no execute permission)".to_owned());
        }
    }
    Ok(())
}
