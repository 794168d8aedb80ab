//! What a project may still create: Nova's absolute limits (instances, cores,
//! RAM) and Neutron's quota details (ports). Read with the project's own
//! credentials; neither call needs an admin role.

use std::collections::BTreeMap;

use reqwest::Method;
use serde::Deserialize;
use serde_json::Value;

use crate::compute::microversion_headers;
use crate::error::OsError;
use crate::session::Session;

/// One countable resource: its limit (`None` when unlimited) and what is in use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub limit: Option<u64>,
    pub used: u64,
}

impl Usage {
    /// OpenStack reports "unlimited" as -1.
    pub fn new(limit: i64, used: i64) -> Self {
        Self {
            limit: u64::try_from(limit).ok(),
            used: u64::try_from(used).unwrap_or(0),
        }
    }

    /// What may still be created; `None` when unlimited.
    pub fn free(&self) -> Option<u64> {
        self.limit.map(|l| l.saturating_sub(self.used))
    }
}

/// Nova's absolute limits of the token's project.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ComputeLimits {
    pub instances: Usage,
    pub cores: Usage,
    /// MiB.
    pub ram_mib: Usage,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Absolute {
    #[serde(default = "unlimited")]
    max_total_instances: i64,
    #[serde(default)]
    total_instances_used: i64,
    #[serde(default = "unlimited")]
    max_total_cores: i64,
    #[serde(default)]
    total_cores_used: i64,
    #[serde(default = "unlimited", rename = "maxTotalRAMSize")]
    max_total_ram_size: i64,
    #[serde(default, rename = "totalRAMUsed")]
    total_ram_used: i64,
}

fn unlimited() -> i64 {
    -1
}

/// `{"limits": {"absolute": {...}}}` of `GET /limits`.
pub fn parse_compute_limits(v: Option<Value>) -> Result<ComputeLimits, String> {
    let absolute = v
        .and_then(|mut v| v.pointer_mut("/limits/absolute").map(Value::take))
        .ok_or_else(|| "no limits.absolute".to_owned())?;
    let a: Absolute = serde_json::from_value(absolute).map_err(|e| e.to_string())?;
    Ok(ComputeLimits {
        instances: Usage::new(a.max_total_instances, a.total_instances_used),
        cores: Usage::new(a.max_total_cores, a.total_cores_used),
        ram_mib: Usage::new(a.max_total_ram_size, a.total_ram_used),
    })
}

/// `GET /limits` at the base microversion, where instances, cores and RAM
/// are always reported.
pub async fn compute_limits(session: &Session) -> Result<ComputeLimits, OsError> {
    let path = "/limits";
    let v = session
        .request(
            Method::GET,
            &["compute"],
            path,
            &[],
            None,
            &microversion_headers("2.1"),
        )
        .await?;
    parse_compute_limits(v).map_err(|message| OsError::Decode {
        service: "compute".into(),
        path: path.into(),
        message,
    })
}

#[derive(Deserialize)]
struct Detail {
    #[serde(default = "unlimited")]
    limit: i64,
    #[serde(default)]
    used: i64,
    #[serde(default)]
    reserved: i64,
}

/// `{"quota": {"port": {"limit", "used", "reserved"}, ...}}`; reserved
/// counts as used, as Neutron does when it admits a create.
pub fn parse_network_quota(v: Option<Value>) -> Result<BTreeMap<String, Usage>, String> {
    let quota = v
        .and_then(|mut v| v.get_mut("quota").map(Value::take))
        .ok_or_else(|| "no quota".to_owned())?;
    let details: BTreeMap<String, Detail> =
        serde_json::from_value(quota).map_err(|e| e.to_string())?;
    Ok(details
        .into_iter()
        .map(|(k, d)| (k, Usage::new(d.limit, d.used + d.reserved)))
        .collect())
}

/// `GET /v2.0/quotas/{project}/details`: limit and use per Neutron resource.
pub async fn network_quota(
    session: &Session,
    project_id: &str,
) -> Result<BTreeMap<String, Usage>, OsError> {
    let path = format!("/v2.0/quotas/{project_id}/details");
    let v = session
        .request(Method::GET, &["network"], &path, &[], None, &vec![])
        .await?;
    parse_network_quota(v).map_err(|message| OsError::Decode {
        service: "network".into(),
        path,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_nova_limits_with_unlimited_values() {
        let l = parse_compute_limits(Some(json!({"limits": {"rate": [], "absolute": {
            "maxTotalInstances": 10, "totalInstancesUsed": 3, "maxTotalCores": -1,
            "totalCoresUsed": 7, "maxTotalRAMSize": 51200, "totalRAMUsed": 60000,
            "maxServerMeta": 128}}})))
        .unwrap();
        assert_eq!(l.instances.free(), Some(7));
        assert_eq!(l.cores.free(), None);
        assert_eq!(l.cores.used, 7);
        // More in use than allowed (a lowered quota) leaves nothing, not a wrap.
        assert_eq!(l.ram_mib.free(), Some(0));
        assert!(parse_compute_limits(Some(json!({"limits": {}}))).is_err());
    }

    #[test]
    fn reads_neutron_details_counting_reservations() {
        let q = parse_network_quota(Some(json!({"quota": {
            "port": {"limit": 10, "used": 4, "reserved": 2},
            "network": {"limit": -1, "used": 1, "reserved": 0}}})))
        .unwrap();
        assert_eq!(q["port"].free(), Some(4));
        assert_eq!(q["network"].free(), None);
        assert!(parse_network_quota(Some(json!({}))).is_err());
    }
}
