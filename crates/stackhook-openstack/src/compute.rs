//! Nova (service type `compute`, v2.1): availability zones, server groups,
//! flavors and servers, each request pinned to a microversion.
//!
//! Most calls pin CAPO's floor (2.38) so that answers keep one shape. Server
//! groups are the exception: their body changed at 2.64 (`policies` list to
//! `policy` + `rules`), and clouds pinned below it (the Magnum management
//! cloud runs at 2.63) refuse the new body. So each [`Nova`] client reads the
//! version document once, takes the highest microversion both sides speak
//! (optionally capped), and builds the server-group body for that version.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use reqwest::Method;
use secrecy::{ExposeSecret, SecretSlice};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};
use tokio::sync::OnceCell;

use crate::error::OsError;
use crate::session::{Headers, Session};

const SERVICE: &[&str] = &["compute"];

/// CAPO's floor: every Nova call it makes works at 2.38.
pub const BASE_MICROVERSION: &str = "2.38";
/// The server-group body with a single `policy` (and `rules`).
pub const SERVER_GROUP_MICROVERSION: &str = "2.64";

/// Server tags in the create body need 2.52; CAPO sends 2.53 with tags.
pub const SERVER_TAGS_MICROVERSION: &str = "2.53";

/// Both header spellings: older Novas know only the second.
pub fn microversion_headers(version: &str) -> Headers {
    vec![
        ("OpenStack-API-Version", format!("compute {version}")),
        ("X-OpenStack-Nova-API-Version", version.to_owned()),
    ]
}

/// A Nova microversion, `major.minor`. Compared as numbers: as strings,
/// "2.9" would sort after "2.15".
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Microversion {
    pub major: u32,
    pub minor: u32,
}

impl Microversion {
    pub const fn new(major: u32, minor: u32) -> Self {
        Self { major, minor }
    }

    /// `"2.64"` → 2.64; `None` for anything else (Nova's version document
    /// has an empty string when the API has no microversions).
    pub fn parse(s: &str) -> Option<Self> {
        let (major, minor) = s.trim().split_once('.')?;
        Some(Self::new(major.parse().ok()?, minor.parse().ok()?))
    }
}

impl fmt::Display for Microversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// What a v2.1 API without microversions speaks.
pub const MICROVERSION_2_1: Microversion = Microversion::new(2, 1);
/// `soft-affinity` and `soft-anti-affinity` server groups.
pub const SOFT_POLICIES: Microversion = Microversion::new(2, 15);
/// Device tags in `block_device_mapping_v2` (2.32, broken until 2.42).
pub const DEVICE_TAGS: Microversion = Microversion::new(2, 42);
/// Server tags on create (2.52); CAPO sends 2.53, as [`SERVER_TAGS_MICROVERSION`].
pub const SERVER_TAGS: Microversion = Microversion::new(2, 53);
/// The `{"policy", "rules"}` server-group body; `policies` is refused from here.
pub const POLICY_BODY: Microversion = Microversion::new(2, 64);
/// `volume_type` in `block_device_mapping_v2`.
pub const DEVICE_VOLUME_TYPE: Microversion = Microversion::new(2, 67);
/// [`BASE_MICROVERSION`] as a number.
pub const BASE: Microversion = Microversion::new(2, 38);

/// The microversions a Nova offers, from its version document.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VersionRange {
    pub min: Microversion,
    pub max: Microversion,
}

/// Reads `{"version": {...}}` (a versioned endpoint such as `.../v2.1`) or
/// `{"versions": [...]}` (the unversioned root, where the `v2.1` entry
/// counts). Empty `version`/`min_version` mean a v2.1 API without
/// microversions, which speaks 2.1 only.
pub fn parse_version_document(doc: &Value) -> Option<VersionRange> {
    let entry = match doc.get("version") {
        Some(v) => v,
        None => doc
            .get("versions")?
            .as_array()?
            .iter()
            .find(|v| v.get("id").and_then(Value::as_str) == Some("v2.1"))?,
    };
    let field = |k: &str| {
        entry
            .get(k)
            .and_then(Value::as_str)
            .and_then(Microversion::parse)
    };
    let max = field("version").unwrap_or(MICROVERSION_2_1);
    let min = field("min_version").unwrap_or(MICROVERSION_2_1).min(max);
    Some(VersionRange { min, max })
}

/// The microversion to use: Nova's maximum, lowered to `cap` when given.
/// Fails when the cap is below what Nova still accepts.
pub fn negotiate(
    offered: VersionRange,
    cap: Option<Microversion>,
) -> Result<Microversion, OsError> {
    let chosen = cap.map_or(offered.max, |c| c.min(offered.max));
    if chosen < offered.min {
        return Err(invalid(format!(
            "microversions capped at {chosen}, but this Nova accepts {} to {}",
            offered.min, offered.max
        )));
    }
    Ok(chosen)
}

/// The path, relative to the catalog URL, of the version document. The
/// versioned URL (`.../v2.1`) serves it itself; catalogs that append the
/// project ID (`.../v2.1/<project>`) need one segment up, which the URL
/// parser resolves before sending.
pub fn version_document_path(endpoint: &str) -> &'static str {
    let path = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split_once('/')
        .map_or("", |(_, path)| path)
        .trim_end_matches('/');
    let last = path.rsplit('/').next().unwrap_or_default();
    let versioned = |seg: &str| {
        seg.strip_prefix('v')
            .is_some_and(|v| !v.is_empty() && v.chars().all(|c| c.is_ascii_digit() || c == '.'))
    };
    if path.is_empty() || versioned(last) {
        "/"
    } else {
        "/../"
    }
}

fn invalid(message: impl Into<String>) -> OsError {
    OsError::Invalid {
        service: "compute".into(),
        message: message.into(),
    }
}

/// A server-group policy. Typed so that a spelling mistake fails here, not
/// as a 400 from Nova after a round trip.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ServerGroupPolicy {
    Affinity,
    AntiAffinity,
    SoftAffinity,
    SoftAntiAffinity,
}

