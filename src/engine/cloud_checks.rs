//! Which OpenStack resources a pack's variables name, declared in the pack's
//! `cloudChecks` section, and the ValidateTopology messages about them.
//!
//! This part is pure: it turns a ValidateTopology request into a [`CloudPlan`] (the
//! identity Secret to read and the lookups to make) and formats what the lookups
//! found. Asking the cloud is the job of `hooks::openstack::topology`, which the
//! server calls only after the schema and CEL checks passed.
//!
//! BeforeClusterCreate asks the same of the Cluster itself ([`creation_plan`]): CAPI
//! calls it before it computes the topology, so the values come from the Cluster's
//! variables, and a flavor check marked `machines` sizes the first machines of that
//! kind against the project's quota.
//!
//! ```yaml
//! cloudChecks:
//!   identity:
//!     secretNameVariable: openstackCluster.identity.secretName  # empty: <cluster>-cloud-config
//!     cloudNameVariable: openstackCluster.identity.cloudName    # optional
//!     cloudName: openstack                                      # when the variable is unset or empty
//!   resources:
//!   - {variable: openstackControlPlane.flavor, kind: flavor, machines: controlPlane}
//!   - {variable: openstackControlPlane.image, kind: image}      # {id} or {name}
//!   - {variable: openstackCluster.bastion.flavor, kind: flavor, when: openstackCluster.bastion.enabled}
//! ```

use std::collections::BTreeSet;
use std::fmt;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::clusterclass::Cluster;
use super::pack::PackVariable;
use crate::sdk::common::Variable;
use crate::sdk::topology::ValidateTopologyRequest;

/// What kind of OpenStack resource a variable names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum ResourceKind {
    /// A Nova flavor (by name, as CAPO's `flavor`).
    Flavor,
    /// A Glance image; by name it must match exactly one image.
    Image,
    /// A Neutron network.
    Network,
    /// A Neutron network with `router:external`.
    ExternalNetwork,
    /// A Neutron subnet.
    Subnet,
    /// A Nova server group.
    ServerGroup,
}

impl ResourceKind {
    /// The word used in messages.
    pub fn noun(self) -> &'static str {
        match self {
            ResourceKind::Flavor => "flavor",
            ResourceKind::Image => "image",
            ResourceKind::Network => "network",
            ResourceKind::ExternalNetwork => "external network",
            ResourceKind::Subnet => "subnet",
            ResourceKind::ServerGroup => "server group",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            ResourceKind::Flavor => "flavors",
            ResourceKind::Image => "images",
            ResourceKind::Network => "networks",
            ResourceKind::ExternalNetwork => "external networks",
            ResourceKind::Subnet => "subnets",
            ResourceKind::ServerGroup => "server groups",
        }
    }
}

/// How a string value names its resource; an object value says it by its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum By {
    Id,
    Name,
}

/// One resource to look up in one cloud.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Lookup {
    pub kind: ResourceKind,
    pub by: By,
    pub value: String,
}

impl fmt::Display for Lookup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The value comes from the Cluster: shown by its prefix only.
        let value = crate::sdk::clip::quote(&self.value);
        match self.by {
            By::Name => write!(f, "{} {value}", self.kind.noun()),
            By::Id => write!(f, "{} ID {value}", self.kind.noun()),
        }
    }
}

/// What a lookup found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    /// Exactly one (or, by ID, the one).
    One,
    /// None: the resource does not exist (or is not visible to the project).
    Missing,
    /// A name that matches several resources where exactly one is needed.
    Many(usize),
    /// A network that exists but is not external.
    NotExternal,
}

/// The `cloudChecks` section of a pack, checked at load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudChecks {
    pub secret_name_variable: Option<String>,
    pub cloud_name_variable: Option<String>,
    pub cloud_name: String,
    pub resources: Vec<ResourceCheck>,
}

/// One variable path naming one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceCheck {
    /// `variable.field.field`: the variable's name, then fields of its value.
    pub variable: String,
    pub kind: ResourceKind,
    /// How a string value is read (default: by name).
    pub by: By,
    /// A boolean field that must be true for the check to run.
    pub when: Option<String>,
    /// For a flavor: the machines that boot with it, sized at BeforeClusterCreate.
    pub machines: Option<MachineRole>,
}

