//! Leader election request shapes: create, renew, takeover only after expiry
//! on the candidate's own clock, conflicts, release.

use crate::apiserver;

use std::time::{Duration, Instant};

use apiserver::{pair, status_error};
use serde_json::{json, Value};

use stackhook::kubernetes::leader::{Attempt, LeaderElector, LeaseSettings};

const LEASE_PATH: &str =
    "/apis/coordination.k8s.io/v1/namespaces/stackhook-system/leases/stackhook-controllers";
const LEASES_PATH: &str = "/apis/coordination.k8s.io/v1/namespaces/stackhook-system/leases";

fn settings() -> LeaseSettings {
    LeaseSettings {
        namespace: "stackhook-system".into(),
        name: "stackhook-controllers".into(),
        identity: "pod-a_1".into(),
        lease_duration: Duration::from_secs(15),
        renew_deadline: Duration::from_secs(10),
        retry_period: Duration::from_secs(2),
    }
}

fn lease(holder: &str, rv: &str, renew: &str, transitions: i32) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": "stackhook-controllers", "namespace": "stackhook-system", "resourceVersion": rv},
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-01-01T00:00:00.000000Z",
            "renewTime": renew,
            "leaseTransitions": transitions
        }
    })
}

#[tokio::test]
async fn creates_the_lease_when_absent() {
    let (client, mut api) = pair();
    let mut e = LeaderElector::new(client, settings());
    let task = tokio::spawn(async move { e.try_acquire_or_renew(Instant::now()).await });
    api.expect("GET", LEASE_PATH, 404, status_error(404, "NotFound"))
        .await;
    let create = api
        .answer(201, lease("pod-a_1", "1", "2026-01-01T00:00:00.000000Z", 0))
        .await;
    assert_eq!(
        (create.method.as_str(), create.path()),
        ("POST", LEASES_PATH)
    );
    let spec = &create.body["spec"];
    assert_eq!(create.body["metadata"]["name"], "stackhook-controllers");
    assert_eq!(spec["holderIdentity"], "pod-a_1");
    assert_eq!(spec["leaseDurationSeconds"], 15);
    assert_eq!(spec["leaseTransitions"], 0);
    assert!(
        spec["acquireTime"].is_string() && spec["renewTime"].is_string(),
        "{spec}"
    );
    assert_eq!(task.await.unwrap().unwrap(), Attempt::Leading);
}

#[tokio::test]
async fn lost_create_race_is_a_conflict() {
    let (client, mut api) = pair();
    let mut e = LeaderElector::new(client, settings());
    let task = tokio::spawn(async move { e.try_acquire_or_renew(Instant::now()).await });
    api.expect("GET", LEASE_PATH, 404, status_error(404, "NotFound"))
        .await;
    api.expect("POST", LEASES_PATH, 409, status_error(409, "AlreadyExists"))
        .await;
    assert_eq!(task.await.unwrap().unwrap(), Attempt::Conflict);
}

#[tokio::test]
async fn holder_renews_keeping_acquire_time_and_transitions() {
    let (client, mut api) = pair();
    let mut e = LeaderElector::new(client, settings());
    let task = tokio::spawn(async move { e.try_acquire_or_renew(Instant::now()).await });
    let old_renew = "2026-01-01T00:00:05.000000Z";
    api.expect("GET", LEASE_PATH, 200, lease("pod-a_1", "5", old_renew, 3))
        .await;
    let put = api
        .answer(200, lease("pod-a_1", "6", "2026-01-01T00:00:07.000000Z", 3))
        .await;
    assert_eq!((put.method.as_str(), put.path()), ("PUT", LEASE_PATH));
    assert_eq!(
        put.body["metadata"]["resourceVersion"], "5",
        "guarded by the version read"
    );
    let spec = &put.body["spec"];
    assert_eq!(spec["holderIdentity"], "pod-a_1");
    assert_eq!(spec["leaseTransitions"], 3);
    assert_eq!(spec["acquireTime"], "2026-01-01T00:00:00.000000Z");
    assert_ne!(spec["renewTime"], old_renew);
    assert_eq!(task.await.unwrap().unwrap(), Attempt::Leading);
}

