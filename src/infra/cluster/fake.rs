//! An in-memory OpenStack behind the service traits, for fault tests of the
//! cluster reconcile.
//!
//! Resources are JSON objects in collections named like the APIs'
//! (`networks`, `security-groups`, `loadbalancers`, `servers`…). The answers
//! follow the real services where the reconcile depends on them: 404 for a
//! missing ID, 409 for a duplicate security group rule, for deleting what is
//! still in use and for writing to a load balancer in a `PENDING_*` state.
//! Load balancers and servers can be made to stay `PENDING_*`/`BUILD` for a
//! number of reads. Faults are injected per call: an error status instead of
//! the call, or the call done and its answer lost. Security group rules may
//! be created in bulk (one group per request, all or nothing) and a load
//! balancer fully populated (listeners with their default pool and monitor
//! nested), with the refusals of Neutron and Octavia that matter here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde::de::DeserializeOwned;
use serde_json::{json, Map, Value};
use stackhook_openstack::blockstorage::{
    BlockStorage, Volume, VolumeCreate, VolumeFilter, VolumeType,
};
use stackhook_openstack::compute::{
    server_group_body, AvailabilityZone, Compute, Flavor, Microversion, Server, ServerGroup,
    ServerGroupPolicy, ServerGroupRules, SCHEDULER_HINTS_KEY,
};
use stackhook_openstack::config::{AuthMethod, NameOrId};
use stackhook_openstack::identity::Identity;
use stackhook_openstack::image::{Image, Images};
use stackhook_openstack::loadbalancing::{LoadBalancing, Member, OctaviaResource};
use stackhook_openstack::networking::{Networking, NeutronResource, Query, SecurityGroupRule};
use stackhook_openstack::session::{TokenDomain, TokenProject};
use stackhook_openstack::{CloudClients, CloudConfig, OsError};

/// What a call does, for matching faults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    List,
    Get,
    Create,
    Update,
    Delete,
    AddTag,
    AddInterface,
    RemoveInterface,
}

impl Op {
    fn is_write(self) -> bool {
        !matches!(self, Op::List | Op::Get)
    }

    fn method(self) -> &'static str {
        match self {
            Op::List | Op::Get => "GET",
            Op::Create => "POST",
            Op::Delete => "DELETE",
            Op::Update | Op::AddTag | Op::AddInterface | Op::RemoveInterface => "PUT",
        }
    }
}

/// The calls a fault counts.
#[derive(Clone, Copy, Debug)]
pub enum Calls {
    /// One operation on one collection.
    Of(Op, &'static str),
    /// Every call that changes something, whatever the collection.
    Writes,
    /// Every call.
    All,
}

impl Calls {
    fn matches(self, op: Op, kind: &str) -> bool {
        match self {
            Calls::Of(o, k) => o == op && k == kind,
            Calls::Writes => op.is_write(),
            Calls::All => true,
        }
    }
}

/// What an injected fault does to the call.
#[derive(Clone, Copy, Debug)]
pub enum Effect {
    /// The service answers with this status and changes nothing.
    Status(u16),
    /// 429 with a `Retry-After`.
    RateLimited(Duration),
    /// The call takes effect, but its answer is lost (a timeout).
    LoseAnswer,
}

/// A fault on the n-th call it counts, or on every one.
#[derive(Clone, Debug)]
pub struct Fault {
    calls: Calls,
    nth: Option<usize>,
    effect: Effect,
    seen: usize,
    fired: usize,
}

impl Fault {
    /// Fires on the `n`-th (1-based) of `calls` made after it was injected.
    pub fn nth(calls: Calls, n: usize, effect: Effect) -> Self {
        Self {
            calls,
            nth: Some(n),
            effect,
            seen: 0,
            fired: 0,
        }
    }

    /// Fires on every one of `calls`.
    pub fn every(calls: Calls, effect: Effect) -> Self {
        Self {
            calls,
            nth: None,
            effect,
            seen: 0,
            fired: 0,
        }
    }
}

/// What a busy object becomes once its reads run out.
#[derive(Clone, Copy, Debug)]
enum Settle {
    Active,
    Gone,
}

#[derive(Default)]
struct State {
    next_id: u64,
    next_ip: u32,
    objects: BTreeMap<&'static str, BTreeMap<String, Value>>,
    /// Object ID → (collection, reads left in the busy state, then).
    busy: BTreeMap<String, (&'static str, usize, Settle)>,
    faults: Vec<Fault>,
    /// The writes that took effect, in order.
    writes: Vec<(Op, &'static str)>,
    /// IDs present before the test started.
    seeded: BTreeSet<String>,
    /// Reads a load balancer stays `PENDING_*` after each change.
    octavia_busy_reads: usize,
    /// Reads a server stays in `BUILD` or being deleted.
    nova_busy_reads: usize,
    /// Reads a volume stays `creating` or `deleting`.
    cinder_busy_reads: usize,
    /// The microversion Nova negotiates (2.96 when unset).
    nova_microversion: Option<Microversion>,
    /// Neutron answers bulk creates as with `allow_bulk = False`.
    no_bulk: bool,
    /// The Octavia provider refuses fully populated creates (501), as OVN
    /// does for round robin or allowed CIDRs.
    no_populated: bool,
}

/// The whole cloud; it is its own client for every service.
pub struct FakeCloud {
    config: CloudConfig,
    state: Mutex<State>,
}

const EXTERNAL_NETWORK: &str = "public";

fn not_found(kind: &str, id: &str) -> OsError {
    http(
        Op::Get,
        kind,
        404,
        &format!("{kind} {id} could not be found"),
        None,
    )
}

fn conflict(op: Op, kind: &str, message: &str) -> OsError {
    http(op, kind, 409, message, None)
}

fn http(op: Op, kind: &str, status: u16, message: &str, retry_after: Option<Duration>) -> OsError {
    OsError::Http {
        service: "fake".into(),
        method: op.method().into(),
        path: format!("/{kind}"),
        status,
        message: message.into(),
        retry_after,
    }
}

/// The fields Octavia takes on a listener, its `default_pool` and that
/// pool's `healthmonitor` inside a fully populated load balancer create
/// (`ListenerSingleCreate`, `PoolSingleCreate`, `HealthMonitorSingleCreate`):
/// no parent IDs, which the nesting gives.
const LISTENER_FIELDS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "protocol",
    "protocol_port",
    "connection_limit",
    "default_pool",
    "default_pool_id",
    "l7policies",
    "insert_headers",
    "timeout_client_data",
    "timeout_member_connect",
    "timeout_member_data",
    "timeout_tcp_inspect",
    "tags",
    "allowed_cidrs",
];
const POOL_FIELDS: &[&str] = &[
    "name",
    "description",
    "admin_state_up",
    "protocol",
    "lb_algorithm",
    "session_persistence",
    "healthmonitor",
    "members",
    "tags",
];
const MONITOR_FIELDS: &[&str] = &[
    "name",
    "type",
    "delay",
    "timeout",
    "max_retries",
    "max_retries_down",
    "http_method",
    "url_path",
    "expected_codes",
    "admin_state_up",
    "tags",
];

/// Octavia's (WSME's) refusals of a nested object: an unknown attribute or
/// a mandatory one missing.
fn check_nested(
    obj: &Value,
    what: &str,
    allowed: &[&str],
    mandatory: &[&str],
) -> Result<(), OsError> {
    let bad = |m: String| http(Op::Create, "loadbalancers", 400, &m, None);
    let Value::Object(fields) = obj else {
        return Err(bad(format!("{what}: not an object")));
    };
    if let Some(k) = fields.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(bad(format!("Unknown attribute for argument {what}: {k}")));
    }
    if let Some(k) = mandatory.iter().find(|k| !fields.contains_key(**k)) {
        return Err(bad(format!("Mandatory field missing: {what}.{k}")));
    }
    Ok(())
}

/// `base` with the fields of `extra`.
fn merge(base: &mut Value, extra: Value) {
    if let (Some(base), Value::Object(extra)) = (base.as_object_mut(), extra) {
        base.extend(extra);
    }
}

fn str_of<'v>(v: &'v Value, key: &str) -> &'v str {
    v.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn decode<T: DeserializeOwned>(kind: &str, v: Value) -> Result<T, OsError> {
    serde_json::from_value(v).map_err(|e| OsError::Decode {
        service: "fake".into(),
        path: format!("/{kind}"),
        message: e.to_string(),
    })
}