impl ServerGroupPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Affinity => "affinity",
            Self::AntiAffinity => "anti-affinity",
            Self::SoftAffinity => "soft-affinity",
            Self::SoftAntiAffinity => "soft-anti-affinity",
        }
    }

    /// Nova's spelling, e.g. `soft-anti-affinity`.
    pub fn parse(s: &str) -> Option<Self> {
        [
            Self::Affinity,
            Self::AntiAffinity,
            Self::SoftAffinity,
            Self::SoftAntiAffinity,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    /// Soft policies need [`SOFT_POLICIES`].
    pub fn is_soft(self) -> bool {
        matches!(self, Self::SoftAffinity | Self::SoftAntiAffinity)
    }
}

impl fmt::Display for ServerGroupPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Server-group rules (2.64+, `anti-affinity` only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerGroupRules {
    /// How many members one host may hold (Nova's default is 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_server_per_host: Option<u32>,
}

impl ServerGroupRules {
    pub fn is_empty(&self) -> bool {
        self.max_server_per_host.is_none()
    }
}

/// The `POST /os-server-groups` body for microversion `at`: `policies` (a
/// one-element list) below 2.64, `policy` and `rules` from 2.64, where
/// Nova refuses `policies`. Fails, without a request, for what `at` cannot
/// express: soft policies below 2.15, rules below 2.64, rules on a policy
/// other than `anti-affinity`.
pub fn server_group_body(
    name: &str,
    policy: ServerGroupPolicy,
    rules: &ServerGroupRules,
    at: Microversion,
) -> Result<Value, OsError> {
    if policy.is_soft() && at < SOFT_POLICIES {
        return Err(invalid(format!(
            "server group policy {policy} needs Nova microversion {SOFT_POLICIES}, \
             this session uses {at}"
        )));
    }
    if !rules.is_empty() && policy != ServerGroupPolicy::AntiAffinity {
        return Err(invalid(format!(
            "server group rules apply to anti-affinity only, not {policy}"
        )));
    }
    if at >= POLICY_BODY {
        let mut group = json!({"name": name, "policy": policy.as_str()});
        if !rules.is_empty() {
            group["rules"] = json!(rules);
        }
        return Ok(json!({ "server_group": group }));
    }
    if !rules.is_empty() {
        return Err(invalid(format!(
            "server group rules need Nova microversion {POLICY_BODY}, this session uses {at}"
        )));
    }
    Ok(json!({"server_group": {"name": name, "policies": [policy.as_str()]}}))
}

/// A Nova availability zone; the available ones become failure domains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AvailabilityZone {
    pub name: String,
    pub available: bool,
}

/// A Nova server group (affinity policy for a machine set), read from
/// either answer shape: `policy` (2.64+) or `policies[0]` (below).
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(from = "WireServerGroup")]
pub struct ServerGroup {
    pub id: String,
    pub name: String,
    /// Nova's spelling; [`ServerGroupPolicy::parse`] types it.
    pub policy: Option<String>,
    /// Empty below 2.64, where groups have no rules.
    pub rules: ServerGroupRules,
    /// Server IDs.
    pub members: Vec<String>,
}

#[derive(Deserialize)]
struct WireServerGroup {
    id: String,
    #[serde(default, deserialize_with = "null_default")]
    name: String,
    #[serde(default)]
    policy: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    policies: Vec<String>,
    #[serde(default, deserialize_with = "null_default")]
    rules: ServerGroupRules,
    #[serde(default, deserialize_with = "null_default")]
    members: Vec<String>,
}

impl From<WireServerGroup> for ServerGroup {
    fn from(w: WireServerGroup) -> Self {
        Self {
            id: w.id,
            name: w.name,
            policy: w.policy.or_else(|| w.policies.into_iter().next()),
            rules: w.rules,
            members: w.members,
        }
    }
}

/// `null` read as the type's default: Nova and Cinder send `null` for
/// unset names and lists where serde's `default` only covers absence.
pub(crate) fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A Nova flavor; specs name it, servers are created with its ID.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Flavor {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// Cores; node reservations scale with them.
    #[serde(default)]
    pub vcpus: u64,
    /// Memory in MiB.
    #[serde(default)]
    pub ram: u64,
    /// Root disk in GiB (0: the image's size, or boot from volume).
    #[serde(default)]
    pub disk: u64,
    /// Ephemeral disk in GiB.
    #[serde(default, rename = "OS-FLV-EXT-DATA:ephemeral")]
    pub ephemeral: u64,
    /// Nova returns them with the flavor from microversion 2.61; read them with
    /// [`Nova::flavor_extra_specs`] below that.
    #[serde(default, deserialize_with = "null_default")]
    pub extra_specs: std::collections::BTreeMap<String, String>,
}

/// One address of a server, from its `addresses` map.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerAddress {
    pub addr: String,
    #[serde(default)]
    pub version: u8,
    /// `fixed` or `floating`.
    #[serde(default, rename = "OS-EXT-IPS:type")]
    pub kind: Option<String>,
}

/// A server's base64 user data as Nova returns it; `Debug` shows only its size.
#[derive(Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub struct UserData(String);

impl UserData {
    /// The base64 text, for the one caller that means to read it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for UserData {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "UserData([{} bytes redacted])", self.0.len())
    }
}

/// Why Nova put a server in ERROR, for the condition message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFault {
    #[serde(default)]
    pub message: String,
}

/// A Nova server as `GET /servers/{id}` shows it, at the base microversion.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Server {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// `BUILD`, `ACTIVE`, `ERROR`, `DELETED`...
    #[serde(default)]
    pub status: String,
    #[serde(default, rename = "OS-EXT-STS:task_state")]
    pub task_state: Option<String>,
    #[serde(default)]
    pub metadata: std::collections::BTreeMap<String, String>,
    /// Network name → addresses.
    #[serde(default)]
    pub addresses: std::collections::BTreeMap<String, Vec<ServerAddress>>,
    #[serde(default)]
    pub key_name: Option<String>,
    #[serde(default)]
    pub fault: Option<ServerFault>,
    /// The zone Nova placed it in (asked or chosen).
    #[serde(default, rename = "OS-EXT-AZ:availability_zone")]
    pub availability_zone: Option<String>,
    /// Base64 user data; shown to admins only. It holds the node's bootstrap
    /// secrets (join tokens, certificates), so `Debug` never prints it.
    #[serde(default, rename = "OS-EXT-SRV-ATTR:user_data")]
    pub user_data: Option<UserData>,
    /// `building`, `active`, `error`...: with `task_state`, tells a server
    /// still being built from one stuck.
    #[serde(default, rename = "OS-EXT-STS:vm_state")]
    pub vm_state: Option<String>,
    #[serde(default)]
    pub flavor: ServerFlavor,
    /// `None` when it boots from a volume (Nova sends `""` then).
    #[serde(default, rename = "image", deserialize_with = "image_id")]
    pub image_id: Option<String>,
    /// Volumes attached, the boot volume included.
    #[serde(
        default,
        rename = "os-extended-volumes:volumes_attached",
        deserialize_with = "null_default"
    )]
    pub volumes_attached: Vec<AttachedVolume>,
    #[serde(default, deserialize_with = "null_default")]
    pub tags: Vec<String>,
    /// Opaque per-project host identity: two members of an anti-affinity
    /// group must differ here.
    #[serde(default, rename = "hostId")]
    pub host_id: String,
}

