#!/usr/bin/env bash
# Writes a release of stackhook in clusterctl's local-repository layout, plus the
# Cluster API Operator's form of it:
#
#   OUT_DIR/infrastructure-openstack/VERSION/
#       metadata.yaml                      release series -> CAPI contract
#       infrastructure-components.yaml     CRDs, controllers and Runtime Extension
#       cluster-template.yaml              clusterctl generate cluster (no --flavor)
#       cluster-template-FLAVOR.yaml       ... --flavor FLAVOR
#       clusterclass-NAME.yaml             the ClusterClasses those templates use
#   OUT_DIR/runtime-extension-stackhook/VERSION/
#       metadata.yaml
#       runtime-extension-components.yaml  the Runtime Extension alone, beside CAPO
#   OUT_DIR/operator/
#       infrastructure-openstack-VERSION.yaml      ConfigMap for fetchConfig.selector
#       runtime-extension-stackhook-VERSION.yaml   ConfigMap for fetchConfig.selector
#       providers-VERSION.yaml                     InfrastructureProvider and
#                                                  RuntimeExtensionProvider examples
#   OUT_DIR/clusterctl.yaml       `providers:` entries pointing clusterctl at OUT_DIR
#   OUT_DIR/SHA256SUMS            every file above
#
# Usage: bash deploy/release.sh OUT_DIR VERSION      (VERSION like v0.1.0)
#
# Needs kustomize v5 (`kubectl kustomize`, or KUSTOMIZE="kustomize build"), gzip and
# sha256sum. Other files of OUT_DIR are left alone; the files named above are replaced.
#
# Environment:
#   KUSTOMIZE                         command that renders a directory
#   STACKHOOK_RELEASE_IMAGE           the image the components run (default
#                                     docker.io/library/stackhook:VERSION)
#   STACKHOOK_CONFIGMAP_LIMIT_BYTES   above this, the operator ConfigMap carries the
#                                     components gzipped (default 1048576, the
#                                     operator's own limit)
set -euo pipefail

usage() {
  echo "usage: bash deploy/release.sh OUT_DIR VERSION   (VERSION like v0.1.0)" >&2
  exit 64
}
[ $# -eq 2 ] || usage
out=$1
version=$2
root=$(cd "$(dirname "$0")/.." && pwd)
release=$root/deploy/release

# A semantic version with the leading v clusterctl and the operator expect.
if ! [[ $version =~ ^v([0-9]+)\.([0-9]+)\.([0-9]+)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$ ]]; then
  echo "release: VERSION must be a semantic version with a leading v (e.g. v0.1.0), not '$version'" >&2
  exit 64
fi
major=${BASH_REMATCH[1]}
minor=${BASH_REMATCH[2]}

# clusterctl refuses a release whose series metadata.yaml does not list.
if ! awk -v ma="$major" -v mi="$minor" '
    /^[ -]*major:/ { m = $NF }
    /^[ -]*minor:/ { if (m == ma && $NF == mi) found = 1 }
    END { exit !found }' "$release/metadata.yaml"; then
  echo "release: deploy/release/metadata.yaml has no release series $major.$minor; add it (with its contract) first" >&2
  exit 65
fi

if [ -n "${KUSTOMIZE:-}" ]; then
  read -r -a kustomize <<<"$KUSTOMIZE"
elif command -v kubectl >/dev/null 2>&1; then
  kustomize=(kubectl kustomize)
elif command -v kustomize >/dev/null 2>&1; then
  kustomize=(kustomize build)
else
  echo "release: needs kustomize v5: kubectl (1.27+) or kustomize on PATH, or KUSTOMIZE" >&2
  exit 69
fi
for tool in gzip sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "release: needs $tool" >&2; exit 69; }
done
limit=${STACKHOOK_CONFIGMAP_LIMIT_BYTES:-1048576}
image=${STACKHOOK_RELEASE_IMAGE:-docker.io/library/stackhook:$version}

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# Renders a kustomization with the release's version in it. kustomize writes a string
# such as `${STACKHOOK_CAPI_VERSION:=1.13}` unquoted; after clusterctl substitutes it,
# `value: 1.13` would be a number, so every env `value: ${...}` gets its quotes back
# (the numbers in the hook settings stay numbers).
render() {
  "${kustomize[@]}" "$1" |
    sed -e "s/@VERSION@/$version/g" -e "s|@IMAGE@|$image|g" \
      -e 's/^\([ -]*value: \)\(\${[^}]*}\)$/\1"\2"/'
}