/// Whether `obj` passes Neutron-style list filters: repeated keys are ORed,
/// different keys ANDed.
fn filtered(obj: &Value, query: &[(&str, String)]) -> bool {
    let mut keys: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (k, v) in query {
        keys.entry(*k).or_default().push(v);
    }
    keys.into_iter().all(|(key, values)| {
        // Glance ANDs repeated `tag` filters; Neutron ORs other repeated keys.
        let mut values = values.iter();
        let test = |want: &&str| {
            let tags: Vec<&str> = obj
                .get("tags")
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let wanted = || want.split(',');
            match key {
                "tags" | "tag" => wanted().all(|t| tags.contains(&t)),
                "tags-any" => wanted().any(|t| tags.contains(&t)),
                "not-tags" => !wanted().all(|t| tags.contains(&t)),
                "not-tags-any" => !wanted().any(|t| tags.contains(&t)),
                // Neutron's `fixed_ips=ip_address=…` / `fixed_ips=subnet_id=…`.
                "fixed_ips" => want.split_once('=').is_some_and(|(k, v)| {
                    obj.get("fixed_ips")
                        .and_then(Value::as_array)
                        .is_some_and(|a| a.iter().any(|f| str_of(f, k) == v))
                }),
                field => match obj.get(field) {
                    Some(Value::String(s)) => s == want,
                    Some(Value::Bool(b)) => b.to_string() == *want,
                    Some(Value::Number(n)) => n.to_string() == *want,
                    _ => false,
                },
            }
        };
        if key == "tag" {
            values.all(test)
        } else {
            values.any(test)
        }
    })
}

impl State {
    fn id(&mut self, kind: &str) -> String {
        self.next_id += 1;
        format!("{kind}-{}", self.next_id)
    }

    fn ip(&mut self, prefix: &str) -> String {
        self.next_ip += 1;
        format!("{prefix}.{}", self.next_ip)
    }

    fn coll(&mut self, kind: &'static str) -> &mut BTreeMap<String, Value> {
        self.objects.entry(kind).or_default()
    }

    fn find(&self, kind: &str, id: &str) -> Option<&Value> {
        self.objects.get(kind).and_then(|c| c.get(id))
    }

    fn all(&self, kind: &str) -> Vec<Value> {
        self.objects
            .get(kind)
            .map(|c| c.values().cloned().collect())
            .unwrap_or_default()
    }

    fn insert(&mut self, kind: &'static str, obj: Value) -> Value {
        let id = str_of(&obj, "id").to_owned();
        self.coll(kind).insert(id, obj.clone());
        obj
    }

    fn fault_for(&mut self, op: Op, kind: &str) -> Option<Effect> {
        let mut effect = None;
        for f in self.faults.iter_mut() {
            if !f.calls.matches(op, kind) {
                continue;
            }
            f.seen += 1;
            if effect.is_none() && f.nth.is_none_or(|n| n == f.seen) {
                f.fired += 1;
                effect = Some(f.effect);
            }
        }
        effect
    }

    /// Moves a busy object one read on; at the end it becomes ACTIVE or goes.
    fn settle(&mut self, id: &str) {
        let Some((kind, left, then)) = self.busy.get_mut(id) else {
            return;
        };
        if *left > 0 {
            *left -= 1;
            return;
        }
        let (kind, then) = (*kind, *then);
        self.busy.remove(id);
        match (kind, then) {
            ("loadbalancers", Settle::Active) => {
                if let Some(lb) = self.coll(kind).get_mut(id) {
                    lb["provisioning_status"] = json!("ACTIVE");
                }
            }
            ("servers", Settle::Active) => {
                if let Some(s) = self.coll(kind).get_mut(id) {
                    s["status"] = json!("ACTIVE");
                }
            }
            ("volumes", Settle::Active) => {
                if let Some(v) = self.coll(kind).get_mut(id) {
                    v["status"] = json!("available");
                }
            }
            ("volumes", Settle::Gone) => {
                self.coll(kind).remove(id);
            }
            ("loadbalancers", Settle::Gone) => self.remove_load_balancer(id),
            ("servers", Settle::Gone) => self.remove_server(id),
            _ => {}
        }
    }

    fn settle_all(&mut self, kind: &'static str) {
        let ids: Vec<String> = self.coll(kind).keys().cloned().collect();
        for id in ids {
            self.settle(&id);
        }
    }

    /// The object as the API shows it (security groups embed their rules).
    fn view(&self, kind: &str, obj: &Value) -> Value {
        let mut v = obj.clone();
        if kind == "security-groups" {
            let id = str_of(obj, "id");
            v["security_group_rules"] = Value::Array(
                self.all("security-group-rules")
                    .into_iter()
                    .filter(|r| str_of(r, "security_group_id") == id)
                    .collect(),
            );
        }
        v
    }

    fn list(&mut self, kind: &'static str, query: &[(&str, String)]) -> Vec<Value> {
        self.settle_all(kind);
        self.all(kind)
            .iter()
            .filter(|o| filtered(o, query))
            .map(|o| self.view(kind, o))
            .collect()
    }

    fn get(&mut self, kind: &'static str, id: &str) -> Result<Value, OsError> {
        self.settle(id);
        let obj = self.find(kind, id).ok_or_else(|| not_found(kind, id))?;
        Ok(self.view(kind, obj))
    }

    fn update(&mut self, kind: &'static str, id: &str, body: Value) -> Result<Value, OsError> {
        let obj = self
            .coll(kind)
            .get_mut(id)
            .ok_or_else(|| not_found(kind, id))?;
        if let (Some(obj), Value::Object(body)) = (obj.as_object_mut(), body) {
            obj.extend(body);
        }
        let obj = obj.clone();
        Ok(self.view(kind, &obj))
    }

    fn ports_where(&self, pred: impl Fn(&Value) -> bool) -> Vec<Value> {
        self.all("ports").into_iter().filter(|p| pred(p)).collect()
    }

