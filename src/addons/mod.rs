//! The workload cluster's addons — the OpenStack cloud-controller-manager, the
//! Cinder CSI driver and the CNI — rendered for one cluster into the Secrets a
//! CAPI ClusterResourceSet applies (`kubernetes::resource_set` writes them).
//!
//! Pure: the inputs are the OpenStackCluster (its `spec.extensions.addons`, the
//! ClusterClass variables' choice, and its status, the cloud's facts), the parsed
//! identity, the Cinder volume types, the Cluster's pod CIDR and the Kubernetes
//! version the addons follow. The manifests are templates in `extensions/addons/`,
//! compiled into the binary: nothing is downloaded or rendered by Helm at run time.

pub mod cloud_conf;
pub mod install;
pub mod versions;

use std::collections::BTreeMap;
use std::sync::OnceLock;

use data_encoding::BASE64;
use serde_json::{json, Value};
use stackhook_gotmpl::Template;
use stackhook_openstack::blockstorage::VolumeType;
use stackhook_openstack::config::CloudConfig;

use crate::infra::api::extensions::{
    AddonsSpec, CiliumRoutingMode, CiliumTunnelProtocol, CniPlugin,
};
use crate::infra::api::OpenStackCluster;
use versions::VersionError;

/// CAPI reads only Secrets of this type as ClusterResourceSet resources.
pub const RESOURCE_SET_SECRET_TYPE: &str = "addons.cluster.x-k8s.io/resource-set";
/// CAPI's limit on one object, which each resource Secret stays under.
pub const MAX_OBJECT_BYTES: usize = 1024 * 1024;
/// Cilium's own default pool when the Cluster names no pod CIDR.
const DEFAULT_POD_CIDR: &str = "10.0.0.0/8";
/// The CSI driver's provisioner name, which StorageClasses name.
pub const CSI_DRIVER: &str = "cinder.csi.openstack.org";

/// One addon: one Secret of the resource set, one key per file in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    CloudConfig,
    CloudControllerManager,
    CinderCsi,
    Cni,
}

impl Part {
    pub const ALL: [Part; 4] = [
        Part::CloudConfig,
        Part::CloudControllerManager,
        Part::CinderCsi,
        Part::Cni,
    ];

    /// The suffix of its Secret's name, `<cluster>-addons-<suffix>`.
    pub fn suffix(self) -> &'static str {
        match self {
            Part::CloudConfig => "cloud-config",
            Part::CloudControllerManager => "ccm",
            Part::CinderCsi => "cinder-csi",
            Part::Cni => "cni",
        }
    }

    pub fn secret_name(self, cluster: &str) -> String {
        format!("{cluster}-addons-{}", self.suffix())
    }
}

/// The ClusterResourceSet's name.
pub fn resource_set_name(cluster: &str) -> String {
    format!("{cluster}-addons")
}

