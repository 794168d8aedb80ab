//! One entry of an openstacksdk-style `clouds.yaml`, as CAPO's identityRef
//! Secret holds it, reduced to what a Keystone v3 session needs. An entry
//! without `auth_type` authenticates the way its `auth` fields say, as CAPO
//! reads it (see [`CloudConfig::from_clouds_yaml`]).
//!
//! Passwords and application-credential secrets are held as [`SecretString`] from
//! the moment they are read: `Debug` prints them redacted, and the only reader is the
//! Keystone request body.

use std::collections::BTreeMap;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;

use crate::compute::{Microversion, BASE, MICROVERSION_2_1};
use crate::error::OsError;

/// How to authenticate. `Debug` shows who, never the password or secret.
#[derive(Clone, Debug)]
pub enum AuthMethod {
    /// User and password, scoped to a project.
    Password {
        user: NameOrId,
        /// Domain of a user given by name.
        user_domain: Option<NameOrId>,
        password: SecretString,
        project: Option<NameOrId>,
        /// Domain of a project given by name.
        project_domain: Option<NameOrId>,
    },
    /// An application credential; its scope is fixed when it was created.
    ApplicationCredential {
        credential: NameOrId,
        /// Owner, needed when the credential is given by name.
        user: Option<NameOrId>,
        user_domain: Option<NameOrId>,
        secret: SecretString,
    },
}

/// Keystone accepts most references by either.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameOrId {
    Name(String),
    Id(String),
}

/// The settings of one cloud.
#[derive(Clone, Debug)]
pub struct CloudConfig {
    /// Keystone v3 root, always ending in `/v3`.
    pub auth_url: String,
    pub auth: AuthMethod,
    pub region: Option<String>,
    /// `public`, `internal` or `admin`.
    pub interface: String,
    /// `verify: false` turns certificate checks off (test clouds only).
    pub verify: bool,
    /// Service type (`network`, `load-balancer`...) to a URL that replaces
    /// the catalog's, from `<service>_endpoint_override` keys.
    pub endpoint_overrides: BTreeMap<String, String>,
    /// The highest Nova microversion to send, from `compute_default_microversion`
    /// (openstacksdk's key) or a `compute_api_version` with a microversion
    /// (`"2.63"`, as the OpenStack client reads it). Clouds whose Nova must not
    /// see newer bodies (Magnum's management cloud pins 2.63) set it.
    pub compute_max_microversion: Option<Microversion>,
    /// How long one request may wait for its answer, from openstacksdk's
    /// `api_timeout` (seconds); the process default when unset.
    pub api_timeout: Option<std::time::Duration>,
}

#[derive(Deserialize)]
struct CloudsFile {
    #[serde(default)]
    clouds: BTreeMap<String, RawCloud>,
}

#[derive(Deserialize)]
struct RawCloud {
    #[serde(default)]
    auth: RawAuth,
    #[serde(default)]
    auth_type: Option<String>,
    #[serde(default)]
    region_name: Option<String>,
    #[serde(default)]
    interface: Option<String>,
    #[serde(default)]
    endpoint_type: Option<String>,
    #[serde(default)]
    verify: Option<bool>,
    /// Everything else, for the `<service>_endpoint_override` keys.
    #[serde(flatten)]
    rest: BTreeMap<String, serde_json::Value>,
}

#[derive(Default, Deserialize)]
struct RawAuth {
    auth_url: Option<String>,
    username: Option<String>,
    user_id: Option<String>,
    password: Option<SecretString>,
    user_domain_name: Option<String>,
    user_domain_id: Option<String>,
    project_name: Option<String>,
    project_id: Option<String>,
    // Older spellings of the project keys.
    tenant_name: Option<String>,
    tenant_id: Option<String>,
    project_domain_name: Option<String>,
    project_domain_id: Option<String>,
    /// Default for both user and project domain, as openstacksdk treats it.
    domain_name: Option<String>,
    domain_id: Option<String>,
    application_credential_id: Option<String>,
    application_credential_name: Option<String>,
    application_credential_secret: Option<SecretString>,
    /// Only read to recognise (and refuse) token auth.
    token: Option<SecretString>,
    /// Domain ID of a user or project given by name when no other domain
    /// key names one (gophercloud's `setDomainIfNeeded`, osc-lib's
    /// `default_domain`).
    default_domain: Option<String>,
}

/// The methods a cloud entry may name or imply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Method {
    Password,
    ApplicationCredential,
}

/// Whether the secret is there and not empty.
fn filled(secret: &Option<SecretString>) -> bool {
    secret
        .as_ref()
        .is_some_and(|s| !s.expose_secret().is_empty())
}