    fn neutron_create(&mut self, kind: &'static str, body: Value) -> Result<Value, OsError> {
        let Value::Object(mut obj) = body else {
            return Err(http(Op::Create, kind, 400, "body is not an object", None));
        };
        let id = self.id(kind);
        obj.insert("id".into(), json!(id));
        obj.entry("name").or_insert(json!(""));
        obj.entry("tags").or_insert(json!([]));
        let bad = |m: &str| http(Op::Create, kind, 400, m, None);
        match kind {
            "networks" => {
                obj.entry("router:external").or_insert(json!(false));
            }
            "subnets" => {
                let network = obj.get("network_id").and_then(Value::as_str).unwrap_or("");
                if self.find("networks", network).is_none() {
                    return Err(not_found("networks", network));
                }
            }
            "routers" => {
                if let Some(gw) = obj
                    .get_mut("external_gateway_info")
                    .and_then(Value::as_object_mut)
                {
                    self.next_ip += 1;
                    gw.insert(
                        "external_fixed_ips".into(),
                        json!([{"subnet_id": "public-subnet",
                                "ip_address": format!("203.0.113.{}", self.next_ip)}]),
                    );
                }
            }
            "ports" => {
                let network = str_of(&Value::Object(obj.clone()), "network_id").to_owned();
                if self.find("networks", &network).is_none() {
                    return Err(not_found("networks", &network));
                }
                let subnet = match obj.get("fixed_ips").and_then(|f| f.pointer("/0/subnet_id")) {
                    Some(s) => s.as_str().unwrap_or_default().to_owned(),
                    None => self
                        .all("subnets")
                        .iter()
                        .find(|s| str_of(s, "network_id") == network)
                        .map(|s| str_of(s, "id").to_owned())
                        .unwrap_or_default(),
                };
                let asked = obj
                    .get("fixed_ips")
                    .and_then(|f| f.pointer("/0/ip_address"))
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let ip = match asked {
                    Some(ip) => {
                        // Neutron's IpAddressAlreadyAllocated.
                        let taken = !self
                            .ports_where(|p| {
                                p.get("fixed_ips")
                                    .and_then(Value::as_array)
                                    .is_some_and(|a| {
                                        a.iter().any(|f| {
                                            str_of(f, "subnet_id") == subnet
                                                && str_of(f, "ip_address") == ip
                                        })
                                    })
                            })
                            .is_empty();
                        if taken {
                            return Err(conflict(
                                Op::Create,
                                kind,
                                &format!("IP address {ip} already allocated in subnet {subnet}"),
                            ));
                        }
                        ip
                    }
                    None => self.ip("10.6.0"),
                };
                obj.insert(
                    "fixed_ips".into(),
                    json!([{"subnet_id": subnet, "ip_address": ip}]),
                );
                obj.entry("device_id").or_insert(json!(""));
                obj.entry("device_owner").or_insert(json!(""));
                obj.entry("security_groups").or_insert(json!([]));
                obj.entry("allowed_address_pairs").or_insert(json!([]));
            }
            "security-groups" => {}
            "security-group-rules" => {
                let group = str_of(&Value::Object(obj.clone()), "security_group_id").to_owned();
                if self.find("security-groups", &group).is_none() {
                    return Err(not_found("security-groups", &group));
                }
                for key in [
                    "protocol",
                    "port_range_min",
                    "port_range_max",
                    "remote_group_id",
                    "remote_ip_prefix",
                ] {
                    obj.entry(key).or_insert(Value::Null);
                }
                if let Some(Value::String(p)) = obj.get("remote_ip_prefix") {
                    if p == "0.0.0.0/0" || p == "::/0" {
                        obj.insert("remote_ip_prefix".into(), Value::Null);
                    }
                }
                let key = |r: &Map<String, Value>| {
                    [
                        "security_group_id",
                        "direction",
                        "ethertype",
                        "protocol",
                        "port_range_min",
                        "port_range_max",
                        "remote_group_id",
                        "remote_ip_prefix",
                    ]
                    .map(|k| r.get(k).cloned().unwrap_or(Value::Null))
                };
                let new = key(&obj);
                if self
                    .all("security-group-rules")
                    .iter()
                    .filter_map(Value::as_object)
                    .any(|r| key(r) == new)
                {
                    return Err(conflict(
                        Op::Create,
                        kind,
                        "Security group rule already exists",
                    ));
                }
            }
            "floatingips" => {
                let address = match obj.get("floating_ip_address").and_then(Value::as_str) {
                    Some(a) => a.to_owned(),
                    None => self.ip("203.0.113"),
                };
                if self
                    .all("floatingips")
                    .iter()
                    .any(|f| str_of(f, "floating_ip_address") == address)
                {
                    return Err(conflict(Op::Create, kind, "IP address already allocated"));
                }
                obj.insert("floating_ip_address".into(), json!(address));
                obj.entry("port_id").or_insert(Value::Null);
                obj.entry("description").or_insert(json!(""));
                obj.insert("status".into(), json!("DOWN"));
            }
            _ => return Err(bad("unknown collection")),
        }
        let obj = self.insert(kind, Value::Object(obj));
        if kind == "security-groups" {
            // Neutron gives every new group its two egress rules.
            for ethertype in ["IPv4", "IPv6"] {
                let rule = json!({"security_group_id": id, "direction": "egress",
                    "ethertype": ethertype});
                self.neutron_create("security-group-rules", rule)?;
            }
        }
        Ok(self.view(kind, &obj))
    }

    /// `POST /v2.0/security-group-rules` with a list: Neutron's checks
    /// (rules of one group only, none twice, none existing), all or nothing.
    fn neutron_create_rules(&mut self, rules: Vec<Value>) -> Result<Vec<Value>, OsError> {
        const KIND: &str = "security-group-rules";
        let bad = |m: &str| http(Op::Create, KIND, 400, m, None);
        if self.no_bulk {
            return Err(bad("Bulk operation not supported"));
        }
        if rules.is_empty() {
            return Err(bad("Resources required"));
        }
        let groups: BTreeSet<&str> = rules
            .iter()
            .map(|r| str_of(r, "security_group_id"))
            .collect();
        if groups.len() > 1 {
            return Err(bad(
                "Only allowed to update rules for one security profile at a time",
            ));
        }
        let mut created: Vec<Value> = Vec::new();
        for rule in rules {
            match self.neutron_create(KIND, rule) {
                Ok(r) => created.push(r),
                Err(e) => {
                    for r in &created {
                        self.coll(KIND).remove(str_of(r, "id"));
                    }
                    return Err(e);
                }
            }
        }
        Ok(created)
    }

