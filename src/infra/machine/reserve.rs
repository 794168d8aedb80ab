//! CPU and memory a node keeps back from pods, computed from its flavor.
//!
//! The default policy is the tiered one GKE documents for its nodes ("Node
//! allocatable", GKE standard cluster architecture), which AKS adopted for
//! Kubernetes 1.29+ nodes: the bigger the node, the smaller the share reserved.
//! CPU: 6 % of the first core, 1 % of the second, 0.5 % of the third and fourth,
//! 0.25 % of every core above four. Memory: 25 % of the first 4 GiB, 20 % of the next
//! 4 GiB, 10 % of the next 8 GiB, 6 % of the next 112 GiB, 2 % of anything above
//! 128 GiB, plus 100 MiB for the kubelet's hard eviction threshold.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// How much to hold back; tiers are `(upper bound, share)` in ascending order, the
/// last one open-ended.
#[derive(Clone, Debug, PartialEq)]
pub struct ReservePolicy {
    /// Per tier of cores: up to `bound` cores, `share` of each core (in millicores).
    pub cpu_tiers: Vec<(f64, f64)>,
    /// Per tier of memory: up to `bound` MiB, `share` of each MiB.
    pub memory_tiers: Vec<(f64, f64)>,
    /// Added to the memory reservation (the kubelet's eviction threshold).
    pub memory_extra_mib: u64,
}

impl Default for ReservePolicy {
    fn default() -> Self {
        ReservePolicy {
            cpu_tiers: vec![
                (1.0, 0.06),
                (2.0, 0.01),
                (4.0, 0.005),
                (f64::INFINITY, 0.0025),
            ],
            memory_tiers: vec![
                (4096.0, 0.25),
                (8192.0, 0.20),
                (16384.0, 0.10),
                (131072.0, 0.06),
                (f64::INFINITY, 0.02),
            ],
            memory_extra_mib: 100,
        }
    }
}

fn tiered(amount: f64, tiers: &[(f64, f64)]) -> f64 {
    let mut reserved = 0.0;
    let mut lower = 0.0;
    for &(upper, share) in tiers {
        if amount <= lower {
            break;
        }
        reserved += (amount.min(upper) - lower) * share;
        lower = upper;
    }
    reserved
}

impl ReservePolicy {
    /// `cpu` (millicores) and `memory` (MiB) to reserve on a node with `vcpus` cores
    /// and `ram_mib` of memory.
    pub fn reserve(&self, vcpus: u64, ram_mib: u64) -> BTreeMap<String, Quantity> {
        let cpu_m = (tiered(vcpus as f64, &self.cpu_tiers) * 1000.0).ceil() as u64;
        let mem_mib =
            tiered(ram_mib as f64, &self.memory_tiers).ceil() as u64 + self.memory_extra_mib;
        BTreeMap::from([
            ("cpu".to_string(), Quantity(format!("{cpu_m}m"))),
            ("memory".to_string(), Quantity(format!("{mem_mib}Mi"))),
        ])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(m: &BTreeMap<String, Quantity>, k: &str) -> String {
        m[k].0.clone()
    }

    /// Figures worked out by hand from the tiers GKE publishes.
    #[test]
    fn tiers_as_documented() {
        let p = ReservePolicy::default();
        // 1 core, 1 GiB: 6 % of a core; 25 % of 1024 MiB + 100.
        let r = p.reserve(1, 1024);
        assert_eq!(q(&r, "cpu"), "60m");
        assert_eq!(q(&r, "memory"), "356Mi");
        // 4 cores, 16 GiB: 60 + 10 + 2 × 5 = 80m; 1024 + 819.2 + 819.2 = 2662.4 → 2663 + 100.
        let r = p.reserve(4, 16384);
        assert_eq!(q(&r, "cpu"), "80m");
        assert_eq!(q(&r, "memory"), "2763Mi");
        // 8 cores: 80 + 4 × 2.5 = 90m. 32 GiB: 2662.4 + 6 % of 16384 = 3645.44 → 3646 + 100.
        let r = p.reserve(8, 32768);
        assert_eq!(q(&r, "cpu"), "90m");
        assert_eq!(q(&r, "memory"), "3746Mi");
        // 256 GiB: 2662.4 + 0.06 × 114688 + 0.02 × 131072 = 2662.4 + 6881.28 + 2621.44.
        let r = p.reserve(64, 262144);
        assert_eq!(q(&r, "cpu"), "230m");
        assert_eq!(q(&r, "memory"), "12266Mi");
    }
}
