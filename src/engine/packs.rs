//! [`PackEngine`]: serves every loaded pack P as three handlers, `P-generate-patches`,
//! `P-discover-variables` and `P-validate-topology`, plus the generic handlers of
//! [`EmptyEngine`] (`generate-patches`, ...), which patch nothing.
//!
//! CAPI needs handler names unique across all hooks of one extension, so the hook is
//! part of the name.

use std::path::Path;
use std::sync::Arc;

use super::cache::{CacheLimits, PatchCache};
use super::cloud_checks::{self, CloudPlan};
use super::fingerprint::{Fingerprint, GeneratePatchesWire};
use super::pack::{self, Pack, PackError};
use super::{discover, generate, validate, EmptyEngine, EngineHandlers, PatchAnswer, PatchEngine};
use crate::sdk::decode::{decode_generate_patches_raw, DecodeError, GeneratePatchesBody};
use crate::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, RawGeneratePatchesRequest, ValidateTopologyRequest,
};
use crate::sdk::{response_kind, CapiVersion, CommonResponse, Hook, ResponseStatus, API_VERSION};

/// The pack engine. Cheap to clone; packs are immutable once loaded.
#[derive(Debug, Clone)]
pub struct PackEngine {
    packs: Arc<Vec<Pack>>,
    cache: Option<Arc<PatchCache>>,
}

impl PackEngine {
    /// The packs compiled into the binary from `extensions/`.
    pub fn embedded() -> Result<PackEngine, PackError> {
        pack::load_embedded().map(PackEngine::new)
    }

    /// Every `*.yaml`/`*.yml` pack in `dir` (for `--extensions DIR`).
    pub fn from_dir(dir: impl AsRef<Path>) -> Result<PackEngine, PackError> {
        pack::load_dir(dir.as_ref()).map(PackEngine::new)
    }

    /// From `(file name, YAML)` pairs, e.g. for tests.
    pub fn from_sources(files: Vec<(String, String)>) -> Result<PackEngine, PackError> {
        pack::load_all(files).map(PackEngine::new)
    }

    fn new(mut packs: Vec<Pack>) -> PackEngine {
        packs.sort_by(|a, b| a.name.cmp(&b.name));
        PackEngine {
            packs: Arc::new(packs),
            cache: None,
        }
    }

    /// Keeps up to `entries` GeneratePatches answers (see [`PatchCache`]) within the
    /// default byte limits; 0 keeps none.
    pub fn with_patch_cache(self, entries: usize) -> PackEngine {
        self.with_patch_cache_limits(CacheLimits::entries(entries))
    }

    /// Keeps GeneratePatches answers within `limits`; 0 entries or bytes keeps none.
    pub fn with_patch_cache_limits(mut self, limits: CacheLimits) -> PackEngine {
        self.cache =
            (limits.entries > 0 && limits.bytes > 0).then(|| Arc::new(PatchCache::new(limits)));
        self
    }

    /// The answer cache, if any (its counters show in tests and benchmarks).
    pub fn patch_cache(&self) -> Option<&PatchCache> {
        self.cache.as_deref()
    }

    pub fn packs(&self) -> &[Pack] {
        &self.packs
    }

    /// The pack a handler name of `hook` stands for: `P-<hook suffix>`, or the bare pack
    /// name (what offline callers such as tests use). Handler names arrive lowercased
    /// from the URL; pack names are lowercase labels.
    fn pack(&self, hook: Hook, handler: &str) -> Option<&Pack> {
        let handler = handler.to_ascii_lowercase();
        let suffix = format!("-{}", hook.default_handler_name());
        let name = handler.strip_suffix(&suffix).unwrap_or(&handler);
        self.packs
            .iter()
            .find(|p| p.name == name)
            .or_else(|| self.packs.iter().find(|p| p.name == handler))
    }

    /// The pack served under a handler name of any topology hook, e.g. the
    /// `openstack-generate-patches` part of a ClusterClass's external reference.
    pub fn pack_for_handler(&self, handler: &str) -> Option<&Pack> {
        [
            Hook::GeneratePatches,
            Hook::DiscoverVariables,
            Hook::ValidateTopology,
        ]
        .into_iter()
        .find_map(|h| self.pack(h, handler))
    }

    fn unknown(&self, handler: &str) -> String {
        let names: Vec<&str> = self.packs.iter().map(|p| p.name.as_str()).collect();
        format!(
            "no pack serves handler {handler:?}; the packs served are: {}",
            names.join(", ")
        )
    }
}

impl PackEngine {
    /// Whether this engine keeps answers; if not, requests are never fingerprinted.
    pub fn keeps_answers(&self) -> bool {
        self.cache.is_some()
    }

    /// An answer already computed for a request with this content. `uids[i]` belongs
    /// to the item fingerprinted `fp.items[i]`.
    pub fn remembered_patches(
        &self,
        handler: &str,
        fp: &Fingerprint,
        uids: &[&str],
    ) -> Option<GeneratePatchesResponse> {
        let cache = self.cache.as_deref()?;
        if is_generic(Hook::GeneratePatches, handler) {
            return None;
        }
        let pack = self.pack(Hook::GeneratePatches, handler)?;
        let items = cache.get(&PatchCache::key(&pack.name, fp, uids)?, fp, uids)?;
        Some(GeneratePatchesResponse {
            items,
            ..GeneratePatchesResponse::success()
        })
    }

