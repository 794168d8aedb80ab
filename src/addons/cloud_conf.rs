//! `cloud.conf` for the cloud-controller-manager and the Cinder CSI driver
//! (cloud-provider-openstack's gcfg file): `[Global]` from the cluster's own
//! identity, `[LoadBalancer]` from what the OpenStackCluster controller found
//! or made, so Services of type LoadBalancer land on the cluster's subnet and
//! get floating IPs from its external network without anyone writing it by hand.
//!
//! Written here rather than with an INI crate: gcfg's quoting (every value in
//! double quotes, `\\` `\"` `\n` escapes) is what the Go reader needs, and the
//! INI crates quote differently or not at all.

use secrecy::ExposeSecret;
use stackhook_openstack::config::{AuthMethod, CloudConfig, NameOrId};

use crate::infra::api::OpenStackCluster;

/// Where the manifests mount the `cloud-config` Secret.
pub const MOUNT_DIR: &str = "/etc/config";
/// Key of the CA bundle in the `cloud-config` Secret.
pub const CA_KEY: &str = "ca.crt";

/// The cloud's facts about one cluster that go under `[LoadBalancer]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadBalancerFacts {
    pub floating_network_id: Option<String>,
    pub network_id: Option<String>,
    pub subnet_id: Option<String>,
    pub provider: Option<String>,
}

impl LoadBalancerFacts {
    /// From the OpenStackCluster's status (what exists) and spec (the provider the
    /// user chose for the API load balancer, which Services get too).
    pub fn of(osc: &OpenStackCluster) -> LoadBalancerFacts {
        let status = osc.status.as_ref();
        let network = status.and_then(|s| s.network.as_ref());
        let external = if osc.spec.disable_external_network == Some(true) {
            None
        } else {
            status
                .and_then(|s| s.external_network.as_ref())
                .map(|n| n.id.clone())
        };
        LoadBalancerFacts {
            floating_network_id: external.filter(|id| !id.is_empty()),
            network_id: network
                .map(|n| n.network.id.clone())
                .filter(|id| !id.is_empty()),
            subnet_id: network
                .and_then(|n| n.subnets.first())
                .map(|s| s.id.clone())
                .filter(|id| !id.is_empty()),
            provider: osc
                .spec
                .api_server_load_balancer
                .as_ref()
                .and_then(|l| l.provider.clone())
                .filter(|p| !p.is_empty()),
        }
    }
}

/// The file. `region` overrides the cloud entry's (the identityRef's region);
/// `with_ca` points `ca-file` at the bundle beside it.
pub fn render(
    cloud: &CloudConfig,
    region: Option<&str>,
    with_ca: bool,
    lb: &LoadBalancerFacts,
) -> String {
    let mut out = String::from("[Global]\n");
    let mut put = |out: &mut String, key: &str, value: &str| {
        out.push_str(key);
        out.push_str(" = ");
        out.push_str(&quote(value));
        out.push('\n');
    };
    put(&mut out, "auth-url", &cloud.auth_url);
    match &cloud.auth {
        AuthMethod::Password {
            user,
            user_domain,
            password,
            project,
            project_domain,
        } => {
            name_or_id(&mut out, &mut put, user, "username", "user-id");
            if let Some(d) = user_domain {
                name_or_id(&mut out, &mut put, d, "user-domain-name", "user-domain-id");
            }
            put(&mut out, "password", password.expose_secret());
            if let Some(p) = project {
                name_or_id(&mut out, &mut put, p, "tenant-name", "tenant-id");
            }
            if let Some(d) = project_domain {
                name_or_id(
                    &mut out,
                    &mut put,
                    d,
                    "tenant-domain-name",
                    "tenant-domain-id",
                );
            }
        }
        AuthMethod::ApplicationCredential {
            credential,
            user,
            user_domain,
            secret,
        } => {
            name_or_id(
                &mut out,
                &mut put,
                credential,
                "application-credential-name",
                "application-credential-id",
            );
            if let Some(u) = user {
                name_or_id(&mut out, &mut put, u, "username", "user-id");
            }
            if let Some(d) = user_domain {
                name_or_id(&mut out, &mut put, d, "user-domain-name", "user-domain-id");
            }
            put(
                &mut out,
                "application-credential-secret",
                secret.expose_secret(),
            );
        }
    }
    if let Some(r) = region.or(cloud.region.as_deref()).filter(|r| !r.is_empty()) {
        put(&mut out, "region", r);
    }
    if with_ca {
        put(&mut out, "ca-file", &format!("{MOUNT_DIR}/{CA_KEY}"));
    }
    if !cloud.verify {
        put(&mut out, "tls-insecure", "true");
    }
    out.push_str("\n[LoadBalancer]\n");
    for (key, value) in [
        ("floating-network-id", &lb.floating_network_id),
        ("network-id", &lb.network_id),
        ("subnet-id", &lb.subnet_id),
        ("lb-provider", &lb.provider),
    ] {
        if let Some(v) = value {
            put(&mut out, key, v);
        }
    }
    out.push_str("\n[BlockStorage]\n");
    put(&mut out, "bs-version", "v3");
    out
}