fn filled_str(value: &Option<String>) -> bool {
    value.as_deref().is_some_and(|s| !s.is_empty())
}

/// The auth method of entry `cloud`.
///
/// An `auth_type` is taken as keystoneauth's plugin loader takes it
/// (openstacksdk `openstack/config/loader.py`, `_get_auth_loader`):
/// `password`/`v3password` and `v3applicationcredential` (also spelled
/// `applicationcredential`) are served; `token`/`v3token` and every other
/// plugin are refused by name, an empty one counts as absent.
///
/// Without one, the method follows from the `auth` fields, as CAPO's
/// gophercloud decides it for the same Secret: gophercloud/utils
/// `openstack/clientconfig/requests.go` (`v3auth`: a token means token
/// auth, whatever else is given) and gophercloud `auth_options.go`
/// (`ToTokenV3CreateMap`: a password means password auth, else an
/// application credential by ID, else by name; newer gophercloud,
/// `openstack/identity/v3/tokens/requests.go` `FromAuthOptions`, infers
/// application credential auth from its secret). So: a token is refused, a
/// password means password auth, any `application_credential_*` field means
/// application credential auth (Magnum's driver writes no `auth_type`), and
/// anything else is password auth, which then names what is missing.
fn auth_method(cloud: &str, auth_type: Option<&str>, a: &RawAuth) -> Result<Method, OsError> {
    let token_refused = |how: &str| {
        OsError::Config(format!(
            "cloud {cloud:?}: {how} asks for token auth, which is not supported: a token \
             expires and cannot be renewed; use an application credential \
             (application_credential_id and application_credential_secret) or a password"
        ))
    };
    match auth_type.map(str::trim).filter(|t| !t.is_empty()) {
        Some("password" | "v3password") => Ok(Method::Password),
        Some("v3applicationcredential" | "applicationcredential") => {
            Ok(Method::ApplicationCredential)
        }
        Some(t @ ("token" | "v3token")) => Err(token_refused(&format!("auth_type {t:?}"))),
        Some(other) => Err(OsError::Config(format!(
            "cloud {cloud:?}: auth_type {other:?} is not supported \
             (v3applicationcredential, v3password, password)"
        ))),
        None if filled(&a.token) => Err(token_refused("auth.token")),
        None if filled(&a.password) => Ok(Method::Password),
        None if filled_str(&a.application_credential_id)
            || filled_str(&a.application_credential_name)
            || filled(&a.application_credential_secret) =>
        {
            Ok(Method::ApplicationCredential)
        }
        None => Ok(Method::Password),
    }
}

fn pick(id: Option<String>, name: Option<String>) -> Option<NameOrId> {
    match (id.filter(|s| !s.is_empty()), name.filter(|s| !s.is_empty())) {
        (Some(id), _) => Some(NameOrId::Id(id)),
        (None, Some(name)) => Some(NameOrId::Name(name)),
        (None, None) => None,
    }
}