    fn neutron_delete(&mut self, kind: &'static str, id: &str) -> Result<(), OsError> {
        let obj = self
            .find(kind, id)
            .cloned()
            .ok_or_else(|| not_found(kind, id))?;
        let in_use = |m: &str| conflict(Op::Delete, kind, m);
        match kind {
            "networks" => {
                if !self
                    .ports_where(|p| str_of(p, "network_id") == id)
                    .is_empty()
                {
                    return Err(in_use("One or more ports have an IP allocation"));
                }
                self.coll("subnets")
                    .retain(|_, s| str_of(s, "network_id") != id);
            }
            "routers"
                if !self
                    .ports_where(|p| str_of(p, "device_id") == id)
                    .is_empty() =>
            {
                return Err(in_use("Router still has ports"));
            }
            "ports" => {
                if str_of(&obj, "device_owner").starts_with("network:router_interface") {
                    return Err(in_use("Port is a router interface"));
                }
                for f in self.coll("floatingips").values_mut() {
                    if str_of(f, "port_id") == id {
                        f["port_id"] = Value::Null;
                    }
                }
            }
            "security-groups" => {
                let used = self.ports_where(|p| {
                    p.get("security_groups")
                        .and_then(Value::as_array)
                        .is_some_and(|g| g.iter().any(|g| g.as_str() == Some(id)))
                });
                if !used.is_empty() {
                    return Err(in_use("Security group is in use"));
                }
                self.coll("security-group-rules")
                    .retain(|_, r| str_of(r, "security_group_id") != id);
            }
            _ => {}
        }
        self.coll(kind).remove(id);
        Ok(())
    }

    /// Octavia refuses changes while a load balancer is `PENDING_*`.
    fn active_load_balancer(&mut self, op: Op, id: &str) -> Result<(), OsError> {
        let lb = self
            .find("loadbalancers", id)
            .ok_or_else(|| not_found("loadbalancers", id))?;
        if str_of(lb, "provisioning_status") != "ACTIVE" {
            return Err(conflict(
                op,
                "loadbalancers",
                &format!("Load Balancer {id} is immutable and cannot be updated."),
            ));
        }
        Ok(())
    }

    fn touch_load_balancer(&mut self, id: &str) {
        if self.octavia_busy_reads == 0 {
            return;
        }
        if let Some(lb) = self.coll("loadbalancers").get_mut(id) {
            lb["provisioning_status"] = json!("PENDING_UPDATE");
        }
        self.busy.insert(
            id.to_owned(),
            ("loadbalancers", self.octavia_busy_reads, Settle::Active),
        );
    }

    /// The load balancer a listener, pool, member or monitor body hangs from.
    fn owning_load_balancer(&self, kind: &str, obj: &Value) -> String {
        match kind {
            "listeners" => str_of(obj, "loadbalancer_id").to_owned(),
            "pools" => self
                .find("listeners", str_of(obj, "listener_id"))
                .map(|l| str_of(l, "loadbalancer_id").to_owned())
                .unwrap_or_default(),
            "healthmonitors" | "members" => self
                .find("pools", str_of(obj, "pool_id"))
                .map(|p| str_of(p, "loadbalancer_id").to_owned())
                .unwrap_or_default(),
            _ => String::new(),
        }
    }

    fn octavia_create(&mut self, kind: &'static str, body: Value) -> Result<Value, OsError> {
        let Value::Object(mut obj) = body else {
            return Err(http(Op::Create, kind, 400, "body is not an object", None));
        };
        let id = self.id(kind);
        obj.insert("id".into(), json!(id));
        obj.entry("name").or_insert(json!(""));
        obj.entry("tags").or_insert(json!([]));
        if kind == "loadbalancers" {
            let listeners = match obj.remove("listeners") {
                None => Vec::new(),
                Some(Value::Array(l)) => l,
                Some(_) => return Err(http(Op::Create, kind, 400, "listeners: not a list", None)),
            };
            for l in &listeners {
                check_nested(
                    l,
                    "listeners",
                    LISTENER_FIELDS,
                    &["protocol", "protocol_port"],
                )?;
                if let Some(pool) = l.get("default_pool") {
                    check_nested(
                        pool,
                        "default_pool",
                        POOL_FIELDS,
                        &["protocol", "lb_algorithm"],
                    )?;
                    if let Some(m) = pool.get("healthmonitor") {
                        check_nested(
                            m,
                            "healthmonitor",
                            MONITOR_FIELDS,
                            &["type", "delay", "timeout", "max_retries"],
                        )?;
                    }
                }
            }
            if self.no_populated && !listeners.is_empty() {
                return Err(http(
                    Op::Create,
                    kind,
                    501,
                    "Provider 'amphora' does not support a requested option",
                    None,
                ));
            }
            let subnet_id = str_of(&Value::Object(obj.clone()), "vip_subnet_id").to_owned();
            let subnet = self
                .find("subnets", &subnet_id)
                .cloned()
                .ok_or_else(|| not_found("subnets", &subnet_id))?;
            let vip = match obj.get("vip_address").and_then(Value::as_str) {
                Some(a) => a.to_owned(),
                None => self.ip("10.6.0"),
            };
            let port_id = self.id("ports");
            self.insert(
                "ports",
                json!({"id": port_id, "name": format!("octavia-lb-{id}"),
                    "network_id": str_of(&subnet, "network_id"), "device_id": id,
                    "device_owner": "Octavia", "tags": [], "security_groups": [],
                    "allowed_address_pairs": [],
                    "fixed_ips": [{"subnet_id": subnet_id, "ip_address": vip}]}),
            );
            obj.insert("vip_address".into(), json!(vip));
            obj.insert("vip_port_id".into(), json!(port_id));
            obj.entry("provider").or_insert(json!("amphora"));
            let pending = self.octavia_busy_reads > 0;
            obj.insert(
                "provisioning_status".into(),
                json!(if pending { "PENDING_CREATE" } else { "ACTIVE" }),
            );
            if pending {
                self.busy.insert(
                    id.clone(),
                    ("loadbalancers", self.octavia_busy_reads, Settle::Active),
                );
            }
            let obj = self.insert(kind, Value::Object(obj));
            for l in listeners {
                self.populate_listener(&id, l);
            }
            return Ok(obj);
        }
        let obj_v = Value::Object(obj.clone());
        let lb = self.owning_load_balancer(kind, &obj_v);
        self.active_load_balancer(Op::Create, &lb)?;
        obj.insert("loadbalancer_id".into(), json!(lb));
        obj.insert("provisioning_status".into(), json!("ACTIVE"));
        match kind {
            "listeners" => {
                obj.entry("allowed_cidrs").or_insert(Value::Null);
            }
            "pools" => {
                obj.insert("healthmonitor_id".into(), Value::Null);
            }
            "healthmonitors" => {
                let pool = str_of(&obj_v, "pool_id").to_owned();
                if let Some(p) = self.coll("pools").get_mut(&pool) {
                    p["healthmonitor_id"] = json!(id);
                }
            }
            "members" => {
                obj.entry("operating_status").or_insert(json!("NO_MONITOR"));
            }
            _ => return Err(http(Op::Create, kind, 400, "unknown collection", None)),
        }
        let obj = self.insert(kind, Value::Object(obj));
        self.touch_load_balancer(&lb);
        Ok(obj)
    }