# Drops metadata.namespace: clusterctl puts templates in the target namespace.
strip_namespace() {
  awk '
    /^---/ { inmeta = 0; print; next }
    /^metadata:[ ]*$/ { inmeta = 1; print; next }
    /^[^ #]/ { inmeta = 0 }
    inmeta && /^  namespace:/ { next }
    { print }' "$@"
}

# A ClusterClass file names no namespace at all, neither its objects' nor its
# references' (the contract: they resolve in the namespace the file is applied to).
strip_all_namespaces() {
  grep -v '^[ -]*namespace: '
}

# The example Clusters, by flavor ("" is clusterctl's default template), each with the
# identity Secret it reads. The bootstrap-vars example names fixed values; its template
# form, with variables, sits in deploy/release.
flavors=(
  ":clusterclasses/examples/openstack-kubeadm-minimal.yaml"
  "ha:clusterclasses/examples/openstack-kubeadm-ha.yaml"
  "keepalived:clusterclasses/examples/openstack-kubeadm-keepalived.yaml"
  "bootstrap-vars:deploy/release/cluster-template-bootstrap-vars.yaml"
  "magnum:clusterclasses/examples/magnum-cluster.yaml"
)

# ClusterClasses with the templates they reference, in their CAPI >= 1.11 form where they
# have one (clusterctl v1.13 installs a v1beta2 management cluster).
write_classes() {
  local dir=$1
  {
    render "$root/clusterclasses/openstack-kubeadm/overlays/capi-1.11"
    echo "---"
    render "$root/templates/openstack-kubeadm"
  } | strip_all_namespaces >"$dir/clusterclass-openstack-kubeadm.yaml"
  {
    render "$root/clusterclasses"
    echo "---"
    cat "$root/templates/openstack-kubeadm-bootstrap-vars.yaml"
  } | strip_all_namespaces >"$dir/clusterclass-openstack-kubeadm-bootstrap-vars.yaml"
  {
    cat "$root/clusterclasses/magnum-compatible-capi-1.11.yaml"
    echo "---"
    cat "$root/templates/magnum-compatible.yaml"
  } | strip_all_namespaces >"$dir/clusterclass-magnum-compatible-v1.yaml"
  if grep -l '\${' "$dir"/clusterclass-*.yaml >&2; then
    echo "release: ClusterClass definitions must not use clusterctl variables (above)" >&2
    exit 70
  fi
}

infra=$out/infrastructure-openstack/$version
rtx=$out/runtime-extension-stackhook/$version
mkdir -p "$infra" "$rtx" "$out/operator"

sed -n '/^apiVersion:/,$p' "$release/metadata.yaml" >"$work/metadata.yaml"
cp "$work/metadata.yaml" "$infra/metadata.yaml"
cp "$work/metadata.yaml" "$rtx/metadata.yaml"
render "$release/infrastructure-openstack" >"$infra/infrastructure-components.yaml"
render "$release/runtime-extension-stackhook" >"$rtx/runtime-extension-components.yaml"

for entry in "${flavors[@]}"; do
  flavor=${entry%%:*}
  file=${entry#*:}
  name=cluster-template${flavor:+-$flavor}.yaml
  # clusterctl takes an empty default for no default and asks for the variable:
  # "${X:=}" becomes ${X:=""}, which it accepts and which still gives an empty string.
  cat "$root/$file" "$release/cloud-config-secret.yaml" |
    sed -e 's/"\(\${[A-Za-z0-9_]*:=\)}"/\1""}/g' |
    strip_namespace >"$infra/$name"
done
write_classes "$infra"

# The operator reads a provider's versions from ConfigMaps in the provider's namespace
# that its fetchConfig.selector matches, one ConfigMap per version (it refuses a
# selector that matches two): the version from the label provider.cluster.x-k8s.io/version,
# `metadata` and `components` from the data. Over its 1 MiB limit the components go
# gzipped into binaryData, with the annotation provider.cluster.x-k8s.io/compressed.
configmap() {
  local kind=$1 name=$2 components=$3 metadata=$4 dest=$5
  local size
  size=$(($(wc -c <"$components") + $(wc -c <"$metadata")))
  local from=$components
  if [ "$size" -gt "$limit" ]; then
    gzip -9 -n -c "$components" >"$work/components.gz"
    from=$work/components.gz
  fi
  kubectl create configmap "$kind-$name-$version" --namespace stackhook-system \
    --from-file=metadata="$metadata" --from-file=components="$from" \
    --dry-run=client -o yaml >"$work/cm.yaml"
  kubectl label --local -f "$work/cm.yaml" -o yaml \
    app.kubernetes.io/part-of=stackhook \
    "app.kubernetes.io/component=$kind-$name" \
    "provider.cluster.x-k8s.io/version=$version" >"$work/cm-labelled.yaml"
  if [ "$from" != "$components" ]; then
    kubectl annotate --local -f "$work/cm-labelled.yaml" -o yaml \
      provider.cluster.x-k8s.io/compressed=true >"$dest"
  else
    cp "$work/cm-labelled.yaml" "$dest"
  fi
}
configmap infrastructure openstack "$infra/infrastructure-components.yaml" \
  "$infra/metadata.yaml" "$out/operator/infrastructure-openstack-$version.yaml"
configmap runtime-extension stackhook "$rtx/runtime-extension-components.yaml" \
  "$rtx/metadata.yaml" "$out/operator/runtime-extension-stackhook-$version.yaml"
sed -e "s/@VERSION@/$version/g" "$release/operator/providers.yaml" \
  >"$out/operator/providers-$version.yaml"

# clusterctl's configuration for this repository: `clusterctl --config OUT_DIR/clusterctl.yaml`.
abs_out=$(cd "$out" && pwd)
cat >"$out/clusterctl.yaml" <<EOF
# clusterctl reads providers from this local repository with --config $abs_out/clusterctl.yaml
# (or copy the entries into ~/.config/cluster-api/clusterctl.yaml).
providers:
  - name: openstack
    type: InfrastructureProvider
    url: file://$abs_out/infrastructure-openstack/$version/infrastructure-components.yaml
  - name: stackhook
    type: RuntimeExtensionProvider
    url: file://$abs_out/runtime-extension-stackhook/$version/runtime-extension-components.yaml
EOF

(
  cd "$out"
  find . -type f ! -name SHA256SUMS | sed 's|^\./||' | LC_ALL=C sort |
    xargs sha256sum >SHA256SUMS
)
echo "release $version written to $out"