impl CloudConfig {
    /// Reads entry `cloud` of `clouds.yaml`; `region` (identityRef.region)
    /// replaces the entry's `region_name` when given. The auth method is the
    /// entry's `auth_type`, else the one its `auth` fields imply (an
    /// application credential for Magnum's Secret, which names none); the
    /// rules and their sources are on `auth_method`.
    pub fn from_clouds_yaml(
        yaml: &[u8],
        cloud: &str,
        region: Option<&str>,
    ) -> Result<Self, OsError> {
        let file: CloudsFile = parse(yaml)?;
        let raw = file.clouds.get(cloud).ok_or_else(|| {
            let known: Vec<&str> = file.clouds.keys().map(String::as_str).collect();
            OsError::Config(format!(
                "clouds.yaml has no cloud {cloud:?} (has: {})",
                known.join(", ")
            ))
        })?;
        let a = &raw.auth;
        let auth_url = a
            .auth_url
            .clone()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| OsError::Config(format!("cloud {cloud:?} has no auth.auth_url")))?;
        let auth_url = normalize_auth_url(&auth_url);
        let domain = pick(a.domain_id.clone(), a.domain_name.clone())
            .or_else(|| pick(a.default_domain.clone(), None));
        let user_domain =
            pick(a.user_domain_id.clone(), a.user_domain_name.clone()).or_else(|| domain.clone());
        // No auth_type: the method was read from the fields.
        let inferred = raw.auth_type.as_deref().is_none_or(|t| t.trim().is_empty());
        let auth = match auth_method(cloud, raw.auth_type.as_deref(), a)? {
            Method::Password => {
                let user = pick(a.user_id.clone(), a.username.clone());
                let password = a.password.clone().filter(|p| !p.expose_secret().is_empty());
                let (user, password) = match (user, password) {
                    (Some(u), Some(p)) => (u, p),
                    (None, None) if inferred => {
                        return Err(OsError::Config(format!(
                            "cloud {cloud:?}: auth holds no credential: give \
                             application_credential_id and application_credential_secret, \
                             or username and password"
                        )))
                    }
                    (None, _) => {
                        return Err(OsError::Config(format!(
                            "cloud {cloud:?}: password auth needs a username"
                        )))
                    }
                    (Some(_), None) => {
                        return Err(OsError::Config(format!(
                            "cloud {cloud:?}: password auth needs a password"
                        )))
                    }
                };
                let project = pick(
                    a.project_id.clone().or(a.tenant_id.clone()),
                    a.project_name.clone().or(a.tenant_name.clone()),
                );
                let project_domain =
                    pick(a.project_domain_id.clone(), a.project_domain_name.clone())
                        .or_else(|| domain.clone());
                AuthMethod::Password {
                    user,
                    user_domain,
                    password,
                    project,
                    project_domain,
                }
            }
            Method::ApplicationCredential => {
                let credential = pick(
                    a.application_credential_id.clone(),
                    a.application_credential_name.clone(),
                )
                .ok_or_else(|| {
                    OsError::Config(format!(
                        "cloud {cloud:?}: application credential auth needs an id or a name"
                    ))
                })?;
                let secret = a
                    .application_credential_secret
                    .clone()
                    .filter(|s| !s.expose_secret().is_empty())
                    .ok_or_else(|| {
                        OsError::Config(format!(
                            "cloud {cloud:?}: application credential auth needs a secret"
                        ))
                    })?;
                let user = pick(a.user_id.clone(), a.username.clone());
                if matches!(credential, NameOrId::Name(_)) && user.is_none() {
                    return Err(OsError::Config(format!(
                        "cloud {cloud:?}: an application credential given by name needs its user"
                    )));
                }
                AuthMethod::ApplicationCredential {
                    credential,
                    user,
                    user_domain,
                    secret,
                }
            }
        };
        let interface = raw
            .interface
            .clone()
            .or_else(|| raw.endpoint_type.clone())
            .unwrap_or_else(|| "public".to_owned());
        let interface = interface.trim_end_matches("URL").to_owned();
        let endpoint_overrides = raw
            .rest
            .iter()
            .filter_map(|(k, v)| {
                let service = k.strip_suffix("_endpoint_override")?;
                Some((service.replace('_', "-"), v.as_str()?.to_owned()))
            })
            .collect();
        let compute_max_microversion = compute_cap(cloud, &raw.rest)?;
        let api_timeout = api_timeout(cloud, &raw.rest)?;
        Ok(Self {
            compute_max_microversion,
            api_timeout,
            auth_url,
            auth,
            region: region
                .map(str::to_owned)
                .or_else(|| raw.region_name.clone())
                .filter(|s| !s.is_empty()),
            interface,
            verify: raw.verify.unwrap_or(true),
            endpoint_overrides,
        })
    }
}

/// openstacksdk's `api_timeout`: seconds, a number or a numeric string, > 0.
fn api_timeout(
    cloud: &str,
    rest: &BTreeMap<String, serde_json::Value>,
) -> Result<Option<std::time::Duration>, OsError> {
    let Some(v) = rest.get("api_timeout").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let seconds = match v {
        serde_json::Value::Number(n) => n.as_f64(),
        serde_json::Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    };
    match seconds {
        Some(s) if s.is_finite() && s > 0.0 && s <= 3600.0 => {
            Ok(Some(std::time::Duration::from_secs_f64(s)))
        }
        _ => Err(OsError::Config(format!(
            "cloud {cloud:?}: api_timeout must be a number of seconds between 0 and 3600, not {v}"
        ))),
    }
}