    /// A listener of a fully populated create, with its default pool and
    /// that pool's monitor, as their own creates would store them.
    fn populate_listener(&mut self, lb: &str, mut listener: Value) {
        let pool = listener
            .as_object_mut()
            .and_then(|l| l.remove("default_pool"));
        let listener_id = self.id("listeners");
        let mut l = json!({"id": listener_id, "name": "", "tags": [], "allowed_cidrs": null});
        merge(&mut l, listener);
        l["loadbalancer_id"] = json!(lb);
        l["provisioning_status"] = json!("ACTIVE");
        self.insert("listeners", l);
        let Some(mut pool) = pool else {
            return;
        };
        let monitor = pool.as_object_mut().and_then(|p| p.remove("healthmonitor"));
        let pool_id = self.id("pools");
        let mut p = json!({"id": pool_id, "name": "", "tags": [], "healthmonitor_id": null});
        merge(&mut p, pool);
        p["listener_id"] = json!(listener_id);
        p["loadbalancer_id"] = json!(lb);
        p["provisioning_status"] = json!("ACTIVE");
        if let Some(monitor) = monitor {
            let monitor_id = self.id("healthmonitors");
            let mut m = json!({"id": monitor_id, "name": "", "tags": []});
            merge(&mut m, monitor);
            m["pool_id"] = json!(pool_id);
            m["loadbalancer_id"] = json!(lb);
            m["provisioning_status"] = json!("ACTIVE");
            self.insert("healthmonitors", m);
            p["healthmonitor_id"] = json!(monitor_id);
        }
        self.insert("pools", p);
    }

    fn remove_load_balancer(&mut self, id: &str) {
        self.coll("loadbalancers").remove(id);
        for kind in ["listeners", "pools", "healthmonitors", "members"] {
            self.coll(kind)
                .retain(|_, o| str_of(o, "loadbalancer_id") != id);
        }
        self.coll("ports").retain(|_, p| {
            !(str_of(p, "device_owner") == "Octavia" && str_of(p, "device_id") == id)
        });
    }

