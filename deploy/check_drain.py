"""Check that every rendered Deployment gives its pods time to drain.

For each Deployment in the rendered manifests given on the command line, the pod's
terminationGracePeriodSeconds must cover, in order:
  - the gateway container's preStop sleep (before SIGTERM);
  - [fleet] drain_grace (20 s when unset): retries of parked calls are still served;
  - [server] shutdown_grace (10 s when unset): in-flight calls finish, the rest are abandoned;
  - a margin for sessions to close (the gateway gives them at most 3 s past shutdown_grace: a
    stdio child gets 2 s after its stdin closes);
read from the gateway.toml of the ConfigMap the pod mounts. The gateway runs the drain and the
shutdown one after the other, so they add up; past the grace period the kubelet's SIGKILL cuts
the drain short.

When that gateway.toml sets [fleet] internal_listen, the container must also declare its port
and set MRTR_ADVERTISE to an address on it, or forwarded retries would go nowhere.
"""

import re
import sys
import tomllib

import yaml

# At least the 3 s the gateway gives upstream sessions to close after shutdown_grace.
MARGIN_S = 5
DEFAULT_DRAIN_GRACE_S = 20
DEFAULT_SHUTDOWN_GRACE_S = 10
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> float:
    """A humantime duration of one unit ("10s", "1m", "500ms"), as the gateway's config takes."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h)\s*", text)
    if not m:
        raise ValueError(f"unsupported duration {text!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def fleet_wiring(gateway: dict, listen: str) -> list[str]:
    """What is missing for other replicas to reach internal_listen at this pod."""
    port = int(listen.rsplit(":", 1)[1])
    problems = []
    if not any(p.get("containerPort") == port for p in gateway.get("ports", [])):
        problems.append(f"internal_listen {listen} but no containerPort {port}")
    env = {e["name"]: e.get("value") for e in gateway.get("env", [])}
    advertise = env.get("MRTR_ADVERTISE")
    if advertise is None:
        problems.append("internal_listen set but no MRTR_ADVERTISE (e.g. $(POD_IP):PORT)")
    elif not advertise.endswith(f":{port}"):
        problems.append(f"MRTR_ADVERTISE {advertise!r} is not on port {port}")
    return problems


def main(paths: list[str]) -> int:
    failures = []
    checked = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        for dep in (d for d in docs if d["kind"] == "Deployment"):
            name = f"{path}: deployment/{dep['metadata']['name']}"
            pod = dep["spec"]["template"]["spec"]
            gateway = next(c for c in pod["containers"] if c["name"] == "gateway")
            pre_stop = gateway.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
            pre_stop_s = pre_stop.get("seconds", 0)
            config = {}
            for vol in pod.get("volumes", []):
                cm = config_maps.get(vol.get("configMap", {}).get("name"))
                if cm and "gateway.toml" in cm.get("data", {}):
                    config = tomllib.loads(cm["data"]["gateway.toml"])
            server = config.get("server", {})
            fleet = config.get("fleet", {})
            shutdown_s = seconds(server.get("shutdown_grace", f"{DEFAULT_SHUTDOWN_GRACE_S}s"))
            drain_s = seconds(fleet.get("drain_grace", f"{DEFAULT_DRAIN_GRACE_S}s"))
            grace_s = pod.get("terminationGracePeriodSeconds", 30)
            need_s = pre_stop_s + drain_s + shutdown_s + MARGIN_S
            if grace_s < need_s:
                failures.append(
                    f"{name}: terminationGracePeriodSeconds {grace_s} < preStop {pre_stop_s}"
                    f" + drain_grace {drain_s:g} + shutdown_grace {shutdown_s:g}"
                    f" + margin {MARGIN_S} = {need_s:g}"
                )
            else:
                print(
                    f"drain ok {name}: grace {grace_s} s >= preStop {pre_stop_s} + drain"
                    f" {drain_s:g} + shutdown {shutdown_s:g} + margin {MARGIN_S} = {need_s:g} s"
                )
            if "internal_listen" in fleet:
                failures += [f"{name}: {p}" for p in fleet_wiring(gateway, fleet["internal_listen"])]
            checked += 1
    for failure in failures:
        print(f"ERROR {failure}", file=sys.stderr)
    if checked == 0:
        print("ERROR no Deployment found", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