/// Why the addons could not be rendered; said in the OpenStackCluster's
/// `AddonsReady` condition.
#[derive(Debug, thiserror::Error)]
pub enum AddonsError {
    #[error(transparent)]
    Version(#[from] VersionError),
    #[error("addon manifest {file}: {message}")]
    Template { file: &'static str, message: String },
    #[error("the control-plane endpoint is not known yet")]
    NoEndpoint,
    #[error("addon {part} renders to {bytes} bytes, over CAPI's 1 MiB for one object")]
    TooLarge { part: &'static str, bytes: usize },
}

/// Everything one render reads.
pub struct Inputs<'a> {
    /// The CAPI Cluster's name.
    pub cluster: &'a str,
    /// The cloud provider's name for the cluster (`--cluster-name`, `--cluster`),
    /// which BeforeClusterDelete's cleanup matches.
    pub provider_cluster_name: &'a str,
    pub addons: &'a AddonsSpec,
    pub osc: &'a OpenStackCluster,
    pub cloud: &'a CloudConfig,
    pub cacert: Option<&'a [u8]>,
    pub volume_types: &'a [VolumeType],
    /// The type Cinder gives a volume that names none; its StorageClass is the default.
    pub default_volume_type: Option<&'a str>,
    /// The version the CCM and CSI follow (their minor is this one's, or the
    /// closest older one the table has).
    pub kubernetes_version: &'a str,
    pub pod_cidr: Option<&'a str>,
}

/// The resource set's content: each enabled addon's Secret data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rendered {
    pub parts: BTreeMap<Part, BTreeMap<String, String>>,
    /// The table's minor the CCM and CSI images come from.
    pub minor: String,
    pub cilium_version: Option<String>,
}

impl Rendered {
    /// CAPI's hash of a resource Secret (`sha256:` and the hex digest of its
    /// values in key order), which the ClusterResourceSetBinding records once
    /// the content is applied.
    pub fn hash(data: &BTreeMap<String, String>) -> String {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        for v in data.values() {
            h.update(v.as_bytes());
        }
        format!("sha256:{}", data_encoding::HEXLOWER.encode(&h.finalize()))
    }
}

/// Renders every enabled addon.
pub fn render(inputs: &Inputs<'_>) -> Result<Rendered, AddonsError> {
    let addons = inputs.addons;
    let (minor, images) = versions::kubernetes(inputs.kubernetes_version)?;
    let mut parts = BTreeMap::new();
    let wants_cloud = addons.cloud_controller_manager() || addons.cinder_csi();
    if wants_cloud {
        parts.insert(Part::CloudConfig, cloud_config(inputs));
    }
    let mut data = json!({
        "ClusterName": inputs.provider_cluster_name,
        "Images": images,
    });
    if addons.cloud_controller_manager() {
        let text = manifest(Manifest::CloudControllerManager, &data)?;
        parts.insert(
            Part::CloudControllerManager,
            BTreeMap::from([("cloud-controller-manager.yaml".to_string(), text)]),
        );
    }
    if addons.cinder_csi() {
        let text = manifest(Manifest::CinderCsi, &data)?;
        parts.insert(
            Part::CinderCsi,
            BTreeMap::from([
                ("cinder-csi.yaml".to_string(), text),
                ("storage-classes.yaml".to_string(), storage_classes(inputs)),
            ]),
        );
    }
    let mut cilium_version = None;
    if addons.cni_plugin() == Some(CniPlugin::Cilium) {
        let wanted = addons
            .cni
            .as_ref()
            .and_then(|c| c.cilium_version.as_deref());
        let (version, cilium) = versions::cilium(wanted)?;
        cilium_version = Some(version.to_string());
        let endpoint = inputs
            .osc
            .spec
            .control_plane_endpoint
            .as_ref()
            .filter(|e| !e.host.is_empty())
            .ok_or(AddonsError::NoEndpoint)?;
        let settings = inputs
            .osc
            .spec
            .extensions
            .as_ref()
            .and_then(|e| e.networking.as_ref())
            .and_then(|n| n.cilium.clone())
            .unwrap_or_default();
        data["Images"]["cilium"] = json!(cilium.agent);
        data["Images"]["ciliumOperator"] = json!(cilium.operator);
        data["PodCIDR"] = json!(inputs.pod_cidr.unwrap_or(DEFAULT_POD_CIDR));
        data["APIServerHost"] = json!(endpoint.host);
        data["APIServerPort"] = json!(endpoint.port.to_string());
        data["Cilium"] = json!({
            "RoutingMode": match settings.routing_mode {
                Some(CiliumRoutingMode::Native) => "native",
                _ => "tunnel",
            },
            "TunnelProtocol": match settings.tunnel_protocol {
                Some(CiliumTunnelProtocol::Geneve) => "geneve",
                _ => "vxlan",
            },
            "KubeProxyReplacement": settings.kube_proxy_replacement.unwrap_or(true),
            "Hubble": settings.hubble.unwrap_or(false),
        });
        let text = manifest(Manifest::Cilium, &data)?;
        parts.insert(
            Part::Cni,
            BTreeMap::from([("cilium.yaml".to_string(), text)]),
        );
    }
    for (part, data) in &parts {
        let bytes: usize = data.iter().map(|(k, v)| k.len() + v.len()).sum();
        // Base64 in the Secret, beside its metadata.
        if bytes * 4 / 3 + 4096 > MAX_OBJECT_BYTES {
            return Err(AddonsError::TooLarge {
                part: part.suffix(),
                bytes,
            });
        }
    }
    Ok(Rendered {
        parts,
        minor: minor.to_string(),
        cilium_version,
    })
}

/// The `kube-system/cloud-config` Secret the CCM and CSI mount, as a manifest.
fn cloud_config(inputs: &Inputs<'_>) -> BTreeMap<String, String> {
    let lb = cloud_conf::LoadBalancerFacts::of(inputs.osc);
    let conf = cloud_conf::render(inputs.cloud, None, inputs.cacert.is_some(), &lb);
    let mut data = serde_json::Map::new();
    data.insert("cloud.conf".into(), json!(BASE64.encode(conf.as_bytes())));
    if let Some(ca) = inputs.cacert {
        data.insert(cloud_conf::CA_KEY.into(), json!(BASE64.encode(ca)));
    }
    let secret = json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "cloud-config",
            "namespace": "kube-system",
            "labels": labels("cloud-config"),
        },
        "data": data,
    });
    BTreeMap::from([("cloud-config.yaml".to_string(), to_yaml(&[secret]))])
}