/// Which of a new cluster's machines a flavor variable sizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum MachineRole {
    /// `spec.topology.controlPlane.replicas` machines (KubeadmControlPlane's default 1).
    ControlPlane,
    /// Each MachineDeployment's replicas, with its own overrides.
    Workers,
    /// One machine, when the check's `when` holds.
    Bastion,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawCloudChecks {
    #[serde(default)]
    identity: RawIdentity,
    #[serde(default)]
    resources: Vec<RawResource>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawIdentity {
    #[serde(default)]
    secret_name_variable: Option<String>,
    #[serde(default)]
    cloud_name_variable: Option<String>,
    #[serde(default)]
    cloud_name: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RawResource {
    variable: String,
    kind: ResourceKind,
    #[serde(default)]
    by: Option<By>,
    #[serde(default)]
    when: Option<String>,
    #[serde(default)]
    machines: Option<MachineRole>,
}

/// The cloud CAPO uses when a pack names none (its `identityRef.cloudName` default).
pub const DEFAULT_CLOUD_NAME: &str = "openstack";

/// Reads and checks a pack's `cloudChecks` value: every path must lead through the
/// `properties` of one of the pack's variables. Problems are `(place, message)`.
pub fn parse(
    raw: &Value,
    variables: &[PackVariable],
) -> Result<CloudChecks, Vec<(String, String)>> {
    let raw: RawCloudChecks = serde_path_to_error::deserialize(raw).map_err(|e| {
        let place = e.path().to_string();
        let place = if place == "." {
            "cloudChecks".to_string()
        } else {
            format!("cloudChecks.{place}")
        };
        vec![(place, e.into_inner().to_string())]
    })?;
    let mut problems = Vec::new();
    let mut check_path = |place: String, path: &str| {
        if let Err(why) = schema_at(variables, path) {
            problems.push((place, why));
        }
    };
    if let Some(p) = &raw.identity.secret_name_variable {
        check_path("cloudChecks.identity.secretNameVariable".into(), p);
    }
    if let Some(p) = &raw.identity.cloud_name_variable {
        check_path("cloudChecks.identity.cloudNameVariable".into(), p);
    }
    for (i, r) in raw.resources.iter().enumerate() {
        check_path(format!("cloudChecks.resources[{i}].variable"), &r.variable);
        if let Some(w) = &r.when {
            check_path(format!("cloudChecks.resources[{i}].when"), w);
        }
    }
    for (i, r) in raw.resources.iter().enumerate() {
        if r.machines.is_some() && r.kind != ResourceKind::Flavor {
            problems.push((
                format!("cloudChecks.resources[{i}].machines"),
                "only a flavor sizes machines".to_string(),
            ));
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(CloudChecks {
        secret_name_variable: raw.identity.secret_name_variable,
        cloud_name_variable: raw.identity.cloud_name_variable,
        cloud_name: raw
            .identity
            .cloud_name
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| DEFAULT_CLOUD_NAME.to_string()),
        resources: raw
            .resources
            .into_iter()
            .map(|r| ResourceCheck {
                variable: r.variable,
                kind: r.kind,
                by: r.by.unwrap_or(By::Name),
                when: r.when,
                machines: r.machines,
            })
            .collect(),
    })
}

/// The schema a dotted path leads to, or why it leads nowhere.
fn schema_at<'a>(variables: &'a [PackVariable], path: &str) -> Result<&'a Value, String> {
    let mut parts = path.split('.');
    let name = parts.next().unwrap_or_default();
    let var = variables
        .iter()
        .find(|v| v.name == name)
        .ok_or_else(|| format!("{name:?} is not a variable of this pack"))?;
    let mut schema = &var.schema;
    for field in parts {
        schema = schema
            .get("properties")
            .and_then(|p| p.get(field))
            .ok_or_else(|| format!("{path:?}: the schema has no field {field:?} there"))?;
    }
    Ok(schema)
}

/// Where a value was found, for messages: `variable a.b` on the Cluster, or with the
/// MachineDeployment (or other holder) whose override it is; or, read from a patched
/// template, `OpenStackMachineTemplate spec.flavor`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Place {
    /// `"MachineDeployment md-0: "` or empty.
    pub holder: String,
    pub path: String,
    /// Empty for a variable; the kind of the template the value was read from.
    pub template: String,
}

impl Place {
    /// A variable's place.
    pub fn variable(holder: impl Into<String>, path: impl Into<String>) -> Place {
        Place {
            holder: holder.into(),
            path: path.into(),
            template: String::new(),
        }
    }
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.template.is_empty() {
            write!(f, "{}variable {}", self.holder, self.path)
        } else {
            write!(f, "{}{} {}", self.holder, self.template, self.path)
        }
    }
}

/// The cloud work one ValidateTopology call needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudPlan {
    /// The pack's served name, for the answer's message.
    pub pack: String,
    pub namespace: String,
    pub cluster: String,
    /// `builtin.cluster.uid`, for an Event on the Cluster.
    pub cluster_uid: Option<String>,
    /// The identity Secret, in the Cluster's namespace.
    pub secret: String,
    /// The clouds.yaml entry.
    pub cloud: String,
    /// Each place and what it names, sorted, without duplicates.
    pub checks: Vec<(Place, Lookup)>,
}

impl CloudPlan {
    /// The distinct lookups, sorted.
    pub fn lookups(&self) -> Vec<Lookup> {
        let set: BTreeSet<&Lookup> = self.checks.iter().map(|(_, l)| l).collect();
        set.into_iter().cloned().collect()
    }

    /// Identifies the work: the same key means the same Secret, cloud and lookups.
    pub fn key(&self) -> String {
        let mut key = format!("{}/{}/{}", self.namespace, self.secret, self.cloud);
        for l in self.lookups() {
            key.push_str(&format!("|{:?}:{:?}:{}", l.kind, l.by, l.value));
        }
        key
    }
}

/// The plan for `req`, or `None` when it names no resource (or no Cluster).
///
/// CAPI hands every ValidateTopology handler the variables of the class's *last*
/// external patch (`patches/engine.go`, v1.10 to v1.14: the request's variables are
/// overwritten on each patch and the validation request is built after the loop). A
/// pack that is not last therefore sees none of its own variables; it then reads the
/// resources from the patched templates in the request, which are what CAPI is about
/// to create whoever patched them.
pub fn plan(
    pack_name: &str,
    checks: &CloudChecks,
    variables: &[PackVariable],
    req: &ValidateTopologyRequest,
) -> Option<CloudPlan> {
    let own = |vars: &[Variable]| {
        vars.iter()
            .any(|v| variables.iter().any(|p| p.name == v.name))
    };
    if !own(&req.variables) && !req.items.iter().any(|i| own(&i.variables)) {
        return plan_from_templates(pack_name, checks, req);
    }
    let (namespace, cluster) = req.cluster()?;
    let globals = values(variables, &req.variables, true);
    let items = req.items.iter().map(|item| {
        (
            format!(
                "{} {}: ",
                item.holder_reference.kind, item.holder_reference.name
            ),
            values(variables, &item.variables, false),
        )
    });
    plan_from_values(
        pack_name,
        checks,
        Who {
            namespace,
            cluster,
            uid: cluster_uid(req),
        },
        &globals,
        items,
    )
}

/// The Cluster a plan is for.
struct Who {
    namespace: String,
    cluster: String,
    uid: Option<String>,
}

