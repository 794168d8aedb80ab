//! Leader election on a `coordination.k8s.io/v1` Lease, with client-go's
//! semantics: the holder renews every retry period and steps down when no
//! renewal succeeded within the renew deadline; a candidate takes over only
//! after the record has not changed for a full lease duration *as observed on
//! its own clock* (so clock skew between nodes does not shorten leases); every
//! write is a resourceVersion-guarded update, so two candidates never both win.
//!
//! Written here rather than taken from a crate: `kube-lease-manager` (the one
//! kept up with kube 5) has lease duration and grace only, no renew deadline or
//! retry period, and writes with server-side apply, so its records and timing
//! would not match client-go's `LeaseLock` that operators and tools expect.
//! kubert's `LeaseManager` is tied to an older kube.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::watch;

/// Lease name, namespace, identity and timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseSettings {
    pub namespace: String,
    pub name: String,
    /// Unique per process: `<host>_<random>`.
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

/// The timing does not allow a safe hand-over.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LeaseSettingsError {
    #[error("lease duration ({0:?}) must be longer than the renew deadline ({1:?})")]
    DurationNotAboveDeadline(Duration, Duration),
    #[error("renew deadline ({0:?}) must be longer than 1.2 × the retry period ({1:?})")]
    DeadlineTooShort(Duration, Duration),
    #[error("retry period must not be zero")]
    ZeroRetry,
    #[error("lease duration ({0:?}) does not fit the Lease's 32-bit leaseDurationSeconds")]
    DurationTooLong(Duration),
}

impl LeaseSettings {
    /// client-go's checks: a holder must give up (renew deadline) before
    /// others may take over (lease duration), with room for a jittered retry.
    pub fn validate(&self) -> Result<(), LeaseSettingsError> {
        if self.retry_period.is_zero() {
            return Err(LeaseSettingsError::ZeroRetry);
        }
        // The bound also keeps the `Instant` and jitter arithmetic from overflowing.
        if self.lease_duration.as_secs() > i32::MAX as u64 {
            return Err(LeaseSettingsError::DurationTooLong(self.lease_duration));
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(LeaseSettingsError::DurationNotAboveDeadline(
                self.lease_duration,
                self.renew_deadline,
            ));
        }
        if self.renew_deadline.as_secs_f64() <= 1.2 * self.retry_period.as_secs_f64() {
            return Err(LeaseSettingsError::DeadlineTooShort(
                self.renew_deadline,
                self.retry_period,
            ));
        }
        Ok(())
    }
}

/// The Lease of one shard: `id` alone without a watch-filter, else `<id>-<filter>`
/// (lowercased, `_` and `.` as `-`, as a Lease name allows), so managers of different
/// shards elect their leaders independently. When that spelling changed the
/// filter, a short hash of the filter as given keeps `Shard_A` and `shard-a` apart.
pub fn lease_name(id: &str, watch_filter: Option<&str>) -> String {
    let Some(filter) = watch_filter.filter(|f| !f.is_empty()) else {
        return id.to_string();
    };
    let spelled: String = filter
        .chars()
        .map(|c| match c {
            '_' | '.' => '-',
            c => c.to_ascii_lowercase(),
        })
        .collect();
    if spelled == filter {
        format!("{id}-{spelled}")
    } else {
        // FNV-1a: stable across builds and platforms, unlike std's hasher.
        let hash = filter.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        format!("{id}-{spelled}-{:08x}", hash as u32)
    }
}

/// The host part of identities and Event reporters: the pod name where set.
pub fn default_identity_host() -> Option<String> {
    ["POD_NAME", "HOSTNAME"]
        .iter()
        .filter_map(|k| std::env::var(k).ok())
        .chain(
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string()),
        )
        .find(|h| !h.is_empty())
}

/// `<host>_<pid+time>`: unique even when two processes share a hostname.
pub fn default_identity() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let host = default_identity_host().unwrap_or_else(|| "stackhook".to_string());
    format!(
        "{host}_{:x}{:x}",
        std::process::id(),
        nanos & 0xffff_ffff_ffff
    )
}

/// Result of one acquire-or-renew attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Attempt {
    /// This process holds the lease (newly or still).
    Leading,
    /// Someone else holds an unexpired lease.
    HeldBy(String),
    /// The record changed between read and write; try again next period.
    Conflict,
}

struct Observed {
    lease: Lease,
    /// Local time at which the record was last seen to change.
    at: Instant,
}

/// One candidate for one Lease.
pub struct LeaderElector {
    api: Api<Lease>,
    settings: LeaseSettings,
    observed: Option<Observed>,
}

