"""Check that every rendered Deployment gives its pods time to drain.

For each Deployment in the rendered manifests given on the command line, the pod's
terminationGracePeriodSeconds must cover the gateway container's preStop sleep, the gateway's
drain ([server] shutdown_grace in the gateway.toml of the ConfigMap it mounts, 10 s when unset)
and a margin, or the kubelet's SIGKILL would cut the drain short.
"""

import re
import sys
import tomllib

import yaml

MARGIN_S = 5
DEFAULT_SHUTDOWN_GRACE_S = 10
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}


def seconds(text: str) -> float:
    """A humantime duration of one unit ("10s", "1m", "500ms"), as the gateway's config takes."""
    m = re.fullmatch(r"\s*(\d+)\s*(ms|s|m|h)\s*", text)
    if not m:
        raise ValueError(f"unsupported duration {text!r}")
    return int(m.group(1)) * UNITS[m.group(2)]


def main(paths: list[str]) -> int:
    failures = []
    checked = 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = [d for d in yaml.safe_load_all(f) if d]
        config_maps = {d["metadata"]["name"]: d for d in docs if d["kind"] == "ConfigMap"}
        for dep in (d for d in docs if d["kind"] == "Deployment"):
            pod = dep["spec"]["template"]["spec"]
            gateway = next(c for c in pod["containers"] if c["name"] == "gateway")
            pre_stop = gateway.get("lifecycle", {}).get("preStop", {}).get("sleep", {})
            pre_stop_s = pre_stop.get("seconds", 0)
            drain_s = DEFAULT_SHUTDOWN_GRACE_S
            for vol in pod.get("volumes", []):
                cm = config_maps.get(vol.get("configMap", {}).get("name"))
                if cm and "gateway.toml" in cm.get("data", {}):
                    server = tomllib.loads(cm["data"]["gateway.toml"]).get("server", {})
                    drain_s = seconds(server.get("shutdown_grace", f"{DEFAULT_SHUTDOWN_GRACE_S}s"))
            grace_s = pod.get("terminationGracePeriodSeconds", 30)
            need_s = pre_stop_s + drain_s + MARGIN_S
            name = f"{path}: deployment/{dep['metadata']['name']}"
            if grace_s < need_s:
                failures.append(
                    f"{name}: terminationGracePeriodSeconds {grace_s} < preStop {pre_stop_s}"
                    f" + shutdown_grace {drain_s:g} + margin {MARGIN_S}"
                )
            else:
                print(f"drain ok {name}: grace {grace_s} s >= {need_s:g} s")
            checked += 1
    for failure in failures:
        print(f"ERROR {failure}", file=sys.stderr)
    if checked == 0:
        print("ERROR no Deployment found", file=sys.stderr)
        return 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