/// The plan from the Cluster's values (`globals`, defaulted) and each holder's own
/// overrides (`(message prefix, values)`).
fn plan_from_values(
    pack_name: &str,
    checks: &CloudChecks,
    who: Who,
    globals: &Map<String, Value>,
    items: impl IntoIterator<Item = (String, Map<String, Value>)>,
) -> Option<CloudPlan> {
    let mut found = BTreeSet::new();
    collect(checks, globals, "", &mut found);
    for (holder, own) in items {
        if own.is_empty() {
            continue;
        }
        // A `when` may sit in another variable than the one overridden.
        let mut merged = globals.clone();
        merged.extend(own.clone());
        let mut here = BTreeSet::new();
        collect(checks, &merged, &holder, &mut here);
        // Only what the item's own values name: the rest is the Cluster's, reported once.
        for (place, lookup) in here {
            let name = place.path.split('.').next().unwrap_or_default();
            if own.contains_key(name) {
                found.insert((place, lookup));
            }
        }
    }
    if found.is_empty() {
        return None;
    }
    let text = |path: &Option<String>| {
        path.as_deref()
            .and_then(|p| lookup_path(globals, p))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    };
    Some(CloudPlan {
        pack: pack_name.to_string(),
        secret: text(&checks.secret_name_variable)
            .unwrap_or_else(|| format!("{}-cloud-config", who.cluster)),
        cloud: text(&checks.cloud_name_variable).unwrap_or_else(|| checks.cloud_name.clone()),
        cluster_uid: who.uid,
        namespace: who.namespace,
        cluster: who.cluster,
        checks: found.into_iter().collect(),
    })
}

/// Machines of one kind a new cluster starts with.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FirstMachines {
    /// `control plane`, `MachineDeployment <topology name>` or `bastion`.
    pub of: String,
    pub replicas: u64,
    pub flavor: (By, String),
}

/// What BeforeClusterCreate checks for one pack: the lookups, as ValidateTopology
/// makes them, and the machines to size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreationPlan {
    pub cloud: CloudPlan,
    pub machines: Vec<FirstMachines>,
}

/// Annotation the cluster-autoscaler reads on a MachineDeployment; CAPI's webhook
/// starts a MachineDeployment without replicas at this size.
pub const AUTOSCALER_MIN_SIZE_ANNOTATION: &str =
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-min-size";

/// The plan for a Cluster about to be created, from its own variables: the Cluster's
/// (with the pack's top-level defaults, as CAPI's webhook fills them in), the control
/// plane's overrides and each MachineDeployment's. Replicas as CAPI's webhooks
/// default them: 1 for the control plane, and for a MachineDeployment its
/// autoscaler minimum or 1. MachinePools are not sized (CAPO has none). `None` when
/// the Cluster names no resource the pack checks.
pub fn creation_plan(
    pack_name: &str,
    checks: &CloudChecks,
    variables: &[PackVariable],
    cluster: &Cluster,
) -> Option<CreationPlan> {
    let globals = values(variables, &cluster.variables, true);
    let cp_own = values(variables, &cluster.control_plane_overrides, false);
    let mut items = vec![("control plane: ".to_string(), cp_own.clone())];
    for md in &cluster.machine_deployments {
        items.push((
            format!("MachineDeployment {}: ", md.name),
            values(variables, &md.overrides, false),
        ));
    }
    let plan = plan_from_values(
        pack_name,
        checks,
        Who {
            namespace: cluster.namespace.clone(),
            cluster: cluster.name.clone(),
            uid: cluster.uid.clone(),
        },
        &globals,
        items,
    )?;
    let merged = |own: &Map<String, Value>| {
        let mut m = globals.clone();
        m.extend(own.clone());
        m
    };
    let count = |n: Option<i64>| n.map_or(1, |n| u64::try_from(n).unwrap_or(0));
    let mut machines = Vec::new();
    let mut add = |of: String, replicas: u64, role: MachineRole, values: &Map<String, Value>| {
        if let Some(flavor) = flavor_for(checks, role, values) {
            machines.push(FirstMachines {
                of,
                replicas,
                flavor,
            });
        }
    };
    add(
        "control plane".into(),
        count(cluster.control_plane_replicas),
        MachineRole::ControlPlane,
        &merged(&cp_own),
    );
    for md in &cluster.machine_deployments {
        let replicas = md
            .replicas
            .map(|n| u64::try_from(n).unwrap_or(0))
            .unwrap_or_else(|| {
                md.metadata
                    .annotations
                    .get(AUTOSCALER_MIN_SIZE_ANNOTATION)
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(1)
            });
        add(
            format!("MachineDeployment {}", md.name),
            replicas,
            MachineRole::Workers,
            &merged(&values(variables, &md.overrides, false)),
        );
    }
    add("bastion".into(), 1, MachineRole::Bastion, &globals);
    machines.retain(|m| m.replicas > 0);
    Some(CreationPlan {
        cloud: plan,
        machines,
    })
}

/// The flavor the checks marked for `role` name in `values`, if any.
fn flavor_for(
    checks: &CloudChecks,
    role: MachineRole,
    values: &Map<String, Value>,
) -> Option<(By, String)> {
    let mut found = BTreeSet::new();
    collect_from(
        checks
            .resources
            .iter()
            .filter(|c| c.machines == Some(role) && c.kind == ResourceKind::Flavor),
        values,
        "",
        &mut found,
    );
    found.into_iter().next().map(|(_, l)| (l.by, l.value))
}

/// Where CAPO's v1beta1 templates name cloud resources: `(kind, path under
/// spec.template.spec, resource)`. A value is a string (a name, or an ID for
/// `flavorID`) or a CAPO reference `{id}` / `{filter: {name}}`; lists are read item
/// by item.
const TEMPLATE_FIELDS: &[(&str, &str, ResourceKind)] = &[
    ("OpenStackMachineTemplate", "flavor", ResourceKind::Flavor),
    ("OpenStackMachineTemplate", "image", ResourceKind::Image),
    (
        "OpenStackMachineTemplate",
        "serverGroup",
        ResourceKind::ServerGroup,
    ),
    (
        "OpenStackClusterTemplate",
        "externalNetwork",
        ResourceKind::ExternalNetwork,
    ),
    ("OpenStackClusterTemplate", "network", ResourceKind::Network),
    ("OpenStackClusterTemplate", "subnets", ResourceKind::Subnet),
    (
        "OpenStackClusterTemplate",
        "bastion.spec.flavor",
        ResourceKind::Flavor,
    ),
    (
        "OpenStackClusterTemplate",
        "bastion.spec.image",
        ResourceKind::Image,
    ),
];

