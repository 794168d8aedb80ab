//! [`PackEngine`]: serves every loaded pack as a handler of the same name on the three
//! topology-mutation hooks.

use std::path::Path;
use std::sync::Arc;

use super::pack::{self, Pack, PackError};
use super::{discover, generate, validate, EngineHandlers, PatchEngine};
use crate::sdk::topology::{
    DiscoverVariablesRequest, DiscoverVariablesResponse, GeneratePatchesRequest,
    GeneratePatchesResponse, ValidateTopologyRequest,
};
use crate::sdk::{response_kind, CapiVersion, CommonResponse, Hook, ResponseStatus, API_VERSION};

/// The pack engine. Cheap to clone; packs are immutable once loaded.
#[derive(Debug, Clone)]
pub struct PackEngine {
    packs: Arc<Vec<Pack>>,
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
        }
    }

    pub fn packs(&self) -> &[Pack] {
        &self.packs
    }

    /// Handler names arrive lowercased from the URL; pack names are lowercase labels.
    fn pack(&self, handler: &str) -> Option<&Pack> {
        self.packs
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(handler))
    }

    fn unknown(&self, handler: &str) -> String {
        let names: Vec<&str> = self.packs.iter().map(|p| p.name.as_str()).collect();
        format!(
            "no pack named {handler:?}; this server serves: {}",
            names.join(", ")
        )
    }
}

impl PatchEngine for PackEngine {
    fn handlers(&self) -> EngineHandlers {
        let names: Vec<String> = self.packs.iter().map(|p| p.name.clone()).collect();
        EngineHandlers {
            generate_patches: names.clone(),
            discover_variables: names.clone(),
            validate_topology: names,
        }
    }

    fn generate_patches(
        &self,
        handler: &str,
        req: &GeneratePatchesRequest,
    ) -> GeneratePatchesResponse {
        let mut resp = GeneratePatchesResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(Hook::GeneratePatches),
            status: ResponseStatus::Success,
            message: String::new(),
            items: vec![],
        };
        let result = match self.pack(handler) {
            Some(p) => guarded(|| generate::generate(p, req).map_err(|e| e.to_string())),
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

    fn discover_variables(
        &self,
        handler: &str,
        _: &DiscoverVariablesRequest,
        capi: CapiVersion,
    ) -> DiscoverVariablesResponse {
        let mut resp = DiscoverVariablesResponse {
            api_version: API_VERSION.to_string(),
            kind: response_kind(Hook::DiscoverVariables),
            status: ResponseStatus::Success,
            message: String::new(),
            variables: vec![],
        };
        match self.pack(handler) {
            Some(p) => resp.variables = discover::discover(p, capi),
            None => {
                resp.status = ResponseStatus::Failure;
                resp.message = self.unknown(handler);
            }
        }
        resp
    }

    fn validate_topology(&self, handler: &str, req: &ValidateTopologyRequest) -> CommonResponse {
        let Some(p) = self.pack(handler) else {
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
}

/// The engine must answer, never crash a server thread: a panic in a dependency
/// (schema or CEL evaluation, patch application) becomes a Failure.
fn guarded<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
        .unwrap_or_else(|_| Err("internal error while evaluating the pack".to_string()))
}
