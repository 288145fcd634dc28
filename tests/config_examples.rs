//! Every example in config/ parses and validates, and `check` reports bad configs clearly.

use mrtr_gateway::config::Config;
use std::process::Command;

#[test]
fn every_example_config_is_valid() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    toml_files(&root.join("config"), &mut found);
    toml_files(&root.join("deploy"), &mut found);
    for path in &found {
        Config::load(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
    let in_deploy = found
        .iter()
        .filter(|p| p.starts_with(root.join("deploy")))
        .count();
    assert!(
        found.len() >= 6 && in_deploy >= 3,
        "expected the example configs, found {found:?}"
    );
}

/// Every `.toml` file under `dir`, recursively.
fn toml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("readable dir") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            toml_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(path);
        }
    }
}

#[test]
fn check_prints_resolved_settings_and_exits_zero() {
    let out = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args([
            "check",
            "--config",
            concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml"),
        ])
        .output()
        .expect("run check");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("listen            127.0.0.1:8080"), "{text}");
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    assert!(
        text.contains(&format!("worker threads    {cpus}\n")),
        "the default is one worker per usable CPU: {text}"
    );
    assert!(text.contains("config OK"));
}

#[test]
fn check_rejects_a_bad_config_with_exit_64_and_the_field() {
    let path = std::env::temp_dir().join(format!("mrtr-bad-{}.toml", std::process::id()));
    std::fs::write(
        &path,
        "[limits]\nmax_json_depth = 0\n[[backend]]\nname = \"b\"\ncommand = \"x\"\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("limits.max_json_depth"), "{err}");
}

#[test]
fn keygen_prints_a_key_that_the_config_accepts() {
    let out = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["keygen", "--id", "k9"])
        .output()
        .expect("run keygen");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let toml_part: String = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let config = Config::parse(
        &format!("{toml_part}\n[[backend]]\nname = \"b\"\ncommand = \"x\"\n"),
        None,
    )
    .expect("keygen output parses");
    assert!(!config.state.ephemeral);
    assert_eq!(config.state.keys.sealing_key_id(), "k9");
    let (_, secret) = text
        .lines()
        .find(|l| l.starts_with("# or"))
        .and_then(|l| l.split_once("k9:"))
        .expect("env form");
    assert!(
        Config::parse(
            "[[backend]]\nname = \"b\"\ncommand = \"x\"\n",
            Some(&format!("k9:{}", secret.trim()))
        )
        .is_ok()
    );
}

/// Threads of process `pid` named `tokio-rt-worker` (the runtime's workers).
#[cfg(target_os = "linux")]
fn runtime_workers(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task list")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "tokio-rt-worker")
        .count()
}

#[cfg(target_os = "linux")]
#[test]
fn serve_runs_as_many_worker_threads_as_configured() {
    use std::io::BufRead;
    for workers in [1, 3] {
        let path = std::env::temp_dir().join(format!(
            "mrtr-workers-{}-{workers}.toml",
            std::process::id()
        ));
        std::fs::write(
            &path,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nworker_threads = {workers}\n\
                 [[backend]]\nname = \"b\"\nkind = \"builtin\"\n"
            ),
        )
        .unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args(["serve", "--config"])
            .arg(&path)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start gateway");
        // The listening line comes once the runtime is up.
        let stdout = child.stdout.take().expect("stdout");
        let started = std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.starts_with("mrtr-gateway listening on"));
        // A worker names itself once it runs, which may come after that line: wait for them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = runtime_workers(child.id());
        while seen < workers && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = runtime_workers(child.id());
        }
        let _ = child.kill();
        let _ = child.wait();
        let _ = std::fs::remove_file(&path);
        assert!(started, "the gateway did not start");
        assert_eq!(seen, workers, "worker_threads = {workers}");
    }
}