/// The Nova microversion cap of one cloud entry. `compute_default_microversion`
/// always names a microversion; `compute_api_version` may also name the API
/// itself (`2`, `2.1`), which sets no cap. Unquoted numbers other than those
/// two are refused: YAML reads `2.60` as the number 2.6.
fn compute_cap(
    cloud: &str,
    rest: &BTreeMap<String, serde_json::Value>,
) -> Result<Option<Microversion>, OsError> {
    let (key, value) = match (
        rest.get("compute_default_microversion"),
        rest.get("compute_api_version"),
    ) {
        (Some(v), _) => ("compute_default_microversion", v),
        (None, Some(v)) => ("compute_api_version", v),
        (None, None) => return Ok(None),
    };
    let api_version = key == "compute_api_version";
    let text = match value {
        serde_json::Value::String(s) => s.trim().to_owned(),
        serde_json::Value::Number(n) if api_version && (n.as_u64() == Some(2) || n.as_f64() == Some(2.1)) => {
            return Ok(None)
        }
        serde_json::Value::Number(n) => {
            return Err(OsError::Config(format!(
                "cloud {cloud:?}: {key} {n} must be quoted (\"2.60\"): as a YAML number 2.60 reads as 2.6"
            )))
        }
        other => {
            return Err(OsError::Config(format!(
                "cloud {cloud:?}: {key} must be a microversion such as \"2.63\", not {other}"
            )))
        }
    };
    if api_version && (text == "2" || text == "2.1") {
        return Ok(None);
    }
    let Some(v) = Microversion::parse(&text).filter(|v| v.major == 2) else {
        return Err(OsError::Config(format!(
            "cloud {cloud:?}: {key} {text:?} is not a Nova microversion such as \"2.63\""
        )));
    };
    if v < BASE {
        return Err(OsError::Config(format!(
            "cloud {cloud:?}: {key} {v} is below {BASE}, the lowest Nova microversion used here"
        )));
    }
    debug_assert!(v > MICROVERSION_2_1);
    Ok(Some(v))
}

/// Parses clouds.yaml. The error names the problem and its line and
/// column, but quotes no source lines: they would carry passwords and
/// secrets into conditions and Events.
fn parse(yaml: &[u8]) -> Result<CloudsFile, OsError> {
    let options = serde_saphyr::options! { with_snippet: false };
    serde_saphyr::from_slice_with_options(yaml, options)
        .map_err(|e| OsError::Config(format!("clouds.yaml is not valid: {e}")))
}