    fn remove_server(&mut self, id: &str) {
        let server = self.coll("servers").remove(id);
        for p in self.coll("ports").values_mut() {
            if str_of(p, "device_id") == id {
                p["device_id"] = json!("");
                p["device_owner"] = json!("");
            }
        }
        for g in self.coll("server-groups").values_mut() {
            if let Some(members) = g["members"].as_array_mut() {
                members.retain(|m| m.as_str() != Some(id));
            }
        }
        let attached = server
            .as_ref()
            .and_then(|s| s.get("os-extended-volumes:volumes_attached"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for a in attached {
            let volume = str_of(&a, "id");
            if a["delete_on_termination"].as_bool() == Some(true) {
                self.coll("volumes").remove(volume);
            } else if let Some(v) = self.coll("volumes").get_mut(volume) {
                v["status"] = json!("available");
                v["attachments"] = json!([]);
            }
        }
    }

    /// Attaches the volumes of a new server's block device mapping (Nova
    /// creates the ones made from an image) and gives what the server
    /// records: `(image ID or "", volumes_attached)`.
    fn map_block_devices(&mut self, server: &str, body: &Value) -> Result<(Value, Value), OsError> {
        let bad = |m: &str| http(Op::Create, "servers", 400, m, None);
        let mut image = body.get("imageRef").cloned().unwrap_or(json!(""));
        let mut attached = Vec::new();
        let devices = body
            .get("block_device_mapping_v2")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for d in devices {
            let uuid = str_of(&d, "uuid").to_owned();
            let boot = d["boot_index"].as_i64() == Some(0);
            let delete = d["delete_on_termination"].as_bool() == Some(true);
            let volume = match (str_of(&d, "source_type"), str_of(&d, "destination_type")) {
                ("image", dest) => {
                    if self.find("images", &uuid).is_none() {
                        return Err(bad("Image not found"));
                    }
                    if dest != "volume" {
                        if boot {
                            image = json!(uuid);
                        }
                        continue;
                    }
                    let id = self.id("volumes");
                    self.insert(
                        "volumes",
                        json!({"id": id, "name": "", "status": "available", "bootable": "true",
                            "size": d["volume_size"], "metadata": {}, "attachments": []}),
                    );
                    id
                }
                ("volume", _) => {
                    let v = self
                        .find("volumes", &uuid)
                        .ok_or_else(|| bad("Volume not found"))?;
                    if str_of(v, "status") != "available" {
                        return Err(bad("Volume is not available"));
                    }
                    uuid
                }
                _ => continue,
            };
            if let Some(v) = self.coll("volumes").get_mut(&volume) {
                v["status"] = json!("in-use");
                v["attachments"] = json!([{"server_id": server, "attachment_id": server,
                    "device": ""}]);
            }
            attached.push(json!({"id": volume, "delete_on_termination": delete}));
        }
        Ok((image, Value::Array(attached)))
    }
}

impl FakeCloud {
    /// A cloud with an external network, an image, a Nova flavor and two
    /// availability zones.
    pub fn new() -> Self {
        let mut st = State::default();
        st.insert(
            "networks",
            json!({"id": EXTERNAL_NETWORK, "name": "public", "router:external": true,
                "tags": [], "subnets": ["public-subnet"]}),
        );
        st.insert(
            "subnets",
            json!({"id": "public-subnet", "name": "public", "network_id": EXTERNAL_NETWORK,
                "cidr": "203.0.113.0/24", "tags": []}),
        );
        st.insert(
            "images",
            json!({"id": "image-ubuntu", "name": "ubuntu", "status": "active", "tags": ["k8s"]}),
        );
        st.insert(
            "compute-flavors",
            json!({"id": "flavor-small", "name": "m1.small"}),
        );
        st.seeded = st
            .objects
            .values()
            .flat_map(|c| c.keys().cloned())
            .collect();
        Self {
            config: CloudConfig {
                auth_url: "http://keystone.fake/v3".into(),
                auth: AuthMethod::Password {
                    user: NameOrId::Name("demo".into()),
                    user_domain: None,
                    password: "secret".into(),
                    project: Some(NameOrId::Name("demo".into())),
                    project_domain: None,
                },
                region: Some("RegionOne".into()),
                interface: "public".into(),
                verify: true,
                endpoint_overrides: BTreeMap::new(),
                api_timeout: None,
                compute_max_microversion: None,
            },
            state: Mutex::new(st),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Counts calls for `fault` from now on.
    pub fn inject(&self, fault: Fault) {
        self.lock().faults.push(fault);
    }

    /// How often the injected faults fired.
    pub fn fired(&self) -> usize {
        self.lock().faults.iter().map(|f| f.fired).sum()
    }

    /// Load balancers stay `PENDING_*` for this many reads after each change.
    pub fn set_octavia_busy_reads(&self, reads: usize) {
        self.lock().octavia_busy_reads = reads;
    }

    /// Servers stay in `BUILD` (or deleting) for this many reads.
    pub fn set_nova_busy_reads(&self, reads: usize) {
        self.lock().nova_busy_reads = reads;
    }

    /// Volumes stay `creating` (or `deleting`) for this many reads.
    pub fn set_cinder_busy_reads(&self, reads: usize) {
        self.lock().cinder_busy_reads = reads;
    }

    /// The microversion Nova negotiates, e.g. 2.63 for a cloud that only
    /// takes the `policies` server-group body.
    pub fn set_nova_microversion(&self, at: Microversion) {
        self.lock().nova_microversion = Some(at);
    }

    /// Neutron refuses bulk creates, as with `allow_bulk = False`.
    pub fn refuse_bulk(&self) {
        self.lock().no_bulk = true;
    }

    /// Deletes an object behind the reconcile's back.
    pub fn remove(&self, kind: &str, id: &str) {
        if let Some(c) = self.lock().objects.get_mut(kind) {
            c.remove(id);
        }
    }

    /// Removes `tag` from every object of a collection, behind the reconcile's back.
    pub fn untag(&self, kind: &str, tag: &str) {
        if let Some(c) = self.lock().objects.get_mut(kind) {
            for o in c.values_mut() {
                if let Some(tags) = o.get_mut("tags").and_then(Value::as_array_mut) {
                    tags.retain(|t| t != tag);
                }
            }
        }
    }

    /// Octavia refuses fully populated load balancer creates (501).
    pub fn refuse_populated(&self) {
        self.lock().no_populated = true;
    }

    /// The writes that took effect so far.
    pub fn writes(&self) -> usize {
        self.lock().writes.len()
    }

    /// The writes of one kind that took effect so far (a bulk create is one).
    pub fn writes_of(&self, op: Op, kind: &str) -> usize {
        self.lock()
            .writes
            .iter()
            .filter(|(o, k)| *o == op && *k == kind)
            .count()
    }

    /// The objects of a collection, as stored.
    pub fn objects(&self, kind: &str) -> Vec<Value> {
        self.lock().all(kind)
    }

    /// The objects of a collection that were not there from the start.
    pub fn created(&self, kind: &str) -> Vec<Value> {
        let st = self.lock();
        st.all(kind)
            .into_iter()
            .filter(|o| !st.seeded.contains(str_of(o, "id")))
            .collect()
    }

    /// `collection/id` of every object the tests created and left.
    pub fn leftovers(&self) -> Vec<String> {
        let st = self.lock();
        st.objects
            .iter()
            .flat_map(|(kind, c)| c.keys().map(move |id| (kind, id)))
            .filter(|(_, id)| !st.seeded.contains(*id))
            .map(|(kind, id)| format!("{kind}/{id}"))
            .collect()
    }

    /// One call: the injected fault, if any, then `f` on the state.
    fn call<T>(
        &self,
        op: Op,
        kind: &'static str,
        f: impl FnOnce(&mut State) -> Result<T, OsError>,
    ) -> Result<T, OsError> {
        let mut st = self.lock();
        let effect = st.fault_for(op, kind);
        match effect {
            Some(Effect::Status(status)) => {
                return Err(http(op, kind, status, "injected fault", None))
            }
            Some(Effect::RateLimited(after)) => {
                return Err(http(op, kind, 429, "injected rate limit", Some(after)))
            }
            Some(Effect::LoseAnswer) | None => {}
        }
        let out = f(&mut st);
        if out.is_ok() && op.is_write() {
            st.writes.push((op, kind));
        }
        match effect {
            Some(Effect::LoseAnswer) => Err(OsError::Transport {
                service: "fake".into(),
                method: op.method().into(),
                path: format!("/{kind}"),
                message: "injected fault: the answer was lost".into(),
                timeout: true,
            }),
            _ => out,
        }
    }
}

impl CloudClients for FakeCloud {
    type Identity = Self;
    type Network = Self;
    type LoadBalancer = Self;
    type Compute = Self;
    type Image = Self;
    type BlockStorage = Self;

    fn config(&self) -> &CloudConfig {
        &self.config
    }
    fn identity(&self) -> &Self {
        self
    }
    fn network(&self) -> &Self {
        self
    }
    fn load_balancer(&self) -> &Self {
        self
    }
    fn compute(&self) -> &Self {
        self
    }
    fn image(&self) -> &Self {
        self
    }
    fn block_storage(&self) -> &Self {
        self
    }
}

impl Identity for FakeCloud {
    async fn project(&self) -> Result<Option<TokenProject>, OsError> {
        self.call(Op::Get, "tokens", |_| {
            Ok(Some(TokenProject {
                id: "project-demo".into(),
                name: "demo".into(),
                domain: TokenDomain {
                    id: "default".into(),
                    name: "Default".into(),
                },
            }))
        })
    }

    async fn catalog_endpoint(&self, types: &[&str]) -> Result<Option<String>, OsError> {
        self.call(Op::Get, "tokens", |_| {
            Ok(types
                .iter()
                .find(|t| ["identity", "compute", "network", "volumev3"].contains(t))
                .map(|t| format!("http://{t}.fake")))
        })
    }
}

impl Networking for FakeCloud {
    async fn list<T: NeutronResource>(&self, query: &Query<'_>) -> Result<Vec<T>, OsError> {
        self.call(Op::List, T::PLURAL, |st| {
            st.list(T::PLURAL, query)
                .into_iter()
                .map(|o| decode(T::PLURAL, o))
                .collect()
        })
    }

    async fn get<T: NeutronResource>(&self, id: &str) -> Result<T, OsError> {
        self.call(Op::Get, T::PLURAL, |st| {
            decode(T::PLURAL, st.get(T::PLURAL, id)?)
        })
    }

    async fn create<T: NeutronResource>(&self, body: Value) -> Result<T, OsError> {
        self.call(Op::Create, T::PLURAL, |st| {
            decode(T::PLURAL, st.neutron_create(T::PLURAL, body)?)
        })
    }

    async fn update<T: NeutronResource>(&self, id: &str, body: Value) -> Result<T, OsError> {
        self.call(Op::Update, T::PLURAL, |st| {
            decode(T::PLURAL, st.update(T::PLURAL, id, body)?)
        })
    }

    async fn delete<T: NeutronResource>(&self, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, T::PLURAL, |st| st.neutron_delete(T::PLURAL, id))
    }

    async fn create_security_group_rules(
        &self,
        rules: Vec<Value>,
    ) -> Result<Vec<SecurityGroupRule>, OsError> {
        self.call(Op::Create, "security-group-rules", |st| {
            st.neutron_create_rules(rules)?
                .into_iter()
                .map(|r| decode("security-group-rules", r))
                .collect()
        })
    }

    async fn add_tag<T: NeutronResource>(&self, id: &str, tag: &str) -> Result<(), OsError> {
        self.call(Op::AddTag, T::PLURAL, |st| {
            let obj = st
                .coll(T::PLURAL)
                .get_mut(id)
                .ok_or_else(|| not_found(T::PLURAL, id))?;
            let tags = obj["tags"].as_array_mut();
            if let Some(tags) = tags {
                if !tags.iter().any(|t| t.as_str() == Some(tag)) {
                    tags.push(json!(tag));
                }
            }
            Ok(())
        })
    }

    async fn set_tags<T: NeutronResource>(&self, id: &str, tags: &[String]) -> Result<(), OsError> {
        self.call(Op::AddTag, T::PLURAL, |st| {
            let obj = st
                .coll(T::PLURAL)
                .get_mut(id)
                .ok_or_else(|| not_found(T::PLURAL, id))?;
            obj["tags"] = json!(tags);
            Ok(())
        })
    }

    async fn add_router_interface(&self, router_id: &str, subnet_id: &str) -> Result<(), OsError> {
        self.call(Op::AddInterface, "routers", |st| {
            st.find("routers", router_id)
                .ok_or_else(|| not_found("routers", router_id))?;
            let subnet = st
                .find("subnets", subnet_id)
                .cloned()
                .ok_or_else(|| not_found("subnets", subnet_id))?;
            let attached = st.ports_where(|p| {
                str_of(p, "device_id") == router_id
                    && p.pointer("/fixed_ips/0/subnet_id").and_then(Value::as_str)
                        == Some(subnet_id)
            });
            if !attached.is_empty() {
                return Err(http(
                    Op::AddInterface,
                    "routers",
                    400,
                    "Router already has a port on the subnet",
                    None,
                ));
            }
            let id = st.id("ports");
            st.insert(
                "ports",
                json!({"id": id, "name": "", "network_id": str_of(&subnet, "network_id"),
                    "device_id": router_id, "device_owner": "network:router_interface",
                    "tags": [], "security_groups": [], "allowed_address_pairs": [],
                    "fixed_ips": [{"subnet_id": subnet_id, "ip_address": "10.6.0.1"}]}),
            );
            Ok(())
        })
    }

    async fn remove_router_interface(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<(), OsError> {
        self.call(Op::RemoveInterface, "routers", |st| {
            let ports = st.ports_where(|p| {
                str_of(p, "device_id") == router_id
                    && str_of(p, "device_owner") == "network:router_interface"
                    && p.pointer("/fixed_ips/0/subnet_id").and_then(Value::as_str)
                        == Some(subnet_id)
            });
            if ports.is_empty() {
                return Err(not_found("routers", router_id));
            }
            for p in ports {
                st.coll("ports").remove(str_of(&p, "id"));
            }
            Ok(())
        })
    }
}

impl LoadBalancing for FakeCloud {
    async fn list<T: OctaviaResource>(&self, query: &[(&str, String)]) -> Result<Vec<T>, OsError> {
        self.call(Op::List, T::PLURAL, |st| {
            st.settle_all("loadbalancers");
            st.list(T::PLURAL, query)
                .into_iter()
                .map(|o| decode(T::PLURAL, o))
                .collect()
        })
    }

    async fn get<T: OctaviaResource>(&self, id: &str) -> Result<T, OsError> {
        self.call(Op::Get, T::PLURAL, |st| {
            decode(T::PLURAL, st.get(T::PLURAL, id)?)
        })
    }

    async fn create<T: OctaviaResource>(&self, body: Value) -> Result<T, OsError> {
        self.call(Op::Create, T::PLURAL, |st| {
            decode(T::PLURAL, st.octavia_create(T::PLURAL, body)?)
        })
    }

    async fn update<T: OctaviaResource>(&self, id: &str, body: Value) -> Result<T, OsError> {
        self.call(Op::Update, T::PLURAL, |st| {
            let obj = st
                .find(T::PLURAL, id)
                .cloned()
                .ok_or_else(|| not_found(T::PLURAL, id))?;
            let lb = str_of(&obj, "loadbalancer_id").to_owned();
            st.active_load_balancer(Op::Update, &lb)?;
            let updated = st.update(T::PLURAL, id, body)?;
            st.touch_load_balancer(&lb);
            decode(T::PLURAL, updated)
        })
    }

    async fn delete_load_balancer_cascade(&self, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, "loadbalancers", |st| {
            st.active_load_balancer(Op::Delete, id)?;
            if st.octavia_busy_reads == 0 {
                st.remove_load_balancer(id);
                return Ok(());
            }
            if let Some(lb) = st.coll("loadbalancers").get_mut(id) {
                lb["provisioning_status"] = json!("PENDING_DELETE");
            }
            let reads = st.octavia_busy_reads;
            st.busy
                .insert(id.to_owned(), ("loadbalancers", reads, Settle::Gone));
            Ok(())
        })
    }

    async fn api_version(&self) -> Result<(u32, u32), OsError> {
        self.call(Op::Get, "versions", |_| Ok((2, 27)))
    }
    async fn members(
        &self,
        pool_id: &str,
        query: &[(&str, String)],
    ) -> Result<Vec<Member>, OsError> {
        self.call(Op::List, "members", |st| {
            st.get("pools", pool_id)?;
            st.list("members", query)
                .into_iter()
                .filter(|m| str_of(m, "pool_id") == pool_id)
                .map(|o| decode("members", o))
                .collect()
        })
    }

    async fn member(&self, pool_id: &str, id: &str) -> Result<Member, OsError> {
        self.call(Op::Get, "members", |st| {
            let m = st.get("members", id)?;
            if str_of(&m, "pool_id") != pool_id {
                return Err(not_found("members", id));
            }
            decode("members", m)
        })
    }

    async fn create_member(&self, pool_id: &str, body: Value) -> Result<Member, OsError> {
        self.call(Op::Create, "members", |st| {
            st.get("pools", pool_id)?;
            let mut body = body;
            body["pool_id"] = json!(pool_id);
            decode("members", st.octavia_create("members", body)?)
        })
    }

    async fn delete_member(&self, pool_id: &str, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, "members", |st| {
            let m = st.get("members", id)?;
            if str_of(&m, "pool_id") != pool_id {
                return Err(not_found("members", id));
            }
            let lb = str_of(&m, "loadbalancer_id").to_owned();
            st.active_load_balancer(Op::Delete, &lb)?;
            st.coll("members").remove(id);
            st.touch_load_balancer(&lb);
            Ok(())
        })
    }
}

impl Compute for FakeCloud {
    async fn availability_zones(&self) -> Result<Vec<AvailabilityZone>, OsError> {
        self.call(Op::List, "availability-zones", |_| {
            Ok([("az1", true), ("az2", true), ("broken", false)]
                .into_iter()
                .map(|(name, available)| AvailabilityZone {
                    name: name.into(),
                    available,
                })
                .collect())
        })
    }

    async fn flavors(&self) -> Result<Vec<Flavor>, OsError> {
        self.call(Op::List, "compute-flavors", |st| {
            st.list("compute-flavors", &[])
                .into_iter()
                .map(|o| decode("compute-flavors", o))
                .collect()
        })
    }

    async fn servers_named(&self, name: &str) -> Result<Vec<Server>, OsError> {
        // Only the anchored, escaped form the reconcile sends: `^name$`.
        let exact = name
            .strip_prefix('^')
            .and_then(|n| n.strip_suffix('$'))
            .map(|n| n.replace('\\', ""));
        self.call(Op::List, "servers", |st| {
            st.list("servers", &[])
                .into_iter()
                .filter(|s| match &exact {
                    Some(n) => str_of(s, "name") == n,
                    None => str_of(s, "name").contains(name),
                })
                .map(|o| decode("servers", o))
                .collect()
        })
    }

    async fn server(&self, id: &str) -> Result<Server, OsError> {
        self.call(Op::Get, "servers", |st| {
            decode("servers", st.get("servers", id)?)
        })
    }

    async fn create_server(&self, body: Value, _microversion: &str) -> Result<String, OsError> {
        self.call(Op::Create, "servers", |st| {
            let bad = |m: &str| http(Op::Create, "servers", 400, m, None);
            let boots_from_device = body
                .get("block_device_mapping_v2")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|d| d["boot_index"].as_i64() == Some(0)));
            if !boots_from_device && st.find("images", str_of(&body, "imageRef")).is_none() {
                return Err(bad("Image not found"));
            }
            if st
                .find("compute-flavors", str_of(&body, "flavorRef"))
                .is_none()
            {
                return Err(bad("Flavor not found"));
            }
            let port = body
                .pointer("/networks/0/port")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if st.find("ports", &port).is_none() {
                return Err(bad("Port not found"));
            }
            let group = body
                .pointer(&format!("/{SCHEDULER_HINTS_KEY}/group"))
                .and_then(Value::as_str)
                .map(str::to_owned);
            if let Some(g) = &group {
                if st.find("server-groups", g).is_none() {
                    return Err(bad("Invalid server group"));
                }
            }
            let id = st.id("servers");
            let (image, volumes) = st.map_block_devices(&id, &body)?;
            if let Some(p) = st.coll("ports").get_mut(&port) {
                p["device_id"] = json!(id);
                p["device_owner"] = json!("compute:nova");
            }
            if let Some(g) = group.and_then(|g| st.coll("server-groups").get_mut(&g)) {
                if let Some(members) = g["members"].as_array_mut() {
                    members.push(json!(id));
                }
            }
            let building = st.nova_busy_reads > 0;
            if building {
                let reads = st.nova_busy_reads;
                st.busy
                    .insert(id.clone(), ("servers", reads, Settle::Active));
            }
            let image = if image.as_str().is_some_and(|i| !i.is_empty()) {
                json!({ "id": image })
            } else {
                json!("")
            };
            st.insert(
                "servers",
                json!({"id": id, "name": body["name"], "metadata": body["metadata"],
                    "status": if building { "BUILD" } else { "ACTIVE" },
                    "OS-EXT-AZ:availability_zone": body.get("availability_zone")
                        .cloned().unwrap_or(json!("az1")),
                    "flavor": {"id": body["flavorRef"]}, "image": image,
                    "tags": body.get("tags").cloned().unwrap_or(json!([])),
                    "os-extended-volumes:volumes_attached": volumes}),
            );
            Ok(id)
        })
    }

