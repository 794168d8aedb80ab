#!/usr/bin/env bash
# Fills fuzz/corpus/<target>/ with seed inputs from the repository: the benchmark
# request bodies, the test fixtures, the shipped packs, ClusterClasses and templates,
# plus a few clouds.yaml files and identity Secrets written here (the repository has
# none: real ones hold credentials). Inputs the fuzzer found before are kept; seeds are
# rewritten in place. corpus/ is not committed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
corpus=$root/fuzz/corpus
cd "$root"

put() { # put TARGET NAME < input
  mkdir -p "$corpus/$1"
  cat >"$corpus/$1/seed-$2"
}

# The hook of a body, as the index hook_request's first byte selects (Hook::ALL).
selector() {
  case "$1" in
    DiscoveryRequest) echo 0 ;;
    GeneratePatchesRequest) echo 1 ;;
    ValidateTopologyRequest) echo 2 ;;
    DiscoverVariablesRequest) echo 3 ;;
    BeforeClusterCreateRequest) echo 4 ;;
    BeforeClusterUpgradeRequest) echo 6 ;;
    *) echo 1 ;;
  esac
}
kind_of() {
  grep -o '"kind": *"[A-Za-z]*Request"' "$1" | head -n 1 | sed 's/.*"\([A-Za-z]*\)"$/\1/'
}

requests=(benches/bodies/*.json tests/fixtures/engine/topology-request.json)
for f in "${requests[@]}"; do
  name=$(basename "$f" .json)
  sel=$(selector "$(kind_of "$f")")
  { printf "\\x$(printf %02x "$sel")"; cat "$f"; } | put hook_request "$name"
  if [ "$(kind_of "$f")" = GeneratePatchesRequest ]; then
    put patches_fingerprint "$name" <"$f"
    # Compact, as Go's encoding/json writes it (newlines and indentation only).
    tr -d '\n' <"$f" | sed 's/\([][,{:]\) \+/\1/g' | put patches_fingerprint "$name-compact"
  fi
done
# The same topology body as a ValidateTopology and a DiscoverVariables request.
for k in ValidateTopologyRequest DiscoverVariablesRequest; do
  { printf "\\x$(printf %02x "$(selector $k)")"
    sed "s/\"GeneratePatchesRequest\"/\"$k\"/" tests/fixtures/engine/topology-request.json
  } | put hook_request "topology-$k"
done
for f in tests/fixtures/clusters/*.json; do
  { printf '\x04{"apiVersion":"hooks.runtime.cluster.x-k8s.io/v1alpha1","kind":"BeforeClusterCreateRequest","cluster":'
    cat "$f"; printf '}'; } | put hook_request "before-create-$(basename "$f" .json)"
done

packs=(extensions/*.yaml tests/fixtures/packs/*.yaml tests/fixtures/engine/good/*.y*ml tests/fixtures/engine/bad/*.yaml)
for f in "${packs[@]}"; do
  name=$(basename "$f")
  put pack_load "$name" <"$f"
  # Packs hold the templates there are: their text is a template source as it is.
  put template "$name" <"$f"
  put render_yaml "pack-$name" <"$f"
done
printf '%s' '{{ .builtin.cluster.name }}-{{ range $i, $z := .list }}{{ $i }}{{ end }}{{ toYaml .map | indent 2 }}' |
  put template inline

# A Cluster, its ClusterClass and the class's templates in one stream, as render_yaml
# splits them; the CAPO objects and the cert-manager CRDs as plain YAML streams.
{ cat clusterclasses/examples/dev-test-cluster.yaml; echo '---'
  cat clusterclasses/dev-test.yaml; echo '---'
  cat templates/dev-test.yaml; } | put render_yaml "dev-test-stream"
{ cat tests/fixtures/classes/openstack-cilium-cluster.yaml; echo '---'
  cat tests/fixtures/classes/openstack-cilium-v1beta1.yaml; echo '---'
  cat tests/fixtures/classes/openstack-cilium-v1beta1-templates.yaml; } | put render_yaml "openstack-cilium-stream"
for f in tests/fixtures/capo/*.yaml tests/fixtures/capo/invalid/*.yaml clusterclasses/*.yaml clusterclasses/openstack-kubeadm/base/*.yaml templates/*.yaml templates/*/*.yaml; do
  put render_yaml "$(basename "$(dirname "$f")")-$(basename "$f")" <"$f"
done

password_yaml='clouds:
  openstack:
    region_name: RegionOne
    interface: internal
    identity_api_version: 3
    auth_type: password
    auth:
      auth_url: https://keystone.example:5000
      username: alice
      password: s3cret
      project_name: demo
      user_domain_name: Default
      project_domain_id: default
    network_endpoint_override: http://127.0.0.1:9999
    load_balancer_endpoint_override: http://127.0.0.1:9998
'
appcred_yaml='clouds:
  openstack:
    auth_type: v3applicationcredential
    verify: false
    auth:
      auth_url: https://keystone.example:5000/v3/
      application_credential_name: ci
      username: bob
      user_domain_id: default
      application_credential_secret: xyz
'
ids_yaml="clouds: {openstack: {endpoint_type: publicURL, verify: no, auth: {auth_url: 'https://k/v3', user_id: 1234, password: 0042, project_id: 5678, domain_name: Corp}}, other: {auth_type: token}}"
printf '%s' "$password_yaml" | put clouds_yaml password
printf '%s' "$appcred_yaml" | put clouds_yaml appcred
printf '%s' "$ids_yaml" | put clouds_yaml ids

secret() { # secret CLOUDS_YAML [CACERT_PEM]
  printf '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-creds","namespace":"ns","resourceVersion":"7"},"data":{"clouds.yaml":"%s"' \
    "$(printf '%s' "$1" | base64 -w0)"
  if [ -n "${2:-}" ]; then printf ',"cacert":"%s"' "$(printf '%s' "$2" | base64 -w0)"; fi
  printf '}}'
}
secret "$password_yaml" | put identity_secret password
secret "$appcred_yaml" | put identity_secret appcred
secret "$ids_yaml" "not a certificate" | put identity_secret bad-cacert
if [ -r /etc/ssl/certs/ca-certificates.crt ]; then
  pem=$(sed -n '1,/-----END CERTIFICATE-----/p' /etc/ssl/certs/ca-certificates.crt)
  secret "$password_yaml" "$pem" | put identity_secret cacert
fi
printf '%s' '{"apiVersion":"v1","kind":"Secret","metadata":{"name":"cloud-creds","namespace":"ns"},"stringData":{"clouds.yaml":"clouds: {openstack: {auth: {auth_url: http://k, username: u, password: p}}}"}}' |
  put identity_secret string-data

for d in "$corpus"/*/; do
  echo "$(basename "$d"): $(find "$d" -type f | wc -l) inputs"
done