const INFRA_API_GROUP: &str = "infrastructure.cluster.x-k8s.io/";

/// The plan read from the patched templates of `req` (see [`plan`]): the identity
/// from the OpenStackClusterTemplate's `identityRef`, the resources from
/// [`TEMPLATE_FIELDS`]. `None` without an OpenStackClusterTemplate whose identity is
/// a Secret, or when the templates name nothing.
fn plan_from_templates(
    pack_name: &str,
    checks: &CloudChecks,
    req: &ValidateTopologyRequest,
) -> Option<CloudPlan> {
    let (namespace, cluster) = req.cluster()?;
    fn spec_of(item: &crate::sdk::topology::ValidateTopologyRequestItem) -> Option<&Value> {
        item.object["apiVersion"]
            .as_str()
            .is_some_and(|a| a.starts_with(INFRA_API_GROUP))
            .then(|| &item.object["spec"]["template"]["spec"])
    }
    let cluster_spec = req.items.iter().find_map(|i| {
        (i.object["kind"] == "OpenStackClusterTemplate")
            .then(|| spec_of(i))
            .flatten()
    })?;
    let identity = &cluster_spec["identityRef"];
    if identity["type"].as_str().is_some_and(|t| t != "Secret") {
        return None;
    }
    let secret = identity["name"].as_str().filter(|s| !s.is_empty())?;
    let cloud = identity["cloudName"]
        .as_str()
        .filter(|s| !s.is_empty())
        .unwrap_or(&checks.cloud_name);
    let mut found = BTreeSet::new();
    for item in &req.items {
        let Some(spec) = spec_of(item) else { continue };
        let kind = item.object["kind"].as_str().unwrap_or_default();
        let holder = if item.holder_reference.kind == "Cluster" {
            String::new()
        } else {
            format!(
                "{} {}: ",
                item.holder_reference.kind, item.holder_reference.name
            )
        };
        for (k, path, resource) in TEMPLATE_FIELDS {
            if *k != kind {
                continue;
            }
            // A bastion that is off boots nothing.
            if path.starts_with("bastion.") && spec["bastion"]["enabled"] == Value::Bool(false) {
                continue;
            }
            let mut v = spec;
            for part in path.split('.') {
                v = &v[part];
            }
            let values: Vec<(String, &Value)> = match v {
                Value::Array(a) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| (format!("spec.{path}[{i}]"), v))
                    .collect(),
                other => vec![(format!("spec.{path}"), other)],
            };
            for (at, v) in values {
                let named = match v {
                    Value::String(s) => Some((By::Name, s.as_str(), at)),
                    Value::Object(m) => match (m.get("id"), m.get("filter")) {
                        (Some(Value::String(id)), _) => {
                            Some((By::Id, id.as_str(), format!("{at}.id")))
                        }
                        (_, Some(f)) => f["name"]
                            .as_str()
                            .map(|n| (By::Name, n, format!("{at}.filter.name"))),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some((by, value, at)) = named.filter(|(_, v, _)| !v.is_empty()) {
                    found.insert((
                        Place {
                            holder: holder.clone(),
                            path: at,
                            template: kind.to_string(),
                        },
                        Lookup {
                            kind: *resource,
                            by,
                            value: value.to_string(),
                        },
                    ));
                }
            }
        }
        if kind == "OpenStackMachineTemplate" {
            if let Some(id) = spec["flavorID"].as_str().filter(|s| !s.is_empty()) {
                found.insert((
                    Place {
                        holder: holder.clone(),
                        path: "spec.flavorID".into(),
                        template: kind.to_string(),
                    },
                    Lookup {
                        kind: ResourceKind::Flavor,
                        by: By::Id,
                        value: id.to_string(),
                    },
                ));
            }
        }
    }
    if found.is_empty() {
        return None;
    }
    Some(CloudPlan {
        pack: pack_name.to_string(),
        cluster_uid: cluster_uid(req),
        namespace,
        cluster,
        secret: secret.to_string(),
        cloud: cloud.to_string(),
        checks: found.into_iter().collect(),
    })
}

fn cluster_uid(req: &ValidateTopologyRequest) -> Option<String> {
    req.variables
        .iter()
        .find(|v| v.name == "builtin")
        .and_then(|b| b.value["cluster"]["uid"].as_str())
        .filter(|u| !u.is_empty())
        .map(str::to_string)
}

/// The pack's variables among `values`, defaulted, by name. With `top_defaults`,
/// an unset variable gets its top-level default, as CAPI sends for the Cluster.
fn values(
    variables: &[PackVariable],
    values: &[Variable],
    top_defaults: bool,
) -> Map<String, Value> {
    let mut out = Map::new();
    for v in values {
        if let Some(var) = variables.iter().find(|p| p.name == v.name) {
            out.insert(v.name.clone(), var.compiled.default_value(&v.value));
        }
    }
    if top_defaults {
        for var in variables {
            if !out.contains_key(&var.name) {
                if let Some(d) = var.compiled.top_level_default() {
                    out.insert(var.name.clone(), var.compiled.default_value(&d));
                }
            }
        }
    }
    out
}

fn lookup_path<'a>(values: &'a Map<String, Value>, path: &str) -> Option<&'a Value> {
    let mut parts = path.split('.');
    let mut v = values.get(parts.next()?)?;
    for p in parts {
        v = v.get(p)?;
    }
    Some(v)
}

fn collect(
    checks: &CloudChecks,
    values: &Map<String, Value>,
    holder: &str,
    out: &mut BTreeSet<(Place, Lookup)>,
) {
    collect_from(&checks.resources, values, holder, out)
}