/// The flavor of a server: its ID below 2.47, its name and sizes from 2.47.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerFlavor {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub original_name: Option<String>,
}

/// A volume attached to a server.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct AttachedVolume {
    pub id: String,
    #[serde(default)]
    pub delete_on_termination: bool,
}

/// `image` is `{"id": ...}`, or `""` for a server booted from a volume.
fn image_id<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Object(o) => o.get("id").and_then(Value::as_str).map(str::to_owned),
        _ => None,
    })
}

impl Server {
    /// Nova finished building it.
    pub fn is_active(&self) -> bool {
        self.status == "ACTIVE"
    }
    /// Nova gave up on it; [`Server::fault`] says why.
    pub fn is_error(&self) -> bool {
        self.status == "ERROR"
    }
}

/// Where a block device's data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockSource {
    Image,
    Volume,
    Snapshot,
    /// An empty disk of `volume_size` GiB.
    Blank,
}

/// Where a block device lives: on the hypervisor or as a Cinder volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BlockDestination {
    Local,
    Volume,
}

/// `None` or `Some("")`: a field the request leaves out. Packs render an
/// unset optional string as `''`; CAPO's gophercloud bodies drop empty
/// strings (`omitempty`), and Nova, Neutron and Cinder refuse many of them
/// (`key_name: ''` is a 400).
pub(crate) fn unset(value: &Option<String>) -> bool {
    value.as_deref().is_none_or(str::is_empty)
}

/// The value of an optional string field, `None` when it is [`unset`].
pub(crate) fn given(value: &Option<String>) -> Option<&str> {
    value.as_deref().filter(|s| !s.is_empty())
}

/// One `block_device_mapping_v2` entry. The constructors build the entries
/// CAPO sends; the fields stay public for anything else. Empty strings are
/// left out like `None`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockDevice {
    pub source_type: BlockSource,
    pub destination_type: BlockDestination,
    /// Image, volume or snapshot ID; none for blank disks.
    #[serde(skip_serializing_if = "unset")]
    pub uuid: Option<String>,
    /// 0 for the boot disk, -1 for the others.
    pub boot_index: i32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<u32>,
    pub delete_on_termination: bool,
    /// Device tag seen by the guest in the metadata (needs [`DEVICE_TAGS`]).
    #[serde(skip_serializing_if = "unset")]
    pub tag: Option<String>,
    /// Cinder volume type of a volume Nova creates (needs [`DEVICE_VOLUME_TYPE`]).
    #[serde(skip_serializing_if = "unset")]
    pub volume_type: Option<String>,
}

impl BlockDevice {
    /// Boots from an existing volume (CAPO's root volume, created first so
    /// that its size, type and zone are ours). `delete_on_termination`
    /// says whether Nova deletes it with the server.
    pub fn boot_volume(volume_id: &str, delete_on_termination: bool) -> Self {
        Self {
            source_type: BlockSource::Volume,
            destination_type: BlockDestination::Volume,
            uuid: Some(volume_id.to_owned()),
            boot_index: 0,
            volume_size: None,
            delete_on_termination,
            tag: None,
            volume_type: None,
        }
    }

    /// Boots from the image on the hypervisor's disk; only needed beside
    /// other devices (otherwise `imageRef` alone does it).
    pub fn boot_image_local(image_id: &str) -> Self {
        Self {
            source_type: BlockSource::Image,
            destination_type: BlockDestination::Local,
            uuid: Some(image_id.to_owned()),
            boot_index: 0,
            volume_size: None,
            delete_on_termination: true,
            tag: None,
            volume_type: None,
        }
    }

    /// Boots from a new volume Nova creates from the image and deletes with
    /// the server.
    pub fn boot_image_to_volume(image_id: &str, size_gib: u32) -> Self {
        Self {
            source_type: BlockSource::Image,
            destination_type: BlockDestination::Volume,
            uuid: Some(image_id.to_owned()),
            boot_index: 0,
            volume_size: Some(size_gib),
            delete_on_termination: true,
            tag: None,
            volume_type: None,
        }
    }

    /// Attaches an existing volume as a data disk, deleted with the server
    /// (CAPO's `additionalBlockDevices` of type Volume).
    pub fn data_volume(volume_id: &str, tag: Option<&str>) -> Self {
        Self {
            source_type: BlockSource::Volume,
            destination_type: BlockDestination::Volume,
            uuid: Some(volume_id.to_owned()),
            boot_index: -1,
            volume_size: None,
            delete_on_termination: true,
            tag: tag.map(str::to_owned),
            volume_type: None,
        }
    }

    /// An empty local disk (CAPO's `additionalBlockDevices` of type Local).
    pub fn local_disk(size_gib: u32, tag: Option<&str>) -> Self {
        Self {
            source_type: BlockSource::Blank,
            destination_type: BlockDestination::Local,
            uuid: None,
            boot_index: -1,
            volume_size: Some(size_gib),
            delete_on_termination: true,
            tag: tag.map(str::to_owned),
            volume_type: None,
        }
    }
}

/// Nova's limit on `user_data`, counted after base64.
pub const MAX_USER_DATA: usize = 65535;

/// A `POST /servers` as CAPO sends it. [`ServerCreate::body`] and
/// [`ServerCreate::microversion`] give the arguments of
/// [`Compute::create_server`]; the type exists because the raw body has
/// traps: user data must be base64, scheduler hints go beside the `server`
/// envelope, not in it, and tags or device tags fail below the microversion
/// that brought them. `Debug` prints the user data (join tokens, certificates)
/// redacted.
///
/// An optional field that is empty (`Some("")`, empty user data, an empty
/// tag) is left out of the body as if it were `None`, as CAPO's gophercloud
/// body does (`omitempty`; `keypairs.CreateOptsExt` adds `key_name` only
/// when set): Nova answers 400 to `key_name: ""`. Metadata values stay as
/// they are: Nova takes an empty one.
#[derive(Clone, Debug, Default)]
pub struct ServerCreate {
    pub name: String,
    pub flavor_id: String,
    /// `None` when a [`BlockDevice`] with boot index 0 boots the server.
    pub image_id: Option<String>,
    /// Neutron port IDs, in the order the guest sees its interfaces.
    pub port_ids: Vec<String>,
    /// Raw bootstrap data; read only to encode it into the body.
    pub user_data: Option<SecretSlice<u8>>,
    pub availability_zone: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub tags: Vec<String>,
    pub key_name: Option<String>,
    pub config_drive: Option<bool>,
    pub block_devices: Vec<BlockDevice>,
    /// Sent as the scheduler hint `group`.
    pub server_group_id: Option<String>,
    /// More scheduler hints (CAPO's `schedulerHintAdditionalProperties`).
    pub scheduler_hints: Map<String, Value>,
}