fn record(lease: &Lease) -> Option<&LeaseSpec> {
    lease.spec.as_ref()
}

fn is_conflict(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 409)
}

impl LeaderElector {
    pub fn new(client: Client, settings: LeaseSettings) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &settings.namespace),
            settings,
            observed: None,
        }
    }

    pub fn settings(&self) -> &LeaseSettings {
        &self.settings
    }

    fn observe(&mut self, lease: Lease, now: Instant) {
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| record(&o.lease) != record(&lease));
        let at = match (&self.observed, changed) {
            (Some(o), false) => o.at,
            _ => now,
        };
        self.observed = Some(Observed { lease, at });
    }

    fn duration_secs(&self) -> i32 {
        i32::try_from(self.settings.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// Reads the Lease and creates, renews or takes it over as allowed; `now`
    /// is the local clock used for expiry.
    pub async fn try_acquire_or_renew(&mut self, now: Instant) -> Result<Attempt, kube::Error> {
        let name = self.settings.name.clone();
        let me = self.settings.identity.clone();
        let wall = MicroTime(Timestamp::now());
        let Some(current) = self.api.get_opt(&name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me),
                    lease_duration_seconds: Some(self.duration_secs()),
                    acquire_time: Some(wall.clone()),
                    renew_time: Some(wall),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(created) => {
                    self.observe(created, now);
                    Ok(Attempt::Leading)
                }
                Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
                Err(e) => Err(e),
            };
        };
        self.observe(current.clone(), now);
        let spec = current.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        if let Some(other) = holder.as_ref().filter(|h| **h != me) {
            let held_for = spec
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .map(Duration::from_secs)
                .unwrap_or(self.settings.lease_duration);
            let seen_at = self.observed.as_ref().map_or(now, |o| o.at);
            if now < seen_at + held_for {
                return Ok(Attempt::HeldBy(other.clone()));
            }
        }
        let mut next = spec.clone();
        next.lease_duration_seconds = Some(self.duration_secs());
        next.renew_time = Some(wall.clone());
        if holder.as_deref() != Some(me.as_str()) {
            next.holder_identity = Some(me);
            next.acquire_time = Some(wall);
            next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        let mut lease = current;
        lease.spec = Some(next);
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(written) => {
                self.observe(written, now);
                Ok(Attempt::Leading)
            }
            Err(e) if is_conflict(&e) => Ok(Attempt::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Gives the lease up so a successor need not wait for it to expire
    /// (client-go's ReleaseOnCancel): empty holder, one-second duration.
    pub async fn release(&mut self) -> Result<(), kube::Error> {
        let Some(observed) = self.observed.take() else {
            return Ok(());
        };
        let mut lease = observed.lease;
        let mut spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(());
        }
        let wall = MicroTime(Timestamp::now());
        spec.holder_identity = Some(String::new());
        spec.lease_duration_seconds = Some(1);
        spec.acquire_time = Some(wall.clone());
        spec.renew_time = Some(wall);
        lease.spec = Some(spec);
        self.api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        Ok(())
    }
}

/// A little spread so that replicas started together do not retry in step.
fn jittered(period: Duration) -> Duration {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    period + period.mul_f64(f64::from(nanos % 1000) / 5000.0)
}

/// Resolves once the shutdown flag is set (or its sender is gone).
pub async fn stopped(mut rx: watch::Receiver<bool>) {
    while !*rx.borrow_and_update() {
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// Campaigns for the lease until `shutdown`; while leading runs `lead` with a
/// stop flag that is raised when the lease is lost or at shutdown. On
/// shutdown the leading task is awaited (up to the renew deadline) and the
/// lease is released.
pub async fn run_elected<F, Fut>(
    mut elector: LeaderElector,
    leader_gauge: Gauge,
    shutdown: watch::Receiver<bool>,
    mut lead: F,
) where
    F: FnMut(watch::Receiver<bool>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let s = elector.settings().clone();
    tracing::info!(lease = %format!("{}/{}", s.namespace, s.name), identity = %s.identity, "campaigning for the controller lease");
    let mut last_holder: Option<String> = None;
    loop {
        // Candidate.
        loop {
            if *shutdown.borrow() {
                return;
            }
            match elector.try_acquire_or_renew(Instant::now()).await {
                Ok(Attempt::Leading) => break,
                Ok(Attempt::HeldBy(h)) => {
                    if last_holder.as_ref() != Some(&h) {
                        tracing::info!(holder = %h, "lease held by another replica; controllers wait");
                        last_holder = Some(h);
                    }
                }
                Ok(Attempt::Conflict) => {}
                Err(e) => tracing::warn!(error = %e, "reading or writing the lease failed"),
            }
            tokio::select! {
                _ = tokio::time::sleep(jittered(s.retry_period)) => {}
                _ = stopped(shutdown.clone()) => return,
            }
        }
        tracing::info!(identity = %s.identity, "acquired the lease; starting controllers");
        last_holder = None;
        leader_gauge.set(1);
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(lead(stop_rx));
        let mut last_renew = Instant::now();
        let shutting_down = loop {
            tokio::select! {
                _ = tokio::time::sleep(s.retry_period) => {}
                _ = stopped(shutdown.clone()) => break true,
            }
            let now = Instant::now();
            match elector.try_acquire_or_renew(now).await {
                Ok(Attempt::Leading) => last_renew = now,
                Ok(Attempt::HeldBy(h)) => {
                    tracing::warn!(holder = %h, "lease taken over by another replica");
                    break false;
                }
                Ok(Attempt::Conflict) => {}
                Err(e) => tracing::warn!(error = %e, "renewing the lease failed"),
            }
            if now.duration_since(last_renew) >= s.renew_deadline {
                tracing::warn!(deadline = ?s.renew_deadline, "lease not renewed in time; stepping down");
                break false;
            }
        };
        let _ = stop_tx.send(true);
        let abort = task.abort_handle();
        if tokio::time::timeout(s.renew_deadline, task).await.is_err() {
            tracing::warn!("controllers did not stop in time; cancelling them");
            abort.abort();
        }
        leader_gauge.set(0);
        if shutting_down {
            match elector.release().await {
                Ok(()) => tracing::info!("lease released"),
                Err(e) => tracing::warn!(error = %e, "releasing the lease failed"),
            }
            return;
        }
        tracing::info!("controllers stopped after losing the lease; campaigning again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_watch_filter_has_its_own_lease() {
        let id = "stackhook-controllers";
        assert_eq!(lease_name(id, None), id);
        assert_eq!(lease_name(id, Some("")), id);
        assert_eq!(
            lease_name(id, Some("shard-a")),
            "stackhook-controllers-shard-a"
        );
        let names: std::collections::BTreeSet<String> =
            ["shard-a", "shard-b", "Shard-A", "shard_a", "shard.a", "7"]
                .iter()
                .map(|f| lease_name(id, Some(f)))
                .collect();
        assert_eq!(names.len(), 6, "{names:?}");
        assert!(!names.contains(id));
        // Every one is a valid Lease (DNS subdomain) name.
        let dns = regex::Regex::new(r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$").unwrap();
        for n in &names {
            assert!(dns.is_match(n) && n.len() <= 253, "{n}");
        }
        // Stable: a restarted manager finds its shard's Lease again.
        assert_eq!(
            lease_name(id, Some("Shard_A")),
            lease_name(id, Some("Shard_A"))
        );
    }

    fn settings(d: u64, r: u64, p: u64) -> LeaseSettings {
        LeaseSettings {
            namespace: "ns".into(),
            name: "l".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(d),
            renew_deadline: Duration::from_secs(r),
            retry_period: Duration::from_secs(p),
        }
    }

    #[test]
    fn timing_is_checked_like_client_go() {
        assert_eq!(settings(15, 10, 2).validate(), Ok(()));
        assert!(matches!(
            settings(10, 10, 2).validate(),
            Err(LeaseSettingsError::DurationNotAboveDeadline(..))
        ));
        assert!(matches!(
            settings(15, 2, 2).validate(),
            Err(LeaseSettingsError::DeadlineTooShort(..))
        ));
        assert_eq!(
            settings(15, 10, 0).validate(),
            Err(LeaseSettingsError::ZeroRetry)
        );
        assert!(matches!(
            settings(u64::MAX, 10, 2).validate(),
            Err(LeaseSettingsError::DurationTooLong(..))
        ));
        assert_eq!(settings(i32::MAX as u64, 10, 2).validate(), Ok(()));
    }

    #[test]
    fn identities_differ_between_calls() {
        let a = default_identity();
        std::thread::sleep(Duration::from_millis(2));
        assert_ne!(a, default_identity());
    }

    #[tokio::test]
    async fn stopped_resolves_on_flag_or_dropped_sender() {
        let (tx, rx) = watch::channel(false);
        let waiter = tokio::spawn(stopped(rx));
        tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .unwrap()
            .unwrap();
        let (tx, rx) = watch::channel(false);
        drop(tx);
        tokio::time::timeout(Duration::from_secs(5), stopped(rx))
            .await
            .unwrap();
    }
}
