//! Arbitrary bytes as the identityRef Secret the API server returns (JSON, `data` in
//! base64): reading the Secret, the clouds.yaml in it and its CA bundle must return
//! every problem as an error, never panic or hang, and `Debug` of what was read must
//! not depend on the clouds.yaml (which holds the credentials).
#![no_main]

use std::sync::OnceLock;

use k8s_openapi::api::core::v1::Secret;
use libfuzzer_sys::fuzz_target;
use secrecy::ExposeSecret;
use stackhook::kubernetes::identity::identity_from_secret;
use stackhook::infra::api::types::OpenStackIdentityReference;
use stackhook::infra::api::{OpenStackCluster, OpenStackClusterSpec};
use stackhook::infra::seam::IdentitySecret;
use stackhook_openstack::{CloudConfig, Session};

fn cluster() -> &'static OpenStackCluster {
    static CLUSTER: OnceLock<OpenStackCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        OpenStackCluster::new(
            "c1",
            OpenStackClusterSpec {
                identity_ref: OpenStackIdentityReference {
                    name: "cloud-creds".into(),
                    cloud_name: "openstack".into(),
                    region: Some("RegionOne".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(secret) = serde_json::from_slice::<Secret>(data) else {
        return;
    };
    let Ok(identity) = identity_from_secret(&secret, cluster()) else {
        return;
    };
    let blank = IdentitySecret {
        clouds_yaml: Vec::new().into(),
        ..identity.clone()
    };
    assert_eq!(
        format!("{identity:?}"),
        format!("{blank:?}"),
        "Debug shows the clouds.yaml"
    );
    let Ok(config) = CloudConfig::from_clouds_yaml(
        identity.clouds_yaml.expose_secret(),
        &identity.cloud_name,
        identity.region.as_deref(),
    ) else {
        return;
    };
    // Without a CA bundle the session would read the system's roots on every run.
    if let Some(pem) = identity.cacert.as_deref() {
        let _ = Session::new(config, Some(pem));
    }
});