    async fn delete_server(&self, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, "servers", |st| {
            st.find("servers", id)
                .ok_or_else(|| not_found("servers", id))?;
            if st.nova_busy_reads == 0 {
                st.remove_server(id);
                return Ok(());
            }
            if let Some(s) = st.coll("servers").get_mut(id) {
                s["OS-EXT-STS:task_state"] = json!("deleting");
            }
            let reads = st.nova_busy_reads;
            st.busy
                .insert(id.to_owned(), ("servers", reads, Settle::Gone));
            Ok(())
        })
    }
    async fn microversion(&self) -> Result<Microversion, OsError> {
        self.call(Op::Get, "versions", |st| {
            Ok(st.nova_microversion.unwrap_or(Microversion::new(2, 96)))
        })
    }

    async fn server_groups(&self) -> Result<Vec<ServerGroup>, OsError> {
        self.call(Op::List, "server-groups", |st| {
            st.list("server-groups", &[])
                .into_iter()
                .map(|o| decode("server-groups", o))
                .collect()
        })
    }

    async fn server_group(&self, id: &str) -> Result<ServerGroup, OsError> {
        self.call(Op::Get, "server-groups", |st| {
            decode("server-groups", st.get("server-groups", id)?)
        })
    }

    async fn create_server_group(
        &self,
        name: &str,
        policy: ServerGroupPolicy,
        rules: &ServerGroupRules,
    ) -> Result<ServerGroup, OsError> {
        self.call(Op::Create, "server-groups", |st| {
            let at = st.nova_microversion.unwrap_or(Microversion::new(2, 96));
            // The same refusals as the real client, before any write.
            server_group_body(name, policy, rules, at)?;
            let id = st.id("server-groups");
            let group = st.insert(
                "server-groups",
                json!({"id": id, "name": name, "policy": policy.as_str(), "rules": rules,
                    "members": []}),
            );
            decode("server-groups", group)
        })
    }

    async fn delete_server_group(&self, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, "server-groups", |st| {
            st.coll("server-groups")
                .remove(id)
                .map(drop)
                .ok_or_else(|| not_found("server-groups", id))
        })
    }
}