/// One StorageClass per volume type the project sees; Cinder's default type's
/// is the cluster's default.
fn storage_classes(inputs: &Inputs<'_>) -> String {
    let mut seen = BTreeMap::new();
    let mut docs = Vec::new();
    for t in inputs.volume_types {
        let name = storage_class_name(&t.name);
        if seen.insert(name.clone(), ()).is_some() {
            continue;
        }
        let default = inputs.default_volume_type == Some(t.name.as_str());
        let mut annotations = serde_json::Map::new();
        if default {
            annotations.insert(
                "storageclass.kubernetes.io/is-default-class".into(),
                json!("true"),
            );
        }
        docs.push(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": name,
                "labels": labels("cinder-csi"),
                "annotations": annotations,
            },
            "provisioner": CSI_DRIVER,
            "parameters": {"type": t.name},
            "allowVolumeExpansion": true,
            "reclaimPolicy": "Delete",
            // Volumes are made in the zone of the node the pod is scheduled to.
            "volumeBindingMode": "WaitForFirstConsumer",
        }));
    }
    to_yaml(&docs)
}

/// `csi-cinder-<type>`, lower-cased, every other character a dash: Cinder type
/// names are free text, Kubernetes names are DNS subdomains.
pub fn storage_class_name(volume_type: &str) -> String {
    let mut s: String = volume_type
        .chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '-'
            }
        })
        .collect();
    while s.contains("--") {
        s = s.replace("--", "-");
    }
    let s = s.trim_matches(|c| c == '-' || c == '.');
    let s = if s.is_empty() { "type" } else { s };
    let mut name = format!("csi-cinder-{s}");
    name.truncate(253);
    name.trim_end_matches(['-', '.']).to_string()
}

fn labels(name: &str) -> Value {
    json!({
        "app.kubernetes.io/name": name,
        "app.kubernetes.io/part-of": "stackhook-addons",
    })
}

fn to_yaml(docs: &[Value]) -> String {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        // JSON is YAML; one document per line keeps it exact and small.
        out.push_str(&d.to_string());
        out.push('\n');
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Manifest {
    CloudControllerManager,
    CinderCsi,
    Cilium,
}

impl Manifest {
    fn file(self) -> &'static str {
        match self {
            Manifest::CloudControllerManager => "cloud-controller-manager.yaml",
            Manifest::CinderCsi => "cinder-csi.yaml",
            Manifest::Cilium => "cilium.yaml",
        }
    }

    fn source(self) -> &'static str {
        match self {
            Manifest::CloudControllerManager => {
                include_str!("../../extensions/addons/cloud-controller-manager.yaml")
            }
            Manifest::CinderCsi => include_str!("../../extensions/addons/cinder-csi.yaml"),
            Manifest::Cilium => include_str!("../../extensions/addons/cilium.yaml"),
        }
    }
}

/// The templates, parsed once.
fn template(m: Manifest) -> Result<&'static Template, AddonsError> {
    static PARSED: OnceLock<[Result<Template, String>; 3]> = OnceLock::new();
    let all = PARSED.get_or_init(|| {
        [
            Manifest::CloudControllerManager,
            Manifest::CinderCsi,
            Manifest::Cilium,
        ]
        .map(|m| Template::parse(m.file(), m.source()).map_err(|e| e.to_string()))
    });
    let i = m as usize;
    all[i].as_ref().map_err(|e| AddonsError::Template {
        file: m.file(),
        message: e.clone(),
    })
}

fn manifest(m: Manifest, data: &Value) -> Result<String, AddonsError> {
    let text = template(m)?
        .render(data)
        .map_err(|e| AddonsError::Template {
            file: m.file(),
            message: e.to_string(),
        })?;
    // A field the data lacks prints Go's `<no value>`: a manifest applied with it
    // would be wrong in ways the API server does not catch.
    if text.contains("<no value>") {
        return Err(AddonsError::Template {
            file: m.file(),
            message: "a field the template reads is not in the data".into(),
        });
    }
    Ok(text)
}

#[cfg(test)]
mod tests;