    /// GeneratePatches for a request whose fingerprint the caller already has, so it
    /// is not computed again; the answer is stored when the engine keeps answers.
    pub fn generate_patches_with(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
        fp: Option<Fingerprint>,
    ) -> GeneratePatchesResponse {
        self.generate_patches_from(handler, Request::Shared(req), fp, false)
    }

    /// [`Self::generate_patches_with`] for a request the caller gives away: its
    /// variables and templates are moved into the engine rather than copied, and only
    /// the items' uids, holders and own variables are left in it.
    pub fn generate_patches_consuming(
        &self,
        handler: &str,
        req: &mut GeneratePatchesRequest,
        fp: Option<Fingerprint>,
    ) -> GeneratePatchesResponse {
        self.generate_patches_from(handler, Request::Given(req), fp, false)
    }

    /// [`Self::generate_patches_with`] for a request whose templates and variable values
    /// are still raw JSON, as the server reads a body.
    pub fn generate_patches_raw(
        &self,
        handler: &str,
        req: &RawGeneratePatchesRequest<'_>,
        fp: Option<Fingerprint>,
    ) -> GeneratePatchesResponse {
        self.generate_patches_from(handler, Request::Raw(req), fp, false)
    }

    /// `looked_up`: the caller asked the cache for this fingerprint and missed.
    fn generate_patches_from(
        &self,
        handler: &str,
        mut req: Request<'_>,
        fp: Option<Fingerprint>,
        looked_up: bool,
    ) -> GeneratePatchesResponse {
        if is_generic(Hook::GeneratePatches, handler) {
            return GeneratePatchesResponse::success();
        }
        let mut resp = GeneratePatchesResponse::success();
        let result = match self.pack(Hook::GeneratePatches, handler) {
            Some(p) => {
                let cached = {
                    let uids = req.uids();
                    self.cache.as_deref().zip(fp).and_then(|(c, fp)| {
                        let key = PatchCache::key(&p.name, &fp, &uids)?;
                        // The caller that already missed is not counted twice.
                        let hit = if looked_up {
                            None
                        } else {
                            c.get(&key, &fp, &uids)
                        };
                        Some((c, key, fp, hit))
                    })
                };
                match cached {
                    Some((_, _, _, Some(items))) => Ok(items),
                    cached => {
                        let r = guarded(|| {
                            match &mut req {
                                Request::Shared(r) => generate::generate(p, r),
                                Request::Given(r) => generate::generate_consuming(p, r),
                                Request::Raw(r) => generate::generate_raw(p, r),
                            }
                            .map_err(|e| e.to_string())
                        });
                        if let (Ok(items), Some((c, key, fp, None))) = (&r, &cached) {
                            c.put(*key, fp, &req.uids(), items);
                        }
                        r
                    }
                }
            }
            None => Err(self.unknown(handler)),
        };
        match result {
            Ok(items) => resp.items = items,
            Err(message) => {
                resp.status = ResponseStatus::Failure;
                resp.message = message;
            }
        }
        resp
    }
}

/// A request lent to the engine, given to it to take apart, or still raw.
enum Request<'a> {
    Shared(&'a GeneratePatchesRequest),
    Given(&'a mut GeneratePatchesRequest),
    Raw(&'a RawGeneratePatchesRequest<'a>),
}

impl Request<'_> {
    fn uids(&self) -> Vec<&str> {
        match self {
            Request::Shared(r) => r.items.iter().map(|i| i.uid.as_str()).collect(),
            Request::Given(r) => r.items.iter().map(|i| i.uid.as_str()).collect(),
            Request::Raw(r) => r.items.iter().map(|i| i.uid.as_ref()).collect(),
        }
    }
}

impl PatchEngine for PackEngine {
    fn patch_cache_stats(&self) -> Option<(u64, u64)> {
        self.cache.as_deref().map(PatchCache::stats)
    }

    fn handlers(&self) -> EngineHandlers {
        let names = |hook: Hook| -> Vec<String> {
            std::iter::once(hook.default_handler_name())
                .chain(self.packs.iter().map(|p| handler_name(&p.name, hook)))
                .collect()
        };
        EngineHandlers {
            generate_patches: names(Hook::GeneratePatches),
            discover_variables: names(Hook::DiscoverVariables),
            validate_topology: names(Hook::ValidateTopology),
        }
    }

    fn generate_patches(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
    ) -> GeneratePatchesResponse {
        let fp = self
            .cache
            .is_some()
            .then(|| Fingerprint::of_request(req))
            .flatten();
        self.generate_patches_with(handler, req, fp)
    }