impl ServerCreate {
    /// The lowest microversion the body works at: CAPO's floor, raised for
    /// server or device tags and for volume types on devices.
    pub fn microversion(&self) -> Microversion {
        let mut at = BASE;
        if self.tags().next().is_some() || self.block_devices.iter().any(|d| !unset(&d.tag)) {
            at = at.max(SERVER_TAGS);
        }
        if self.block_devices.iter().any(|d| !unset(&d.volume_type)) {
            at = at.max(DEVICE_VOLUME_TYPE);
        }
        at
    }

    /// The tags sent: the non-empty ones (Nova refuses an empty tag).
    fn tags(&self) -> impl Iterator<Item = &String> {
        self.tags.iter().filter(|t| !t.is_empty())
    }

    /// The `server` object without its envelope; the hints are under
    /// `os:scheduler_hints`, which [`Compute::create_server`] moves beside
    /// the envelope. Fails without a request when the server would have
    /// nothing to boot or no network, or the user data is over Nova's limit.
    pub fn body(&self) -> Result<Value, OsError> {
        let boots_from_device = self.block_devices.iter().any(|d| d.boot_index == 0);
        let image_id = given(&self.image_id);
        if image_id.is_none() && !boots_from_device {
            return Err(invalid(format!(
                "server {}: neither an image nor a boot device",
                self.name
            )));
        }
        if self.port_ids.is_empty() {
            return Err(invalid(format!("server {}: no port", self.name)));
        }
        let mut body = json!({
            "name": self.name,
            "flavorRef": self.flavor_id,
            "networks": self.port_ids.iter().map(|p| json!({"port": p})).collect::<Vec<_>>(),
        });
        if let Some(image) = image_id {
            // As CAPO: when a volume boots, the mapping names it and imageRef stays
            // out; an image mapped to the local disk (beside other devices) needs
            // imageRef too, or Nova answers "Mapping image to local is not supported".
            let boots_from_volume = self
                .block_devices
                .iter()
                .any(|d| d.boot_index == 0 && d.destination_type == BlockDestination::Volume);
            if !boots_from_volume {
                body["imageRef"] = json!(image);
            }
        }
        if let Some(data) = self
            .user_data
            .as_ref()
            .filter(|d| !d.expose_secret().is_empty())
        {
            let encoded = base64(data.expose_secret());
            if encoded.len() > MAX_USER_DATA {
                return Err(invalid(format!(
                    "server {}: user data is {} bytes in base64, Nova takes at most {MAX_USER_DATA}",
                    self.name,
                    encoded.len()
                )));
            }
            body["user_data"] = json!(encoded);
        }
        if let Some(az) = given(&self.availability_zone) {
            body["availability_zone"] = json!(az);
        }
        if !self.metadata.is_empty() {
            body["metadata"] = json!(self.metadata);
        }
        let tags: Vec<&String> = self.tags().collect();
        if !tags.is_empty() {
            body["tags"] = json!(tags);
        }
        if let Some(key) = given(&self.key_name) {
            body["key_name"] = json!(key);
        }
        if let Some(cd) = self.config_drive {
            body["config_drive"] = json!(cd);
        }
        if !self.block_devices.is_empty() {
            body["block_device_mapping_v2"] = json!(self.block_devices);
        }
        let mut hints = self.scheduler_hints.clone();
        if let Some(group) = given(&self.server_group_id) {
            hints.insert("group".into(), json!(group));
        }
        if !hints.is_empty() {
            body[SCHEDULER_HINTS_KEY] = Value::Object(hints);
        }
        Ok(body)
    }
}

/// Key of the scheduler hints (server group, custom filters) in a create body.
pub const SCHEDULER_HINTS_KEY: &str = "os:scheduler_hints";

/// `{"server": body}`, with `os:scheduler_hints` moved out of `body` to sit beside
/// the server object, where Nova reads it.
pub fn server_envelope(mut body: Value) -> Value {
    let hints = body
        .as_object_mut()
        .and_then(|o| o.remove(SCHEDULER_HINTS_KEY));
    let mut envelope = json!({ "server": body });
    if let Some(h) = hints.filter(|h| h.as_object().is_some_and(|o| !o.is_empty())) {
        envelope[SCHEDULER_HINTS_KEY] = h;
    }
    envelope
}

/// Standard base64 with padding, as Nova wants `user_data`.
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The Nova calls the cluster flow needs.
pub trait Compute: Send + Sync {
    /// The zones and whether each is available.
    fn availability_zones(
        &self,
    ) -> impl Future<Output = Result<Vec<AvailabilityZone>, OsError>> + Send;
    /// All flavors visible to the project (names are resolved client side).
    fn flavors(&self) -> impl Future<Output = Result<Vec<Flavor>, OsError>> + Send;
    /// Servers whose name matches the regex `name` (Nova filters by regex).
    fn servers_named(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<Server>, OsError>> + Send;
    /// One server; a 404 means it is gone.
    fn server(&self, id: &str) -> impl Future<Output = Result<Server, OsError>> + Send;
    /// `body` is the object without its `{"server": ...}` envelope (see
    /// [`ServerCreate::body`]); an `os:scheduler_hints` key in it is sent
    /// beside the envelope, where Nova reads it. The answer holds only the ID.
    fn create_server(
        &self,
        body: Value,
        microversion: &str,
    ) -> impl Future<Output = Result<String, OsError>> + Send;
    /// Starts the deletion; the server lingers (task state `deleting`) until Nova is done.
    fn delete_server(&self, id: &str) -> impl Future<Output = Result<(), OsError>> + Send;

    /// The microversion negotiated with this Nova: its maximum, lowered to
    /// the client's cap. Read once per client, then cached.
    fn microversion(&self) -> impl Future<Output = Result<Microversion, OsError>> + Send;
    /// All server groups of the project (CAPO resolves `serverGroup.filter.name`
    /// among them; names are not unique).
    fn server_groups(&self) -> impl Future<Output = Result<Vec<ServerGroup>, OsError>> + Send;
    /// One server group; a 404 means it is gone.
    fn server_group(&self, id: &str) -> impl Future<Output = Result<ServerGroup, OsError>> + Send;
    /// Creates a group with the body the negotiated microversion takes
    /// ([`server_group_body`]); [`OsError::Invalid`] when it cannot express
    /// the policy or the rules.
    fn create_server_group(
        &self,
        name: &str,
        policy: ServerGroupPolicy,
        rules: &ServerGroupRules,
    ) -> impl Future<Output = Result<ServerGroup, OsError>> + Send;
    /// Deletes a server group. Nova allows it with members left; they
    /// simply lose the group's constraint.
    fn delete_server_group(&self, id: &str) -> impl Future<Output = Result<(), OsError>> + Send;
}

/// The real Nova client.
#[derive(Clone, Debug)]
pub struct Nova {
    session: Arc<Session>,
    /// The highest microversion this client may negotiate, whatever Nova
    /// offers: a management cloud pinned below 2.64 is reproduced by 2.63.
    max_microversion: Option<Microversion>,
    /// Negotiated on first use; clones share it, so one session asks once.
    negotiated: Arc<OnceCell<Microversion>>,
}

impl Nova {
    /// A Nova client on `session`, sharing its token with the other services.
    pub fn new(session: Arc<Session>) -> Self {
        Self {
            session,
            max_microversion: None,
            negotiated: Arc::new(OnceCell::new()),
        }
    }

