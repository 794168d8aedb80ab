//! The in-process OpenStack infrastructure controllers (kube-rs): the
//! Kubernetes half of CAPO's OpenStackCluster controller, its settings, the
//! Kubernetes client and leader election. The process module starts them; they
//! publish into the store the hook registry reads.

pub mod backoff;
pub mod cache;
pub mod capo_server;
pub mod cloud;
pub mod cluster;
pub mod converged;
pub mod driver;
pub mod image;
pub mod machine;
pub mod status;
pub mod template;

use std::path::PathBuf;
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::Client;

use crate::config::ServeArgs;

/// Settings of the controllers, from the `serve` flags.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerConfig {
    pub kubeconfig: Option<PathBuf>,
    /// Watch one namespace instead of all.
    pub watch_namespace: Option<String>,
    /// Reconcile only objects with this `cluster.x-k8s.io/watch-filter` label value.
    pub watch_filter: Option<String>,
    pub leader_election: bool,
    /// Namespace of the Lease; the client's default namespace when unset
    /// (the pod's own namespace in-cluster).
    pub leader_election_namespace: Option<String>,
    pub leader_election_id: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
    /// Reconciles of different objects running at once.
    pub concurrency: u16,
    /// Objects per list request of the watches.
    pub watch_page_size: u32,
    /// Published in `status.extensions.platform.ntp.server`.
    pub ntp_server: Option<String>,
    /// Published in `status.extensions.platform.management.vip`.
    pub management_vip: Option<String>,
}

impl ControllerConfig {
    /// `None` unless `--controllers` was given.
    pub fn from_args(args: &ServeArgs) -> Option<ControllerConfig> {
        if !args.controllers {
            return None;
        }
        Some(ControllerConfig {
            kubeconfig: args.kubeconfig.clone(),
            watch_namespace: args.watch_namespace.clone().filter(|n| !n.is_empty()),
            watch_filter: args.watch_filter.clone().filter(|f| !f.is_empty()),
            leader_election: args.leader_election,
            leader_election_namespace: args
                .leader_election_namespace
                .clone()
                .filter(|n| !n.is_empty()),
            leader_election_id: args.leader_election_id.clone(),
            lease_duration: Duration::from_secs(args.leader_election_lease_duration_seconds),
            renew_deadline: Duration::from_secs(args.leader_election_renew_deadline_seconds),
            retry_period: Duration::from_secs(args.leader_election_retry_period_seconds),
            concurrency: args.controller_concurrency,
            watch_page_size: args.watch_page_size,
            ntp_server: args.ntp_server.clone().filter(|s| !s.is_empty()),
            management_vip: args.management_vip.clone().filter(|s| !s.is_empty()),
        })
    }
}

/// Why the controllers did not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("no kubeconfig or in-cluster config found: {0}")]
    NoConfig(String),
    #[error("reading kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] kube::Error),
    #[error("leader election: {0}")]
    Lease(#[from] crate::kubernetes::leader::LeaseSettingsError),
}

/// The Kubernetes client: `--kubeconfig`, else `$KUBECONFIG` or
/// `~/.kube/config`, else the in-cluster service account.
pub async fn client(cfg: &ControllerConfig) -> Result<Client, StartError> {
    client_from(cfg.kubeconfig.as_ref()).await
}

/// A client from this kubeconfig, else the environment's (in-cluster or `~/.kube`).
pub async fn client_from(kubeconfig: Option<&PathBuf>) -> Result<Client, StartError> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| StartError::Kubeconfig {
                path: path.clone(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|source| StartError::Kubeconfig {
                    path: path.clone(),
                    source,
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| StartError::NoConfig(e.to_string()))?,
    };
    Client::try_from(config).map_err(StartError::Client)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn cfg(args: &[&str]) -> Option<ControllerConfig> {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(args.iter().copied()))
            .expect("flags parse");
        ControllerConfig::from_args(&cli.serve)
    }

    #[test]
    fn controllers_are_opt_in_with_election_on_by_default() {
        assert_eq!(cfg(&[]), None);
        let c = cfg(&["--controllers"]).unwrap();
        assert!(c.leader_election);
        assert_eq!(c.leader_election_id, "stackhook-controllers");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert_eq!(c.concurrency, 10);
        assert_eq!(c.watch_page_size, 50);
        assert_eq!(c.watch_namespace, None);
        assert_eq!(c.watch_filter, None);
    }

    #[test]
    fn watch_filter_is_a_label_value() {
        let c = cfg(&["--controllers", "--watch-filter", "shard-a"]).unwrap();
        assert_eq!(c.watch_filter.as_deref(), Some("shard-a"));
        assert_eq!(
            cfg(&["--controllers", "--watch-filter", ""])
                .unwrap()
                .watch_filter,
            None
        );
        for bad in ["-a", "a b", "a/b", &"x".repeat(64)] {
            let r = Cli::try_parse_from(["serve", "--controllers", "--watch-filter", bad]);
            assert!(r.is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn flags_reach_the_config() {
        let c = cfg(&[
            "--controllers",
            "--leader-election=false",
            "--watch-namespace",
            "capi-clusters",
            "--leader-election-namespace",
            "stackhook-system",
            "--leader-election-id",
            "lease-x",
            "--controller-concurrency",
            "3",
            "--watch-page-size",
            "25",
            "--ntp-server",
            "10.0.0.123",
            "--management-vip",
            "10.0.0.5",
            "--kubeconfig",
            "/tmp/kc",
        ])
        .unwrap();
        assert!(!c.leader_election);
        assert_eq!(c.watch_namespace.as_deref(), Some("capi-clusters"));
        assert_eq!(
            c.leader_election_namespace.as_deref(),
            Some("stackhook-system")
        );
        assert_eq!(c.leader_election_id, "lease-x");
        assert_eq!(c.concurrency, 3);
        assert_eq!(c.watch_page_size, 25);
        assert_eq!(c.ntp_server.as_deref(), Some("10.0.0.123"));
        assert_eq!(c.management_vip.as_deref(), Some("10.0.0.5"));
        assert_eq!(c.kubeconfig, Some(PathBuf::from("/tmp/kc")));
        let zero = Cli::try_parse_from(["serve", "--controllers", "--watch-page-size", "0"]);
        assert!(zero.is_err(), "a page of no objects is refused");
        assert!(
            cfg(&["--controllers", "--leader-election"])
                .unwrap()
                .leader_election
        );
    }
}