#[tokio::test]
async fn takeover_only_after_the_lease_expired_on_our_clock() {
    let (client, mut api) = pair();
    let e = LeaderElector::new(client, settings());
    let t0 = Instant::now();
    let other = lease("pod-b_9", "40", "2026-01-01T00:00:05.000000Z", 3);

    // First sight of pod-b's lease: held, no write.
    let task = tokio::spawn(async move {
        let mut e = e;
        let r = e.try_acquire_or_renew(t0).await;
        (e, r)
    });
    api.expect("GET", LEASE_PATH, 200, other.clone()).await;
    let (e, r) = task.await.unwrap();
    assert_eq!(r.unwrap(), Attempt::HeldBy("pod-b_9".into()));

    // pod-b renewed (record changed) 14 s later: the expiry clock restarts.
    let renewed = lease("pod-b_9", "41", "2026-01-01T00:00:19.000000Z", 3);
    let task = tokio::spawn(async move {
        let mut e = e;
        let r = e.try_acquire_or_renew(t0 + Duration::from_secs(14)).await;
        (e, r)
    });
    api.expect("GET", LEASE_PATH, 200, renewed.clone()).await;
    let (e, r) = task.await.unwrap();
    assert_eq!(r.unwrap(), Attempt::HeldBy("pod-b_9".into()));

    // Unchanged for 10 s more (< 15 s since it changed): still held.
    let task = tokio::spawn(async move {
        let mut e = e;
        let r = e.try_acquire_or_renew(t0 + Duration::from_secs(24)).await;
        (e, r)
    });
    api.expect("GET", LEASE_PATH, 200, renewed.clone()).await;
    let (e, r) = task.await.unwrap();
    assert_eq!(r.unwrap(), Attempt::HeldBy("pod-b_9".into()));

    // Unchanged for 16 s: expired, taken over with a transition.
    let task = tokio::spawn(async move {
        let mut e = e;
        let r = e.try_acquire_or_renew(t0 + Duration::from_secs(30)).await;
        (e, r)
    });
    api.expect("GET", LEASE_PATH, 200, renewed).await;
    let put = api
        .answer(
            200,
            lease("pod-a_1", "42", "2026-01-01T00:00:35.000000Z", 4),
        )
        .await;
    assert_eq!((put.method.as_str(), put.path()), ("PUT", LEASE_PATH));
    assert_eq!(put.body["metadata"]["resourceVersion"], "41");
    assert_eq!(put.body["spec"]["holderIdentity"], "pod-a_1");
    assert_eq!(put.body["spec"]["leaseTransitions"], 4);
    assert_ne!(
        put.body["spec"]["acquireTime"],
        "2026-01-01T00:00:00.000000Z"
    );
    let (_e, r) = task.await.unwrap();
    assert_eq!(r.unwrap(), Attempt::Leading);
}

#[tokio::test]
async fn released_lease_is_taken_at_once_and_conflicts_are_reported() {
    let (client, mut api) = pair();
    let mut e = LeaderElector::new(client, settings());
    let task = tokio::spawn(async move { e.try_acquire_or_renew(Instant::now()).await });
    // An empty holder is a released lease: no waiting.
    api.expect(
        "GET",
        LEASE_PATH,
        200,
        lease("", "50", "2026-01-01T00:00:05.000000Z", 7),
    )
    .await;
    let put = api
        .expect("PUT", LEASE_PATH, 409, status_error(409, "Conflict"))
        .await;
    assert_eq!(put.body["spec"]["holderIdentity"], "pod-a_1");
    assert_eq!(put.body["spec"]["leaseTransitions"], 8);
    assert_eq!(task.await.unwrap().unwrap(), Attempt::Conflict);
}

#[tokio::test]
async fn release_clears_the_holder() {
    let (client, mut api) = pair();
    let mut e = LeaderElector::new(client, settings());
    let task = tokio::spawn(async move {
        let r = e.try_acquire_or_renew(Instant::now()).await.unwrap();
        assert_eq!(r, Attempt::Leading);
        e.release().await
    });
    api.expect("GET", LEASE_PATH, 404, status_error(404, "NotFound"))
        .await;
    api.expect(
        "POST",
        LEASES_PATH,
        201,
        lease("pod-a_1", "60", "2026-01-01T00:00:00.000000Z", 0),
    )
    .await;
    let put = api
        .answer(200, lease("", "61", "2026-01-01T00:00:01.000000Z", 0))
        .await;
    assert_eq!((put.method.as_str(), put.path()), ("PUT", LEASE_PATH));
    assert_eq!(put.body["metadata"]["resourceVersion"], "60");
    assert_eq!(put.body["spec"]["holderIdentity"], "");
    assert_eq!(put.body["spec"]["leaseDurationSeconds"], 1);
    assert_eq!(put.body["spec"]["leaseTransitions"], 0);
    task.await.unwrap().unwrap();
}

