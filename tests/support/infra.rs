//! Pieces shared by the tests that drive the OpenStackCluster cloud half against
//! the loopback cloud.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use stackhook::infra::api::OpenStackClusterStatus;
use stackhook::infra::seam::{SinkError, StatusSink};
use stackhook::openstack::{Clients, CloudConfig};

/// Status writes kept in memory; optionally every pass's first write fails,
/// as a crash between a create and its status write would.
#[derive(Default)]
pub struct MemSink {
    pub saved: Mutex<Option<OpenStackClusterStatus>>,
    pub writes: AtomicUsize,
    pub fail_first: bool,
}

impl StatusSink for MemSink {
    async fn save(&self, status: &OpenStackClusterStatus) -> Result<(), SinkError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_first && n == 0 {
            return Err(SinkError("simulated crash before the status write".into()));
        }
        *self.saved.lock().unwrap() = Some(status.clone());
        Ok(())
    }
}

/// A name no other test process or test in this one uses.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A client of our own for checking what the cloud holds, as the `cloud` member.
pub fn checker(clouds_yaml: &[u8], cloud: &str) -> Clients {
    let config = CloudConfig::from_clouds_yaml(clouds_yaml, cloud, None).unwrap();
    Clients::new(config, None).unwrap()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}
