//! Reads `spec.identityRef` into the [`IdentitySecret`] the cloud half gets.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::core::{Selector, SelectorExt};
use kube::{Api, Client, ResourceExt};

use crate::infra::api::identity::OpenStackCredentialsSecretReference;
use crate::infra::api::types::{IdentityRefType, OpenStackIdentityReference};
use crate::infra::api::{OpenStackCluster, OpenStackClusterIdentity};
use crate::infra::seam::IdentitySecret;

/// Key of the clouds.yaml document in the identity Secret.
pub const CLOUDS_YAML_KEY: &str = "clouds.yaml";
/// Optional PEM bundle key in the identity Secret.
pub const CACERT_KEY: &str = "cacert";

/// Reason of the condition when a namespace may not use a ClusterIdentity.
pub const NAMESPACE_NOT_ALLOWED: &str = "IdentityNamespaceNotAllowed";

/// Why the identity could not be read.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The user has to fix the reference or create the Secret.
    #[error("{message}")]
    User {
        reason: &'static str,
        message: String,
    },
    /// Reading failed for a reason a retry may fix.
    #[error("reading the identity: {0}")]
    Api(#[source] kube::Error),
}

/// Fetches the Secret named by `spec.identityRef`: from the object's namespace, or,
/// for a `ClusterIdentity`, the one the cluster-scoped OpenStackClusterIdentity names
/// once its `namespaceSelector` admits the object's namespace (as CAPO does).
pub async fn read_identity(
    client: &Client,
    osc: &OpenStackCluster,
) -> Result<IdentitySecret, IdentityError> {
    let ident = &osc.spec.identity_ref;
    let namespace = osc.namespace().unwrap_or_default();
    match ident.type_ {
        IdentityRefType::Secret => read_identity_secret(client, &namespace, ident).await,
        IdentityRefType::ClusterIdentity => {
            let secret_ref = cluster_identity_secret(client, &namespace, &ident.name).await?;
            let from_secret = OpenStackIdentityReference {
                name: secret_ref.name,
                ..ident.clone()
            };
            read_identity_secret(client, &secret_ref.namespace, &from_secret).await
        }
    }
}

/// The Secret an OpenStackClusterIdentity points at, if `namespace` may use it.
async fn cluster_identity_secret(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<OpenStackCredentialsSecretReference, IdentityError> {
    let identities: Api<OpenStackClusterIdentity> = Api::all(client.clone());
    let identity = match identities.get_opt(name).await {
        Ok(Some(i)) => i,
        Ok(None) => {
            return Err(IdentityError::User {
                reason: "IdentityNotFound",
                message: format!("OpenStackClusterIdentity {name} does not exist"),
            })
        }
        Err(e) => return Err(IdentityError::Api(e)),
    };
    let labels = if identity.spec.namespace_selector.is_some() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        match namespaces.get_opt(namespace).await {
            Ok(ns) => ns.and_then(|n| n.metadata.labels).unwrap_or_default(),
            Err(e) => return Err(IdentityError::Api(e)),
        }
    } else {
        BTreeMap::new()
    };
    admitted_secret(&identity, namespace, &labels)
}

/// The pure part of [`cluster_identity_secret`]: `namespace` (with `labels`) may use
/// `identity` when its selector is absent or matches them.
pub fn admitted_secret(
    identity: &OpenStackClusterIdentity,
    namespace: &str,
    labels: &BTreeMap<String, String>,
) -> Result<OpenStackCredentialsSecretReference, IdentityError> {
    let name = identity.name_any();
    if let Some(selector) = &identity.spec.namespace_selector {
        let selector = Selector::try_from(selector.clone()).map_err(|e| IdentityError::User {
            reason: "InvalidIdentity",
            message: format!(
                "OpenStackClusterIdentity {name} has an invalid namespaceSelector: {e}"
            ),
        })?;
        if !selector.matches(labels) {
            return Err(IdentityError::User {
                reason: NAMESPACE_NOT_ALLOWED,
                message: format!(
                    "namespace {namespace:?} is not allowed to use OpenStackClusterIdentity {name:?}: \
                     its labels do not match the identity's namespaceSelector ({selector})"
                ),
            });
        }
    }
    let secret_ref = identity.spec.secret_ref.clone();
    if secret_ref.name.is_empty() || secret_ref.namespace.is_empty() {
        return Err(IdentityError::User {
            reason: "InvalidIdentity",
            message: format!(
                "OpenStackClusterIdentity {name} needs secretRef.name and secretRef.namespace"
            ),
        });
    }
    Ok(secret_ref)
}

/// Fetches the Secret `ident` names from `namespace`: for callers that have the
/// reference but no OpenStackCluster yet (ValidateTopology, before CAPI creates it).
pub async fn read_identity_secret(
    client: &Client,
    namespace: &str,
    ident: &OpenStackIdentityReference,
) -> Result<IdentitySecret, IdentityError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match api.get_opt(&ident.name).await {
        Ok(Some(s)) => s,
        Ok(None) => {
            return Err(IdentityError::User {
                reason: "IdentityNotFound",
                message: format!(
                    "identityRef Secret {namespace}/{} does not exist",
                    ident.name
                ),
            })
        }
        Err(e) => return Err(IdentityError::Api(e)),
    };
    identity_from_reference(&secret, ident)
}

