//! What an OpenStackMachineTemplate's machines will be, before any exists: the
//! `status.capacity` and `status.nodeInfo` the cluster-autoscaler's Cluster API
//! provider reads to scale a MachineDeployment up from zero.
//!
//! The autoscaler parses each `status.capacity` value as a Kubernetes quantity and
//! scales from zero only when `cpu` and `memory` are there; `nodeInfo` gives the
//! `kubernetes.io/arch` and `kubernetes.io/os` labels of the node it imagines.
//!
//! From the Nova flavor, as CAPO v0.14 writes them: `cpu` (vCPUs), `memory` (RAM)
//! and `storage` (the root volume's size, else the flavor's disk). Two differ on
//! purpose:
//! - `ephemeral-storage` is what the kubelet will report, the filesystem under
//!   `/var/lib/kubelet`: the root disk. CAPO writes the flavor's separate ephemeral
//!   disk, which is 0 on most flavors and would make the autoscaler believe no pod
//!   asking for ephemeral storage fits.
//! - GPUs: `nvidia.com/gpu` counts the flavor's `resources:VGPU` and its
//!   `pci_passthrough:alias` entries whose alias names a GPU (`gpu` in the name,
//!   any case). CAPO writes none.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use stackhook_openstack::compute::Flavor;
use stackhook_openstack::image::Image;

use crate::infra::api::machine::{NodeInfo, OpenStackMachineTemplateStatus};

/// The resource name the NVIDIA device plugin registers.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// `n` MiB as the shortest exact binary quantity.
fn mebibytes(n: u64) -> Quantity {
    Quantity(if n.is_multiple_of(1024) {
        format!("{}Gi", n / 1024)
    } else {
        format!("{n}Mi")
    })
}

fn gibibytes(n: u64) -> Quantity {
    Quantity(format!("{n}Gi"))
}

/// GPUs the flavor gives a server, from its extra specs.
pub fn gpus(flavor: &Flavor) -> u64 {
    let mut n = flavor
        .extra_specs
        .get("resources:VGPU")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(0);
    if let Some(aliases) = flavor.extra_specs.get("pci_passthrough:alias") {
        for entry in aliases.split(',') {
            let (alias, count) = entry.split_once(':').unwrap_or((entry, "1"));
            if alias.to_ascii_lowercase().contains("gpu") {
                n += count.trim().parse::<u64>().unwrap_or(0);
            }
        }
    }
    n
}

/// `status.capacity` of a template whose machines boot `flavor`, with a root
/// volume of `root_volume_gib` when the template has one.
pub fn capacity(flavor: &Flavor, root_volume_gib: Option<u64>) -> BTreeMap<String, Quantity> {
    let mut out = BTreeMap::new();
    out.insert("cpu".to_string(), Quantity(flavor.vcpus.to_string()));
    out.insert("memory".to_string(), mebibytes(flavor.ram));
    let root = root_volume_gib.filter(|g| *g > 0).unwrap_or(flavor.disk);
    if root > 0 {
        out.insert("storage".to_string(), gibibytes(root));
        out.insert("ephemeral-storage".to_string(), gibibytes(root));
    }
    let gpus = gpus(flavor);
    if gpus > 0 {
        out.insert(GPU_RESOURCE.to_string(), Quantity(gpus.to_string()));
    }
    out
}

/// Glance's `architecture` as Go (and so Kubernetes) names it; `None` when unknown.
fn go_arch(glance: &str) -> Option<&'static str> {
    match glance.trim().to_ascii_lowercase().as_str() {
        "x86_64" | "amd64" | "x64" => Some("amd64"),
        "aarch64" | "arm64" => Some("arm64"),
        "ppc64le" => Some("ppc64le"),
        "s390x" => Some("s390x"),
        "riscv64" => Some("riscv64"),
        _ => None,
    }
}