    fn answer_generate_patches(
        &self,
        handler: &str,
        body: &[u8],
    ) -> Result<PatchAnswer, DecodeError> {
        // An unchanged Cluster's request is answered from its fingerprint alone, read
        // off the body without building the objects. Without a cache the request is
        // decoded in one pass and never fingerprinted. Either way the engine gets the
        // same raw parts.
        let wire = self
            .keeps_answers()
            .then(|| GeneratePatchesWire::read(body))
            .flatten();
        let (fp, mut decoded) = match wire {
            None => (None, decode_generate_patches_raw(body)?),
            Some(wire) => {
                let fp = wire.fingerprint();
                let uids: Vec<&str> = wire.items.iter().map(|i| i.uid.as_ref()).collect();
                if let Some(response) = self.remembered_patches(handler, &fp, &uids) {
                    return Ok(PatchAnswer {
                        response,
                        detail: "answered from the patch cache".to_string(),
                        cluster: wire.cluster(),
                    });
                }
                // The parts are already found: build the request from them.
                let decoded = match wire.to_raw() {
                    Some(raw) => GeneratePatchesBody::Raw(raw),
                    None => decode_generate_patches_raw(body)?,
                };
                (Some(fp), decoded)
            }
        };
        let cluster = decoded.cluster();
        let looked_up = fp.is_some();
        let response = match &mut decoded {
            GeneratePatchesBody::Raw(r) => {
                self.generate_patches_from(handler, Request::Raw(r), fp, looked_up)
            }
            GeneratePatchesBody::Decoded(r) => {
                self.generate_patches_from(handler, Request::Given(r), fp, looked_up)
            }
        };
        Ok(PatchAnswer {
            detail: response.message.clone(),
            cluster,
            response,
        })
    }

    fn discover_variables(
        &self,
        handler: &str,
        req: &DiscoverVariablesRequest,
        capi: CapiVersion,
    ) -> DiscoverVariablesResponse {
        if is_generic(Hook::DiscoverVariables, handler) {
            return EmptyEngine.discover_variables(handler, req, capi);
        }
        let mut resp = DiscoverVariablesResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(Hook::DiscoverVariables),
            status: ResponseStatus::Success,
            message: String::new(),
            variables: vec![],
        };
        match self.pack(Hook::DiscoverVariables, handler) {
            Some(p) => resp.variables = discover::discover(p, capi),
            None => {
                resp.status = ResponseStatus::Failure;
                resp.message = self.unknown(handler);
            }
        }
        resp
    }

    fn validate_topology(&self, handler: &str, req: &ValidateTopologyRequest) -> CommonResponse {
        if is_generic(Hook::ValidateTopology, handler) {
            return EmptyEngine.validate_topology(handler, req);
        }
        let Some(p) = self.pack(Hook::ValidateTopology, handler) else {
            return CommonResponse::new(
                Hook::ValidateTopology,
                ResponseStatus::Failure,
                self.unknown(handler),
            );
        };
        let failures = match guarded(|| Ok(validate::validate(p, req))) {
            Ok(f) => f,
            Err(message) => {
                return CommonResponse::new(
                    Hook::ValidateTopology,
                    ResponseStatus::Failure,
                    message,
                )
            }
        };
        if failures.is_empty() {
            return CommonResponse::new(Hook::ValidateTopology, ResponseStatus::Success, "");
        }
        let message = format!(
            "pack {:?}: {} invalid variable value(s): {}",
            p.name,
            failures.len(),
            failures.join("; ")
        );
        CommonResponse::new(Hook::ValidateTopology, ResponseStatus::Failure, message)
    }

    fn cloud_plan(&self, handler: &str, req: &ValidateTopologyRequest) -> Option<CloudPlan> {
        if is_generic(Hook::ValidateTopology, handler) {
            return None;
        }
        let p = self.pack(Hook::ValidateTopology, handler)?;
        let checks = p.cloud_checks.as_ref()?;
        guarded(|| Ok(cloud_checks::plan(&p.name, checks, &p.variables, req)))
            .ok()
            .flatten()
    }

    fn creation_plan(
        &self,
        handler: &str,
        cluster: &super::clusterclass::Cluster,
    ) -> Option<cloud_checks::CreationPlan> {
        if is_generic(Hook::ValidateTopology, handler) {
            return None;
        }
        let p = self.pack(Hook::ValidateTopology, handler)?;
        let checks = p.cloud_checks.as_ref()?;
        guarded(|| {
            Ok(cloud_checks::creation_plan(
                &p.name,
                checks,
                &p.variables,
                cluster,
            ))
        })
        .ok()
        .flatten()
    }
}

/// The name pack `pack` is served under on `hook`, e.g. `openstack-generate-patches`.
pub fn handler_name(pack: &str, hook: Hook) -> String {
    format!("{pack}-{}", hook.default_handler_name())
}

fn is_generic(hook: Hook, handler: &str) -> bool {
    handler.eq_ignore_ascii_case(&hook.default_handler_name())
}

/// The engine must answer, never crash a server thread: a panic in a dependency
/// (schema or CEL evaluation, patch application) becomes a Failure.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("internal error while evaluating the pack".to_string()))
}
