//! A stdio backend's `command` resolved as its spawn resolves it: paths against `cwd`, bare
//! names along `PATH` (the backend's own first), and only executable files accepted.

use crate::config::Stdio;
use crate::config::host::resolve;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::PathBuf;

/// A stdio backend running `command` in `cwd`, with `path` as the `PATH` of its `env`.
fn stdio(command: &str, cwd: Option<PathBuf>, path: Option<PathBuf>) -> Stdio {
    let mut env = BTreeMap::new();
    if let Some(path) = path {
        env.insert("PATH".to_owned(), path.display().to_string());
    }
    Stdio {
        command: PathBuf::from(command),
        args: Vec::new(),
        env,
        cwd,
        max_stderr_line_bytes: 1024,
        write_queue: 1,
        children: 1,
    }
}

/// A scratch directory with `run` (executable), `plain` (not executable) and `sub/`.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("mrtr-host-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("run"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.join("plain"), "not a program\n").unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |file: &str, mode: u32| {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(mode))
                .unwrap();
        };
        mode("run", 0o755);
        mode("plain", 0o644);
    }
    dir
}

#[test]
fn a_command_resolves_to_an_executable_file_as_the_spawn_finds_it() {
    let dir = scratch();
    let run = dir.join("run");
    let gateway_path = std::env::join_paths([dir.join("sub"), dir.clone()]).unwrap();
    let found = |s: &Stdio| resolve("backend[0]", s, Some(gateway_path.as_os_str()));
    // A path, absolute or relative to `cwd`.
    let absolute = run.display().to_string();
    assert_eq!(found(&stdio(&absolute, None, None)).unwrap(), run);
    assert_eq!(
        found(&stdio("./run", Some(dir.clone()), None)).unwrap(),
        dir.join("./run")
    );
    assert_eq!(
        found(&stdio("sub/../run", Some(dir.clone()), None)).unwrap(),
        dir.join("sub/../run")
    );
    // A bare name along PATH: the gateway's, or the backend's own when its env sets one.
    assert_eq!(found(&stdio("run", None, None)).unwrap(), run);
    assert_eq!(found(&stdio("run", None, Some(dir.clone()))).unwrap(), run);
    // An empty PATH entry is the working directory.
    let with_empty = OsStr::new(":/nonexistent");
    assert_eq!(
        resolve(
            "backend[0]",
            &stdio("run", Some(dir.clone()), None),
            Some(with_empty)
        )
        .unwrap(),
        dir.join(".").join("run")
    );
    let refused = [
        (
            stdio("/nonexistent/weather-mcp", None, None),
            "does not exist",
        ),
        (
            stdio(&dir.join("plain").display().to_string(), None, None),
            "not executable",
        ),
        (
            stdio(&dir.join("sub").display().to_string(), None, None),
            "not a file",
        ),
        (
            stdio("./run", Some(dir.join("sub")), None),
            "does not exist",
        ),
        (
            stdio("plain", None, Some(dir.clone())),
            "in any directory of PATH (from the backend's env)",
        ),
        (
            stdio("run", None, Some(dir.join("sub"))),
            "in any directory of PATH",
        ),
        (
            stdio("mrtr-no-such-program", None, None),
            "(from the gateway's environment)",
        ),
    ];
    for (s, why) in &refused {
        let err = found(s).unwrap_err();
        assert_eq!(
            err.field,
            "backend[0].command",
            "{}: {err}",
            s.command.display()
        );
        assert!(err.reason.contains(why), "{}: {err}", s.command.display());
    }
    let err = found(&stdio("run", Some(dir.join("missing")), None)).unwrap_err();
    assert_eq!(err.field, "backend[0].cwd", "{err}");
    // No PATH anywhere: the C library's default, where `sh` is.
    assert!(resolve("backend[0]", &stdio("sh", None, None), None).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}