    /// The same client, negotiating at most `max`. Starts a new negotiation
    /// (the cached answer may be above the cap).
    pub fn with_max_microversion(mut self, max: Microversion) -> Self {
        self.max_microversion = Some(max);
        self.negotiated = Arc::new(OnceCell::new());
        self
    }

    /// The microversions Nova offers, from its version document (one GET,
    /// uncached; [`Compute::microversion`] caches the outcome).
    pub async fn versions(&self) -> Result<VersionRange, OsError> {
        let endpoint = self.session.endpoint(SERVICE).await?;
        let path = version_document_path(&endpoint);
        let v = self
            .session
            .request(Method::GET, SERVICE, path, &[], None, &vec![])
            .await?
            .ok_or_else(|| decode_err(path, "empty version document"))?;
        parse_version_document(&v).ok_or_else(|| decode_err(path, "no v2.1 version"))
    }

    /// Starts detaching a volume from a server (`DELETE
    /// /servers/{id}/os-volume_attachments/{volume}`); the volume turns
    /// `available` once Nova and Cinder are done.
    pub async fn detach_volume(&self, server_id: &str, volume_id: &str) -> Result<(), OsError> {
        let path = format!("/servers/{server_id}/os-volume_attachments/{volume_id}");
        self.call(Method::DELETE, &path, &[], None, BASE_MICROVERSION)
            .await
            .map(drop)
    }
}

fn decode_err(path: &str, message: impl Into<String>) -> OsError {
    OsError::Decode {
        service: "compute".into(),
        path: path.to_owned(),
        message: message.into(),
    }
}

impl Compute for Nova {
    async fn availability_zones(&self) -> Result<Vec<AvailabilityZone>, OsError> {
        let path = "/os-availability-zone";
        let v = self
            .call(Method::GET, path, &[], None, BASE_MICROVERSION)
            .await?;
        parse_zones(v.as_ref()).ok_or_else(|| decode_err(path, "no availabilityZoneInfo"))
    }

    async fn flavors(&self) -> Result<Vec<Flavor>, OsError> {
        let path = "/flavors/detail";
        take(self.get_json(path, &[]).await?, "flavors", path)
    }

    async fn servers_named(&self, name: &str) -> Result<Vec<Server>, OsError> {
        let path = "/servers/detail";
        take(
            self.get_json(path, &[("name", name.to_owned())]).await?,
            "servers",
            path,
        )
    }

    async fn server(&self, id: &str) -> Result<Server, OsError> {
        let path = format!("/servers/{id}");
        take(self.get_json(&path, &[]).await?, "server", &path)
    }

    async fn create_server(&self, body: Value, microversion: &str) -> Result<String, OsError> {
        let path = "/servers";
        if let (Some(cap), Some(wanted)) =
            (self.max_microversion, Microversion::parse(microversion))
        {
            if wanted > cap {
                return Err(invalid(format!(
                    "this server needs Nova microversion {wanted} (server tags or device tags), \
                     above the cap {cap} this cloud's configuration sets"
                )));
            }
        }
        let body = server_envelope(body);
        let v = self
            .call(Method::POST, path, &[], Some(&body), microversion)
            .await?
            .ok_or_else(|| decode_err(path, "empty response"))?;
        v.pointer("/server/id")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or_else(|| decode_err(path, "no server id"))
    }

    async fn delete_server(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/servers/{id}");
        self.call(Method::DELETE, &path, &[], None, BASE_MICROVERSION)
            .await
            .map(drop)
    }

    async fn microversion(&self) -> Result<Microversion, OsError> {
        self.negotiated
            .get_or_try_init(|| async {
                let offered = self.versions().await?;
                let chosen = negotiate(offered, self.max_microversion)?;
                tracing::debug!(
                    min = %offered.min,
                    max = %offered.max,
                    %chosen,
                    "negotiated the Nova microversion"
                );
                Ok(chosen)
            })
            .await
            .copied()
    }

    async fn server_groups(&self) -> Result<Vec<ServerGroup>, OsError> {
        let path = "/os-server-groups";
        let at = self.microversion().await?.to_string();
        let v = self.call(Method::GET, path, &[], None, &at).await?;
        take(v, "server_groups", path)
    }

    async fn server_group(&self, id: &str) -> Result<ServerGroup, OsError> {
        let path = format!("/os-server-groups/{id}");
        let at = self.microversion().await?.to_string();
        let v = self.call(Method::GET, &path, &[], None, &at).await?;
        take(v, "server_group", &path)
    }

    async fn create_server_group(
        &self,
        name: &str,
        policy: ServerGroupPolicy,
        rules: &ServerGroupRules,
    ) -> Result<ServerGroup, OsError> {
        let path = "/os-server-groups";
        let at = self.microversion().await?;
        let body = server_group_body(name, policy, rules, at)?;
        let v = self
            .call(Method::POST, path, &[], Some(&body), &at.to_string())
            .await?;
        take(v, "server_group", path)
    }

    async fn delete_server_group(&self, id: &str) -> Result<(), OsError> {
        let path = format!("/os-server-groups/{id}");
        let at = self.microversion().await?.to_string();
        self.call(Method::DELETE, &path, &[], None, &at)
            .await
            .map(drop)
    }
}

impl Nova {
    /// A flavor's extra specs (`GET /flavors/{id}/os-extra_specs`): flavor lists at
    /// CAPO's microversion do not carry them, and project readers may read them.
    pub async fn flavor_extra_specs(&self, id: &str) -> Result<BTreeMap<String, String>, OsError> {
        let path = format!(
            "/flavors/{}/os-extra_specs",
            crate::networking::encode_segment(id)
        );
        take(self.get_json(&path, &[]).await?, "extra_specs", &path)
    }

