//! Driving the OpenStackMachine cloud half against the loopback cloud as the
//! controller would: passes until converged or deleted, status kept in memory
//! between them, and the clean-up of what a failed test left.

#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use stackhook::infra::api::{OpenStackMachine, OpenStackMachineStatus};
use stackhook::infra::machine::OpenStackMachineInfra;
use stackhook::infra::seam::{
    DeleteProgress, IdentitySecret, InfraError, MachineInfra, MachineScope, SinkError, StatusSink,
};
use stackhook_openstack::compute::Compute;
use stackhook_openstack::networking::{self as net, Networking};
use stackhook_openstack::Clients;

/// The longest pause between passes: the controllers wait 2–5 s for the cloud;
/// a test looks again sooner.
const PASS_PAUSE: Duration = Duration::from_secs(1);

/// Machine status writes kept in memory; optionally every pass's first write fails,
/// as a crash between a create and its status write would.
#[derive(Default)]
pub struct MachineSink {
    pub saved: Mutex<Option<OpenStackMachineStatus>>,
    pub writes: AtomicUsize,
    pub fail_first: bool,
}

impl StatusSink<OpenStackMachineStatus> for MachineSink {
    async fn save(&self, status: &OpenStackMachineStatus) -> Result<(), SinkError> {
        let n = self.writes.fetch_add(1, Ordering::SeqCst);
        if self.fail_first && n == 0 {
            return Err(SinkError("simulated crash before the status write".into()));
        }
        *self.saved.lock().unwrap() = Some(status.clone());
        Ok(())
    }
}

/// What converging ended with: passes taken and the last providerID, or the first
/// user error as `(reason, message)`.
pub type Converged = Result<(usize, Option<String>), (String, String)>;

/// Passes as the controller runs them (status kept between passes, also when a
/// status write failed) until one asks for no requeue or a user error stops them.
pub async fn try_converge_machine(
    infra: &OpenStackMachineInfra,
    scope: &MachineScope,
    osm: &mut OpenStackMachine,
    id: &IdentitySecret,
    fail_first: bool,
) -> Converged {
    let mut provider = None;
    for pass in 1..=60 {
        let sink = MachineSink {
            fail_first,
            ..Default::default()
        };
        match infra.reconcile(scope, osm, id, &sink).await {
            Ok(outcome) => {
                osm.status = Some(outcome.status);
                provider = outcome.provider_id.or(provider);
                match outcome.requeue_after {
                    None => return Ok((pass, provider)),
                    Some(after) => tokio::time::sleep(after.min(PASS_PAUSE)).await,
                }
            }
            Err(InfraError::Sink(_)) | Err(InfraError::Transient { .. }) => {
                if let Some(s) = sink.saved.lock().unwrap().take() {
                    osm.status = Some(s);
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
            Err(InfraError::User { reason, message }) => {
                if let Some(s) = sink.saved.lock().unwrap().take() {
                    osm.status = Some(s);
                }
                return Err((reason, message));
            }
        }
    }
    panic!("machine did not converge");
}

/// [`try_converge_machine`] that expects no user error.
pub async fn converge_machine(
    infra: &OpenStackMachineInfra,
    scope: &MachineScope,
    osm: &mut OpenStackMachine,
    id: &IdentitySecret,
    fail_first: bool,
) -> (usize, Option<String>) {
    try_converge_machine(infra, scope, osm, id, fail_first)
        .await
        .unwrap_or_else(|(reason, message)| panic!("{reason}: {message}"))
}

/// Delete passes until done; the number of passes.
pub async fn delete_machine(
    infra: &OpenStackMachineInfra,
    scope: &MachineScope,
    osm: &mut OpenStackMachine,
    id: &IdentitySecret,
) -> usize {
    for pass in 1..=80 {
        let sink = MachineSink::default();
        match infra.delete(scope, osm, id, &sink).await {
            Ok(DeleteProgress::Done) => return pass,
            Ok(DeleteProgress::Requeue { after, .. }) => {
                if let Some(s) = sink.saved.lock().unwrap().take() {
                    osm.status = Some(s);
                }
                tokio::time::sleep(after.min(PASS_PAUSE)).await
            }
            Err(InfraError::Transient { .. }) => {
                tokio::time::sleep(Duration::from_millis(300)).await
            }
            Err(e) => panic!("delete pass {pass}: {e}"),
        }
    }
    panic!("machine deletion did not finish");
}

pub async fn servers_named(c: &Clients, name: &str) -> usize {
    c.compute
        .servers_named(&format!("^{name}$"))
        .await
        .expect("servers")
        .into_iter()
        .filter(|s| s.name == name)
        .count()
}

pub async fn ports_named(c: &Clients, name: &str) -> Vec<net::Port> {
    c.network
        .list(&[("name", name.to_string())])
        .await
        .expect("ports")
}

/// Deletes the servers a failed test left and their first ports (`<server>-0`).
pub async fn remove_leftovers(member: &Clients, server_names: &[&str]) {
    for name in server_names {
        for s in member
            .compute
            .servers_named(&format!("^{name}$"))
            .await
            .unwrap_or_default()
        {
            let _ = member.compute.delete_server(&s.id).await;
        }
    }
    for name in server_names {
        for _ in 0..30 {
            if servers_named(member, name).await == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        for p in ports_named(member, &format!("{name}-0")).await {
            let _ = member.network.delete::<net::Port>(&p.id).await;
        }
    }
}