impl Images for FakeCloud {
    async fn list(&self, query: &[(&str, String)]) -> Result<Vec<Image>, OsError> {
        self.call(Op::List, "images", |st| {
            st.list("images", query)
                .into_iter()
                .map(|o| decode("images", o))
                .collect()
        })
    }
}

impl BlockStorage for FakeCloud {
    async fn create_volume(&self, volume: &VolumeCreate) -> Result<Volume, OsError> {
        self.call(Op::Create, "volumes", |st| {
            if let Some(image) = &volume.image_id {
                if st.find("images", image).is_none() {
                    return Err(http(Op::Create, "volumes", 400, "Image not found", None));
                }
            }
            let id = st.id("volumes");
            let creating = st.cinder_busy_reads > 0;
            if creating {
                let reads = st.cinder_busy_reads;
                st.busy
                    .insert(id.clone(), ("volumes", reads, Settle::Active));
            }
            let mut v = volume.body()["volume"].take();
            v["id"] = json!(id);
            v["status"] = json!(if creating { "creating" } else { "available" });
            v["bootable"] = json!(if volume.image_id.is_some() {
                "true"
            } else {
                "false"
            });
            v["attachments"] = json!([]);
            if v.get("metadata").is_none() {
                v["metadata"] = json!({});
            }
            decode("volumes", st.insert("volumes", v))
        })
    }

    async fn volume(&self, id: &str) -> Result<Volume, OsError> {
        self.call(Op::Get, "volumes", |st| {
            decode("volumes", st.get("volumes", id)?)
        })
    }

    async fn volumes(&self, filter: &VolumeFilter) -> Result<Vec<Volume>, OsError> {
        self.call(Op::List, "volumes", |st| {
            let query: Vec<(&str, String)> =
                filter.name.iter().map(|n| ("name", n.clone())).collect();
            st.list("volumes", &query)
                .into_iter()
                .filter(|v| {
                    filter
                        .metadata
                        .iter()
                        .all(|(k, val)| v["metadata"][k].as_str() == Some(val))
                })
                .map(|o| decode("volumes", o))
                .collect()
        })
    }

    /// Cinder's own type only: the fault tests render no StorageClass.
    async fn volume_types(&self) -> Result<Vec<VolumeType>, OsError> {
        self.call(Op::List, "types", |_| Ok(vec![default_type()]))
    }

    async fn default_volume_type(&self) -> Result<VolumeType, OsError> {
        self.call(Op::Get, "types", |_| Ok(default_type()))
    }

    async fn delete_volume(&self, id: &str) -> Result<(), OsError> {
        self.call(Op::Delete, "volumes", |st| {
            let v = st.get("volumes", id)?;
            if !matches!(str_of(&v, "status"), "available" | "error") {
                return Err(http(
                    Op::Delete,
                    "volumes",
                    400,
                    "Volume status must be available or error",
                    None,
                ));
            }
            if st.cinder_busy_reads == 0 {
                st.coll("volumes").remove(id);
                return Ok(());
            }
            if let Some(v) = st.coll("volumes").get_mut(id) {
                v["status"] = json!("deleting");
            }
            let reads = st.cinder_busy_reads;
            st.busy
                .insert(id.to_owned(), ("volumes", reads, Settle::Gone));
            Ok(())
        })
    }
}

fn default_type() -> VolumeType {
    VolumeType {
        id: "type-default".into(),
        name: "__DEFAULT__".into(),
        description: "Default Volume Type".into(),
        is_public: true,
    }
}