/// `status.nodeInfo` from the image's `os_type` and `architecture` properties;
/// `None` when it has neither.
pub fn node_info(image: &Image) -> Option<NodeInfo> {
    let info = NodeInfo {
        operating_system: image
            .os_type
            .as_deref()
            .map(|o| o.trim().to_ascii_lowercase())
            .filter(|o| !o.is_empty()),
        architecture: image
            .architecture
            .as_deref()
            .and_then(go_arch)
            .map(str::to_string),
    };
    (info != NodeInfo::default()).then_some(info)
}

/// The whole status; the image is `None` when it could not be read.
pub fn status(
    flavor: &Flavor,
    root_volume_gib: Option<u64>,
    image: Option<&Image>,
) -> OpenStackMachineTemplateStatus {
    OpenStackMachineTemplateStatus {
        capacity: capacity(flavor, root_volume_gib),
        node_info: image.and_then(node_info),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flavor(vcpus: u64, ram: u64, disk: u64, specs: &[(&str, &str)]) -> Flavor {
        Flavor {
            id: "f".into(),
            name: "f".into(),
            vcpus,
            ram,
            disk,
            ephemeral: 0,
            extra_specs: specs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }
    }

    fn q(map: &BTreeMap<String, Quantity>) -> Vec<(&str, &str)> {
        map.iter()
            .map(|(k, v)| (k.as_str(), v.0.as_str()))
            .collect()
    }

    /// Kubernetes quantities as `resource.ParseQuantity` reads them: 4Gi is
    /// 4 × 2^30 bytes, 1536Mi 1536 × 2^20.
    #[test]
    fn capacity_is_the_flavor_in_kubernetes_quantities() {
        let c = capacity(&flavor(2, 4096, 20, &[]), None);
        assert_eq!(
            q(&c),
            [
                ("cpu", "2"),
                ("ephemeral-storage", "20Gi"),
                ("memory", "4Gi"),
                ("storage", "20Gi"),
            ]
        );
        // A root volume replaces the flavor's disk; RAM that is not whole GiB stays MiB.
        let c = capacity(&flavor(1, 1536, 0, &[]), Some(50));
        assert_eq!(
            q(&c),
            [
                ("cpu", "1"),
                ("ephemeral-storage", "50Gi"),
                ("memory", "1536Mi"),
                ("storage", "50Gi"),
            ]
        );
        // Boot from volume without a size known here: no disk figure at all.
        let c = capacity(&flavor(1, 512, 0, &[]), None);
        assert_eq!(q(&c), [("cpu", "1"), ("memory", "512Mi")]);
    }

    #[test]
    fn gpus_come_from_vgpu_resources_and_gpu_pci_aliases() {
        let f = flavor(8, 65536, 100, &[("resources:VGPU", "1")]);
        assert_eq!(capacity(&f, None)[GPU_RESOURCE].0, "1");
        let f = flavor(
            8,
            65536,
            100,
            &[("pci_passthrough:alias", "a100-gpu:2, nic-sriov:1,T4_GPU")],
        );
        assert_eq!(gpus(&f), 3);
        let f = flavor(8, 65536, 100, &[("pci_passthrough:alias", "nvme:2")]);
        assert_eq!(gpus(&f), 0);
        assert!(!capacity(&f, None).contains_key(GPU_RESOURCE));
        let f = flavor(8, 65536, 100, &[("resources:VGPU", "many")]);
        assert_eq!(gpus(&f), 0);
    }

    #[test]
    fn node_info_names_the_os_and_the_architecture_as_kubernetes_does() {
        let image = |os: Option<&str>, arch: Option<&str>| Image {
            os_type: os.map(str::to_string),
            architecture: arch.map(str::to_string),
            ..Image::default()
        };
        let i = node_info(&image(Some("Linux"), Some("x86_64"))).unwrap();
        assert_eq!(i.operating_system.as_deref(), Some("linux"));
        assert_eq!(i.architecture.as_deref(), Some("amd64"));
        let i = node_info(&image(None, Some("aarch64"))).unwrap();
        assert_eq!(
            (i.operating_system, i.architecture.as_deref()),
            (None, Some("arm64"))
        );
        assert_eq!(node_info(&image(None, Some("sparc"))), None);
        assert_eq!(node_info(&image(Some(" "), None)), None);
    }
}
