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
    // The example's stdio backend runs a program this machine need not have: `check` is
    // shown the example with a program that is here in its place.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/gateway.toml");
    let text = std::fs::read_to_string(example).expect("the example");
    let program = "\"/usr/local/bin/weather-mcp\"";
    assert!(text.contains(program), "the example's program moved");
    if !std::path::Path::new("/usr/local/bin/weather-mcp").exists() {
        let out = check_text("example-as-is", &text);
        assert_eq!(out.status.code(), Some(64), "{out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("backend[0].command"), "{err}");
    }
    let here = format!("{:?}", env!("CARGO_BIN_EXE_mrtr-gateway"));
    let out = check_text("example", &text.replace(program, &here));
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
    let out = check_text(
        "bad",
        "[limits]\nmax_json_depth = 0\n[[backend]]\nname = \"b\"\ncommand = \"x\"\n",
    );
    assert_eq!(out.status.code(), Some(64));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(err.contains("limits.max_json_depth"), "{err}");
}

/// `mrtr-gateway check` on a config `text` (written to a scratch file named after `name`).
fn check_text(name: &str, text: &str) -> std::process::Output {
    let path = std::env::temp_dir().join(format!("mrtr-check-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    let _ = std::fs::remove_file(&path);
    out
}

/// `mrtr-gateway serve` on a config `text`, once it has exited by itself: `None` if it was
/// still running after a while (it started; it is stopped then).
fn serve_until_exit(name: &str, text: &str) -> Option<std::process::Output> {
    let path = std::env::temp_dir().join(format!("mrtr-serve-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
        .args(["serve", "--config"])
        .arg(&path)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start gateway");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let exited = loop {
        match child.try_wait() {
            Ok(Some(_)) => break true,
            _ if std::time::Instant::now() > deadline => break false,
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    };
    if !exited {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("gateway output");
    let _ = std::fs::remove_file(&path);
    exited.then_some(out)
}

/// Asserts that `out` is a refused config: exit 64 and one line that names `field`.
fn assert_refused(out: &std::process::Output, field: &str, case: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{case}: {err}");
    assert_eq!(err.lines().count(), 1, "{case}: one line: {err}");
    assert!(
        err.contains(&format!("config error: {field}: ")),
        "{case}: {err}"
    );
}

#[test]
fn check_and_serve_refuse_a_stdio_command_that_cannot_run() {
    let dir = std::env::temp_dir().join(format!("mrtr-commands-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("run.sh"), "#!/bin/sh\n").unwrap();
    std::fs::write(dir.join("plain.txt"), "not a program\n").unwrap();
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |file: &str, mode: u32| {
            std::fs::set_permissions(dir.join(file), std::fs::Permissions::from_mode(mode))
                .unwrap();
        };
        mode("run.sh", 0o755);
        mode("plain.txt", 0o644);
    }
    let d = dir.display();
    let backend = |lines: &str| format!("[[backend]]\nname = \"b\"\n{lines}\n");
    let refused = [
        (
            "command = \"/nonexistent/weather-mcp\"".to_owned(),
            "backend[0].command",
        ),
        (format!("command = \"{d}/plain.txt\""), "backend[0].command"),
        (format!("command = \"{d}/sub\""), "backend[0].command"),
        (
            "command = \"mrtr-no-such-program\"".to_owned(),
            "backend[0].command",
        ),
        ("command = \"./run.sh\"".to_owned(), "backend[0].command"),
        (
            format!("command = \"./run.sh\"\ncwd = \"{d}/sub\""),
            "backend[0].command",
        ),
        (
            format!("command = \"run.sh\"\nenv = {{ PATH = \"{d}/sub\" }}"),
            "backend[0].command",
        ),
        (
            format!("command = \"run.sh\"\ncwd = \"{d}/missing\""),
            "backend[0].cwd",
        ),
    ];
    for (lines, field) in &refused {
        assert_refused(&check_text("command", &backend(lines)), field, lines);
    }
    let taken = [
        "command = \"sh\"".to_owned(),
        format!("command = \"{d}/run.sh\""),
        format!("command = \"./run.sh\"\ncwd = \"{d}\""),
        format!("command = \"run.sh\"\nenv = {{ PATH = \"{d}/sub:{d}\" }}"),
    ];
    for lines in &taken {
        let out = check_text("command", &backend(lines));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{lines}: {err}");
    }
    // `serve` refuses what `check` refuses, before it listens: not at a backend's first call.
    let out = serve_until_exit(
        "command",
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{}",
            backend("command = \"/nonexistent/weather-mcp\"")
        ),
    );
    let _ = std::fs::remove_dir_all(&dir);
    let out = out.expect("serve exits on a command that cannot run");
    assert_refused(&out, "backend[0].command", "serve");
}

#[test]
fn check_and_serve_refuse_listeners_that_share_an_address() {
    // A port that was free a moment ago: two listeners on it are refused before either binds.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = |server: &str, admin: &str, internal: &str| {
        format!(
            "[server]\nlisten = \"{server}\"\n[admin]\nlisten = \"{admin}\"\n\
             [fleet]\ninternal_listen = \"{internal}\"\nadvertise = \"10.0.0.7:8081\"\n\
             [[backend]]\nname = \"b\"\nkind = \"builtin\"\n"
        )
    };
    let same = format!("127.0.0.1:{port}");
    let every = format!("0.0.0.0:{port}");
    let refused = [
        (config(&same, &same, "127.0.0.1:0"), "admin.listen"),
        (config(&every, &same, "127.0.0.1:0"), "admin.listen"),
        (
            config(&same, "127.0.0.1:0", &every),
            "fleet.internal_listen",
        ),
        (config("127.0.0.1:0", &same, &same), "fleet.internal_listen"),
    ];
    for (text, field) in &refused {
        assert_refused(&check_text("listeners", text), field, text);
    }
    let out = check_text(
        "listeners",
        &config("127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = serve_until_exit("listeners", &config(&same, &same, "127.0.0.1:0"))
        .expect("serve exits on listeners that share an address");
    assert_refused(&out, "admin.listen", "serve");
}

#[test]
fn check_prints_the_settings_as_plain_text() {
    let out = check_text(
        "plain",
        &format!(
            "[principal]\nsource = \"anonymous\"\n[state]\npark_ttl = \"90s\"\n\
             coalesce_window = \"250ms\"\n[limits]\nmax_line_bytes = 8388608\n\
             [admin]\nlisten = \"127.0.0.1:9090\"\n\
             [[backend]]\nname = \"b\"\ncommand = {:?}\nargs = [\"legacy-server\", \"--http\"]\n\
             env = {{ API_KEY = \"s3cret\" }}\n",
            env!("CARGO_BIN_EXE_mrtr-gateway")
        ),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "principal         anonymous (everyone is one principal)\n",
        "park ttl          90s\n",
        "coalesce window   250ms\n",
        "admin             127.0.0.1:9090 (16 connections at most)\n",
        "request bodies    1 MiB at most, JSON depth 64\n",
        "backend messages  8 MiB at most\n",
        "waits             queue 5s, backend round 60s, held roots 30s\n",
        "(args legacy-server, --http; env API_KEY set)",
    ] {
        assert!(text.contains(line), "no `{}` in:\n{text}", line.trim_end());
    }
    // Rust debug output (`Limits { .. }`, `Anonymous`, `Some(..)`) is not for operators, and
    // the values of a backend's `env` may be secrets.
    for debug in ["{", "}", "Some(", "Anonymous", "Limits", "s3cret"] {
        assert!(!text.contains(debug), "`{debug}` in:\n{text}");
    }
}

#[test]
fn check_blames_a_misspelt_kind_on_kind() {
    for lines in [
        "kind = \"htpp\"\nurl = \"http://127.0.0.1:8000/mcp\"",
        "kind = \"stdoi\"\ncommand = \"sh\"",
        "kind = \"biultin\"\nbuiltin_roots_on_init = true",
    ] {
        let out = check_text("kind", &format!("[[backend]]\nname = \"b\"\n{lines}\n"));
        assert_refused(&out, "backend[0].kind", lines);
    }
}

#[test]
fn the_config_option_has_a_help_text() {
    for command in ["check", "serve"] {
        let out = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"))
            .args([command, "--help"])
            .output()
            .expect("run --help");
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{command} --help: {help}");
        let option = help
            .lines()
            .find(|l| l.trim_start().starts_with("-c, --config"))
            .unwrap_or_else(|| panic!("no --config in {command} --help: {help}"));
        let text = option.split_once('>').map_or("", |(_, text)| text.trim());
        assert!(
            text.contains("config file"),
            "{command} --help says what --config is: {help}"
        );
    }
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

/// Threads of process `pid` that are shards (`mrtr-shard-N`).
#[cfg(target_os = "linux")]
fn shard_threads(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task list")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("mrtr-shard-"))
        .count()
}

/// One `tools/call echo` over a plain socket; the raw HTTP response.
fn echo_call(addr: &str) -> String {
    let body = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"on a shard"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    tools_call(addr, "echo", body)
}

/// The HTTP/1.1 request of one `tools/call` of `tool`, with `extra` header lines. Written in one
/// piece: a request in pieces would wait on Nagle and delayed ACKs.
fn tools_call_request(addr: &str, tool: &str, body: &str, extra: &str) -> String {
    format!(
        "POST /mcp HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
         Mcp-Method: tools/call\r\nMcp-Name: {tool}\r\n{extra}\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// POSTs one `tools/call` of `tool` with `body` over a plain socket, written at once; the raw
/// HTTP response.
fn tools_call(addr: &str, tool: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .unwrap();
    conn.write_all(tools_call_request(addr, tool, body, "Connection: close\r\n").as_bytes())
        .unwrap();
    let mut response = String::new();
    let _ = conn.read_to_string(&mut response);
    response
}

/// Starts `mrtr-gateway serve` on `config` (written to a scratch file named after `name`);
/// the child and the `host:port` of its MCP listener, once it says it listens.
fn serve(name: &str, config: &str) -> (std::process::Child, Option<String>, std::path::PathBuf) {
    serve_logging_to(name, config, std::process::Stdio::null(), None)
}

/// [`serve`], with the gateway's stderr (its logs) going to `stderr`, and `RUST_LOG` set to
/// `rust_log` (unset without one).
fn serve_logging_to(
    name: &str,
    config: &str,
    stderr: std::process::Stdio,
    rust_log: Option<&str>,
) -> (std::process::Child, Option<String>, std::path::PathBuf) {
    use std::io::BufRead;
    let path = std::env::temp_dir().join(format!("mrtr-{name}-{}.toml", std::process::id()));
    std::fs::write(&path, config).unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_mrtr-gateway"));
    match rust_log {
        Some(filter) => command.env("RUST_LOG", filter),
        None => command.env_remove("RUST_LOG"),
    };
    let mut child = command
        .args(["serve", "--config"])
        .arg(&path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("start gateway");
    let stdout = child.stdout.take().expect("stdout");
    let addr = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .find_map(|l| {
            let url = l.strip_prefix("mrtr-gateway listening on http://")?;
            Some(url.split('/').next()?.to_string())
        });
    (child, addr, path)
}

#[test]
fn an_idle_client_connection_is_closed_after_the_header_timeout() {
    use std::io::Read;
    let (mut child, addr, path) = serve(
        "header-timeout",
        "[server]\nlisten = \"127.0.0.1:0\"\nheader_timeout = \"1s\"\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
    );
    let outcome = addr.as_deref().map(|addr| {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        // Far below the 30 s default: only the configured 1 s closes it in time.
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let started = std::time::Instant::now();
        let mut byte = [0u8; 1];
        (conn.read(&mut byte), started.elapsed())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (read, waited) = outcome.expect("the gateway did not start");
    assert!(
        matches!(read, Ok(0)),
        "the gateway closes the idle connection: {read:?}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(900),
        "not before the timeout: {waited:?}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn serve_runs_as_many_shards_as_configured_and_stops_them_on_sigterm() {
    for workers in [1, 3] {
        let (mut child, addr, path) = serve(
            &format!("workers-{workers}"),
            &format!(
                "[server]\nlisten = \"127.0.0.1:0\"\nworker_threads = {workers}\nshutdown_grace = \"2s\"\n\
                 [fleet]\ndrain_grace = \"1s\"\n\
                 [[backend]]\nname = \"b\"\nkind = \"builtin\"\n"
            ),
        );
        // A shard names itself once its thread runs: wait for them.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut seen = shard_threads(child.id());
        while seen < workers && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
            seen = shard_threads(child.id());
        }
        let answer = addr.as_deref().map(echo_call).unwrap_or_default();
        let exited = terminate(&mut child);
        let _ = std::fs::remove_file(&path);
        assert!(addr.is_some(), "the gateway did not start");
        assert_eq!(seen, workers, "worker_threads = {workers}");
        assert!(
            answer.starts_with("HTTP/1.1 200") && answer.contains("on a shard"),
            "echo through a shard: {answer}"
        );
        let status = exited.expect("the gateway exits on SIGTERM, its shards stopped");
        assert!(status.success(), "exit status {status}");
    }
}

/// Sends `signal` (`HUP`, `TERM`) to `child`.
#[cfg(target_os = "linux")]
fn send(signal: &str, child: &std::process::Child) {
    let _ = Command::new("kill")
        .args([&format!("-{signal}"), &child.id().to_string()])
        .status();
}

/// Sends SIGTERM and waits for the drain (15 s at most); a child still running then is killed.
/// Its exit status if it exited by itself.
#[cfg(target_os = "linux")]
fn terminate(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    send("TERM", child);
    let exited = exit_within(child, std::time::Duration::from_secs(15));
    if exited.is_none() {
        let _ = child.kill();
        let _ = child.wait();
    }
    exited
}

/// `child`'s exit status, if it exits within `limit`.
#[cfg(target_os = "linux")]
fn exit_within(
    child: &mut std::process::Child,
    limit: std::time::Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = std::time::Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            _ if std::time::Instant::now() > deadline => return None,
            _ => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// Until config reload exists, SIGHUP (a terminal closed, or a reload by habit) must not kill
/// the gateway: it is logged and ignored, requests are still served, and SIGTERM still drains
/// and exits 0.
#[cfg(target_os = "linux")]
#[test]
fn sighup_is_logged_and_ignored_and_sigterm_still_drains() {
    let log_path = std::env::temp_dir().join(format!("mrtr-sighup-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("log file");
    let (mut child, addr, path) = serve_logging_to(
        "sighup",
        "[server]\nlisten = \"127.0.0.1:0\"\nshutdown_grace = \"2s\"\n\
         [fleet]\ndrain_grace = \"1s\"\n[log]\nlevel = \"info\"\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
        log.into(),
        None,
    );
    // The accept loop runs on the thread that waits for signals, and only once it waits: an
    // answered request means SIGHUP is handled from now on.
    let before = addr.as_deref().map(echo_call).unwrap_or_default();
    send("HUP", &child);
    let logged = |logs: &str| logs.contains("reload is not supported yet; ignored");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut logs = String::new();
    while !logged(&logs)
        && std::time::Instant::now() < deadline
        && matches!(child.try_wait(), Ok(None))
    {
        std::thread::sleep(std::time::Duration::from_millis(20));
        logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    }
    let hung_up = child.try_wait().ok().flatten();
    let after = match (&addr, hung_up) {
        (Some(addr), None) => echo_call(addr),
        _ => String::new(),
    };
    let exited = terminate(&mut child);
    let _ = std::fs::remove_file(&path);
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    assert!(addr.is_some(), "the gateway did not start");
    assert!(
        before.starts_with("HTTP/1.1 200"),
        "before SIGHUP: {before}"
    );
    assert!(hung_up.is_none(), "SIGHUP killed the gateway: {hung_up:?}");
    assert!(logged(&logs), "SIGHUP is logged: {logs}");
    assert!(
        after.starts_with("HTTP/1.1 200") && after.contains("on a shard"),
        "served after SIGHUP: {after}"
    );
    let status = exited.expect("the gateway exits on SIGTERM");
    assert!(status.success(), "exit status {status}");
}

/// Context switches of one thread of `pid` so far.
#[cfg(target_os = "linux")]
fn context_switches(pid: u32, tid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status"))
        .expect("thread status")
        .lines()
        .filter(|l| l.contains("ctxt_switches:"))
        .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        .sum()
}

#[cfg(target_os = "linux")]
#[test]
fn requests_on_a_shard_do_not_wake_the_main_thread() {
    use std::io::{BufRead, BufReader, Read, Write};
    let (mut child, addr, path) = serve(
        "main-thread-quiet",
        "[server]\nlisten = \"127.0.0.1:0\"\nworker_threads = 1\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
    );
    let pid = child.id();
    let calls = addr.as_deref().map(|addr| {
        let conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut reader = BufReader::new(conn.try_clone().expect("clone"));
        let mut writer = conn;
        let mut call = |id: u32| -> bool {
            let body = format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"quiet"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
            );
            writer
                .write_all(tools_call_request(addr, "echo", &body, "").as_bytes())
                .unwrap();
            let (mut status, mut length) = (String::new(), None);
            reader.read_line(&mut status).unwrap();
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).unwrap();
                if line.trim().is_empty() {
                    break;
                }
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("content-length")
                {
                    length = value.trim().parse::<usize>().ok();
                }
            }
            let mut body = vec![0; length.expect("a JSON answer with a length")];
            reader.read_exact(&mut body).unwrap();
            status.starts_with("HTTP/1.1 200") && String::from_utf8_lossy(&body).contains("quiet")
        };
        // The first call starts the backend session; count over the ones after it.
        let first = call(0);
        let before = context_switches(pid, pid);
        let answered = (1..=100).filter(|&id| call(id)).count();
        let after = context_switches(pid, pid);
        (first, answered, after - before)
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (first, answered, woken) = calls.expect("the gateway did not start");
    assert!(first, "the first call was answered");
    assert_eq!(answered, 100, "calls answered on one keep-alive connection");
    // The connection's socket belongs to its shard's reactor: the main thread (accept loop,
    // admin, drain) has no part in its requests. Left with the accepting runtime's reactor,
    // every request woke the main thread once or more.
    assert!(
        woken < 20,
        "the main thread was woken {woken} times during 100 requests on a shard"
    );
}

/// The JSON-RPC message in a raw HTTP response with a JSON body.
fn json_body(response: &str) -> serde_json::Value {
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {response}"))
}

/// Runs the binary in front of a built-in backend with logs in `format` at `debug` (and
/// `RUST_LOG` set to `rust_log`, if any) going to a file, and `calls` with its address; what
/// `calls` returned, and the logs, once the gateway has stopped.
fn logged_gateway<T>(
    name: &str,
    format: &str,
    rust_log: Option<&str>,
    calls: impl FnOnce(&str) -> T,
) -> (T, String) {
    let log_path = std::env::temp_dir().join(format!("mrtr-{name}-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("log file");
    let (mut child, addr, path) = serve_logging_to(
        name,
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             [log]\nformat = \"{format}\"\nlevel = \"debug\"\n\
             [[backend]]\nname = \"legacy\"\nkind = \"builtin\"\n"
        ),
        log.into(),
        rust_log,
    );
    let outcome = addr.as_deref().map(calls);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    (outcome.expect("the gateway did not start"), logs)
}

/// Runs the binary with JSON logs at `debug` (and `RUST_LOG` set to `rust_log`, if any), makes
/// one `ask_form` call that parks and its retry (checking both answers); the logs.
fn a_logged_round(name: &str, rust_log: Option<&str>) -> String {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;
    let ((first, second), logs) = logged_gateway(name, "json", rust_log, |addr| {
        let first = json_body(&tools_call(
            addr,
            "ask_form",
            &format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"ask_form","arguments":{{}},{meta}}}}}"#
            ),
        ));
        let state = first["result"]["requestState"].as_str().map(str::to_owned);
        let second = state.as_deref().map(|state| {
            json_body(&tools_call(
                addr,
                "ask_form",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"ask_form","arguments":{{}},"inputResponses":{{"elicitation-1":{{"action":"accept","content":{{"name":"Ada"}}}}}},"requestState":"{state}",{meta}}}}}"#
                ),
            ))
        });
        (first, second)
    });
    assert_eq!(first["result"]["resultType"], "input_required", "{first}");
    let second = second.expect("a requestState to retry with");
    assert_eq!(second["result"]["resultType"], "complete", "{second}");
    logs
}

#[test]
fn json_logs_carry_each_requests_span_with_its_backend_park_and_round() {
    let logs = a_logged_round("json-logs", None);
    // Every line is one JSON object; the events logged inside a request carry its span.
    let lines: Vec<serde_json::Value> = logs
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect();
    let in_request: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|l| l["span"]["name"] == "request")
        .collect();
    assert!(
        !in_request.is_empty(),
        "no event inside a request span:\n{logs}"
    );
    for l in &in_request {
        assert_eq!(l["span"]["method"], "tools/call", "{l}");
        assert_eq!(l["span"]["backend"], "legacy", "{l}");
    }
    let parked = in_request
        .iter()
        .find(|l| l["fields"]["message"] == "call parked")
        .unwrap_or_else(|| panic!("no `call parked` event:\n{logs}"));
    let park = parked["span"]["park"]
        .as_str()
        .expect("the park id on the span");
    assert!(!park.is_empty());
    assert!(parked["span"]["round"].is_u64(), "{parked}");
    // The retry's span names the same park, once its state is opened.
    assert!(
        in_request
            .iter()
            .any(|l| l["span"]["id"] == "2" && l["span"]["park"] == park),
        "no event of the retry's request carries park {park}:\n{logs}"
    );
}

#[test]
fn rust_log_overrides_the_configured_level() {
    let logs = a_logged_round("rust-log", Some("warn"));
    // The warning about the ephemeral key is logged; nothing below `warn` is.
    assert!(
        logs.contains("\"level\":\"WARN\""),
        "no warning logged:\n{logs}"
    );
    for level in ["INFO", "DEBUG", "TRACE"] {
        assert!(
            !logs.contains(&format!("\"level\":\"{level}\"")),
            "RUST_LOG=warn, yet a {level} line:\n{logs}"
        );
    }
}

#[test]
fn text_logs_to_a_file_are_plain() {
    let log_path = std::env::temp_dir().join(format!("mrtr-plain-{}.log", std::process::id()));
    let log = std::fs::File::create(&log_path).expect("log file");
    let (mut child, addr, path) = serve_logging_to(
        "plain-logs",
        "[server]\nlisten = \"127.0.0.1:0\"\n[[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
        log.into(),
        None,
    );
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let logs = std::fs::read_to_string(&log_path).unwrap_or_default();
    let _ = std::fs::remove_file(&log_path);
    assert!(addr.is_some(), "the gateway did not start:\n{logs}");
    // The warning about the ephemeral key is logged, as text without terminal colour codes.
    assert!(logs.contains("WARN"), "no warning logged:\n{logs}");
    assert!(
        !logs.contains('\x1b'),
        "colour codes in a log file:\n{logs:?}"
    );
}

#[test]
fn a_stalled_request_body_is_refused_after_the_body_timeout() {
    use std::io::{Read, Write};
    let (mut child, addr, path) = serve(
        "body-timeout",
        "[server]\nlisten = \"127.0.0.1:0\"\nbody_timeout = \"1s\"\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
    );
    let outcome = addr.as_deref().map(|addr| {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        // The head promises 100 bytes; one comes.
        let request = tools_call_request(addr, "echo", "", "");
        let request = request.replace("Content-Length: 0", "Content-Length: 100");
        conn.write_all(format!("{request}{{").as_bytes()).unwrap();
        let started = std::time::Instant::now();
        let mut response = String::new();
        let read = conn.read_to_string(&mut response);
        (read.map(|_| response), started.elapsed())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (response, waited) = outcome.expect("the gateway did not start");
    let response = response.expect("the gateway answers and closes the connection");
    assert!(
        response.starts_with("HTTP/1.1 408"),
        "a stalled body is answered 408: {response}"
    );
    assert!(
        response.contains("did not arrive within 1s"),
        "and says why: {response}"
    );
    assert!(
        waited >= std::time::Duration::from_millis(900),
        "not before the timeout: {waited:?}"
    );
}

#[test]
fn a_client_that_stops_reading_is_let_go_after_the_write_timeout() {
    use std::io::{Read, Write};
    let (mut child, addr, path) = serve(
        "write-timeout",
        "[server]\nlisten = \"127.0.0.1:0\"\nwrite_timeout = \"1s\"\n\
         [limits]\nmax_body_bytes = 16777216\nmax_line_bytes = 16777216\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
    );
    // An answer far larger than what the kernel buffers for a client that reads nothing.
    let text = "x".repeat(8 << 20);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"{text}"}},"_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let outcome = addr.as_deref().map(|addr| {
        let mut conn = std::net::TcpStream::connect(addr).expect("connect");
        conn.write_all(tools_call_request(addr, "echo", &body, "").as_bytes())
            .unwrap();
        // Read nothing until what waits in this socket has stopped growing for well over the
        // write timeout (the gateway's write has stalled that long), then see what is left. On
        // a loaded machine the answer may take seconds to start.
        let mut queued = vec![0u8; 32 << 20];
        let (mut last, mut since) = (0, std::time::Instant::now());
        conn.set_read_timeout(Some(std::time::Duration::from_millis(100)))
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let now = conn.peek(&mut queued).unwrap_or(0);
            if now != last {
                (last, since) = (now, std::time::Instant::now());
            } else if now > 0 && since.elapsed() > std::time::Duration::from_secs(3) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        drop(queued);
        conn.set_read_timeout(Some(std::time::Duration::from_secs(10)))
            .unwrap();
        let mut got = Vec::new();
        let read = conn.read_to_end(&mut got);
        (read, got.len())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (read, got) = outcome.expect("the gateway did not start");
    // Without the timeout the gateway would wait on the write: the read would time out.
    assert!(
        read.is_ok()
            || read
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::ConnectionReset),
        "the gateway closed the connection: {read:?}"
    );
    assert!(
        got > 0 && got < text.len(),
        "the client got part of the answer, then the end: {got} bytes"
    );
}

#[test]
fn a_client_that_stops_reading_its_progress_does_not_stall_its_session() {
    use std::io::{Read, Write};
    let (mut child, addr, path) = serve(
        "stalled-progress",
        "[server]\nlisten = \"127.0.0.1:0\"\n[principal]\nsource = \"anonymous\"\n\
         [limits]\nmax_body_bytes = 4194304\nrequest_timeout = \"3s\"\n\
         [[backend]]\nname = \"b\"\nkind = \"builtin\"\n",
    );
    // Each notification carries the large token back: the kernel's buffers fill after a few.
    let token = "t".repeat(200_000);
    let body = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"progress","arguments":{{"steps":1000}},"_meta":{{"progressToken":"{token}","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{}}}}}}}}"#
    );
    let answer = addr.as_deref().map(|addr| {
        let mut stalled = std::net::TcpStream::connect(addr).expect("connect");
        stalled
            .write_all(tools_call_request(addr, "progress", &body, "").as_bytes())
            .unwrap();
        // Long enough for the unread notifications to fill every buffer on the way.
        std::thread::sleep(std::time::Duration::from_secs(2));
        let started = std::time::Instant::now();
        let answer = echo_call(addr);
        let mut first = [0u8; 1];
        let _ = stalled.read(&mut first);
        (answer, started.elapsed())
    });
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_file(&path);
    let (answer, took) = answer.expect("the gateway did not start");
    assert!(
        answer.contains("on a shard") && !answer.contains("did not answer in time"),
        "a call on the same backend session is answered ({took:?}): {answer}"
    );
}

/// Text logs of a call over two rounds: each line's request span names its park and round once
/// (a field recorded again on a span is written again in text), and the retries' spans name the
/// round each answers.
#[test]
fn text_logs_name_each_spans_round_once_over_two_rounds() {
    let meta = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}"#;
    let answer = |key: &str, field: &str, value: &str, state: &serde_json::Value| {
        format!(
            r#""inputResponses":{{"{key}":{{"action":"accept","content":{{"{field}":"{value}"}}}}}},"requestState":{state},"#
        )
    };
    let ((second, third), logs) = logged_gateway("text-rounds", "text", None, |addr| {
        let call = |id: u32, extra: &str| {
            json_body(&tools_call(
                addr,
                "two_step",
                &format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"two_step","arguments":{{}},{extra}{meta}}}}}"#
                ),
            ))
        };
        let first = call(1, "");
        let state = &first["result"]["requestState"];
        let second = call(2, &answer("elicitation-1", "name", "Ada", state));
        let state = &second["result"]["requestState"];
        let third = call(3, &answer("elicitation-2", "answer", "yes", state));
        (second, third)
    });
    assert_eq!(second["result"]["resultType"], "input_required", "{second}");
    assert_eq!(third["result"]["resultType"], "complete", "{third}");
    let spans: Vec<&str> = logs
        .lines()
        .filter_map(|l| {
            l.split_once("request{")
                .map(|(_, rest)| rest.split('}').next().unwrap_or(""))
        })
        .collect();
    assert!(!spans.is_empty(), "no line inside a request span:\n{logs}");
    for span in &spans {
        assert!(
            span.matches("round=").count() <= 1 && span.matches("park=").count() <= 1,
            "a span names its round and park once: {span}\n{logs}"
        );
    }
    // The second retry's span (id 3) answers round 2.
    assert!(
        spans
            .iter()
            .any(|s| s.contains("id=3") && s.contains("round=2")),
        "the second retry's span names round 2:\n{logs}"
    );
}
