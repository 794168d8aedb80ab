//! Arbitrary bytes as a clouds.yaml, read for entry `openstack` with and without a
//! region override: reading must return every problem as an error, never panic or hang,
//! and `Debug` of a config that reads must not depend on its password or secret.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stackhook_openstack::config::{AuthMethod, CloudConfig};

fuzz_target!(|data: &[u8]| {
    for region in [None, Some("RegionTwo")] {
        let Ok(config) = CloudConfig::from_clouds_yaml(data, "openstack", region) else {
            continue;
        };
        assert!(config.auth_url.ends_with("/v3"), "{}", config.auth_url);
        if region.is_some() {
            assert_eq!(config.region.as_deref(), region);
        }
        let mut other = config.clone();
        match &mut other.auth {
            AuthMethod::Password { password, .. } => *password = "other".into(),
            AuthMethod::ApplicationCredential { secret, .. } => *secret = "other".into(),
        }
        assert_eq!(
            format!("{config:?}"),
            format!("{other:?}"),
            "Debug shows the credential"
        );
    }
});
