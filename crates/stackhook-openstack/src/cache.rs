//! Clients per identity Secret, so that every reconcile of a cluster reuses
//! one token instead of asking Keystone again. Keyed by the Secret's
//! namespace, name and resourceVersion plus the cloud name and region: an
//! edited Secret gets a new entry; the old one ages out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::CloudConfig;
use crate::error::OsError;
use crate::Clients;

/// Identifies one set of credentials.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CacheKey {
    pub namespace: String,
    pub name: String,
    pub resource_version: String,
    pub cloud_name: String,
    pub region: Option<String>,
}

/// Unused entries are dropped after this long.
const IDLE: Duration = Duration::from_secs(30 * 60);

/// A small map of clients; entries are cheap `Arc` clones.
#[derive(Default)]
pub struct ClientCache {
    entries: Mutex<HashMap<CacheKey, (Arc<Clients>, Instant)>>,
}

impl ClientCache {
    /// An empty cache; clients are built on first use.
    pub fn new() -> Self {
        Self::default()
    }

    /// The cached clients for `key`, or new ones from `clouds.yaml`.
    pub fn get_or_create(
        &self,
        key: CacheKey,
        clouds_yaml: &[u8],
        cacert: Option<&[u8]>,
    ) -> Result<Arc<Clients>, OsError> {
        let now = Instant::now();
        let mut map = self
            .entries
            .lock()
            .map_err(|_| OsError::Config("client cache lock poisoned".into()))?;
        map.retain(|_, (_, used)| now.duration_since(*used) < IDLE);
        if let Some((clients, used)) = map.get_mut(&key) {
            *used = now;
            return Ok(clients.clone());
        }
        let config =
            CloudConfig::from_clouds_yaml(clouds_yaml, &key.cloud_name, key.region.as_deref())?;
        let clients = Arc::new(Clients::new(config, cacert)?);
        map.insert(key, (clients.clone(), now));
        Ok(clients)
    }

    /// How many credentials have clients, for tests of reuse and expiry.
    pub fn len(&self) -> usize {
        self.entries.lock().map(|m| m.len()).unwrap_or(0)
    }

    /// Whether no client is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const YAML: &[u8] = b"clouds: {c: {auth: {auth_url: 'http://127.0.0.1:1', username: u, password: p, project_name: x}}}";

    fn key(rv: &str) -> CacheKey {
        CacheKey {
            namespace: "ns".into(),
            name: "creds".into(),
            resource_version: rv.into(),
            cloud_name: "c".into(),
            region: None,
        }
    }

    #[test]
    fn reuses_until_the_secret_changes() {
        let cache = ClientCache::new();
        let a = cache.get_or_create(key("1"), YAML, None).unwrap();
        let b = cache.get_or_create(key("1"), YAML, None).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = cache.get_or_create(key("2"), YAML, None).unwrap();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(cache.len(), 2);
        assert!(cache
            .get_or_create(
                CacheKey {
                    cloud_name: "nope".into(),
                    ..key("3")
                },
                YAML,
                None
            )
            .is_err());
    }
}