    /// One Nova request at `microversion` (Nova reads the header per call).
    async fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        microversion: &str,
    ) -> Result<Option<Value>, OsError> {
        self.session
            .request(
                method,
                SERVICE,
                path,
                query,
                body,
                &microversion_headers(microversion),
            )
            .await
    }

    async fn get_json(&self, path: &str, query: &[(&str, String)]) -> Result<Value, OsError> {
        self.call(Method::GET, path, query, None, BASE_MICROVERSION)
            .await?
            .ok_or_else(|| decode_err(path, "empty response"))
    }
}

fn take<T: serde::de::DeserializeOwned>(
    v: impl Into<Option<Value>>,
    key: &str,
    path: &str,
) -> Result<T, OsError> {
    let inner = v
        .into()
        .as_mut()
        .and_then(|v| v.get_mut(key))
        .map(Value::take)
        .ok_or_else(|| decode_err(path, format!("no {key}")))?;
    serde_json::from_value(inner).map_err(|e| decode_err(path, e.to_string()))
}

/// `{"availabilityZoneInfo": [{"zoneName", "zoneState": {"available"}}]}`.
pub fn parse_zones(v: Option<&Value>) -> Option<Vec<AvailabilityZone>> {
    let list = v?.get("availabilityZoneInfo")?.as_array()?;
    Some(
        list.iter()
            .filter_map(|z| {
                Some(AvailabilityZone {
                    name: z.get("zoneName")?.as_str()?.to_owned(),
                    available: z
                        .pointer("/zoneState/available")
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                })
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nova_zone_list() {
        let v = json!({"availabilityZoneInfo": [
            {"zoneName": "az1", "zoneState": {"available": true}, "hosts": null},
            {"zoneName": "broken", "zoneState": {"available": false}, "hosts": null}
        ]});
        let zones = parse_zones(Some(&v)).unwrap();
        assert_eq!(zones.len(), 2);
        assert!(zones[0].available && !zones[1].available);
        assert!(parse_zones(Some(&json!({}))).is_none());
    }

    fn mv(s: &str) -> Microversion {
        Microversion::parse(s).unwrap()
    }

    #[test]
    fn orders_microversions_as_numbers() {
        assert!(mv("2.9") < mv("2.15"));
        assert!(mv("2.63") < POLICY_BODY && POLICY_BODY <= mv("2.104"));
        assert_eq!(mv(" 2.64 ").to_string(), "2.64");
        assert_eq!(Microversion::parse(""), None);
        assert_eq!(Microversion::parse("2"), None);
        assert_eq!(BASE.to_string(), BASE_MICROVERSION);
        assert_eq!(SERVER_TAGS.to_string(), SERVER_TAGS_MICROVERSION);
        assert_eq!(POLICY_BODY.to_string(), SERVER_GROUP_MICROVERSION);
    }

    #[test]
    fn reads_version_documents_and_negotiates() {
        let versioned = json!({"version": {"id": "v2.1", "status": "CURRENT",
            "version": "2.104", "min_version": "2.1"}});
        let range = parse_version_document(&versioned).unwrap();
        assert_eq!((range.min, range.max), (mv("2.1"), mv("2.104")));
        let root = json!({"versions": [
            {"id": "v2.0", "version": "", "min_version": ""},
            {"id": "v2.1", "version": "2.63", "min_version": "2.1"}]});
        assert_eq!(parse_version_document(&root).unwrap().max, mv("2.63"));
        let legacy = json!({"version": {"id": "v2.1", "version": "", "min_version": ""}});
        assert_eq!(
            parse_version_document(&legacy),
            Some(VersionRange {
                min: MICROVERSION_2_1,
                max: MICROVERSION_2_1
            })
        );
        assert_eq!(parse_version_document(&json!({"versions": []})), None);

        assert_eq!(negotiate(range, None).unwrap(), mv("2.104"));
        assert_eq!(negotiate(range, Some(mv("2.63"))).unwrap(), mv("2.63"));
        let old = VersionRange {
            min: mv("2.1"),
            max: mv("2.60"),
        };
        assert_eq!(negotiate(old, Some(mv("2.63"))).unwrap(), mv("2.60"));
        let strict = VersionRange {
            min: mv("2.70"),
            max: mv("2.100"),
        };
        let err = negotiate(strict, Some(mv("2.63"))).unwrap_err();
        assert!(matches!(err, OsError::Invalid { .. }), "{err}");
        assert!(!err.is_retryable());
    }

    #[test]
    fn finds_the_version_document() {
        assert_eq!(version_document_path("http://127.0.0.1:17001/v2.1"), "/");
        assert_eq!(
            version_document_path("https://nova.example/compute/v2.1/"),
            "/"
        );
        assert_eq!(version_document_path("https://nova.example:8774"), "/");
        assert_eq!(
            version_document_path("https://nova.example:8774/v2.1/0f5d8b4aa29c"),
            "/../"
        );
        let joined = crate::session::join_url("https://n/v2.1/abc", "/../");
        assert_eq!(
            reqwest::Url::parse(&joined).unwrap().as_str(),
            "https://n/v2.1/"
        );
    }

    #[test]
    fn server_group_body_follows_the_microversion() {
        let none = ServerGroupRules::default();
        let soft = ServerGroupPolicy::SoftAntiAffinity;
        assert_eq!(
            server_group_body("g", soft, &none, mv("2.63")).unwrap(),
            json!({"server_group": {"name": "g", "policies": ["soft-anti-affinity"]}})
        );
        assert_eq!(
            server_group_body("g", soft, &none, mv("2.64")).unwrap(),
            json!({"server_group": {"name": "g", "policy": "soft-anti-affinity"}})
        );
        let two = ServerGroupRules {
            max_server_per_host: Some(2),
        };
        let anti = ServerGroupPolicy::AntiAffinity;
        assert_eq!(
            server_group_body("g", anti, &two, mv("2.90")).unwrap(),
            json!({"server_group": {"name": "g", "policy": "anti-affinity",
                "rules": {"max_server_per_host": 2}}})
        );
        for (policy, rules, at) in [
            (soft, &none, "2.14"),
            (anti, &two, "2.63"),
            (ServerGroupPolicy::Affinity, &two, "2.64"),
        ] {
            let err = server_group_body("g", policy, rules, mv(at)).unwrap_err();
            assert!(
                matches!(err, OsError::Invalid { .. }),
                "{policy} at {at}: {err}"
            );
        }
        assert_eq!(
            server_group_body("g", anti, &none, mv("2.14")).unwrap(),
            json!({"server_group": {"name": "g", "policies": ["anti-affinity"]}})
        );
        assert_eq!(
            ServerGroupPolicy::parse("soft-affinity"),
            Some(ServerGroupPolicy::SoftAffinity)
        );
        assert_eq!(ServerGroupPolicy::parse("soft_affinity"), None);
    }

    #[test]
    fn reads_both_server_group_shapes() {
        let old: ServerGroup = serde_json::from_value(json!({"id": "g1", "name": "n",
            "policies": ["soft-anti-affinity"], "members": ["s1"], "metadata": {}}))
        .unwrap();
        assert_eq!(old.policy.as_deref(), Some("soft-anti-affinity"));
        assert_eq!(old.members, vec!["s1".to_owned()]);
        assert!(old.rules.is_empty());
        let new: ServerGroup = serde_json::from_value(json!({"id": "g2", "name": "n",
            "policy": "anti-affinity", "rules": {"max_server_per_host": 3}, "members": [],
            "project_id": "p", "user_id": "u"}))
        .unwrap();
        assert_eq!(new.policy.as_deref(), Some("anti-affinity"));
        assert_eq!(new.rules.max_server_per_host, Some(3));
    }

    #[test]
    fn decodes_servers_booted_either_way() {
        let bfv: Server = serde_json::from_value(json!({"id": "s", "status": "ACTIVE",
            "image": "", "flavor": {"id": "f1", "links": []},
            "OS-EXT-AZ:availability_zone": "az2", "OS-EXT-STS:task_state": null,
            "os-extended-volumes:volumes_attached": [{"id": "v1",
                "delete_on_termination": true}], "tags": ["a"], "hostId": "h"}))
        .unwrap();
        assert_eq!(bfv.image_id, None);
        assert_eq!(bfv.flavor.id.as_deref(), Some("f1"));
        assert_eq!(bfv.availability_zone.as_deref(), Some("az2"));
        assert!(bfv.volumes_attached[0].delete_on_termination && bfv.is_active());
        let from_image: Server = serde_json::from_value(json!({"id": "s", "status": "ERROR",
            "image": {"id": "i1", "links": []}, "fault": {"message": "No valid host",
            "code": 500}, "flavor": {"original_name": "m1.tiny", "vcpus": 1}}))
        .unwrap();
        assert_eq!(from_image.image_id.as_deref(), Some("i1"));
        assert_eq!(from_image.flavor.original_name.as_deref(), Some("m1.tiny"));
        assert!(from_image.is_error());
    }

    #[test]
    fn server_debug_prints_no_user_data() {
        let server: Server = serde_json::from_value(json!({
            "id": "s1",
            "OS-EXT-SRV-ATTR:user_data": "am9pbi10b2tlbjogc2VjcmV0"
        }))
        .unwrap();
        let debug = format!("{server:?}");
        assert!(!debug.contains("am9pbi10b2tlbjogc2VjcmV0"), "{debug}");
        assert!(debug.contains("[24 bytes redacted]"), "{debug}");
        assert_eq!(
            server.user_data.as_ref().map(UserData::expose),
            Some("am9pbi10b2tlbjogc2VjcmV0")
        );
    }

    #[test]
    fn server_create_debug_prints_no_user_data() {
        let request = ServerCreate {
            user_data: Some(
                b"#cloud-config\ntoken: abcdef.0123456789abcdef\n"
                    .to_vec()
                    .into(),
            ),
            ..machine()
        };
        for shown in [format!("{request:?}"), format!("{request:#?}")] {
            assert!(!shown.contains("0123456789abcdef"), "{shown}");
            // Not as bytes either: `#` `c` `l` are 35, 99, 108.
            assert!(!shown.contains("35, 99, 108"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            assert!(shown.contains("p0") && shown.contains("\"m\""), "{shown}");
        }
        let body = request.body().unwrap();
        assert_eq!(
            body["user_data"],
            base64(b"#cloud-config\ntoken: abcdef.0123456789abcdef\n")
        );
    }

    fn machine() -> ServerCreate {
        ServerCreate {
            name: "m".into(),
            flavor_id: "f".into(),
            image_id: Some("i".into()),
            port_ids: vec!["p0".into(), "p1".into()],
            ..Default::default()
        }
    }

    #[test]
    fn server_create_body_and_microversion() {
        let plain = machine();
        assert_eq!(plain.microversion(), BASE);
        assert_eq!(
            plain.body().unwrap(),
            json!({"name": "m", "flavorRef": "f", "imageRef": "i",
                "networks": [{"port": "p0"}, {"port": "p1"}]})
        );

        let full = ServerCreate {
            image_id: None,
            user_data: Some(b"#cloud-config\n".to_vec().into()),
            availability_zone: Some("az1".into()),
            metadata: [("k".to_owned(), "v".to_owned())].into(),
            tags: vec!["t".into()],
            key_name: Some("key".into()),
            config_drive: Some(true),
            block_devices: vec![
                BlockDevice::boot_volume("root", false),
                BlockDevice::data_volume("etcd", Some("etcd")),
                BlockDevice::local_disk(10, None),
            ],
            server_group_id: Some("g".into()),
            scheduler_hints: [("different_host".to_owned(), json!(["s0"]))]
                .into_iter()
                .collect(),
            ..machine()
        };
        assert_eq!(full.microversion(), SERVER_TAGS);
        let body = full.body().unwrap();
        assert!(body.get("imageRef").is_none());
        assert_eq!(body["user_data"], "I2Nsb3VkLWNvbmZpZwo=");
        assert_eq!(body["tags"], json!(["t"]));
        assert_eq!(body["config_drive"], true);
        assert_eq!(
            body["block_device_mapping_v2"],
            json!([
                {"source_type": "volume", "destination_type": "volume", "uuid": "root",
                    "boot_index": 0, "delete_on_termination": false},
                {"source_type": "volume", "destination_type": "volume", "uuid": "etcd",
                    "boot_index": -1, "delete_on_termination": true, "tag": "etcd"},
                {"source_type": "blank", "destination_type": "local", "boot_index": -1,
                    "volume_size": 10, "delete_on_termination": true}
            ])
        );
        assert_eq!(
            body[SCHEDULER_HINTS_KEY],
            json!({"group": "g", "different_host": ["s0"]})
        );

        // The image mapped to the local disk beside a data volume: Nova wants the
        // mapping and imageRef both.
        let image_beside = ServerCreate {
            image_id: Some("img".into()),
            block_devices: vec![
                BlockDevice::boot_image_local("img"),
                BlockDevice::data_volume("data", Some("data")),
            ],
            ..machine()
        };
        let beside = image_beside.body().unwrap();
        assert_eq!(beside["imageRef"], "img");
        assert_eq!(beside["block_device_mapping_v2"][0]["source_type"], "image");
        assert_eq!(
            beside["block_device_mapping_v2"][0]["destination_type"],
            "local"
        );
        assert_eq!(beside["block_device_mapping_v2"][0]["boot_index"], 0);
        let request = server_envelope(body);
        assert_eq!(request[SCHEDULER_HINTS_KEY]["group"], "g");
        assert!(request["server"].get(SCHEDULER_HINTS_KEY).is_none());
        assert_eq!(request["server"]["name"], "m");
        assert!(server_envelope(json!({"name": "x"}))
            .get(SCHEDULER_HINTS_KEY)
            .is_none());

        let mut typed = machine();
        typed.block_devices = vec![BlockDevice {
            volume_type: Some("ssd".into()),
            ..BlockDevice::boot_image_to_volume("i", 20)
        }];
        assert_eq!(typed.microversion(), DEVICE_VOLUME_TYPE);
        assert!(typed.body().unwrap().get("imageRef").is_none());
    }

    /// Whether `body` has a value at `path`; a number indexes an array.
    fn has(body: &Value, path: &[&str]) -> bool {
        let mut at = body;
        for key in path {
            let next = match key.parse::<usize>() {
                Ok(i) => at.get(i),
                Err(_) => at.get(*key),
            };
            match next {
                Some(v) => at = v,
                None => return false,
            }
        }
        true
    }

    /// One optional field: the empty value a pack renders (`''`, an empty
    /// list or map) and a set one, and where the set one shows in the body.
    type FieldCase = (
        &'static str,
        &'static [&'static str],
        fn(&mut ServerCreate),
        fn(&mut ServerCreate),
    );

    #[test]
    fn empty_optional_fields_stay_out_of_the_server_body() {
        let cases: [FieldCase; 9] = [
            (
                "key_name",
                &["key_name"],
                |s| s.key_name = Some(String::new()),
                |s| s.key_name = Some("ops".into()),
            ),
            (
                "availability_zone",
                &["availability_zone"],
                |s| s.availability_zone = Some(String::new()),
                |s| s.availability_zone = Some("az1".into()),
            ),
            (
                "server_group_id",
                &[SCHEDULER_HINTS_KEY, "group"],
                |s| s.server_group_id = Some(String::new()),
                |s| s.server_group_id = Some("g".into()),
            ),
            (
                "user_data",
                &["user_data"],
                |s| s.user_data = Some(Vec::new().into()),
                |s| s.user_data = Some(b"#cloud-config\n".to_vec().into()),
            ),
            (
                "tags",
                &["tags"],
                |s| s.tags = vec![String::new()],
                |s| s.tags = vec!["t".into()],
            ),
            (
                "metadata",
                &["metadata"],
                |s| s.metadata = BTreeMap::new(),
                |s| s.metadata = [("k".to_owned(), String::new())].into(),
            ),
            (
                "imageRef beside a boot volume",
                &["imageRef"],
                |s| {
                    s.image_id = Some(String::new());
                    s.block_devices = vec![BlockDevice::boot_volume("root", false)];
                },
                |s| s.image_id = Some("i".into()),
            ),
            (
                "block device tag",
                &["block_device_mapping_v2", "0", "tag"],
                |s| s.block_devices = vec![BlockDevice::data_volume("v", Some(""))],
                |s| s.block_devices = vec![BlockDevice::data_volume("v", Some("etcd"))],
            ),
            (
                "block device volume_type",
                &["block_device_mapping_v2", "0", "volume_type"],
                |s| {
                    s.block_devices = vec![BlockDevice {
                        volume_type: Some(String::new()),
                        ..BlockDevice::boot_image_to_volume("i", 20)
                    }]
                },
                |s| {
                    s.block_devices = vec![BlockDevice {
                        volume_type: Some("ssd".into()),
                        ..BlockDevice::boot_image_to_volume("i", 20)
                    }]
                },
            ),
        ];
        for (field, path, empty, set) in cases {
            let mut unset = machine();
            empty(&mut unset);
            let body = unset.body().unwrap();
            assert!(!has(&body, path), "{field} empty: {body}");
            // An empty value never asks for a newer microversion either.
            assert_eq!(unset.microversion(), BASE, "{field} empty");
            let mut given = machine();
            set(&mut given);
            let body = given.body().unwrap();
            assert!(has(&body, path), "{field} set: {body}");
        }
        // A metadata value may be empty (Nova takes it); only an empty map
        // stays out.
        let mut meta = machine();
        meta.metadata = [("k".to_owned(), String::new())].into();
        assert_eq!(meta.body().unwrap()["metadata"], json!({"k": ""}));
        // An empty image is no image: without a boot device there is
        // nothing to boot.
        let mut no_image = machine();
        no_image.image_id = Some(String::new());
        assert!(matches!(no_image.body(), Err(OsError::Invalid { .. })));
    }

    #[test]
    fn server_create_refuses_what_nova_would() {
        let nothing = ServerCreate {
            image_id: None,
            ..machine()
        };
        assert!(matches!(nothing.body(), Err(OsError::Invalid { .. })));
        let no_port = ServerCreate {
            port_ids: vec![],
            ..machine()
        };
        assert!(matches!(no_port.body(), Err(OsError::Invalid { .. })));
        let big = ServerCreate {
            user_data: Some(vec![b'x'; MAX_USER_DATA].into()),
            ..machine()
        };
        assert!(matches!(big.body(), Err(OsError::Invalid { .. })));
        let fits = ServerCreate {
            user_data: Some(vec![b'x'; MAX_USER_DATA / 4 * 3].into()),
            ..machine()
        };
        assert!(fits.body().is_ok());
    }

    #[test]
    fn encodes_base64() {
        for (raw, enc) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes()), enc);
        }
        assert_eq!(base64(&[0xff, 0xfe, 0xfd]), "//79");
    }

    #[test]
    fn scheduler_hints_sit_beside_the_server() {
        let e = server_envelope(json!({"name": "m", SCHEDULER_HINTS_KEY: {"group": "g"}}));
        assert_eq!(
            e,
            json!({"server": {"name": "m"}, SCHEDULER_HINTS_KEY: {"group": "g"}})
        );
        let e = server_envelope(json!({"name": "m", SCHEDULER_HINTS_KEY: {}}));
        assert_eq!(e, json!({"server": {"name": "m"}}));
    }

    #[test]
    fn sends_both_microversion_headers() {
        let h = microversion_headers("2.64");
        assert!(h.contains(&("OpenStack-API-Version", "compute 2.64".to_owned())));
        assert!(h.contains(&("X-OpenStack-Nova-API-Version", "2.64".to_owned())));
    }
}