fn collect_from<'a>(
    resources: impl IntoIterator<Item = &'a ResourceCheck>,
    values: &Map<String, Value>,
    holder: &str,
    out: &mut BTreeSet<(Place, Lookup)>,
) {
    for c in resources {
        if let Some(w) = &c.when {
            if lookup_path(values, w).and_then(Value::as_bool) != Some(true) {
                continue;
            }
        }
        let Some(v) = lookup_path(values, &c.variable) else {
            continue;
        };
        let mut add = |path: String, by: By, value: &str| {
            if !value.is_empty() {
                out.insert((
                    Place::variable(holder, path),
                    Lookup {
                        kind: c.kind,
                        by,
                        value: value.to_string(),
                    },
                ));
            }
        };
        match v {
            Value::String(s) => add(c.variable.clone(), c.by, s),
            Value::Object(m) => {
                for (key, by) in [("id", By::Id), ("name", By::Name)] {
                    if let Some(s) = m.get(key).and_then(Value::as_str) {
                        add(format!("{}.{key}", c.variable), by, s);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The cloud as messages name it: `cloud "default" (region RegionOne)`.
pub fn cloud_label(cloud: &str, region: Option<&str>) -> String {
    match region {
        Some(r) if !r.is_empty() => format!("cloud {cloud:?} (region {r})"),
        _ => format!("cloud {cloud:?}"),
    }
}

/// The message for a lookup that found a problem; `None` when it found its resource.
pub fn problem(place: &Place, lookup: &Lookup, found: &Found, cloud: &str) -> Option<String> {
    let what = match found {
        Found::One => return None,
        Found::Missing => format!("{lookup} not found in {cloud}"),
        Found::Many(n) => format!(
            "{n} {} named {:?} in {cloud}; the name must match exactly one",
            lookup.kind.plural(),
            lookup.value
        ),
        Found::NotExternal => format!(
            "network {} {:?} in {cloud} is not an external network",
            match lookup.by {
                By::Id => "ID",
                By::Name => "named",
            },
            lookup.value
        ),
    };
    Some(format!("{place}: {what}"))
}

/// What the cloud check says about one ValidateTopology call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CloudVerdict {
    /// Everything named exists.
    Valid,
    /// Resources definitely missing or ambiguous: one message each.
    Invalid(Vec<String>),
    /// The cloud could not be asked (or not in time); the topology is not held up.
    Unknown(String),
}

/// Asks the cloud about a plan. The server holds one when it has Kubernetes access.
pub trait TopologyCloudCheck: Send + Sync + 'static {
    fn check<'a>(&'a self, plan: CloudPlan) -> BoxFuture<'a, CloudVerdict>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::PackEngine;
    use serde_json::json;

    fn engine() -> PackEngine {
        PackEngine::embedded().unwrap()
    }

    fn request(globals: Value, items: Value) -> ValidateTopologyRequest {
        let mut vars = vec![
            json!({"name": "builtin", "value": {"cluster": {"name": "c1", "namespace": "ns1"}}}),
        ];
        if let Value::Object(m) = globals {
            for (k, v) in m {
                vars.push(json!({"name": k, "value": v}));
            }
        }
        serde_json::from_value(json!({"variables": vars, "items": items})).unwrap()
    }

    fn plan_for(pack: &str, req: &ValidateTopologyRequest) -> Option<CloudPlan> {
        let e = engine();
        let p = e.packs().iter().find(|p| p.name == pack).unwrap();
        plan(&p.name, p.cloud_checks.as_ref().unwrap(), &p.variables, req)
    }

    fn lines(plan: &CloudPlan) -> Vec<String> {
        plan.checks
            .iter()
            .map(|(place, l)| format!("{place} -> {l}"))
            .collect()
    }

    #[test]
    fn a_long_value_is_shown_by_its_prefix() {
        let l = Lookup {
            kind: ResourceKind::Flavor,
            by: By::Name,
            value: "f".repeat(5000),
        };
        let shown = l.to_string();
        assert!(shown.starts_with("flavor \"ffff"), "{shown}");
        assert!(shown.ends_with("…(5000 bytes)"), "{shown}");
        assert!(shown.len() < 120, "{shown}");
    }

    /// CAPI's request to a pack that is not the class's last patch: only another
    /// pack's variables, and the patched templates.
    #[test]
    fn without_its_variables_a_pack_reads_the_patched_templates() {
        let holder = |kind: &str, name: &str| {
            json!({"apiVersion": "cluster.x-k8s.io/v1beta2", "kind": kind, "namespace": "ns1",
                   "name": name, "fieldPath": "spec.infrastructureRef"})
        };
        let machine = |flavor: &str, image: Value| {
            json!({"apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackMachineTemplate",
                   "spec": {"template": {"spec": {"flavor": flavor, "image": image, "sshKeyName": ""}}}})
        };
        let req = request(
            json!({"vip": {"enabled": true}}),
            json!([
                {"holderReference": holder("Cluster", "c1"), "object": {
                    "apiVersion": "infrastructure.cluster.x-k8s.io/v1beta1", "kind": "OpenStackClusterTemplate",
                    "spec": {"template": {"spec": {
                        "identityRef": {"type": "Secret", "name": "c1-creds", "cloudName": "prod"},
                        "externalNetwork": {"id": "7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11"},
                        "subnets": [{"filter": {"name": "a"}}, {"id": "1c0ffee0-0000-4000-8000-000000000001"}],
                        "bastion": {"enabled": false, "spec": {"flavor": "m1.tiny"}}}}}}},
                {"holderReference": holder("KubeadmControlPlane", "c1-cp"),
                 "object": machine("m1.mediumm", json!({"filter": {"name": "ubuntu"}}))},
                {"holderReference": holder("MachineDeployment", "c1-md-0"),
                 "object": machine("m1.large", json!({"id": "0b1c2d3e-4f50-4617-8899-aabbccddeeff"}))},
                // Not CAPO's: never read.
                {"holderReference": holder("Cluster", "c1"), "object": {
                    "apiVersion": "controlplane.cluster.x-k8s.io/v1beta2", "kind": "KubeadmControlPlaneTemplate",
                    "spec": {"template": {"spec": {"flavor": "x"}}}}},
            ]),
        );
        let p = plan_for("openstack-v1", &req).unwrap();
        assert_eq!((p.secret.as_str(), p.cloud.as_str()), ("c1-creds", "prod"));
        assert_eq!(
            lines(&p),
            vec![
                "OpenStackClusterTemplate spec.externalNetwork.id -> external network ID \"7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11\"",
                "OpenStackClusterTemplate spec.subnets[0].filter.name -> subnet \"a\"",
                "OpenStackClusterTemplate spec.subnets[1].id -> subnet ID \"1c0ffee0-0000-4000-8000-000000000001\"",
                "KubeadmControlPlane c1-cp: OpenStackMachineTemplate spec.flavor -> flavor \"m1.mediumm\"",
                "KubeadmControlPlane c1-cp: OpenStackMachineTemplate spec.image.filter.name -> image \"ubuntu\"",
                "MachineDeployment c1-md-0: OpenStackMachineTemplate spec.flavor -> flavor \"m1.large\"",
                "MachineDeployment c1-md-0: OpenStackMachineTemplate spec.image.id -> image ID \"0b1c2d3e-4f50-4617-8899-aabbccddeeff\"",
            ]
        );
        // The message names the template field and the flavor.
        let (place, flavor) = &p.checks[3];
        assert_eq!(
            problem(place, flavor, &Found::Missing, &cloud_label("prod", None)).unwrap(),
            "KubeadmControlPlane c1-cp: OpenStackMachineTemplate spec.flavor: flavor \"m1.mediumm\" not found in cloud \"prod\""
        );
        // An identity that is not a Secret, or none: nothing to ask the cloud with.
        let mut other = req.clone();
        other.items[0].object["spec"]["template"]["spec"]["identityRef"]["type"] =
            json!("ClusterIdentity");
        assert_eq!(plan_for("openstack-v1", &other), None);
        let mut none = req.clone();
        none.items.remove(0);
        assert_eq!(plan_for("openstack-v1", &none), None);
    }

    #[test]
    fn openstack_pack_names_flavors_images_networks_and_overrides() {
        let req = request(
            json!({
                "openstackCluster": {"externalNetworkID": "7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11",
                    "network": {"name": "vt-net"}, "subnet": {"id": "1c0ffee0-0000-4000-8000-000000000001"},
                    "bastion": {"enabled": false, "flavor": "m1.tiny", "imageName": "cirros"}},
                "openstackControlPlane": {"flavor": "m1.hugee", "image": {"id": "0b1c2d3e-4f50-4617-8899-aabbccddeeff"}},
                "openstackWorker": {"image": {"name": "ubuntu"}, "serverGroup": {"name": "vt-sg"}},
            }),
            json!([{"holderReference": {"apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "MachineDeployment",
                    "namespace": "ns1", "name": "c1-md-0", "fieldPath": "spec.template.spec.infrastructureRef"},
                    "object": {}, "variables": [{"name": "openstackWorker",
                        "value": {"flavor": "m1.large", "image": {"name": "ubuntu"}}}]}]),
        );
        let p = plan_for("openstack-v1", &req).unwrap();
        assert_eq!((p.namespace.as_str(), p.cluster.as_str()), ("ns1", "c1"));
        assert_eq!(p.secret, "c1-cloud-config");
        assert_eq!(p.cloud, "openstack");
        assert_eq!(
            lines(&p),
            vec![
                "variable openstackCluster.externalNetworkID -> external network ID \"7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11\"",
                "variable openstackCluster.network.name -> network \"vt-net\"",
                "variable openstackCluster.subnet.id -> subnet ID \"1c0ffee0-0000-4000-8000-000000000001\"",
                "variable openstackControlPlane.flavor -> flavor \"m1.hugee\"",
                "variable openstackControlPlane.image.id -> image ID \"0b1c2d3e-4f50-4617-8899-aabbccddeeff\"",
                "variable openstackWorker.flavor -> flavor \"m1.medium\"",
                "variable openstackWorker.image.name -> image \"ubuntu\"",
                "variable openstackWorker.serverGroup.name -> server group \"vt-sg\"",
                "MachineDeployment c1-md-0: variable openstackWorker.flavor -> flavor \"m1.large\"",
                "MachineDeployment c1-md-0: variable openstackWorker.image.name -> image \"ubuntu\"",
            ]
        );
        // The bastion counts only when enabled; the identity comes from the variables.
        let req = request(
            json!({
                "openstackCluster": {"identity": {"secretName": "creds", "cloudName": "prod"},
                    "bastion": {"enabled": true, "flavor": "m1.tiny", "imageName": "cirros"}},
            }),
            json!([]),
        );
        let p = plan_for("openstack-v1", &req).unwrap();
        assert_eq!((p.secret.as_str(), p.cloud.as_str()), ("creds", "prod"));
        assert_eq!(
            lines(&p),
            vec![
                "variable openstackCluster.bastion.flavor -> flavor \"m1.tiny\"",
                "variable openstackCluster.bastion.imageName -> image \"cirros\"",
            ]
        );
    }

    #[test]
    fn magnum_pack_reads_ids_and_its_identity_variable() {
        let req = request(
            json!({
                "clusterIdentityRefName": "kube-x-cloud-config",
                "controlPlaneFlavor": "m1.large", "flavor": "m1.medium",
                "imageUUID": "0b1c2d3e-4f50-4617-8899-aabbccddeeff",
                "externalNetworkId": "7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11",
                "fixedNetworkId": "", "fixedSubnetId": "",
                "serverGroupId": "5d12f6fd-a196-4bf0-ae4c-1f639a523a52",
            }),
            json!([]),
        );
        let p = plan_for("magnum-v1", &req).unwrap();
        assert_eq!(
            (p.secret.as_str(), p.cloud.as_str()),
            ("kube-x-cloud-config", "default")
        );
        assert_eq!(
            lines(&p),
            vec![
                "variable controlPlaneFlavor -> flavor \"m1.large\"",
                "variable externalNetworkId -> external network ID \"7f0c2d8e-3a51-4b35-9a1e-0c5a8f3e2b11\"",
                "variable flavor -> flavor \"m1.medium\"",
                "variable imageUUID -> image ID \"0b1c2d3e-4f50-4617-8899-aabbccddeeff\"",
                "variable serverGroupId -> server group ID \"5d12f6fd-a196-4bf0-ae4c-1f639a523a52\"",
            ]
        );
        assert_eq!(p.lookups().len(), 5);
    }

    fn creation(pack: &str, cluster: Value) -> Option<CreationPlan> {
        let e = engine();
        let p = e.packs().iter().find(|p| p.name == pack).unwrap();
        let cluster = Cluster::from_value(&cluster).unwrap();
        creation_plan(
            &p.name,
            p.cloud_checks.as_ref().unwrap(),
            &p.variables,
            &cluster,
        )
    }

    fn sized(plan: &CreationPlan) -> Vec<(String, u64, String)> {
        plan.machines
            .iter()
            .map(|m| (m.of.clone(), m.replicas, m.flavor.1.clone()))
            .collect()
    }

    /// A Cluster as the API server holds it when BeforeClusterCreate is called: its
    /// own variables, overrides and replicas, nothing patched yet.
    #[test]
    fn a_new_cluster_is_checked_and_sized_from_its_own_variables() {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "prod", "namespace": "ns1", "uid": "u-1"},
            "spec": {"topology": {"classRef": {"name": "openstack-kubeadm"}, "version": "v1.33.1",
                "variables": [
                    {"name": "openstackControlPlane", "value": {"flavor": "m1.large",
                        "image": {"name": "ubuntu-2404-kube-v1.33.1"}}},
                    {"name": "openstackCluster", "value": {"bastion": {"enabled": true,
                        "flavor": "m1.tiny", "imageName": "cirros"}}},
                    {"name": "openstackWorker", "value": {"image": {"name": "ubuntu"}}}],
                "controlPlane": {"replicas": 3},
                "workers": {"machineDeployments": [
                    {"class": "default-worker", "name": "md-0", "replicas": 2},
                    {"class": "default-worker", "name": "gpu", "replicas": 0,
                     "variables": {"overrides": [{"name": "openstackWorker", "value": {"flavor": "g1.xlarge",
                         "image": {"name": "ubuntu"}}}]}},
                    {"class": "default-worker", "name": "auto",
                     "metadata": {"annotations": {AUTOSCALER_MIN_SIZE_ANNOTATION: "4"}},
                     "variables": {"overrides": [{"name": "openstackWorker", "value": {"flavor": "m1.xlarge",
                         "image": {"name": "ubuntu-gpu"}}}]}},
                    {"class": "default-worker", "name": "md-1"}]}}}
        });
        let p = creation("openstack-v1", cluster.clone()).unwrap();
        assert_eq!(
            (p.cloud.namespace.as_str(), p.cloud.cluster.as_str()),
            ("ns1", "prod")
        );
        assert_eq!(p.cloud.cluster_uid.as_deref(), Some("u-1"));
        assert_eq!(p.cloud.secret, "prod-cloud-config");
        assert_eq!(
            lines(&p.cloud),
            vec![
                "variable openstackCluster.bastion.flavor -> flavor \"m1.tiny\"",
                "variable openstackCluster.bastion.imageName -> image \"cirros\"",
                "variable openstackControlPlane.flavor -> flavor \"m1.large\"",
                "variable openstackControlPlane.image.name -> image \"ubuntu-2404-kube-v1.33.1\"",
                // The pack's default flavor for the workers, then each override.
                "variable openstackWorker.flavor -> flavor \"m1.medium\"",
                "variable openstackWorker.image.name -> image \"ubuntu\"",
                "MachineDeployment auto: variable openstackWorker.flavor -> flavor \"m1.xlarge\"",
                "MachineDeployment auto: variable openstackWorker.image.name -> image \"ubuntu-gpu\"",
                "MachineDeployment gpu: variable openstackWorker.flavor -> flavor \"g1.xlarge\"",
                "MachineDeployment gpu: variable openstackWorker.image.name -> image \"ubuntu\"",
            ]
        );
        // Replicas as CAPI's webhooks default them; a deployment at 0 starts nothing.
        assert_eq!(
            sized(&p),
            vec![
                ("control plane".into(), 3, "m1.large".into()),
                ("MachineDeployment md-0".into(), 2, "m1.medium".into()),
                ("MachineDeployment auto".into(), 4, "m1.xlarge".into()),
                ("MachineDeployment md-1".into(), 1, "m1.medium".into()),
                ("bastion".into(), 1, "m1.tiny".into()),
            ]
        );
        // The same Cluster in v1beta1, without a bastion and replicas: one of each.
        let v1 = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "dev", "namespace": "ns1"},
            "spec": {"topology": {"class": "openstack-kubeadm", "version": "v1.33.1",
                "variables": [
                    {"name": "openstackControlPlane", "value": {"image": {"name": "ubuntu"}}},
                    {"name": "openstackWorker", "value": {"image": {"name": "ubuntu"}}}],
                "controlPlane": {"variables": {"overrides": [
                    {"name": "openstackControlPlane", "value": {"flavor": "m1.small",
                        "image": {"name": "ubuntu"}}}]}},
                "workers": {"machineDeployments": [{"class": "default-worker", "name": "md-0"}]}}}
        });
        let p = creation("openstack-v1", v1).unwrap();
        assert_eq!(
            sized(&p),
            vec![
                ("control plane".into(), 1, "m1.small".into()),
                ("MachineDeployment md-0".into(), 1, "m1.medium".into()),
            ]
        );
        assert!(
            lines(&p.cloud).contains(
                &"control plane: variable openstackControlPlane.flavor -> flavor \"m1.small\""
                    .to_string()
            ),
            "{:?}",
            lines(&p.cloud)
        );
    }

    #[test]
    fn a_new_magnum_cluster_is_sized_by_its_two_flavors() {
        let cluster = json!({
            "apiVersion": "cluster.x-k8s.io/v1beta1", "kind": "Cluster",
            "metadata": {"name": "kube-ab12c", "namespace": "magnum-system"},
            "spec": {"topology": {"class": "magnum-v0.30.0", "version": "v1.33.1",
                "variables": [
                    {"name": "clusterIdentityRefName", "value": "kube-ab12c-cloud-config"},
                    {"name": "controlPlaneFlavor", "value": "m1.large"},
                    {"name": "flavor", "value": "m1.medium"},
                    {"name": "imageUUID", "value": "0b1c2d3e-4f50-4617-8899-aabbccddeeff"}],
                "controlPlane": {"replicas": 1},
                "workers": {"machineDeployments": [
                    {"class": "default-worker", "name": "default-worker", "replicas": 3},
                    {"class": "default-worker", "name": "big", "replicas": 1,
                     "variables": {"overrides": [{"name": "flavor", "value": "m1.xlarge"}]}}]}}}
        });
        let p = creation("magnum-v1", cluster).unwrap();
        assert_eq!(
            (p.cloud.secret.as_str(), p.cloud.cloud.as_str()),
            ("kube-ab12c-cloud-config", "default")
        );
        assert_eq!(
            sized(&p),
            vec![
                ("control plane".into(), 1, "m1.large".into()),
                (
                    "MachineDeployment default-worker".into(),
                    3,
                    "m1.medium".into()
                ),
                ("MachineDeployment big".into(), 1, "m1.xlarge".into()),
            ]
        );
    }

    #[test]
    fn only_a_flavor_sizes_machines() {
        let e = engine();
        let p = e.packs().iter().find(|p| p.name == "openstack-v1").unwrap();
        let bad = json!({"resources": [
            {"variable": "openstackWorker.image", "kind": "image", "machines": "workers"},
            {"variable": "openstackWorker.flavor", "kind": "flavor", "machines": "nodes"}]});
        let problems = parse(&bad, &p.variables).unwrap_err();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].1.contains("unknown variant"), "{problems:?}");
        let bad = json!({"resources": [
            {"variable": "openstackWorker.image", "kind": "image", "machines": "workers"}]});
        let problems = parse(&bad, &p.variables).unwrap_err();
        assert_eq!(
            problems,
            vec![(
                "cloudChecks.resources[0].machines".to_string(),
                "only a flavor sizes machines".to_string()
            )]
        );
    }

    #[test]
    fn no_plan_without_values_or_cluster() {
        // Another pack's variables only: nothing of ours to check.
        let req = request(json!({"networking": {}}), json!([]));
        assert_eq!(plan_for("magnum-v1", &req), None);
        let req: ValidateTopologyRequest = serde_json::from_value(json!({"variables": [
            {"name": "controlPlaneFlavor", "value": "m1.large"}], "items": []}))
        .unwrap();
        assert_eq!(plan_for("magnum-v1", &req), None);
    }

    #[test]
    fn messages_name_the_variable_the_resource_and_the_cloud() {
        let place = Place::variable("", "openstackControlPlane.flavor");
        let flavor = Lookup {
            kind: ResourceKind::Flavor,
            by: By::Name,
            value: "m1.hugee".into(),
        };
        let cloud = cloud_label("default", Some("RegionOne"));
        assert_eq!(problem(&place, &flavor, &Found::One, &cloud), None);
        assert_eq!(
            problem(&place, &flavor, &Found::Missing, &cloud).unwrap(),
            "variable openstackControlPlane.flavor: flavor \"m1.hugee\" not found in cloud \"default\" (region RegionOne)"
        );
        let image = Lookup {
            kind: ResourceKind::Image,
            by: By::Name,
            value: "ubuntu".into(),
        };
        let md = Place::variable("MachineDeployment md-0: ", "openstackWorker.image.name");
        assert_eq!(
            problem(&md, &image, &Found::Many(2), &cloud_label("c", None)).unwrap(),
            "MachineDeployment md-0: variable openstackWorker.image.name: 2 images named \"ubuntu\" in cloud \"c\"; the name must match exactly one"
        );
        let ext = Lookup {
            kind: ResourceKind::ExternalNetwork,
            by: By::Id,
            value: "n1".into(),
        };
        assert_eq!(
            problem(&place, &ext, &Found::NotExternal, &cloud).unwrap(),
            "variable openstackControlPlane.flavor: network ID \"n1\" in cloud \"default\" (region RegionOne) is not an external network"
        );
    }

    #[test]
    fn paths_must_exist_in_the_pack_schemas() {
        let e = engine();
        let p = e.packs().iter().find(|p| p.name == "openstack-v1").unwrap();
        let bad = json!({"resources": [
            {"variable": "openstackControlPlane.flavour", "kind": "flavor"},
            {"variable": "nope", "kind": "image"},
            {"variable": "openstackWorker.flavor", "kind": "flavor", "when": "openstackWorker.x"}]});
        let problems = parse(&bad, &p.variables).unwrap_err();
        assert_eq!(problems.len(), 3, "{problems:?}");
        assert_eq!(problems[0].0, "cloudChecks.resources[0].variable");
        assert!(problems[1].1.contains("not a variable"), "{problems:?}");
        let bad = json!({"resources": [{"variable": "openstackWorker.flavor", "kind": "volume"}]});
        let problems = parse(&bad, &p.variables).unwrap_err();
        assert!(
            problems[0].0.starts_with("cloudChecks.resources[0]"),
            "{problems:?}"
        );
    }
}