/// The pure part of [`read_identity`].
pub fn identity_from_secret(
    secret: &Secret,
    osc: &OpenStackCluster,
) -> Result<IdentitySecret, IdentityError> {
    identity_from_reference(secret, &osc.spec.identity_ref)
}

fn identity_from_reference(
    secret: &Secret,
    ident: &OpenStackIdentityReference,
) -> Result<IdentitySecret, IdentityError> {
    let namespace = secret.namespace().unwrap_or_default();
    let data = secret.data.as_ref();
    let key = |k: &str| -> Option<Vec<u8>> {
        data.and_then(|d| d.get(k))
            .map(|b| b.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(k))
                    .map(|s| s.as_bytes().to_vec())
            })
    };
    let clouds_yaml = key(CLOUDS_YAML_KEY).ok_or_else(|| IdentityError::User {
        reason: "InvalidIdentity",
        message: format!(
            "identityRef Secret {namespace}/{} has no {CLOUDS_YAML_KEY} key",
            ident.name
        ),
    })?;
    Ok(IdentitySecret {
        namespace,
        name: secret.name_any(),
        resource_version: secret.resource_version().unwrap_or_default(),
        clouds_yaml: clouds_yaml.into(),
        cacert: key(CACERT_KEY),
        cloud_name: ident.cloud_name.clone(),
        region: ident.region.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::infra::api::types::OpenStackIdentityReference;
    use crate::infra::api::OpenStackClusterSpec;
    use k8s_openapi::ByteString;
    use secrecy::ExposeSecret;

    fn osc() -> OpenStackCluster {
        OpenStackCluster::new(
            "c1",
            OpenStackClusterSpec {
                identity_ref: OpenStackIdentityReference {
                    name: "creds".into(),
                    cloud_name: "openstack".into(),
                    region: Some("RegionTwo".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
    }

    fn secret(keys: &[(&str, &str)]) -> Secret {
        let mut s = Secret::default();
        s.metadata.name = Some("creds".into());
        s.metadata.namespace = Some("ns".into());
        s.metadata.resource_version = Some("42".into());
        s.data = Some(
            keys.iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.as_bytes().to_vec())))
                .collect(),
        );
        s
    }

    #[test]
    fn reads_keys_and_reference_fields() {
        let id = identity_from_secret(
            &secret(&[("clouds.yaml", "clouds: {}\n"), ("cacert", "PEM")]),
            &osc(),
        )
        .unwrap();
        assert_eq!(id.clouds_yaml.expose_secret(), b"clouds: {}\n");
        assert_eq!(id.cacert.as_deref(), Some(&b"PEM"[..]));
        assert_eq!(id.cloud_name, "openstack");
        assert_eq!(id.region.as_deref(), Some("RegionTwo"));
        assert_eq!(id.resource_version, "42");
        assert_eq!((id.namespace.as_str(), id.name.as_str()), ("ns", "creds"));
    }

    #[test]
    fn debug_names_the_secret_but_prints_no_credential() {
        let yaml =
            "clouds:\n  openstack:\n    auth:\n      auth_url: https://keystone.example\n      \
                    username: alice\n      password: pw-0c8e41\n";
        let id = identity_from_secret(&secret(&[("clouds.yaml", yaml)]), &osc()).unwrap();
        for shown in [format!("{id:?}"), format!("{id:#?}")] {
            assert!(!shown.contains("pw-0c8e41"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            // Not as bytes either: `p` `w` `-` are 112, 119, 45.
            assert!(!shown.contains("112, 119, 45"), "{shown}");
            assert!(
                shown.contains("creds") && shown.contains("\"ns\""),
                "{shown}"
            );
            assert!(
                shown.contains("openstack") && shown.contains("RegionTwo"),
                "{shown}"
            );
        }
        assert_eq!(id.clouds_yaml.expose_secret(), yaml.as_bytes());
    }

    /// A CA bundle laid out as certifi's (the default `cacert` of Magnum's
    /// Secret): `count` self-signed CA certificates, each after comment
    /// lines naming it.
    fn ca_bundle(count: usize) -> String {
        use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
        let key = KeyPair::generate().unwrap();
        let mut bundle = String::new();
        for i in 0..count {
            let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
            let cn = format!("Example Root CA {i:03}");
            params.distinguished_name.push(DnType::CommonName, &cn);
            params
                .distinguished_name
                .push(DnType::OrganizationName, "Example Trust Services");
            params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let cert = params.self_signed(&key).unwrap();
            bundle.push_str(&format!(
                "\n# Issuer: CN={cn} O=Example Trust Services\n# Subject: CN={cn} O=Example Trust Services\n\
                 # Label: \"{cn}\"\n# Serial: {i}\n"
            ));
            bundle.push_str(&cert.pem());
        }
        bundle
    }

    /// Magnum's identity Secret (tests/fixtures/magnum) with a `cacert` the
    /// size of certifi's bundle, as the driver writes it by default: read
    /// whole, from `stringData` as submitted and from `data` as the API
    /// server returns it, and usable as the session's roots.
    #[test]
    fn reads_magnum_secret_with_a_large_ca_bundle() {
        use crate::infra::cluster::CloudSource;
        use stackhook_openstack::config::AuthMethod;

        let bundle = ca_bundle(260);
        assert!(bundle.len() > 200_000, "{} bytes", bundle.len());
        let mut submitted: Secret = serde_saphyr::from_str(include_str!(
            "../../tests/fixtures/magnum/secret.cloud-config.yaml"
        ))
        .unwrap();
        submitted
            .string_data
            .as_mut()
            .unwrap()
            .insert(CACERT_KEY.into(), bundle.clone());
        let mut stored = submitted.clone();
        stored.data = stored.string_data.take().map(|d| {
            d.into_iter()
                .map(|(k, v)| (k, ByteString(v.into_bytes())))
                .collect()
        });
        let ident = OpenStackIdentityReference {
            name: "kube-7x2kq-cloud-config".into(),
            cloud_name: "default".into(),
            ..Default::default()
        };
        for secret in [&submitted, &stored] {
            let id = identity_from_reference(secret, &ident).unwrap();
            assert_eq!(id.cacert.as_deref(), Some(bundle.as_bytes()));
            assert_eq!(
                (id.namespace.as_str(), id.name.as_str()),
                ("magnum-system", "kube-7x2kq-cloud-config")
            );
            let config = stackhook_openstack::CloudConfig::from_clouds_yaml(
                id.clouds_yaml.expose_secret(),
                &id.cloud_name,
                id.region.as_deref(),
            )
            .unwrap();
            assert!(
                matches!(config.auth, AuthMethod::ApplicationCredential { .. }),
                "{:?}",
                config.auth
            );
            let roots = reqwest::Certificate::from_pem_bundle(id.cacert.as_deref().unwrap());
            assert_eq!(roots.map(|r| r.len()).ok(), Some(260));
            // The controllers' path: clients for the identity, the bundle as
            // the only roots.
            let clients = stackhook_openstack::ClientCache::new()
                .clients_for(&id)
                .unwrap();
            assert_eq!(
                clients.session.config().region.as_deref(),
                Some("RegionOne")
            );
        }
    }

    #[test]
    fn missing_clouds_yaml_is_a_user_error() {
        let err = identity_from_secret(&secret(&[("cacert", "PEM")]), &osc()).unwrap_err();
        assert!(
            matches!(
                err,
                IdentityError::User {
                    reason: "InvalidIdentity",
                    ..
                }
            ),
            "{err:?}"
        );
    }

    fn cluster_identity(selector: Option<serde_json::Value>) -> OpenStackClusterIdentity {
        let mut spec =
            serde_json::json!({"secretRef": {"name": "creds", "namespace": "capo-system"}});
        if let Some(sel) = selector {
            spec["namespaceSelector"] = sel;
        }
        serde_json::from_value(serde_json::json!({
            "apiVersion": "infrastructure.cluster.x-k8s.io/v1alpha1",
            "kind": "OpenStackClusterIdentity",
            "metadata": {"name": "shared"},
            "spec": spec
        }))
        .unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn cluster_identity_without_selector_admits_every_namespace() {
        let got = admitted_secret(&cluster_identity(None), "anything", &labels(&[])).unwrap();
        assert_eq!(
            (got.namespace.as_str(), got.name.as_str()),
            ("capo-system", "creds")
        );
    }

    #[test]
    fn cluster_identity_selector_admits_matching_namespaces_only() {
        let id = cluster_identity(Some(serde_json::json!({
            "matchLabels": {"tenant": "blue"},
            "matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "stage"]}]
        })));
        assert!(admitted_secret(&id, "a", &labels(&[("tenant", "blue"), ("env", "prod")])).is_ok());
        for refused in [
            labels(&[("tenant", "blue"), ("env", "dev")]),
            labels(&[("tenant", "red"), ("env", "prod")]),
            labels(&[]),
        ] {
            match admitted_secret(&id, "team-a", &refused) {
                Err(IdentityError::User { reason, message }) => {
                    assert_eq!(reason, NAMESPACE_NOT_ALLOWED);
                    assert!(
                        message.contains("\"team-a\"") && message.contains("\"shared\""),
                        "{message}"
                    );
                }
                other => panic!("{refused:?} admitted: {other:?}"),
            }
        }
        // An empty selector selects everything, as Kubernetes reads it.
        let all = cluster_identity(Some(serde_json::json!({})));
        assert!(admitted_secret(&all, "a", &labels(&[])).is_ok());
    }

    #[test]
    fn cluster_identity_with_a_broken_selector_is_a_user_error() {
        let id = cluster_identity(Some(serde_json::json!({
            "matchExpressions": [{"key": "env", "operator": "Sometimes", "values": ["x"]}]
        })));
        match admitted_secret(&id, "a", &labels(&[("env", "x")])) {
            Err(IdentityError::User { reason, .. }) => assert_eq!(reason, "InvalidIdentity"),
            other => panic!("{other:?}"),
        }
    }
}