/// clouds.yaml commonly gives the Keystone root with or without `/v3`.
fn normalize_auth_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    if trimmed.ends_with("/v3") {
        trimmed.to_owned()
    } else {
        format!("{trimmed}/v3")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    const YAML: &str = r#"
clouds:
  member:
    region_name: RegionOne
    interface: internal
    identity_api_version: 3
    auth_type: password
    auth:
      auth_url: https://keystone.example:5000
      username: alice
      password: s3cret
      project_name: demo
      user_domain_name: Default
      project_domain_id: default
    network_endpoint_override: http://127.0.0.1:9999
    load_balancer_endpoint_override: http://127.0.0.1:9998
  appcred:
    auth_type: v3applicationcredential
    verify: false
    auth:
      auth_url: https://keystone.example:5000/v3/
      application_credential_id: abc
      application_credential_secret: xyz
  ids:
    endpoint_type: publicURL
    auth:
      auth_url: https://k/v3
      user_id: u1
      password: p
      project_id: p1
      domain_name: Corp
  byname:
    auth_type: v3applicationcredential
    auth:
      auth_url: https://k
      application_credential_name: ci
      application_credential_secret: xyz
"#;

    #[test]
    fn password_entry_with_names_and_overrides() {
        let c = CloudConfig::from_clouds_yaml(YAML.as_bytes(), "member", None).unwrap();
        assert_eq!(c.auth_url, "https://keystone.example:5000/v3");
        assert_eq!(c.region.as_deref(), Some("RegionOne"));
        assert_eq!(c.interface, "internal");
        assert!(c.verify);
        match &c.auth {
            AuthMethod::Password {
                user,
                user_domain,
                password,
                project,
                project_domain,
            } => {
                assert_eq!(user, &NameOrId::Name("alice".into()));
                assert_eq!(user_domain, &Some(NameOrId::Name("Default".into())));
                assert_eq!(password.expose_secret(), "s3cret");
                assert_eq!(project, &Some(NameOrId::Name("demo".into())));
                assert_eq!(project_domain, &Some(NameOrId::Id("default".into())));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            c.endpoint_overrides
                .get("load-balancer")
                .map(String::as_str),
            Some("http://127.0.0.1:9998")
        );
        assert_eq!(
            c.endpoint_overrides.get("network").map(String::as_str),
            Some("http://127.0.0.1:9999")
        );
    }

    fn cap(extra: &str) -> Result<Option<Microversion>, OsError> {
        let yaml = format!(
            "clouds:\n  c:\n    auth: {{auth_url: https://k, username: u, password: p}}\n{extra}"
        );
        CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None)
            .map(|c| c.compute_max_microversion)
    }

    #[test]
    fn api_timeout_is_read_as_openstacksdk_writes_it() {
        let timeout = |extra: &str| {
            let yaml = format!(
                "clouds:\n  c:\n    auth: {{auth_url: https://k, username: u, password: p}}\n{extra}"
            );
            CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).map(|c| c.api_timeout)
        };
        assert_eq!(timeout("").unwrap(), None);
        assert_eq!(
            timeout("    api_timeout: 20\n").unwrap(),
            Some(std::time::Duration::from_secs(20))
        );
        assert_eq!(
            timeout("    api_timeout: '2.5'\n").unwrap(),
            Some(std::time::Duration::from_millis(2500))
        );
        for bad in ["0", "-3", "forever", "7200"] {
            let e = timeout(&format!("    api_timeout: {bad}\n")).unwrap_err();
            assert!(e.to_string().contains("api_timeout"), "{bad}: {e}");
        }
    }

    #[test]
    fn compute_microversion_cap_from_either_key() {
        assert_eq!(cap("").unwrap(), None);
        assert_eq!(
            cap("    compute_default_microversion: \"2.63\"\n").unwrap(),
            Some(Microversion::new(2, 63))
        );
        assert_eq!(
            cap("    compute_api_version: '2.60'\n").unwrap(),
            Some(Microversion::new(2, 60))
        );
        // openstacksdk's key wins over the client's.
        assert_eq!(
            cap("    compute_api_version: '2.70'\n    compute_default_microversion: '2.63'\n")
                .unwrap(),
            Some(Microversion::new(2, 63))
        );
        // The API itself, not a microversion.
        for api in ["2", "'2'", "2.1", "'2.1'"] {
            assert_eq!(
                cap(&format!("    compute_api_version: {api}\n")).unwrap(),
                None,
                "{api}"
            );
        }
    }

    #[test]
    fn compute_microversion_cap_refuses_what_it_cannot_honour() {
        for (extra, says) in [
            ("    compute_api_version: 2.60\n", "must be quoted"),
            ("    compute_default_microversion: '2.20'\n", "below 2.38"),
            ("    compute_default_microversion: '2.1'\n", "below 2.38"),
            (
                "    compute_default_microversion: latest\n",
                "not a Nova microversion",
            ),
            (
                "    compute_default_microversion: '3.0'\n",
                "not a Nova microversion",
            ),
        ] {
            let err = cap(extra).unwrap_err().to_string();
            assert!(err.contains(says), "{extra}: {err}");
        }
    }

    #[test]
    fn region_override_wins() {
        let c =
            CloudConfig::from_clouds_yaml(YAML.as_bytes(), "member", Some("RegionTwo")).unwrap();
        assert_eq!(c.region.as_deref(), Some("RegionTwo"));
    }

    #[test]
    fn application_credential_and_verify() {
        let c = CloudConfig::from_clouds_yaml(YAML.as_bytes(), "appcred", None).unwrap();
        assert_eq!(c.auth_url, "https://keystone.example:5000/v3");
        assert!(!c.verify);
        assert_eq!(c.interface, "public");
        assert_eq!(c.region, None);
        match &c.auth {
            AuthMethod::ApplicationCredential {
                credential,
                user,
                user_domain,
                secret,
            } => {
                assert_eq!(credential, &NameOrId::Id("abc".into()));
                assert_eq!((user, user_domain), (&None, &None));
                assert_eq!(secret.expose_secret(), "xyz");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ids_and_domain_default() {
        let c = CloudConfig::from_clouds_yaml(YAML.as_bytes(), "ids", None).unwrap();
        assert_eq!(c.interface, "public");
        match c.auth {
            AuthMethod::Password {
                user,
                user_domain,
                project,
                project_domain,
                ..
            } => {
                assert_eq!(user, NameOrId::Id("u1".into()));
                assert_eq!(project, Some(NameOrId::Id("p1".into())));
                assert_eq!(user_domain, Some(NameOrId::Name("Corp".into())));
                assert_eq!(project_domain, Some(NameOrId::Name("Corp".into())));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn rejects_bad_entries() {
        let missing = CloudConfig::from_clouds_yaml(YAML.as_bytes(), "nope", None).unwrap_err();
        assert!(missing.to_string().contains("member"), "{missing}");
        let by_name = CloudConfig::from_clouds_yaml(YAML.as_bytes(), "byname", None).unwrap_err();
        assert!(by_name.to_string().contains("needs its user"), "{by_name}");
        let odd = "clouds: {x: {auth_type: token, auth: {auth_url: u}}}";
        assert!(CloudConfig::from_clouds_yaml(odd.as_bytes(), "x", None).is_err());
        assert!(CloudConfig::from_clouds_yaml(b"clouds: [", "x", None).is_err());
        let no_url = "clouds: {x: {auth: {username: a, password: b}}}";
        assert!(CloudConfig::from_clouds_yaml(no_url.as_bytes(), "x", None).is_err());
    }

    #[test]
    fn syntax_errors_name_the_place_but_quote_no_secret() {
        let yaml = "clouds:\n  c:\n    auth:\n      auth_url: http://k\n      password: hunter2\n    verify: maybe\n";
        let err = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("clouds.yaml is not valid"), "{err}");
        assert!(err.contains("boolean"), "{err}");
        assert!(err.contains("line 6, column 13"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");

        let err = CloudConfig::from_clouds_yaml(b"clouds: [", "c", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1, column 9"), "{err}");
        let dup = "clouds:\n  c: {}\n  c: {}\n";
        let err = CloudConfig::from_clouds_yaml(dup.as_bytes(), "c", None)
            .unwrap_err()
            .to_string();
        assert!(err.contains("duplicate") && err.contains("line 3"), "{err}");
    }

    #[test]
    fn reads_yaml_scalars_as_openstacksdk_does() {
        // Numeric IDs stay strings; `no` is false, as PyYAML reads it.
        let yaml = "clouds: {c: {verify: no, identity_api_version: 3, \
                    auth: {auth_url: 'http://k', user_id: 1234, password: 0042, project_id: 5678}}}";
        let c = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        assert!(!c.verify);
        match c.auth {
            AuthMethod::Password {
                user,
                password,
                project,
                ..
            } => {
                assert_eq!(user, NameOrId::Id("1234".into()));
                assert_eq!(password.expose_secret(), "0042");
                assert_eq!(project, Some(NameOrId::Id("5678".into())));
            }
            other => panic!("{other:?}"),
        }
    }

    /// What an entry authenticates as, without the secrets.
    #[derive(Debug, PartialEq)]
    enum Who {
        Password {
            user: NameOrId,
            user_domain: Option<NameOrId>,
            project: Option<NameOrId>,
            project_domain: Option<NameOrId>,
        },
        ApplicationCredential {
            credential: NameOrId,
            user: Option<NameOrId>,
            user_domain: Option<NameOrId>,
        },
    }

    fn who(auth: &AuthMethod) -> Who {
        match auth.clone() {
            AuthMethod::Password {
                user,
                user_domain,
                password,
                project,
                project_domain,
            } => {
                assert_eq!(password.expose_secret(), "pw");
                Who::Password {
                    user,
                    user_domain,
                    project,
                    project_domain,
                }
            }
            AuthMethod::ApplicationCredential {
                credential,
                user,
                user_domain,
                secret,
            } => {
                assert_eq!(secret.expose_secret(), "sec");
                Who::ApplicationCredential {
                    credential,
                    user,
                    user_domain,
                }
            }
        }
    }

    fn id(s: &str) -> NameOrId {
        NameOrId::Id(s.into())
    }

    fn name(s: &str) -> NameOrId {
        NameOrId::Name(s.into())
    }

    fn app_cred(credential: NameOrId, user: Option<NameOrId>, domain: Option<NameOrId>) -> Who {
        Who::ApplicationCredential {
            credential,
            user,
            user_domain: domain,
        }
    }

    fn password(
        user: NameOrId,
        user_domain: Option<NameOrId>,
        project: Option<NameOrId>,
        project_domain: Option<NameOrId>,
    ) -> Who {
        Who::Password {
            user,
            user_domain,
            project,
            project_domain,
        }
    }

    /// Every entry shape gophercloud (CAPO) or openstacksdk accepts, with and
    /// without `auth_type`, and the method each one reads as. The entry is the
    /// body of cloud `c` (flow YAML); `verify` is what the entry says.
    #[test]
    fn auth_method_follows_auth_type_else_the_fields() {
        let url = "auth_url: 'https://k:5000/v3'";
        let cases: Vec<(&str, String, Who, bool)> = vec![
            (
                "application credential by ID, no auth_type (Magnum)",
                format!("{{region_name: R, endpoint_type: public, identity_api_version: 3, verify: true, auth: {{{url}, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "application credential by ID, v3applicationcredential",
                format!("{{auth_type: v3applicationcredential, auth: {{{url}, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "application credential, the applicationcredential spelling",
                format!("{{auth_type: applicationcredential, auth: {{{url}, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "application credential, an empty auth_type",
                format!("{{auth_type: '', auth: {{{url}, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "application credential by ID and name: the ID wins",
                format!("{{auth: {{{url}, application_credential_id: ac1, application_credential_name: ci, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "application credential by name with user_id, no auth_type",
                format!("{{auth: {{{url}, application_credential_name: ci, user_id: u1, application_credential_secret: sec}}}}"),
                app_cred(name("ci"), Some(id("u1")), None),
                true,
            ),
            (
                "application credential by name with username and user_domain_name",
                format!("{{auth: {{{url}, application_credential_name: ci, username: bob, user_domain_name: Corp, application_credential_secret: sec}}}}"),
                app_cred(name("ci"), Some(name("bob")), Some(name("Corp"))),
                true,
            ),
            (
                "application credential by name with username and user_domain_id",
                format!("{{auth_type: v3applicationcredential, auth: {{{url}, application_credential_name: ci, username: bob, user_domain_id: d1, application_credential_secret: sec}}}}"),
                app_cred(name("ci"), Some(name("bob")), Some(id("d1"))),
                true,
            ),
            (
                "application credential by name, the user's domain from domain_name",
                format!("{{auth: {{{url}, application_credential_name: ci, username: bob, domain_name: Corp, application_credential_secret: sec}}}}"),
                app_cred(name("ci"), Some(name("bob")), Some(name("Corp"))),
                true,
            ),
            (
                "application credential with verify: false and a cacert path",
                format!("{{verify: false, cacert: /etc/openstack/ca.pem, auth: {{{url}, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                false,
            ),
            (
                "application credential beside an empty password",
                format!("{{auth: {{{url}, password: '', application_credential_id: ac1, application_credential_secret: sec}}}}"),
                app_cred(id("ac1"), None, None),
                true,
            ),
            (
                "password, no auth_type, names and domains",
                format!("{{auth: {{{url}, username: alice, password: pw, user_domain_name: Default, project_name: demo, project_domain_name: Default}}}}"),
                password(name("alice"), Some(name("Default")), Some(name("demo")), Some(name("Default"))),
                true,
            ),
            (
                "password, auth_type password, IDs",
                format!("{{auth_type: password, auth: {{{url}, user_id: u1, password: pw, project_id: p1}}}}"),
                password(id("u1"), None, Some(id("p1")), None),
                true,
            ),
            (
                "password, v3password, domain IDs",
                format!("{{auth_type: v3password, auth: {{{url}, username: alice, password: pw, user_domain_id: default, project_name: demo, project_domain_id: d2}}}}"),
                password(name("alice"), Some(id("default")), Some(name("demo")), Some(id("d2"))),
                true,
            ),
            (
                "password, domain_id for both domains",
                format!("{{auth: {{{url}, username: alice, password: pw, project_name: demo, domain_id: d3}}}}"),
                password(name("alice"), Some(id("d3")), Some(name("demo")), Some(id("d3"))),
                true,
            ),
            (
                "password, default_domain for both domains",
                format!("{{auth: {{{url}, username: alice, password: pw, project_name: demo, default_domain: default}}}}"),
                password(name("alice"), Some(id("default")), Some(name("demo")), Some(id("default"))),
                true,
            ),
            (
                "password, the older tenant_name",
                format!("{{auth: {{{url}, username: alice, password: pw, tenant_name: demo}}}}"),
                password(name("alice"), None, Some(name("demo")), None),
                true,
            ),
            (
                "password, unscoped, verify: false",
                format!("{{verify: false, auth: {{{url}, username: alice, password: pw}}}}"),
                password(name("alice"), None, None, None),
                false,
            ),
            (
                "password and an application credential, no auth_type: the password wins",
                format!("{{auth: {{{url}, username: alice, password: pw, application_credential_id: ac1, application_credential_secret: sec}}}}"),
                password(name("alice"), None, None, None),
                true,
            ),
        ];
        for (shape, entry, want, verify) in cases {
            let yaml = format!("clouds: {{c: {entry}}}");
            let c = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None)
                .unwrap_or_else(|e| panic!("{shape}: {e}"));
            assert_eq!(who(&c.auth), want, "{shape}");
            assert_eq!(c.verify, verify, "{shape}");
            assert_eq!(c.auth_url, "https://k:5000/v3", "{shape}");
        }
    }

    /// The shapes that cannot authenticate, each refused with what is wrong.
    #[test]
    fn refuses_entries_that_cannot_authenticate() {
        let url = "auth_url: 'https://k:5000/v3'";
        for (shape, entry, says) in [
            (
                "a token without auth_type",
                format!("{{auth: {{{url}, token: t0k, project_id: p1}}}}"),
                "auth.token asks for token auth, which is not supported",
            ),
            (
                "a token beside a password",
                format!("{{auth: {{{url}, token: t0k, username: alice, password: pw}}}}"),
                "token auth",
            ),
            (
                "auth_type v3token",
                format!("{{auth_type: v3token, auth: {{{url}, token: t0k}}}}"),
                "auth_type \"v3token\" asks for token auth",
            ),
            (
                "auth_type token",
                format!("{{auth_type: token, auth: {{{url}, token: t0k}}}}"),
                "auth_type \"token\" asks for token auth",
            ),
            (
                "another plugin",
                format!("{{auth_type: v3oidcpassword, auth: {{{url}, username: a, password: b}}}}"),
                "auth_type \"v3oidcpassword\" is not supported",
            ),
            (
                "Keystone v2",
                format!("{{auth_type: v2password, auth: {{{url}, username: a, password: b}}}}"),
                "auth_type \"v2password\" is not supported",
            ),
            (
                "no credential at all",
                format!("{{auth: {{{url}, project_id: p1}}}}"),
                "auth holds no credential",
            ),
            (
                "an application credential secret alone",
                format!("{{auth: {{{url}, application_credential_secret: sec}}}}"),
                "application credential auth needs an id or a name",
            ),
            (
                "an application credential ID without its secret",
                format!("{{auth: {{{url}, application_credential_id: ac1}}}}"),
                "application credential auth needs a secret",
            ),
            (
                "an application credential by name without its user",
                format!("{{auth: {{{url}, application_credential_name: ci, application_credential_secret: sec}}}}"),
                "needs its user",
            ),
            (
                "a password without a user",
                format!("{{auth: {{{url}, password: pw}}}}"),
                "password auth needs a username",
            ),
            (
                "a user without a password",
                format!("{{auth_type: password, auth: {{{url}, username: alice}}}}"),
                "password auth needs a password",
            ),
            (
                "password auth named, nothing given",
                format!("{{auth_type: password, auth: {{{url}}}}}"),
                "password auth needs a username",
            ),
        ] {
            let yaml = format!("clouds: {{c: {entry}}}");
            let err = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None)
                .expect_err(shape)
                .to_string();
            assert!(err.contains(says), "{shape}: {err}");
            assert!(!err.contains("t0k") && !err.contains("sec\""), "{shape}: {err}");
        }
    }

    /// Magnum's identity Secret (tests/fixtures/magnum), its clouds.yaml as
    /// the driver writes it: cloud `default`, an application credential and
    /// no auth_type.
    #[test]
    fn magnum_identity_secret_reads_as_an_application_credential() {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Secret {
            string_data: BTreeMap<String, String>,
        }
        let secret: Secret = serde_saphyr::from_str(include_str!(
            "../../../tests/fixtures/magnum/secret.cloud-config.yaml"
        ))
        .unwrap();
        let clouds = &secret.string_data["clouds.yaml"];
        assert!(!clouds.contains("auth_type"), "{clouds}");
        let c = CloudConfig::from_clouds_yaml(clouds.as_bytes(), "default", None).unwrap();
        match &c.auth {
            AuthMethod::ApplicationCredential {
                credential,
                user,
                user_domain,
                secret,
            } => {
                assert_eq!(credential, &id("6f0c5e0e2f9a4d4c9d3b8a7e1c2b3a4d"));
                assert_eq!((user, user_domain), (&None, &None));
                assert!(secret.expose_secret().starts_with("kF3x9Qm2"));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.auth_url, "https://keystone.example.com:5000/v3");
        assert_eq!(c.region.as_deref(), Some("RegionOne"));
        assert_eq!(c.interface, "public");
        assert!(c.verify);
        assert_eq!(c.compute_max_microversion, None);
        assert!(!format!("{c:?}").contains("kF3x9Qm2"));
    }

    #[test]
    fn debug_shows_who_but_no_password() {
        let yaml =
            "clouds: {c: {region_name: RegionOne, auth: {auth_url: 'https://keystone.example', \
                    username: alice, password: 'pw-7f3a9c', project_name: demo}}}";
        let c = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        for shown in [format!("{c:?}"), format!("{c:#?}"), format!("{:?}", c.auth)] {
            assert!(!shown.contains("pw-7f3a9c"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            assert!(shown.contains("alice"), "{shown}");
            assert!(shown.contains("demo"), "{shown}");
        }
        assert!(format!("{c:?}").contains("https://keystone.example/v3"));
        assert!(format!("{c:?}").contains("RegionOne"));
    }

    #[test]
    fn debug_shows_no_application_credential_secret() {
        let yaml =
            "clouds: {c: {auth_type: v3applicationcredential, auth: {auth_url: 'https://k', \
                    application_credential_name: ci, username: bob, \
                    application_credential_secret: 'ac-secret-51d0'}}}";
        let c = CloudConfig::from_clouds_yaml(yaml.as_bytes(), "c", None).unwrap();
        for shown in [format!("{c:?}"), format!("{c:#?}")] {
            assert!(!shown.contains("ac-secret-51d0"), "{shown}");
            assert!(shown.contains("REDACTED"), "{shown}");
            assert!(shown.contains("ci") && shown.contains("bob"), "{shown}");
            assert!(shown.contains("https://k/v3"), "{shown}");
        }
    }
}