#[tokio::test]
async fn release_without_holding_sends_nothing() {
    let (client, api) = pair();
    let mut e = LeaderElector::new(client, settings());
    e.release().await.unwrap();
    drop(e);
    api.expect_no_more().await;
}

mod running {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use prometheus_client::metrics::gauge::Gauge;
    use stackhook::kubernetes::leader::{run_elected, stopped};
    use tokio::sync::watch;

    fn fast(retry_ms: u64) -> LeaseSettings {
        LeaseSettings {
            lease_duration: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(3),
            retry_period: Duration::from_millis(retry_ms),
            ..settings()
        }
    }

    type LeadFuture = std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>;

    struct Lead {
        started: Arc<AtomicBool>,
        ended: Arc<AtomicBool>,
    }

    fn lead() -> (Lead, impl FnMut(watch::Receiver<bool>) -> LeadFuture) {
        let started = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicBool::new(false));
        let flags = Lead {
            started: started.clone(),
            ended: ended.clone(),
        };
        let f = move |stop: watch::Receiver<bool>| {
            let (started, ended) = (started.clone(), ended.clone());
            Box::pin(async move {
                started.store(true, Ordering::SeqCst);
                stopped(stop).await;
                ended.store(true, Ordering::SeqCst);
            }) as LeadFuture
        };
        (flags, f)
    }

    struct Elected {
        api: apiserver::ApiServer,
        gauge: Gauge,
        shutdown_tx: watch::Sender<bool>,
        flags: Lead,
        task: tokio::task::JoinHandle<()>,
    }

    /// `run_elected` started against a cluster with no lease, past its creation.
    async fn elected(retry_ms: u64) -> Elected {
        let (client, mut api) = pair();
        let gauge = Gauge::default();
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (flags, f) = lead();
        let task = tokio::spawn(run_elected(
            LeaderElector::new(client, fast(retry_ms)),
            gauge.clone(),
            shutdown_rx,
            f,
        ));
        api.expect("GET", LEASE_PATH, 404, status_error(404, "NotFound"))
            .await;
        api.expect(
            "POST",
            LEASES_PATH,
            201,
            lease("pod-a_1", "1", "2026-01-01T00:00:00.000000Z", 0),
        )
        .await;
        Elected {
            api,
            gauge,
            shutdown_tx,
            flags,
            task,
        }
    }

    #[tokio::test]
    async fn controllers_stop_when_the_lease_is_taken_over() {
        let Elected {
            mut api,
            gauge,
            shutdown_tx,
            flags,
            task,
        } = elected(50).await;
        // The renewal finds another holder (e.g. after a long pause of this process).
        api.expect(
            "GET",
            LEASE_PATH,
            200,
            lease("pod-b_9", "9", "2026-01-01T00:00:30.000000Z", 1),
        )
        .await;
        // Back to campaigning: the next read, answered while controllers are stopped.
        api.expect(
            "GET",
            LEASE_PATH,
            200,
            lease("pod-b_9", "9", "2026-01-01T00:00:30.000000Z", 1),
        )
        .await;
        assert!(flags.started.load(Ordering::SeqCst));
        assert!(
            flags.ended.load(Ordering::SeqCst),
            "controllers stopped on loss"
        );
        assert_eq!(gauge.get(), 0);
        shutdown_tx.send(true).unwrap();
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("stops on shutdown")
            .unwrap();
        // Not the holder: nothing to release.
        api.expect_no_more().await;
    }

    #[tokio::test]
    async fn shutdown_stops_controllers_then_releases() {
        let Elected {
            mut api,
            gauge,
            shutdown_tx,
            flags,
            task,
        } = elected(1000).await;
        let deadline = Instant::now() + Duration::from_secs(5);
        while !(flags.started.load(Ordering::SeqCst) && gauge.get() == 1) {
            assert!(Instant::now() < deadline, "controllers did not start");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown_tx.send(true).unwrap();
        let put = api
            .expect(
                "PUT",
                LEASE_PATH,
                200,
                lease("", "2", "2026-01-01T00:00:01.000000Z", 0),
            )
            .await;
        assert!(
            flags.ended.load(Ordering::SeqCst),
            "controllers stopped before the release"
        );
        assert_eq!(put.body["spec"]["holderIdentity"], "");
        assert_eq!(put.body["metadata"]["resourceVersion"], "1");
        tokio::time::timeout(Duration::from_secs(5), task)
            .await
            .expect("returns after releasing")
            .unwrap();
        assert_eq!(gauge.get(), 0);
        api.expect_no_more().await;
    }
}