fn name_or_id(
    out: &mut String,
    put: &mut impl FnMut(&mut String, &str, &str),
    v: &NameOrId,
    name_key: &str,
    id_key: &str,
) {
    match v {
        NameOrId::Name(n) => put(out, name_key, n),
        NameOrId::Id(i) => put(out, id_key, i),
    }
}

/// A gcfg value in double quotes: `#` and `;` start comments outside them.
fn quote(v: &str) -> String {
    let mut q = String::with_capacity(v.len() + 2);
    q.push('"');
    for c in v.chars() {
        match c {
            '\\' => q.push_str("\\\\"),
            '"' => q.push_str("\\\""),
            '\n' => q.push_str("\\n"),
            '\t' => q.push_str("\\t"),
            c => q.push(c),
        }
    }
    q.push('"');
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::OpenStackClusterSpec;

    fn cloud(yaml: &str) -> CloudConfig {
        CloudConfig::from_clouds_yaml(yaml.as_bytes(), "openstack", None).expect("clouds.yaml")
    }

    #[test]
    fn application_credentials_and_the_cluster_s_network() {
        let c = cloud(
            "clouds:\n  openstack:\n    auth_type: v3applicationcredential\n    region_name: RegionOne\n    auth:\n      auth_url: https://keystone.example:5000\n      application_credential_id: ac-1\n      application_credential_secret: 's3#cr;t\"x'\n",
        );
        let mut osc = OpenStackCluster::new("c", OpenStackClusterSpec::default());
        osc.status = Some(
            serde_json::from_value(serde_json::json!({
                "ready": true,
                "externalNetwork": {"name": "public", "id": "ext-1"},
                "network": {"name": "n", "id": "net-1", "subnets": [{"name": "s", "id": "sub-1", "cidr": "10.6.0.0/24"}]},
            }))
            .unwrap(),
        );
        let text = render(&c, Some("RegionTwo"), true, &LoadBalancerFacts::of(&osc));
        assert!(
            text.contains("auth-url = \"https://keystone.example:5000/v3\"\n"),
            "{text}"
        );
        assert!(text.contains("application-credential-id = \"ac-1\"\n"));
        assert!(text.contains("application-credential-secret = \"s3#cr;t\\\"x\"\n"));
        assert!(
            text.contains("region = \"RegionTwo\"\n"),
            "the identityRef's region wins"
        );
        assert!(text.contains("ca-file = \"/etc/config/ca.crt\"\n"));
        assert!(!text.contains("password"));
        let lb = text.split("[LoadBalancer]").nth(1).unwrap();
        assert!(lb.contains("floating-network-id = \"ext-1\""));
        assert!(lb.contains("subnet-id = \"sub-1\""));
        assert!(lb.contains("network-id = \"net-1\""));
        assert!(!lb.contains("lb-provider"));
    }

    #[test]
    fn passwords_scope_by_name_and_no_external_network_means_no_floating_ips() {
        let c = cloud(
            "clouds:\n  openstack:\n    verify: false\n    auth:\n      auth_url: http://127.0.0.1:5000/v3\n      username: demo\n      password: pw\n      project_id: p-1\n      user_domain_name: Default\n",
        );
        let mut osc = OpenStackCluster::new("c", OpenStackClusterSpec::default());
        osc.spec.disable_external_network = Some(true);
        osc.spec.api_server_load_balancer = Some(Box::new(
            serde_json::from_value(serde_json::json!({"enabled": true, "provider": "ovn"}))
                .unwrap(),
        ));
        osc.status = Some(
            serde_json::from_value(serde_json::json!({
                "ready": true, "externalNetwork": {"name": "public", "id": "ext-1"}}))
            .unwrap(),
        );
        let text = render(&c, None, false, &LoadBalancerFacts::of(&osc));
        assert!(text.contains("username = \"demo\"\n"));
        assert!(text.contains("password = \"pw\"\n"));
        assert!(text.contains("tenant-id = \"p-1\"\n"));
        assert!(text.contains("user-domain-name = \"Default\"\n"));
        assert!(text.contains("tls-insecure = \"true\"\n"));
        assert!(!text.contains("region ="));
        assert!(!text.contains("ca-file"));
        assert!(!text.contains("floating-network-id"));
        assert!(text.contains("lb-provider = \"ovn\""));
    }
}
